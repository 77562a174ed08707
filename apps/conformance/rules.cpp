// The backend contract the core relies on (docs/writing-a-backend.md), one rule per case. Each
// failure says which rule broke and what goes wrong in sandboxd when it does. The cases run in
// this order and share the sandbox of one conversation (made by the first), so a later rule
// sees a sandbox an earlier one already checked.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "kit.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"

namespace sandboxd::conformance {
namespace {

constexpr const char* kUser = "conformance-alice";
constexpr const char* kThread = "t-1";

double wall_now() {
  return SystemClock().wall_now();
}

// The first conversation's sandbox, made once by whichever rule needs it first.
struct FirstSandbox {
  CreateRequest request;
  std::optional<SandboxInfo> info;
  std::string create_error;
  double asked_at = 0, answered_at = 0;
};

FirstSandbox& first_sandbox() {
  static FirstSandbox made = [] {
    FirstSandbox sandbox;
    Kit& kit = the_kit();
    sandbox.request = kit.request_for(kUser, kThread);
    sandbox.asked_at = wall_now();
    try {
      sandbox.info = kit.backend().create(sandbox.request);
      kit.remember(*sandbox.info);
    } catch (const std::exception& e) {
      sandbox.create_error = e.what();
    }
    sandbox.answered_at = wall_now();
    return sandbox;
  }();
  return made;
}

// Stops the case unless the first sandbox exists.
#define REQUIRE_FIRST_SANDBOX()                                                       \
  FirstSandbox& first = first_sandbox();                                              \
  ASSERT_TRUE(first.info.has_value())                                                 \
      << "create(" << first.request.sandbox_id << ") threw: " << first.create_error   \
      << "\nWhy it matters: every acquisition of a new conversation calls create; a " \
         "backend whose create fails can hand out no sandbox."

TEST(Create, TheSandboxAnswersAtItsUrl) {
  REQUIRE_FIRST_SANDBOX();
  ASSERT_FALSE(first.info->sandbox_url.empty())
      << "create returned no sandbox_url.\nWhy it matters: the URL is what the core probes and "
         "what every caller is handed.";
  EXPECT_TRUE(answers_ready(*first.info, the_kit().settings().ready_seconds))
      << "GET " << first.info->sandbox_url << "/v1/sandbox (with the info's request_headers) "
      << "did not answer 200 within " << the_kit().settings().ready_seconds << " s.\n"
      << "Why it matters: the core waits for exactly this answer after create; a sandbox "
         "that never gives it is destroyed and the acquire fails naming the URL.";
}

TEST(Create, TheInfoCarriesTheRequestsIdentity) {
  REQUIRE_FIRST_SANDBOX();
  const SandboxInfo& info = *first.info;
  EXPECT_EQ(info.sandbox_id, first.request.sandbox_id)
      << "Why it matters: the id is the core's (derived from the conversation); another "
         "process finds the sandbox by it.";
  EXPECT_EQ(info.user_id.value_or("<unset>"), kUser)
      << "Why it matters: user_id is the verified identity; the operator's listing and the "
         "id-collision check read it.";
  EXPECT_EQ(info.thread_id.value_or("<unset>"), kThread)
      << "Why it matters: thread_id is the verified identity of the conversation.";
  EXPECT_GT(info.created_at, 0.0)
      << "created_at is 0 (unknown).\nWhy it matters: max_lifetime_seconds cannot bound a "
         "sandbox of unknown age, and the operator's SINCE column is empty.";
  if (info.created_at > 0) {
    EXPECT_TRUE(info.created_at >= first.asked_at - 5 && info.created_at <= first.answered_at + 5)
        << "created_at " << std::fixed << info.created_at << " is not the moment of creation ("
        << first.asked_at << " .. " << first.answered_at << ", wall-clock seconds).\n"
        << "Why it matters: max_lifetime_seconds counts from it.";
  }
  EXPECT_TRUE(info.network_policy.empty() || info.network_policy == "open")
      << "network_policy is '" << info.network_policy << "' for a backend given no policy.\n"
      << "Why it matters: a sandbox found under another policy than the configured one is "
         "replaced, never reused.";
}

TEST(Create, AgainForARunningIdReturnsThatSandbox) {
  REQUIRE_FIRST_SANDBOX();
  SandboxInfo again;
  try {
    again = the_kit().backend().create(first.request);
  } catch (const std::exception& e) {
    FAIL() << "a second create(" << first.request.sandbox_id << ") threw: " << e.what()
           << "\nWhy it matters: two processes race to the same id, and revalidation calls "
              "create on purpose; it must return the running sandbox.";
  }
  EXPECT_EQ(again.sandbox_url, first.info->sandbox_url)
      << "Why it matters: a second create made another sandbox (or moved it); callers holding "
         "the first URL lose their sandbox.";
  EXPECT_TRUE(answers_ready(*first.info, 10))
      << "The first sandbox stopped answering after the second create.";
}

TEST(AnotherProcess, DiscoversItListsItAndSeesItAlive) {
  REQUIRE_FIRST_SANDBOX();
  const SecondLook look = the_kit().look_from_another_process(first.info->sandbox_id);
  ASSERT_TRUE(look.ran) << look.error;
  ASSERT_TRUE(look.error.empty()) << "In the second process: " << look.error;
  EXPECT_TRUE(look.found)
      << "discover(" << first.info->sandbox_id << ") in a second process found nothing.\n"
      << "Why it matters: one sandboxctl command is one process; the next command (and every "
         "other gateway) finds the sandbox only this way, so it would make a second one.";
  if (look.found) {
    EXPECT_EQ(look.info.sandbox_url, first.info->sandbox_url);
    EXPECT_EQ(look.info.user_id.value_or("<unset>"), kUser)
        << "Why it matters: a discovered sandbox is refused when its recorded identity "
           "differs from the conversation asking.";
    EXPECT_EQ(look.info.thread_id.value_or("<unset>"), kThread);
    EXPECT_LT(std::fabs(look.info.created_at - first.info->created_at), 2.0)
        << "created_at read back in another process is " << std::fixed << look.info.created_at
        << ", not the creation time " << first.info->created_at << ".\n"
        << "Why it matters: read it from the sandbox, not from the moment discover ran, or "
           "max_lifetime_seconds never ends a sandbox.";
    EXPECT_TRUE(look.alive) << "is_alive of the discovered info answered false in the second "
                               "process.\nWhy it matters: false drops the sandbox.";
  }
  EXPECT_TRUE(look.listed)
      << "list_running in a second process did not list " << first.info->sandbox_id << ".\n"
      << "Why it matters: a restarted gateway adopts (and the reaper ends) only what it lists.";
}

TEST(Discover, AnIdNobodyRunsAnswersNothing) {
  std::optional<SandboxInfo> found;
  try {
    found = the_kit().backend().discover("c0nf0rmance0000");
  } catch (const std::exception& e) {
    FAIL() << "discover of an unknown id threw: " << e.what()
           << "\nWhy it matters: the core asks this for every conversation this process has not "
              "seen; the answer must be nothing, not an error.";
  }
  EXPECT_FALSE(found.has_value())
      << "discover answered a sandbox for an id nobody made.\nWhy it matters: a stranger would "
         "be handed out as a conversation's sandbox.";
}

TEST(OptionalVerbs, PauseAndUnpauseKeepTheSandbox) {
  auto* pausing = backend_capability<SandboxPausing>(the_kit().backend());
  if (!pausing) GTEST_SKIP() << "SandboxPausing not offered";
  REQUIRE_FIRST_SANDBOX();
  try {
    pausing->pause(*first.info);
  } catch (const std::exception& e) {
    FAIL() << "pause threw: " << e.what()
           << "\nWhy it matters: a backend that offers SandboxPausing is asked to pause every "
              "idle warm sandbox when pause_after_seconds is set.";
  }
  try {
    pausing->unpause(*first.info);
  } catch (const std::exception& e) {
    FAIL() << "unpause threw: " << e.what()
           << "\nWhy it matters: a paused conversation could never be resumed.";
  }
  EXPECT_TRUE(answers_ready(*first.info, 30))
      << "The sandbox did not answer again after pause and unpause.";
}

TEST(OptionalVerbs, UsageAnswersForARunningSandbox) {
  auto* usage = backend_capability<SandboxUsage>(the_kit().backend());
  if (!usage) GTEST_SKIP() << "SandboxUsage not offered";
  REQUIRE_FIRST_SANDBOX();
  try {
    const SandboxUsage::Reading reading = usage->usage(*first.info);
    if (reading.memory_bytes && reading.memory_limit_bytes && *reading.memory_limit_bytes > 0) {
      EXPECT_LE(*reading.memory_bytes, *reading.memory_limit_bytes);
    }
  } catch (const std::exception& e) {
    FAIL() << "usage of a running sandbox threw: " << e.what()
           << "\nWhy it matters: the operator page shows nothing for it.";
  }
}

TEST(StaleInfo, AnotherProcessDestroysIt) {
  REQUIRE_FIRST_SANDBOX();
  SandboxInfo bare;  // what a record or another process may hold: the id and the URL
  bare.sandbox_id = first.info->sandbox_id;
  bare.sandbox_url = first.info->sandbox_url;
  try {
    EXPECT_TRUE(the_kit().backend().is_alive(bare))
        << "is_alive of an info holding only the id and URL answered false for a running "
           "sandbox.\nWhy it matters: false drops a sandbox another process handed out.";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "is_alive of an info holding only the id and URL threw: " << e.what();
  }
  const SecondLook destroyed = the_kit().destroy_from_another_process(*first.info);
  ASSERT_TRUE(destroyed.ran) << destroyed.error;
  EXPECT_TRUE(destroyed.error.empty())
      << "destroy in a second process, of an info holding only the id and URL, threw: "
      << destroyed.error << "\nWhy it matters: `sandboxctl destroy`, the reaper of another "
      << "gateway and adoption all destroy sandboxes another process made.";
  EXPECT_TRUE(stops_answering(*first.info, the_kit().settings().destroy_seconds))
      << first.info->sandbox_url << " still answers after destroy from a second process.\n"
      << "Why it matters: find the instance by its id, not by a handle one process holds; a "
         "destroyed conversation's sandbox must not keep running.";
  bool alive = true;
  try {
    alive = the_kit().backend().is_alive(*first.info);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "is_alive after destroy threw: " << e.what();
  }
  EXPECT_FALSE(alive) << "is_alive still answers true in the first process.\nWhy it matters: "
                         "the core would hand out a dead sandbox.";
  const SecondLook after = the_kit().look_from_another_process(first.info->sandbox_id);
  EXPECT_FALSE(after.found) << "discover still finds the destroyed sandbox.";
  EXPECT_FALSE(after.listed) << "list_running still lists the destroyed sandbox.";
}

TEST(Destroy, OfASandboxAlreadyGoneSucceeds) {
  REQUIRE_FIRST_SANDBOX();
  try {
    the_kit().backend().destroy(*first.info);
  } catch (const std::exception& e) {
    FAIL() << "destroy of a sandbox already gone threw: " << e.what()
           << "\nWhy it matters: \"already gone\" is success; two processes may destroy the "
              "same sandbox, and a throw tells the operator a stop may still be in flight.";
  }
  the_kit().forget(first.info->sandbox_id);
}

TEST(Destroy, StopsTheSandboxUnderTheDaemonsSignalMask) {
  // This process blocks SIGTERM, SIGINT and SIGHUP as the daemons do, so whatever the backend
  // starts inherits that unless it resets it (sandboxd/child_process.hpp).
  Kit& kit = the_kit();
  const CreateRequest request = kit.request_for(kUser, "t-2");
  SandboxInfo info;
  try {
    info = kit.backend().create(request);
    kit.remember(info);
  } catch (const std::exception& e) {
    FAIL() << "create(" << request.sandbox_id << ") threw: " << e.what();
  }
  ASSERT_TRUE(answers_ready(info, kit.settings().ready_seconds)) << info.sandbox_url;
  const auto began = std::chrono::steady_clock::now();
  try {
    kit.backend().destroy(info);
  } catch (const std::exception& e) {
    FAIL() << "destroy threw: " << e.what();
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  kit.forget(info.sandbox_id);
  EXPECT_TRUE(stops_answering(info, 2.0))
      << info.sandbox_url
      << " still answers after destroy returned.\nWhy it matters: a process "
         "started with the daemons' blocked SIGTERM ignores it; start children with "
         "sandboxd::set_child_signal_defaults (posix_spawn) or reset_signals_in_child (fork).";
  EXPECT_LT(took, kit.settings().destroy_seconds)
      << "destroy took " << took
      << " s.\nWhy it matters: a destroy that waits out a stop "
         "timeout (a child ignoring SIGTERM, then SIGKILL) holds the conversation that long.";
}

}  // namespace
}  // namespace sandboxd::conformance
