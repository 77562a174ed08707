// Provider: what a tenant may take of the host's disk (docs/storage.md).
//  - The free-space floor: a tenant that fills the disk fails every other conversation, the
//    engine and sandboxd's own state with it; below `min_free_disk` under the state directory
//    or the engine's storage, new sandboxes are refused (a capacity refusal, reason
//    min_free_disk) until space returns. Running sandboxes are not touched.
//  - The writable layer: what a sandbox writes outside its mounts is the engine's; where the
//    engine cannot bound it, the layer watcher thread's passes ask the backend for a bounded
//    batch of layers' sizes each and stop a sandbox past disk_limit, saying why (event
//    over_disk_limit).
#include <sys/statvfs.h>

#include <algorithm>

#include "provider_impl.hpp"
#include "sandboxd/core/thread_storage.hpp"

namespace sandboxd::core {

namespace {
// Sandboxes whose writable layer one pass looks at: each look walks a layer in the engine.
constexpr std::size_t kLayerChecksPerPass = 256;
}  // namespace

void Provider::Impl::check_free_disk(const std::string& sandbox_id, const std::string& user_id) {
  const std::uint64_t floor = options_.min_free_disk_bytes;
  if (floor == 0) return;
  std::call_once(engine_storage_once_, [this] {
    if (auto* storage = backend_ ? backend_capability<EngineStorage>(*backend_) : nullptr) {
      try {
        engine_storage_path_ = storage->engine_storage_path();
      } catch (const std::exception& e) {
        log(LogLevel::warning,
            std::string("The engine's storage could not be located (its free space is not "
                        "watched): ") +
                e.what());
      }
    }
  });
  for (const std::string& where : {paths_->base_dir().string(), engine_storage_path_}) {
    if (where.empty()) continue;
    struct statvfs fs {};
    if (::statvfs(where.c_str(), &fs) != 0) continue;  // not here: nothing to watch
    const std::uint64_t free = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free >= floor) continue;
    events_.rejections_min_free_disk.fetch_add(1, std::memory_order_relaxed);
    const std::string message = "only " + show_size(free) + " is free under " + where +
                                ", below the floor min_free_disk " + show_size(floor) +
                                ": new sandboxes are refused until space returns (running ones "
                                "go on)";
    log(LogLevel::warning, "Refusing sandbox " + sandbox_id + ": " + message);
    if (event_log_) {
      event_log_->record(LifecycleEventKind::refused, sandbox_id, user_id, std::nullopt,
                         "min_free_disk");
    }
    throw ServiceError(ErrorKind::capacity, message, 30.0);
  }
}

Provider::Impl::LayerPass Provider::Impl::stop_layers_past_bound() {
  if (!watching_layers()) return LayerPass::done;
  if (!layer_pass_mutex_.try_lock()) return LayerPass::done;  // another pass is looking now
  LayerPass outcome = LayerPass::done;
  try {
    outcome = layer_pass();
  } catch (...) {
    layer_pass_mutex_.unlock();
    throw;
  }
  layer_pass_mutex_.unlock();
  return outcome;
}

Provider::Impl::LayerPass Provider::Impl::layer_pass() {
  const std::uint64_t bound = paths_->storage().limit_bytes();
  struct Looked {
    std::string id;
    InfoPtr info;
    std::optional<ThreadKey> conversation;
  };
  // In id order from where the last pass stopped, wrapping round: every sandbox is looked at
  // within (its count / kLayerChecksPerPass) passes. The batch is chosen under the registry
  // mutex with a bounded heap (a string copied only for a sandbox that enters it), so holding
  // the mutex stays a walk of the registry, not a copy and a sort of it.
  const auto comes_first = [cursor = next_layer_to_check_](const std::string& a,
                                                           const std::string& b) {
    const bool a_wraps = a <= cursor, b_wraps = b <= cursor;
    return a_wraps != b_wraps ? b_wraps : a < b;
  };
  const auto heap_order = [&](const Looked& a, const Looked& b) { return comes_first(a.id, b.id); };
  std::vector<Looked> batch;
  bool more_remain = false;
  {
    MutexLock lock(mutex_);
    registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      if (!entry.info) return;
      if (batch.size() < kLayerChecksPerPass) {
        batch.push_back({id, entry.info, entry.identity});
        std::push_heap(batch.begin(), batch.end(), heap_order);
        return;
      }
      more_remain = true;
      if (!comes_first(id, batch.front().id)) return;
      std::pop_heap(batch.begin(), batch.end(), heap_order);
      batch.back() = {id, entry.info, entry.identity};
      std::push_heap(batch.begin(), batch.end(), heap_order);
    });
  }
  std::sort_heap(batch.begin(), batch.end(), heap_order);
  if (!batch.empty()) next_layer_to_check_ = batch.back().id;
  for (const Looked& sandbox : batch) {
    if (background_stopping()) return LayerPass::done;  // shutdown does not wait for a sweep
    std::optional<std::uint64_t> bytes;
    try {
      bytes = writable_layers_->writable_layer_bytes(*sandbox.info);
    } catch (const std::exception&) {
      continue;  // gone, or the engine is busy: the next pass looks again
    }
    if (!bytes || *bytes <= bound) continue;
    const std::string why =
        "its writable layer holds " + show_size(*bytes) + ", past disk_limit " + show_size(bound);
    log(LogLevel::warning, "Sandbox " + sandbox.id + ": " + why + "; stopping it");
    const Predicate same_container = [id = sandbox.id,
                                      info = sandbox.info](const SandboxRegistry& registry) {
      const SandboxEntry* entry = registry.find(id);
      return entry && entry->info == info;
    };
    try {
      if (destroy_tracked(sandbox.id, same_container) == DestroyOutcome::destroyed) {
        events_.disk_limit_stops.fetch_add(1, std::memory_order_relaxed);
        note(LifecycleEventKind::over_disk_limit, sandbox.id, sandbox.conversation, why);
      }
    } catch (const std::exception& e) {
      log(LogLevel::error, "Failed to stop sandbox " + sandbox.id + " past its bound: " + e.what());
    }
  }
  return more_remain ? LayerPass::more_remain : LayerPass::done;
}

void Provider::stop_layers_past_bound() {
  (void)impl_->stop_layers_past_bound();
}

std::optional<ThreadStorage::Usage> Provider::conversation_storage(
    const std::string& user_id, const std::string& thread_id) const {
  return impl_->paths_->thread_storage_usage(thread_id, user_id);
}

const ThreadStorage& Provider::storage() const {
  return impl_->paths_->storage();
}

}  // namespace sandboxd::core
