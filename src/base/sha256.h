// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface: content keys of KV blocks (the KV
// store tier) and hashes of API keys (the gateway's auth file).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pdserve {

/// A 32-byte SHA-256 digest.
using Sha256Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// Appends `n` bytes at `data`.
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// The digest of everything appended; the object is spent afterwards.
  Sha256Digest digest();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

/// SHA-256 of `n` bytes at `data`.
Sha256Digest sha256(const void* data, size_t n);
inline Sha256Digest sha256(std::string_view s) { return sha256(s.data(), s.size()); }

/// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256Digest& d);

}  // namespace pdserve
