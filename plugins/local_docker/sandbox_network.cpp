#include "sandbox_network.hpp"

#include <fcntl.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>

namespace sandboxd::local_docker {
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

// One rtnetlink request with room for a few attributes.
struct LinkRequest {
  nlmsghdr header;
  ifinfomsg info;
  std::array<char, 256> attributes;
};

rtattr* add_attribute(nlmsghdr* header, std::size_t capacity, unsigned short type, const void* data,
                      std::size_t length) {
  const std::size_t size = RTA_LENGTH(length);
  if (NLMSG_ALIGN(header->nlmsg_len) + RTA_ALIGN(size) > capacity) {
    throw std::runtime_error("rtnetlink request too large");
  }
  auto* attribute =
      reinterpret_cast<rtattr*>(reinterpret_cast<char*>(header) + NLMSG_ALIGN(header->nlmsg_len));
  attribute->rta_type = type;
  attribute->rta_len = static_cast<unsigned short>(size);
  if (length > 0) std::memcpy(RTA_DATA(attribute), data, length);
  header->nlmsg_len = NLMSG_ALIGN(header->nlmsg_len) + RTA_ALIGN(size);
  return attribute;
}

// The kernel refused an rtnetlink request; `error` is its errno.
class RtnetlinkRefused : public std::runtime_error {
 public:
  RtnetlinkRefused(const std::string& what, int error)
      : std::runtime_error(what + ": " + errno_text(error)), error(error) {}
  const int error;
};

// Sends `request` on the rtnetlink socket `fd` and reads its answer into `answer` (bounded).
// Throws RtnetlinkRefused for an error answer.
std::size_t exchange(int fd, nlmsghdr* request, std::array<char, 16384>& answer, const char* what) {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, request, request->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
    throw std::runtime_error(std::string(what) + ": rtnetlink send failed: " + errno_text(errno));
  }
  const ssize_t got = ::recv(fd, answer.data(), answer.size(), 0);
  if (got < 0) {
    throw std::runtime_error(std::string(what) + ": rtnetlink answer failed: " + errno_text(errno));
  }
  const auto* header = reinterpret_cast<const nlmsghdr*>(answer.data());
  if (!NLMSG_OK(header, static_cast<unsigned int>(got))) {
    throw std::runtime_error(std::string(what) + ": a truncated rtnetlink answer");
  }
  if (header->nlmsg_type == NLMSG_ERROR) {
    const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
    if (error->error != 0) throw RtnetlinkRefused(what, -error->error);
  }
  return static_cast<std::size_t>(got);
}

// The ifindex (in its peer's namespace) of the interface `name`'s link partner, asked on an
// rtnetlink socket made in the interface's namespace.
int peer_index(int fd, const char* name) {
  LinkRequest request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
  request.header.nlmsg_type = RTM_GETLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = 1;
  request.info.ifi_family = AF_UNSPEC;
  add_attribute(&request.header, sizeof request, IFLA_IFNAME, name, std::strlen(name) + 1);
  std::array<char, 16384> answer{};
  const std::size_t got = exchange(fd, &request.header, answer, "reading the sandbox's eth0");
  const auto* header = reinterpret_cast<const nlmsghdr*>(answer.data());
  if (header->nlmsg_type != RTM_NEWLINK || header->nlmsg_len > got) {
    throw std::runtime_error("reading the sandbox's eth0: an unexpected rtnetlink answer");
  }
  const auto* info = static_cast<const ifinfomsg*>(NLMSG_DATA(header));
  int length = static_cast<int>(header->nlmsg_len - NLMSG_LENGTH(sizeof(ifinfomsg)));
  for (const auto* attribute = IFLA_RTA(info); RTA_OK(attribute, length);
       attribute = RTA_NEXT(attribute, length)) {
    if (attribute->rta_type == IFLA_LINK && RTA_PAYLOAD(attribute) >= sizeof(int)) {
      int index = 0;
      std::memcpy(&index, RTA_DATA(attribute), sizeof index);
      return index;
    }
  }
  throw std::runtime_error("the sandbox's eth0 has no link partner (is it a veth pair?)");
}

