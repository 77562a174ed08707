#include "engine_slots.hpp"

#include <stdexcept>

#include "docker_support.hpp"
#include "engine_answers.hpp"

namespace sandboxd::local_docker {
namespace {

constexpr double kListTimeoutSeconds = 10.0;    // design §9.8
constexpr double kInspectTimeoutSeconds = 5.0;  // design §9.6

std::string short_id(const std::string& id) {
  return id.size() > 12 ? id.substr(0, 12) : id;
}

}  // namespace

void EngineSlots::remove_container(const std::string& id) {
  const EngineApi::Removed removed = api_.remove_container(id);
  if (removed.ok()) return;
  throw std::runtime_error("removing container " + short_id(id) + ": " + removed.outcome.message);
}

bool EngineSlots::rename_container(const std::string& id, const std::string& name) {
  const Outcome renamed = api_.rename_container(id, name);
  if (renamed.ok()) return true;
  if (renamed.status == 409 || is_name_conflict(renamed.status, renamed.message)) return false;
  throw std::runtime_error("renaming container " + short_id(id) + " to " + name + ": " +
                           renamed.message);
}

bool EngineSlots::container_sees(const std::string& id, const std::string& path) {
  const Outcome read = api_.archive_head(id, path);
  if (read.status == 200) return true;
  if (read.status == 404) return false;
  throw std::runtime_error("reading " + path + " in container " + short_id(id) + ": " +
                           read.message);
}

std::vector<SlotEngine::Listed> EngineSlots::list_slots() {
  std::string body;
  const Outcome listed =
      api_.list_containers("label", kLabelSlotOwner, /*all=*/true, kListTimeoutSeconds, &body);
  if (listed.status != 200) {
    throw std::runtime_error("HTTP " + std::to_string(listed.status) + ": " + listed.message);
  }
  std::vector<Listed> out;
  for (ContainerState& state : parse_listing(body, name_prefix_)) {
    auto owner = state.labels.find(kLabelSlotOwner);
    if (owner == state.labels.end() || owner->second.empty()) continue;
    out.push_back({std::move(state.id), std::move(state.name), owner->second});
  }
  return out;
}

bool EngineSlots::container_exists(const std::string& id) {
  return api_.inspect_container(id, kInspectTimeoutSeconds).has_value();
}

}  // namespace sandboxd::local_docker
