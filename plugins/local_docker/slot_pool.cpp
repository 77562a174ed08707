#include "slot_pool.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sandboxd/json.hpp>
#include <set>
#include <stdexcept>

#include "docker_support.hpp"
#include "host_mounts.hpp"

namespace sandboxd::local_docker {
namespace fs = std::filesystem;
using namespace sandboxd::host_fs;  // NOLINT: the no-follow file helpers
namespace {

constexpr const char* kLog = "local_docker: slots: ";
constexpr const char* kProbeMountPoint = "/mnt/.sandboxd-slot-probe";
// A walk of the slots root or a slot's directory stops here: a slot's directories are empty
// unless its container wrote into them before it was claimed.
constexpr std::size_t kMaxWalkEntries = 10000;

std::vector<Mount> sorted_shape(const std::vector<Mount>& mounts) {
  std::vector<Mount> shape = mounts;
  std::sort(shape.begin(), shape.end(),
            [](const Mount& a, const Mount& b) { return a.container_path < b.container_path; });
  return shape;
}

std::string shape_key(const std::vector<Mount>& mounts) {
  std::string key;
  for (const Mount& m : sorted_shape(mounts)) {
    key += m.container_path + (m.read_only ? ":ro" : ":rw") + ";";
  }
  return key;
}

std::string describe_shape(const std::string& key) {
  return key.empty() ? "no mount points" : key;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Removes `parent/name` and what is under it (see remove_tree_at: no link followed, no mount
// crossed, a bounded walk); `parent` is ours, under the slots root.
Removal remove_under(const fs::path& parent, const std::string& name) {
  UniqueFd dir;
  try {
    dir = open_dir_without_links(parent);
  } catch (const std::exception&) {
    return {};  // gone already
  }
  std::size_t budget = kMaxWalkEntries;
  return remove_tree_at(dir.get(), name, budget);
}

SlotPoolOptions with_normal_root(SlotPoolOptions options) {
  options.root = normal_absolute(options.root);
  return options;
}

}  // namespace

SlotPool::SlotPool(SlotPoolOptions options, SlotEngine& engine, std::shared_ptr<Logger> logger)
    : options_(with_normal_root(std::move(options))),
      engine_(engine),
      logger_(std::move(logger)),
      token_(random_token()) {
  if (!options_.declared_shape.empty()) shape_ = sorted_shape(options_.declared_shape);
}

void SlotPool::start() {
  std::call_once(started_, [this] {
    {
      MutexLock lock(mutex_);
      running_ = true;
    }
    refill_ = std::thread([this] { run(); });
  });
}

SlotPool::~SlotPool() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (refill_.joinable()) refill_.join();
  std::deque<Slot> left;
  bool was_running;
  {
    MutexLock lock(mutex_);
    left.swap(ready_);
    was_running = running_;
  }
  for (const Slot& slot : left) discard(slot);
  if (!was_running) return;  // nothing was set up
  // The root stays a mount while claimed slots' mounts are under it (their sandboxes outlive
  // this process); otherwise nothing this pool mounted stays mounted.
  try {
    if (is_self_bind(options_.root) &&
        !has_mounts_two_levels_down(options_.root / "slots", kMaxWalkEntries)) {
      detach_mount(options_.root, /*every_layer=*/false);
    }
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + e.what());
  }
}

void SlotPool::set_off(const std::string& reason) {
  {
    MutexLock lock(mutex_);
    off_reason_ = reason;
  }
  logger_->warning(std::string(kLog) + "pre-started slots are off: " + reason +
                   "; every new conversation gets a cold create");
}

PreStartedSlots::Status SlotPool::status() const {
  MutexLock lock(mutex_);
  PreStartedSlots::Status out;
  out.configured = options_.target;
  out.target = running_ ? options_.target : 0;
  out.ready = ready_.size();
  out.off_reason = off_reason_;
  return out;
}

void SlotPool::learn_shape(const CreateRequest& request) {
  const std::string key = shape_key(request.extra_mounts);
  {
    MutexLock lock(mutex_);
    if (shape_ && shape_key(*shape_) == key) return;
    shape_ = sorted_shape(request.extra_mounts);
  }
  logger_->info(std::string(kLog) + "new slots are made for " + describe_shape(key));
  wake_.notify_all();
  // Kept beside the slots, so that the next gateway on this directory refills at once.
  try {
    std::string text;
    for (const Mount& m : sorted_shape(request.extra_mounts)) {
      text += (m.read_only ? "ro " : "rw ") + m.container_path + "\n";
    }
    const UniqueFd root = open_dir_without_links(options_.root);
    replace_file_at(root.get(), "shape", text, 0600, options_.root / "shape");
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + "could not keep the mount points in " +
                     (options_.root / "shape").string() + ": " + e.what());
  }
}

