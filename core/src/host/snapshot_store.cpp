#include "host/snapshot_store.hpp"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/random_hex.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/json.hpp"

namespace sandboxd::core {
namespace {

namespace fs = std::filesystem;
using host_fs::UniqueFd;

constexpr const char* kMetaFile = "meta.json";
constexpr std::size_t kMaxMetaBytes = 64 * 1024;

std::string record_json(const SnapshotRecord& r) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  write_json_member(w, "name", r.name);
  write_json_member(w, "user_id", r.user_id);
  write_json_member(w, "thread_id", r.thread_id);
  write_json_member(w, "sandbox_id", r.sandbox_id);
  write_json_member(w, "image", r.image);
  write_json_member(w, "network_policy", r.network_policy);
  w.Key("created_at");
  w.Double(r.created_at);
  w.Key("expires_at");
  w.Double(r.expires_at);
  w.Key("directory_bytes");
  w.Uint64(r.directory_bytes);
  w.Key("image_bytes");
  w.Uint64(r.image_bytes);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize()) + "\n";
}

std::optional<SnapshotRecord> record_from(const std::string& text) {
  rapidjson::Document doc;
  if (!parse_json(doc, text) || !doc.IsObject()) return std::nullopt;
  SnapshotRecord r;
  const auto text_of = [&](const char* key, std::string& out) {
    const auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || !it->value.IsString()) return false;
    out = it->value.GetString();
    return true;
  };
  const auto number_of = [&](const char* key, double& out) {
    const auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || !it->value.IsNumber()) return false;
    out = it->value.GetDouble();
    return true;
  };
  double directory = 0, image = 0;
  if (!text_of("name", r.name) || !text_of("user_id", r.user_id) ||
      !text_of("thread_id", r.thread_id) || !text_of("sandbox_id", r.sandbox_id) ||
      !text_of("image", r.image) || !text_of("network_policy", r.network_policy) ||
      !number_of("created_at", r.created_at) || !number_of("expires_at", r.expires_at) ||
      !number_of("directory_bytes", directory) || !number_of("image_bytes", image)) {
    return std::nullopt;
  }
  r.directory_bytes = static_cast<std::uint64_t>(std::max(0.0, directory));
  r.image_bytes = static_cast<std::uint64_t>(std::max(0.0, image));
  return r;
}

void check_name(const std::string& name) {
  if (!valid_snapshot_name(name)) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "snapshot name '" + name +
                           "' is not one a snapshot may have (1 to 64 of letters, digits, '_', "
                           "'-'; not starting with '.')");
  }
}

// Removes directory `name` under `parent` and everything in it (bounded, no link followed).
void remove_dir(int parent, const std::string& name, const fs::path& shown) {
  const UniqueFd dir(
      ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return;
  clear_tree(dir.get(), SnapshotStore::bounds(), shown);
  ::unlinkat(parent, name.c_str(), AT_REMOVEDIR);
}

}  // namespace

std::string generated_snapshot_name() {
  return "snap-" + random_hex(8, "a snapshot name");
}

std::string archive_snapshot_name(const std::string& sandbox_id) {
  return "archive-" + sandbox_id;
}

bool is_archive(const SnapshotRecord& record) {
  return record.name == archive_snapshot_name(record.sandbox_id);
}

bool valid_snapshot_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == '.' || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

SnapshotStore::SnapshotStore(fs::path base_dir) : base_dir_(std::move(base_dir)) {}

const TreeBounds& SnapshotStore::bounds() {
  static const TreeBounds kBounds{};
  return kBounds;
}

