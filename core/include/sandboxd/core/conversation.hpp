// A conversation: the (user, thread) pair one sandbox serves.
#pragma once

#include <compare>
#include <string>

namespace sandboxd::core {

// (user, thread): user first, as in the reference.
struct ThreadKey {
  std::string user_id;
  std::string thread_id;
  auto operator<=>(const ThreadKey&) const = default;
};

}  // namespace sandboxd::core
