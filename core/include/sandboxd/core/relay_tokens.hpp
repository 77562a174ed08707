// Per-sandbox relay tokens (issue 33, DESIGN.md "Network isolation and the relay"): derived,
// never stored. A token is HMAC-SHA256(secret, "sandboxd relay v1\0" + sandbox id), base64url
// without padding; the secret is 32 random bytes kept in the state directory (`relay-secret`,
// mode 0600, made once), so a restarted host derives the same tokens and every one it handed
// out stays valid, while a token for one sandbox never opens another. Rotating the secret
// (deleting the file) invalidates every token. Tokens are compared in constant time and never
// logged.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

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

  std::string token_for(const std::string& sandbox_id) const;
  // Whether `presented` is the token of `sandbox_id`, in time independent of where they differ.
  bool verify(const std::string& sandbox_id, std::string_view presented) const;

 private:
  std::string secret_;
};

}  // namespace sandboxd::core
