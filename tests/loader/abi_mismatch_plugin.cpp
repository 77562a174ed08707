// A plugin built for a different SDK ABI: the descriptor is written by hand with a wrong
// version, as a plugin compiled against another SDK would carry. Its factory must never run.
#include <cstdlib>

#include "sandboxd/sdk.hpp"

namespace {
sandboxd::SandboxBackend* must_not_run(const sandboxd::PluginContext&) {
  std::abort();
}
}  // namespace

extern "C" const sandboxd::PluginDescriptor sandboxd_descriptor_FutureBackend;
const sandboxd::PluginDescriptor sandboxd_descriptor_FutureBackend = {
    sandboxd::kSdkAbiVersion + 998,
    static_cast<std::uint32_t>(sandboxd::PluginKind::backend),
    "FutureBackend",
    "built against a future SDK",
    must_not_run,
    nullptr};
BOOST_DLL_ALIAS_SECTIONED(sandboxd_descriptor_FutureBackend, sandboxd_plugin_FutureBackend,
                          sandboxd)
