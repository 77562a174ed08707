#include "sandboxd/core/one_shot_host.hpp"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "sandboxd/core/owner_id.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/lease_rules.hpp"

namespace sandboxd::core {
namespace {

using rapidjson::Document;
using rapidjson::Value;

constexpr int kRegistryFormatVersion = 1;

std::string errno_text(int error) {
  return std::strerror(error);
}

// An flock held for one scope on "{registry}.lock" (the registry itself is replaced by rename,
// so it cannot carry the lock).
class FileLock {
 public:
  FileLock(const std::filesystem::path& path, int operation) {
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) {
      throw RegistryFileError("cannot open lock file " + path.string() + ": " + errno_text(errno));
    }
    while (::flock(fd_, operation) != 0) {
      if (errno != EINTR) {
        const int error = errno;
        ::close(fd_);
        throw RegistryFileError("cannot lock " + path.string() + ": " + errno_text(error));
      }
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

std::filesystem::path lock_path_of(const std::filesystem::path& registry) {
  return registry.string() + ".lock";
}

void ensure_state_dir(const std::filesystem::path& dir) {
  try {
    ensure_private_dir(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    throw RegistryFileError("cannot create state directory " + dir.string() + ": " +
                            e.code().message());
  } catch (const host_fs::UntrustedDirectoryError& e) {
    throw RegistryFileError(e.what());
  }
}

std::string optional_string(const Value& object, const char* key,
                            const std::filesystem::path& path) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || it->value.IsNull()) return "";
  if (!it->value.IsString()) {
    throw RegistryFileError(path.string() + ": \"" + key + "\" must be a string");
  }
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

double number_or_zero(const Value& object, const char* key, const std::filesystem::path& path) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || it->value.IsNull()) return 0.0;
  if (!it->value.IsNumber()) {
    throw RegistryFileError(path.string() + ": \"" + key + "\" must be a number");
  }
  return it->value.GetDouble();
}

std::optional<std::string> non_empty(std::string text) {
  if (text.empty()) return std::nullopt;
  return text;
}

template <typename Writer>
void write_optional(Writer& w, const char* key, const std::optional<std::string>& value) {
  write_json_optional(w, key, value);
}

}  // namespace

std::optional<std::string> installation_id(const std::filesystem::path& state_dir, bool create) {
  const std::filesystem::path path = state_dir / kInstallationIdFile;
  const auto read_back = [&]() -> std::optional<std::string> {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno == ENOENT) return std::nullopt;
      throw RegistryFileError("cannot read " + path.string() + ": " + errno_text(errno));
    }
    char text[128];
    const ssize_t got = ::read(fd, text, sizeof text);
    ::close(fd);
    std::string id(text, got > 0 ? static_cast<std::size_t>(got) : 0);
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (id.size() < 16) {
      throw RegistryFileError(path.string() + " does not hold an installation id (" +
                              std::to_string(id.size()) +
                              " characters); remove it to have a new one made");
    }
    return id;
  };
  if (auto existing = read_back()) return existing;
  if (!create) return std::nullopt;
  // Written to a private temporary file, then linked into place: two first commands at once
  // agree on whichever link lands first, and nobody ever reads half an id.
  ensure_state_dir(state_dir);
  const std::string id = generate_owner_id().substr(host_name().size() + 1);
  const std::filesystem::path temporary =
      path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + id.substr(0, 8);
  const int fd =
      ::open(temporary.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw RegistryFileError("cannot create " + temporary.string() + ": " + errno_text(errno));
  const std::string line = id + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    ::unlink(temporary.c_str());
    throw RegistryFileError("cannot write " + temporary.string() + ": " + errno_text(errno));
  }
  const bool linked = ::link(temporary.c_str(), path.c_str()) == 0;
  const int link_error = errno;
  ::unlink(temporary.c_str());
  if (!linked && link_error != EEXIST) {
    throw RegistryFileError("cannot create " + path.string() + ": " + errno_text(link_error));
  }
  if (auto made = read_back()) return made;
  throw RegistryFileError(path.string() + " vanished while it was being made");
}

