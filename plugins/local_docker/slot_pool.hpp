// The pool of pre-started slots of one local_docker backend (design "Pre-started
// slots"). A slot is a container started ahead of need whose per-conversation mount points
// are bound, with rslave propagation, from empty directories under a shared slots root; a
// claim binds the conversation's directories onto them on the host (they appear inside at
// once), records who the slot now belongs to, and renames the container to the conversation's
// deterministic name. Labels cannot change after create, so a claimed slot's identity is the
// claim record under `<root>/claims/`; discovery, listing and reconciliation read it.
//
// The mount points a slot needs are the ones the last create or claim asked for (or the
// `slot_mounts` option, so the first conversation can hit too); slots made for another set
// are drained and replaced. What was learned is kept in `<root>/shape`, so a restarted
// gateway refills at once.
//
// Several gateway processes may share an engine and a slots root: each claims only slots it
// started, and holds an flock on `<root>/owners/<token>.lock` for its life, so any of them can
// tell a dead owner's slots (the lock is free) and reap them, with the host mounts of claimed
// slots whose container is gone.
//
// Lock story: `mutex_` guards every member below it in the class (GUARDED_BY, checked by
// scripts/thread_safety.sh); no engine call, mount or file write runs under it. The refill thread
// is the only one that starts and drains slots; claim() takes a ready slot out under the lock and
// does its mounts and engine calls outside.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sandboxd/capabilities.hpp>
#include <sandboxd/host_fs.hpp>
#include <sandboxd/logger.hpp>
#include <sandboxd/thread_annotations.hpp>
#include <sandboxd/types.hpp>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::local_docker {

// Label every slot container carries (its value: the owning pool's token).
inline constexpr const char* kLabelSlotOwner = "sandboxd.slot-owner";

// What the pool needs from the engine; the backend implements it with its own settings.
class SlotEngine {
 public:
  virtual ~SlotEngine() = default;
  struct Started {
    std::string id;
    std::string url;
    double created_at = 0;
  };
  // Creates and starts container `name` with the backend's image and limits, its fixed
  // mounts plus `slot_mounts` bound with rslave propagation, and `labels`; returns once its
  // readiness probe answered. Throws, leaving nothing behind.
  virtual Started start_slot(const std::string& name, const std::vector<Mount>& slot_mounts,
                             const std::map<std::string, std::string>& labels) = 0;
  // Removes a container by id, force; gone counts as done. Throws when the engine refuses.
  virtual void remove_container(const std::string& id) = 0;
  // false: the name is taken. Throws on any other refusal.
  virtual bool rename_container(const std::string& id, const std::string& name) = 0;
  // Whether the container sees a regular file at `path` (read through the engine).
  virtual bool container_sees(const std::string& id, const std::string& path) = 0;
  struct Listed {
    std::string id;
    std::string name;
    std::string owner;  // the slot-owner label
  };
  // Every container (any state) carrying kLabelSlotOwner with this backend's prefix.
  virtual std::vector<Listed> list_slots() = 0;
  // false only when the engine says the container does not exist.
  virtual bool container_exists(const std::string& id) = 0;
};

struct SlotPoolOptions {
  std::size_t target = 0;             // warm_slots
  std::filesystem::path root;         // slots_dir
  std::string name_prefix;            // container names are `{name_prefix}slot-{token}-{n}`
  std::vector<Mount> declared_shape;  // slot_mounts: container paths (host_path unused)
  double sweep_interval_seconds = 60;
};

// Who a claimed slot belongs to, as its record says.
struct ClaimRecord {
  std::string sandbox_id;
  std::string container_id;
  std::string slot;
  std::optional<std::string> user_id;
  std::optional<std::string> thread_id;
};

class SlotPool {
 public:
  SlotPool(SlotPoolOptions options, SlotEngine& engine, std::shared_ptr<Logger> logger);
  // Stops refilling and removes this pool's unclaimed slots; claimed ones stay (they are
  // sandboxes now).
  ~SlotPool();
  // Starts the refill thread (set-up, probe, sweeps, refills). Idempotent.
  void start();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // Takes a ready slot for `request` and gives it the conversation's mounts and `name`.
  PreStartedSlots::Claim claim(const CreateRequest& request, const std::string& name);
  // Remembers the mount points `request` asks for, so refills make slots that fit it.
  void learn_shape(const CreateRequest& request);
  PreStartedSlots::Status status() const;

  // The claim record under `root` of container `container_id` named for `sandbox_id`, if it
  // is a claimed slot; an empty `container_id` names no container and matches no record.
  // Reads a file; works with the pool off (claimed slots outlive a configuration that had
  // slots).
  static std::optional<ClaimRecord> claimed(const std::filesystem::path& root,
                                            const std::string& sandbox_id,
                                            const std::string& container_id);
  // The claim record named for `sandbox_id`, whichever container it names (the sweep).
  static std::optional<ClaimRecord> read_record(const std::filesystem::path& root,
                                                const std::string& sandbox_id);
  // After a claimed slot's container stopped: detach its host mounts, drop its directories
  // and record. Quiet when `sandbox_id` names no claimed slot.
  static void forget_claim(const std::filesystem::path& root, const std::string& sandbox_id,
                           const std::string& container_id, Logger& logger);

 private:
  struct Slot {
    std::string name;
    std::string dir;  // under root/slots
    std::string key;
    std::vector<Mount> mounts;  // container paths in key order; host_path: the slot dir
    SlotEngine::Started container;
  };

  void run();
  bool set_up_root();      // the shared root, the owner lock; false: off with a reason
  void read_kept_shape();  // the mount points the last gateway on this root learned
  bool probe();            // a bind reaches a container; false: off with a reason
  void sweep();            // reap dead owners' slots and stale claims
  std::optional<Slot> start_one(const std::vector<Mount>& shape);
  void discard(const Slot& slot);  // container, mounts, directory
  void set_off(const std::string& reason);
  void write_record(const ClaimRecord& record);
  static void remove_slot_dir(const std::filesystem::path& root, const std::string& slot,
                              Logger& logger);
  bool owner_alive(const std::string& token) const;

  const SlotPoolOptions options_;
  SlotEngine& engine_;
  std::shared_ptr<Logger> logger_;
  std::string token_;  // this pool's owner token
  host_fs::UniqueFd owner_lock_;
  std::once_flag started_;
  std::thread refill_;

  mutable Mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  bool running_ GUARDED_BY(mutex_) = false;  // start() was called
  std::string off_reason_ GUARDED_BY(mutex_);
  std::optional<std::vector<Mount>> shape_ GUARDED_BY(mutex_);  // what new slots are made for
  std::deque<Slot> ready_ GUARDED_BY(mutex_);
  std::size_t starting_ GUARDED_BY(mutex_) = 0;
  std::size_t sequence_ GUARDED_BY(mutex_) = 0;
  std::chrono::steady_clock::time_point retry_after_ GUARDED_BY(mutex_){};
};

}  // namespace sandboxd::local_docker
