#include "sandboxd/core/one_shot_host.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/default_config.hpp"
#include "sandboxd/lease_rules.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {
namespace {

using core::RegistryFile;
using core::RegistrySnapshot;
using core::TrackedSandbox;
constexpr core::SandboxState kActive = core::SandboxState::active;
constexpr core::SandboxState kWarm = core::SandboxState::warm;

TrackedSandbox tracked(const std::string& id, core::SandboxState state, double since) {
  TrackedSandbox t;
  t.info.sandbox_id = id;
  t.info.sandbox_url = "http://localhost:1/" + id;
  t.info.container_name = "deer-flow-sandbox-" + id;
  t.info.created_at = 100.5;
  t.info.mount_contract_version = 2;
  t.conversation = core::ThreadKey{"alice", "t-" + id};
  t.state = state;
  t.since = since;
  return t;
}

RegistrySnapshot with(std::vector<TrackedSandbox> sandboxes) {
  RegistrySnapshot s;
  s.sandboxes = std::move(sandboxes);
  return s;
}

mode_t mode_of(const std::filesystem::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(RegistryFile, AMissingFileIsEmptyAndAWrittenOneReadsBackPrivately) {
  TempDir tmp;
  RegistryFile file(tmp.path() / "state" / "registry.json");
  EXPECT_TRUE(file.load().sandboxes.empty());
  EXPECT_EQ(mode_of(tmp.path() / "state"), 0700u);
  RegistrySnapshot after = with({tracked("a", kActive, 10.25), tracked("b", kWarm, 20.0),
                                 tracked("p", core::SandboxState::paused, 25.0)});
  after.sandboxes[1].conversation.reset();  // an adopted orphan has no conversation
  after.sandboxes[0].last_acquire = core::AcquirePath::claimed;  // the page's "last acquire"
  after.sandboxes[2].last_acquire = core::AcquirePath::resumed;
  after.unowned_since["c"] = 30.0;
  file.apply({}, after);
  EXPECT_EQ(file.load(), after);
  EXPECT_EQ(mode_of(file.path()), 0600u);
  EXPECT_FALSE(std::filesystem::exists(file.path().string() + ".tmp"));
}

TEST(RegistryFile, ConcurrentCommandsOnDifferentSandboxesKeepEachOthersChanges) {
  TempDir tmp;
  RegistryFile file(tmp.path() / "registry.json");
  const RegistrySnapshot seen_by_a = file.load();
  const RegistrySnapshot seen_by_b = file.load();
  file.apply(seen_by_a, with({tracked("a", kActive, 1)}));
  file.apply(seen_by_b, with({tracked("b", kActive, 2)}));
  EXPECT_EQ(file.load(), with({tracked("a", kActive, 1), tracked("b", kActive, 2)}));

  // A releases a while B destroys b, both having loaded {a, b}.
  const RegistrySnapshot both = file.load();
  file.apply(both, with({tracked("a", kWarm, 3), tracked("b", kActive, 2)}));
  file.apply(both, with({tracked("a", kActive, 1)}));
  EXPECT_EQ(file.load(), with({tracked("a", kWarm, 3)}))
      << "B's unchanged copy of a must not undo A's release";
}

TEST(RegistryFile, ACorruptFileIsRefusedByPathWithWhatToDo) {
  TempDir tmp;
  const auto path = tmp.path() / "registry.json";
  for (const std::string& body :
       {std::string(
            "{\"version\": 1, \"sandboxes\": [{\"sandbox_id\": \"x\", \"state\": \"odd\"}]}"),
        // The registry's own "none" (an entry holding only marks) is never a tracked sandbox.
        std::string(
            "{\"version\": 1, \"sandboxes\": [{\"sandbox_id\": \"x\", \"state\": \"none\"}]}"),
        std::string("not json"), std::string(200000, '['), std::string("{\"version\": 7}")}) {
    std::ofstream(path) << body;
    try {
      RegistryFile(path).load();
      ADD_FAILURE() << "accepted: " << body.substr(0, 60);
    } catch (const core::RegistryFileError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      EXPECT_NE(message.find("move it aside"), std::string::npos) << message;
    }
  }
}

TEST(OneShotHost, LeaseTtlIsRaisedToTheFloorThroughTheStoresOwnSection) {
  const auto config = core::parse_config(
      R"({"sandbox": {"ownership": {"use": "ownership_memory:MemoryOwnershipStore",
                                    "ttl_multiplier": 4}}})",
      "test.json");
  EXPECT_DOUBLE_EQ(config.ttl_seconds(), 120.0);
  const auto raised = core::with_lease_ttl_at_least(config, 600);
  EXPECT_DOUBLE_EQ(raised.ttl_seconds(), 600.0);
  EXPECT_DOUBLE_EQ(raised.renewal_interval_seconds, 150.0);
  rapidjson::Document section;
  section.Parse(raised.ownership.options_json.c_str());
  ASSERT_TRUE(section.IsObject());
  EXPECT_DOUBLE_EQ(section["renewal_interval_seconds"].GetDouble(), 150.0);
  EXPECT_EQ(section["ttl_multiplier"].GetInt(), 4) << "the multiplier is kept";
  EXPECT_STREQ(section["use"].GetString(), "ownership_memory:MemoryOwnershipStore");

  const auto unchanged = core::with_lease_ttl_at_least(config, 60);
  EXPECT_EQ(unchanged.ownership.options_json, config.ownership.options_json);
  EXPECT_DOUBLE_EQ(unchanged.ttl_seconds(), 120.0);
}

