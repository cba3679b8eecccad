// Software prefetch of a matmul's next row tile (used by the SIMD kernels).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/matmul.h"

namespace pdserve::kernels {

/// Prefetches the next row tile (into L2) while one is computed, spread over the tile's
/// iterations: part i of n_parts of the next tile's bytes. A tile's rows are contiguous,
/// so this is one sequential stream however many rows a tile interleaves; the hardware
/// prefetchers alone leave a one-token GEMV at a third of the memory bandwidth.
class TilePrefetch {
 public:
  TilePrefetch(const WeightView& w, int64_t next_row, int rows_per_tile, int64_t n_parts) {
    const int64_t end = std::min(w.rows, next_row + rows_per_tile);
    if (end <= next_row || n_parts <= 0) return;
    p_ = static_cast<const uint8_t*>(w.data) + next_row * w.row_bytes;
    bytes_ = (end - next_row) * w.row_bytes;
    step_ = ((bytes_ + n_parts - 1) / n_parts + 63) / 64 * 64;
  }
  void part(int64_t i) const {
    // asm: GCC 12 deletes a loop of nothing but __builtin_prefetch.
    for (int64_t o = i * step_, e = std::min(bytes_, o + step_); o < e; o += 64) asm volatile("prefetcht1 %0" : : "m"(p_[o]));
  }

 private:
  const uint8_t* p_ = nullptr;
  int64_t bytes_ = 0, step_ = 0;
};

}  // namespace pdserve::kernels
