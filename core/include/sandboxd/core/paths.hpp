// Filesystem layout of the gateway's state directory (design §2).
//
// Two roots: the container-visible base dir B, where the gateway creates and checks
// directories, and the host base dir H, a raw string used only to build bind-mount sources
// (it may be a Windows path when the gateway drives the host's Docker from inside a container).
// Every id that enters a path is validated first; invalid ids throw std::invalid_argument.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/core/thread_storage.hpp"
#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {

// Container path prefix under which thread user-data is mounted.
inline constexpr std::string_view kVirtualPathPrefix = "/mnt/user-data";
inline constexpr std::string_view kLarkCliIntegrationId = "lark-cli";

// design §2.1: explicit → $DEER_FLOW_HOME → {$DEER_FLOW_PROJECT_ROOT or cwd}/.deer-flow, resolved
// with weakly_canonical. A DEER_FLOW_PROJECT_ROOT that is not an existing directory throws
// std::invalid_argument naming it. Empty values count as unset. A symbolic link on the way
// that neither root nor the effective user owns throws host_fs::UntrustedDirectoryError
// (another user's /tmp/deer-flow link must not choose where our state goes).
std::filesystem::path resolve_base_dir(std::optional<std::string> explicit_dir = std::nullopt);

// Adopts `dir` as a state directory: creates it (and missing parents) with mode 0700 when it
// does not exist, then requires it to be ours (host_fs::require_trusted_dir: owned by the
// effective user, writable by nobody else, under ancestors nobody else can swap). Throws
// host_fs::UntrustedDirectoryError naming the path, its owner and mode, or
// std::filesystem::filesystem_error.
void ensure_private_dir(const std::filesystem::path& dir);

// design §2.2: $DEER_FLOW_HOST_BASE_DIR verbatim if set and non-empty, else base_dir's text.
std::string host_base_dir(const std::filesystem::path& base_dir);

// Python repr of a string ('x', or "x" when it holds a single quote but no double quote), so
// messages read the same as the reference's.
std::string python_repr(std::string_view text);

// The longest user id accepted anywhere (DeerFlow's provisioner allows 128): a longer one would
// fail later as a file name too long, or be refused by the provisioner.
inline constexpr std::size_t kMaxUserIdLength = 128;

// Each returns its argument. Thread: ^[A-Za-z0-9_-]{1,64}$. User: ^[A-Za-z0-9_-]{1,128}$.
// Integration: ^[A-Za-z0-9_.-]+$ and not "." or "..". Sandbox ids (lock file names) follow the
// thread id rule.
const std::string& validate_thread_id(const std::string& thread_id);
const std::string& validate_user_id(const std::string& user_id);
const std::string& validate_integration_id(const std::string& integration_id);
const std::string& validate_sandbox_id(const std::string& sandbox_id);

// design §2.6: joins without touching the filesystem. Windows style (drive letter, leading "\\"
// or any backslash in base) joins with '\' and turns '/' into '\'; otherwise '/'. Repeated
// separators collapse and "." segments drop; ".." is kept; a UNC "\\" or a POSIX root stays.
// No parts → base unchanged.
std::string join_host_path(std::string_view base, std::initializer_list<std::string_view> parts);
std::string join_host_path(std::string_view base, const std::vector<std::string>& parts);

// Bounds of the lark-cli credential walk: the tree is the sandbox's to shape.
inline constexpr int kCredentialWalkMaxDepth = 16;
inline constexpr std::size_t kCredentialWalkMaxEntries = 10000;

// What one tightening of a credential tree did: `complete` is false when it stopped at a bound,
// and `note` says which (a sentence naming the directory).
struct CredentialTreeReport {
  bool complete = true;
  std::size_t entries = 0;
  std::string note;
};

class Paths {
 public:
  // base_dir is used as given (resolve it with resolve_base_dir first).
  Paths(std::filesystem::path base_dir, std::string host_base_dir);

