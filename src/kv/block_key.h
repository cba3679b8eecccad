// Content keys of KV blocks for the store tiers below the pool (kv/kv_store.h), and the
// format of a stored block value.
//
// A full prompt block's key chains SHA-256 (FIPS 180-4) over its parent's key, a digest
// of the cache's identity (model fingerprint, KV layout and dtype, the request's
// cache_salt) and the block's token ids — the chained block hashes of vLLM's prefix
// caching and LMCache, with SHA-256 so keys of different content never collide in
// practice. A key only indexes: a stored value carries its key, its token ids and a
// SHA-256 checksum, and a fetched block is used only when all three match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"

namespace pdserve::kv {

using BlockKey = pdserve::Sha256Digest;

/// What a key is relative to: everything besides the tokens that decides a block's K/V
/// bytes. `model_fingerprint` names the model's architecture, shape and weights; `layout` the KV
/// layout (block size, layers, heads, head_dim); `dtype` the KV dtype name.
struct BlockKeyContext {
  std::string model_fingerprint;
  std::string layout;
  std::string dtype;
};

/// Digest of (context, cache_salt): the chain's namespace (length-prefixed fields, so
/// no two different tuples share it).
BlockKey chain_namespace(const BlockKeyContext& ctx, std::string_view cache_salt);

/// The key of a block holding `tokens` [n of them] after the block with key `parent`
/// (the first block's parent is the all-zero key) in namespace `ns`
/// (chain_namespace): SHA-256(parent ‖ ns ‖ n ‖ token ids, little-endian int32).
BlockKey block_key(const BlockKey& parent, const BlockKey& ns, const int32_t* tokens, int n);

/// Keys of the first `num_blocks` blocks of `tokens` (block_size tokens each).
std::vector<BlockKey> chain_keys(const BlockKey& ns, const int32_t* tokens, int num_blocks, int block_size);

/// A stored block value: "PDKV", version 1, key, token count and ids, payload size,
/// payload, then SHA-256 of everything before it (little-endian integers).
std::string encode_stored_block(const BlockKey& key, const int32_t* tokens, int n, std::string_view payload);

/// Checks a stored value against what the caller expects (its key, its token ids, its
/// payload size) and returns its payload. Errors: DataLoss for a bad checksum, a wrong
/// key, different token ids or a truncated / malformed value; nothing else is trusted.
Result<std::string> decode_stored_block(std::string_view value, const BlockKey& key, const int32_t* tokens, int n,
                                        size_t payload_bytes);

}  // namespace pdserve::kv
