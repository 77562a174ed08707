// The loader's contract: every failure is one sentence a user can act on, and a library stays
// mapped while an object it made is alive.
#include "sandboxd/core/plugin_loader.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <vector>

#include "test_support.hpp"

namespace sandboxd::core {
namespace {

using sandboxd::testing::ScopedEnv;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtureDir = LOADER_TEST_PLUGIN_DIR;
const std::string kFixturePath = kFixtureDir + "/loader_fixture.so";

PluginContext make_context(std::string options_json = "{}") {
  PluginContext context;
  context.config_json = std::move(options_json);
  context.config_key_path = "sandbox.backend";
  context.config_file = "/etc/sandboxd/test.json";
  context.owner_id = "host:0123";
  context.logger = std::make_shared<sandboxd::testing::CapturingLogger>();
  context.clock = std::make_shared<SystemClock>();
  return context;
}

// Runs `load` and returns the PluginLoadError text ("" when nothing was thrown).
template <typename Load>
std::string load_error(Load load) {
  try {
    load();
  } catch (const PluginLoadError& e) {
    return e.what();
  }
  return "";
}

TEST(UseStringTest, ParsesModuleAndClass) {
  const auto use = UseString::parse("ownership_sqlite:SqliteOwnershipStore", "x");
  EXPECT_EQ(use.module, "ownership_sqlite");
  EXPECT_EQ(use.class_name, "SqliteOwnershipStore");
  EXPECT_EQ(UseString::parse("/opt/p/libfoo.so:Foo", "x").module, "/opt/p/libfoo.so");
}

TEST(UseStringTest, MalformedStringsNameTheTextTheSourceAndTheShape) {
  for (const std::string bad : {"ownership_sqlite", ":Foo", "mod:", "mod:Not-A-Class", ""}) {
    const std::string message =
        load_error([&] { UseString::parse(bad, "cfg.json: sandbox.backend.use"); });
    EXPECT_THAT(message,
                AllOf(HasSubstr("cfg.json: sandbox.backend.use"),
                      HasSubstr("malformed use string '" + bad + "'"), HasSubstr("module:Class")))
        << bad;
  }
}

TEST(PluginLoaderTest, SearchPathOrderIsConfigThenEnvThenInstallThenBuild) {
  ScopedEnv env("SANDBOXD_PLUGIN_PATH", "/env/one::/env/two");
  const PluginLoader loader({"/config/dir"});
  const std::vector<std::string> expected = {"/config/dir", "/env/one", "/env/two",
                                             install_plugin_dir(), build_plugin_dir()};
  EXPECT_EQ(loader.search_path(), expected);
}

TEST(PluginLoaderTest, LoadsABackendByBareNameAndPassesItsOptions) {
  const PluginLoader loader({kFixtureDir});
  auto backend = loader.load_backend("loader_fixture:EchoBackend",
                                     make_context(R"({"greeting":"hi"})"), "test");
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->create({.sandbox_id = "abc"}).sandbox_url, "http://127.0.0.1:1/hi");
}

TEST(PluginLoaderTest, LoadsByEnvironmentPluginPath) {
  ScopedEnv env("SANDBOXD_PLUGIN_PATH", kFixtureDir);
  const PluginLoader loader;
  EXPECT_NE(loader.load_backend("loader_fixture:EchoBackend", make_context(), "test"), nullptr);
}

TEST(PluginLoaderTest, LoadsByLibraryPath) {
  const PluginLoader loader;
  auto store = loader.load_ownership_store(kFixturePath + ":TinyStore", make_context(), "test");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->owner_id(), "host:0123");
}

TEST(PluginLoaderTest, MissingModuleListsEveryDirectorySearched) {
  const PluginLoader loader({"/nowhere/a", "/nowhere/b"});
  const std::string message = load_error([&] {
    loader.load_backend("no_such_module:Foo", make_context(), "cfg.json: sandbox.backend.use");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("cfg.json: sandbox.backend.use"),
                             HasSubstr("plugin module 'no_such_module'"), HasSubstr("not found"),
                             HasSubstr("/nowhere/a, /nowhere/b"), HasSubstr(build_plugin_dir()),
                             HasSubstr("SANDBOXD_PLUGIN_PATH")));
}

TEST(PluginLoaderTest, MissingLibraryPathIsNamed) {
  const PluginLoader loader;
  EXPECT_THAT(load_error([&] { loader.load_backend("/nowhere/x.so:Foo", make_context(), "w"); }),
              HasSubstr("plugin library '/nowhere/x.so'"));
}

