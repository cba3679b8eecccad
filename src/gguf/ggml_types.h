// ggml tensor types as stored in GGUF files, with their block geometry.
// Source: ggml/include/ggml.h (enum ggml_type) and ggml/src/ggml-common.h (block structs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pdserve::gguf {

/// Tensor element types; numeric values are the on-disk ids of the GGUF spec.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35,
};

/// Block geometry of a type: `block_elems` values are stored in `block_bytes` bytes.
struct TypeTraits {
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

/// Traits of a type id, or nullptr when the id is not a known ggml type.
const TypeTraits* type_traits(uint32_t type_id);
/// Name of a type ("Q4_K"), or "type N" for unknown ids.
std::string type_name(GgmlType t);
/// Bytes taken by a row of `n` elements (n must be a multiple of the block size).
int64_t row_bytes(GgmlType t, int64_t n);

}  // namespace pdserve::gguf