void SlotPool::read_kept_shape() {
  {
    MutexLock lock(mutex_);
    if (shape_) return;  // configured, or learned already
  }
  std::string text;
  try {
    const UniqueFd root = open_trusted_dir(options_.root);
    text = read_file_at(root.get(), "shape", 65536, options_.root / "shape");
  } catch (const std::exception&) {
    return;  // none kept yet
  }
  std::vector<Mount> shape;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.size() < 4 || line[3] != '/' ||
        (line.compare(0, 3, "ro ") != 0 && line.compare(0, 3, "rw ") != 0)) {
      continue;
    }
    shape.push_back(Mount{"", line.substr(3), line[0] == 'r' && line[1] == 'o'});
  }
  MutexLock lock(mutex_);
  if (!shape_) shape_ = sorted_shape(shape);
}

bool SlotPool::set_up_root() {
  // Every later path starts at the root, so no link may lie on the way to it.
  if (const std::string why = links_on_the_way(options_.root); !why.empty()) {
    set_off("slots_dir " + options_.root.string() + " cannot be used: " + why +
            "; give its real path");
    return false;
  }
  try {
    ensure_trusted_dir(options_.root, "slots directory");
    for (const char* sub : {"slots", "claims", "owners"}) {
      const fs::path dir = options_.root / sub;
      if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot make " + dir.string() + ": " + std::strerror(errno));
      }
      require_trusted_dir(dir, "slots directory");
    }
    make_shared_mount(options_.root);
    const fs::path lock_path = options_.root / "owners" / (token_ + ".lock");
    owner_lock_ =
        UniqueFd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!owner_lock_ || ::flock(owner_lock_.get(), LOCK_EX | LOCK_NB) != 0) {
      throw std::runtime_error("cannot lock " + lock_path.string() + ": " + std::strerror(errno));
    }
    return true;
  } catch (const std::exception& e) {
    set_off(std::string(e.what()) +
            " (pre-started slots need root in the engine's mount namespace)");
    return false;
  }
}

bool SlotPool::owner_alive(const std::string& token) const {
  if (token == token_) return true;
  const fs::path lock_path = options_.root / "owners" / (token + ".lock");
  UniqueFd fd(::open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return false;
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) return errno == EWOULDBLOCK ? true : false;
  return false;  // we got the lock: nobody holds it
}

