// The host-side handle for one sandbox's HTTP API, what `Provider::get` hands a gateway turn.
#pragma once

#include <memory>
#include <string>

namespace sandboxd::core {

// Implementations must allow close() from any thread; it is called once when the provider
// stops tracking the sandbox (release, destroy, forget, shutdown).
class SandboxClient {
 public:
  virtual ~SandboxClient() = default;
  virtual const std::string& id() const = 0;
  virtual const std::string& base_url() const = 0;
  virtual void close() = 0;
};

// The default client: the sandbox's id and URL. Gateways that speak the sandbox API wrap this
// (or supply their own factory through ProviderHooks::make_client).
class BasicSandboxClient : public SandboxClient {
 public:
  BasicSandboxClient(std::string id, std::string base_url)
      : id_(std::move(id)), base_url_(std::move(base_url)) {}
  const std::string& id() const override { return id_; }
  const std::string& base_url() const override { return base_url_; }
  void close() override {}

 private:
  const std::string id_;
  const std::string base_url_;
};

}  // namespace sandboxd::core
