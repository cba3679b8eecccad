#include "disagg/kv_codec.h"

#include <zstd.h>

#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace pdserve::disagg {

namespace {

uint32_t crc32c_soft(const uint8_t* p, size_t n, uint32_t crc) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli polynomial
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

std::string compress(const std::string& raw, const std::string& codec, int level) {
  if (codec == "none") return raw;
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), level);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

Status decompress(const std::string& in, const std::string& codec, size_t expect, std::string& out) {
  if (codec == "none") {
    if (in.size() != expect) return Status::InvalidArgument("payload of " + std::to_string(in.size()) + " bytes, expected " + std::to_string(expect));
    out = in;
    return Status::Ok();
  }
  if (codec != "zstd") return Status::InvalidArgument("unknown codec '" + codec + "'");
  out.resize(expect);
  const size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n)) return Status::InvalidArgument(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != expect) return Status::InvalidArgument("zstd payload of " + std::to_string(n) + " bytes, expected " + std::to_string(expect));
  return Status::Ok();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__SSE4_2__)
  uint64_t c = crc;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    c = _mm_crc32_u64(c, w);
  }
  crc = crc32c_soft(p + i, n - i, static_cast<uint32_t>(c));
#else
  crc = crc32c_soft(p, n, crc);
#endif
  return ~crc;
}

Status parse_codec(const std::string& s, std::string& codec, int& level) {
  level = 1;
  if (s == "none" || s == "zstd") {
    codec = s;
    return Status::Ok();
  }
  if (s.rfind("zstd:", 0) == 0) {
    try {
      level = std::stoi(s.substr(5));
    } catch (...) {
      level = -1;
    }
    if (level < 1 || level > 19) return Status::InvalidArgument("--kv-compression zstd level must be 1..19");
    codec = "zstd";
    return Status::Ok();
  }
  return Status::InvalidArgument("--kv-compression must be none, zstd or zstd:LEVEL");
}

CacheBlock encode_blocks(const std::string& request_id, int layer, int first_block,
                         const std::vector<const uint8_t*>& k, const std::vector<const uint8_t*>& v,
                         size_t block_bytes, const std::string& codec, int level) {
  std::string rk, rv;
  rk.reserve(k.size() * block_bytes);
  rv.reserve(v.size() * block_bytes);
  for (const uint8_t* p : k) rk.append(reinterpret_cast<const char*>(p), block_bytes);
  for (const uint8_t* p : v) rv.append(reinterpret_cast<const char*>(p), block_bytes);
  CacheBlock m;
  m.set_request_id(request_id);
  m.set_layer(layer);
  m.set_first_block(first_block);
  m.set_block_count(static_cast<int>(k.size()));
  m.set_codec(codec);
  m.set_checksum(crc32c(rv.data(), rv.size(), crc32c(rk.data(), rk.size())));
  m.set_k(compress(rk, codec, level));
  m.set_v(compress(rv, codec, level));
  return m;
}

Status check_block_range(const CacheBlock& msg, int n_layers, int num_cached_blocks, int total_blocks) {
  if (msg.layer() < 0 || msg.layer() >= n_layers || msg.first_block() < num_cached_blocks || msg.block_count() <= 0 ||
      int64_t{msg.first_block()} + msg.block_count() > total_blocks)
    return Status::InvalidArgument("block range out of bounds");
  return Status::Ok();
}

Status decode_blocks(const CacheBlock& msg, size_t block_bytes, std::string& k, std::string& v) {
  if (msg.block_count() <= 0) return Status::InvalidArgument("block_count must be positive");
  const size_t expect = static_cast<size_t>(msg.block_count()) * block_bytes;
  Status s = decompress(msg.k(), msg.codec(), expect, k);
  if (!s.ok()) return s;
  s = decompress(msg.v(), msg.codec(), expect, v);
  if (!s.ok()) return s;
  if (crc32c(v.data(), v.size(), crc32c(k.data(), k.size())) != msg.checksum()) return Status::DataLoss("checksum mismatch");
  return Status::Ok();
}

}  // namespace pdserve::disagg