bool SlotPool::probe() {
  const std::string name = options_.name_prefix + "slot-" + token_ + "-probe";
  const fs::path dir = options_.root / "slots" / (token_ + "-probe");
  const fs::path point = dir / "0";
  const fs::path marker_dir = dir / "marker";
  std::error_code ec;
  fs::create_directories(point, ec);
  fs::create_directories(marker_dir, ec);
  {
    UniqueFd(
        ::open((marker_dir / "marker").c_str(), O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600));
  }
  std::string failure;
  std::string id;
  try {
    const SlotEngine::Started started = engine_.start_slot(
        name, {Mount{point.string(), kProbeMountPoint, false}}, {{kLabelSlotOwner, token_}});
    id = started.id;
    bind_directory(marker_dir.string(), point, true);
    if (!engine_.container_sees(id, std::string(kProbeMountPoint) + "/marker")) {
      failure = "a directory mounted under " + options_.root.string() +
                " after the container started did not appear inside it (a rootless engine, "
                "an engine in another mount namespace, a VM or a remote engine)";
    }
  } catch (const std::exception& e) {
    failure = std::string("the probe slot failed: ") + e.what();
  }
  try {
    detach_mount(point);
    if (!id.empty()) engine_.remove_container(id);
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + "cleaning up the probe slot: " + e.what());
  }
  remove_under(options_.root / "slots", token_ + "-probe");
  if (!failure.empty()) {
    set_off(failure);
    return false;
  }
  logger_->info(std::string(kLog) + "a host bind reaches a running container; keeping " +
                std::to_string(options_.target) + " slot(s) ready under " + options_.root.string());
  return true;
}

std::optional<SlotPool::Slot> SlotPool::start_one(const std::vector<Mount>& shape) {
  Slot slot;
  std::size_t n;
  {
    MutexLock lock(mutex_);
    n = ++sequence_;
  }
  const std::string suffix = token_ + "-" + std::to_string(n);
  slot.name = options_.name_prefix + "slot-" + suffix;
  slot.dir = suffix;
  slot.key = shape_key(shape);
  const fs::path dir = options_.root / "slots" / suffix;
  const auto started_at = std::chrono::steady_clock::now();
  try {
    if (::mkdir(dir.c_str(), 0700) != 0) {
      throw std::runtime_error("cannot make " + dir.string() + ": " + std::strerror(errno));
    }
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const fs::path point = dir / std::to_string(i);
      if (::mkdir(point.c_str(), 0700) != 0) {
        throw std::runtime_error("cannot make " + point.string() + ": " + std::strerror(errno));
      }
      slot.mounts.push_back(Mount{point.string(), shape[i].container_path, shape[i].read_only});
    }
    slot.container = engine_.start_slot(slot.name, slot.mounts, {{kLabelSlotOwner, token_}});
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + "starting slot " + slot.name + " failed: " + e.what());
    remove_under(options_.root / "slots", suffix);
    return std::nullopt;
  }
  logger_->debug(std::string(kLog) + "slot " + slot.name + " ready in " +
                 std::to_string(static_cast<long>(ms_since(started_at))) + " ms");
  return slot;
}

void SlotPool::discard(const Slot& slot) {
  try {
    engine_.remove_container(slot.container.id);
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + "removing slot " + slot.name + ": " + e.what() +
                     " (the next sweep retries)");
    return;  // its directory stays until its container is gone
  }
  remove_slot_dir(options_.root, slot.dir, *logger_);
}

void SlotPool::remove_slot_dir(const fs::path& root, const std::string& slot, Logger& logger) {
  if (slot.empty() || slot.find('/') != std::string::npos || slot[0] == '.') return;
  const fs::path dir = root / "slots" / slot;
  try {
    detach_child_mounts(dir, kMaxWalkEntries);
  } catch (const std::exception& e) {
    logger.warning(std::string(kLog) + e.what() + "; " + dir.string() + " left in place");
    return;  // never remove files through a mount that is still there
  }
  // The removal itself never enters a mount either: what is still mounted stays whole.
  const Removal removal = remove_under(root / "slots", slot);
  if (!removal.mount_refused.empty()) {
    logger.warning(std::string(kLog) + (dir / removal.mount_refused).string() +
                   " is still a mount point; " + dir.string() + " left in place");
  } else if (removal.budget_ran_out) {
    logger.warning(std::string(kLog) + dir.string() + " holds more than " +
                   std::to_string(kMaxWalkEntries) + " entries; left in place");
  }
}

