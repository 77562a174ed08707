// Small plugins that exercise each loader path: a working backend and store, a factory that
// throws, and one that rejects its configuration.
#include <stdexcept>

#include "sandboxd/sdk.hpp"

namespace fixture {

class EchoBackend : public sandboxd::SandboxBackend {
 public:
  explicit EchoBackend(const sandboxd::PluginContext& context)
      : greeting_(context.options().get_string("greeting", "hello")) {}
  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override {
    return {.sandbox_id = request.sandbox_id, .sandbox_url = "http://127.0.0.1:1/" + greeting_};
  }
  void destroy(const sandboxd::SandboxInfo&) override {}
  bool is_alive(const sandboxd::SandboxInfo&) override { return true; }
  std::optional<sandboxd::SandboxInfo> discover(const std::string&) override { return {}; }

 private:
  std::string greeting_;
};
SANDBOXD_EXPORT_BACKEND(EchoBackend, "answers create with a fixed URL")

class ThrowingBackend : public EchoBackend {
 public:
  explicit ThrowingBackend(const sandboxd::PluginContext& context) : EchoBackend(context) {
    throw std::runtime_error("boom: the engine is on fire");
  }
};
SANDBOXD_EXPORT_BACKEND(ThrowingBackend, "its factory always throws")

class PickyBackend : public EchoBackend {
 public:
  explicit PickyBackend(const sandboxd::PluginContext& context) : EchoBackend(context) {
    const auto options = context.options();
    if (options.get_integer("size", 1) <= 0) options.reject("size", "must be > 0");
  }
};
SANDBOXD_EXPORT_BACKEND(PickyBackend, "rejects size <= 0")

class TinyStore : public sandboxd::OwnershipStore {
 public:
  explicit TinyStore(const sandboxd::PluginContext& context) : owner_(context.owner_id) {}
  const std::string& owner_id() const override { return owner_; }
  bool supports_cross_process() const override { return false; }
  double ttl_seconds() const override { return 1.0; }
  bool take(const std::string&) override { return true; }
  bool claim(const std::string&, bool) override { return true; }
  sandboxd::RenewOutcome renew(const std::string&) override {
    return sandboxd::RenewOutcome::lapsed;
  }
  void release(const std::string&) override {}
  std::optional<std::string> owner(const std::string&) override { return {}; }
  std::optional<sandboxd::LeaseRecord> inspect(const std::string&) override { return {}; }
  void close() override {}

 private:
  std::string owner_;
};
SANDBOXD_EXPORT_OWNERSHIP_STORE(TinyStore, "a store for loader tests")

}  // namespace fixture
