// sandboxctl's exit codes: one table from an error's kind (core/service_errors.hpp) to the
// code the process exits with. Every failure a user can act on is one sentence on stderr
// (and, with --json, one {"error": …} document on stdout).
#pragma once

#include "sandboxd/core/service_errors.hpp"

namespace sandboxctl {

enum ExitCode : int {
  kOk = 0,
  kInternal = 1,          // a bug or an unexpected failure of this machine
  kUsage = 2,             // bad command line: unknown command or option, bad id, missing value
  kBadConfig = 3,         // config file, plugin or state directory unusable
  kBackendFailure = 4,    // the backend (engine, provisioner) failed or could not be reached
  kNotFound = 5,          // the sandbox id is not tracked by this state directory
  kOwnershipRefused = 6,  // a peer's lease (or teardown) refused it, or the store cannot answer
  kCapacity = 7,          // a capacity ceiling refused it; try again later
  kUnsupported = 8,       // the backend does not offer it (snapshots on kubernetes)
};

// The one table: kind → exit code.
int exit_code(sandboxd::core::ErrorKind kind);

// A command's failure: the provider's typed errors and sandboxctl's own are one type.
using CliError = sandboxd::core::ServiceError;
using sandboxd::core::ErrorKind;

}  // namespace sandboxctl