void SlotPool::run() {
  if (!set_up_root()) return;
  read_kept_shape();
  sweep();
  if (!probe()) return;
  auto next_sweep =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<long>(options_.sweep_interval_seconds * 1000));
  auto backoff = std::chrono::seconds(1);
  while (true) {
    std::vector<Slot> stale;
    std::optional<std::vector<Mount>> make;
    {
      MutexLock lock(mutex_);
      const auto has_work = [&]() REQUIRES(mutex_) {
        if (stopping_) return true;
        const std::string key = shape_ ? shape_key(*shape_) : "";
        for (const Slot& slot : ready_) {
          if (slot.key != key) return true;
        }
        return shape_ && ready_.size() + starting_ < options_.target &&
               std::chrono::steady_clock::now() >= retry_after_;
      };
      auto deadline = next_sweep;
      if (retry_after_ > std::chrono::steady_clock::now())
        deadline = std::min(deadline, retry_after_);
      lock.wait_until(wake_, deadline, has_work);
      if (stopping_) return;
      const std::string key = shape_ ? shape_key(*shape_) : "";
      for (auto it = ready_.begin(); it != ready_.end();) {
        if (it->key != key) {
          stale.push_back(std::move(*it));
          it = ready_.erase(it);
        } else {
          ++it;
        }
      }
      if (shape_ && ready_.size() + starting_ < options_.target &&
          std::chrono::steady_clock::now() >= retry_after_) {
        make = *shape_;
        ++starting_;
      }
    }
    for (const Slot& slot : stale) {
      logger_->info(std::string(kLog) + "draining slot " + slot.name + ": made for " +
                    describe_shape(slot.key) + ", new conversations ask for another set");
      discard(slot);
    }
    if (std::chrono::steady_clock::now() >= next_sweep) {
      sweep();
      next_sweep =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(static_cast<long>(options_.sweep_interval_seconds * 1000));
    }
    if (!make) continue;
    std::optional<Slot> slot = start_one(*make);
    bool keep = false;
    {
      MutexLock lock(mutex_);
      --starting_;
      if (!slot) {
        retry_after_ = std::chrono::steady_clock::now() + backoff;
        backoff = std::min(backoff * 2, std::chrono::seconds(30));
      } else {
        backoff = std::chrono::seconds(1);
        keep = !stopping_;
        if (keep) ready_.push_back(*slot);
      }
    }
    if (slot && !keep) discard(*slot);
  }
}

PreStartedSlots::Claim SlotPool::claim(const CreateRequest& request, const std::string& name) {
  using Miss = PreStartedSlots::Miss;
  const auto started_at = std::chrono::steady_clock::now();
  const std::string key = shape_key(request.extra_mounts);
  Slot slot;
  {
    MutexLock lock(mutex_);
    if (!off_reason_.empty()) return {std::nullopt, Miss::unsupported, off_reason_};
    if (!running_) return {std::nullopt, Miss::none_ready, "slots were not started by this host"};
    auto it =
        std::find_if(ready_.begin(), ready_.end(), [&](const Slot& s) { return s.key == key; });
    if (it == ready_.end()) {
      if (ready_.empty()) {
        return {std::nullopt, Miss::none_ready,
                std::to_string(starting_) + " slot(s) starting" +
                    (shape_ ? std::string() : std::string(", mount points not learned yet"))};
      }
      return {std::nullopt, Miss::key_mismatch,
              "ready slots have " + describe_shape(ready_.front().key) +
                  "; this conversation asks for " + describe_shape(key)};
    }
    slot = std::move(*it);
    ready_.erase(it);
  }
  wake_.notify_all();  // refill

  const std::vector<Mount> wanted = sorted_shape(request.extra_mounts);
  ClaimRecord record{request.sandbox_id, slot.container.id, slot.dir, request.user_id,
                     request.thread_id};
  std::string failure;
  try {
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      bind_directory(wanted[i].host_path, slot.mounts[i].host_path, wanted[i].read_only);
    }
    write_record(record);
    if (!engine_.rename_container(slot.container.id, name)) {
      failure = "container name " + name + " is taken";
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    std::error_code ec;
    fs::remove(options_.root / "claims" / (request.sandbox_id + ".json"), ec);
    discard(slot);  // its directories held this conversation's mounts: never reused
    return {std::nullopt, Miss::claim_failed, "slot " + slot.name + ": " + failure};
  }
  SandboxInfo info;
  info.sandbox_id = request.sandbox_id;
  info.sandbox_url = slot.container.url;
  info.container_name = name;
  info.container_id = slot.container.id;
  info.created_at = slot.container.created_at;
  info.user_id = request.user_id;
  info.thread_id = request.thread_id;
  info.mount_contract_version = kSandboxMountContractVersion;
  logger_->info(std::string(kLog) + "claimed slot " + slot.name + " as " + name + " in " +
                std::to_string(static_cast<long>(ms_since(started_at))) + " ms");
  return {std::move(info), Miss::none, ""};
}

