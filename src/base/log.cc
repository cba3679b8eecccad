#include "base/log.h"

namespace pdserve {

void set_log_level(const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace pdserve
