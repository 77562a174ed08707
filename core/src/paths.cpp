#include "sandboxd/core/paths.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "sandboxd/host_path.hpp"

namespace fs = std::filesystem;

namespace sandboxd::core {
namespace {

std::optional<std::string> non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// Like Python's Path.resolve(strict=False): absolute, symlinks and ".." resolved as far as the
// path exists, no trailing separator.
fs::path resolve_path(const fs::path& path) {
  fs::path resolved = fs::weakly_canonical(fs::absolute(path));
  if (!resolved.has_filename() && resolved.has_relative_path()) resolved = resolved.parent_path();
  return resolved;
}

bool is_ascii_alpha(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
bool is_ascii_alnum(char c) {
  return is_ascii_alpha(c) || (c >= '0' && c <= '9');
}

bool is_safe_id(std::string_view id, bool allow_dot) {
  if (id.empty()) return false;
  for (char c : id) {
    if (!is_ascii_alnum(c) && c != '_' && c != '-' && !(allow_dot && c == '.')) return false;
  }
  return true;
}

const std::string& validate_short_id(const std::string& id, const char* what) {
  if (id.size() > 64 || !is_safe_id(id, false)) {
    throw std::invalid_argument(std::string("Invalid ") + what +
                                ": expected 1-64 ASCII letters, digits, hyphens, or underscores, "
                                "got " +
                                python_repr(id));
  }
  return id;
}

[[noreturn]] void refuse_symlink(const fs::path& path) {
  throw std::runtime_error("Lark CLI credential path must not be a symlink: " + path.string());
}

void check_not_symlink(const fs::path& path) {
  if (fs::is_symlink(fs::symlink_status(path))) refuse_symlink(path);
}

// mkdir with 0700 from the start, so a secret-bearing dir is never briefly group/world-readable.
void make_private_dir(const fs::path& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return;
  const int err = errno;
  if (err == EEXIST && fs::is_directory(fs::symlink_status(path))) return;
  throw fs::filesystem_error("cannot create directory", path,
                             std::error_code(err, std::generic_category()));
}

}  // namespace

void ensure_private_dir(const fs::path& dir) {
  if (fs::is_directory(dir)) return;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path());
  make_private_dir(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);  // whatever the umask
}

fs::path resolve_base_dir(std::optional<std::string> explicit_dir) {
  if (explicit_dir && !explicit_dir->empty()) return resolve_path(*explicit_dir);
  if (auto home = non_empty_env("DEER_FLOW_HOME")) return resolve_path(*home);
  fs::path project_root;
  if (auto root = non_empty_env("DEER_FLOW_PROJECT_ROOT")) {
    std::error_code ec;
    if (!fs::is_directory(*root, ec)) {
      throw std::invalid_argument("DEER_FLOW_PROJECT_ROOT is set to " + python_repr(*root) +
                                  ", which is not an existing directory");
    }
    project_root = *root;
  } else {
    project_root = fs::current_path();
  }
  return resolve_path(project_root / ".deer-flow");
}

std::string host_base_dir(const fs::path& base_dir) {
  if (auto host = non_empty_env("DEER_FLOW_HOST_BASE_DIR")) return *host;
  return base_dir.string();
}

std::string python_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", byte);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back(quote);
  return out;
}

const std::string& validate_thread_id(const std::string& thread_id) {
  return validate_short_id(thread_id, "thread_id");
}

const std::string& validate_sandbox_id(const std::string& sandbox_id) {
  return validate_short_id(sandbox_id, "sandbox_id");
}

const std::string& validate_user_id(const std::string& user_id) {
  if (!is_safe_id(user_id, false)) {
    throw std::invalid_argument("Invalid user_id " + python_repr(user_id) +
                                ": only alphanumeric characters, hyphens, and underscores are "
                                "allowed.");
  }
  return user_id;
}

const std::string& validate_integration_id(const std::string& integration_id) {
  if (integration_id == "." || integration_id == "..") {
    throw std::invalid_argument("Invalid integration_id " + python_repr(integration_id) +
                                ": must not be '.' or '..'.");
  }
  if (!is_safe_id(integration_id, true)) {
    throw std::invalid_argument("Invalid integration_id " + python_repr(integration_id) +
                                ": only alphanumeric characters, dots, hyphens, and underscores "
                                "are allowed.");
  }
  return integration_id;
}

std::string join_host_path(std::string_view base, std::initializer_list<std::string_view> parts) {
  return sandboxd::join_host_path(base, std::vector<std::string_view>(parts));
}

std::string join_host_path(std::string_view base, const std::vector<std::string>& parts) {
  return sandboxd::join_host_path(base, std::vector<std::string_view>(parts.begin(), parts.end()));
}

// ── Paths ──

