// The f16-cache paged attention kernels (one head, a GQA group of heads) for AVX-512
// F/BW/VL (+F16C, FMA; VNNI in the Q8_0 / Q4_0 kernels); body in attention_simd.inc. Called
// only when the CPU has AVX-512 with VNNI (attention.cc dispatches).
#define ATTN_AVX512 1
#define ATTN_NS avx512
#include "kernels/attention_simd.inc"
// The Q8_0 / Q4_0 KV-cache kernels (attention_quant_simd.inc).
#include "kernels/attention_quant_simd.inc"