TEST(PluginLoaderTest, UnknownClassListsTheClassesTheModuleExports) {
  const PluginLoader loader({kFixtureDir});
  const std::string message =
      load_error([&] { loader.load_backend("loader_fixture:NoSuchBackend", make_context(), "w"); });
  EXPECT_THAT(message, AllOf(HasSubstr("does not export a class 'NoSuchBackend'"),
                             HasSubstr("EchoBackend"), HasSubstr("ThrowingBackend"),
                             HasSubstr("PickyBackend"), HasSubstr("TinyStore")));
}

TEST(PluginLoaderTest, ALibraryWithoutDescriptorsIsNotAPlugin) {
  const PluginLoader loader({kFixtureDir});
  EXPECT_THAT(load_error([&] { loader.load_backend("not_a_plugin:Foo", make_context(), "w"); }),
              HasSubstr("exports: nothing (not a sandboxd plugin)"));
}

TEST(PluginLoaderTest, BackendNamedWhereAStoreIsExpected) {
  const PluginLoader loader({kFixtureDir});
  EXPECT_THAT(load_error([&] {
                loader.load_ownership_store("loader_fixture:EchoBackend", make_context(),
                                            "cfg.json: sandbox.ownership.use");
              }),
              AllOf(HasSubstr("cfg.json: sandbox.ownership.use"),
                    HasSubstr("'loader_fixture:EchoBackend' is a sandbox backend"),
                    HasSubstr("needs an ownership store")));
}

TEST(PluginLoaderTest, StoreNamedWhereABackendIsExpected) {
  const PluginLoader loader({kFixtureDir});
  EXPECT_THAT(
      load_error([&] { loader.load_backend("loader_fixture:TinyStore", make_context(), "w"); }),
      AllOf(HasSubstr("is an ownership store"), HasSubstr("needs a sandbox backend")));
}

TEST(PluginLoaderTest, AbiMismatchIsRefusedBeforeTheFactoryRuns) {
  const PluginLoader loader({kFixtureDir});
  // The fixture's factory aborts the process: reaching it would fail this test loudly.
  const std::string message =
      load_error([&] { loader.load_backend("abi_mismatch:FutureBackend", make_context(), "w"); });
  EXPECT_THAT(message, AllOf(HasSubstr("built for sandboxd SDK ABI 999"),
                             HasSubstr("this host uses ABI " + std::to_string(kSdkAbiVersion)),
                             HasSubstr("abi_mismatch.so"), HasSubstr("rebuild")));
  EXPECT_THAT(message, HasSubstr("abi_mismatch.so, version 7.1.0)"))
      << "the error names the plugin's own version, from its metadata record";
}

// A plugin's version is its metadata's (sandboxd_add_plugin defines it from the project's
// version); one built before versions were recorded has none, and says so.
TEST(PluginLoaderTest, ListingShowsEachPluginsOwnVersion) {
  const PluginLoader loader({kFixtureDir});
  std::map<std::string, std::string> versions;
  for (const auto& info : loader.list()) versions[info.class_name] = info.version;
  EXPECT_EQ(versions["FutureBackend"], "7.1.0");
  EXPECT_EQ(versions["AbiTwoBackend"], "") << "a record without a version";
  EXPECT_EQ(versions["TinyStore"], SANDBOXD_PROJECT_VERSION) << "sandboxd_add_plugin's default";
}

// The ABI bump of issue 33 (2 → 3): a plugin of the previous SDK is refused in one sentence
// that names both versions.
TEST(PluginLoaderTest, APluginOfThePreviousAbiIsRefusedNamingBothVersions) {
  ASSERT_EQ(kSdkAbiVersion, 3u);
  const PluginLoader loader({kFixtureDir});
  const std::string message =
      load_error([&] { loader.load_backend("abi_mismatch:AbiTwoBackend", make_context(), "w"); });
  EXPECT_THAT(message, AllOf(HasSubstr("built for sandboxd SDK ABI 2,"),
                             HasSubstr("this host uses ABI 3"), HasSubstr("rebuild")));
}

TEST(PluginLoaderTest, FactoryExceptionMessageIsIncluded) {
  const PluginLoader loader({kFixtureDir});
  EXPECT_THAT(load_error([&] {
                loader.load_backend("loader_fixture:ThrowingBackend", make_context(), "w");
              }),
              AllOf(HasSubstr("'loader_fixture:ThrowingBackend' failed to start"),
                    HasSubstr("boom: the engine is on fire")));
}

