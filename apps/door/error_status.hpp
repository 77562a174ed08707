// The one table from an error's kind (core/service_errors.hpp) to an HTTP status, for the
// doors' HTTP APIs. Capacity refusals are 429 with Retry-After.
#pragma once

#include "sandboxd/core/service_errors.hpp"

namespace sandboxd::door {

inline int http_status(core::ErrorKind kind) {
  switch (kind) {
    case core::ErrorKind::invalid_argument:
      return 400;
    case core::ErrorKind::not_found:
      return 404;
    case core::ErrorKind::conflict:
      return 409;
    case core::ErrorKind::capacity:
      return 429;
    case core::ErrorKind::unavailable:
      return 502;
    case core::ErrorKind::config:
    case core::ErrorKind::internal:
      return 500;
    case core::ErrorKind::unsupported:
      return 501;
  }
  return 500;
}

}  // namespace sandboxd::door
