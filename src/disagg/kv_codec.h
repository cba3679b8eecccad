// KV block payloads on the wire: CRC32C checksums over the raw bytes and optional zstd
// compression (RFC 8878) of the K and V byte runs of a CacheBlock message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "disagg/proto/pdserve.pb.h"

namespace pdserve::disagg {

/// CRC32C (Castagnoli, as in iSCSI / RFC 3720), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// Parses "none", "zstd" or "zstd:LEVEL" (1..19, default 1).
Status parse_codec(const std::string& s, std::string& codec, int& level);

/// Builds a CacheBlock for `k.size()` consecutive blocks of one layer: concatenates the
/// blocks' K (and V) bytes, checksums them (K then V), then compresses each with `codec`.
CacheBlock encode_blocks(const std::string& request_id, int layer, int first_block,
                         const std::vector<const uint8_t*>& k, const std::vector<const uint8_t*>& v,
                         size_t block_bytes, const std::string& codec, int level);

/// InvalidArgument unless `msg` names blocks the receiver asked for: a layer in
/// [0, n_layers) and blocks [first_block, first_block + block_count) inside
/// [num_cached_blocks, total_blocks) with block_count > 0 (64-bit sums: no overflow).
Status check_block_range(const CacheBlock& msg, int n_layers, int num_cached_blocks, int total_blocks);

/// Decompresses a CacheBlock into raw K and V bytes (block_count × block_bytes each) and
/// verifies the checksum. Errors: InvalidArgument for an unknown codec or bad sizes,
/// DataLoss when the checksum does not match.
Status decode_blocks(const CacheBlock& msg, size_t block_bytes, std::string& k, std::string& v);

}  // namespace pdserve::disagg
