#include "sandbox_registry.hpp"

#include <algorithm>
#include <stdexcept>

namespace sandboxd::core {

const SandboxEntry* SandboxRegistry::find(const std::string& id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

SandboxEntry* SandboxRegistry::find(const std::string& id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

bool SandboxRegistry::is_active(const std::string& id) const {
  const SandboxEntry* e = find(id);
  return e && e->active();
}

bool SandboxRegistry::held(const std::string& id) const {
  const SandboxEntry* e = find(id);
  return e && (e->active() || e->released());
}

bool SandboxRegistry::is_released(const std::string& id) const {
  const SandboxEntry* e = find(id);
  return e && e->released();
}

bool SandboxRegistry::tracked(const std::string& id) const {
  const SandboxEntry* e = find(id);
  return e && e->info && (e->active() || e->released());
}

std::optional<ThreadKey> SandboxRegistry::identity_conflict(const std::string& id,
                                                            const ThreadKey& key) const {
  const SandboxEntry* e = find(id);
  if (e == nullptr) return std::nullopt;
  // Compared in place: a copy of the identity is made only for the rare conflict (this runs
  // on every acquisition of a conversation, the warm pair included).
  if (e->identity && (e->released() || (e->active() && (e->client || e->info)))) {
    if (*e->identity != key) return e->identity;
    return std::nullopt;
  }
  if (e->active() && (e->client || e->info)) {
    const std::vector<ThreadKey> mapped = conversations_.keys_of(id);
    if (mapped.size() == 1 && mapped.front() != key) return mapped.front();
  }
  return std::nullopt;
}

void SandboxRegistry::set_state(SandboxEntry& e, SandboxState state) {
  if (e.state == state) return;
  if (e.state == SandboxState::active) --active_;
  if (e.state == SandboxState::warm) --warm_;
  if (e.state == SandboxState::paused) --paused_;
  e.state = state;
  if (state == SandboxState::active) ++active_;
  if (state == SandboxState::warm) ++warm_;
  if (state == SandboxState::paused) ++paused_;
}

void SandboxRegistry::collect(Entries::iterator it) {
  const SandboxEntry& e = it->second;
  if (e.state == SandboxState::none && !e.teardown && e.publishing == 0 && e.creations == 0 &&
      e.epoch == 0) {
    entries_.erase(it);
  }
}

void SandboxRegistry::install_active(const std::string& id, ClientPtr client, InfoPtr info,
                                     const std::optional<ThreadKey>& key, double now) {
  if (shutdown_) {
    throw std::runtime_error("the provider is shutting down; not handing out sandbox " + id);
  }
  SandboxEntry& e = entry(id);
  recount(e, [&] {
    set_state(e, SandboxState::active);
    e.identity = key;
  });
  e.client = std::move(client);
  e.info = std::move(info);
  e.since = now;
  if (key) conversations_.assign(*key, id);
}

SandboxRegistry::Parked SandboxRegistry::park(const std::string& id, double now) {
  Parked parked;
  auto it = entries_.find(id);
  std::optional<ThreadKey> first_key = conversations_.erase_sandbox(id);
  if (it == entries_.end()) return parked;
  SandboxEntry& e = it->second;
  parked.epoch = e.epoch;
  if (e.released()) {
    parked.was_warm = true;
    return parked;
  }
  if (!e.active()) return parked;
  parked.client = std::move(e.client);
  if (e.info) {
    parked.info = e.info;
    recount(e, [&] {
      e.identity = first_key ? std::move(first_key) : std::move(e.identity);
      set_state(e, SandboxState::warm);
    });
    e.since = now;
  } else {
    // An active entry without an info (a seed fixture's partial dict) is simply dropped.
    recount(e, [&] {
      e.identity.reset();
      set_state(e, SandboxState::none);
    });
    collect(it);
  }
  return parked;
}

bool SandboxRegistry::add_released(const std::string& id, InfoPtr info, double released_at,
                                   std::optional<ThreadKey> identity, bool paused) {
  SandboxEntry& e = entry(id);
  if (e.state != SandboxState::none) return false;
  e.info = std::move(info);
  e.since = released_at;
  e.client.reset();
  recount(e, [&] {
    e.identity = std::move(identity);
    set_state(e, paused ? SandboxState::paused : SandboxState::warm);
  });
  return true;
}

bool SandboxRegistry::mark_paused(const std::string& id, const InfoPtr& info, double released_at) {
  SandboxEntry* e = find(id);
  if (!e || !e->warm() || e->info != info || e->since != released_at) return false;
  set_state(*e, SandboxState::paused);
  return true;
}

bool SandboxRegistry::mark_thawed(const std::string& id, const InfoPtr& info) {
  SandboxEntry* e = find(id);
  if (!e || !e->paused() || e->info != info) return false;
  set_state(*e, SandboxState::warm);
  return true;
}

SandboxRegistry::Removed SandboxRegistry::remove(const std::string& id,
                                                 const InfoPtr& expected_info) {
  Removed removed;
  auto it = entries_.find(id);
  if (expected_info) {
    const bool matches = it != entries_.end() && it->second.info == expected_info &&
                         (it->second.active() || it->second.released());
    if (!matches) return removed;
  }
  removed.removed = true;
  conversations_.erase_sandbox(id);
  if (it == entries_.end()) return removed;
  SandboxEntry& e = it->second;
  if (e.active() || e.released()) {
    removed.client = std::move(e.client);
    removed.info = std::move(e.info);
    removed.identity = e.identity;
  }
  e.epoch = 0;
  recount(e, [&] {
    e.identity.reset();
    set_state(e, SandboxState::none);
  });
  collect(it);
  return removed;
}

std::vector<std::pair<std::string, WarmEntry>> SandboxRegistry::take_released() {
  std::vector<std::pair<std::string, WarmEntry>> taken = released_entries();
  for (const auto& [id, released] : taken) erase_released_if(id, released.info);
  return taken;
}

void SandboxRegistry::erase_released_if(const std::string& id, const InfoPtr& info) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.released() || it->second.info != info) return;
  SandboxEntry& e = it->second;
  e.info.reset();
  recount(e, [&] {
    e.identity.reset();
    set_state(e, SandboxState::none);
  });
  collect(it);
}

ClientPtr SandboxRegistry::replace_info(const std::string& id, const InfoPtr& examined,
                                        InfoPtr validated, ClientPtr fresh_client) {
  SandboxEntry* e = find(id);
  if (!e || !e->active() || !e->info || e->info != examined) return fresh_client;
  e->info = std::move(validated);
  if (!fresh_client) return nullptr;
  std::swap(e->client, fresh_client);
  return fresh_client;  // the replaced one
}

ClientPtr SandboxRegistry::forget(const std::string& id,
                                  std::optional<std::uint64_t> expected_epoch,
                                  const char** kept_because) {
  *kept_because = nullptr;
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    const SandboxEntry& e = it->second;
    if (e.teardown) {
      *kept_because = "";  // a local teardown: nothing to say
      return nullptr;
    }
    if (e.publishing > 0) {
      *kept_because = ": an acquire is publishing ownership for it";
      return nullptr;
    }
    if (expected_epoch && e.epoch != *expected_epoch) {
      *kept_because = ": this instance re-acquired it after the lease check";
      return nullptr;
    }
  } else if (expected_epoch && *expected_epoch != 0) {
    *kept_because = ": this instance re-acquired it after the lease check";
    return nullptr;
  }
  conversations_.erase_sandbox(id);
  if (it == entries_.end()) return nullptr;
  SandboxEntry& e = it->second;
  ClientPtr client = e.active() ? std::move(e.client) : nullptr;
  e.client.reset();
  e.info.reset();
  e.epoch = 0;
  recount(e, [&] {
    e.identity.reset();
    set_state(e, SandboxState::none);
  });
  collect(it);
  return client;
}

