#include "plugin_metadata.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "sandboxd/host_fs.hpp"
#include "sandboxd/plugin.hpp"

namespace sandboxd::core {
namespace {

constexpr std::uint64_t kMaxSectionNames = 1 << 20;
constexpr std::uint64_t kMaxMetadataBytes = 1 << 20;

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + " is not a plugin library this host can read: " + why);
}

// Exactly `size` bytes at `offset`, or an error naming what was being read.
std::string read_at(int fd, std::uint64_t offset, std::uint64_t size, std::uint64_t file_size,
                    const std::string& path, const char* what) {
  if (offset > file_size || size > file_size - offset) {
    unreadable(path, std::string(what) + " lies beyond the end of the file");
  }
  std::string out(size, '\0');
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) unreadable(path, std::string("cannot read its ") + what);
    done += static_cast<std::uint64_t>(n);
  }
  return out;
}

}  // namespace

std::vector<PluginMetadata> parse_plugin_metadata(const std::string& section) {
  std::vector<PluginMetadata> records;
  std::size_t at = 0;
  while (at < section.size()) {
    const std::size_t end = section.find('\0', at);
    const std::string token =
        section.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? section.size() : end + 1;
    if (token.empty()) continue;  // padding between records
    if (token == kMetadataRecordStart) {
      records.emplace_back();
      continue;
    }
    if (records.empty()) continue;  // a field before any record: not ours
    const std::size_t equals = token.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = token.substr(0, equals);
    const std::string value = token.substr(equals + 1);
    PluginMetadata& record = records.back();
    if (key == "class") {
      record.class_name = value;
    } else if (key == "kind") {
      record.kind = value;
    } else if (key == "description") {
      record.description = value;
    } else if (key == "version") {
      record.version = value;
    } else if (key == "abi") {
      std::uint32_t abi = 0;
      bool digits = !value.empty() && value.size() <= 9;
      for (char c : value) {
        if (c < '0' || c > '9') digits = false;
      }
      if (digits) abi = static_cast<std::uint32_t>(std::stoul(value));
      record.abi_version = abi;
    }
  }
  std::erase_if(records, [](const PluginMetadata& r) { return r.class_name.empty(); });
  return records;
}

std::vector<PluginMetadata> read_plugin_metadata(const std::string& path) {
  const host_fs::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) unreadable(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) unreadable(path, "not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);

  const std::string header =
      read_at(fd.get(), 0, sizeof(Elf64_Ehdr), file_size, path, "ELF header");
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, header.data(), sizeof ehdr);
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0) unreadable(path, "not an ELF file");
  if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB) {
    unreadable(path, "not a 64-bit little-endian ELF file");
  }
  // e_shnum is 16 bits, so the table is at most 65,535 entries (4 MiB) by its type.
  if (ehdr.e_shentsize != sizeof(Elf64_Shdr) || ehdr.e_shnum == 0 ||
      ehdr.e_shstrndx >= ehdr.e_shnum) {
    unreadable(path, "its section table is missing or malformed");
  }
  const std::string table =
      read_at(fd.get(), ehdr.e_shoff, std::uint64_t{ehdr.e_shnum} * sizeof(Elf64_Shdr), file_size,
              path, "section table");
  const auto section = [&](std::size_t index) {
    Elf64_Shdr shdr;
    std::memcpy(&shdr, table.data() + index * sizeof(Elf64_Shdr), sizeof shdr);
    return shdr;
  };
  const Elf64_Shdr names = section(ehdr.e_shstrndx);
  if (names.sh_size > kMaxSectionNames) unreadable(path, "its section name table is too large");
  const std::string name_table =
      read_at(fd.get(), names.sh_offset, names.sh_size, file_size, path, "section name table");
  for (std::size_t i = 0; i < ehdr.e_shnum; ++i) {
    const Elf64_Shdr shdr = section(i);
    if (shdr.sh_name >= name_table.size()) continue;
    std::string_view name = std::string_view(name_table).substr(shdr.sh_name);
    name = name.substr(0, name.find('\0'));
    if (name != kMetadataSection) continue;
    if (shdr.sh_type == SHT_NOBITS) return {};
    if (shdr.sh_size > kMaxMetadataBytes) unreadable(path, "its metadata section is too large");
    return parse_plugin_metadata(
        read_at(fd.get(), shdr.sh_offset, shdr.sh_size, file_size, path, "metadata section"));
  }
  return {};
}

}  // namespace sandboxd::core
