// The slot pool's engine (SlotEngine, slot_pool.hpp) through the Engine API layer: removing,
// renaming, listing and looking into slot containers. Starting one is the backend's own (its
// settings, port search and readiness probe), handed in as a function.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine_api.hpp"
#include "slot_pool.hpp"

namespace sandboxd::local_docker {

class EngineSlots final : public SlotEngine {
 public:
  using StartSlot = std::function<Started(const std::string& name, const std::vector<Mount>&,
                                          const std::map<std::string, std::string>& labels)>;
  // `name_prefix`: "{container_prefix}-"; listings keep only containers named so.
  EngineSlots(EngineApi& api, std::string name_prefix, StartSlot start)
      : api_(api), name_prefix_(std::move(name_prefix)), start_(std::move(start)) {}

  Started start_slot(const std::string& name, const std::vector<Mount>& slot_mounts,
                     const std::map<std::string, std::string>& labels) override {
    return start_(name, slot_mounts, labels);
  }
  void remove_container(const std::string& id) override;
  bool rename_container(const std::string& id, const std::string& name) override;
  bool container_sees(const std::string& id, const std::string& path) override;
  std::vector<Listed> list_slots() override;
  bool container_exists(const std::string& id) override;

 private:
  EngineApi& api_;
  const std::string name_prefix_;
  const StartSlot start_;
};

}  // namespace sandboxd::local_docker
