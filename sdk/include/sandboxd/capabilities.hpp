// Optional backend verbs as capability interfaces. A backend that offers a verb
// also derives from its interface; the host asks with backend_capability<T>(backend), a
// dynamic_cast, and a backend without it simply is not asked. So a new optional verb is a new
// interface in this file: SandboxBackend's layout and the SDK ABI stay as they are.
//
// The interfaces carry no data and no key function: their type_info is compared by name
// across the plugin boundary (libstdc++ does so for libraries loaded RTLD_LOCAL), which is why
// each must keep its name and its namespace once published.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/backend.hpp"
#include "sandboxd/ownership.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd {

// Mount-contract negotiation (design §3.6, §5.7): offered by a backend whose mount_mode_kind()
// is contract_negotiated (the remote provisioner). refresh and snapshot may block (a network
// probe under a lock); the two cached accessors must never block.
class MountContractNegotiation {
 public:
  virtual ~MountContractNegotiation() = default;
  virtual void refresh_capabilities_if_stale() = 0;
  virtual MountContractSnapshot mount_contract_snapshot() = 0;
  virtual int cached_mount_contract_version() const = 0;
  virtual bool cached_mount_contract_capability_known() const = 0;
};

// Freezing a sandbox's processes and thawing them (the engine's cgroup freezer): a
// paused sandbox uses no CPU and keeps its memory, processes and files. While paused it is
// alive (is_alive() answers true) but does not answer HTTP, so the host thaws it before
// handing it out. Both calls are idempotent and may block on the engine. A backend offering
// it lists paused sandboxes in list_running() (they are alive) and thaws one before discover()
// returns it (discovery hands it out); the host thaws what it finds again regardless.
class SandboxPausing {
 public:
  virtual ~SandboxPausing() = default;
  // "Already paused" counts as done. Throws when the engine refuses or the sandbox is gone.
  virtual void pause(const SandboxInfo& info) = 0;
  // "Not paused" counts as done. Throws like pause().
  virtual void unpause(const SandboxInfo& info) = 0;
};

// A deployment-wide record of sandboxes for the capacity ceilings, offered by an
// ownership store that several gateway processes share (SQLite on one host, Redis across
// hosts). A reservation stands for one sandbox, whatever its state (creating, active,
// released), under its id; it names the user it counts against and the owner (this store's
// owner_id) that renews it, and it expires one TTL (ttl_seconds()) after its last write, so a
// dead gateway's reservations free themselves. Every call is atomic in the store and throws
// OwnershipBackendError when the store cannot answer (the host then fails closed).
class CapacityLedger {
 public:
  virtual ~CapacityLedger() = default;
  enum class Refusal { none, total, per_user };
  // Drops expired reservations; then, when `sandbox_id` is not reserved yet, records it for
  // `user` only if fewer than `total_ceiling` reservations exist in all and fewer than
  // `per_user_ceiling` for `user` (0: no such ceiling). An existing reservation of the id is
  // renewed and taken over, never refused.
  virtual Refusal reserve(const std::string& sandbox_id, const std::string& user,
                          std::size_t total_ceiling, std::size_t per_user_ceiling) = 0;
  // Records or refreshes each (id, user) as ours with a fresh TTL, with no ceiling: these
  // sandboxes exist (the renewal loop, adoption, discovery).
  virtual void renew_reservations(
      const std::vector<std::pair<std::string, std::string>>& sandboxes) = 0;
  // Drops the reservation of a sandbox that is gone (whoever made it); `user` is the one it
  // was reserved for.
  virtual void unreserve(const std::string& sandbox_id, const std::string& user) = 0;
  // Live reservations, in all and for `user` ("" : in all only).
  virtual std::size_t reserved(const std::string& user = "") = 0;
};

// Pre-started slots: containers started ahead of need and handed to a new
// conversation with its own mounts in milliseconds. The host asks claim_slot() before a cold
// create(); a claim that succeeds returns the conversation's sandbox exactly as create() would
// (deterministic name, identity, URL; the host still probes its readiness), and a miss says
// why, so the host creates cold and counts the reason. Both calls may block on the engine.
class PreStartedSlots {
 public:
  virtual ~PreStartedSlots() = default;
  enum class Miss {
    none,          // claimed
    none_ready,    // no slot is ready yet (starting, or the pool is still learning the mounts)
    key_mismatch,  // ready slots were made for another set of mount points
    unsupported,   // slots are asked for but cannot work here (the reason is in the detail)
    claim_failed,  // a ready slot could not be given this conversation (detail says why)
  };
  struct Claim {
    std::optional<SandboxInfo> sandbox;  // set when claimed
    Miss miss = Miss::none;
    std::string detail;  // why it missed, for the log; never holds a secret
  };
  virtual Claim claim_slot(const CreateRequest& request) = 0;

