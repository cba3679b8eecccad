#include "kv/block_key.h"

#include <cstring>

namespace pdserve::kv {

namespace {

constexpr char kMagic[4] = {'P', 'D', 'K', 'V'};
constexpr uint32_t kVersion = 1;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
void update_field(pdserve::Sha256& h, std::string_view s) {
  std::string len;
  put_u64(len, s.size());
  h.update(len);
  h.update(s);
}
void update_tokens(pdserve::Sha256& h, const int32_t* tokens, int n) {
  std::string buf;
  buf.reserve(4 * static_cast<size_t>(n) + 4);
  put_u32(buf, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) put_u32(buf, static_cast<uint32_t>(tokens[i]));
  h.update(buf);
}

}  // namespace

BlockKey chain_namespace(const BlockKeyContext& ctx, std::string_view cache_salt) {
  pdserve::Sha256 h;
  update_field(h, "pdserve-kv-namespace-v1");
  update_field(h, ctx.model_fingerprint);
  update_field(h, ctx.layout);
  update_field(h, ctx.dtype);
  update_field(h, cache_salt);
  return h.digest();
}

BlockKey block_key(const BlockKey& parent, const BlockKey& ns, const int32_t* tokens, int n) {
  pdserve::Sha256 h;
  h.update(parent.data(), parent.size());
  h.update(ns.data(), ns.size());
  update_tokens(h, tokens, n);
  return h.digest();
}

std::vector<BlockKey> chain_keys(const BlockKey& ns, const int32_t* tokens, int num_blocks, int block_size) {
  std::vector<BlockKey> keys;
  keys.reserve(num_blocks);
  BlockKey parent{};
  for (int b = 0; b < num_blocks; ++b) {
    parent = block_key(parent, ns, tokens + static_cast<int64_t>(b) * block_size, block_size);
    keys.push_back(parent);
  }
  return keys;
}

std::string encode_stored_block(const BlockKey& key, const int32_t* tokens, int n, std::string_view payload) {
  std::string out;
  out.reserve(4 + 4 + 32 + 4 + 4 * static_cast<size_t>(n) + 8 + payload.size() + 32);
  out.append(kMagic, 4);
  put_u32(out, kVersion);
  out.append(reinterpret_cast<const char*>(key.data()), key.size());
  put_u32(out, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) put_u32(out, static_cast<uint32_t>(tokens[i]));
  put_u64(out, payload.size());
  out.append(payload);
  const pdserve::Sha256Digest sum = pdserve::sha256(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(sum.data()), sum.size());
  return out;
}

Result<std::string> decode_stored_block(std::string_view v, const BlockKey& key, const int32_t* tokens, int n,
                                        size_t payload_bytes) {
  const size_t header = 4 + 4 + 32 + 4 + 4 * static_cast<size_t>(n) + 8;
  const size_t total = header + payload_bytes + 32;
  if (v.size() != total)
    return Status::DataLoss("stored block of " + std::to_string(v.size()) + " bytes, expected " + std::to_string(total));
  const pdserve::Sha256Digest sum = pdserve::sha256(v.data(), v.size() - 32);
  if (std::memcmp(sum.data(), v.data() + v.size() - 32, 32) != 0) return Status::DataLoss("stored block checksum mismatch");
  if (std::memcmp(v.data(), kMagic, 4) != 0 || get_le(v.data() + 4, 4) != kVersion)
    return Status::DataLoss("not a stored KV block (bad magic or version)");
  if (std::memcmp(v.data() + 8, key.data(), 32) != 0) return Status::DataLoss("stored block has another key");
  if (get_le(v.data() + 40, 4) != static_cast<uint64_t>(n)) return Status::DataLoss("stored block has another token count");
  for (int i = 0; i < n; ++i)
    if (static_cast<int32_t>(get_le(v.data() + 44 + 4 * static_cast<size_t>(i), 4)) != tokens[i])
      return Status::DataLoss("stored block holds other token ids");
  if (get_le(v.data() + header - 8, 8) != payload_bytes) return Status::DataLoss("stored block has another payload size");
  return std::string(v.substr(header, payload_bytes));
}

}  // namespace pdserve::kv
