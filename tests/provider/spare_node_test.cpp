// SpareNode reuses the node its map's last removal freed, and leaves nothing of the removed
// value alive in it.
#include "sandboxd/core/spare_node.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

namespace sandboxd::core {
namespace {

using Entries = std::map<std::string, std::shared_ptr<int>>;

TEST(SpareNodeTest, TheFreedNodeServesTheNextInsertionAndHoldsNothing) {
  Entries map;
  SpareNode<Entries> spare;
  auto value = std::make_shared<int>(7);
  spare(map, "0123456789abcdef") = value;
  const auto* node_before = &*map.begin();
  EXPECT_EQ(value.use_count(), 2);

  EXPECT_TRUE(spare.erase(map, "0123456789abcdef"));
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(value.use_count(), 1);  // the spare node's value was reset
  EXPECT_FALSE(spare.erase(map, "0123456789abcdef"));

  spare(map, "fedcba9876543210") = value;
  ASSERT_EQ(map.size(), 1u);
  EXPECT_EQ(&*map.begin(), node_before);  // the same node, under its new key
  EXPECT_EQ(map.begin()->first, "fedcba9876543210");

  // An existing key is found, not replaced; a second key needs a new node.
  EXPECT_EQ(spare(map, "fedcba9876543210"), value);
  spare(map, "1111111111111111") = nullptr;
  spare(map, "0000000000000000") = nullptr;
  EXPECT_EQ(map.size(), 3u);
  EXPECT_EQ(map.begin()->first, "0000000000000000");  // still ordered
}

}  // namespace
}  // namespace sandboxd::core
