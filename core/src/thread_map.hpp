// Conversation → sandbox, with the way back. `release` and every removal must find the
// conversations that point at one sandbox; searching the whole map under the registry mutex
// made a warm pair cost 231 µs with 10,000 active conversations (issue 10). Both directions
// change together here, so that question is a lookup.
//
// Not thread-safe: it is the conversation index of the SandboxRegistry and shares its lock (the
// registry mutex); nothing here blocks. Private to the core.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/core/conversation.hpp"

namespace sandboxd::core {

class ThreadMap {
 public:
  using Map = std::map<ThreadKey, std::string>;
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
      by_sandbox_.erase(BackLink{it});  // its order depends on the id about to change
      it->second = std::move(sandbox_id);
    }
    by_sandbox_.insert(BackLink{it});
  }

  const_iterator find(const ThreadKey& key) const { return by_key_.find(key); }
  const_iterator begin() const { return by_key_.begin(); }
  const_iterator end() const { return by_key_.end(); }
  bool empty() const { return by_key_.empty(); }
  std::size_t size() const { return by_key_.size(); }

  const_iterator erase(const_iterator it) {
    by_sandbox_.erase(BackLink{it});
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
    for (auto link = first; link != last; ++link) keys.push_back(link->node->first);
    return keys;
  }

  // Unmaps every conversation mapped to `sandbox_id`; returns the first of them in key order
  // (moved out of its node: a release runs this on every warm pair).
  std::optional<ThreadKey> erase_sandbox(std::string_view sandbox_id) {
    std::optional<ThreadKey> first_key;
    auto [link, last] = by_sandbox_.equal_range(sandbox_id);
    while (link != last) {
      const const_iterator node = link->node;
      link = by_sandbox_.erase(link);  // before its node goes: the order reads through it
      auto handle = by_key_.extract(node);
      if (!first_key) first_key = std::move(handle.key());
    }
    return first_key;
  }

  bool operator==(const Map& other) const { return by_key_ == other; }
  bool operator==(const ThreadMap& other) const { return by_key_ == other.by_key_; }

 private:
  void relink() {
    for (auto it = by_key_.begin(); it != by_key_.end(); ++it) by_sandbox_.insert(BackLink{it});
  }

  // The way back: one link per mapping, pointing at its node in by_key_ (std::map nodes never
  // move), ordered by (sandbox id, conversation). A mapping so costs one small node and no copy
  // of the id or the conversation's two strings.
  struct BackLink {
    const_iterator node;
  };
  struct BackOrder {
    using is_transparent = void;
    bool operator()(const BackLink& a, const BackLink& b) const {
      if (int order = a.node->second.compare(b.node->second); order != 0) return order < 0;
      return a.node->first < b.node->first;
    }
    bool operator()(const BackLink& a, std::string_view id) const { return a.node->second < id; }
    bool operator()(std::string_view id, const BackLink& b) const { return id < b.node->second; }
  };

  Map by_key_;
  std::set<BackLink, BackOrder> by_sandbox_;
};

}  // namespace sandboxd::core
