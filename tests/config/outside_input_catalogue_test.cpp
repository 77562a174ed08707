// The catalogue of outside input (issue 13 C): one table, every kind of value that reaches
// sandboxd from outside, and the exact sentence a user sees for each bad one. README's
// "Bad input" section lists the same kinds. A row whose message changes fails here first.
//
// Kinds: config values (wrong type, out of range, malformed or deep JSON), `use:` strings,
// user / thread / sandbox ids (traversal, empty, too long, unicode, NUL), mounts (relative,
// outside the state, duplicates), and request bodies of the provisioner service (truncated,
// wrong types, deep). Engine and provisioner *answers* are covered over real HTTP by
// local_docker_hostile_engine_test and remote_provisioner_backend_test, and symlinked mount
// sources by provisioner_service_test.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "create_request.hpp"
#include "extra_mount_validation.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "test_support.hpp"

namespace sandboxd {
namespace {

struct Row {
  const char* kind;
  std::string input;  // what the row feeds in, for the failure message
  std::function<void()> feed;
  std::string message;  // exactly what the user sees
};

std::string message_of(const std::function<void()>& feed) {
  try {
    feed();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "<accepted>";
}

std::function<void()> config(const std::string& sandbox_section) {
  return [sandbox_section] {
    core::parse_config(R"({"sandbox": )" + sandbox_section + "}", "cfg.json");
  };
}

// A backend plugin's own options, checked by the plugin as it loads (no engine is contacted).
std::function<void()> local_docker_options(const std::string& options) {
  return [options] {
    PluginContext context;
    context.config_json = options;
    context.config_key_path = "sandbox.backend";
    context.logger = std::make_shared<testing::CapturingLogger>();
    context.clock = std::make_shared<testing::ManualClock>();
    core::PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
        .load_backend("local_docker:LocalContainerBackend", context,
                      "cfg.json: sandbox.backend.use");
  };
}

std::function<void()> use(const std::string& text) {
  return [text] { core::UseString::parse(text, "cfg.json: sandbox.backend.use"); };
}

std::function<void()> extra_mounts(std::vector<Mount> mounts) {
  return [mounts] {
    provisioner::validated_extra_mounts(mounts, "t1", "alice",
                                        {"/srv/deer-flow", "/srv/deer-flow/threads"});
  };
}

std::function<void()> create_body(const std::string& body) {
  return [body] {
    try {
      provisioner::parse_create_body(body);
    } catch (const provisioner::SchemaViolation& violation) {
      throw std::invalid_argument("422 " + violation.field() + ": " + violation.what());
    }
  };
}

TEST(OutsideInputCatalogue, EveryBadValueGetsItsSentence) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<Row> rows = {
      // ── config values ──
      {"config", "replicas \"3\"", config(R"({"use": "x:Y", "replicas": "3"})"),
       R"m(cfg.json: sandbox.replicas: expected an integer > 0, got "3")m"},
      {"config", "replicas 0", config(R"({"use": "x:Y", "replicas": 0})"),
       R"m(cfg.json: sandbox.replicas: expected an integer > 0, got 0)m"},
      {"config", "idle_timeout -5", config(R"({"use": "x:Y", "idle_timeout": -5})"),
       R"m(cfg.json: sandbox.idle_timeout: expected an integer >= 0 (seconds), got -5)m"},
      {"config", "ttl_multiplier 1.5",
       config(R"({"use": "x:Y", "ownership": {"type": "memory", "ttl_multiplier": 1.5}})"),
       R"m(cfg.json: sandbox.ownership.ttl_multiplier: expected a number >= 2, got 1.5)m"},
      {"config", "renewal_interval_seconds 1e10",
       config(R"({"use": "x:Y", "ownership": {"renewal_interval_seconds": 1e10}})"),
       R"m(cfg.json: sandbox.ownership.renewal_interval_seconds: expected a number > 0 and <= 86400 (a day), got 10000000000.0)m"},
      // ── a backend plugin's options (local_docker) ──
      {"plugin option", "port 70000", local_docker_options(R"({"port": 70000})"),
       R"m(sandbox.backend.port: must be between 0 and 65535 (rejected by plugin 'local_docker:LocalContainerBackend'))m"},
      {"plugin option", "environment not an object",
       local_docker_options(R"({"environment": ["K=v"]})"),
       R"m(sandbox.backend.environment: expected an object of strings, got an array (value redacted) (rejected by plugin 'local_docker:LocalContainerBackend'))m"},
      {"plugin option", "mounts[0] without host_path",
       local_docker_options(R"({"mounts": [{"container_path": "/mnt/x"}]})"),
       R"m(sandbox.backend.mounts[0].host_path: is required (rejected by plugin 'local_docker:LocalContainerBackend'))m"},
      {"plugin option", "socket that is not unix:// or tcp://",
       local_docker_options(R"({"socket": "ftp://engine"})"),
       R"m(sandbox.backend.socket: unsupported engine address "ftp://engine": expected unix:///path/to.sock or tcp://host:port (rejected by plugin 'local_docker:LocalContainerBackend'))m"},
      {"config", "truncated JSON",
       [] { core::parse_config(R"({"sandbox": {"use": )", "cfg.json"); },
       R"m(cfg.json: malformed JSON at line 1, column 21: Invalid value.)m"},
      {"config", "100-deep JSON", [deep] { core::parse_config(deep, "cfg.json"); },
       R"m(cfg.json: malformed JSON at line 1, column 65: nested deeper than 64 levels)m"},
      // ── use strings ──
      {"use", "empty", use(""),
       R"m(cfg.json: sandbox.backend.use: malformed use string '': no ':' between module and class (expected "module:Class", e.g. "ownership_sqlite:SqliteOwnershipStore"))m"},
      {"use", "no colon", use("local_docker"),
       R"m(cfg.json: sandbox.backend.use: malformed use string 'local_docker': no ':' between module and class (expected "module:Class", e.g. "ownership_sqlite:SqliteOwnershipStore"))m"},
      {"use", "no class", use("local_docker:"),
       R"m(cfg.json: sandbox.backend.use: malformed use string 'local_docker:': the class part is empty (expected "module:Class", e.g. "ownership_sqlite:SqliteOwnershipStore"))m"},
      {"use", "no module", use(":LocalContainerBackend"),
       R"m(cfg.json: sandbox.backend.use: malformed use string ':LocalContainerBackend': the module part is empty (expected "module:Class", e.g. "ownership_sqlite:SqliteOwnershipStore"))m"},
      {"use", "class that is not a C++ name", use("local_docker:Local Backend"),
       R"m(cfg.json: sandbox.backend.use: malformed use string 'local_docker:Local Backend': 'Local Backend' is not a C++ class name (expected "module:Class", e.g. "ownership_sqlite:SqliteOwnershipStore"))m"},
      // ── ids ──
      {"thread id", "traversal", [] { core::validate_thread_id("../../etc"); },
       R"m(Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got '../../etc')m"},
      {"thread id", "empty", [] { core::validate_thread_id(""); },
       R"m(Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got '')m"},
      {"thread id", "65 characters", [] { core::validate_thread_id(std::string(65, 'a')); },
       R"m(Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa')m"},
      {"thread id", "unicode", [] { core::validate_thread_id("tëst"); },
       R"m(Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got 'tëst')m"},
      {"thread id", "NUL", [] { core::validate_thread_id(std::string("a\0b", 3)); },
       R"m(Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got 'a\x00b')m"},
      {"user id", "traversal", [] { core::validate_user_id(".."); },
       R"m(Invalid user_id '..': only alphanumeric characters, hyphens, and underscores are allowed.)m"},
      {"user id", "empty", [] { core::validate_user_id(""); },
       R"m(Invalid user_id '': only alphanumeric characters, hyphens, and underscores are allowed.)m"},
      {"user id", "slash", [] { core::validate_user_id("alice/bob"); },
       R"m(Invalid user_id 'alice/bob': only alphanumeric characters, hyphens, and underscores are allowed.)m"},
      {"sandbox id", "traversal", [] { core::validate_sandbox_id("../x"); },
       R"m(Invalid sandbox_id: expected 1-64 ASCII letters, digits, hyphens, or underscores, got '../x')m"},
      // ── mounts ──
      {"mount", "relative host path", extra_mounts({{"srv/x", "/mnt/acp-workspace", true}}),
       R"m(Extra mount host path must be absolute: srv/x)m"},
      {"mount", "outside the state", extra_mounts({{"/etc", "/mnt/acp-workspace", true}}),
       R"m(Extra mount host path is outside DeerFlow state: /etc)m"},
      {"mount", "escaping with ..",
       extra_mounts({{"/srv/deer-flow/../etc", "/mnt/acp-workspace", true}}),
       R"m(Extra mount host path is outside DeerFlow state: /srv/deer-flow/../etc)m"},
      {"mount", "duplicate",
       extra_mounts({{"/srv/deer-flow/a", "/mnt/acp-workspace", true},
                     {"/srv/deer-flow/b", "/mnt/acp-workspace", true}}),
       R"m(Duplicate extra mount path: /mnt/acp-workspace)m"},
      {"mount", "unsupported container path", extra_mounts({{"/srv/deer-flow/a", "/etc", true}}),
       R"m(Unsupported extra mount path: /etc)m"},
      // ── provisioner request bodies ──
      {"body", "truncated", create_body(R"({"sandbox_id": "s)"),
       R"m(422 : the body is not valid JSON (or is nested deeper than 64 levels))m"},
      {"body", "wrong type", create_body(R"({"sandbox_id": ["s"]})"),
       R"m(422 sandbox_id: str type expected)m"},
      {"body", "deep", create_body(deep),
       R"m(422 : the body is not valid JSON (or is nested deeper than 64 levels))m"},
      {"body", "NUL in thread id", create_body(R"({"sandbox_id": "s", "thread_id": "a\u0000"})"),
       R"m(422 thread_id: string does not match regex "^[A-Za-z0-9_-]{1,64}$")m"},
  };
  for (const Row& row : rows) {
    const std::string seen = message_of(row.feed);
    std::printf("%-14s %-38s -> %s\n", row.kind, row.input.c_str(), seen.c_str());
    EXPECT_EQ(seen, row.message) << row.kind << ": " << row.input;
  }
}

}  // namespace
}  // namespace sandboxd
