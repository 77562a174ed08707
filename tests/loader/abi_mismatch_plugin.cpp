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
    999,  // a future SDK's ABI
    static_cast<std::uint32_t>(sandboxd::PluginKind::backend),
    "FutureBackend",
    "built against a future SDK",
    must_not_run,
    nullptr};
BOOST_DLL_ALIAS_SECTIONED(sandboxd_descriptor_FutureBackend, sandboxd_plugin_FutureBackend,
                          sandboxd)
// Its metadata record says the same, as a future SDK's macro would write it.
extern "C" __attribute__((used, section("sandboxd_meta")))
const char sandboxd_meta_FutureBackend[] =
    "sandboxd-plugin\0abi=999\0kind=backend\0class=FutureBackend\0description=built against a "
    "future SDK\0version=7.1.0\0";

// A plugin from before metadata records: a descriptor only. Listing says so without loading it.
extern "C" const sandboxd::PluginDescriptor sandboxd_descriptor_OldBackend;
const sandboxd::PluginDescriptor sandboxd_descriptor_OldBackend = {
    sandboxd::kSdkAbiVersion,
    static_cast<std::uint32_t>(sandboxd::PluginKind::backend),
    "OldBackend",
    "built before metadata records",
    must_not_run,
    nullptr};
BOOST_DLL_ALIAS_SECTIONED(sandboxd_descriptor_OldBackend, sandboxd_plugin_OldBackend, sandboxd)

// A plugin built against SDK ABI 2, before SandboxInfo recorded a sandbox's network policy and
// request headers: its SandboxInfo is not this host's, so it must be refused
// unmapped.
extern "C" const sandboxd::PluginDescriptor sandboxd_descriptor_AbiTwoBackend;
const sandboxd::PluginDescriptor sandboxd_descriptor_AbiTwoBackend = {
    2,
    static_cast<std::uint32_t>(sandboxd::PluginKind::backend),
    "AbiTwoBackend",
    "built against SDK ABI 2",
    must_not_run,
    nullptr};
BOOST_DLL_ALIAS_SECTIONED(sandboxd_descriptor_AbiTwoBackend, sandboxd_plugin_AbiTwoBackend,
                          sandboxd)
extern "C" __attribute__((used, section("sandboxd_meta")))
const char sandboxd_meta_AbiTwoBackend[] =
    "sandboxd-plugin\0abi=2\0kind=backend\0class=AbiTwoBackend\0description=built against SDK "
    "ABI 2\0";
