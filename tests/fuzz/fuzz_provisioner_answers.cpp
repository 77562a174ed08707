// libFuzzer target: provisioner answers as the remote_provisioner plugin reads them
// (provisioner_answers.hpp), every reader on the same bytes. Whatever a broken or hostile
// service sends must read as absent, unknown or a std::runtime_error, and no URL other than
// http(s) may come out as a sandbox URL.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "provisioner_answers.hpp"
#include "sandboxd/http.hpp"

namespace rp = sandboxd::remote_provisioner;

namespace {
void require_http(const std::string& url) {
  if (!sandboxd::http::is_http_url(url)) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    (void)rp::read_capabilities_answer(body);
  } catch (const std::runtime_error&) {
  }
  (void)rp::served_contract_of_refusal(409, body);
  (void)rp::is_unknown_route_answer(404, body);
  try {
    require_http(rp::read_create_answer("s", body, 1.0).sandbox_url);
  } catch (const std::runtime_error&) {
  }
  try {
    (void)rp::read_running_status(body);
  } catch (const std::runtime_error&) {
  }
  if (auto found = rp::read_discovered_sandbox("s", body, 1.0)) require_http(found->sandbox_url);
  const sandboxd::SandboxDiscoveryResult instance = rp::read_instance_answer("s", body, 1.0);
  if (instance.info) require_http(instance.info->sandbox_url);
  try {
    // What is read is a figure the page may show: never negative, never NaN.
    const sandboxd::SandboxUsage::Reading reading = rp::read_usage_answer(body);
    for (const auto& seconds : {reading.cpu_seconds, reading.host_cpu_seconds}) {
      if (seconds && !(*seconds >= 0)) __builtin_trap();
    }
    if (reading.online_cpus && *reading.online_cpus < 0) __builtin_trap();
  } catch (const std::runtime_error&) {
  }
  if (auto listing = rp::read_list_answer(body, 1.0)) {
    for (const sandboxd::SandboxInfo& info : listing->sandboxes) {
      require_http(info.sandbox_url);
      if (info.sandbox_id.empty()) __builtin_trap();
    }
  }
  return 0;
}
