#include "sandboxd/core/usage_sampler.hpp"

#include <chrono>

namespace sandboxd::core {

UsageSampler::UsageSampler(Provider& provider, std::shared_ptr<Clock> clock,
                           UsageSamplerOptions options)
    : UsageSampler(
          provider.backend() ? backend_capability<SandboxUsage>(*provider.backend()) : nullptr,
          [&provider](std::size_t limit) { return provider.tracked_infos(limit); },
          std::move(clock), options) {}

UsageSampler::UsageSampler(SandboxUsage* usage, TrackedSource tracked, std::shared_ptr<Clock> clock,
                           UsageSamplerOptions options)
    : tracked_(std::move(tracked)),
      clock_(clock ? std::move(clock) : std::make_shared<SystemClock>()),
      options_(options),
      usage_(usage) {
  figures_.available = usage_ != nullptr;
  figures_.interval_seconds = options_.interval_seconds;
}

UsageSampler::~UsageSampler() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void UsageSampler::start() {
  if (usage_ == nullptr || thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

UsageView UsageSampler::view() {
  MutexLock lock(mutex_);
  const double now = clock_->monotonic_now();
  const bool idle = now - demanded_at_ > options_.demand_seconds;
  demanded_at_ = now;
  if (idle) wake_.notify_all();  // the thread slept for want of a viewer: sweep now
  return figures_;
}

void UsageSampler::run() {
  while (true) {
    {
      MutexLock lock(mutex_);
      // Asleep until someone looks; then one sweep per interval while they keep looking.
      lock.wait(wake_, [this]() REQUIRES(mutex_) {
        return stopping_ || clock_->monotonic_now() - demanded_at_ <= options_.demand_seconds;
      });
      if (stopping_) return;
    }
    const double started = clock_->monotonic_now();
    sweep();
    MutexLock lock(mutex_);
    const double rest = options_.interval_seconds - (clock_->monotonic_now() - started);
    if (rest > 0) {
      lock.wait_for(wake_, std::chrono::duration<double>(rest),
                    [this]() REQUIRES(mutex_) { return stopping_; });
    }
    if (stopping_) return;
  }
}

void UsageSampler::sweep() {
  if (usage_ == nullptr) return;
  // A provider's source is one short hold of the registry mutex, sharing the infos; no engine
  // call runs under it.
  Provider::TrackedInfos tracked;
  try {
    tracked = tracked_(options_.max_per_sweep);
  } catch (const std::exception&) {
    return;  // nothing listed this time (the provisioner's engine is away): the figures stay
  }
  std::map<std::string, SandboxUsageFigures> figures;
  std::map<std::string, Previous> read;  // becomes previous_: a sandbox gone is forgotten
  for (const InfoPtr& info : tracked.infos) {
    const std::string& id = info->sandbox_id;
    SandboxUsageFigures& out = figures[id];
    try {
      const SandboxUsage::Reading reading = usage_->usage(*info);
      out.read_at = clock_->wall_now();
      out.memory_bytes = reading.memory_bytes;
      out.memory_limit_bytes = reading.memory_limit_bytes;
      out.pids = reading.pids;
      if (reading.cpu_seconds && reading.host_cpu_seconds) {
        const auto before = previous_.find(id);
        if (before != previous_.end()) {
          const double used = *reading.cpu_seconds - before->second.cpu_seconds;
          const double host = *reading.host_cpu_seconds - before->second.host_cpu_seconds;
          // The host's counter adds up every CPU: a share of it times the CPUs is the share
          // of one CPU.
          if (host > 0 && used >= 0) {
            out.cpu_percent = used / host * reading.online_cpus.value_or(1) * 100.0;
          }
        }
        read[id] = {*reading.cpu_seconds, *reading.host_cpu_seconds};
      }
    } catch (const std::exception& e) {
      out.read_at = clock_->wall_now();
      out.error = e.what();
    }
  }
  previous_ = std::move(read);
  MutexLock lock(mutex_);
  figures_.sandboxes = std::move(figures);
  figures_.swept_at = clock_->wall_now();
  figures_.not_sampled = tracked.left_out;
}

}  // namespace sandboxd::core
