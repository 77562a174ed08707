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

#include "sandboxd/host_fs.hpp"
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
  host_fs::require_trusted_links(path, "state directory");
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

using host_fs::throw_errno;
using host_fs::UniqueFd;

// The base directory as a descriptor to walk from, made when missing. It is the operator's (its
// trust is checked where a host adopts it as its state directory), so links in its own path
// are followed; nothing below it is.
UniqueFd open_base_dir(const fs::path& base) {
  const int fd = ::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) return UniqueFd(fd);
  if (errno != ENOENT) throw_errno("cannot open directory", base, errno);
  fs::create_directories(base);
  return host_fs::open_trusted_dir(base);
}

// A credential-tree directory (the root, config, data) under `parent`: made 0700 when missing,
// tightened to 0700 when not, a link refused with the reference's sentence.
UniqueFd open_credential_dir(int parent, const std::string& name, const fs::path& shown) {
  try {
    return host_fs::open_subdir(parent, name, shown, {.create_mode = 0700, .exact_mode = 0700});
  } catch (const host_fs::UnsafePathError&) {
    struct stat st {};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      refuse_symlink(shown);
    }
    throw fs::filesystem_error("cannot create directory", shown,
                               std::error_code(EEXIST, std::generic_category()));
  }
}

// Tightens everything below an open credential directory: each directory to 0700 (before it is
// listed, so an unreadable one is fixed first), each regular file to 0600, a link or any other
// type refused. The entry's type is read with fstatat(NOFOLLOW); an entry that needs a change
// (or, for a directory, a descent) is then opened with O_NOFOLLOW and checked again on that
// descriptor, and the change is made to it: a sandbox swapping the name for a link in between
// gets its link refused, never followed. An entry already right costs one fstatat.
class CredentialWalk {
 public:
  explicit CredentialWalk(CredentialTreeReport& report) : report_(report) {}

  void walk(int dir_fd, const fs::path& dir_path, int depth) {
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
        if (report_.entries >= kCredentialWalkMaxEntries) {
          stop_early("it holds more than " + std::to_string(kCredentialWalkMaxEntries) +
                     " entries; the walk stopped in " + dir_path.string());
          return;
        }
        ++report_.entries;
        visit(dir_fd, entry->d_name, dir_path / name, depth);
      }
    }
  }

 private:
  void visit(int dir_fd, const char* name, const fs::path& path, int depth) {
    struct stat st {};
    if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return;  // gone meanwhile: nothing to tighten
      throw_errno("cannot inspect", path, errno);
    }
    if (S_ISLNK(st.st_mode)) refuse_symlink(path);
    if (S_ISDIR(st.st_mode)) {
      if (depth + 1 > kCredentialWalkMaxDepth) {
        stop_early("it is deeper than " + std::to_string(kCredentialWalkMaxDepth) +
                   " levels; nothing below " + path.parent_path().string() + " was changed");
        return;
      }
      UniqueFd held(::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!held) throw_errno("cannot open", path, errno);
      const struct stat now = host_fs::stat_of(held.get(), path);
      if (S_ISLNK(now.st_mode)) refuse_symlink(path);
      if (!S_ISDIR(now.st_mode)) unsupported(path);
      if ((now.st_mode & 07777) != 0700) host_fs::set_mode(held.get(), 0700, path);
      // Reopened through the held descriptor itself, never by name again.
      UniqueFd listing(::openat(held.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!listing) throw_errno("cannot open directory", path, errno);
      walk(listing.get(), path, depth + 1);
      return;
    }
    if (!S_ISREG(st.st_mode)) unsupported(path);
    if ((st.st_mode & 07777) == 0600) return;
    UniqueFd held(::openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!held) {
      if (errno == ENOENT) return;
      throw_errno("cannot open", path, errno);
    }
    const struct stat now = host_fs::stat_of(held.get(), path);
    if (S_ISLNK(now.st_mode)) refuse_symlink(path);
    if (!S_ISREG(now.st_mode)) unsupported(path);
    if ((now.st_mode & 07777) != 0600) host_fs::set_mode(held.get(), 0600, path);
  }

  [[noreturn]] static void unsupported(const fs::path& path) {
    throw std::runtime_error("Unsupported file type in Lark CLI credential tree: " + path.string());
  }

  void stop_early(std::string why) {
    if (!report_.complete) return;  // the first bound met is the one reported
    report_.complete = false;
    report_.note = std::move(why);
  }

  CredentialTreeReport& report_;
};

}  // namespace

