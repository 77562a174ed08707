// How local_docker keeps sandboxes apart on the network (docs/network-isolation.md):
//
//  - `open` (DeerFlow's default mode): every sandbox joins one bridge network of ours (or the
//    operator's `network`), with its engine egress and its published loopback port, and its
//    port on that bridge is isolated (the kernel bridge's per-port `isolated` flag, set through
//    rtnetlink right after the container starts, before the sandbox is handed out): isolated
//    ports exchange no frame with each other, only with the host. A sandbox has no
//    CAP_NET_ADMIN to route around it. No firewall rule is needed, so it holds on Docker run
//    with --iptables=false as on podman's CNI, and one network serves any number of sandboxes.
//  - `isolated`: no network at all (NetworkMode none): the sandbox has only its loopback, and
//    is reached through a socket made in its network namespace (NamespacedSandboxes), which
//    the host's relay and readiness probe use.
//
// Entering a container's network namespace (setns) and setting a bridge port flag need root
// in the engine's namespaces; network_preflight() says so when it cannot work.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sandboxd/host_fs.hpp>
#include <sandboxd/thread_annotations.hpp>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::local_docker {

// The network policy of the sandboxes a backend makes: DeerFlow's `sandbox.network`.
struct NetworkPolicy {
  std::string mode = "open";  // open | isolated | allowlist
  bool publish = true;        // open: publish the API on a host loopback port (DeerFlow's way)
  bool isolate = true;        // open: isolate each sandbox's bridge port
  std::vector<std::string> allow_domains;
  std::string approval = "prompt";  // deny | prompt (DeerFlow's default, as the host's proxy)
  int temporary_grant_ttl = 300;
  bool test_only_upstreams = false;
  // `secrets`, as check-config shows them ("TOKEN → Authorization to api.example"); serve's
  // egress host reads and checks them and puts each placeholder in the environment.
  std::vector<std::string> secrets_shown;
  // `inject_tls_ca`'s certificate file, as check-config shows it ("" when not given).
  std::string tls_ca_shown;

  // What is recorded on each sandbox (label sandboxd.network-policy): "isolated", or "open"
  // with "+shared" (isolation turned off) and "+unpublished" (no host port) when they apply.
  std::string label() const;
  bool namespaced() const { return mode != "open" || !publish; }
};

// Whether a sandbox made under policy `label` has no host address: its API is reached only
// from inside its network namespace.
bool is_namespaced_policy(const std::string& label);

// Network mode allowlist: where the host's egress proxy listens inside each sandbox's namespace
// (the host makes the listener there), as the sandbox's environment names it.
inline constexpr const char* kEgressProxyUrl = "http://127.0.0.1:3128";

// Makes sockets inside other network namespaces from one thread of its own, which enters a
// namespace (setns), makes the socket and returns to the process's namespace: a socket keeps
// the namespace it was made in, and no other thread ever leaves the process's namespace.
//
// Lock story: `mutex_` guards the queue and `stopping_`; the worker takes a job out under it
// and runs it outside. The namespace handles cache has its own mutex (`cache_mutex_`), never
// held across a setns or an engine call.
class NetnsSockets {
 public:
  NetnsSockets();
  ~NetnsSockets();
  NetnsSockets(const NetnsSockets&) = delete;
  NetnsSockets& operator=(const NetnsSockets&) = delete;

  // A socket(domain, type | SOCK_CLOEXEC, protocol) made in the network namespace of process
  // `pid` (its /proc/PID/ns/net). Throws std::runtime_error naming the pid and the reason.
  int socket_in(int pid, int domain, int type, int protocol);

  // The same, for the namespace of container `container_id`, whose process `pid_of` looks up.
  // Cached per container as the process and the namespace it had (device and inode of its
  // /proc/PID/ns/net): the cached pid is used only while it still has that namespace, so a
  // reused pid, or a process that moved, never puts a socket in another sandbox's namespace;
  // otherwise `pid_of` is asked again.
  int socket_in_container(const std::string& container_id, const std::function<int()>& pid_of,
                          int domain, int type, int protocol);
  void forget(const std::string& container_id);

 private:
  // A namespace as the kernel names it.
  struct Namespace {
    dev_t device = 0;
    ino_t inode = 0;
    bool operator==(const Namespace&) const = default;
  };
  struct Cached {
    int pid = 0;
    Namespace netns;
  };
  void run();
  // socket_in, refusing (std::runtime_error) when `expected` is given and the pid's namespace
  // is another; `seen` gets the namespace the socket was made in.
  int socket_in_namespace(int pid, const Namespace* expected, Namespace* seen, int domain, int type,
                          int protocol);

  host_fs::UniqueFd home_;  // this process's network namespace
  // The worker's queue; never held while a job runs.
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread worker_;

  // The cache alone; never held across a namespace entry or `pid_of`.
  Mutex cache_mutex_;
  std::map<std::string, Cached> pids_ GUARDED_BY(cache_mutex_);  // container id → its process
};

// The sandbox's eth0 peer is on no bridge: the bridge under its network was deleted after the
// container joined it (podman 4.3 removes a network, bridge and all, when its "in use" check ran
// before the container was created). The container is cut off from its network for good.
class PortOnNoBridge : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A sandbox's port on its bridge: the host side of its veth pair.
struct BridgePort {
  std::string name;      // the host interface, "veth…"
  int index = 0;         // its ifindex (never reused while the interface lives)
  int bridge_index = 0;  // its bridge's ifindex
};

// The bridge port of the container whose process is `pid`: its eth0's peer in this
// namespace, isolated (IFLA_BRPORT_ISOLATED) and read back from sysfs. Throws PortOnNoBridge
// as above, std::runtime_error naming what failed otherwise.
BridgePort isolate_bridge_port(NetnsSockets& sockets, int pid);

// The port with ifindex `index` (a bridge port in this namespace) isolated and read back; no
// engine, no other namespace. Throws std::runtime_error naming what failed.
void isolate_port(int index);

// Whether the port `name` still has ifindex `index` and is isolated, read from sysfs; nullopt
// when no such interface exists (or it is another now).
std::optional<bool> port_isolated(const std::string& name, int index);

// Runs `use(pid)` with the container's process as `pid_of` reports it, and returns that pid once
// the same process is still the container's afterwards: a pidfd holds the process while `use`
// runs (so a pid freed and reused meanwhile is told apart) and `pid_of` is asked again after.
// Whatever `use` did through /proc/PID, it did to the container's process. Tries three times;
// throws std::runtime_error when the container has no running process or keeps changing.
int with_container_process(const std::function<int()>& pid_of,
                           const std::function<void(int pid)>& use);

}  // namespace sandboxd::local_docker
