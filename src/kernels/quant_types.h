// GGUF quantised block layouts, bit-exact to ggml (ggml/src/ggml-common.h: block_q4_0,
// block_q4_1, block_q5_0, block_q8_0, block_q2_K, block_q3_K, block_q4_K, block_q5_K, block_q6_K, block_q8_K,
// block_iq4_nl, block_iq4_xs),
// and the internal activation layouts the integer dot kernels consume.
#pragma once

#include <cstdint>

namespace pdserve::kernels {

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32;  // ggml-common.h
constexpr int QK_K = 256;                                       // K-quant super-block
constexpr int K_SCALE_SIZE = 12;

/// Q4_0: x = d * (q - 8); q[j] in the low nibble of qs[j] for j < 16, high nibble for j >= 16.
struct BlockQ4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
/// Q4_1: x = d * q + m (q 0..15, same nibble order as Q4_0).
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; };
/// Q5_0: x = d * (q - 16); low 4 bits as Q4_0, bit 4 of element j is bit j of qh (LE u32).
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
/// Q5_1: x = d * q + m (q 0..31); the bits laid out as Q5_0.
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
/// Q8_0: x = d * q, q int8.
struct BlockQ8_0 { uint16_t d; int8_t qs[QK8_0]; };
/// Q4_K: 8 sub-blocks of 32; x = d*sc[j]*q - dmin*m[j], 6-bit sc/m packed in scales[12]
/// (get_scale_min_k4); qs[32*c + l]: low nibble = element 64c + l, high = 64c + 32 + l.
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
/// Q5_K: as Q4_K plus bit 4 of element 64c + l in bit 2c of qh[l], of 64c + 32 + l in bit 2c+1.
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
/// Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6-bit from ql (4) + qh (2).
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
/// Q2_K: 16 sub-blocks of 16; x = d*(scales[j] & 15)*q - dmin*(scales[j] >> 4), q 2-bit:
/// element 128h + 32s + l in bits 2s, 2s+1 of qs[32h + l].
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };
/// Q3_K: 16 sub-blocks of 16; x = d*(sc[j] - 32)*(q - 4), q = 2 low bits (qs, laid out as
/// Q2_K) + bit 2 from bit e/32 of hmask[e % 32] (element e); 6-bit sc packed in scales[12]
/// (low nibbles in bytes 0..7, high 2 bits in bytes 8..11).
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
/// IQ4_NL: x = d * kvalues_iq4nl[q], q 4-bit in Q4_0's nibble order.
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
/// IQ4_XS: 8 sub-blocks of 32; x = d * (ls_j - 32) * kvalues_iq4nl[q], ls_j 6-bit (low
/// nibble j of scales_l, high 2 bits 2j of scales_h); each sub-block's nibbles as IQ4_NL.
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
/// ggml's kvalues_iq4nl (ggml-common.h): the 16 non-linear levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kValuesIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/// Q8_K (activations of the K-quants): x = d * q, bsums[j] = sum of qs[16j .. 16j+15].
struct BlockQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

/// Activations of the 32-block types (Q4_0/Q4_1/Q5_0/Q8_0), two blocks per record so one
/// 512-bit register holds a pair. Values are ggml's x86 quantize_row_q8_0 (d = amax/127
/// rounded to f16, q = round-half-even(x * 127/amax)), stored offset by +128 as unsigned
/// bytes (the u8 operand of VPDPBUSD). d[16]: the f16 scale as float, lanes 0-7 = first
/// block, 8-15 = second; s4[16]: sum of q over each 4-value group (Q4_1's min term).
/// An odd last block is padded with q = 0 (qu = 128), d = 0, s4 = 0.
struct alignas(64) ActPairQ8 {
  uint8_t qu[64];
  float d[16];
  int32_t s4[16];
};
static_assert(sizeof(ActPairQ8) == 192);

/// Activations of the K-quants: ggml's block_q8_K (quantize_row_q8_K_ref values) in a
/// 64-byte aligned record. bsum32[j] = sum of qs over sub-block j of 32.
struct alignas(64) ActQ8K {
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
  int16_t bsum32[QK_K / 32];
  float d;
};
static_assert(sizeof(ActQ8K) == 320);

/// get_scale_min_k4 (ggml-quants.c): 6-bit scale and min of sub-block j of a Q4_K/Q5_K.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

}  // namespace pdserve::kernels
