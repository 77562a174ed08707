// Everything a plugin author needs, in one include.
#pragma once

#include "sandboxd/abi.hpp"
#include "sandboxd/backend.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/child_process.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/ownership.hpp"
#include "sandboxd/plugin.hpp"
#include "sandboxd/plugin_config.hpp"
#include "sandboxd/redact.hpp"
#include "sandboxd/types.hpp"
