// BlockTable: a sequence's KV block ids in position order.
#pragma once

#include <cstdint>
#include <vector>

namespace pdserve::kv {

/// Token p lives in block blocks[p / block_size] at offset p % block_size.
struct BlockTable {
  std::vector<int32_t> blocks;
  /// Cache slot of position `pos` (block_id * block_size + offset).
  int64_t slot(int pos, int block_size) const {
    return static_cast<int64_t>(blocks[pos / block_size]) * block_size + pos % block_size;
  }
};

}  // namespace pdserve::kv
