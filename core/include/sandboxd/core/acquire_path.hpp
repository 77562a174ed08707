// How an acquisition obtained its sandbox: sandboxctl's `path`, serve's metrics, the lifecycle
// events and each tracked sandbox's last acquisition (the operator's page).
#pragma once

#include <optional>
#include <string_view>

namespace sandboxd::core {

// resumed: taken from the pool while paused, and thawed.
// claimed: a new conversation was given a pre-started slot instead of a create.
enum class AcquirePath { reused, reclaimed, resumed, discovered, created, claimed, restored };
const char* to_string(AcquirePath path);
// The path a word names (as to_string spells it), or nullopt.
std::optional<AcquirePath> acquire_path_from(std::string_view word);

}  // namespace sandboxd::core
