// What one provider instance tracks: one entry per sandbox, with one lifecycle state, and the
// conversation index (design "Core shape"). Private to the core; never installed.
//
// Not thread-safe by itself: the provider holds it GUARDED_BY its registry mutex and calls it
// only with that mutex held. Nothing here blocks, logs or calls out.
//
// An entry's `state` is where the sandbox is in its lifecycle: active (handed to a
// conversation), warm (released, still running), paused (released and frozen by the backend,
// issue 23) or none (the entry only carries marks of work in flight). Being active, warm or
// paused is one field, so "never two at once" cannot be broken; warm and paused together are
// the released pool, and most of the provider asks only whether a sandbox is released. A later
// state (a pre-started spare) is one more enumerator. The marks are
// orthogonal to the state because the work they record overlaps it: a local teardown reserves
// an active or warm sandbox that stays visible until its stop begins; acquisitions publishing
// its lease; creations under its id counted against the replica cap; the acquisition epoch
// that keeps an old lease check from dropping a newer acquisition. An entry with no state and
// no marks is erased. Lookups and changes are hash lookups, O(1) expected: a warm pair takes
// several, and ordered maps keyed by id strings made it cost twice as much with 10,000 others
// tracked. Walks (for_each, released_entries) are O(n) and in no particular
// order: a caller that acts or reports in id order sorts what it collected (sort_by_id) after
// the registry mutex is let go, so no sort runs under it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sandboxd/core/acquire_path.hpp"
#include "sandboxd/core/conversation.hpp"
#include "sandboxd/core/sandbox_client.hpp"
#include "sandboxd/core/sandbox_state.hpp"
#include "sandboxd/types.hpp"
#include "thread_lock.hpp"
#include "thread_map.hpp"

namespace sandboxd::core {

using InfoPtr = std::shared_ptr<const SandboxInfo>;
using ClientPtr = std::shared_ptr<SandboxClient>;

struct SandboxEntry {
  SandboxState state = SandboxState::none;
  ClientPtr client;  // active: the client handed out (a seed fixture may set only one side)
  InfoPtr info;      // active and warm
  // The conversation it was handed to (active) or last served (warm; nullopt for an adopted
  // orphan): another identity under the same id is a collision, not a reuse.
  std::optional<ThreadKey> identity;
  // monotonic: last activity (active) or release time (warm and paused: the time spent
  // paused counts toward the idle timeout).
  double since = 0.0;
  std::optional<AcquirePath> last_acquire;  // how its last acquisition obtained it

  bool teardown = false;      // this instance reserved it for a teardown
  int publishing = 0;         // acquisitions publishing its lease right now
  int creations = 0;          // creations between their replica check and their registration
  std::string creating_user;  // whose they are (the id derives from it), for max_per_user
  std::uint64_t epoch = 0;    // the acquisition that last published its lease (0: none)

  bool active() const { return state == SandboxState::active; }
  bool warm() const { return state == SandboxState::warm; }
  bool paused() const { return state == SandboxState::paused; }
  bool released() const { return warm() || paused(); }  // in the pool, running or frozen
};

// A released sandbox (warm or paused) as a snapshot: what the reaper, the pauser and eviction
// act on, outside the mutex.
struct WarmEntry {
  InfoPtr info;
  double released_at = 0.0;
  std::optional<ThreadKey> identity;
  bool paused = false;
};

// Puts what a walk collected (ids, or pairs led by an id) in id order: for work done after
// the registry mutex is let go, so that the order of stops and log lines is the same each run.
inline const std::string& id_of(const std::string& id) {
  return id;
}
template <class Rest>
const std::string& id_of(const std::pair<std::string, Rest>& item) {
  return item.first;
}
template <class Item>
void sort_by_id(std::vector<Item>& items) {
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return id_of(a) < id_of(b); });
}

