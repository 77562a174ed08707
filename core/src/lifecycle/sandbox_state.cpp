#include "sandboxd/core/sandbox_state.hpp"

#include <array>

namespace sandboxd::core {
namespace {

constexpr std::array<std::pair<SandboxState, std::string_view>, 4> kWords{{
    {SandboxState::none, "none"},
    {SandboxState::active, "active"},
    {SandboxState::warm, "warm"},
    {SandboxState::paused, "paused"},
}};

}  // namespace

std::string_view to_string(SandboxState state) {
  for (const auto& [known, word] : kWords) {
    if (known == state) return word;
  }
  return "unknown";  // not reached: every enumerator is in kWords
}

std::optional<SandboxState> sandbox_state_from(std::string_view word) {
  for (const auto& [state, known] : kWords) {
    if (known == word) return state;
  }
  return std::nullopt;
}

}  // namespace sandboxd::core