namespace {

// /etc/machine-id when readable (a cloned VM whose machine id was regenerated becomes another
// installation even with a copied state directory), else "".
std::string machine_id() {
  std::ifstream in("/etc/machine-id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace

std::string one_shot_owner_id(const std::filesystem::path& registry_file, bool create) {
  const std::filesystem::path absolute =
      std::filesystem::absolute(registry_file).lexically_normal();
  const std::optional<std::string> installation = installation_id(absolute.parent_path(), create);
  if (!installation) return "";
  return host_name() + ":sandboxctl-" +
         sha256_hex(*installation + ":" + machine_id() + ":" + absolute.filename().string())
             .substr(0, 24);
}

SandboxConfig with_lease_ttl_at_least(SandboxConfig config, double ttl_seconds) {
  if (!(ttl_seconds > config.ttl_seconds())) return config;
  double interval = ttl_seconds / config.ttl_multiplier;
  // A long idle timeout raises the multiplier, not the interval past its bound.
  const bool raise_multiplier = interval > lease_rules::kMaxRenewalIntervalSeconds;
  if (raise_multiplier) {
    interval = lease_rules::kMaxRenewalIntervalSeconds;
    config.ttl_multiplier = ttl_seconds / interval;
  }
  config.renewal_interval_seconds = interval;
  // The store reads its timing from its own section, so the section says it too.
  Document section;
  if (!parse_json(section, config.ownership.options_json) || !section.IsObject()) {
    section.SetObject();
  }
  auto& alloc = section.GetAllocator();
  section.RemoveMember("renewal_interval_seconds");
  section.AddMember("renewal_interval_seconds", Value(interval), alloc);
  if (raise_multiplier) {
    section.RemoveMember("ttl_multiplier");
    section.AddMember("ttl_multiplier", Value(config.ttl_multiplier), alloc);
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  section.Accept(writer);
  config.ownership.options_json = buffer.GetString();
  return config;
}

RegistryFile::RegistryFile(std::filesystem::path path) : path_(std::move(path)) {}

RegistrySnapshot RegistryFile::load() const {
  ensure_state_dir(path_.parent_path());
  FileLock lock(lock_path_of(path_), LOCK_SH);
  return read_unlocked();
}

void RegistryFile::apply(const RegistrySnapshot& before, const RegistrySnapshot& after) const {
  std::map<std::string, const TrackedSandbox*> was, now;
  for (const auto& t : before.sandboxes) was[t.info.sandbox_id] = &t;
  for (const auto& t : after.sandboxes) now[t.info.sandbox_id] = &t;

  ensure_state_dir(path_.parent_path());
  FileLock lock(lock_path_of(path_), LOCK_EX);
  RegistrySnapshot current = read_unlocked();
  std::map<std::string, TrackedSandbox> merged;
  for (auto& t : current.sandboxes) merged[t.info.sandbox_id] = std::move(t);
  bool changed = false;
  for (const auto& [id, old_entry] : was) {
    if (!now.count(id)) changed |= merged.erase(id) > 0;
  }
  for (const auto& [id, entry] : now) {
    auto old_entry = was.find(id);
    if (old_entry != was.end() && *old_entry->second == *entry) continue;
    merged[id] = *entry;
    changed = true;
  }
  for (const auto& [id, first_seen] : before.unowned_since) {
    if (!after.unowned_since.count(id)) changed |= current.unowned_since.erase(id) > 0;
  }
  for (const auto& [id, first_seen] : after.unowned_since) {
    auto old_entry = before.unowned_since.find(id);
    if (old_entry != before.unowned_since.end() && old_entry->second == first_seen) continue;
    current.unowned_since[id] = first_seen;
    changed = true;
  }
  if (!changed) return;
  RegistrySnapshot result;
  for (auto& [id, entry] : merged) result.sandboxes.push_back(std::move(entry));
  result.unowned_since = std::move(current.unowned_since);
  write_unlocked(result);
}

RegistrySnapshot RegistryFile::read_unlocked() const {
  RegistrySnapshot snapshot;
  std::error_code missing;
  if (!std::filesystem::exists(path_, missing)) return snapshot;
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw RegistryFileError("cannot read " + path_.string() + ": " + errno_text(errno));
  std::stringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  const std::string fix =
      " (the file is rewritten by sandboxctl only; move it aside to start over: the sandboxes keep "
      "running and `sandboxctl reconcile` adopts them once their leases lapse)";
  Document doc;
  if (!parse_json(doc, body) || !doc.IsObject()) {
    throw RegistryFileError(path_.string() + " is not a sandboxctl registry (malformed JSON)" +
                            fix);
  }
  const auto version = doc.FindMember("version");
  if (version == doc.MemberEnd() || !version->value.IsInt() ||
      version->value.GetInt() != kRegistryFormatVersion) {
    throw RegistryFileError(path_.string() + " has an unknown format version (expected " +
                            std::to_string(kRegistryFormatVersion) + ")" + fix);
  }
  const auto sandboxes = doc.FindMember("sandboxes");
  if (sandboxes != doc.MemberEnd()) {
    if (!sandboxes->value.IsArray()) {
      throw RegistryFileError(path_.string() + ": \"sandboxes\" must be an array" + fix);
    }
    for (const auto& item : sandboxes->value.GetArray()) {
      if (!item.IsObject()) {
        throw RegistryFileError(path_.string() + ": every sandbox must be an object" + fix);
      }
      TrackedSandbox t;
      t.info.sandbox_id = optional_string(item, "sandbox_id", path_);
      if (t.info.sandbox_id.empty()) {
        throw RegistryFileError(path_.string() + ": a sandbox has no sandbox_id" + fix);
      }
      t.info.sandbox_url = optional_string(item, "sandbox_url", path_);
      t.info.container_name = non_empty(optional_string(item, "container_name", path_));
      t.info.container_id = non_empty(optional_string(item, "container_id", path_));
      t.info.created_at = number_or_zero(item, "created_at", path_);
      t.info.user_id = non_empty(optional_string(item, "verified_user_id", path_));
      t.info.thread_id = non_empty(optional_string(item, "verified_thread_id", path_));
      t.info.mount_contract_version =
          static_cast<int>(number_or_zero(item, "mount_contract_version", path_));
      // Request headers (a relay's token) are never written: the backend gives them again.
      t.info.network_policy = optional_string(item, "network_policy", path_);
      const std::string state = optional_string(item, "state", path_);
      const std::optional<SandboxState> known = sandbox_state_from(state);
      if (!known || *known == SandboxState::none) {
        throw RegistryFileError(path_.string() + ": sandbox " + t.info.sandbox_id +
                                " has state \"" + state + "\" (expected active, warm or paused)" +
                                fix);
      }
      t.state = *known;
      t.since = number_or_zero(item, "since", path_);
      // Unknown words (a newer serve's) read as unknown, not as an error.
      t.last_acquire = acquire_path_from(optional_string(item, "last_acquire", path_));
      const std::string user = optional_string(item, "user_id", path_);
      const std::string thread = optional_string(item, "thread_id", path_);
      if (!thread.empty()) t.conversation = ThreadKey{user, thread};
      snapshot.sandboxes.push_back(std::move(t));
    }
  }
  const auto unowned = doc.FindMember("unowned_since");
  if (unowned != doc.MemberEnd() && unowned->value.IsObject()) {
    for (const auto& m : unowned->value.GetObject()) {
      if (m.value.IsNumber()) snapshot.unowned_since[m.name.GetString()] = m.value.GetDouble();
    }
  }
  return snapshot;
}

void RegistryFile::write_unlocked(const RegistrySnapshot& snapshot) const {
  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("version");
  w.Int(kRegistryFormatVersion);
  w.Key("sandboxes");
  w.StartArray();
  for (const auto& t : snapshot.sandboxes) {
    w.StartObject();
    w.Key("sandbox_id");
    w.String(t.info.sandbox_id.c_str());
    w.Key("state");
    const std::string_view state = to_string(t.state);
    w.String(state.data(), static_cast<rapidjson::SizeType>(state.size()));
    write_optional(
        w, "user_id",
        t.conversation ? std::optional<std::string>(t.conversation->user_id) : std::nullopt);
    write_optional(
        w, "thread_id",
        t.conversation ? std::optional<std::string>(t.conversation->thread_id) : std::nullopt);
    w.Key("since");
    w.Double(t.since);
    if (t.last_acquire) {
      w.Key("last_acquire");
      w.String(to_string(*t.last_acquire));
    }
    w.Key("sandbox_url");
    w.String(t.info.sandbox_url.c_str());
    write_optional(w, "container_name", t.info.container_name);
    write_optional(w, "container_id", t.info.container_id);
    w.Key("created_at");
    w.Double(t.info.created_at);
    write_optional(w, "verified_user_id", t.info.user_id);
    write_optional(w, "verified_thread_id", t.info.thread_id);
    w.Key("mount_contract_version");
    w.Int(t.info.mount_contract_version);
    if (!t.info.network_policy.empty()) {
      w.Key("network_policy");
      w.String(t.info.network_policy.c_str());
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("unowned_since");
  w.StartObject();
  for (const auto& [id, first_seen] : snapshot.unowned_since) {
    w.Key(id.c_str());
    w.Double(first_seen);
  }
  w.EndObject();
  w.EndObject();

  // Made afresh (a leftover of a crashed writer is removed first, under the lock), never
  // through a link.
  const std::filesystem::path temporary = path_.string() + ".tmp";
  ::unlink(temporary.c_str());
  const int fd =
      ::open(temporary.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw RegistryFileError("cannot write " + temporary.string() + ": " + errno_text(errno));
  }
  const char* data = buffer.GetString();
  std::size_t left = buffer.GetSize();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw RegistryFileError("cannot write " + temporary.string() + ": " + errno_text(error));
    }
    data += written;
    left -= static_cast<std::size_t>(written);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_error = errno;
  if (::close(fd) != 0 || !synced) {
    const int error = synced ? errno : sync_error;
    ::unlink(temporary.c_str());
    throw RegistryFileError("cannot write " + temporary.string() + ": " + errno_text(error));
  }
  if (::rename(temporary.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw RegistryFileError("cannot replace " + path_.string() + ": " + errno_text(error));
  }
  // The rename is durable only once the directory entry is: without this, a power loss can
  // bring the old registry back.
  const int dir_fd = ::open(path_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    const int error = errno;
    if (dir_fd >= 0) ::close(dir_fd);
    throw RegistryFileError("cannot make the new " + path_.string() + " durable (fsync of " +
                            path_.parent_path().string() + "): " + errno_text(error));
  }
  ::close(dir_fd);
}

}  // namespace sandboxd::core
