// libFuzzer target: what the local_docker plugin reads from engine answers and settings as
// text: timestamps, API versions, image references, engine addresses, memory sizes, the error
// sentences it classifies, and JSON bodies through the SDK's bounded parser.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "docker_support.hpp"
#include "sandboxd/json.hpp"

namespace ld = sandboxd::local_docker;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)ld::parse_docker_timestamp(text);
  (void)ld::parse_api_version(text);
  (void)ld::split_image_reference(text);
  (void)ld::is_valid_container_name(text);
  (void)ld::url_encode(text);
  (void)ld::is_port_conflict_message(text);
  (void)ld::is_name_conflict(409, text);
  (void)ld::is_missing_image(404, text);
  (void)ld::engine_failure_hint(text);
  try {
    (void)ld::parse_memory_bytes(text);
  } catch (const std::invalid_argument&) {
  }
  try {
    (void)ld::EngineEndpoint::parse(text);
  } catch (const std::invalid_argument&) {
  }
  rapidjson::Document doc;
  (void)sandboxd::parse_json(doc, text);
  return 0;
}
