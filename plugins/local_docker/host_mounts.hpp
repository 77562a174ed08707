// Host mounts for pre-started slots (design "Pre-started slots"): a shared slots
// root, binds of a conversation's directories onto a slot's directories, and their removal.
//
// A conversation's directories lie in trees its sandbox can write, so a source is opened with
// openat2(RESOLVE_NO_SYMLINKS) (no link anywhere in the path is followed) and mounted from
// that descriptor with the kernel's mount API (open_tree, mount_setattr, move_mount): the
// clone is made read-only before it is attached, so the copy the engine propagates into the
// container is read-only too (a propagated mount keeps the flags of the mount it copies, and
// a later remount would not reach it). Needs CAP_SYS_ADMIN in the engine's mount namespace.
//
// Whether a directory is a mount point is asked of the kernel about the open directory
// (statx: STATX_ATTR_MOUNT_ROOT, else its mount id against its parent's), never decided by
// comparing path strings with /proc/self/mountinfo, which shows only the normal form of a
// path (issue 32 A.2: a slots_dir spelled `…//slots` matched no mount there, and a removal
// went through a live bind into a conversation's files). Removal never crosses into another
// mount.
#pragma once

#include <cstddef>
#include <filesystem>
#include <sandboxd/host_fs.hpp>
#include <string>

namespace sandboxd::local_docker {

// `path` made absolute and normal: no empty, "." or ".." components, no trailing separator.
// Throws std::invalid_argument for a relative path.
std::filesystem::path normal_absolute(const std::filesystem::path& path);

// Opens the absolute directory `dir` without following a symbolic link in any component
// (openat2 RESOLVE_NO_SYMLINKS), O_PATH. Throws std::runtime_error naming the path, and saying
// so when a component is a link.
host_fs::UniqueFd open_dir_without_links(const std::filesystem::path& dir);

// Why the absolute `dir` cannot be reached without following a symbolic link, looking at its
// deepest existing ancestor when it does not exist yet; "" when it can.
std::string links_on_the_way(const std::filesystem::path& dir);

// Whether the directory open as `fd` is the root of a mount (a bind, another filesystem).
bool is_mount_root(int fd);

// Makes `root` (an existing directory, no link in its path) a mount of its own if it is not
// one yet, with shared propagation, so binds made under it later reach the containers that
// bound parts of it with rslave propagation. true when it made that bind. Throws
// std::runtime_error naming the call and the errno.
bool make_shared_mount(const std::filesystem::path& root);

// Binds the directory `source` (absolute; refused if any component is a symbolic link) onto
// the existing directory `target`, read-only when asked. Throws std::runtime_error naming the
// path and the reason.
void bind_directory(const std::string& source, const std::filesystem::path& target, bool read_only);

// Whether `dir` is a mount root on the same filesystem as its parent directory: the bind of
// the slots root onto itself that make_shared_mount makes (by this pool or one that crashed),
// not a filesystem an operator mounted there.
bool is_self_bind(const std::filesystem::path& dir);

// Detaches whatever is mounted on `target` (lazily: a container still using it keeps its copy
// until it exits): every mount stacked there, until the directory is no mount root, or only
// the top one. Not a mount point, or missing: nothing to do. Throws on other errors, and when
// a mount stays.
void detach_mount(const std::filesystem::path& target, bool every_layer = true);

// Detaches every mount on a direct subdirectory of `dir` (the mount points of one slot), as
// detach_mount, looking at no more than `max_entries` entries. Throws when one stays.
void detach_child_mounts(const std::filesystem::path& dir, std::size_t max_entries);

// Whether any subdirectory of `dir`, or any subdirectory of those (two levels: the slots
// root's slots/<slot>/<point>), is a mount root, looking at no more than `max_entries`.
bool has_mounts_two_levels_down(const std::filesystem::path& dir, std::size_t max_entries);

// What remove_tree_at did.
struct Removal {
  bool complete = true;  // everything is gone
  bool budget_ran_out = false;
  std::string mount_refused;  // a mount root it would not enter (the first one), or ""
};

// Removes entry `name` of the directory `dirfd` and what is under it, acting on descriptors
// and never following a link, never entering a directory that is a mount root or on another
// mount than `dirfd` (its contents belong to whatever is mounted there), and visiting at most
// `budget` entries (decremented).
Removal remove_tree_at(int dirfd, const std::string& name, std::size_t& budget);

}  // namespace sandboxd::local_docker