  // resolve_base_dir(explicit_dir) and host_base_dir() of it, read from the environment now.
  static Paths from_environment(std::optional<std::string> explicit_dir = std::nullopt);

  const std::filesystem::path& base_dir() const { return base_dir_; }
  const std::string& host_base_dir() const { return host_base_dir_; }

  // How each conversation's directory is bounded (thread_storage.hpp); unbounded unless set.
  // Set once, before the Paths is shared.
  void set_storage(std::shared_ptr<const ThreadStorage> storage) { storage_ = std::move(storage); }
  const ThreadStorage& storage() const { return *storage_; }
  // What the conversation's directory uses against its bound; nullopt when it does not exist,
  // is not bounded, or the filesystem would not say. Never follows a link.
  std::optional<ThreadStorage::Usage> thread_storage_usage(
      const std::string& thread_id, const std::optional<std::string>& user_id) const;
  // The conversation's directory, opened (a descriptor that lists and takes *at calls), every
  // component without following a link; throws when it does not exist.
  host_fs::UniqueFd open_thread_dir(const std::string& thread_id,
                                    const std::optional<std::string>& user_id) const;

  // ── container-visible (under B); user == nullopt selects the legacy layout ──
  std::filesystem::path user_dir(const std::string& user_id) const;  // users/{u}
  std::filesystem::path thread_dir(const std::string& thread_id,
                                   const std::optional<std::string>& user_id) const;
  std::filesystem::path sandbox_user_data_dir(const std::string& thread_id,
                                              const std::optional<std::string>& user_id) const;
  std::filesystem::path sandbox_work_dir(const std::string& thread_id,
                                         const std::optional<std::string>& user_id) const;
  std::filesystem::path sandbox_uploads_dir(const std::string& thread_id,
                                            const std::optional<std::string>& user_id) const;
  std::filesystem::path sandbox_outputs_dir(const std::string& thread_id,
                                            const std::optional<std::string>& user_id) const;
  std::filesystem::path upload_conversions_dir(const std::string& thread_id,
                                               const std::optional<std::string>& user_id) const;
  std::filesystem::path acp_workspace_dir(const std::string& thread_id,
                                          const std::optional<std::string>& user_id) const;
  // Discover-or-create lock: {thread dir}/{sandbox_id}.lock.
  std::filesystem::path lock_file(const std::string& thread_id,
                                  const std::optional<std::string>& user_id,
                                  const std::string& sandbox_id) const;
  std::filesystem::path public_skills_view_dir() const;  // skills_view/public
  // users/{u}/skills_view/{custom|legacy|integrations}
  std::filesystem::path user_custom_skills_view_dir(const std::string& user_id) const;
  std::filesystem::path user_legacy_skills_view_dir(const std::string& user_id) const;
  std::filesystem::path user_integration_skills_view_dir(const std::string& user_id) const;
  // users/{u}/integrations/{i}[/config|/data]
  std::filesystem::path user_integration_dir(const std::string& user_id,
                                             const std::string& integration_id) const;
  std::filesystem::path user_integration_config_dir(const std::string& user_id,
                                                    const std::string& integration_id) const;
  std::filesystem::path user_integration_data_dir(const std::string& user_id,
                                                  const std::string& integration_id) const;
  // integrations/{i}/sandbox-cli
  std::filesystem::path integration_sandbox_cli_dir(const std::string& integration_id) const;

