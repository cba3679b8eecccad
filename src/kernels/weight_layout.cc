// WeightLayout::kTiles16 (see weight_layout.h): Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K rows <-> 16-row tiles.
#include "kernels/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/quant_types.h"

namespace pdserve::kernels {

namespace {

using gguf::GgmlType;

constexpr int64_t kTileRows = 16;

// Bytes of one block (Q4_0: 32 values, K-quants: a 256-value super-block) of one row.
int64_t block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return sizeof(BlockQ4_0);
    case GgmlType::Q8_0: return sizeof(BlockQ8_0);
    case GgmlType::Q4_K: return sizeof(BlockQ4_K);
    case GgmlType::Q5_K: return sizeof(BlockQ5_K);
    default: return sizeof(BlockQ6_K);
  }
}

// A run of `size` bytes at `src` in a row's block that lands at dst + size · r in the tile's
// block (16 · block_bytes bytes; Q6_K: 16 · 208, see below) for row r of the tile.
struct Unit {
  int64_t src, dst, size;
};

// Q6_K's 13 whole 16-byte slices of a block (208 of its 210 bytes) take 16 · 208 = 3328
// bytes in a tile, a multiple of 64: the kernels' 64-byte loads then stay in one cache
// line. The d of every block follows all blocks' slices: 16 f16 (32 bytes) a block.
constexpr int64_t kQ6KSlices = 208;

std::vector<Unit> units(GgmlType t) {
  std::vector<Unit> u;
  if (t == GgmlType::Q4_0 || t == GgmlType::Q8_0) {
    u.push_back({0, 0, 2});  // the scales first
    for (int64_t k = 0; k < (t == GgmlType::Q4_0 ? 4 : 8); ++k) u.push_back({2 + 4 * k, 32 + 64 * k, 4});  // quant dword k
  } else {
    for (int64_t s = 0; s < block_bytes(t) / 16; ++s)  // 16-byte slice s, dword k
      for (int64_t k = 0; k < 4; ++k) u.push_back({16 * s + 4 * k, 256 * s + 64 * k, 4});
  }
  return u;
}

// Rows [r_begin, r_end) of a tile (in-tile indices): `rows` (those rows in ggml's layout,
// row_bytes apart) <-> the tile at `tiled`.
template <bool kToTiles>
void convert_tile(GgmlType t, int64_t row_bytes, int64_t r_begin, int64_t r_end, uint8_t* rows, uint8_t* tiled) {
  const int64_t bb = block_bytes(t), nb = row_bytes / bb;
  const bool q6 = t == GgmlType::Q6_K;
  const int64_t tile_block = kTileRows * (q6 ? kQ6KSlices : bb);
  const std::vector<Unit> us = units(t);
  auto copy = [](uint8_t* tile_at, uint8_t* row_at, int64_t size) {
    if (size == 4) std::memcpy(kToTiles ? tile_at : row_at, kToTiles ? row_at : tile_at, 4);
    else std::memcpy(kToTiles ? tile_at : row_at, kToTiles ? row_at : tile_at, 2);
  };
  for (int64_t r = r_begin; r < r_end; ++r) {
    uint8_t* row = rows + (r - r_begin) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + b * bb;
      uint8_t* tblk = tiled + b * tile_block;
      for (const Unit& u : us) copy(tblk + u.dst + u.size * r, blk + u.src, u.size);
      if (q6) copy(tiled + nb * tile_block + kTileRows * 2 * b + 2 * r, blk + offsetof(BlockQ6_K, d), 2);
    }
  }
}

}  // namespace

bool can_tile16(const WeightView& w) {
  if (w.type != GgmlType::Q4_0 && w.type != GgmlType::Q8_0 && w.type != GgmlType::Q4_K && w.type != GgmlType::Q5_K &&
      w.type != GgmlType::Q6_K)
    return false;
  const int64_t per_block = w.type == GgmlType::Q4_0 || w.type == GgmlType::Q8_0 ? 32 : QK_K;
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