void SlotPool::write_record(const ClaimRecord& record) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("sandbox_id");
  write_json_string(w, record.sandbox_id);
  w.Key("container_id");
  write_json_string(w, record.container_id);
  w.Key("slot");
  write_json_string(w, record.slot);
  if (record.user_id) {
    w.Key("user_id");
    write_json_string(w, *record.user_id);
  }
  if (record.thread_id) {
    w.Key("thread_id");
    write_json_string(w, *record.thread_id);
  }
  w.EndObject();
  // Durable before the claim is handed out: a crash after it must find the record, or the
  // next sweep would take the claimed sandbox for an unclaimed slot.
  const fs::path dir = options_.root / "claims";
  const UniqueFd claims = open_dir_without_links(dir);
  replace_file_at(claims.get(), record.sandbox_id + ".json",
                  std::string_view(buffer.GetString(), buffer.GetSize()), 0600,
                  dir / (record.sandbox_id + ".json"));
}

std::optional<ClaimRecord> SlotPool::claimed(const fs::path& root, const std::string& sandbox_id,
                                             const std::string& container_id) {
  // No container named: no record can be said to be its (issue 32 B: an empty id matched every
  // record, and a destroy without one detached a live claim's mounts).
  if (container_id.empty()) return std::nullopt;
  std::optional<ClaimRecord> record = read_record(root, sandbox_id);
  if (record && record->container_id.rfind(container_id, 0) != 0 &&
      container_id.rfind(record->container_id, 0) != 0) {
    return std::nullopt;  // the record is of an earlier container of this name
  }
  return record;
}

std::optional<ClaimRecord> SlotPool::read_record(const fs::path& root,
                                                 const std::string& sandbox_id) {
  if (sandbox_id.empty() || sandbox_id.find('/') != std::string::npos || sandbox_id[0] == '.') {
    return std::nullopt;
  }
  const fs::path dir = root / "claims";
  std::string text;
  try {
    const UniqueFd claims = open_trusted_dir(dir);
    text = read_file_at(claims.get(), sandbox_id + ".json", 65536, dir / sandbox_id);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  if (!doc.IsObject()) return std::nullopt;
  const auto get = [&](const char* key) -> std::optional<std::string> {
    auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || !it->value.IsString()) return std::nullopt;
    return std::string(it->value.GetString(), it->value.GetStringLength());
  };
  ClaimRecord record;
  record.sandbox_id = get("sandbox_id").value_or("");
  record.container_id = get("container_id").value_or("");
  record.slot = get("slot").value_or("");
  record.user_id = get("user_id");
  record.thread_id = get("thread_id");
  if (record.sandbox_id != sandbox_id || record.container_id.empty() || record.slot.empty()) {
    return std::nullopt;
  }
  return record;
}