UniqueFd SnapshotStore::user_dir(const std::string& user, bool create) const {
  validate_user_id(user);
  const UniqueFd base = host_fs::open_trusted_dir(base_dir_);
  host_fs::DirOptions options;
  if (create) options.create_mode = 0700;
  const UniqueFd path = host_fs::open_dirs(base.get(), {"snapshots", user}, base_dir_, options);
  // A descriptor ioctl- and listing-capable, not O_PATH.
  UniqueFd real(::openat(path.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!real) host_fs::throw_errno("cannot open", base_dir_ / "snapshots" / user, errno);
  return real;
}

SnapshotStore::Staged SnapshotStore::stage(const std::string& user, const std::string& name) const {
  check_name(name);
  Staged staged;
  staged.user = user;
  staged.name = name;
  const UniqueFd dir = user_dir(user, /*create=*/true);
  struct stat st {};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    throw ServiceError(ErrorKind::conflict,
                       "user " + user + " has a snapshot named " + name + " already");
  }
  staged.staging = ".staging-" + name + "-" + random_hex(4, "a staging directory name");
  if (::mkdirat(dir.get(), staged.staging.c_str(), 0700) != 0) {
    const int error = errno;
    staged.staging.clear();
    host_fs::throw_errno("cannot make a snapshot in", base_dir_ / "snapshots" / user, error);
  }
  const UniqueFd staging(
      ::openat(dir.get(), staged.staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (staging && ::mkdirat(staging.get(), "data", 0700) == 0) {
    staged.data =
        UniqueFd(::openat(staging.get(), "data", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  if (!staged.data) {
    const int error = errno;
    abandon(staged);
    host_fs::throw_errno("cannot make a snapshot in", base_dir_ / "snapshots" / user, error);
  }
  return staged;
}

void SnapshotStore::publish(Staged& staged, const SnapshotRecord& record) const {
  const UniqueFd dir = user_dir(staged.user, /*create=*/false);
  const UniqueFd staging(
      ::openat(dir.get(), staged.staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!staging) host_fs::throw_errno("cannot finish snapshot", base_dir_ / staged.name, errno);
  host_fs::replace_file_at(staging.get(), kMetaFile, record_json(record), 0600,
                           base_dir_ / "snapshots" / staged.user / staged.name / kMetaFile);
  if (::renameat2(dir.get(), staged.staging.c_str(), dir.get(), staged.name.c_str(),
                  RENAME_NOREPLACE) != 0) {
    const int error = errno;
    abandon(staged);
    if (error == EEXIST) {
      throw ServiceError(ErrorKind::conflict, "user " + staged.user + " has a snapshot named " +
                                                  staged.name + " already");
    }
    host_fs::throw_errno("cannot finish snapshot", base_dir_ / staged.name, error);
  }
  staged.staging.clear();
  ::fsync(dir.get());
}

void SnapshotStore::abandon(Staged& staged) const noexcept {
  if (staged.staging.empty()) return;
  try {
    staged.data = UniqueFd();
    const UniqueFd dir = user_dir(staged.user, /*create=*/false);
    remove_dir(dir.get(), staged.staging, base_dir_ / "snapshots" / staged.user / staged.staging);
  } catch (const std::exception&) {
    // Left as a staging directory: never listed, removed with its user's next removal.
  }
  staged.staging.clear();
}

std::optional<SnapshotRecord> SnapshotStore::find(const std::string& user,
                                                  const std::string& name) const {
  if (!valid_snapshot_name(name)) return std::nullopt;
  try {
    const UniqueFd dir = user_dir(user, /*create=*/false);
    const UniqueFd snapshot(
        ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!snapshot) return std::nullopt;
    return record_from(host_fs::read_file_at(snapshot.get(), kMetaFile, kMaxMetaBytes,
                                             base_dir_ / "snapshots" / user / name / kMetaFile));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<SnapshotRecord> SnapshotStore::list(const std::optional<std::string>& user) const {
  std::vector<SnapshotRecord> out;
  std::vector<std::string> users;
  if (user) {
    users.push_back(*user);
  } else {
    std::error_code missing;
    for (const auto& entry : fs::directory_iterator(base_dir_ / "snapshots", missing)) {
      if (entry.is_directory(missing) && !entry.is_symlink(missing)) {
        users.push_back(entry.path().filename().string());
      }
      if (users.size() > 100000) break;  // bounded
    }
  }
  for (const std::string& who : users) {
    std::error_code missing;
    for (const auto& entry : fs::directory_iterator(base_dir_ / "snapshots" / who, missing)) {
      const std::string name = entry.path().filename().string();
      if (!valid_snapshot_name(name)) continue;  // staging and removal leftovers
      if (auto record = find(who, name)) out.push_back(std::move(*record));
    }
  }
  std::sort(out.begin(), out.end(), [](const SnapshotRecord& a, const SnapshotRecord& b) {
    return a.created_at < b.created_at;
  });
  return out;
}

UniqueFd SnapshotStore::data_of(const std::string& user, const std::string& name) const {
  check_name(name);
  const UniqueFd dir = user_dir(user, /*create=*/false);
  const UniqueFd snapshot(
      ::openat(dir.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd data(
      snapshot ? ::openat(snapshot.get(), "data", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
               : -1);
  if (!data) {
    throw ServiceError(ErrorKind::not_found, "user " + user + " has no snapshot named " + name);
  }
  return data;
}

bool SnapshotStore::remove(const std::string& user, const std::string& name) const {
  check_name(name);
  UniqueFd dir;
  try {
    dir = user_dir(user, /*create=*/false);
  } catch (const std::exception&) {
    return false;
  }
  // Out of the listing first (renamed whole), then emptied.
  const std::string removing = ".removing-" + name + "-" + random_hex(4, "a removal name");
  if (::renameat(dir.get(), name.c_str(), dir.get(), removing.c_str()) != 0) return false;
  remove_dir(dir.get(), removing, base_dir_ / "snapshots" / user / removing);
  return true;
}

namespace {
constexpr const char* kImagesFile = "images-to-remove.json";
}  // namespace

std::vector<std::string> SnapshotStore::remembered_images() const {
  std::vector<std::string> out;
  try {
    const UniqueFd base = host_fs::open_trusted_dir(base_dir_);
    const UniqueFd dir = host_fs::open_dirs(base.get(), {"snapshots"}, base_dir_, {});
    rapidjson::Document doc;
    const std::string text = host_fs::read_file_at(dir.get(), kImagesFile, kMaxMetaBytes * 16,
                                                   base_dir_ / "snapshots" / kImagesFile);
    if (parse_json(doc, text) && doc.IsArray()) {
      for (const auto& image : doc.GetArray()) {
        if (image.IsString()) out.emplace_back(image.GetString());
      }
    }
  } catch (const std::exception&) {
  }
  return out;
}

namespace {

void write_images(const fs::path& base_dir, const std::vector<std::string>& images) {
  const UniqueFd base = host_fs::open_trusted_dir(base_dir);
  const UniqueFd dir =
      host_fs::open_dirs(base.get(), {"snapshots"}, base_dir, {.create_mode = 0700});
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const std::string& image : images) w.String(image.c_str());
  w.EndArray();
  host_fs::replace_file_at(dir.get(), kImagesFile, std::string(buffer.GetString()) + "\n", 0600,
                           base_dir / "snapshots" / kImagesFile);
}

}  // namespace

void SnapshotStore::remember_image(const std::string& image) const {
  std::vector<std::string> images = remembered_images();
  if (std::find(images.begin(), images.end(), image) != images.end()) return;
  if (images.size() >= 10000) images.erase(images.begin());  // bounded
  images.push_back(image);
  write_images(base_dir_, images);
}

void SnapshotStore::forget_images(const std::vector<std::string>& removed) const {
  if (removed.empty()) return;
  std::vector<std::string> images = remembered_images();
  images.erase(std::remove_if(images.begin(), images.end(),
                              [&](const std::string& image) {
                                return std::find(removed.begin(), removed.end(), image) !=
                                       removed.end();
                              }),
               images.end());
  write_images(base_dir_, images);
}

}  // namespace sandboxd::core
