// ThreadMap keeps "conversation → sandbox" and its way back in step through every change, so
// release and removal find a sandbox's conversations without a scan.
#include "lifecycle/thread_map.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

namespace sandboxd::core {
namespace {

TEST(ThreadMapTest, BothDirectionsFollowEveryChange) {
  ThreadMap map;
  map[{"alice", "t1"}] = "sb-a";
  map[{"alice", "t2"}] = "sb-a";
  map[{"bob", "t1"}] = "sb-b";
  EXPECT_EQ(map.keys_of("sb-a"), (std::vector<ThreadKey>{{"alice", "t1"}, {"alice", "t2"}}));
  EXPECT_EQ(map.size(), 3u);

  map[{"alice", "t2"}] = "sb-b";  // remapped: leaves sb-a's set
  EXPECT_EQ(map.keys_of("sb-a"), (std::vector<ThreadKey>{{"alice", "t1"}}));
  EXPECT_EQ(map.keys_of("sb-b"), (std::vector<ThreadKey>{{"alice", "t2"}, {"bob", "t1"}}));

  map.erase(map.find({"alice", "t1"}));
  EXPECT_TRUE(map.keys_of("sb-a").empty());
  EXPECT_EQ(map.erase(ThreadKey{"nobody", "x"}), 0u);

  EXPECT_EQ(map.erase_sandbox("sb-b"), (ThreadKey{"alice", "t2"}));  // the first in key order
  EXPECT_TRUE(map.empty());
  EXPECT_TRUE(map.keys_of("sb-b").empty());
  EXPECT_EQ(map.erase_sandbox("sb-b"), std::nullopt);
}

// The way back points into the map's own nodes: a copy must link its own, or it would read the
// original's (freed once the original goes).
TEST(ThreadMapTest, ACopyKeepsItsOwnWayBack) {
  auto original = std::make_unique<ThreadMap>();
  (*original)[{"alice", "t1"}] = "sb-a";
  (*original)[{"bob", "t1"}] = "sb-a";
  ThreadMap copy(*original);
  ThreadMap assigned;
  assigned[{"carol", "t9"}] = "sb-c";
  assigned = *original;
  original.reset();
  for (ThreadMap* map : {&copy, &assigned}) {
    EXPECT_EQ(map->keys_of("sb-a"), (std::vector<ThreadKey>{{"alice", "t1"}, {"bob", "t1"}}));
    EXPECT_TRUE(map->keys_of("sb-c").empty());
    (*map)[{"alice", "t1"}] = "sb-b";
    EXPECT_EQ(map->keys_of("sb-b"), (std::vector<ThreadKey>{{"alice", "t1"}}));
    EXPECT_EQ(map->erase_sandbox("sb-a"), (ThreadKey{"bob", "t1"}));
    EXPECT_EQ(map->size(), 1u);
  }
  ThreadMap moved(std::move(copy));
  EXPECT_EQ(moved.keys_of("sb-b"), (std::vector<ThreadKey>{{"alice", "t1"}}));
}

TEST(ThreadMapTest, ComparesAndIteratesLikeTheMapItReplaces) {
  ThreadMap map;
  map[{"u", "b"}] = "2";
  map[{"u", "a"}] = "1";
  EXPECT_EQ(map, (std::map<ThreadKey, std::string>{{{"u", "a"}, "1"}, {{"u", "b"}, "2"}}));
  EXPECT_FALSE(map == (std::map<ThreadKey, std::string>{{{"u", "a"}, "1"}, {{"u", "b"}, "3"}}));
  EXPECT_FALSE(map == (std::map<ThreadKey, std::string>{{{"u", "a"}, "1"}}));
  std::map<ThreadKey, std::string> visited;  // every mapping once, in no promised order
  for (const auto& [key, id] : map) EXPECT_TRUE(visited.emplace(key, id).second);
  EXPECT_EQ(map, visited);
  map[{"u", "a"}] = "1";  // same value again: nothing changes
  EXPECT_EQ(map.keys_of("1").size(), 1u);
}

// The way back holds views of ids inside the map's nodes: growing the map far enough to
// rehash it many times must leave every one of them reading the right id.
TEST(ThreadMapTest, TheWayBackSurvivesRehashing) {
  ThreadMap map;
  for (int i = 0; i < 5000; ++i) {
    map[{"u", "t" + std::to_string(i)}] = "sb-" + std::to_string(i % 7);
  }
  std::size_t mapped = 0;
  for (int s = 0; s < 7; ++s) mapped += map.keys_of("sb-" + std::to_string(s)).size();
  EXPECT_EQ(mapped, 5000u);
  EXPECT_EQ(map.erase_sandbox("sb-3"), (ThreadKey{"u", "t10"}));  // "t10" < "t1017" < "t3"
  EXPECT_EQ(map.size(), 5000u - 714u);
  EXPECT_TRUE(map.keys_of("sb-3").empty());
  map[{"u", "t0"}] = "sb-3";
  EXPECT_EQ(map.keys_of("sb-3"), (std::vector<ThreadKey>{{"u", "t0"}}));
  EXPECT_EQ(map.keys_of("sb-0").size(), 714u);  // t0 left sb-0 (715 of 5000 were 0 mod 7)
}

}  // namespace
}  // namespace sandboxd::core
