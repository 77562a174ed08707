// Provider: a fork of a conversation's sandbox into new conversations (docs/snapshots.md). One
// snapshot of the source is taken, restored into each new conversation on a thread of its own
// (each restore is an acquisition: the usual ceilings and queues hold), and deleted when all are
// made; its image stays while the sandboxes made from it run. All or none: a fork that fails
// part way leaves no new conversation behind.
#include <fcntl.h>
#include <unistd.h>

#include <exception>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>

#include "host/tree_copy.hpp"
#include "provider_impl.hpp"
#include "sandboxd/core/random_hex.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
namespace {

std::vector<std::string> fork_thread_ids(const std::vector<std::string>& thread_ids,
                                         std::optional<std::size_t> count) {
  if (!thread_ids.empty() && count && *count != thread_ids.size()) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "a fork names " + std::to_string(thread_ids.size()) +
                           " thread ids and asks for count " + std::to_string(*count) +
                           ": give one or the other");
  }
  const std::size_t wanted = thread_ids.empty() ? count.value_or(0) : thread_ids.size();
  if (wanted < 1 || wanted > Provider::kMaxForkCount) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "a fork makes 1 to " + std::to_string(Provider::kMaxForkCount) +
                           " conversations; asked for " + std::to_string(wanted));
  }
  std::vector<std::string> ids = thread_ids;
  while (ids.size() < wanted) ids.push_back("fork-" + random_hex(8, "a forked thread id"));
  std::set<std::string> seen;
  for (const std::string& id : ids) {
    try {
      validate_thread_id(id);
    } catch (const std::invalid_argument& e) {
      throw ServiceError(ErrorKind::invalid_argument, std::string("thread id: ") + e.what());
    }
    if (!seen.insert(id).second) {
      throw ServiceError(ErrorKind::invalid_argument,
                         "thread id " + id + " is named twice in one fork");
    }
  }
  return ids;
}

}  // namespace

Provider::Forked Provider::fork(const std::string& sandbox_id,
                                const std::vector<std::string>& thread_ids,
                                std::optional<std::size_t> count) {
  Impl& impl = *impl_;
  const std::vector<std::string> threads = fork_thread_ids(thread_ids, count);
  const ThreadKey source =
      impl.served_conversation(sandbox_id, "a fork makes conversations of its user").conversation;
  const std::string& user = source.user_id;
  // New conversations only: one with a directory here has files or a sandbox of its own, and
  // anything there that is not plainly missing (a link a sandbox planted, a file, a directory
  // the host may not open) is refused too, before any work, never followed.
  for (const std::string& thread : threads) {
    std::string found;
    try {
      impl.paths_->open_thread_dir(thread, user);
      found = "exists already";
    } catch (const std::filesystem::filesystem_error& e) {
      if (e.code() != std::errc::no_such_file_or_directory) {
        found = std::string("cannot be a new one (") + e.what() + ")";
      }
    } catch (const std::exception& e) {
      found = std::string("cannot be a new one (") + e.what() + ")";
    }
    if (!found.empty()) {
      throw ServiceError(ErrorKind::conflict,
                         "conversation " + user + "/" + thread + " " + found +
                             ": a fork makes new conversations (name others, or give a count)");
    }
  }
  const SnapshotRecord taken = snapshot(sandbox_id, "fork-" + random_hex(6, "a fork's snapshot"));
  ScopeExit delete_snapshot_after([&] {
    try {
      impl.delete_snapshot(user, taken.name);
    } catch (const std::exception& e) {
      impl.log(LogLevel::warning,
               "The snapshot " + taken.name + " of fork of sandbox " + sandbox_id +
                   " could not be deleted (it expires with snapshot_ttl_seconds): " + e.what());
    }
  });
  std::vector<std::optional<AcquireResult>> made(threads.size());
  std::vector<std::exception_ptr> failed(threads.size());
  {
    const auto restore_one = [&](std::size_t i) {
      try {
        made[i] = restore(threads[i], user, RestoreFrom{taken.name, user, false});
      } catch (...) {
        failed[i] = std::current_exception();
      }
    };
    std::vector<std::thread> workers;
    workers.reserve(threads.size());
    for (std::size_t i = 0; i < threads.size(); ++i) {
      try {
        workers.emplace_back(restore_one, i);
      } catch (const std::system_error&) {
        // No thread to be had: this one runs here, so the fork still ends (a throw with
        // workers unjoined would end the process).
        restore_one(i);
      }
    }
    for (std::thread& worker : workers) worker.join();
  }
  std::exception_ptr first_failure;
  for (const std::exception_ptr& failure : failed) {
    if (failure) {
      first_failure = failure;
      break;
    }
  }
  if (!first_failure) {
    Forked forked;
    forked.from_sandbox_id = sandbox_id;
    for (auto& result : made) forked.sandboxes.push_back(std::move(*result));
    impl.log(LogLevel::info, "Forked sandbox " + sandbox_id + " (" + user + "/" + source.thread_id +
                                 ") into " + std::to_string(threads.size()) + " conversations");
    return forked;
  }
  // None is kept: the sandboxes made go, and the conversations' directories with them.
  for (std::size_t i = 0; i < threads.size(); ++i) {
    if (made[i]) {
      try {
        impl.destroy(made[i]->sandbox_id);
      } catch (const std::exception& e) {
        impl.log(LogLevel::warning, "Sandbox " + made[i]->sandbox_id + " of a failed fork " +
                                        "could not be destroyed: " + e.what());
      }
    }
    impl.remove_new_conversation_dir(threads[i], user);
  }
  std::rethrow_exception(first_failure);
}

void Provider::Impl::remove_new_conversation_dir(const std::string& thread_id,
                                                 const std::string& user_id) {
  const std::filesystem::path shown = paths_->thread_dir(thread_id, user_id);
  try {
    const host_fs::UniqueFd dir = paths_->open_thread_dir(thread_id, user_id);
    clear_tree(dir.get(), SnapshotStore::bounds(), shown);
    // Its parent as the kernel knows it (never a path string a sandbox could have bent).
    const host_fs::UniqueFd parent(
        ::openat(dir.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!parent) host_fs::throw_errno("cannot open the parent of", shown, errno);
    if (::unlinkat(parent.get(), thread_id.c_str(), AT_REMOVEDIR) != 0) {
      host_fs::throw_errno("cannot remove", shown, errno);
    }
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        std::string("A failed fork's conversation directory stays: ") + e.what());
  }
}

}  // namespace sandboxd::core