bool SandboxRegistry::reserve_teardown(const std::string& id) {
  SandboxEntry& e = entry(id);
  if (e.teardown) return false;
  e.teardown = true;
  ++teardowns_;
  return true;
}

void SandboxRegistry::finish_teardown(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.teardown) return;
  it->second.teardown = false;
  --teardowns_;
  collect(it);
}

bool SandboxRegistry::tearing_down(const std::string& id) const {
  const SandboxEntry* e = find(id);
  return e && e->teardown;
}

void SandboxRegistry::begin_publish(const std::string& id) {
  ++entry(id).publishing;
}

void SandboxRegistry::end_publish(const std::string& id, bool taken) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (it->second.publishing > 0) --it->second.publishing;
  if (taken) it->second.epoch = ++epoch_counter_;
  collect(it);
}

std::optional<std::uint64_t> SandboxRegistry::epoch_of(const std::string& id) const {
  const SandboxEntry* e = find(id);
  if (!e || e->epoch == 0) return std::nullopt;
  return e->epoch;
}

void SandboxRegistry::begin_creation(const std::string& id, const std::string& user) {
  SandboxEntry& e = entry(id);
  recount(e, [&] {
    ++e.creations;
    if (!user.empty()) e.creating_user = user;
  });
}

void SandboxRegistry::end_creation(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  SandboxEntry& e = it->second;
  recount(e, [&] {
    if (e.creations > 0) --e.creations;
  });
  collect(it);
}