class SandboxRegistry {
 public:
  // ── lookups ──
  const SandboxEntry* find(const std::string& id) const;
  SandboxEntry* find(const std::string& id);
  bool is_active(const std::string& id) const;
  bool is_released(const std::string& id) const;  // warm or paused
  // Active or released: this process holds it (a create of the id must not replace it).
  bool held(const std::string& id) const;
  // Active or released with an info: what a find() or export shows.
  bool tracked(const std::string& id) const;
  // design §4.3: the conversation `id` is tracked for when it is not `key`'s (a collision of
  // ids), else nullopt. An active entry answers its identity, or the one conversation mapped
  // to it when it has none (a seed fixture's); a released one its identity (an adopted orphan
  // has none: no conflict). Nothing tracked, or marks only: nullopt.
  std::optional<ThreadKey> identity_conflict(const std::string& id, const ThreadKey& key) const;

  // ── state changes ──
  // Makes `id` active for `key` (throws std::runtime_error once shutdown began: shutdown stops
  // only what it snapshotted). A released entry under the id becomes active; the conversation
  // index maps `key` to it.
  void install_active(const std::string& id, ClientPtr client, InfoPtr info,
                      const std::optional<ThreadKey>& key, double now);
  // Active → warm (release): the client is handed back to be closed; every conversation
  // mapped to it is unmapped and the first of them (else its identity) becomes the warm
  // entry's identity. Nothing tracked: all empty.
  struct Parked {
    ClientPtr client;
    InfoPtr info;  // the warm entry's info (null: it was not active)
    bool was_warm = false;
    std::uint64_t epoch = 0;
  };
  Parked park(const std::string& id, double now);
  // An adopted or imported released sandbox, warm or paused (not when already tracked).
  bool add_released(const std::string& id, InfoPtr info, double released_at,
                    std::optional<ThreadKey> identity, bool paused = false);
  // Warm → paused, only while the entry still holds `info` released at `released_at` (the one
  // the backend froze); false otherwise. Its release time stays.
  bool mark_paused(const std::string& id, const InfoPtr& info, double released_at);
  // Paused → warm (a thaw that could not hand it out), only while it still holds `info`.
  bool mark_thawed(const std::string& id, const InfoPtr& info);
  // Untracks `id` (active or warm) when `expected_info` is null or is the tracked info: the
  // conversation index and the epoch go too. `removed` says whether it did.
  struct Removed {
    ClientPtr client;
    InfoPtr info;
    std::optional<ThreadKey> identity;  // whom it served (for the capacity ledger)
    bool removed = false;
  };
  Removed remove(const std::string& id, const InfoPtr& expected_info);
  // Untracks every released sandbox and returns them (shutdown stops each itself).
  std::vector<std::pair<std::string, WarmEntry>> take_released();
  // Drops the released entry only if it still holds `info` (the one a teardown stopped).
  void erase_released_if(const std::string& id, const InfoPtr& info);
  // Replaces an active entry's info (and client) if it still holds `examined`; the replaced
  // client is returned for closing.
  ClientPtr replace_info(const std::string& id, const InfoPtr& examined, InfoPtr validated,
                         ClientPtr fresh_client);
  // A peer holds the lease now: untrack without touching the container (the closed client
  // is returned). Skipped while a teardown, a publish or a newer acquisition holds it;
  // `kept_because` then says which.
  ClientPtr forget(const std::string& id, std::optional<std::uint64_t> expected_epoch,
                   const char** kept_because);

  // ── marks ──
  bool reserve_teardown(const std::string& id);  // false when already reserved
  void finish_teardown(const std::string& id);
  bool tearing_down(const std::string& id) const;
  void begin_publish(const std::string& id);
  // The publish ended; when `taken`, a new epoch is given to it.
  void end_publish(const std::string& id, bool taken);
  std::optional<std::uint64_t> epoch_of(const std::string& id) const;
  void begin_creation(const std::string& id, const std::string& user = "");
  void end_creation(const std::string& id);
  bool any_creation() const;
  // Active + released + other creations in flight: what the replica cap is checked against (a
  // creation already registered under its id is counted once).
  std::size_t slots_in_use(const std::string& creating_id) const;
  // The same for one user (max_per_user): active and released sandboxes whose identity is the
  // user's, and the user's creations in flight other than `creating_id`'s. Both O(1): kept as
  // counts beside the entries (recount), since every admission under a ceiling asks them.
  std::size_t sandboxes_of_user(const std::string& user, const std::string& creating_id) const;

