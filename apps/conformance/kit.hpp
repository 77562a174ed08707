// sandboxd-backend-conformance: what one run of the kit knows (the plugin under test, loaded
// through the host's own loader, and a private state directory), and the second process the
// cross-process rules need.
//
// The rules (rules.cpp) are GoogleTest cases that share one Kit. A rule about what another
// process sees runs this program again (`--child VERB ID`): a fresh process loads the plugin
// anew, performs one verb and prints what it saw as one JSON line.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/backend.hpp"
#include "sandboxd/core/config.hpp"

namespace sandboxd::conformance {

// How the kit was asked to run; the child gets the same, so it loads the same plugin.
struct KitSettings {
  std::string plugin;       // --plugin: the library file ("" → found on the search path)
  std::string use;          // --use module:Class ("" → the config's sandbox.backend.use)
  std::string config_file;  // --config ("" → the backend section holds `use` alone)
  std::string state_dir;    // --state-dir ("" → a fresh directory, removed at the end)
  double ready_seconds = 60.0;
  double destroy_seconds = 30.0;

  // The arguments that reproduce these settings in a child (state_dir always given).
  std::vector<std::string> child_arguments() const;
};

// What a second process saw of one sandbox id.
struct SecondLook {
  bool ran = false;     // the child ran and answered
  std::string error;    // why not, or the exception its verb threw
  bool found = false;   // discover answered an info
  SandboxInfo info;     // that info
  bool alive = false;   // is_alive of that info
  bool listed = false;  // list_running held the id
};

class Kit {
 public:
  // Loads the plugin (throws a message naming the flag or key at fault).
  explicit Kit(KitSettings settings);
  ~Kit();
  Kit(const Kit&) = delete;
  Kit& operator=(const Kit&) = delete;

  SandboxBackend& backend() { return *backend_; }
  const KitSettings& settings() const { return settings_; }
  const std::filesystem::path& state_dir() const { return state_dir_; }

  // The request the core would send for (user, thread): its id and its composed mounts, the
  // conversation's directories made on disk.
  CreateRequest request_for(const std::string& user_id, const std::string& thread_id);

  // Another process: `discover(id)` then `is_alive` and `list_running`; or `destroy` of an info
  // that holds only the id and URL (stale: this process's handles mean nothing there).
  SecondLook look_from_another_process(const std::string& sandbox_id);
  SecondLook destroy_from_another_process(const SandboxInfo& info);

  // Sandboxes a rule made; each one left is destroyed when the kit ends.
  void remember(const SandboxInfo& info);
  void forget(const std::string& sandbox_id);

 private:
  SecondLook run_child(const std::vector<std::string>& verb_arguments);

  KitSettings settings_;
  std::filesystem::path state_dir_;
  bool own_state_dir_ = false;
  core::SandboxConfig config_;
  std::shared_ptr<SandboxBackend> backend_;
  std::map<std::string, SandboxInfo> made_;
};

// Loads the backend the settings name, with `state_dir` as the host's base directory.
std::shared_ptr<SandboxBackend> load_backend(const KitSettings& settings,
                                             const std::filesystem::path& state_dir,
                                             core::SandboxConfig* config_out = nullptr);

// The child's side of Kit::run_child: `verb` is "look" or "destroy"; prints one JSON line.
int child_main(const KitSettings& settings, const std::string& verb,
               const std::vector<std::string>& arguments);

// The daemons' signal set-up (serve, sandboxd-provisioner): SIGHUP, SIGINT and SIGTERM blocked
// on every thread, SIGPIPE ignored. The kit runs under it, as a backend does in production.
void take_the_daemons_signal_mask();

// Whether GET {url}/v1/sandbox answers 200 within `seconds`, with the info's headers.
bool answers_ready(const SandboxInfo& info, double seconds);
// Whether the URL stops answering (connection refused or not 200) within `seconds`.
bool stops_answering(const SandboxInfo& info, double seconds);

// The one Kit of this run (set by main before the rules run).
Kit& the_kit();
void set_the_kit(Kit* kit);

}  // namespace sandboxd::conformance