bool SandboxRegistry::any_creation() const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [](const auto& item) { return item.second.creations > 0; });
}

SandboxRegistry::Counted SandboxRegistry::counted(const SandboxEntry& e) {
  Counted counted;
  if (e.active() || e.released()) {
    // A creation already registered is counted as active (or released), not twice.
    if (e.identity) {
      counted.user = e.identity->user_id;
      counted.sandboxes = 1;
    }
  } else if (e.creations > 0) {
    counted.user = e.creating_user;
    counted.creations = static_cast<std::size_t>(e.creations);
  }
  return counted;
}

void SandboxRegistry::tally(const Counted& counted, int sign) {
  const std::size_t n = counted.sandboxes + counted.creations;
  if (counted.creations > 0) {
    pending_creations_ =
        sign > 0 ? pending_creations_ + counted.creations : pending_creations_ - counted.creations;
  }
  if (n == 0) return;
  if (sign > 0) {
    per_user_[counted.user] += n;
    return;
  }
  auto it = per_user_.find(counted.user);
  if (it == per_user_.end() || it->second < n) throw std::logic_error("per-user count underflow");
  if ((it->second -= n) == 0) per_user_.erase(it);
}

std::size_t SandboxRegistry::own_pending_creations(const std::string& creating_id) const {
  const SandboxEntry* e = find(creating_id);
  if (!e || e->active() || e->released()) return 0;
  return static_cast<std::size_t>(e->creations);
}

std::size_t SandboxRegistry::slots_in_use(const std::string& creating_id) const {
  return active_ + warm_ + paused_ + pending_creations_ - own_pending_creations(creating_id);
}

std::size_t SandboxRegistry::sandboxes_of_user(const std::string& user,
                                               const std::string& creating_id) const {
  auto it = per_user_.find(user);
  std::size_t count = it == per_user_.end() ? 0 : it->second;
  const SandboxEntry* creating = find(creating_id);
  if (creating && creating->creating_user == user) count -= own_pending_creations(creating_id);
  return count;
}

std::vector<std::pair<std::string, WarmEntry>> SandboxRegistry::released_entries() const {
  std::vector<std::pair<std::string, WarmEntry>> out;
  out.reserve(warm_ + paused_);
  for (const auto& [id, e] : entries_) {
    if (e.released()) out.emplace_back(id, WarmEntry{e.info, e.since, e.identity, e.paused()});
  }
  return out;
}

std::shared_ptr<ThreadLock> SandboxRegistry::thread_lock(const ThreadKey& key) {
  auto& slot = thread_locks_[key];
  if (!slot) slot = std::make_shared<ThreadLock>();
  return slot;
}

void SandboxRegistry::prune_idle_thread_locks() {
  for (auto it = thread_locks_.begin(); it != thread_locks_.end();) {
    // Only the map refers to it and nobody holds it: no waiter can be lost by dropping it.
    const bool idle = it->second.use_count() == 1 && !it->second->is_held();
    it = idle ? thread_locks_.erase(it) : std::next(it);
  }
}

bool SandboxRegistry::begin_shutdown() {
  if (shutdown_) return false;
  shutdown_ = true;
  return true;
}

}  // namespace sandboxd::core
