// Software prefetch of a matmul's next row tile (used by the SIMD kernels).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace pdserve::kernels {

/// Software prefetch (into L2) of the weights a matmul kernel reads next, spread over a
/// tile's iterations (part i of n_parts); the hardware prefetchers alone leave a one-token
/// GEMV at a third of the memory bandwidth. Two forms:
///  * the constructor: the next row tile while one is computed. A tile's rows are
///    contiguous, so this is one sequential stream however many rows the kernel reads side
///    by side (ggml's row layout: 16 rows' blocks at once).
///  * ahead(): for a tile read front to back (WeightLayout::kTiles16, blocks of its 16 rows
///    one after the other), the bytes a fixed distance past part i of the tile itself.
class TilePrefetch {
 public:
  /// How far ahead() prefetches. One tile ahead (the constructor) is 18-74 KB for the
  /// TinyLlama shapes' K-quants and grows with the row length; on the 2-core EPYC a fixed 8 KB
  /// gave one-token decode 1.16x (Q4_K_M) and 1.12x (Q6_K) at 1 thread, 1.15x / 1.09x at 2
  /// (paired bench-model tg128, 2026-12-05); 16 KB the same as 8, 4 KB less.
  static constexpr int64_t kAheadBytes = 8192;

  TilePrefetch() = default;
  /// For a tile read front to back: part i prefetches the tile's bytes [i·step, (i+1)·step)
  /// shifted kAheadBytes further (into the next tile near the end; nothing past the matrix).
  /// On Intel each prefetch follows 14 NOPs. On the 2-core Intel Xeon (Granite Rapids,
  /// 2026-12-06) a decode step's GEMVs then read DRAM 1.1-1.2x as fast, every type
  /// (BM_GemvLayers, 1 thread, GB/s: Q4_0 13.3 -> 16.4, Q4_K 14.0 -> 16.0, Q5_K 11.0 -> 15.0,
  /// Q6_K 11.6 -> 14.6, Q8_0 13.3 -> 15.8; paired bench-model in bench/RESULTS.md). Back to
  /// back, a part's prefetches (5-53 lines) went out one a cycle; 6 or 24 NOPs gained less, and
  /// so did a dependency that let one out per 4 cycles (Q5_K 11.7), so the count of
  /// instructions in flight between them matters, not only their rate: measured, not
  /// understood (this VM has no performance counters). AMD keeps the plain burst, which is
  /// what kAheadBytes was measured with there.
  static TilePrefetch ahead(const WeightView& w, int64_t row, int rows_per_tile, int64_t n_parts) {
    TilePrefetch pf;
    const int64_t tile_bytes = (std::min(w.rows, row + rows_per_tile) - row) * w.row_bytes;
    const int64_t start = row * w.row_bytes + kAheadBytes, total = w.rows * w.row_bytes;
    if (tile_bytes <= 0 || n_parts <= 0 || start >= total) return pf;
    pf.p_ = static_cast<const uint8_t*>(w.data) + start;
    pf.bytes_ = std::min(tile_bytes, total - start);
    pf.step_ = ((tile_bytes + n_parts - 1) / n_parts + 63) / 64 * 64;
    pf.spaced_ = !cpu_features().amd;
    return pf;
  }
  TilePrefetch(const WeightView& w, int64_t next_row, int rows_per_tile, int64_t n_parts) {
    const int64_t end = std::min(w.rows, next_row + rows_per_tile);
    if (end <= next_row || n_parts <= 0) return;
    p_ = static_cast<const uint8_t*>(w.data) + next_row * w.row_bytes;
    bytes_ = (end - next_row) * w.row_bytes;
    step_ = ((bytes_ + n_parts - 1) / n_parts + 63) / 64 * 64;
  }
  void part(int64_t i) const {
    // asm: GCC 12 deletes a loop of nothing but __builtin_prefetch.
    const int64_t e = std::min(bytes_, (i + 1) * step_);
    if (spaced_) {
      for (int64_t o = i * step_; o < e; o += 64) asm volatile(".rept 14\n\tnop\n\t.endr\n\tprefetcht1 %0" : : "m"(p_[o]));
    } else {
      for (int64_t o = i * step_; o < e; o += 64) asm volatile("prefetcht1 %0" : : "m"(p_[o]));
    }
  }

 private:
  const uint8_t* p_ = nullptr;
  int64_t bytes_ = 0, step_ = 0;
  bool spaced_ = false;  // ahead() on Intel: 14 NOPs before each prefetch (see ahead())
};

}  // namespace pdserve::kernels
