#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace pdserve {

void set_log_level(const std::string& level) {
  // Logs go to stderr so that stdout carries only a command's output (e.g. `generate`).
  static bool init = [] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("pdserve"));
    return true;
  }();
  (void)init;
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace pdserve
