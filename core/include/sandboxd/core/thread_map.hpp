// Conversation → sandbox, with the way back. `release` and every removal must find the
// conversations that point at one sandbox; searching the whole map under the registry mutex
// made a warm pair cost 231 µs with 10,000 active conversations (issue 10). Both directions
// change together here, so that question is a lookup.
//
// Not thread-safe: it is a member of Provider::Registry and shares its lock (the registry
// mutex); nothing here blocks.
#pragma once

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace sandboxd::core {

// (user, thread): user first, as in the reference.
struct ThreadKey {
  std::string user_id;
  std::string thread_id;
  auto operator<=>(const ThreadKey&) const = default;
};

class ThreadMap {
 public:
  using Map = std::map<ThreadKey, std::string>;
  using const_iterator = Map::const_iterator;
  using value_type = Map::value_type;
  using iterator = const_iterator;  // read-only: writes go through assign/erase

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
    auto [it, inserted] = by_key_.try_emplace(key, sandbox_id);
    if (!inserted) {
      if (it->second == sandbox_id) return;
      unlink(it->second, key);
      it->second = sandbox_id;
    }
    by_sandbox_[std::move(sandbox_id)].insert(key);
  }

  const_iterator find(const ThreadKey& key) const { return by_key_.find(key); }
  const_iterator begin() const { return by_key_.begin(); }
  const_iterator end() const { return by_key_.end(); }
  bool empty() const { return by_key_.empty(); }
  std::size_t size() const { return by_key_.size(); }

  const_iterator erase(const_iterator it) {
    unlink(it->second, it->first);
    return by_key_.erase(it);
  }
  std::size_t erase(const ThreadKey& key) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) return 0;
    erase(it);
    return 1;
  }

  // The conversations mapped to `sandbox_id`, in key order; empty when none.
  std::vector<ThreadKey> keys_of(const std::string& sandbox_id) const {
    auto it = by_sandbox_.find(sandbox_id);
    if (it == by_sandbox_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }

  // Unmaps every conversation mapped to `sandbox_id`; returns them in key order.
  std::vector<ThreadKey> erase_sandbox(const std::string& sandbox_id) {
    auto it = by_sandbox_.find(sandbox_id);
    if (it == by_sandbox_.end()) return {};
    std::vector<ThreadKey> keys;
    keys.reserve(it->second.size());
    // Moved out of the nodes rather than copied: a release runs this on every warm pair.
    while (!it->second.empty()) {
      auto node = it->second.extract(it->second.begin());
      by_key_.erase(node.value());
      keys.push_back(std::move(node.value()));
    }
    by_sandbox_.erase(it);
    return keys;
  }

  bool operator==(const Map& other) const { return by_key_ == other; }
  bool operator==(const ThreadMap& other) const { return by_key_ == other.by_key_; }

 private:
  void unlink(const std::string& sandbox_id, const ThreadKey& key) {
    auto it = by_sandbox_.find(sandbox_id);
    if (it == by_sandbox_.end()) return;
    it->second.erase(key);
    if (it->second.empty()) by_sandbox_.erase(it);
  }

  Map by_key_;
  std::unordered_map<std::string, std::set<ThreadKey>> by_sandbox_;
};

}  // namespace sandboxd::core
