// WeightLayout::kTiles16 (see weight_layout.h): Q4_0 / Q4_K rows <-> 16-row tiles.
#include "kernels/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/quant_types.h"

namespace pdserve::kernels {

namespace {

using gguf::GgmlType;

constexpr int64_t kTileRows = 16;

// Bytes of one block (Q4_0: 32 values, Q4_K: a 256-value super-block) of one row.
int64_t block_bytes(GgmlType t) { return t == GgmlType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ4_K); }

// Where byte j of row r's block goes inside the tile's block (16 · block_bytes bytes).
int64_t tiled_offset(GgmlType t, int64_t r, int64_t j) {
  if (t == GgmlType::Q4_0) {
    if (j < 2) return 2 * r + j;  // the scales first
    const int64_t q = j - 2;      // quant byte q: dword q / 4
    return 32 + 64 * (q / 4) + 4 * r + q % 4;
  }
  return 256 * (j / 16) + 64 * (j % 16 / 4) + 4 * r + j % 4;  // 16-byte slice j / 16
}

// Every block of the tile at `tiled`: rows (kTileRows × row_bytes, ggml's layout) <-> tiles.
template <bool kToTiles>
void convert_tile(GgmlType t, int64_t row_bytes, int64_t r_begin, int64_t r_end, uint8_t* rows, uint8_t* tiled) {
  const int64_t bb = block_bytes(t), nb = row_bytes / bb;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t r = r_begin; r < r_end; ++r)
      for (int64_t j = 0; j < bb; j += 2) {  // both layouts keep byte pairs (and dwords) together
        uint8_t* row_at = rows + (r - r_begin) * row_bytes + b * bb + j;
        uint8_t* tile_at = tiled + b * kTileRows * bb + tiled_offset(t, r, j);
        if constexpr (kToTiles) std::memcpy(tile_at, row_at, 2);
        else std::memcpy(row_at, tile_at, 2);
      }
}

}  // namespace

bool can_tile16(const WeightView& w) {
  if (w.type != GgmlType::Q4_0 && w.type != GgmlType::Q4_K) return false;
  const int64_t per_block = w.type == GgmlType::Q4_0 ? 32 : QK_K;
  return w.layout == WeightLayout::kRows && w.rows > 0 && w.rows % kTileRows == 0 && w.cols % per_block == 0 &&
         w.row_bytes == w.cols / per_block * block_bytes(w.type);
}

void tile16_in_place(WeightView& w) {
  const int64_t tile_bytes = kTileRows * w.row_bytes, n_tiles = w.rows / kTileRows;
  auto* base = static_cast<uint8_t*>(const_cast<void*>(w.data));
#pragma omp parallel
  {
    std::vector<uint8_t> rows(tile_bytes);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n_tiles; ++i) {
      uint8_t* tile = base + i * tile_bytes;
      std::memcpy(rows.data(), tile, tile_bytes);
      convert_tile<true>(w.type, w.row_bytes, 0, kTileRows, rows.data(), tile);
    }
  }
  w.layout = WeightLayout::kTiles16;
}

void untile16_rows(const WeightView& w, int64_t r0, int64_t r1, uint8_t* out) {
  const int64_t tile_bytes = kTileRows * w.row_bytes;
  auto* base = static_cast<uint8_t*>(const_cast<void*>(w.data));  // only read
  for (int64_t r = r0; r < r1;) {
    const int64_t tile = r / kTileRows, end = std::min(r1, (tile + 1) * kTileRows);
    convert_tile<false>(w.type, w.row_bytes, r % kTileRows, r % kTileRows + (end - r), out + (r - r0) * w.row_bytes,
                        base + tile * tile_bytes);
    r = end;
  }
}

}  // namespace pdserve::kernels
