// libFuzzer target: engine answers as the local_docker plugin reads them (engine_answers.hpp):
// an inspect answer, a container listing, a create answer and a pull-progress line, each from
// the same bytes. Any body must read as absent, unpublished or a std::runtime_error.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine_answers.hpp"

namespace ld = sandboxd::local_docker;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  if (auto state = ld::parse_inspect_answer(body)) {
    if (state->host_port < 0 || state->host_port > 65535) __builtin_trap();
  }
  try {
    for (const ld::ContainerState& state : ld::parse_running_listing(body, "sbx-")) {
      if (state.name.rfind("sbx-", 0) != 0 || state.name.size() <= 4 || state.id.empty()) {
        __builtin_trap();  // the listing reader let through a container that is not ours
      }
    }
  } catch (const std::runtime_error&) {
  }
  (void)ld::created_container_id(body);
  (void)ld::parse_pull_progress_line(body);
  return 0;
}
