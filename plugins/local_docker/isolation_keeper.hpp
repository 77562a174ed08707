// Bridge port isolation kept for each sandbox's whole life (docs/network-isolation.md, "Kept,
// not set once"). Isolating a sandbox's port once, at its start, is not enough: an engine restart
// of the container (an operator's `podman restart`, a restart policy) gives it a new veth whose
// port is open, and anything else joined to our network by hand is open too. So:
//
//  - every port of a sandbox is recorded when it is isolated (its veth's name and ifindex, and
//    its bridge), and the record is checked before each hand-out: two sysfs reads, no engine
//    round trip; a port whose flag was cleared is isolated again; a port that is gone (the
//    container restarted) is found again through the container's process (the engine) and
//    isolated;
//  - the bridge of our own network is guarded: every port on it is isolated, sandbox or not,
//    as soon as it joins (a watcher on the kernel's link notifications, rtnetlink RTMGRP_LINK,
//    so a restarted sandbox is isolated within milliseconds, before its server is up), and on
//    every sweep (each reconciliation pass; after a notification overrun);
//  - on an operator's network (`engine_network`) only our sandboxes' ports are touched: a new
//    port there makes the watcher look for recorded sandboxes whose port went away.
//
// Lock story: `mutex_` guards the records and the bridge sets; never held across an engine call,
// a netlink exchange or a sysfs read. The watcher thread owns its netlink socket.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sandbox_network.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::local_docker {

class IsolationKeeper {
 public:
  struct Hooks {
    // The container's process as the engine reports it (0: not running). Blocks on the engine.
    std::function<int(const std::string& container)> pid_of;
    // Called on the watcher thread when a port joined a bridge that is not guarded but holds a
    // recorded sandbox's port: the owner re-keeps what it tracks (engine calls allowed).
    std::function<void()> recheck;
  };
  IsolationKeeper(NetnsSockets& sockets, Hooks hooks, std::shared_ptr<Logger> logger);
  ~IsolationKeeper();  // stops the watcher
  IsolationKeeper(const IsolationKeeper&) = delete;
  IsolationKeeper& operator=(const IsolationKeeper&) = delete;

  // The container's port isolated now, through its process (bound to it: with_container_process)
  // and recorded; with `guard`, its bridge is guarded from now on. Throws PortOnNoBridge or
  // std::runtime_error.
  BridgePort isolate(const std::string& container, bool guard);
  // The container's isolation verified from its record (no engine), re-applied where lost;
  // through isolate() when the record is missing or its port is gone. Throws like isolate().
  void keep(const std::string& container, bool guard);
  void forget(const std::string& container);
  // Guards the bridge with ifindex `bridge_index` (our own network's, learnt from the engine).
  void guard(int bridge_index);
  bool guards_any() const;

  struct Sweep {
    std::vector<std::string> isolated;  // ports found open on a guarded bridge, isolated now
    std::vector<std::string> lost;      // recorded containers whose port went away
  };
  // Every port of every guarded bridge isolated; every recorded port checked (re-isolated when
  // its flag was cleared). Bounded: at most 65,536 ports a bridge.
  Sweep sweep();

  // Starts the watcher thread; idempotent.
  void start_watching();

 private:
  static std::string key_of(const std::string& container) { return container.substr(0, 12); }
  void watch();
  // A port joined a bridge: isolated at once on a guarded one; a recheck asked on a watched one.
  void on_new_port(int index, int master, bool* recheck);

  NetnsSockets& sockets_;
  const Hooks hooks_;
  const std::shared_ptr<Logger> logger_;
  mutable Mutex mutex_;
  std::map<std::string, BridgePort> ports_ GUARDED_BY(mutex_);  // container id[:12] → its port
  std::set<int> guarded_ GUARDED_BY(mutex_);  // bridges whose every port is isolated
  std::set<int> watched_ GUARDED_BY(mutex_);  // bridges holding a recorded port
  std::thread watcher_;
  std::atomic<bool> watching_{false};
  host_fs::UniqueFd stop_;  // an eventfd: written to stop the watcher
};

}  // namespace sandboxd::local_docker
