// Software prefetch of a matmul's next row tile (used by the SIMD kernels).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace pdserve::kernels {

/// Software prefetch (into L2; ahead() into L1 too, except on Intel with AMX) of the weights a
/// matmul kernel reads next, spread over a tile's iterations (part i of n_parts); the hardware
/// prefetchers alone leave a one-token GEMV at a third of the memory bandwidth. Two forms:
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
  /// Which prefetch, by CPU (measured per CPU kind; bench/RESULTS.md has the figures):
  ///  * Intel with AMX (Granite Rapids, 2026-12-06): PREFETCHT1, each after 14 NOPs. A decode
  ///    step's GEMVs then read DRAM 1.1-1.2x as fast as with back-to-back T1s, every type
  ///    (BM_GemvLayers, 1 thread, GB/s: Q4_0 13.3 -> 16.4, Q4_K 14.0 -> 16.0, Q5_K 11.0 -> 15.0,
  ///    Q6_K 11.6 -> 14.6, Q8_0 13.3 -> 15.8). 6 or 24 NOPs gained less, and so did a dependency
  ///    that let one out per 4 cycles (Q5_K 11.7): measured, not understood (no performance
  ///    counters on that VM).
  ///  * Other Intel (Ice Lake Xeon, 2026-12-07): PREFETCHT0 (into L1 as well), back to back.
  ///    There the NOPs cost the kernels' own issue slots (a Q6_K GEMV in L2 read 18.6 GB/s with
  ///    them, 22.7 with back-to-back T1s), and paired tg64 ran T0 against the spaced T1s at
  ///    1.14 / 1.12x (Q6_K, 1 / 2 threads), 1.10 / 1.10x (Q5_K_M), 1.11 / 1.08x (Q4_K_M),
  ///    1.08 / 1.08x (Q4_0), 1.09 / 1.09x (Q8_0); back-to-back T1s 0.97-1.05x, none at all 0.93x
  ///    (Q4_0) to 1.11x (Q6_K).
  ///  * AMD (Zen 5, 2026-12-06): PREFETCHT0 too, against T1 1.12-1.25x for the K-quants (paired
  ///    tg64, 1 and 2 threads: Q4_K_M 1.25 / 1.23, Q5_K_M 1.12 / 1.14, Q6_K 1.13 / 1.12), Q8_0
  ///    1.02 / 1.08; PREFETCHNTA did as well as T0 for the K-quants in BM_GemvLayers, and T1
  ///    spaced by 6 or 14 NOPs made no difference end to end (0.96-1.08x). Q4_0's kernel (5
  ///    lines a part) passes l1_on_amd false and keeps PREFETCHT1 there: with T0 its 1-thread
  ///    decode ran 0.93x (6 pairs).
  static TilePrefetch ahead(const WeightView& w, int64_t row, int rows_per_tile, int64_t n_parts, bool l1_on_amd = true) {
    TilePrefetch pf;
    const int64_t tile_bytes = (std::min(w.rows, row + rows_per_tile) - row) * w.row_bytes;
    const int64_t start = row * w.row_bytes + kAheadBytes, total = w.rows * w.row_bytes;
    if (tile_bytes <= 0 || n_parts <= 0 || start >= total) return pf;
    pf.p_ = static_cast<const uint8_t*>(w.data) + start;
    pf.bytes_ = std::min(tile_bytes, total - start);
    pf.step_ = ((tile_bytes + n_parts - 1) / n_parts + 63) / 64 * 64;
    const CpuFeatures& cpu = cpu_features();
    pf.kind_ = cpu.amd ? (l1_on_amd ? Kind::kT0 : Kind::kT1) : cpu.amx_tile ? Kind::kSpacedT1 : Kind::kT0;
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
    switch (kind_) {
      case Kind::kT1:
        for (int64_t o = i * step_; o < e; o += 64) asm volatile("prefetcht1 %0" : : "m"(p_[o]));
        break;
      case Kind::kSpacedT1:
        for (int64_t o = i * step_; o < e; o += 64) asm volatile(".rept 14\n\tnop\n\t.endr\n\tprefetcht1 %0" : : "m"(p_[o]));
        break;
      case Kind::kT0:
        for (int64_t o = i * step_; o < e; o += 64) asm volatile("prefetcht0 %0" : : "m"(p_[o]));
        break;
    }
  }

 private:
  const uint8_t* p_ = nullptr;
  int64_t bytes_ = 0, step_ = 0;
  /// kT1: the next tile (the constructor; PREFETCHT0 there measured no better on the EPYC:
  /// Q4_K_M / Q6_K B=32 and pp512 0.99-1.04x, paired). ahead(): kSpacedT1 on Intel with AMX,
  /// else kT0 (kT1 on AMD where the caller asks).
  enum class Kind : uint8_t { kT1, kSpacedT1, kT0 };
  Kind kind_ = Kind::kT1;
};

}  // namespace pdserve::kernels
