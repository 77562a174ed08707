#include "sandboxd/core/paths.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

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

// mkdir with 0700 from the start, so a secret-bearing dir is never briefly group/world-readable.
void make_private_dir(const fs::path& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return;
  const int err = errno;
  if (err == EEXIST && fs::is_directory(fs::symlink_status(path))) return;
  throw fs::filesystem_error("cannot create directory", path,
                             std::error_code(err, std::generic_category()));
}

// A credential-tree directory with one lstat when it already exists, as it does on every
// conversation but a user's first: a symlink is refused, anything else that is not a directory
// is an error, and the mode is tightened to 0700 only when it is not already that. A missing
// one is made 0700 (whatever the umask).
void ensure_credential_dir(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err != ENOENT) {
      throw fs::filesystem_error("cannot inspect directory", path,
                                 std::error_code(err, std::generic_category()));
    }
    if (::mkdir(path.c_str(), 0700) == 0) {
      fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
      return;
    }
    const int mkdir_err = errno;
    // Made meanwhile by another acquisition: check what is there now.
    if (mkdir_err != EEXIST || ::lstat(path.c_str(), &st) != 0) {
      throw fs::filesystem_error("cannot create directory", path,
                                 std::error_code(mkdir_err, std::generic_category()));
    }
  }
  if (S_ISLNK(st.st_mode)) refuse_symlink(path);
  if (!S_ISDIR(st.st_mode)) {
    throw fs::filesystem_error("cannot create directory", path,
                               std::error_code(EEXIST, std::generic_category()));
  }
  if ((st.st_mode & 07777) != 0700) {
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::replace);
  }
}

[[noreturn]] void throw_errno(const char* what, const fs::path& path, int err) {
  throw fs::filesystem_error(what, path, std::error_code(err, std::generic_category()));
}

// Tightens everything below the open directory `dir_fd` (named `dir_path` in messages): a
// directory to 0700 before it is opened (so an unreadable one is fixed before it is listed), a
// regular file to 0600, each only when its mode differs; a symlink is refused before anything
// follows it (O_NOFOLLOW), any other file type too. Raw getdents64 and fstatat on the
// directory's descriptor: 4 syscalls per directory and 1 per entry, where
// std::filesystem::recursive_directory_iterator made 7 and 1 (this runs on every conversation).
void tighten_credential_dir(int parent_fd, const char* name, const fs::path& dir_path);

void tighten_credential_tree(int dir_fd, const fs::path& dir_path) {
  std::vector<char> buffer(16384);
  while (true) {
    const ssize_t got = ::getdents64(dir_fd, buffer.data(), buffer.size());
    if (got < 0) throw_errno("cannot list directory", dir_path, errno);
    if (got == 0) return;
    for (ssize_t offset = 0; offset < got;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buffer.data() + offset);
      offset += entry->d_reclen;
      const std::string_view name(entry->d_name);
      if (name == "." || name == "..") continue;
      const fs::path path = dir_path / name;
      struct stat st {};
      if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        throw_errno("cannot inspect", path, errno);
      }
      if (S_ISLNK(st.st_mode)) refuse_symlink(path);
      if (S_ISDIR(st.st_mode)) {
        if ((st.st_mode & 07777) != 0700 && ::fchmodat(dir_fd, entry->d_name, 0700, 0) != 0) {
          throw_errno("cannot set permissions", path, errno);
        }
        tighten_credential_dir(dir_fd, entry->d_name, path);
      } else if (S_ISREG(st.st_mode)) {
        if ((st.st_mode & 07777) != 0600 && ::fchmodat(dir_fd, entry->d_name, 0600, 0) != 0) {
          throw_errno("cannot set permissions", path, errno);
        }
      } else {
        throw std::runtime_error("Unsupported file type in Lark CLI credential tree: " +
                                 path.string());
      }
    }
  }
}

// Opens `name` under `parent_fd` (AT_FDCWD for a path) without following a symlink, walks it,
// closes it.
void tighten_credential_dir(int parent_fd, const char* name, const fs::path& dir_path) {
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open directory", dir_path, errno);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  tighten_credential_tree(fd, dir_path);
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
  // One mkdir per directory when its parent exists, as it does for a new conversation of a
  // known user once the thread and user-data directories are made first; the full walk of
  // create_directories only when a parent is missing or the directory is already there (it
  // also refuses a non-directory in the way).
  const auto make_dir = [](const fs::path& dir) {
    if (::mkdir(dir.c_str(), 0777) != 0) fs::create_directories(dir);
  };
  const fs::path user_data = dirs[0].parent_path();
  make_dir(user_data.parent_path());  // the thread's directory
  make_dir(user_data);
  for (const auto& dir : dirs) {
    make_dir(dir);
    fs::permissions(dir, fs::perms::all, fs::perm_options::replace);
  }
}

void Paths::ensure_lark_cli_credential_tree(const std::string& user_id) const {
  const fs::path root = user_integration_dir(user_id, std::string(kLarkCliIntegrationId));
  fs::create_directories(root.parent_path());
  ensure_credential_dir(root);
  for (const char* child : {"config", "data"}) ensure_credential_dir(root / child);
  tighten_credential_dir(AT_FDCWD, root.c_str(), root);
}

}  // namespace sandboxd::core
