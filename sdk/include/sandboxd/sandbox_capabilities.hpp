// The Linux capabilities a sandbox keeps by default, whatever runs it (local_docker's containers,
// the kubernetes backend's pods): every other one is dropped.
#pragma once

namespace sandboxd {

// What is left after dropping ALL: an image's init and process supervisor switching users
// (SETUID, SETGID), handing files to them (CHOWN, FOWNER, FSETID, DAC_OVERRIDE), signalling
// them (KILL), and services on ports below 1024 (NET_BIND_SERVICE). Docker's default set also
// has MKNOD, NET_RAW, SETFCAP, SETPCAP, SYS_CHROOT and AUDIT_WRITE, which sandboxed code has no
// business with; a backend's `cap_add` restores any of them.
inline constexpr const char* kDefaultSandboxCapabilities[] = {
    "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE"};

}  // namespace sandboxd
