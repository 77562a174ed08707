#include "sandboxd/core/service_errors.hpp"

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/one_shot_host.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {

const char* kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument:
      return "usage";
    case ErrorKind::not_found:
      return "not_found";
    case ErrorKind::conflict:
      return "ownership";
    case ErrorKind::capacity:
      return "capacity";
    case ErrorKind::unavailable:
      return "backend";
    case ErrorKind::config:
      return "config";
    case ErrorKind::internal:
      return "internal";
    case ErrorKind::unsupported:
      return "unsupported";
  }
  return "internal";
}

ErrorKind classify(const std::exception& error, ErrorKind fallback) {
  if (const auto* typed = dynamic_cast<const ServiceError*>(&error)) return typed->kind();
  if (dynamic_cast<const std::invalid_argument*>(&error)) return ErrorKind::invalid_argument;
  if (dynamic_cast<const SandboxBeingDestroyedError*>(&error) ||
      dynamic_cast<const SandboxIdentityCollisionError*>(&error) ||
      dynamic_cast<const OwnershipBackendError*>(&error)) {
    return ErrorKind::conflict;
  }
  if (dynamic_cast<const ConfigError*>(&error) || dynamic_cast<const PluginLoadError*>(&error) ||
      dynamic_cast<const PluginConfigError*>(&error) ||
      dynamic_cast<const RegistryFileError*>(&error) ||
      dynamic_cast<const host_fs::UntrustedDirectoryError*>(&error)) {
    return ErrorKind::config;
  }
  if (dynamic_cast<const BackendCapacityError*>(&error)) return ErrorKind::capacity;
  if (dynamic_cast<const std::bad_alloc*>(&error) ||
      dynamic_cast<const std::logic_error*>(&error)) {
    return ErrorKind::internal;
  }
  return fallback;
}

ServiceError as_service_error(const std::exception& error, ErrorKind fallback) {
  if (const auto* typed = dynamic_cast<const ServiceError*>(&error)) return *typed;
  const ErrorKind kind = classify(error, fallback);
  if (dynamic_cast<const OwnershipBackendError*>(&error)) {
    return ServiceError(kind, std::string("the lease store cannot answer: ") + error.what());
  }
  return ServiceError(kind, error.what());
}

}  // namespace sandboxd::core
