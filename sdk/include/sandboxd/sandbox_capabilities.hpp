// The Linux capabilities a sandbox keeps by default, whatever runs it (local_docker's containers,
// the kubernetes backend's pods): every other one is dropped.
#pragma once

namespace sandboxd {

// What is left after dropping ALL is DeerFlow's compatibility set for its all-in-one image
// (issue 32 D): the image starts as root, creates its user, hands files over (CHOWN, FOWNER,
// DAC_OVERRIDE: its root nginx writes logs its user owns) and switches to it (SETUID, SETGID).
// Everything else of Docker's default set (FSETID, KILL, NET_BIND_SERVICE, MKNOD, NET_RAW,
// SETFCAP, SETPCAP, SYS_CHROOT, AUDIT_WRITE) is gone; a backend's `cap_add` restores any.
inline constexpr const char* kDefaultSandboxCapabilities[] = {"CHOWN", "DAC_OVERRIDE", "FOWNER",
                                                              "SETGID", "SETUID"};

}  // namespace sandboxd
