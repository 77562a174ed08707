#include "sandboxd/core/relay_tokens.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {
namespace {

constexpr const char* kSecretFile = "relay-secret";
constexpr char kDomain[] = "sandboxd relay v2";  // its terminating NUL is part of the input

std::string base64url(const unsigned char* data, std::size_t size) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < size; i += 3) {
    const unsigned v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (size - i == 1) {
    const unsigned v = data[i] << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
  } else if (size - i == 2) {
    const unsigned v = (data[i] << 16) | (data[i + 1] << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
  }
  return out;
}

std::string read_secret(int dirfd, const std::filesystem::path& shown) {
  host_fs::UniqueFd file = host_fs::open_file(dirfd, kSecretFile, O_RDONLY, 0, shown);
  const struct stat st = host_fs::stat_of(file.get(), shown);
  if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid()) {
    throw std::runtime_error(shown.string() + " must be ours and readable by nobody else (mode " +
                             host_fs::octal_mode(st.st_mode) +
                             "); a relay secret others can "
                             "read lets them reach every sandbox");
  }
  const std::string secret = host_fs::read_fd(file.get(), 256, shown);
  if (secret.size() < kRelaySecretBytes) {
    throw std::runtime_error(shown.string() + " holds fewer than " +
                             std::to_string(kRelaySecretBytes) +
                             " bytes; delete it and a new secret is made (every relay token "
                             "changes)");
  }
  return secret;
}

}  // namespace

RelayTokens RelayTokens::from_state_dir(const std::filesystem::path& dir) {
  const std::filesystem::path shown = dir / kSecretFile;
  const host_fs::UniqueFd root = host_fs::open_trusted_dir(dir);
  try {
    return RelayTokens(read_secret(root.get(), shown));
  } catch (const std::filesystem::filesystem_error& e) {
    if (e.code() != std::errc::no_such_file_or_directory) throw;
  }
  unsigned char bytes[kRelaySecretBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    throw std::runtime_error("cannot make a relay secret: no randomness from OpenSSL");
  }
  // Made whole under another name, then linked into place: two hosts starting at once on one
  // state directory never read half a secret; the second finds the first one's.
  const std::string temporary = std::string(kSecretFile) + ".new." + std::to_string(::getpid());
  {
    host_fs::UniqueFd file(::openat(root.get(), temporary.c_str(),
                                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file) host_fs::throw_errno("cannot make", dir / temporary, errno);
    if (::write(file.get(), bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes) ||
        ::fsync(file.get()) != 0) {
      ::unlinkat(root.get(), temporary.c_str(), 0);
      host_fs::throw_errno("cannot write", dir / temporary, errno);
    }
  }
  const int linked = ::linkat(root.get(), temporary.c_str(), root.get(), kSecretFile, 0);
  const int link_error = errno;
  ::unlinkat(root.get(), temporary.c_str(), 0);
  if (linked != 0 && link_error != EEXIST) host_fs::throw_errno("cannot make", shown, link_error);
  const host_fs::UniqueFd sync(::openat(root.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (sync) ::fsync(sync.get());
  return RelayTokens(read_secret(root.get(), shown));
}

RelayTokens::RelayTokens(std::string secret) : secret_(std::move(secret)) {
  if (secret_.size() < kRelaySecretBytes) {
    throw std::invalid_argument("a relay secret needs at least " +
                                std::to_string(kRelaySecretBytes) + " bytes");
  }
}

std::string RelayTokens::token_for(const std::string& sandbox_id,
                                   const std::string& incarnation) const {
  // With the NULs: no id can forge a separator (ids hold no NUL).
  std::string input(kDomain, sizeof kDomain);
  input += sandbox_id;
  input += '\0';
  input += incarnation;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &length);
  return base64url(mac, length);
}

bool RelayTokens::verify(const std::string& sandbox_id, const std::string& incarnation,
                         std::string_view presented) const {
  const std::string expected = token_for(sandbox_id, incarnation);
  if (presented.size() != expected.size()) return false;  // the length is public: 43 chars
  return CRYPTO_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

std::string incarnation_of(const SandboxInfo& info) {
  if (info.container_id && !info.container_id->empty()) return info.container_id->substr(0, 12);
  if (info.created_at > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6f", info.created_at);
    return text;
  }
  return "";
}

}  // namespace sandboxd::core
