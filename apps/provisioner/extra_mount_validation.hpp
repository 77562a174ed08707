// The provisioner service's validation of extra mounts in a create request (design §10.8).
// The service itself (Kubernetes Pods and Services) is not built yet; its validation is, so
// the gateway's payload (remote_provisioner plugin) is checked against the same rules.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/types.hpp"

namespace sandboxd::provisioner {

// Answered as HTTP 400 with `what()` as the detail.
class ExtraMountRejected : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Where a sandbox's /mnt/user-data comes from.
enum class UserDataLayout {
  // {host_base_dir}/users/{user}/threads/{thread}/user-data: the gateway's own layout and
  // DeerFlow's PVC layout, so what a gateway writes for its user is what the sandbox sees, and
  // two users with the same thread id never share files.
  per_user,
  // {threads_host_path}/{thread}/user-data: DeerFlow's hostPath layout, shared by every user
  // of a thread id. Only when a setting asks for it.
  legacy,
};

struct StateRoots {
  std::string host_base_dir;      // DEER_FLOW_HOST_BASE_DIR (default /.deer-flow)
  std::string threads_host_path;  // THREADS_HOST_PATH (default /.deer-flow/threads; legacy only)
  UserDataLayout user_data_layout = UserDataLayout::per_user;
};

// Python `_validated_extra_mounts(mounts, thread_id, user_id)`: at most 10 mounts; absolute
// host paths inside the DeerFlow state; absolute container paths from the shared allowlist,
// each once; an upload-conversion mount read-only and exactly the requesting thread's
// `{base}/users/{user}/threads/{thread}/user-data/.upload-conversions`. Returns the mounts with
// normalised host paths, in request order.
std::vector<Mount> validated_extra_mounts(const std::vector<Mount>& mounts,
                                          const std::string& thread_id, const std::string& user_id,
                                          const StateRoots& roots);

}  // namespace sandboxd::provisioner