Paths::Paths(fs::path base_dir, std::string host_base_dir)
    : base_dir_(std::move(base_dir)), host_base_dir_(std::move(host_base_dir)) {}

Paths Paths::from_environment(std::optional<std::string> explicit_dir) {
  fs::path base = resolve_base_dir(std::move(explicit_dir));
  std::string host = core::host_base_dir(base);
  return Paths(std::move(base), std::move(host));
}

std::vector<std::string> Paths::thread_parts(const std::string& thread_id,
                                             const std::optional<std::string>& user_id) const {
  if (user_id)
    return {"users", validate_user_id(*user_id), "threads", validate_thread_id(thread_id)};
  return {"threads", validate_thread_id(thread_id)};
}

fs::path Paths::user_dir(const std::string& user_id) const {
  return base_dir_ / "users" / validate_user_id(user_id);
}

fs::path Paths::thread_dir(const std::string& thread_id,
                           const std::optional<std::string>& user_id) const {
  fs::path dir = base_dir_;
  for (const auto& part : thread_parts(thread_id, user_id)) dir /= part;
  return dir;
}

fs::path Paths::sandbox_user_data_dir(const std::string& thread_id,
                                      const std::optional<std::string>& user_id) const {
  return thread_dir(thread_id, user_id) / "user-data";
}

fs::path Paths::sandbox_work_dir(const std::string& thread_id,
                                 const std::optional<std::string>& user_id) const {
  return sandbox_user_data_dir(thread_id, user_id) / "workspace";
}

fs::path Paths::sandbox_uploads_dir(const std::string& thread_id,
                                    const std::optional<std::string>& user_id) const {
  return sandbox_user_data_dir(thread_id, user_id) / "uploads";
}

fs::path Paths::sandbox_outputs_dir(const std::string& thread_id,
                                    const std::optional<std::string>& user_id) const {
  return sandbox_user_data_dir(thread_id, user_id) / "outputs";
}

fs::path Paths::upload_conversions_dir(const std::string& thread_id,
                                       const std::optional<std::string>& user_id) const {
  return sandbox_user_data_dir(thread_id, user_id) / ".upload-conversions";
}

fs::path Paths::acp_workspace_dir(const std::string& thread_id,
                                  const std::optional<std::string>& user_id) const {
  return thread_dir(thread_id, user_id) / "acp-workspace";
}

fs::path Paths::lock_file(const std::string& thread_id, const std::optional<std::string>& user_id,
                          const std::string& sandbox_id) const {
  return thread_dir(thread_id, user_id) / (validate_sandbox_id(sandbox_id) + ".lock");
}

fs::path Paths::public_skills_view_dir() const {
  return base_dir_ / "skills_view" / "public";
}

fs::path Paths::user_custom_skills_view_dir(const std::string& user_id) const {
  return user_dir(user_id) / "skills_view" / "custom";
}

fs::path Paths::user_legacy_skills_view_dir(const std::string& user_id) const {
  return user_dir(user_id) / "skills_view" / "legacy";
}

fs::path Paths::user_integration_skills_view_dir(const std::string& user_id) const {
  return user_dir(user_id) / "skills_view" / "integrations";
}

fs::path Paths::user_integration_dir(const std::string& user_id,
                                     const std::string& integration_id) const {
  return user_dir(user_id) / "integrations" / validate_integration_id(integration_id);
}

fs::path Paths::user_integration_config_dir(const std::string& user_id,
                                            const std::string& integration_id) const {
  return user_integration_dir(user_id, integration_id) / "config";
}

fs::path Paths::user_integration_data_dir(const std::string& user_id,
                                          const std::string& integration_id) const {
  return user_integration_dir(user_id, integration_id) / "data";
}

fs::path Paths::integration_sandbox_cli_dir(const std::string& integration_id) const {
  return base_dir_ / "integrations" / validate_integration_id(integration_id) / "sandbox-cli";
}

std::string Paths::host_thread_dir(const std::string& thread_id,
                                   const std::optional<std::string>& user_id) const {
  return join_host_path(host_base_dir_, thread_parts(thread_id, user_id));
}

std::string Paths::host_sandbox_user_data_dir(const std::string& thread_id,
                                              const std::optional<std::string>& user_id) const {
  return join_host_path(host_thread_dir(thread_id, user_id), {"user-data"});
}

std::string Paths::host_sandbox_work_dir(const std::string& thread_id,
                                         const std::optional<std::string>& user_id) const {
  return join_host_path(host_sandbox_user_data_dir(thread_id, user_id), {"workspace"});
}

std::string Paths::host_sandbox_uploads_dir(const std::string& thread_id,
                                            const std::optional<std::string>& user_id) const {
  return join_host_path(host_sandbox_user_data_dir(thread_id, user_id), {"uploads"});
}

