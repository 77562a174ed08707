#include "isolation_keeper.hpp"

#include <dirent.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace sandboxd::local_docker {
namespace {

constexpr std::size_t kMaxPortsPerBridge = 65536;

std::string name_of(int index) {
  char name[IF_NAMESIZE] = {0};
  if (::if_indextoname(static_cast<unsigned>(index), name) == nullptr) return "";
  return name;
}

}  // namespace

IsolationKeeper::IsolationKeeper(NetnsSockets& sockets, Hooks hooks, std::shared_ptr<Logger> logger)
    : sockets_(sockets),
      hooks_(std::move(hooks)),
      logger_(std::move(logger)),
      stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

IsolationKeeper::~IsolationKeeper() {
  if (watcher_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    watcher_.join();
  }
}

BridgePort IsolationKeeper::isolate(const std::string& container, bool guard) {
  BridgePort port;
  with_container_process([&] { return hooks_.pid_of(container); },
                         [&](int pid) { port = isolate_bridge_port(sockets_, pid); });
  MutexLock lock(mutex_);
  ports_[key_of(container)] = port;
  if (port.bridge_index > 0) {
    watched_.insert(port.bridge_index);
    if (guard) guarded_.insert(port.bridge_index);
  }
  return port;
}

void IsolationKeeper::keep(const std::string& container, bool guard) {
  std::optional<BridgePort> recorded;
  {
    MutexLock lock(mutex_);
    if (const auto it = ports_.find(key_of(container)); it != ports_.end()) recorded = it->second;
  }
  if (recorded) {
    const std::optional<bool> isolated = port_isolated(recorded->name, recorded->index);
    if (isolated == true) return;
    if (isolated == false) {
      isolate_port(recorded->index);
      if (logger_) {
        logger_->warning("local_docker: sandbox container " + key_of(container) + "'s port " +
                         recorded->name + " was open on its bridge again; isolated it again");
      }
      return;
    }
  }
  const BridgePort port = isolate(container, guard);
  if (recorded && logger_) {
    logger_->warning("local_docker: sandbox container " + key_of(container) +
                     " came back on a new port (" + port.name + ", was " + recorded->name +
                     ": restarted by the engine); isolated it");
  }
}

void IsolationKeeper::forget(const std::string& container) {
  MutexLock lock(mutex_);
  ports_.erase(key_of(container));
}

void IsolationKeeper::guard(int bridge_index) {
  if (bridge_index <= 0) return;
  MutexLock lock(mutex_);
  guarded_.insert(bridge_index);
  watched_.insert(bridge_index);
}

bool IsolationKeeper::guards_any() const {
  MutexLock lock(mutex_);
  return !guarded_.empty();
}

IsolationKeeper::Sweep IsolationKeeper::sweep() {
  std::set<int> guarded;
  std::map<std::string, BridgePort> recorded;
  {
    MutexLock lock(mutex_);
    guarded = guarded_;
    recorded = ports_;
  }
  Sweep out;
  for (const int bridge : guarded) {
    const std::string bridge_name = name_of(bridge);
    if (bridge_name.empty()) continue;  // the network was removed
    const std::string ports_dir = "/sys/class/net/" + bridge_name + "/brif";
    DIR* dir = ::opendir(ports_dir.c_str());
    if (dir == nullptr) continue;
    std::size_t seen = 0;
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      if (++seen > kMaxPortsPerBridge) break;
      const std::string port = entry->d_name;
      const int index = static_cast<int>(::if_nametoindex(port.c_str()));
      if (index <= 0 || port_isolated(port, index) != false) continue;
      try {
        isolate_port(index);
        out.isolated.push_back(port);
      } catch (const std::exception& e) {
        if (logger_) logger_->warning("local_docker: cannot isolate port " + port + ": " + e.what());
      }
    }
    ::closedir(dir);
  }
  for (const auto& [container, port] : recorded) {
    const std::optional<bool> isolated = port_isolated(port.name, port.index);
    if (isolated == true) continue;
    if (!isolated) {
      out.lost.push_back(container);
      continue;
    }
    try {
      isolate_port(port.index);
      out.isolated.push_back(port.name);
    } catch (const std::exception& e) {
      if (logger_) logger_->warning("local_docker: cannot isolate port " + port.name + ": " + e.what());
    }
  }
  return out;
}

void IsolationKeeper::start_watching() {
  if (watching_.exchange(true)) return;
  watcher_ = std::thread([this] { watch(); });
}

void IsolationKeeper::on_new_port(int index, int master, bool* recheck) {
  bool guarded = false;
  bool watched = false;
  {
    MutexLock lock(mutex_);
    guarded = guarded_.count(master) != 0;
    watched = watched_.count(master) != 0;
  }
  if (!watched) return;
  if (!guarded) {
    *recheck = true;
    return;
  }
  const std::string name = name_of(index);
  if (name.empty() || port_isolated(name, index) != false) return;
  try {
    isolate_port(index);
    if (logger_) {
      logger_->info("local_docker: port " + name +
                    " joined the sandboxes' bridge (a container started or restarted on it); "
                    "isolated it");
    }
  } catch (const std::exception& e) {
    if (logger_) logger_->warning("local_docker: cannot isolate port " + name + ": " + e.what());
  }
}

void IsolationKeeper::watch() {
  const host_fs::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_LINK;
  if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    if (logger_) {
      logger_->warning(std::string("local_docker: cannot watch the host's links (") +
                       std::strerror(errno) +
                       "); isolation is kept at hand-outs and reconciliation passes only");
    }
    return;
  }
  const int buffer_bytes = 1 << 20;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  std::array<char, 65536> buffer{};
  while (true) {
    pollfd waits[2] = {{fd.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(waits, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (waits[1].revents != 0) return;
    bool recheck = false;
    const ssize_t got = ::recv(fd.get(), buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (got < 0) {
      if (errno == ENOBUFS) {
        // Notifications were lost: look at everything instead.
        const Sweep swept = sweep();
        recheck = !swept.lost.empty();
      } else if (errno != EAGAIN && errno != EINTR) {
        return;
      }
    }
    unsigned int left = got > 0 ? static_cast<unsigned int>(got) : 0;
    for (auto* header = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(header, left);
         header = NLMSG_NEXT(header, left)) {
      if (header->nlmsg_type != RTM_NEWLINK) continue;
      const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(header));
      int length = static_cast<int>(header->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof *info));
      int master = 0;
      for (const auto* attribute = IFLA_RTA(info); RTA_OK(attribute, length);
           attribute = RTA_NEXT(attribute, length)) {
        if (attribute->rta_type == IFLA_MASTER && RTA_PAYLOAD(attribute) >= sizeof(int)) {
          std::memcpy(&master, RTA_DATA(attribute), sizeof master);
        }
      }
      if (master > 0) on_new_port(info->ifi_index, master, &recheck);
    }
    if (recheck && hooks_.recheck) {
      try {
        hooks_.recheck();
      } catch (const std::exception& e) {
        if (logger_) logger_->warning(std::string("local_docker: keeping isolation: ") + e.what());
      }
    }
  }
}

}  // namespace sandboxd::local_docker
