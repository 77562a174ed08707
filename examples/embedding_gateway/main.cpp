// A minimal gateway turn: acquire the conversation's sandbox, use it, release it, shut down.
//   embedding_gateway CONFIG_FILE USER THREAD
#include <cstdio>
#include <exception>
#include <memory>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/provider.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CONFIG_FILE USER THREAD\n", argv[0]);
    return 2;
  }
  try {
    const auto config = sandboxd::core::load_config_file(argv[1]);
    auto provider = sandboxd::core::Provider::from_config(
        config, std::make_shared<sandboxd::core::StderrLogger>(sandboxd::LogLevel::warning));
    const std::string id = provider->acquire(std::string(argv[3]), std::string(argv[2]));
    const auto client = provider->get(id);  // in memory: safe on an event loop
    std::printf("sandbox_id %s\nsandbox_url %s\n", id.c_str(), client->base_url().c_str());
    std::fflush(stdout);
    provider->release(id);  // back to the warm pool
    std::printf("released; %zu warm\n", provider->counts().warm);
    provider->shutdown();  // destroys what this instance owns
    std::printf("shut down; %zu active, %zu warm\n", provider->counts().active,
                provider->counts().warm);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embedding_gateway: %s\n", e.what());
    return 1;
  }
}
