// Plugin loading through Boost.DLL (see plugin_loader.hpp for the contract).
#include "sandboxd/core/plugin_loader.hpp"

#include <algorithm>
#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "plugin_metadata.hpp"

namespace sandboxd::core {
namespace {

namespace fs = std::filesystem;

bool is_identifier(const std::string& text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

bool names_a_file(const std::string& module) {
  return module.find('/') != std::string::npos ||
         (module.size() > 3 && module.compare(module.size() - 3, 3, ".so") == 0);
}

// "libfoo.so" and "foo.so" both name module "foo".
std::string module_name_of(const fs::path& file) {
  std::string stem = file.stem().string();
  if (stem.rfind("lib", 0) == 0 && stem.size() > 3) stem = stem.substr(3);
  return stem;
}

// Class names exported by a library, read from its "sandboxd" section without loading it.
// Throws std::exception when the file is not a readable shared library.
std::vector<std::string> exported_classes(const std::string& path) {
  boost::dll::library_info info(path);
  std::vector<std::string> classes;
  const std::string prefix = kDescriptorSymbolPrefix;
  for (const std::string& symbol : info.symbols(kDescriptorSection)) {
    if (symbol.rfind(prefix, 0) == 0) classes.push_back(symbol.substr(prefix.size()));
  }
  return classes;
}

const char* kind_phrase(PluginKind kind) {
  return kind == PluginKind::backend ? "a sandbox backend" : "an ownership store";
}

// A loaded library plus the descriptor of one class in it, ABI already checked.
struct ResolvedClass {
  std::shared_ptr<boost::dll::shared_library> library;
  const PluginDescriptor* descriptor = nullptr;
  std::string path;
};

std::shared_ptr<boost::dll::shared_library> open_library(const std::string& path,
                                                         const std::string& context) {
  try {
    return std::make_shared<boost::dll::shared_library>(
        path, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginLoadError(context + ": cannot load " + path + ": " + e.what());
  }
}

}  // namespace

UseString UseString::parse(const std::string& text, const std::string& where) {
  const auto colon = text.rfind(':');
  const auto fail = [&](const std::string& why) -> UseString {
    throw PluginLoadError(where + ": malformed use string '" + text + "': " + why +
                          " (expected \"module:Class\", e.g. "
                          "\"ownership_sqlite:SqliteOwnershipStore\")");
  };
  if (colon == std::string::npos) return fail("no ':' between module and class");
  UseString use{text.substr(0, colon), text.substr(colon + 1)};
  if (use.module.empty()) return fail("the module part is empty");
  if (use.class_name.empty()) return fail("the class part is empty");
  if (!is_identifier(use.class_name)) {
    return fail("'" + use.class_name + "' is not a C++ class name");
  }
  return use;
}

std::string install_plugin_dir() {
  return SANDBOXD_INSTALL_PLUGIN_DIR;
}
std::string build_plugin_dir() {
  return SANDBOXD_BUILD_PLUGIN_DIR;
}

PluginLoader::PluginLoader(std::vector<std::string> config_plugin_dirs) {
  std::set<std::string> seen;
  const auto add = [&](const std::string& dir) {
    if (!dir.empty() && seen.insert(dir).second) search_path_.push_back(dir);
  };
  for (const auto& dir : config_plugin_dirs) add(dir);
  if (const char* env = std::getenv("SANDBOXD_PLUGIN_PATH")) {
    std::stringstream parts(env);
    std::string dir;
    while (std::getline(parts, dir, ':')) add(dir);
  }
  add(install_plugin_dir());
  add(build_plugin_dir());
}

std::vector<PluginClassInfo> PluginLoader::list() const {
  // Everything comes from the library files themselves (their symbol tables and metadata
  // sections): no library is mapped, so no plugin code runs.
  std::vector<PluginClassInfo> out;
  std::set<std::string> modules_seen;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      const std::string module = module_name_of(file);
      std::vector<std::string> classes;
      try {
        classes = exported_classes(file.string());
      } catch (const std::exception&) {
        continue;  // not a shared library we can read: not a plugin
      }
      if (classes.empty() || !modules_seen.insert(module).second) continue;
      std::map<std::string, PluginMetadata> metadata;
      std::string read_problem;
      try {
        for (auto& record : read_plugin_metadata(file.string())) {
          metadata.emplace(record.class_name, std::move(record));
        }
      } catch (const std::exception& e) {
        read_problem = e.what();
      }
      for (const auto& class_name : classes) {
        PluginClassInfo info;
        info.module = module;
        info.class_name = class_name;
        info.path = file.string();
        info.problem = read_problem;
        auto record = metadata.find(class_name);
        if (record == metadata.end()) {
          if (info.problem.empty()) {
            info.problem =
                "no metadata record (built against an SDK older than this host's "
                "ABI " +
                std::to_string(kSdkAbiVersion) + "; rebuild it)";
          }
        } else {
          info.abi_version = record->second.abi_version;
          info.version = record->second.version;
          if (record->second.abi_version != kSdkAbiVersion) {
            info.problem = "built for SDK ABI " + std::to_string(record->second.abi_version) +
                           ", this host uses ABI " + std::to_string(kSdkAbiVersion);
          } else if (record->second.kind != "backend" && record->second.kind != "ownership_store") {
            info.problem = "declares an unknown kind '" + record->second.kind + "'";
          } else {
            info.kind = record->second.kind == "backend" ? PluginKind::backend
                                                         : PluginKind::ownership_store;
            info.description = record->second.description;
          }
        }
        out.push_back(std::move(info));
      }
    }
  }
  return out;
}

namespace {

// Finds the library, checks the class is exported, its ABI and its kind. Throws
// PluginLoadError with one actionable sentence.
ResolvedClass resolve(const std::vector<std::string>& search_path, const std::string& use_text,
                      PluginKind expected_kind, const std::string& where) {
  const UseString use = UseString::parse(use_text, where);
  std::string path;
  if (names_a_file(use.module)) {
    std::error_code ec;
    if (!fs::is_regular_file(use.module, ec)) {
      throw PluginLoadError(where + ": plugin library '" + use.module + "' (from use string '" +
                            use_text + "') does not exist or is not a file");
    }
    path = use.module;
  } else {
    for (const auto& dir : search_path) {
      for (const auto& name : {use.module + ".so", "lib" + use.module + ".so"}) {
        std::error_code ec;
        const fs::path candidate = fs::path(dir) / name;
        if (fs::is_regular_file(candidate, ec)) {
          path = candidate.string();
          break;
        }
      }
      if (!path.empty()) break;
    }
    if (path.empty()) {
      throw PluginLoadError(where + ": plugin module '" + use.module + "' (from use string '" +
                            use_text + "') was not found; searched: " + join(search_path, ", ") +
                            " (add its directory to sandbox.plugin_dirs or SANDBOXD_PLUGIN_PATH)");
    }
  }

  std::vector<std::string> classes;
  try {
    classes = exported_classes(path);
  } catch (const std::exception& e) {
    throw PluginLoadError(where + ": " + path + " is not a readable shared library: " + e.what());
  }
  if (std::find(classes.begin(), classes.end(), use.class_name) == classes.end()) {
    throw PluginLoadError(
        where + ": module '" + use.module + "' (" + path + ") does not export a class '" +
        use.class_name + "'; it exports: " +
        (classes.empty() ? std::string("nothing (not a sandboxd plugin)") : join(classes, ", ")));
  }

  // The file's own metadata first: a plugin built for another ABI is refused without mapping
  // it, so none of its code runs (a library without metadata is checked on its descriptor).
  try {
    for (const PluginMetadata& record : read_plugin_metadata(path)) {
      if (record.class_name == use.class_name && record.abi_version != kSdkAbiVersion) {
        throw PluginLoadError(
            where + ": plugin '" + use_text + "' (" + path +
            (record.version.empty() ? std::string() : ", version " + record.version) +
            ") was built for sandboxd SDK ABI " + std::to_string(record.abi_version) +
            ", but this host uses ABI " + std::to_string(kSdkAbiVersion) +
            "; rebuild the plugin against this SDK");
      }
    }
  } catch (const PluginLoadError&) {
    throw;
  } catch (const std::exception& e) {
    throw PluginLoadError(where + ": " + e.what());
  }

  ResolvedClass resolved;
  resolved.path = path;
  resolved.library = open_library(path, where);
  resolved.descriptor = &resolved.library->get_alias<const PluginDescriptor>(
      kDescriptorSymbolPrefix + use.class_name);
  // The ABI version is the only field trusted before this check.
  if (resolved.descriptor->abi_version != kSdkAbiVersion) {
    throw PluginLoadError(
        where + ": plugin '" + use_text + "' (" + path + ") was built for sandboxd SDK ABI " +
        std::to_string(resolved.descriptor->abi_version) + ", but this host uses ABI " +
        std::to_string(kSdkAbiVersion) + "; rebuild the plugin against this SDK");
  }
  const auto kind = static_cast<PluginKind>(resolved.descriptor->kind);
  if (kind != PluginKind::backend && kind != PluginKind::ownership_store) {
    throw PluginLoadError(where + ": plugin '" + use_text + "' (" + path +
                          ") declares an unknown kind " +
                          std::to_string(resolved.descriptor->kind));
  }
  if (kind != expected_kind) {
    throw PluginLoadError(where + ": '" + use_text + "' is " + kind_phrase(kind) +
                          ", but this setting needs " + kind_phrase(expected_kind));
  }
  return resolved;
}

// Runs a factory, turning its exceptions into one sentence that names the plugin.
template <typename Interface, typename Factory>
std::shared_ptr<Interface> construct(const ResolvedClass& resolved, Factory factory,
                                     const std::string& use_text, const PluginContext& context,
                                     const std::string& where) {
  if (factory == nullptr) {
    throw PluginLoadError(where + ": plugin '" + use_text + "' (" + resolved.path +
                          ") exports no factory for its kind");
  }
  Interface* raw = nullptr;
  try {
    raw = factory(context);
  } catch (const PluginConfigError& e) {
    const std::string file = context.config_file.empty() ? "" : context.config_file + ": ";
    throw PluginLoadError(file + e.what() + " (rejected by plugin '" + use_text + "')");
  } catch (const std::exception& e) {
    throw PluginLoadError(where + ": plugin '" + use_text + "' failed to start: " + e.what());
  }
  if (raw == nullptr) {
    throw PluginLoadError(where + ": plugin '" + use_text + "' returned no object");
  }
  // The deleter keeps the library mapped until the object (and its vtable) is gone.
  auto library = resolved.library;
  return std::shared_ptr<Interface>(raw, [library](Interface* object) { delete object; });
}

}  // namespace

std::shared_ptr<SandboxBackend> PluginLoader::load_backend(const std::string& use,
                                                           const PluginContext& context,
                                                           const std::string& where) const {
  const ResolvedClass resolved = resolve(search_path_, use, PluginKind::backend, where);
  return construct<SandboxBackend>(resolved, resolved.descriptor->create_backend, use, context,
                                   where);
}

std::shared_ptr<OwnershipStore> PluginLoader::load_ownership_store(const std::string& use,
                                                                   const PluginContext& context,
                                                                   const std::string& where) const {
  const ResolvedClass resolved = resolve(search_path_, use, PluginKind::ownership_store, where);
  return construct<OwnershipStore>(resolved, resolved.descriptor->create_ownership_store, use,
                                   context, where);
}

}  // namespace sandboxd::core
