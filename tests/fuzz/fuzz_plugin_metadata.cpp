// libFuzzer target: a plugin library's metadata as the loader reads it without loading the
// library (core/src/plugins/plugin_metadata.hpp): the same bytes as a whole file (ELF headers, section
// table, names, the metadata section; through a memfd) and as a metadata section alone. Any
// input must read as records, none, or a std::runtime_error: never a crash or a read outside.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "plugins/plugin_metadata.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const auto& record : sandboxd::core::parse_plugin_metadata(bytes)) {
    if (record.class_name.empty()) __builtin_trap();  // records without a class are dropped
  }
  const int fd = ::memfd_create("plugin", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size())) {
    try {
      (void)sandboxd::core::read_plugin_metadata("/proc/self/fd/" + std::to_string(fd));
    } catch (const std::runtime_error&) {
    }
  }
  ::close(fd);
  return 0;
}
