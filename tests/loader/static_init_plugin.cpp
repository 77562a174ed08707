// A plugin whose static initialiser writes a file (the path in SANDBOXD_TEST_STATIC_INIT_MARKER):
// listing plugins must never run it (issue 21: `sandboxctl plugins` used to dlopen every module).
#include <cstdlib>
#include <fstream>

#include "sandboxd/sdk.hpp"

namespace marker {

struct WritesOnLoad {
  WritesOnLoad() {
    if (const char* path = std::getenv("SANDBOXD_TEST_STATIC_INIT_MARKER")) {
      std::ofstream(path) << "plugin code ran\n";
    }
  }
};
const WritesOnLoad writes_on_load;

class MarkerBackend : public sandboxd::SandboxBackend {
 public:
  explicit MarkerBackend(const sandboxd::PluginContext&) {}
  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override {
    return {.sandbox_id = request.sandbox_id, .sandbox_url = "http://127.0.0.1:1"};
  }
  void destroy(const sandboxd::SandboxInfo&) override {}
  bool is_alive(const sandboxd::SandboxInfo&) override { return true; }
  std::optional<sandboxd::SandboxInfo> discover(const std::string&) override { return {}; }
};
SANDBOXD_EXPORT_BACKEND(MarkerBackend, "writes a file when its library is loaded")

}  // namespace marker