  // Starts keeping slots ready, in the background. Only a long-lived host calls it (serve,
  // the provisioner, an embedding gateway through Provider::start()): a one-shot command must
  // not start containers it would remove a moment later. Idempotent; never blocks.
  virtual void start_slots() = 0;

  // Why slots could not work here, found without starting or mounting anything (a check
  // command's answer): "" when nothing was found, and then the start-up probe decides. May
  // ask the engine.
  virtual std::string slot_preflight() = 0;

  struct Status {
    std::size_t configured = 0;  // slots the configuration asks for
    std::size_t target = 0;      // slots being kept (0: none asked for, or not started)
    std::size_t ready = 0;       // slots ready to claim now
    std::string off_reason;      // non-empty when slots were asked for but cannot work here
  };
  // Never blocks on the engine.
  virtual Status slot_status() const = 0;
};

// Network policies: the one a backend makes new sandboxes under, in the form it
// records on each sandbox (SandboxInfo::network_policy). The host replaces a sandbox found
// under another policy through its fenced destroy path instead of reusing it.
class SandboxNetworkPolicy {
 public:
  virtual ~SandboxNetworkPolicy() = default;
  virtual std::string configured_network_policy() const = 0;
  // Why the configured policy cannot be enforced here ("" when it can): check-config shows it,
  // and a create fails closed with it.
  virtual std::string network_preflight() = 0;
};

// Sandboxes with no address the host can reach (issue 33: `isolated`, `allowlist`): their API
// listens in a network namespace of their own, and only a socket made in that namespace
// reaches it. The host's relay and readiness probe make one with open_socket() and connect it
// to the address sandbox_url names there (127.0.0.1:8080).
class NamespacedSandboxes {
 public:
  virtual ~NamespacedSandboxes() = default;
  // Whether `info` is such a sandbox.
  virtual bool namespaced(const SandboxInfo& info) const = 0;
  // A new TCP socket (unconnected, blocking, close-on-exec) in the sandbox's network
  // namespace; the caller owns it. Throws std::runtime_error naming why it could not be made
  // (the sandbox is gone, no permission to enter its namespace). May ask the engine.
  virtual int open_socket(const SandboxInfo& info) = 0;
};

// Isolation kept for a sandbox's whole life, offered by a backend whose boundaries are things
// it applies to each sandbox (a bridge port flag, a rule) that the engine can undo behind the
// host's back (a restart of the container gives it a new, open port). The host asks
// keep_isolation() before it hands a sandbox out, on every path (reuse, reclaim, slot claim,
// resume, discovery, adoption), and keep_all_isolation() on every reconciliation pass; a
// long-lived host calls start_keeping_isolation() once, so that what the engine undoes is
// re-applied as it happens.
class IsolationKeeping {
 public:
  virtual ~IsolationKeeping() = default;
  // Verifies that `info`'s isolation holds, re-applying it where it was lost. Cheap when it
  // holds: no engine round trip. Throws std::runtime_error saying why when it can neither
  // verify nor re-apply it; the host then replaces the sandbox instead of handing it out.
  virtual void keep_isolation(const SandboxInfo& info) = 0;
  // Every sandbox of this backend verified and re-applied where lost; returns one line for each
  // thing an operator should know (a container that is not a sandbox on the sandboxes'
  // network, named). May ask the engine; never throws for one sandbox's failure.
  virtual std::vector<std::string> keep_all_isolation() = 0;
  // Starts re-applying isolation as soon as something undoes it. Long-lived hosts only (serve,
  // the provisioner, an embedding gateway through Provider::start()); idempotent; never blocks.
  virtual void start_keeping_isolation() = 0;
};

// Egress decisions for sandboxes whose egress proxy runs in another host: the remote
// provisioner's sandboxes get theirs from sandboxd-provisioner, so a gateway's serve forwards
// its /v1/sandboxes/ID/egress routes there. `action` is "" (the view, a GET), "events",
// "deny-pending" or "decide" (POSTs; `json_body` is the route's body, docs/egress.md). Blocks
// on the network; never called under the host's registry lock.
class RemoteSandboxEgress {
 public:
  virtual ~RemoteSandboxEgress() = default;
  struct Answer {
    int status = 0;    // the remote host's HTTP status
    std::string body;  // its JSON document
  };
  // Throws std::runtime_error when no answer came (unreachable, timed out).
  virtual Answer egress_call(const std::string& sandbox_id, const std::string& action,
                             const std::string& json_body) = 0;
};

// What a backend runs every sandbox with, as an operator's check shows it (`sandboxctl
// check-config`): one line per setting that matters for isolation and limits, with where it
// came from ("default", a key path, "environment variable …"). Never a secret.
class SettingsReport {
 public:
  virtual ~SettingsReport() = default;
  struct Line {
    std::string setting;  // "memory 2g", "cap_add CHOWN,DAC_OVERRIDE"
    std::string source;
  };
  virtual std::vector<Line> effective_settings() const = 0;
};