void set_isolated(int fd, int index) {
  LinkRequest request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
  request.header.nlmsg_type = RTM_SETLINK;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  request.header.nlmsg_seq = 2;
  request.info.ifi_family = AF_BRIDGE;
  request.info.ifi_index = index;
  rtattr* protinfo =
      add_attribute(&request.header, sizeof request, IFLA_PROTINFO | NLA_F_NESTED, nullptr, 0);
  const unsigned char on = 1;
  add_attribute(&request.header, sizeof request, IFLA_BRPORT_ISOLATED, &on, sizeof on);
  protinfo->rta_len =
      static_cast<unsigned short>(reinterpret_cast<char*>(&request.header) +
                                  request.header.nlmsg_len - reinterpret_cast<char*>(protinfo));
  std::array<char, 16384> answer{};
  try {
    exchange(fd, &request.header, answer, "isolating the sandbox's bridge port");
  } catch (const RtnetlinkRefused& refused) {
    // rtnl_bridge_setlink answers EOPNOTSUPP for a device that has no master.
    if (refused.error != EOPNOTSUPP) throw;
    char name[IF_NAMESIZE] = {0};
    const bool named = ::if_indextoname(static_cast<unsigned>(index), name) != nullptr;
    throw PortOnNoBridge(std::string("the sandbox's port ") + (named ? name : "(gone)") +
                         " is on no bridge: the bridge under its network was deleted after it "
                         "joined (a peer removed the network meanwhile)");
  }
}

host_fs::UniqueFd rtnetlink_socket() {
  host_fs::UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd) throw std::runtime_error("cannot open an rtnetlink socket: " + errno_text(errno));
  return fd;
}

}  // namespace

std::string NetworkPolicy::label() const {
  if (mode != "open") return mode;
  return std::string("open") + (isolate ? "" : "+shared") + (publish ? "" : "+unpublished");
}

bool is_namespaced_policy(const std::string& label) {
  return label == "isolated" || label.rfind("allowlist", 0) == 0 ||
         (label.rfind("open", 0) == 0 && label.find("+unpublished") != std::string::npos);
}

NetnsSockets::NetnsSockets()
    : home_(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)), worker_([this] { run(); }) {}

