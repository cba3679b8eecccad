// AVX-512 VNNI row kernel of Q8_0 on a WeightLayout::kTiles16 matrix, in ggml's vec_dot
// order (quants.h vec_dot_scalar, the 32-blocks): per (row, token) 8 float lanes, lane g
// the exact int32 sum p_g of the 4-value group g of each block, acc[g] =
// fma(d_w*d_a, p_g, acc[g]) block by block; result hsum_float_8(acc).
// One 64-byte line of a tile is dword g of 16 rows (weight_layout.h), so one VPDPBUSD with
// the token's 4 activations of group g broadcast gives p_g of 16 rows: lane r is row r,
// and the 8 groups stay in 8 registers. The weights enter VPDPBUSD as unsigned w ^ 0x80 =
// w + 128, and each sum starts from −128 · Σ a over the group, so p_g is exact. The
// pair kernel (qgemm_avx512_legacy.cc, still used on --mmap's row layout) holds one block
// of two tokens in a register, so a decode step half-fills it; here every lane is used at
// any token count. Up to kAheadMaxTokens tokens (decode) it prefetches TilePrefetch::ahead(),
// one block's share per block: BM_GemvLayers/Q8_0 14.6 -> 16.3 GB/s on the Intel Xeon
// (2026-12-06, 1 thread). Prefetching the next tile instead had made decode 7–25 % slower
// (bench/RESULTS.md, "Q8_0 in 16-row tiles"), so larger batches prefetch nothing.
#include <algorithm>
#include <array>
#include <utility>

#include "kernels/qgemm_avx512.h"
#include "kernels/quant_types.h"

namespace pdserve::kernels::avx512 {
namespace {

/// Tokens per pass over a tile. Each has 8 accumulators, so beyond 2 tokens they spill.
/// Up to kAheadMaxTokens tokens (decode, weights from memory) 4: fewer passes over the
/// weights (B=8 batched decode ran 0.95x with 2; 4 had measured fastest at pp256 and B=32 too,
/// with a first version of the layout). A GEMM of more tokens takes 2 (kGemmTok): in registers,
/// 1.12x at pp512 and 1.11x at B=32 (Q8_0, TinyLlama shape, 2 threads, 6 paired rounds, Ice
/// Lake Xeon, 2026-12-07); 3 a pass ran 0.89x of 2 (BM_GemmKernel/Q8_0).
constexpr int kMaxTok = 4, kGemmTok = 2;

/// Packed activations of one token and block: signed values, −128 · Σ of each 4-value
/// group, d_a.
struct alignas(16) Q80Block {
  int8_t q[32];
  int32_t neg_corr[8];
  float d;
  int32_t pad[3];
};
static_assert(sizeof(Q80Block) == 80);

int64_t q80_pack_bytes(const WeightView& w, QOrder, int n_tok) {
  return int64_t{n_tok} * (w.cols / 32) * static_cast<int64_t>(sizeof(Q80Block));
}

void q80_pack(const WeightView& w, QOrder, const uint8_t* act, int64_t act_stride, int, int t_begin, int t_end, uint8_t* packed) {
  const int64_t nb = w.cols / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int t = t_begin; t < t_end; ++t) {
    const auto* src = reinterpret_cast<const ActPairQ8*>(act + t * act_stride);
    auto* out = reinterpret_cast<Q80Block*>(packed) + t * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const ActPairQ8& p = src[b / 2];
      const int h = static_cast<int>(b % 2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q),
                          _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(p.qu + 32 * h)), flip));
      for (int g = 0; g < 8; ++g) out[b].neg_corr[g] = -128 * p.s4[8 * h + g];
      out[b].d = p.d[8 * h];
      out[b].pad[0] = out[b].pad[1] = out[b].pad[2] = 0;
    }
  }
}

/// One 16-row tile (at `tile`, nb blocks of 16 · 34 bytes) against TT tokens.
template <int TT>
void q80_tile(const uint8_t* tile, const TilePrefetch& pf, const Q80Block* const* at, int64_t nb, float* y, int64_t ldy) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[TT][8];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t)
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) acc[t][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    pf.part(b);
    const uint8_t* blk = tile + 16 * sizeof(BlockQ8_0) * b;  // 16 f16 d, then 8 lines of dwords
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512i wv[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) wv[g] = _mm512_xor_si512(_mm512_loadu_si512(blk + 32 + 64 * g), flip);
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      const Q80Block& a = at[t][b];
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a.d));
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i p = _mm512_dpbusd_epi32(_mm512_set1_epi32(a.neg_corr[g]), wv[g], _mm512_set1_epi32(load_i32(a.q + 4 * g)));
        acc[t][g] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[t][g]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    // hsum_float_8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
    const __m512 r0 = _mm512_add_ps(acc[t][0], acc[t][4]), r1 = _mm512_add_ps(acc[t][1], acc[t][5]);
    const __m512 r2 = _mm512_add_ps(acc[t][2], acc[t][6]), r3 = _mm512_add_ps(acc[t][3], acc[t][7]);
    _mm512_storeu_ps(y + t * ldy, _mm512_add_ps(_mm512_add_ps(r0, r2), _mm512_add_ps(r1, r3)));
  }
}

template <int... I>
constexpr auto q80_tiles(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const uint8_t*, const TilePrefetch&, const Q80Block* const*, int64_t, float*, int64_t), sizeof...(I)>{q80_tile<I + 1>...};
}

// r0, r1: multiples of 16 (the matmul's row chunks of a kTiles16 matrix).
void q80_gemm(const WeightView& w, const uint8_t* act, int64_t, int n_tok, int64_t r0, int64_t r1, float* y, int64_t ldy, QOrder) {
  static constexpr auto tiles = q80_tiles(std::make_integer_sequence<int, kMaxTok>{});
  const int64_t nb = w.cols / 32;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const auto* packed = reinterpret_cast<const Q80Block*>(act);
  const int per_pass = n_tok > kAheadMaxTokens ? kGemmTok : kMaxTok;
  for (int t0 = 0; t0 < n_tok; t0 += per_pass) {
    const int tt = std::min(per_pass, n_tok - t0);
    const Q80Block* at[kMaxTok];
    for (int t = 0; t < tt; ++t) at[t] = packed + (t0 + t) * nb;
    for (int64_t r = r0; r < r1; r += 16)
      tiles[tt - 1](base + r * w.row_bytes, tile_prefetch<Tiles16>(w, r, nb, n_tok, /*next_tile=*/false), at, nb, y + t0 * ldy + r, ldy);
  }
}

}  // namespace

QKernel q8_0_tiles16_kernel() {
  QKernel k;
  k.gemm = q80_gemm;
  k.pack = q80_pack;
  k.pack_bytes = q80_pack_bytes;
  k.layout = WeightLayout::kTiles16;
  return k;
}

}  // namespace pdserve::kernels::avx512
