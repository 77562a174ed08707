// start_relay_in and parse_relay_listen (relay.hpp): what serve and sandboxd-provisioner share
// to run a relay whose URLs survive their restarts.
#include <fstream>
#include <stdexcept>

#include "sandboxd/core/relay.hpp"
#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {

void parse_relay_listen(const std::string& text, const std::string& where, RelayOptions& options) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw std::invalid_argument(where + ": expected HOST:PORT, got '" + text + "'");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) {
    throw std::invalid_argument(where + ": '" + text.substr(colon + 1) + "' is not a port");
  }
  options.host = host;
  options.port = port;
}

std::unique_ptr<Relay> start_relay_in(const std::filesystem::path& state_dir, RelayTargets targets,
                                      RelayOptions options, const std::shared_ptr<Logger>& logger,
                                      bool reuse_port) {
  int remembered = 0;
  if (reuse_port) {
    std::ifstream in(state_dir / "relay-port");
    if (in >> remembered && remembered > 0 && remembered <= 65535) {
      options.port = remembered;
    } else {
      remembered = 0;
    }
  }
  RelayTokens tokens = [&] {
    try {
      return RelayTokens::from_state_dir(state_dir);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("relay secret: ") + e.what());
    }
  }();
  auto relay = std::make_unique<Relay>(targets, tokens, options, logger);
  try {
    relay->start();
  } catch (const std::exception& e) {
    if (remembered == 0) throw;
    logger->warning(std::string("relay: ") + e.what() +
                    "; it takes another port, and sandbox URLs handed out before no longer work "
                    "(acquire again for a new one)");
    options.port = 0;
    relay = std::make_unique<Relay>(std::move(targets), tokens, options, logger);
    relay->start();
  }
  if (relay->port() != remembered) {
    try {
      const host_fs::UniqueFd dir = host_fs::open_trusted_dir(state_dir);
      host_fs::replace_file_at(dir.get(), "relay-port", std::to_string(relay->port()) + "\n", 0600,
                               state_dir / "relay-port");
    } catch (const std::exception& e) {
      logger->warning(std::string("relay: cannot remember its port: ") + e.what());
    }
  }
  return relay;
}

}  // namespace sandboxd::core