TEST(PluginLoaderTest, RejectedConfigurationNamesFileKeyPathAndPlugin) {
  const PluginLoader loader({kFixtureDir});
  EXPECT_THAT(load_error([&] {
                loader.load_backend("loader_fixture:PickyBackend", make_context(R"({"size":0})"),
                                    "w");
              }),
              AllOf(HasSubstr("/etc/sandboxd/test.json: sandbox.backend.size: must be > 0"),
                    HasSubstr("rejected by plugin 'loader_fixture:PickyBackend'")));
  EXPECT_THAT(load_error([&] {
                loader.load_backend("loader_fixture:PickyBackend",
                                    make_context(R"({"size":"big"})"), "w");
              }),
              HasSubstr("sandbox.backend.size: expected an integer, got a string \"big\""));
}

TEST(PluginLoaderTest, LibraryStaysMappedWhileAnObjectItMadeIsAlive) {
  std::shared_ptr<SandboxBackend> backend;
  {
    const PluginLoader loader({kFixtureDir});
    backend = loader.load_backend("loader_fixture:EchoBackend", make_context(), "test");
  }
  void* still_mapped = dlopen(kFixturePath.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(still_mapped, nullptr) << "library unmapped while its object lives";
  dlclose(still_mapped);
  EXPECT_TRUE(backend->is_alive({}));  // the vtable is still there
  backend.reset();
  void* after = dlopen(kFixturePath.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_EQ(after, nullptr) << "library still mapped after its last object died";
  if (after) dlclose(after);
}

TEST(PluginLoaderTest, ListShowsEveryClassWithKindAbiAndPath) {
  const PluginLoader loader({kFixtureDir});
  std::map<std::string, PluginClassInfo> by_use;
  for (const auto& info : loader.list()) by_use[info.use_string()] = info;
  ASSERT_TRUE(by_use.count("loader_fixture:EchoBackend"));
  EXPECT_EQ(by_use["loader_fixture:EchoBackend"].kind, PluginKind::backend);
  EXPECT_EQ(by_use["loader_fixture:EchoBackend"].abi_version, kSdkAbiVersion);
  EXPECT_EQ(by_use["loader_fixture:EchoBackend"].path, kFixturePath);
  EXPECT_EQ(by_use["loader_fixture:EchoBackend"].description, "answers create with a fixed URL");
  ASSERT_TRUE(by_use.count("loader_fixture:TinyStore"));
  EXPECT_EQ(by_use["loader_fixture:TinyStore"].kind, PluginKind::ownership_store);
  ASSERT_TRUE(by_use.count("abi_mismatch:FutureBackend"));
  EXPECT_THAT(by_use["abi_mismatch:FutureBackend"].problem, HasSubstr("built for SDK ABI 999"));
  ASSERT_TRUE(by_use.count("abi_mismatch:OldBackend"));
  EXPECT_THAT(by_use["abi_mismatch:OldBackend"].problem, HasSubstr("no metadata record"));
  EXPECT_EQ(by_use.count("not_a_plugin:Foo"), 0u);
}

// Listing reads what a library declares from the file; it never maps it, so no static
// initialiser or factory of a plugin runs (issue 21: it used to dlopen every module).
TEST(PluginLoaderTest, ListingRunsNoPluginCode) {
  sandboxd::testing::TempDir tmp;
  const std::string marker = (tmp.path() / "ran").string();
  ScopedEnv env("SANDBOXD_TEST_STATIC_INIT_MARKER", marker);
  const PluginLoader loader({STATIC_INIT_PLUGIN_DIR});
  std::vector<PluginClassInfo> listed;
  for (auto& info : loader.list()) {
    if (info.module == "static_init") listed.push_back(info);
  }
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].use_string(), "static_init:MarkerBackend");
  EXPECT_EQ(listed[0].kind, PluginKind::backend);
  EXPECT_EQ(listed[0].abi_version, kSdkAbiVersion);
  EXPECT_EQ(listed[0].description, "writes a file when its library is loaded");
  EXPECT_EQ(listed[0].problem, "");
  EXPECT_FALSE(std::filesystem::exists(marker)) << "listing ran the plugin's static initialiser";
  // Loading it does run its code: the marker proves the plugin works as a probe.
  loader.load_backend("static_init:MarkerBackend", make_context(), "test");
  EXPECT_TRUE(std::filesystem::exists(marker));
}

}  // namespace
}  // namespace sandboxd::core
