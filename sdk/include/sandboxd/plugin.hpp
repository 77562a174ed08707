// What a plugin library exports, and the one-line macros that export it.
//
//   class MyBackend : public sandboxd::SandboxBackend {
//    public:
//     explicit MyBackend(const sandboxd::PluginContext& context);
//     ...
//   };
//   SANDBOXD_EXPORT_BACKEND(MyBackend, "what it runs sandboxes on")
//
// The macro goes after the class, in the class's namespace. A config then selects the class
// with `"use": "<module>:MyBackend"`, where <module> is the library's file name without
// "lib" and ".so" (or a path to the library file).
//
// Each macro emits a plain descriptor whose first field is the SDK ABI version, under an
// unmangled name in the "sandboxd" section of the library, and a metadata record (ABI, kind,
// class, description as NUL-separated text) in the "sandboxd_meta" section. The host reads the
// records from the file itself, so listing plugins and checking a plugin's ABI run none of its
// code; it compares ABI versions again on the descriptor before it calls any factory.
#pragma once

#include <boost/dll/alias.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "sandboxd/abi.hpp"
#include "sandboxd/backend.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/ownership.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd {

// Everything the host hands a plugin's constructor.
struct PluginContext {
  std::string config_json = "{}";  // the plugin's own section, as a JSON object
  std::string config_key_path;     // where that section sits, e.g. "sandbox.backend"
  std::string config_file;         // the file it came from ("" when built in code)
  std::string owner_id;            // this provider instance's lease identity ({host}:{hex})
  std::string base_dir;            // the provider's base directory (for default file paths)
  std::shared_ptr<Logger> logger;  // never null
  std::shared_ptr<Clock> clock;    // never null
  // Host facts a backend may forward (remote provisioner); both optional.
  std::function<std::string()> ambient_user_id;
  std::function<bool(const std::string& user_id)> user_should_see_legacy_skills;

  PluginConfig options() const { return PluginConfig(config_json, config_key_path); }
};

enum class PluginKind : std::uint32_t { backend = 1, ownership_store = 2 };

inline const char* to_string(PluginKind kind) {
  return kind == PluginKind::backend ? "backend" : "ownership";
}

// Layout is frozen: abi_version stays the first field in every future SDK, so a host can
// always read it before trusting the rest.
struct PluginDescriptor {
  std::uint32_t abi_version;
  std::uint32_t kind;  // a PluginKind
  const char* class_name;
  const char* description;
  SandboxBackend* (*create_backend)(const PluginContext&);          // kind == backend
  OwnershipStore* (*create_ownership_store)(const PluginContext&);  // kind == ownership_store
};

// The metadata section, and the first field of each record in it.
inline constexpr const char* kMetadataSection = "sandboxd_meta";
inline constexpr const char* kMetadataRecordStart = "sandboxd-plugin";

// Prefix of the exported alias names; the rest is the class name.
inline constexpr const char* kDescriptorSymbolPrefix = "sandboxd_plugin_";
// Section holding the aliases (at most 8 characters, a Boost.DLL limit).
inline constexpr const char* kDescriptorSection = "sandboxd";

}  // namespace sandboxd

// The plugin's own version, recorded beside its ABI (`sandboxctl plugins` shows it, load errors
// name it). sandboxd_add_plugin(... VERSION x.y.z) defines it; a plugin built without it says
// "unversioned". Not part of the ABI: hosts that do not know the field skip it.
#ifndef SANDBOXD_PLUGIN_VERSION
#define SANDBOXD_PLUGIN_VERSION "unversioned"
#endif

#define SANDBOXD_DETAIL_TEXT2(x) #x
#define SANDBOXD_DETAIL_TEXT(x) SANDBOXD_DETAIL_TEXT2(x)
// One metadata record:
// "sandboxd-plugin\0abi=N\0kind=K\0class=C\0description=D\0version=V\0".
#define SANDBOXD_DETAIL_METADATA(Class, KindText, Description)                                    \
  extern "C" __attribute__((used, section("sandboxd_meta"), aligned(1)))                          \
  const char sandboxd_meta_##Class[] = "sandboxd-plugin\0abi=" SANDBOXD_DETAIL_TEXT(              \
      SANDBOXD_SDK_ABI_VERSION) "\0kind=" KindText "\0class=" #Class "\0description=" Description \
                                "\0version=" SANDBOXD_PLUGIN_VERSION "\0";

#define SANDBOXD_DETAIL_EXPORT(Class, KindValue, Description, BackendFactory, StoreFactory) \
  extern "C" const ::sandboxd::PluginDescriptor sandboxd_descriptor_##Class;                \
  const ::sandboxd::PluginDescriptor sandboxd_descriptor_##Class = {                        \
      ::sandboxd::kSdkAbiVersion,                                                           \
      static_cast<std::uint32_t>(KindValue),                                                \
      #Class,                                                                               \
      Description,                                                                          \
      BackendFactory,                                                                       \
      StoreFactory};                                                                        \
  BOOST_DLL_ALIAS_SECTIONED(sandboxd_descriptor_##Class, sandboxd_plugin_##Class, sandboxd)

// Registers a SandboxBackend subclass constructible from `const PluginContext&`.
#define SANDBOXD_EXPORT_BACKEND(Class, Description)                           \
  SANDBOXD_DETAIL_METADATA(Class, "backend", Description)                     \
  SANDBOXD_DETAIL_EXPORT(                                                     \
      Class, ::sandboxd::PluginKind::backend, Description,                    \
      [](const ::sandboxd::PluginContext& c) -> ::sandboxd::SandboxBackend* { \
        return new Class(c);                                                  \
      },                                                                      \
      nullptr)

// Registers an OwnershipStore subclass constructible from `const PluginContext&`.
#define SANDBOXD_EXPORT_OWNERSHIP_STORE(Class, Description)                                      \
  SANDBOXD_DETAIL_METADATA(Class, "ownership_store", Description)                                \
  SANDBOXD_DETAIL_EXPORT(Class, ::sandboxd::PluginKind::ownership_store, Description, nullptr,   \
                         [](const ::sandboxd::PluginContext& c) -> ::sandboxd::OwnershipStore* { \
                           return new Class(c);                                                  \
                         })
