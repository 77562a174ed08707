#include "cli_error.hpp"

namespace sandboxctl {

int exit_code(sandboxd::core::ErrorKind kind) {
  using sandboxd::core::ErrorKind;
  switch (kind) {
    case ErrorKind::invalid_argument:
      return kUsage;
    case ErrorKind::config:
      return kBadConfig;
    case ErrorKind::unavailable:
      return kBackendFailure;
    case ErrorKind::not_found:
      return kNotFound;
    case ErrorKind::conflict:
      return kOwnershipRefused;
    case ErrorKind::capacity:
      return kCapacity;
    case ErrorKind::internal:
      return kInternal;
    case ErrorKind::unsupported:
      return kUnsupported;
  }
  return kInternal;
}

}  // namespace sandboxctl
