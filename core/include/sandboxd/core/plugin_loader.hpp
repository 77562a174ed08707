// Loads plugin classes named by `use: "module:Class"` strings (Boost.DLL).
//
// Search order for a bare module name: the config's plugin_dirs, SANDBOXD_PLUGIN_PATH
// (colon-separated), the install directory, the build tree's plugin directory. A module that
// contains a '/' or ends in ".so" is a path to the library file.
//
// Listing reads descriptors only; no factory runs. The ABI version in a descriptor is checked
// before any factory is called. Every object a loaded library makes keeps that library mapped
// (its shared_ptr deleter holds the library) until the object is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/plugin.hpp"

namespace sandboxd::core {

// One sentence a user can act on: which use string, where it came from, what went wrong.
class PluginLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct UseString {
  std::string module;  // bare name or path
  std::string class_name;

  // `where` names the source for errors, e.g. "config.json: sandbox.backend.use".
  static UseString parse(const std::string& text, const std::string& where);
};

struct PluginClassInfo {
  std::string module;  // bare module name (file name without "lib" and ".so")
  std::string class_name;
  PluginKind kind = PluginKind::backend;
  std::uint32_t abi_version = 0;
  std::string version;  // the plugin's own ("unversioned", or "" from a record without one)
  std::string description;
  std::string path;     // the library file
  std::string problem;  // non-empty when the descriptor could not be used (why)

  std::string use_string() const { return module + ":" + class_name; }
};

class PluginLoader {
 public:
  // config_plugin_dirs come first in the search path (relative entries are taken as given).
  explicit PluginLoader(std::vector<std::string> config_plugin_dirs = {});

  // The directories searched for bare module names, in order, as this loader resolved them.
  const std::vector<std::string>& search_path() const { return search_path_; }

  // Every class exported by every module found on the search path (first module of a name
  // wins, as for loading). Unreadable libraries are reported with `problem` set.
  std::vector<PluginClassInfo> list() const;

  // Resolve `use`, check kind and ABI, run the factory. `where` names the source of the use
  // string for errors (e.g. "/etc/sandboxd.json: sandbox.backend.use").
  std::shared_ptr<SandboxBackend> load_backend(const std::string& use, const PluginContext& context,
                                               const std::string& where) const;
  std::shared_ptr<OwnershipStore> load_ownership_store(const std::string& use,
                                                       const PluginContext& context,
                                                       const std::string& where) const;

 private:
  std::vector<std::string> search_path_;
};

// Compiled-in locations (CMake sets them); exposed for `sandboxctl plugins` and tests.
std::string install_plugin_dir();
std::string build_plugin_dir();

}  // namespace sandboxd::core
