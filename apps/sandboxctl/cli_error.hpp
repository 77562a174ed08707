// sandboxctl's exit codes and the error that carries one. Every failure a user can act on is
// one sentence on stderr (and, with --json, one {"error": …} document on stdout).
#pragma once

#include <stdexcept>
#include <string>

namespace sandboxctl {

enum ExitCode : int {
  kOk = 0,
  kInternal = 1,         // a bug or an unexpected failure of this machine
  kUsage = 2,            // bad command line: unknown command or option, bad id, missing value
  kBadConfig = 3,        // config file, plugin or state directory unusable
  kBackendFailure = 4,   // the backend (engine, provisioner) failed or could not be reached
  kNotFound = 5,         // the sandbox id is not tracked by this state directory
  kOwnershipRefused = 6  // a peer's lease (or teardown) refused it, or the store cannot answer
};

// "usage", "config", ... as printed in --json error documents.
const char* exit_code_name(int code);

class CliError : public std::runtime_error {
 public:
  CliError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace sandboxctl