  // ── the conversation index ──
  ThreadMap& conversations() { return conversations_; }
  const ThreadMap& conversations() const { return conversations_; }

  // ── iteration (snapshots for work done outside the mutex) ──
  template <class Visit>
  void for_each(Visit visit) const {
    for (const auto& [id, entry] : entries_) visit(id, entry);
  }
  std::vector<std::pair<std::string, WarmEntry>> released_entries()
      const;  // warm and paused, any order
  std::size_t active_count() const { return active_; }
  std::size_t warm_count() const { return warm_; }  // running, not paused
  std::size_t paused_count() const { return paused_; }
  std::size_t teardown_count() const { return teardowns_; }
  std::size_t creating_count() const { return pending_creations_; }  // not yet active

  // ── reconciliation's first sightings of unowned containers (design §8) ──
  std::map<std::string, double>& unowned_since() { return unowned_since_; }
  const std::map<std::string, double>& unowned_since() const { return unowned_since_; }

  // ── per-conversation locks ──
  std::shared_ptr<ThreadLock> thread_lock(const ThreadKey& key);
  // Drops locks nobody holds, waits for or refers to.
  void prune_idle_thread_locks();
  std::size_t thread_lock_count() const { return thread_locks_.size(); }
  bool has_thread_lock(const ThreadKey& key) const { return thread_locks_.count(key) > 0; }

  // ── shutdown ──
  bool shut_down() const { return shutdown_; }
  // Marks shutdown (or detach) begun; false when it had already.
  bool begin_shutdown();

 private:
  using Entries = std::unordered_map<std::string, SandboxEntry>;
  SandboxEntry& entry(const std::string& id) { return entries_[id]; }
  void set_state(SandboxEntry& entry, SandboxState state);
  // Every change of an entry's state, identity, creations or creating_user goes through here,
  // so that pending_creations_ and per_user_ stay what a walk over entries_ would count.
  // What one entry adds to the counts: `sandboxes` of `user` (registered), or `creations` of
  // `user` (not yet registered).
  struct Counted {
    std::string user;
    std::size_t sandboxes = 0;
    std::size_t creations = 0;
    bool operator==(const Counted&) const = default;
  };
  template <class Change>
  void recount(SandboxEntry& entry, Change change) {
    Counted before = counted(entry);
    change();
    Counted after = counted(entry);
    // Most changes keep the counts (active ↔ warm of one conversation, the warm pair): the
    // per-user entry is then neither erased nor made again.
    if (before == after) return;
    tally(before, -1);
    tally(after, +1);
  }
  static Counted counted(const SandboxEntry& entry);
  void tally(const Counted& counted, int sign);
  // A creation of `creating_id` not yet registered under its id: what the counts leave out.
  std::size_t own_pending_creations(const std::string& creating_id) const;
  // Erases `it` when it holds neither a state nor a mark.
  void collect(Entries::iterator it);

  Entries entries_;
  ThreadMap conversations_;
  std::map<std::string, double> unowned_since_;
  std::unordered_map<ThreadKey, std::shared_ptr<ThreadLock>, ThreadKeyHash> thread_locks_;
  std::uint64_t epoch_counter_ = 0;
  std::size_t active_ = 0, warm_ = 0, paused_ = 0, teardowns_ = 0;
  // Creations in flight of entries not yet active or released (slots_in_use).
  std::size_t pending_creations_ = 0;
  // By user: active and released sandboxes with that user's identity, plus that user's
  // creations in flight counted in pending_creations_ (sandboxes_of_user). No zero counts.
  std::unordered_map<std::string, std::size_t> per_user_;
  bool shutdown_ = false;
};

}  // namespace sandboxd::core