NetnsSockets::~NetnsSockets() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void NetnsSockets::run() {
  while (true) {
    std::function<void()> job;
    {
      MutexLock lock(mutex_);
      lock.wait(wake_, [this]() REQUIRES(mutex_) { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

int NetnsSockets::socket_in(int pid, int domain, int type, int protocol) {
  return socket_in_namespace(pid, nullptr, nullptr, domain, type, protocol);
}

int NetnsSockets::socket_in_namespace(int pid, const Namespace* expected, Namespace* seen,
                                      int domain, int type, int protocol) {
  if (!home_) {
    throw std::runtime_error("cannot open this process's network namespace: " + errno_text(errno));
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  host_fs::UniqueFd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!target) {
    throw std::runtime_error("cannot open " + path +
                             " (the sandbox's network namespace): " + errno_text(errno));
  }
  struct stat st {};
  if (::fstat(target.get(), &st) != 0) {
    throw std::runtime_error("cannot inspect " + path + ": " + errno_text(errno));
  }
  const Namespace found{st.st_dev, st.st_ino};
  if (expected != nullptr && !(found == *expected)) {
    throw std::runtime_error("process " + std::to_string(pid) +
                             " no longer has the sandbox's network namespace");
  }
  if (seen != nullptr) *seen = found;
  auto done = std::make_shared<std::promise<int>>();
  std::future<int> result = done->get_future();
  const int target_fd = target.get();
  {
    MutexLock lock(mutex_);
    if (stopping_) throw std::runtime_error("the namespace socket maker has stopped");
    jobs_.push_back([this, done, target_fd, domain, type, protocol] {
      if (::setns(target_fd, CLONE_NEWNET) != 0) {
        const int error = errno;
        done->set_exception(std::make_exception_ptr(std::runtime_error(
            "cannot enter the sandbox's network namespace: " + errno_text(error) +
            (error == EPERM ? " (entering another network namespace needs root)" : ""))));
        return;
      }
      const int fd = ::socket(domain, type | SOCK_CLOEXEC, protocol);
      const int error = errno;
      if (::setns(home_.get(), CLONE_NEWNET) != 0) {
        // Never serve another request from a foreign namespace: this thread stops here.
        if (fd >= 0) ::close(fd);
        done->set_exception(std::make_exception_ptr(std::runtime_error(
            "cannot return to this process's network namespace: " + errno_text(errno))));
        MutexLock lock(mutex_);
        stopping_ = true;
        jobs_.clear();
        return;
      }
      if (fd < 0) {
        done->set_exception(std::make_exception_ptr(std::runtime_error(
            "cannot make a socket in the sandbox's network namespace: " + errno_text(error))));
        return;
      }
      done->set_value(fd);
    });
  }
  wake_.notify_one();
  return result.get();  // `target` stays open until the job ran
}

int NetnsSockets::socket_in_container(const std::string& container_id,
                                      const std::function<int()>& pid_of, int domain, int type,
                                      int protocol) {
  std::optional<Cached> cached;
  {
    MutexLock lock(cache_mutex_);
    if (auto it = pids_.find(container_id); it != pids_.end()) cached = it->second;
  }
  if (cached) {
    try {
      return socket_in_namespace(cached->pid, &cached->netns, nullptr, domain, type, protocol);
    } catch (const std::exception&) {
      forget(container_id);  // the process is gone or is another's: ask the engine again
    }
  }
  Cached fresh;
  host_fs::UniqueFd made;
  fresh.pid = with_container_process(pid_of, [&](int pid) {
    made =
        host_fs::UniqueFd(socket_in_namespace(pid, nullptr, &fresh.netns, domain, type, protocol));
  });
  const int fd = made.release();
  MutexLock lock(cache_mutex_);
  if (pids_.size() >= 100000) pids_.clear();  // bounded; a miss only costs an inspect
  pids_[container_id] = fresh;
  return fd;
}

void NetnsSockets::forget(const std::string& container_id) {
  MutexLock lock(cache_mutex_);
  pids_.erase(container_id);
}

namespace {

// At most 64 bytes of a sysfs attribute, without its newline; nullopt when it cannot be read.
std::optional<std::string> read_attribute(const std::string& path) {
  const host_fs::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buffer[64];
  const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
  if (got <= 0) return std::nullopt;
  std::string value(buffer, static_cast<std::size_t>(got));
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

std::string interface_name(int index) {
  char name[IF_NAMESIZE] = {0};
  if (::if_indextoname(static_cast<unsigned>(index), name) == nullptr) return "";
  return name;
}

}  // namespace

void isolate_port(int index) {
  const host_fs::UniqueFd here = rtnetlink_socket();
  set_isolated(here.get(), index);
  const std::string name = interface_name(index);
  if (name.empty()) {
    throw std::runtime_error("the bridge port (ifindex " + std::to_string(index) +
                             ") is not in this network namespace");
  }
  const std::optional<std::string> value =
      read_attribute("/sys/class/net/" + name + "/brport/isolated");
  if (value != "1") {
    throw std::runtime_error("the port " + name +
                             " is not isolated on its bridge after setting it (read back '" +
                             value.value_or("nothing") + "')");
  }
}

std::optional<bool> port_isolated(const std::string& name, int index) {
  const std::string base = "/sys/class/net/" + name;
  const std::optional<std::string> found = read_attribute(base + "/ifindex");
  if (!found || *found != std::to_string(index)) return std::nullopt;
  return read_attribute(base + "/brport/isolated") == std::optional<std::string>("1");
}

BridgePort isolate_bridge_port(NetnsSockets& sockets, int pid) {
  const host_fs::UniqueFd inside(sockets.socket_in(pid, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE));
  BridgePort port;
  port.index = peer_index(inside.get(), "eth0");
  isolate_port(port.index);
  port.name = interface_name(port.index);
  char master[PATH_MAX] = {0};
  const std::string link = "/sys/class/net/" + port.name + "/master";
  const ssize_t length = ::readlink(link.c_str(), master, sizeof master - 1);
  if (length > 0) {
    const std::string target(master, static_cast<std::size_t>(length));
    const std::string bridge = target.substr(target.rfind('/') + 1);
    port.bridge_index = static_cast<int>(::if_nametoindex(bridge.c_str()));
  }
  return port;
}

int with_container_process(const std::function<int()>& pid_of,
                           const std::function<void(int pid)>& use) {
  // A container the engine is restarting changes its process; on a loaded host that can take
  // longer than three looks in a row, so later looks wait a little (about a second in all).
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (attempt >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(50 * (attempt - 1)));
    const int pid = pid_of();
    if (pid <= 0) throw std::runtime_error("the sandbox's container has no running process");
    const host_fs::UniqueFd held(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!held && errno != ENOSYS) continue;  // gone already: ask again
    use(pid);
    // The process `held` names is alive (so `pid` was not freed and reused since it was taken)
    // and is still the container's.
    const bool alive = !held || ::syscall(SYS_pidfd_send_signal, held.get(), 0, nullptr, 0) == 0;
    if (alive && pid_of() == pid) return pid;
  }
  throw std::runtime_error(
      "the sandbox's container kept changing its process while it was "
      "looked at (restarting?)");
}

}  // namespace sandboxd::local_docker