void SlotPool::forget_claim(const fs::path& root, const std::string& sandbox_id,
                            const std::string& container_id, Logger& logger) {
  const std::optional<ClaimRecord> record = claimed(root, sandbox_id, container_id);
  if (!record) return;
  remove_slot_dir(root, record->slot, logger);
  std::error_code ec;
  fs::remove(root / "claims" / (sandbox_id + ".json"), ec);
  logger.debug(std::string(kLog) + "released the host mounts of claimed slot " + record->slot);
}

void SlotPool::sweep() {
  std::vector<SlotEngine::Listed> listed;
  try {
    listed = engine_.list_slots();
  } catch (const std::exception& e) {
    logger_->warning(std::string(kLog) + "sweep: listing slots failed: " + e.what());
    return;
  }
  std::set<std::string> live_slot_dirs;
  std::set<std::string> listed_ids;
  for (const SlotEngine::Listed& container : listed) {
    listed_ids.insert(container.id);
    const std::string sandbox_id = container.name.rfind(options_.name_prefix, 0) == 0
                                       ? container.name.substr(options_.name_prefix.size())
                                       : container.name;
    if (const auto record = claimed(options_.root, sandbox_id, container.id)) {
      live_slot_dirs.insert(record->slot);
      continue;  // a conversation's sandbox now
    }
    if (owner_alive(container.owner)) continue;
    try {
      engine_.remove_container(container.id);
      logger_->info(std::string(kLog) + "removed slot " + container.name +
                    " of a gateway that is gone");
    } catch (const std::exception& e) {
      logger_->warning(std::string(kLog) + "removing slot " + container.name + ": " + e.what());
      live_slot_dirs.insert(container.name.substr(container.name.rfind("slot-") + 5));
    }
  }
  std::error_code ec;
  // One sweep reads at most this many entries of the claims, slots and owners directories
  // together: a record and a directory per claimed sandbox, at 10,000 sandboxes and more.
  std::size_t budget = 10 * kMaxWalkEntries;
  // Claims whose container is gone (stopped while no gateway watched): their mounts go.
  for (fs::directory_iterator it(options_.root / "claims", ec), end; !ec && it != end && budget;
       it.increment(ec), --budget) {
    const std::string file = it->path().filename().string();
    if (file.size() <= 5 || file.compare(file.size() - 5, 5, ".json") != 0) continue;
    const std::string sandbox_id = file.substr(0, file.size() - 5);
    const std::optional<ClaimRecord> record = read_record(options_.root, sandbox_id);
    if (!record) continue;
    // A claimed slot keeps its slot label, so the listing above holds every live one; a
    // record missing from it is asked about once (its slot may have started since).
    bool exists = listed_ids.count(record->container_id) != 0;
    if (!exists) {
      try {
        exists = engine_.container_exists(record->container_id);
      } catch (const std::exception&) {
        exists = true;  // could not tell: keep its mounts
      }
    }
    if (exists) {
      live_slot_dirs.insert(record->slot);
      continue;
    }
    forget_claim(options_.root, sandbox_id, record->container_id, *logger_);
    logger_->info(std::string(kLog) + "released the host mounts of sandbox " + sandbox_id +
                  ", whose container is gone");
  }
  for (fs::directory_iterator it(options_.root / "slots", ec), end; !ec && it != end && budget;
       it.increment(ec), --budget) {
    const std::string slot = it->path().filename().string();
    const std::size_t dash = slot.find('-');
    const std::string owner = slot.substr(0, dash);
    if (live_slot_dirs.count(slot) != 0 || owner_alive(owner)) continue;
    remove_slot_dir(options_.root, slot, *logger_);
  }
  for (fs::directory_iterator it(options_.root / "owners", ec), end; !ec && it != end && budget;
       it.increment(ec), --budget) {
    const std::string file = it->path().filename().string();
    const std::string owner = file.substr(0, file.find('.'));
    std::error_code removed;
    if (!owner_alive(owner)) fs::remove(it->path(), removed);
  }
}

}  // namespace sandboxd::local_docker