// Issue 13 A.7: the floor from a very long idle timeout raises the multiplier; the renewal
// interval stays within its bound (beyond ~9.2e9 s the renewal wait overflowed and spun).
TEST(OneShotHost, AHugeTtlFloorKeepsTheRenewalIntervalBounded) {
  const auto config = core::parse_config(
      R"({"sandbox": {"ownership": {"use": "ownership_memory:MemoryOwnershipStore"}}})",
      "test.json");
  const auto raised = core::with_lease_ttl_at_least(config, 4e10);
  EXPECT_DOUBLE_EQ(raised.renewal_interval_seconds, lease_rules::kMaxRenewalIntervalSeconds);
  EXPECT_DOUBLE_EQ(raised.ttl_seconds(), 4e10);
  rapidjson::Document section;
  section.Parse(raised.ownership.options_json.c_str());
  EXPECT_DOUBLE_EQ(section["renewal_interval_seconds"].GetDouble(),
                   lease_rules::kMaxRenewalIntervalSeconds);
  EXPECT_DOUBLE_EQ(section["ttl_multiplier"].GetDouble(),
                   4e10 / lease_rules::kMaxRenewalIntervalSeconds);
}

TEST(OneShotHost, ARenewalIntervalAboveADayIsRefused) {
  for (const char* value : {"86401", "9.3e9", "1e308"}) {
    try {
      core::parse_config(std::string(R"({"sandbox": {"ownership": {"use": "ownership_memory:)"
                                     R"(MemoryOwnershipStore", "renewal_interval_seconds": )") +
                             value + "}}}",
                         "test.json");
      FAIL() << value << " was accepted";
    } catch (const core::ConfigError& error) {
      EXPECT_NE(std::string(error.what())
                    .find("sandbox.ownership.renewal_interval_seconds: "
                          "expected a number > 0 and <= 86400 (a day)"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(OneShotHost, OwnerIdIsStablePerRegistryFileAndDistinctBetweenThem) {
  testing::TempDir tmp;
  const auto x = tmp.path() / "x";
  EXPECT_EQ(core::one_shot_owner_id(x / "sandboxctl-registry.json", /*create=*/false), "");
  EXPECT_FALSE(std::filesystem::exists(x)) << "asking without create made something";
  const auto a = core::one_shot_owner_id(x / "sandboxctl-registry.json");
  EXPECT_EQ(a, core::one_shot_owner_id(x / "sandboxctl-registry.json"));
  EXPECT_EQ(a, core::one_shot_owner_id(x / ".." / "x" / "sandboxctl-registry.json", false));
  EXPECT_NE(a, core::one_shot_owner_id(tmp.path() / "y" / "sandboxctl-registry.json"));
  EXPECT_NE(a, core::one_shot_owner_id(x / "serve-registry.json"));
  EXPECT_NE(a.find(":sandboxctl-"), std::string::npos) << a;
  // The identity is the installation's, not its path's: the same path holding another
  // installation (a cloned machine, a container sharing the hostname) is another owner.
  std::filesystem::rename(x, tmp.path() / "x-old");
  EXPECT_NE(a, core::one_shot_owner_id(x / "sandboxctl-registry.json"));
  struct stat st {};
  ASSERT_EQ(::stat((x / core::kInstallationIdFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// A listening unix socket at `path`, closed on destruction.
class ListeningSocket {
 public:
  explicit ListeningSocket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << path;
    ::listen(fd_, 1);
  }
  ~ListeningSocket() { ::close(fd_); }

 private:
  int fd_ = -1;
};

TEST(DefaultConfig, StateDirectoryFollowsXdgThenHomeAndIsCreatedPrivate) {
  TempDir tmp;
  {
    ScopedEnv xdg("XDG_STATE_HOME", (tmp.path() / "xdg").string());
    ScopedEnv home("HOME", (tmp.path() / "home").string());
    const auto config = core::default_config();
    EXPECT_EQ(config.base_dir, (tmp.path() / "xdg" / "sandboxd").string());
    EXPECT_EQ(mode_of(tmp.path() / "xdg" / "sandboxd"), 0700u);
    EXPECT_EQ(config.source_file, core::kDefaultConfigSource);
    EXPECT_EQ(config.ownership.use, core::kSqliteOwnershipUse);
    EXPECT_NE(config.ownership.options_json.find(
                  (tmp.path() / "xdg" / "sandboxd" / "leases.db").string()),
              std::string::npos);
    EXPECT_EQ(config.backend.use, core::kLocalDockerUse);
    EXPECT_NE(config.backend.options_json.find(core::kLocalTestImage), std::string::npos);
  }
  {
    ScopedEnv xdg("XDG_STATE_HOME", std::nullopt);
    ScopedEnv home("HOME", (tmp.path() / "home").string());
    EXPECT_EQ(core::default_state_dir(), tmp.path() / "home" / ".local" / "state" / "sandboxd");
  }
  {
    ScopedEnv xdg("XDG_STATE_HOME", std::nullopt);
    ScopedEnv home("HOME", std::nullopt);
    EXPECT_THROW(core::default_state_dir(), core::ConfigError);
  }
  {
    ScopedEnv xdg("XDG_STATE_HOME", "relative/dir");
    try {
      core::default_state_dir();
      ADD_FAILURE() << "a relative XDG_STATE_HOME was accepted";
    } catch (const core::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'relative/dir'"), std::string::npos) << e.what();
    }
  }
}

TEST(DefaultConfig, EngineIsDockerHostThenDockerSocketThenTheSetUpPodmanService) {
  TempDir tmp;
  ScopedEnv engine_dir("SANDBOXD_ENGINE_DIR", tmp.path().string());
  {
    ScopedEnv docker_host("DOCKER_HOST", "tcp://127.0.0.1:2375");
    EXPECT_EQ(core::default_engine().socket, "tcp://127.0.0.1:2375");
  }
  ScopedEnv docker_host("DOCKER_HOST", std::nullopt);
  if (std::filesystem::exists("/var/run/docker.sock")) {
    GTEST_SKIP() << "/var/run/docker.sock exists here and takes precedence";
  }
  EXPECT_EQ(core::default_engine().socket, "unix:///var/run/docker.sock");
  EXPECT_NE(core::default_engine().reason.find("test_engine.sh start"), std::string::npos);
  ListeningSocket podman((tmp.path() / "podman.sock").string());
  EXPECT_EQ(core::default_engine().socket, "unix://" + (tmp.path() / "podman.sock").string());
  ScopedEnv image("SANDBOXD_IMAGE", "example.org/mine:1");
  ScopedEnv xdg("XDG_STATE_HOME", (tmp.path() / "xdg").string());
  const auto config = core::default_config();
  EXPECT_NE(config.backend.options_json.find("example.org/mine:1"), std::string::npos);
  EXPECT_NE(config.backend.options_json.find((tmp.path() / "podman.sock").string()),
            std::string::npos);
}

}  // namespace
}  // namespace sandboxd::testing
