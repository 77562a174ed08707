// Per-sandbox relay tokens (docs/network-isolation.md, "The relay"): derived, never stored. A
// token is HMAC-SHA256(secret, "sandboxd relay v2\0" + sandbox id + "\0" + incarnation),
// base64url without padding. The incarnation names the sandbox's instance (its container, see
// incarnation_of), so a token opens one instance only: destroying a sandbox revokes its token,
// and the next sandbox of the same conversation (same id) gets another. The secret is 32 random
// bytes kept in the state directory (`relay-secret`, mode 0600, made once), so a restarted host
// derives the same tokens and every one it handed out for a sandbox still running stays valid.
// Rotating the secret (deleting the file) invalidates every token. Tokens are compared in
// constant time and never logged.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "sandboxd/types.hpp"

namespace sandboxd::core {

// The header a client sends the token in; the relay removes it before forwarding.
inline constexpr const char* kRelayTokenHeader = "X-Sandboxd-Relay-Token";
inline constexpr std::size_t kRelaySecretBytes = 32;

class RelayTokens {
 public:
  // The secret of state directory `dir` (ours, already trusted): read, or made once (0600,
  // created without following a link, renamed into place durably). Throws std::runtime_error
  // naming the file when it cannot be read or made, or holds fewer than 32 bytes.
  static RelayTokens from_state_dir(const std::filesystem::path& dir);

  // A secret given directly (tests, a host that keeps its own); at least 32 bytes.
  explicit RelayTokens(std::string secret);

  // The token of one instance of `sandbox_id` (incarnation_of its info; "" for a backend that
  // names no instance, whose tokens then outlive a re-creation).
  std::string token_for(const std::string& sandbox_id, const std::string& incarnation) const;
  // Whether `presented` is that token, in time independent of where they differ.
  bool verify(const std::string& sandbox_id, const std::string& incarnation,
              std::string_view presented) const;

 private:
  std::string secret_;
};

// What names one instance of a sandbox for its token: the first 12 characters of its container
// id (the engine's random id, the same in its short and full forms), else its creation time,
// else "" (a backend reporting neither).
std::string incarnation_of(const SandboxInfo& info);

}  // namespace sandboxd::core
