// libFuzzer target: ids and host paths, where outside strings become file-system paths: id
// sanitising and hashing, host-path joining and normalising (POSIX and Windows), and the
// provisioner's extra-mount validation (traversal, outside the state root, duplicates).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "extra_mount_validation.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/host_path.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Split the input into up to four fields at NUL bytes: the fuzzer finds the separators.
  std::vector<std::string> fields(4);
  std::size_t field = 0;
  for (char c : text) {
    if (c == '\0' && field + 1 < fields.size()) {
      ++field;
    } else {
      fields[field] += c;
    }
  }
  try {
    (void)sandboxd::core::sanitize_external_id(fields[0]);
  } catch (const std::invalid_argument&) {
  }
  (void)sandboxd::core::deterministic_sandbox_id(fields[0], fields[1], 2);
  (void)sandboxd::join_host_path(fields[0], {fields[1], fields[2]});
  (void)sandboxd::normalize_host_path(fields[0]);
  (void)sandboxd::host_path_parent(fields[0]);
  std::vector<sandboxd::Mount> mounts = {{fields[0], fields[1], !fields[2].empty()},
                                         {fields[2], fields[3], false}};
  try {
    (void)sandboxd::provisioner::validated_extra_mounts(mounts, fields[1], fields[3],
                                                        {"/.deer-flow", "/.deer-flow/threads"});
  } catch (const std::exception&) {
  }
  return 0;
}
