#include "sandboxd/core/sandbox_id.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <charconv>
#include <stdexcept>
#include <unordered_map>

#include "sandboxd/core/random_hex.hpp"

namespace sandboxd::core {
namespace {

bool is_id_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

namespace {

// OpenSSL 3 looks the algorithm up in its provider table on every EVP_sha256() digest and
// allocates a context each time: half the instructions of a warm acquire+release.
// The algorithm is fetched once per process and each thread keeps one context to reuse.
const EVP_MD* sha256_algorithm() {
  static EVP_MD* const algorithm = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return algorithm;
}

struct DigestContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  thread_local DigestContext context;
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  const EVP_MD* algorithm = sha256_algorithm();
  if (!algorithm || !context.ctx || EVP_DigestInit_ex2(context.ctx, algorithm, nullptr) != 1 ||
      EVP_DigestUpdate(context.ctx, data.data(), data.size()) != 1 ||
      EVP_DigestFinal_ex(context.ctx, digest.data(), &length) != 1) {
    throw std::runtime_error("SHA-256 computation failed");
  }
  return to_hex(digest.data(), length);
}

std::string deterministic_sandbox_id(std::string_view thread_id, std::string_view user_id,
                                     int version) {
  // The same conversation asks for its id on every acquire; the digest is a pure function of
  // the input, so each thread remembers the ids it computed (at most 4,096, then it starts over).
  // The input is composed in a buffer each thread reuses, so a remembered id costs no allocation
  // but the returned copy.
  thread_local std::string input;
  thread_local std::unordered_map<std::string, std::string> computed;
  char number[16];
  const char* const digits_end = std::to_chars(number, number + sizeof number, version).ptr;
  input.assign("mount-v");
  input.append(number, static_cast<std::size_t>(digits_end - number));
  input.push_back(':');
  input.append(user_id);
  input.push_back(':');
  input.append(thread_id);
  if (auto it = computed.find(input); it != computed.end()) return it->second;
  if (computed.size() >= 4096) computed.clear();
  std::string id = sha256_hex(input).substr(0, 16);
  computed.emplace(input, id);
  return id;
}

std::string random_sandbox_id() {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw std::runtime_error("random sandbox id: RAND_bytes failed");
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);  // version 4
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  // The first 8 characters of the canonical text are the first 4 bytes, no hyphen yet.
  return to_hex(bytes.data(), bytes.size()).substr(0, 8);
}

std::string sanitize_external_id(std::string_view raw) {
  if (raw.empty()) throw std::invalid_argument("external id must be a non-empty string");
  std::string sanitized;
  sanitized.reserve(raw.size());
  bool changed = false;
  for (char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    if (is_id_char(c)) {
      sanitized.push_back(c);
    } else {
      changed = true;
      // UTF-8 continuation bytes belong to the code point already replaced.
      if ((byte & 0xc0) != 0x80) sanitized.push_back('-');
    }
  }
  if (!changed) return sanitized;
  return sanitized + "-" + sha256_hex(raw).substr(0, 16);
}

}  // namespace sandboxd::core
