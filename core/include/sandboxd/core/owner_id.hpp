// Lease identity of one provider instance (design §7.6): unique per instance, not per host.
#pragma once

#include <string>

namespace sandboxd::core {

// This machine's host name, "unknown" when it cannot be read: the first part of owner ids.
std::string host_name();

// "{hostname}:{32 lowercase hex random}".
std::string generate_owner_id();

}  // namespace sandboxd::core
