#include "image_pull.hpp"

#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "docker_support.hpp"
#include "engine_answers.hpp"

namespace sandboxd::local_docker {
namespace {
constexpr const char* kLog = "local_docker: ";
}  // namespace

void pull_image_into(EngineApi& api, const std::string& image, const std::string& engine_display,
                     double timeout_seconds, Logger& logger) {
  const auto [repository, tag] = split_image_reference(image);
  logger.info(std::string(kLog) + "Image " + image + " is not present on the engine; pulling it");

  std::string pending;                             // an incomplete line of the progress stream
  std::string error;                               // the last error the stream reported
  std::string head;                                // the start of the answer, for HTTP errors
  std::map<std::string, std::string> last_status;  // layer id → last status logged
  const auto handle_line = [&](const std::string& line) {
    const std::optional<PullProgress> progress = parse_pull_progress_line(line);
    if (!progress) return;
    if (!progress->error.empty()) {
      error = progress->error;
      return;
    }
    const std::string& status = progress->status;
    const std::string& id = progress->layer;
    if (status.empty() || last_status[id] == status) return;
    if (last_status.size() > 4096) last_status.clear();  // layer ids come from the engine
    last_status[id] = status;
    logger.info(std::string(kLog) + "Pulling image " + image + ": " +
                (id.empty() ? "" : id + ": ") + status);
  };
  // The engine's progress lines are a few hundred bytes; one that grows past this without a
  // newline is dropped up to its end, so a misbehaving engine cannot grow the buffer forever.
  constexpr std::size_t kMaxProgressLine = 1u << 20;
  bool dropping_line = false;
  const BodySink sink = [&](std::string_view chunk) {
    if (head.size() < 4096) head.append(chunk.substr(0, 4096 - head.size()));
    while (!chunk.empty()) {
      const std::size_t newline = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, newline);
      if (!dropping_line) {
        if (pending.size() + piece.size() > kMaxProgressLine) {
          dropping_line = true;
          pending.clear();
        } else {
          pending.append(piece);
        }
      }
      if (newline == std::string_view::npos) break;
      if (!dropping_line) handle_line(pending);
      pending.clear();
      dropping_line = false;
      chunk.remove_prefix(newline + 1);
    }
  };

  HttpResponse response;
  try {
    response = api.pull_image(repository, tag, timeout_seconds, sink);
  } catch (const EngineTimeoutError& e) {
    throw std::runtime_error(
        "Sandbox image " + image +
        " is not present on the engine and pulling it did not finish: " + e.what());
  }
  handle_line(pending);
  if (!response.ok()) {
    response.body = head;
    error = response.message();
  }
  if (!error.empty()) {
    logger.error(std::string(kLog) + "Failed to pull image " + image + ": " + error);
    throw std::runtime_error("Sandbox image " + image + " is not present on the engine at " +
                             engine_display + " and pulling it failed: " + error);
  }
  logger.info(std::string(kLog) + "Pulled image " + image);
}

}  // namespace sandboxd::local_docker