void ensure_private_dir(const fs::path& dir) {
  host_fs::ensure_trusted_dir(fs::absolute(dir), "state directory");
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
  if (user_id.size() > kMaxUserIdLength) {
    // The value is echoed only in part: a megabyte of it helps nobody in a log line.
    throw std::invalid_argument("Invalid user_id " + python_repr(user_id.substr(0, 32)) + "... (" +
                                std::to_string(user_id.size()) + " characters): at most " +
                                std::to_string(kMaxUserIdLength) + " characters are allowed.");
  }
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
  const UniqueFd base = open_base_dir(base_dir_);
  // The thread's directory and user-data are made as mkdir makes them (0777 minus the umask);
  // the five the sandbox writes are then made exactly 0777, each on its own descriptor.
  const host_fs::DirOptions parent{.create_mode = 0777};
  std::vector<std::string> parts = thread_parts(thread_id, user_id);
  const std::string leaf = parts.back();
  parts.pop_back();
  const fs::path thread_path = this->thread_dir(thread_id, user_id);
  const UniqueFd threads = host_fs::open_dirs(base.get(), parts, base_dir_, parent);
  // A new conversation's directory is made bounded when a bound is set (thread_storage.hpp);
  // one that exists is taken as it is.
  if (storage_->bounded()) {
    struct stat st {};
    if (::fstatat(threads.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
      storage_->make(threads.get(), leaf, thread_path);
    }
  }
  const UniqueFd thread_dir = host_fs::open_subdir(threads.get(), leaf, thread_path, parent);
  const UniqueFd user_data =
      host_fs::open_subdir(thread_dir.get(), "user-data", thread_path / "user-data", parent);
  const host_fs::DirOptions shared{.create_mode = 0777, .exact_mode = 0777};
  for (const char* leaf : {"workspace", "uploads", "outputs", ".upload-conversions"}) {
    host_fs::open_subdir(user_data.get(), leaf, thread_path / "user-data" / leaf, shared);
  }
  host_fs::open_subdir(thread_dir.get(), "acp-workspace", thread_path / "acp-workspace", shared);
}

std::optional<ThreadStorage::Usage> Paths::thread_storage_usage(
    const std::string& thread_id, const std::optional<std::string>& user_id) const {
  if (!storage_->bounded()) return std::nullopt;
  try {
    const UniqueFd base = open_base_dir(base_dir_);
    const UniqueFd dir =
        host_fs::open_dirs(base.get(), thread_parts(thread_id, user_id), base_dir_, {});
    return storage_->usage(dir.get());
  } catch (const std::exception&) {
    return std::nullopt;  // not made yet, or not ours to read
  }
}

host_fs::UniqueFd Paths::open_thread_dir(const std::string& thread_id,
                                         const std::optional<std::string>& user_id) const {
  const UniqueFd base = open_base_dir(base_dir_);
  const UniqueFd path =
      host_fs::open_dirs(base.get(), thread_parts(thread_id, user_id), base_dir_, {});
  UniqueFd dir(::openat(path.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) throw_errno("cannot open", thread_dir(thread_id, user_id), errno);
  return dir;
}

void Paths::ensure_dir_below_base(const fs::path& dir, unsigned mode_if_created) const {
  std::vector<std::string> parts;
  for (const auto& part : dir.lexically_relative(base_dir_)) {
    if (part == "..")
      throw std::invalid_argument(dir.string() + " is not below " + base_dir_.string());
    if (!part.empty() && part != ".") parts.push_back(part.string());
  }
  const UniqueFd base = open_base_dir(base_dir_);
  const auto mode = static_cast<mode_t>(mode_if_created);
  host_fs::open_dirs(base.get(), parts, base_dir_, {.create_mode = mode, .mode_if_created = mode});
}

CredentialTreeReport Paths::ensure_lark_cli_credential_tree(const std::string& user_id) const {
  const fs::path root = user_integration_dir(user_id, std::string(kLarkCliIntegrationId));
  const UniqueFd base = open_base_dir(base_dir_);
  const UniqueFd integrations =
      host_fs::open_dirs(base.get(), {"users", validate_user_id(user_id), "integrations"},
                         base_dir_, {.create_mode = 0777});
  const UniqueFd root_fd =
      open_credential_dir(integrations.get(), std::string(kLarkCliIntegrationId), root);
  for (const char* child : {"config", "data"})
    open_credential_dir(root_fd.get(), child, root / child);
  CredentialTreeReport report;
  UniqueFd listing(::openat(root_fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!listing) throw_errno("cannot open directory", root, errno);
  CredentialWalk(report).walk(listing.get(), root, 0);
  return report;
}

}  // namespace sandboxd::core
