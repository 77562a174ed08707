// What a creation does when every replica slot is in use and nothing released can be evicted
// (DeerFlow's E2B provider speaks the same words).
#pragma once

#include <optional>
#include <string_view>

namespace sandboxd::core {

enum class OverflowPolicy {
  soft,    // create beyond `replicas` with a warning (DeerFlow's local provider; the default)
  wait,    // queue, in arrival order, up to acquire_timeout; then refuse
  reject,  // refuse at once
  burst,   // create up to burst_limit beyond `replicas`; then refuse
};

const char* to_string(OverflowPolicy policy);
// "wait", "reject" or "burst" (the config words); nullopt for anything else.
std::optional<OverflowPolicy> overflow_policy_from(std::string_view word);

}  // namespace sandboxd::core
