// Refusals of requests without credentials (issue 32 B): every one is counted, at most one
// line per interval is logged, and the next line says how many were not logged one by one.
// The clock is injected: no test waits a minute.
#include "refusal_log.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace {

using sandboxd::LogLevel;
using sandboxd::door::RefusalLog;
using namespace std::chrono_literals;

TEST(RefusalLogTest, OneLinePerIntervalEveryRefusalCounted) {
  auto logger = std::make_shared<sandboxd::testing::CapturingLogger>();
  RefusalLog log(logger, "provisioner auth rejected", 60s);
  const RefusalLog::Clock::time_point start{};
  log.record("GET", "/api/sandboxes", start);
  for (int i = 0; i < 999; ++i) log.record("POST", "/api/sandboxes", start + 1s);
  EXPECT_EQ(log.total(), 1000u);
  EXPECT_EQ(logger->count(LogLevel::warning, "provisioner auth rejected"), 1u);
  EXPECT_TRUE(logger->contains(LogLevel::warning, "provisioner auth rejected: GET /api/sandboxes"));

  log.record("DELETE", "/api/sandboxes/x", start + 61s);
  EXPECT_EQ(logger->count(LogLevel::warning, "provisioner auth rejected"), 2u);
  EXPECT_TRUE(logger->contains(LogLevel::warning,
                               "provisioner auth rejected: DELETE /api/sandboxes/x (and 999 more "
                               "in the last 60 s, not logged one by one)"));
  EXPECT_EQ(log.total(), 1001u);
}

}  // namespace
