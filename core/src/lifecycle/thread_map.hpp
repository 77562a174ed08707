// Conversation → sandbox, with the way back. `release` and every removal must find the
// conversations that point at one sandbox; searching the whole map under the registry mutex
// made a warm pair cost 231 µs with 10,000 active conversations. Both directions
// change together here, so that question is a lookup.
//
// Not thread-safe: it is the conversation index of the SandboxRegistry and shares its lock (the
// registry mutex); nothing here blocks. Private to the core.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sandboxd/core/conversation.hpp"

namespace sandboxd::core {

// Hash lookups, not ordered ones: with 10,000 conversations an ordered lookup compared about
// fourteen key pairs (two strings each) on every one of a warm pair's lookups.
struct ThreadKeyHash {
  std::size_t operator()(const ThreadKey& key) const noexcept {
    const std::size_t user = std::hash<std::string_view>{}(key.user_id);
    const std::size_t thread = std::hash<std::string_view>{}(key.thread_id);
    return user ^ (thread + 0x9e3779b97f4a7c15ULL + (user << 6) + (user >> 2));
  }
};

class ThreadMap {
 public:
  using Map = std::unordered_map<ThreadKey, std::string, ThreadKeyHash>;
  using const_iterator = Map::const_iterator;
  using value_type = Map::value_type;
  using iterator = const_iterator;  // read-only: writes go through assign/erase

  ThreadMap() = default;
  // The way back points into by_key_'s nodes: a copy links its own; a move keeps the nodes.
  ThreadMap(const ThreadMap& other) : by_key_(other.by_key_) { relink(); }
  ThreadMap& operator=(const ThreadMap& other) {
    if (this != &other) {
      by_sandbox_.clear();
      by_key_ = other.by_key_;
      relink();
    }
    return *this;
  }
  ThreadMap(ThreadMap&&) noexcept = default;
  ThreadMap& operator=(ThreadMap&&) noexcept = default;

  // `map[key] = sandbox_id` (what the reference's dict assignment does), keeping both
  // directions in step.
  class Slot {
   public:
    Slot& operator=(std::string sandbox_id) {
      map_.assign(key_, std::move(sandbox_id));
      return *this;
    }

   private:
    friend class ThreadMap;
    Slot(ThreadMap& map, ThreadKey key) : map_(map), key_(std::move(key)) {}
    ThreadMap& map_;
    ThreadKey key_;
  };
  Slot operator[](const ThreadKey& key) { return Slot(*this, key); }

  void assign(const ThreadKey& key, std::string sandbox_id) {
    auto [it, inserted] = by_key_.try_emplace(key, std::move(sandbox_id));
    if (!inserted) {
      if (it->second == sandbox_id) return;
      unlink(*it);  // its link is keyed by the id about to change
      it->second = std::move(sandbox_id);
    }
    link(*it);
  }

  const_iterator find(const ThreadKey& key) const { return by_key_.find(key); }
  // In no particular order.
  const_iterator begin() const { return by_key_.begin(); }
  const_iterator end() const { return by_key_.end(); }
  bool empty() const { return by_key_.empty(); }
  std::size_t size() const { return by_key_.size(); }

  const_iterator erase(const_iterator it) {
    unlink(*it);
    return by_key_.erase(it);
  }
  std::size_t erase(const ThreadKey& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return 0;
    erase(it);
    return 1;
  }

  // The conversations mapped to `sandbox_id`, in key order; empty when none.
  std::vector<ThreadKey> keys_of(std::string_view sandbox_id) const {
    std::vector<ThreadKey> keys;
    auto [first, last] = by_sandbox_.equal_range(sandbox_id);
    for (auto link = first; link != last; ++link) keys.push_back(link->second->first);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  // Unmaps every conversation mapped to `sandbox_id`; returns the first of them in key order
  // (moved out of its node: a release runs this on every warm pair).
  std::optional<ThreadKey> erase_sandbox(std::string_view sandbox_id) {
    auto [first, last] = by_sandbox_.equal_range(sandbox_id);
    if (first == last) return std::nullopt;
    std::vector<const value_type*> mapped;
    for (auto link = first; link != last; ++link) mapped.push_back(link->second);
    by_sandbox_.erase(first, last);  // before the nodes go: the links' keys view into them
    const value_type* earliest = *std::min_element(
        mapped.begin(), mapped.end(),
        [](const value_type* a, const value_type* b) { return a->first < b->first; });
    std::optional<ThreadKey> first_key;
    for (const value_type* node : mapped) {
      auto handle = by_key_.extract(by_key_.find(node->first));
      if (node == earliest) first_key = std::move(handle.key());
    }
    return first_key;
  }

  // Equal when both hold the same mappings (an ordered map in tests reads best).
  bool operator==(const std::map<ThreadKey, std::string>& other) const {
    if (by_key_.size() != other.size()) return false;
    return std::all_of(other.begin(), other.end(), [&](const auto& mapping) {
      auto it = by_key_.find(mapping.first);
      return it != by_key_.end() && it->second == mapping.second;
    });
  }
  bool operator==(const ThreadMap& other) const { return by_key_ == other.by_key_; }

 private:
  void relink() {
    for (const value_type& node : by_key_) link(node);
  }
  void link(const value_type& node) { by_sandbox_.emplace(node.second, &node); }
  void unlink(const value_type& node) {
    auto [link, last] = by_sandbox_.equal_range(node.second);
    for (; link != last; ++link) {
      if (link->second == &node) {
        by_sandbox_.erase(link);
        return;
      }
    }
  }

  // The way back: one link per mapping, keyed by a view of the sandbox id held in its node in
  // by_key_ (an unordered map's nodes never move, rehashing included), pointing at that node.
  // A mapping so costs one small node and no copy of the id or the conversation's two strings.
  Map by_key_;
  std::unordered_multimap<std::string_view, const value_type*> by_sandbox_;
};

}  // namespace sandboxd::core
