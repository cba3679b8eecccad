// The f16-cache paged attention kernels (one head, a GQA group of heads) for AVX2 + FMA +
// F16C; body in attention_simd.inc.
// Called only when the CPU has those (attention.cc dispatches).
#define ATTN_AVX512 0
#define ATTN_NS avx2
#include "kernels/attention_simd.inc"
// The Q8_0 / Q4_0 KV-cache kernels (attention_quant_simd.inc).
#include "kernels/attention_quant_simd.inc"
