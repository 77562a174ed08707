// Host mounts for pre-started slots (issue 22, DESIGN.md "Pre-started slots"): a shared slots
// root, binds of a conversation's directories onto a slot's directories, and their removal.
//
// A conversation's directories lie in trees its sandbox can write, so a source is opened with
// openat2(RESOLVE_NO_SYMLINKS) (no link anywhere in the path is followed) and mounted from
// that descriptor with the kernel's mount API (open_tree, mount_setattr, move_mount): the
// clone is made read-only before it is attached, so the copy the engine propagates into the
// container is read-only too (a propagated mount keeps the flags of the mount it copies, and
// a later remount would not reach it). Needs CAP_SYS_ADMIN in the engine's mount namespace.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace sandboxd::local_docker {

// Makes `root` (an existing directory) a mount of its own if it is not one yet, with shared
// propagation, so binds made under it later reach the containers that bound parts of it with
// rslave propagation. Throws std::runtime_error naming the call and the errno.
void make_shared_mount(const std::filesystem::path& root);

// Binds the directory `source` (absolute; refused if any component is a symbolic link) onto
// the existing directory `target`, read-only when asked. Throws std::runtime_error naming the
// path and the reason.
void bind_directory(const std::string& source, const std::filesystem::path& target, bool read_only);

// Detaches whatever is mounted on `target` (lazily: a container still using it keeps its copy
// until it exits). Not a mount point, or missing: nothing to do. Throws on other errors.
void detach_mount(const std::filesystem::path& target);

// The mount points at or under `root`, deepest first (so they can be detached in order), read
// from /proc/self/mountinfo.
std::vector<std::filesystem::path> mount_points_under(const std::filesystem::path& root);

}  // namespace sandboxd::local_docker
