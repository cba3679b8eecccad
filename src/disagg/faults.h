// Fault injection for tests of the KV transfer (off by default; `pdserve prefill` flags).
#pragma once

#include <string>

namespace pdserve::disagg {

/// Faults a prefill worker injects into every Prefill stream it serves.
struct FaultConfig {
  int drop_after_blocks = -1;  // end the stream (UNAVAILABLE) after N CacheBlock messages
  int corrupt_block = -1;      // flip a payload byte of CacheBlock message N (0-based)
  int delay_ms = 0;            // sleep before each CacheBlock message
  int exit_after_blocks = -1;  // exit the process (code 3) after sending N CacheBlock messages
  bool any() const { return drop_after_blocks >= 0 || corrupt_block >= 0 || delay_ms > 0 || exit_after_blocks >= 0; }
};

}  // namespace pdserve::disagg
