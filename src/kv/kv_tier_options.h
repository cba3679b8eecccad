// The store tiers' settings (the --kv-* flags of the engine; kv/kv_tiers.h uses them).
#pragma once

#include <cstdint>
#include <string>

namespace pdserve::kv {

/// Which tiers exist (the --kv-* flags).
struct KvTierOptions {
  std::string offload_dir;        // --kv-offload-dir ("" = no disk tier)
  int64_t offload_bytes = int64_t{10} << 30;  // --kv-offload-gb in bytes
  std::string store_url;          // --kv-store ("" = no Redis tier)
  int timeout_ms = 200;           // --kv-store-timeout-ms
  bool restore = true;            // --kv-restore
  double snapshot_interval_s = 0; // --kv-snapshot-interval (0 = only at shutdown)
  bool any() const { return !offload_dir.empty() || !store_url.empty(); }
};

}  // namespace pdserve::kv
