// Sandbox ids (design §4.1, §4.2) and external-id sanitising (design §2.3).
#pragma once

#include <string>
#include <string_view>

#include "sandboxd/types.hpp"

namespace sandboxd::core {

// Lowercase hex SHA-256 of the bytes of `data` (64 characters).
std::string sha256_hex(std::string_view data);

// First 16 hex chars of SHA-256("mount-v{version}:{user}:{thread}"). The version is part of the
// input so a contract upgrade never reuses a container created under the old mount layout.
std::string deterministic_sandbox_id(std::string_view thread_id, std::string_view user_id,
                                     int version = kSandboxMountContractVersion);

// First 8 characters of the canonical text of a random UUID v4 (anonymous sandboxes).
std::string random_sandbox_id();

// Characters outside [A-Za-z0-9_-] become '-' (one per code point); if anything changed, append
// '-' and the first 16 hex chars of SHA-256 of the raw id so distinct raw ids stay distinct.
// Throws std::invalid_argument for an empty id.
std::string sanitize_external_id(std::string_view raw);

}  // namespace sandboxd::core
