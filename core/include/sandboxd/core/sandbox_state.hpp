// Where a tracked sandbox is in its life, as one word every door, file and metric uses
// (issue 35 item 6): the registry's state, TrackedSandbox's, a view's, the one-shot registry
// file's "state" and the doors' documents all spell it through to_string / sandbox_state_from.
#pragma once

#include <optional>
#include <string_view>

namespace sandboxd::core {

enum class SandboxState {
  none,    // the registry only: an entry holding marks (a creation, a teardown), no sandbox
  active,  // handed to a conversation (or an anonymous caller)
  warm,    // released to the warm pool, still running
  paused,  // released, then frozen by the backend (SandboxPausing) after pause_after_seconds
};

// "none", "active", "warm", "paused".
std::string_view to_string(SandboxState state);
// The state a word names (exactly as to_string spells it), or nullopt.
std::optional<SandboxState> sandbox_state_from(std::string_view word);
// Warm or paused: released by its conversation, kept for the next one.
constexpr bool is_released(SandboxState state) {
  return state == SandboxState::warm || state == SandboxState::paused;
}

}  // namespace sandboxd::core
