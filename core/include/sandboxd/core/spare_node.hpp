// One spare node of a std::map keyed by sandbox id. A warm pair moves a sandbox active → warm →
// active; each move used to free one map's node (and its key's buffer: a conversation's id is
// 16 characters, one more than the short-string buffer) and allocate the other's. Keeping the
// node the last removal freed and reusing it for the next insertion makes those moves allocate
// nothing (issue 10). One spare suffices: releases and reclaims alternate in steady state.
//
// Not thread-safe: a member of Provider::Registry, under the registry mutex like its map.
#pragma once

#include <string>
#include <utility>

namespace sandboxd::core {

template <class Map>
class SpareNode {
 public:
  using iterator = typename Map::iterator;

  // Removes the entry at `it`, keeping its node (its value reset, so nothing it held lives on).
  void erase(Map& map, iterator it) {
    auto node = map.extract(it);
    node.mapped() = typename Map::mapped_type{};
    spare_ = std::move(node);
  }
  // Removes `key`'s entry if any; true when there was one.
  bool erase(Map& map, const std::string& key) {
    auto it = map.find(key);
    if (it == map.end()) return false;
    erase(map, it);
    return true;
  }

  // `map[key]`, building a missing entry in the spare node when there is one.
  typename Map::mapped_type& operator()(Map& map, const std::string& key) {
    auto at = map.lower_bound(key);
    if (at != map.end() && at->first == key) return at->second;
    if (spare_.empty()) return map.emplace_hint(at, key, typename Map::mapped_type{})->second;
    spare_.key() = key;  // reuses its buffer: ids are 16 characters (8 for anonymous ones)
    return map.insert(at, std::move(spare_))->second;
  }

 private:
  typename Map::node_type spare_;
};

}  // namespace sandboxd::core
