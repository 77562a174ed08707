// Pulling the sandbox image when the engine lacks it: the Engine API's progress stream read line
// by line (each line bounded), each layer's status logged once as it changes, the stream's own
// error or the HTTP refusal turned into one sentence naming the image and the engine.
#pragma once

#include <sandboxd/logger.hpp>
#include <string>

#include "engine_api.hpp"

namespace sandboxd::local_docker {

// Pulls `image` through `api`, bounded by `timeout_seconds`; `engine_display` names the engine
// in messages. Throws std::runtime_error when the pull fails or does not finish.
void pull_image_into(EngineApi& api, const std::string& image, const std::string& engine_display,
                     double timeout_seconds, Logger& logger);

}  // namespace sandboxd::local_docker
