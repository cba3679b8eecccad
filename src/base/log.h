// Logging: thin wrapper over spdlog so every layer logs the same way.
#pragma once

#include <spdlog/spdlog.h>

namespace pdserve {

/// Sends logs to stderr and sets the level by name: trace, debug, info, warn, error, off.
void set_log_level(const std::string& level);

}  // namespace pdserve

#define PDS_LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
#define PDS_LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define PDS_LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define PDS_LOG_ERROR(...) spdlog::error(__VA_ARGS__)
