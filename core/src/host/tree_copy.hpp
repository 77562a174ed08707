// Copying and emptying trees a sandbox could write (a conversation's directories, a snapshot
// of them), by the host's integrity rules: every entry is opened relative to its parent's
// descriptor without following a link; a symbolic link is copied as a link (its target never
// read), a fifo, socket or device is skipped (counted), a mount point is never descended into
// or removed; the walk is bounded in depth, entries and bytes, and stops with an error naming
// the bound it met.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace sandboxd::core {

struct TreeBounds {
  int max_depth = 64;
  std::uint64_t max_entries = 1'000'000;
  std::uint64_t max_bytes = UINT64_MAX;  // of regular files' contents
  // copy_tree: each copy keeps its source's owner (when this process may give it: root), so
  // files a sandbox wrote are its own again once restored.
  bool keep_owner = false;
};

struct TreeCount {
  std::uint64_t entries = 0;  // directories, files and links copied or removed
  std::uint64_t bytes = 0;    // regular files' contents
  std::uint64_t skipped = 0;  // special files (fifos, sockets, devices) and mount points
};

// Copies the contents of directory `from` (a descriptor, O_PATH or not) into the existing
// directory `into`: directories and files with their permission bits (never set-id or sticky
// bits), links as links; with bounds.keep_owner, each with its source's owner too. Throws
// std::runtime_error naming `shown_from` and what failed or which bound was met; what was copied
// before stays (the caller removes its half-made copy).
TreeCount copy_tree(int from, int into, const TreeBounds& bounds,
                    const std::filesystem::path& shown_from);

// Removes everything inside directory `dir`, never following a link and never removing below a
// mount point (a mount point inside is left, counted as skipped). Bounded like copy_tree.
TreeCount clear_tree(int dir, const TreeBounds& bounds, const std::filesystem::path& shown);

// What the tree inside `dir` holds (regular files' bytes, entries), walked as copy_tree walks.
TreeCount measure_tree(int dir, const TreeBounds& bounds, const std::filesystem::path& shown);

}  // namespace sandboxd::core