// What a running sandbox uses now, as its engine counts it (Docker's and podman's
// one-shot container stats): the host samples it off the request path, at most every few
// seconds, and caches it for the operator's page. CPU is a cumulative counter: the host derives
// a percentage from two readings. Any figure the engine did not give stays empty. May block on
// the engine; throws when it cannot answer (the sandbox gone, the engine down).
class SandboxUsage {
 public:
  virtual ~SandboxUsage() = default;
  struct Reading {
    std::optional<double> cpu_seconds;          // CPU time used since the sandbox started
    std::optional<double> host_cpu_seconds;     // the host's CPU time at the same moment
    std::optional<int> online_cpus;             // CPUs the sandbox could use
    std::optional<std::uint64_t> memory_bytes;  // in use, page cache the kernel can drop excluded
    std::optional<std::uint64_t> memory_limit_bytes;
    std::optional<std::uint64_t> pids;  // processes and threads
  };
  virtual Reading usage(const SandboxInfo& info) = 0;
};

// Where a backend's sandboxes take their space on this host (the engine's storage: images and
// writable layers), so the host can keep a free-space floor there too (`min_free_disk`). May ask
// the engine once; the host caches the answer.
class EngineStorage {
 public:
  virtual ~EngineStorage() = default;
  // An absolute path on this host's filesystem holding the sandboxes' storage; "" when it is
  // not on this host (a remote or TCP engine) or the engine would not say.
  virtual std::string engine_storage_path() = 0;
};

// What a sandbox wrote outside its mounts (its container's writable layer: installed packages,
// files in /tmp), so the host can hold it to the conversation's bound where the engine cannot
// (the engine's own size option needs overlay on XFS with project quotas). Sampled off the
// request path, a bounded number per pass. May block on the engine (a layer's size is walked).
class WritableLayerUsage {
 public:
  virtual ~WritableLayerUsage() = default;
  // Bytes in the sandbox's writable layer; nullopt when the engine would not say. Throws when
  // the sandbox is gone or the engine cannot answer.
  virtual std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo& info) = 0;
};

// Snapshots of a sandbox (docs/snapshots.md): what it wrote outside its mounts, kept as an image
// of the backend's own (never pushed anywhere), from which new sandboxes are made. The host
// copies the conversation's directories itself; the backend keeps the filesystem changes.
// Process memory is not kept: a sandbox made from a snapshot starts its processes afresh. A
// backend that could checkpoint memory would say so in Image::memory (none here can).
class SandboxSnapshots {
 public:
  virtual ~SandboxSnapshots() = default;
  struct Image {
    std::string image;        // the backend's reference to it (an engine image id)
    std::uint64_t bytes = 0;  // what it holds beyond the sandbox's own image, when known
    bool memory = false;      // process memory kept too
  };
  // `info`'s filesystem changes kept as an image for snapshot `name`, the sandbox frozen for
  // the instant it takes where the engine can. Throws std::runtime_error naming why; nothing
  // is left behind on failure.
  virtual Image commit_snapshot(const SandboxInfo& info, const std::string& name) = 0;
  // Removes an image commit_snapshot made; one already gone is no error.
  virtual void remove_snapshot_image(const std::string& image) = 0;
  // As create(), but the sandbox is made from `image` (a commit_snapshot's) instead of the
  // configured one; everything else (mounts, limits, network policy) as create() does it.
  virtual SandboxInfo create_from_snapshot(const CreateRequest& request,
                                           const std::string& image) = 0;
};

// Every reason a claim can miss, in the order metrics list them.
inline constexpr PreStartedSlots::Miss kSlotMissReasons[] = {
    PreStartedSlots::Miss::none_ready, PreStartedSlots::Miss::key_mismatch,
    PreStartedSlots::Miss::unsupported, PreStartedSlots::Miss::claim_failed};

inline const char* to_string(PreStartedSlots::Miss miss) {
  switch (miss) {
    case PreStartedSlots::Miss::none:
      return "none";
    case PreStartedSlots::Miss::none_ready:
      return "none_ready";
    case PreStartedSlots::Miss::key_mismatch:
      return "key_mismatch";
    case PreStartedSlots::Miss::unsupported:
      return "unsupported";
    case PreStartedSlots::Miss::claim_failed:
      return "claim_failed";
  }
  return "unknown";
}

// The capability `Capability` of a backend, or nullptr when it does not offer it.
template <class Capability>
Capability* backend_capability(SandboxBackend& backend) {
  return dynamic_cast<Capability*>(&backend);
}
template <class Capability>
const Capability* backend_capability(const SandboxBackend& backend) {
  return dynamic_cast<const Capability*>(&backend);
}
// The capability `Capability` of an ownership store, or nullptr.
template <class Capability>
Capability* store_capability(OwnershipStore& store) {
  return dynamic_cast<Capability*>(&store);
}

}  // namespace sandboxd