std::string Paths::host_sandbox_outputs_dir(const std::string& thread_id,
                                            const std::optional<std::string>& user_id) const {
  return join_host_path(host_sandbox_user_data_dir(thread_id, user_id), {"outputs"});
}

std::string Paths::host_upload_conversions_dir(const std::string& thread_id,
                                               const std::optional<std::string>& user_id) const {
  return join_host_path(host_sandbox_user_data_dir(thread_id, user_id), {".upload-conversions"});
}

std::string Paths::host_acp_workspace_dir(const std::string& thread_id,
                                          const std::optional<std::string>& user_id) const {
  return join_host_path(host_thread_dir(thread_id, user_id), {"acp-workspace"});
}

std::string Paths::host_public_skills_view_dir() const {
  return join_host_path(host_base_dir_, {"skills_view", "public"});
}

std::string Paths::host_user_custom_skills_view_dir(const std::string& user_id) const {
  return join_host_path(host_base_dir_,
                        {"users", validate_user_id(user_id), "skills_view", "custom"});
}

std::string Paths::host_user_legacy_skills_view_dir(const std::string& user_id) const {
  return join_host_path(host_base_dir_,
                        {"users", validate_user_id(user_id), "skills_view", "legacy"});
}

std::string Paths::host_user_integration_skills_view_dir(const std::string& user_id) const {
  return join_host_path(host_base_dir_,
                        {"users", validate_user_id(user_id), "skills_view", "integrations"});
}

std::string Paths::host_user_integration_config_dir(const std::string& user_id,
                                                    const std::string& integration_id) const {
  return join_host_path(host_base_dir_, {"users", validate_user_id(user_id), "integrations",
                                         validate_integration_id(integration_id), "config"});
}

std::string Paths::host_user_integration_data_dir(const std::string& user_id,
                                                  const std::string& integration_id) const {
  return join_host_path(host_base_dir_, {"users", validate_user_id(user_id), "integrations",
                                         validate_integration_id(integration_id), "data"});
}

std::string Paths::host_integration_sandbox_cli_dir(const std::string& integration_id) const {
  return join_host_path(host_base_dir_,
                        {"integrations", validate_integration_id(integration_id), "sandbox-cli"});
}

namespace {
thread_local const Paths::ThreadDirsEnsured* innermost_ensured_scope = nullptr;
}  // namespace

Paths::ThreadDirsEnsured::ThreadDirsEnsured(std::string thread_id,
                                            std::optional<std::string> user_id)
    : thread_id_(std::move(thread_id)),
      user_id_(std::move(user_id)),
      outer_(innermost_ensured_scope) {
  innermost_ensured_scope = this;
}

Paths::ThreadDirsEnsured::~ThreadDirsEnsured() {
  innermost_ensured_scope = outer_;
}

bool Paths::ThreadDirsEnsured::covers(const std::string& thread_id,
                                      const std::optional<std::string>& user_id) {
  for (const ThreadDirsEnsured* scope = innermost_ensured_scope; scope; scope = scope->outer_) {
    if (scope->thread_id_ == thread_id && scope->user_id_ == user_id) return true;
  }
  return false;
}

void Paths::ensure_thread_dirs(const std::string& thread_id,
                               const std::optional<std::string>& user_id) const {
  if (ThreadDirsEnsured::covers(thread_id, user_id)) return;
  const fs::path dirs[] = {
      sandbox_work_dir(thread_id, user_id),    sandbox_uploads_dir(thread_id, user_id),
      sandbox_outputs_dir(thread_id, user_id), upload_conversions_dir(thread_id, user_id),
      acp_workspace_dir(thread_id, user_id),
  };
  for (const auto& dir : dirs) {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::all, fs::perm_options::replace);
  }
}

void Paths::ensure_lark_cli_credential_tree(const std::string& user_id) const {
  const fs::path root = user_integration_dir(user_id, std::string(kLarkCliIntegrationId));
  check_not_symlink(root);
  fs::create_directories(root.parent_path());
  make_private_dir(root);
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
  for (const char* child : {"config", "data"}) {
    const fs::path required = root / child;
    check_not_symlink(required);
    make_private_dir(required);
  }
  // The iterator does not follow directory symlinks, and each one is refused before any
  // descent; dirs are tightened as they are met so an unreadable subdir is fixed before it is
  // listed.
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path& path = it->path();
    const fs::file_status status = it->symlink_status();
    if (fs::is_symlink(status)) refuse_symlink(path);
    if (fs::is_directory(status)) {
      fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
    } else if (fs::is_regular_file(status)) {
      fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write,
                      fs::perm_options::replace);
    } else {
      throw std::runtime_error("Unsupported file type in Lark CLI credential tree: " +
                               path.string());
    }
  }
}

}  // namespace sandboxd::core
