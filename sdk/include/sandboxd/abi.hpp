// The SDK's binary-interface version. A plugin records the value it was compiled against in
// each descriptor it exports; the host refuses a descriptor whose value differs from its own
// before any C++ object crosses the library boundary. Bump it whenever a type in sdk/ changes
// layout or a virtual function is added, removed or reordered.
#pragma once

#include <cstdint>

namespace sandboxd {

// 2: the mount-contract verbs left SandboxBackend for the MountContractNegotiation capability
//    (capabilities.hpp); later optional verbs are capabilities too and need no bump.
// 3: SandboxInfo records the network policy a sandbox was made under and the headers a client
//    sends it (issue 33: isolation and the relay).
// A macro too, so a plugin's metadata record (plugin.hpp) can carry it as text.
#define SANDBOXD_SDK_ABI_VERSION 3
inline constexpr std::uint32_t kSdkAbiVersion = SANDBOXD_SDK_ABI_VERSION;

}  // namespace sandboxd
