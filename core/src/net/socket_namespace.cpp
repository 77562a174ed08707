#include "sandboxd/core/socket_namespace.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sandboxd::core::net {

std::optional<NamespaceId> socket_namespace(int fd) {
  const int namespace_fd = ::ioctl(fd, SIOCGSKNS);
  if (namespace_fd < 0) return std::nullopt;
  struct stat st {};
  const bool known = ::fstat(namespace_fd, &st) == 0;
  ::close(namespace_fd);
  if (!known) return std::nullopt;
  return NamespaceId{st.st_dev, st.st_ino};
}

}  // namespace sandboxd::core::net