  // ── host mount sources: join_host_path(H, ...) ──
  std::string host_thread_dir(const std::string& thread_id,
                              const std::optional<std::string>& user_id) const;
  std::string host_sandbox_user_data_dir(const std::string& thread_id,
                                         const std::optional<std::string>& user_id) const;
  std::string host_sandbox_work_dir(const std::string& thread_id,
                                    const std::optional<std::string>& user_id) const;
  std::string host_sandbox_uploads_dir(const std::string& thread_id,
                                       const std::optional<std::string>& user_id) const;
  std::string host_sandbox_outputs_dir(const std::string& thread_id,
                                       const std::optional<std::string>& user_id) const;
  std::string host_upload_conversions_dir(const std::string& thread_id,
                                          const std::optional<std::string>& user_id) const;
  std::string host_acp_workspace_dir(const std::string& thread_id,
                                     const std::optional<std::string>& user_id) const;
  std::string host_public_skills_view_dir() const;
  std::string host_user_custom_skills_view_dir(const std::string& user_id) const;
  std::string host_user_legacy_skills_view_dir(const std::string& user_id) const;
  std::string host_user_integration_skills_view_dir(const std::string& user_id) const;
  std::string host_user_integration_config_dir(const std::string& user_id,
                                               const std::string& integration_id) const;
  std::string host_user_integration_data_dir(const std::string& user_id,
                                             const std::string& integration_id) const;
  std::string host_integration_sandbox_cli_dir(const std::string& integration_id) const;

  // design §2.5: creates user-data/{workspace,uploads,outputs,.upload-conversions} and
  // acp-workspace, then chmods each to 0777 (mkdir is subject to umask) so a sandbox running
  // under another UID can write. A sandbox can write user-data (all of it through
  // sandboxd-provisioner), so every component from the base dir down is opened without
  // following a link and the chmod acts on the opened directory: a symbolic link (or a file) in
  // the way is refused with host_fs::UnsafePathError naming it, and nothing outside is touched.
  // Inside a ThreadDirsEnsured scope for the same conversation on the calling thread it does
  // nothing: the scope's owner has just ensured them.
  void ensure_thread_dirs(const std::string& thread_id,
                          const std::optional<std::string>& user_id) const;

  // Makes `dir` (a path below base_dir) and its missing parents, each made one given
  // `mode_if_created` exactly, opening every component from the base dir down without
  // following a link (host_fs::UnsafePathError names one in the way). An existing directory
  // keeps its mode.
  void ensure_dir_below_base(const std::filesystem::path& dir, unsigned mode_if_created) const;

  // One acquisition ensures a conversation's directories before it takes the conversation's
  // file lock (design §5.8 step 1), and composing the new sandbox's mounts would ensure them again
  // (§3.1): 10 more stat/chmod calls for nothing. The provider opens this scope right after the
  // first call; until it closes, ensure_thread_dirs for that conversation on this thread skips.
  class ThreadDirsEnsured {
   public:
    ThreadDirsEnsured(std::string thread_id, std::optional<std::string> user_id);
    ~ThreadDirsEnsured();
    ThreadDirsEnsured(const ThreadDirsEnsured&) = delete;
    ThreadDirsEnsured& operator=(const ThreadDirsEnsured&) = delete;
    static bool covers(const std::string& thread_id, const std::optional<std::string>& user_id);

   private:
    std::string thread_id_;
    std::optional<std::string> user_id_;
    const ThreadDirsEnsured* outer_;
  };

  // design §2.7: makes users/{u}/integrations/lark-cli owner-only (dirs 0700, files 0600). Throws
  // std::runtime_error on a symlink anywhere in the tree or a non-dir/non-file entry. The data
  // directory is the sandbox's to write, so each entry is opened without following a link and
  // its mode changed on that descriptor; the walk stops at kCredentialWalkMaxDepth levels and
  // kCredentialWalkMaxEntries entries, and the report says where (the caller logs it).
  CredentialTreeReport ensure_lark_cli_credential_tree(const std::string& user_id) const;

 private:
  std::vector<std::string> thread_parts(const std::string& thread_id,
                                        const std::optional<std::string>& user_id) const;

  std::filesystem::path base_dir_;
  std::string host_base_dir_;
  std::shared_ptr<const ThreadStorage> storage_ = ThreadStorage::unbounded();
};

}  // namespace sandboxd::core
