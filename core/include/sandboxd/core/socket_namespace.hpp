// Which network namespace a socket was made in, as the kernel names the namespace (the device and
// inode of its nsfs file): two sockets made in one namespace answer the same, a socket made in a
// namespace since replaced (a container restarted) answers another.
#pragma once

#include <sys/types.h>

#include <optional>

namespace sandboxd::core::net {

struct NamespaceId {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const NamespaceId&) const = default;
};

// The namespace of socket `fd` (ioctl SIOCGSKNS, Linux 4.9+; needs CAP_NET_ADMIN over it), or
// nullopt when the kernel will not say.
std::optional<NamespaceId> socket_namespace(int fd);

}  // namespace sandboxd::core::net
