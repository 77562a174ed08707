// The provider's lifecycle decisions, named (design "Core shape"; LLVM's extension points
// are the model: each decision point says exactly when it runs). The default policy is
// DeerFlow's behaviour; a new behaviour (pause instead of stop, a hard ceiling) is a small
// subclass handed to the provider in ProviderDeps::policy, not surgery on the provider.
//
// Every decision runs off the registry mutex, on whichever thread reached it, and must not
// block: it decides, the provider acts.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/core/conversation.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::core {

// A released sandbox (warm, or paused: issue 23) as a decision sees it.
struct WarmCandidate {
  std::string sandbox_id;
  double released_at = 0.0;  // monotonic seconds
  std::optional<ThreadKey> conversation;
  bool paused = false;  // frozen by the backend
};

class LifecyclePolicy {
 public:
  virtual ~LifecyclePolicy() = default;

  // ── over capacity ──
  // Runs when a creation finds every replica slot in use (active + warm + other creations in
  // flight ≥ replicas), beside its backend create. Returns the released sandboxes (warm and
  // paused) to try to stop, in order: the first that can be stopped (not reclaimed meanwhile,
  // not owned by a peer) is, then the check repeats. Default: paused ones before running ones
  // (a paused sandbox is the one least likely to be wanted soon), oldest released first in
  // each; never an active one (they are not candidates).
  virtual std::vector<std::string> eviction_order(std::vector<WarmCandidate> warm) const;
  // Runs when nothing warm could be stopped and the slots are still all in use. true: create
  // beyond the cap with a warning (DeerFlow's soft `replicas`); false: refuse the creation
  // with a capacity error.
  virtual bool create_beyond_replicas() const { return true; }

  // ── warm expired ──
  // Runs, on the idle checker's pass, for each warm sandbox released longer ago than the idle
  // timeout (paused ones too: time spent paused counts). true: stop it (default); false: keep
  // it released.
  virtual bool stop_expired_warm(const WarmCandidate& /*sandbox*/, double /*warm_for*/) const {
    return true;
  }

  // ── warm long enough to pause ──
  // Runs, on the idle checker's pass, for each warm sandbox released at least
  // pause_after_seconds ago, only when that option is set and the backend can pause. true:
  // pause it (default); false: keep it running.
  virtual bool pause_warm(const WarmCandidate& /*sandbox*/, double /*warm_for*/) const {
    return true;
  }

  // ── idle ──
  // Runs, on the idle checker's pass, for each active sandbox unused for longer than the idle
  // timeout. true: stop it (default); false: leave it active.
  virtual bool stop_idle_active(const std::string& /*sandbox_id*/, double /*idle_for*/) const {
    return true;
  }

  // ── orphan found ──
  // Runs during reconciliation for each running container of ours that nobody here tracks and
  // whose lease has been free for the adoption grace, before it is claimed. true: adopt it
  // into the warm pool, where the idle timeout reaps it (default); false: leave it alone.
  virtual bool adopt_orphan(const SandboxInfo& /*sandbox*/) const { return true; }
};

// DeerFlow's behaviour: every default above.
std::shared_ptr<LifecyclePolicy> default_lifecycle_policy();

}  // namespace sandboxd::core
