/*
 * Large-M (prefill) GEMMs on Hopper's warpgroup MMA with the FP4 weights as the REGISTER operand
 * ("large-m.wgra.*" configs, sm_90a only): out[M, N] = scale * A[M, K] * dq(W)[N, K]^T computed as
 * out^T = dq(W) * A^T, so that the weights are wgmma's A operand, which may come from registers,
 * and the bf16/f16 activations its B operand in shared memory. Each consumer thread decodes its own
 * A fragments from the raw FP4 codes in registers: no decoded tile in shared memory, no barrier
 * between a decode and the MMAs (what limited the shared-memory-decode wgmma tiles this family
 * replaced, docs/cuda-large-m.md). Same operands, rules and
 * exactness as the mma.sync family of gemm_large_m.cu (docs/cuda-large-m.md); extra tuner
 * candidates, not the default.
 *
 * CTA: 128 weight rows x BT tokens (BT = 32 or 64 at two CTAs per SM: batched decode, 17-256 tokens;
 * 128 or 256: prefill; the grouped MoE tiles also 160 and 192), K tiles of 64, three warpgroups:
 *   - warpgroup 0, the producer (setmaxnreg down to wgra_producer_regs): per K tile, cp.async copies of
 *     the activation tile (BT rows x 64 16-bit elements, swizzled, K-major: the B operand), of the
 *     raw FP4 weight tile (128 rows x 32 bytes) and, where the scale bytes of a row and tile lie in
 *     one aligned 4-byte word, that raw word (4-byte cp.async; wgra_raw_async), into a STAGES-deep
 *     ring, addressed once per CTA (wgra_copier). Each thread's copies arrive on `full[s]` when
 *     they land (cp.async.mbarrier.arrive.noinc); kLag tiles later thread pt converts row pt's
 *     scales into 16-bit pairs (from the raw word, or with plain loads for odd K) and arrives a
 *     second time: `full[s]` (256 arrivals) says a slot is ready, `empty[s]` (256 arrivals, every
 *     consumer thread) that it was consumed;
 *   - warpgroups 1 and 2, the consumers (setmaxnreg up to wgra_consumer_regs): weight rows 0-63 and
 *     64-127 of the tile, m64nBTk16 wgmma with A from registers, FP32 accumulators
 *     (BT / 2 registers per thread).
 *
 * Shared memory of a slot (every activation tile on a 1024-byte boundary):
 *   [BT x 128 B activations][128 x 32 B FP4 weights][128 x 16 B scale pairs][128 x 4 B raw scales, padded to 1 KiB]
 *   - activations: 16-byte chunk c of row r at r * 128 + ((c ^ (r & 7)) * 16) (swz()), the layout
 *     of wgmma's 128-byte swizzle mode; descriptor sw128_desc (mode 1, stride byte offset 1024
 *     between 8-row groups); the k-th 16-element slice of the tile starts 32 k bytes in, so the
 *     descriptor advances by 2 (16-byte units) per k16 step and the hardware applies the XOR to the
 *     final address, as swz() did for the writes (sw128_desc in large_m_common.cuh);
 *   - FP4 weights: row r's 16-byte half h at r * 32 + ((h ^ ((r >> 2) & 1)) * 16) (rd_fp4_off):
 *     a warp's 16-byte loads of its 8 rows g = 0..7 (same h) then fall on 8 distinct 16-byte bank
 *     groups (rows 0-3 and 4-7 in opposite halves of a 128-byte line);
 *   - scales: row r, k16 step s (0..3) of the tile: the 16-bit pair (scale, scale) at r * 16 + 4 s,
 *     in the activations' type. NVFP4 (block 16): step s is block 4 kt + s; MXFP4 (block 32):
 *     block 2 kt + s / 2. The producer converts E4M3 -> f16 (-> bf16) with the hardware conversion
 *     (wgra_e4m3x2_pairs) and UE8M0 -> float -> bf16 (chunk_factors, pack2): exact, every E4M3 value
 *     is a bf16 and an f16 (2^-9 .. 448), every UE8M0 value a bf16 (2^-127 as a subnormal, 0xFF as
 *     NaN); MXFP4 with f16 activations is refused as in the family.
 *
 * The A fragment (PTX ISA, wgmma .m64nNk16 with A in registers, 16-bit types: per warp the
 * mma.m16n8k16 A layout): warp w of a consumer warpgroup owns rows 16 w .. 16 w + 15 of its 64;
 * lane = 4 g + q holds, for a k16 step,
 *     a0 = (row g,     k 2q, 2q+1)   a1 = (row g + 8, k 2q, 2q+1)
 *     a2 = (row g,     k 2q+8, 2q+9) a3 = (row g + 8, k 2q+8, 2q+9)
 * as 16-bit pairs, lower k in the low half. Packed FP4 stores element 2i in the low nibble of byte i
 * (codec.h, fp4_e2m1_pack2), so (k 2q, 2q+1) of step s is byte 8 s + q of the row and (k 2q+8,
 * 2q+9) byte 8 s + 4 + q: byte q of the row's 32-bit words 2 s and 2 s + 1. A thread loads its two
 * rows' 32 bytes per K tile (four 16-byte loads) and gathers byte q of words 0..3 into one word X0 =
 * [step 0 a0|a1-row, step 0 a2|a3-row, step 1 ..., step 1 ...] (three byte permutes) and of words
 * 4..7 into X1 (steps 2, 3). rd_decode_word2 turns byte i of such a word into 16-bit pair i,
 * pairs 0-1 times the scale of the first step, 2-3 times the second: exact (the lookup decode of
 * gemm_large_m_rd.cu: e2m1 bit patterns by byte permutes, sign in bit 15, one packed multiply by the
 * block scale; e2m1 * scale has at most 6 significant bits and lies in the range of the type, so the
 * product is exact; bf16/f16 packed multiplies keep subnormals; 2^127 * codes >= 2 overflow to inf
 * as in FP32; NaN scales stay NaN). The two-CTA tiles (dense and grouped) decode NVFP4 for bf16
 * activations by multiplies instead (wgra_decode_word_mul: the MMAs see e2m1 * scale * 2^-8, the
 * sums are scaled back by 2^8; wgra_cfg::MUL). tests/test_cuda_wgra.c checks both forms on the GPU
 * over all 16 codes x all 256 scale bytes.
 *
 * Pipelining. The fragments of K tile kt + 1 are decoded while the four wgmma of tile kt run:
 * two fragment buffers (16 registers each), one commit group per K tile. Per tile:
 *   wgmma.fence (the buffer and the accumulators were written since the last fence); four wgmma;
 *   commit; wgmma.wait_group 1 (tile kt - 1's group done: its fragment buffer may be overwritten and
 *   its slot released on `empty`); wait `full` of tile kt + 1; load and decode it into the other
 *   buffer.
 * Ordering of the producer's writes: its cp.async writes and its scale stores are generic-proxy
 * writes, published by the two arrivals on `full` (the copies' completion, the scale stores'
 * release); the consumers' wait acquires them. The scales and codes are read by generic loads, the
 * activation tile by wgmma through the async proxy, so each consumer thread executes
 * fence.proxy.async.shared::cta after its wait.
 *
 * Epilogue: accumulator register 4 j + 2 h + e holds (weight row 16 w + g + 8 h, token 8 j + 2 q + e)
 * (the wgmma D layout); the consumers stage the tile in the ring as [token][weight row] and then
 * write whole token rows with store_pair (alpha * multiplier applied there, bf16/f16/f32, masked at
 * M and N). A stream-K CTA (wgra_sched) stores the tiles it finishes before its last from the
 * registers, its producer already copying the next tile into the ring.
 */
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/large_m_common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/moe_grouped_tiles.cuh"
#include "backends/cuda/moe_kernels.h"
#include "backends/cuda/moe_scalars.cuh"

namespace {

constexpr int kWgraWg = 128;              /* threads per warpgroup */
constexpr int kWgraThreads = 3 * kWgraWg; /* producer + two consumers */
constexpr int kWgraRows = 128;            /* weight rows per CTA */
constexpr int kWgraBK = 64;               /* K elements per tile */
/* CTAs per SM: the wide tiles (128 and 256 tokens) need most of the register file for their
 * accumulators; the narrow ones (32 and 64 tokens: batched decode, and the grouped MoE tiles of
 * experts with few rows) run two CTAs per SM, so that one CTA's decode and waits overlap the other's
 * MMAs, and twice the weight bytes are in flight per SM. */
constexpr int wgra_ctas_per_sm(int bt) { return bt <= 64 ? 2 : 1; }
/* Registers after setmaxnreg. Their sum over the 384 threads must not exceed what the launch
 * allocates, the kernel's register count under __launch_bounds__(384, CTAs per SM), which they equal
 * (wgra_register_pool_ok checks it at the first launch):
 *   1 CTA:  128 x 88 + 256 x 208 = 64512 = 384 x 168;
 *   2 CTAs: 128 x 48 + 256 x 96  = 30720 = 384 x 80. */
constexpr int wgra_producer_regs(int bt) { return wgra_ctas_per_sm(bt) == 1 ? 88 : 48; }
constexpr int wgra_consumer_regs(int bt) { return wgra_ctas_per_sm(bt) == 1 ? 208 : 96; }
/* Tiles between a tile's copies and its publication (scale conversion) by the producer: below
 * STAGES - 1, so that a tile is published before the consumers release the slot the producer waits
 * for next. (Four, more copies in flight, made the two-CTA tiles up to 3.6% slower than two:
 * bench/results/h200/2026-12-03-wgra-lean-producer/.) */
constexpr int kLag = 2;
/* Row stride, in floats, of the epilogue's staging tile [tokens][128 weight rows] (in the ring). */
constexpr int kStageLd = kWgraRows + 4;

template <int BT, int STAGES, int FMT, int ACT>
struct wgra_cfg {
  static constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  static constexpr bool F16 = ACT == FP4_CUDA_ACT_F16;
  static constexpr int ACT_BYTES = BT * 128;
  static constexpr int W_BYTES = kWgraRows * 32;
  static constexpr int SC_BYTES = kWgraRows * 16;
  static constexpr int RAW_BYTES = 1024; /* raw E4M3 scale words, 4 bytes per weight row (512), padded */
  static constexpr int SLOT = ACT_BYTES + W_BYTES + SC_BYTES + RAW_BYTES;
  static constexpr int SMEM = 1024 /* alignment slack */ + STAGES * SLOT;
  static constexpr int D = STAGES - 1; /* K tiles whose copies are in flight ahead of the consumers */
  static constexpr int CTAS_PER_SM = wgra_ctas_per_sm(BT);
  /* the weight decode's multiply form (wgra_decode_word_mul) where it is the faster one */
  static constexpr bool MUL = NV && !F16 && CTAS_PER_SM == 2;
  static_assert(BT == 32 || BT == 64 || BT == 128 || BT == 160 || BT == 192 || BT == 256,
                "wgmma n32, n64, n128, n160, n192 or n256");
  static_assert(SLOT % 1024 == 0, "activation tiles stay 1024-byte aligned");
  static_assert(STAGES >= kLag + 2, "a tile is published before the producer waits for the slot of tile + STAGES");
  static_assert(BT * kStageLd * 4 <= STAGES * SLOT, "the epilogue's staging tile fits in the ring");
  /* 228 KiB per SM, 1 KiB of it reserved per CTA, a few hundred bytes of static barriers and tables */
  static_assert(CTAS_PER_SM == 1 || SMEM <= 110 * 1024, "two CTAs fit in an SM's shared memory");
  static_assert(ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16, "16-bit activations (W4A4: the prologue)");
};

/* ---- decode pieces (every target: the GPU self-test runs them too) ------------------------------ */

/* Two E4M3 scale bytes (low 16 bits of c) as the 16-bit pairs (s0, s0) and (s1, s1): the hardware
 * E4M3 -> f16 conversion (one instruction for both; exact, every E4M3 value is an f16 normal or
 * zero), and for bf16 the high half of the f32 (exact, E4M3 has 4 significant bits). Against the
 * float decode of chunk_factors this cut the two-CTA tiles' producer by about 30 instructions per K
 * tile (bench/results/h200/2026-12-03-wgra-lean-producer/). NaN bytes give a NaN pair. */
template <bool F16, bool MUL>
__device__ __forceinline__ uint2 wgra_e4m3x2_pairs(uint32_t c) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(c & 0xFFFFu), __NV_E4M3);
  if (F16) return make_uint2((uint32_t)h.x * 0x10001u, (uint32_t)h.y * 0x10001u);
  /* the multiply form (wgra_decode_word_mul) takes scale * 2^118: exact, at most 448 * 2^118 < 2^127 */
  const float m = MUL ? 0x1p118f : 1.0f;
  const uint32_t f0 = __float_as_uint(__half2float(__ushort_as_half(h.x)) * m);
  const uint32_t f1 = __float_as_uint(__half2float(__ushort_as_half(h.y)) * m);
  return make_uint2(__byte_perm(f0, 0u, 0x3232), __byte_perm(f1, 0u, 0x3232));
}

/* The 16-bit scale pairs of the 4 k16 steps of a K tile from the scale bits of its two 32-element
 * chunks (load_chunk_scales: NVFP4 two E4M3 bytes each, MXFP4 one UE8M0 byte). */
template <bool NV, bool F16, bool MUL>
__device__ __forceinline__ uint4 wgra_scale_pairs(uint32_t c0, uint32_t c1) {
  if constexpr (NV) {
    const uint2 p0 = wgra_e4m3x2_pairs<F16, MUL>(c0), p1 = wgra_e4m3x2_pairs<F16, MUL>(c1);
    return make_uint4(p0.x, p0.y, p1.x, p1.y);
  }
  float f0[2], f1[2];
  chunk_factors<NV>(c0, f0);
  chunk_factors<NV>(c1, f1);
  return make_uint4(pack2<F16>(f0[0], f0[0]), pack2<F16>(f0[1], f0[1]), pack2<F16>(f1[0], f1[0]),
                    pack2<F16>(f1[1], f1[1]));
}

/* Those of weight row r (of rows) in K tile kt from scales in layout with C columns (0 past the rows
 * or K, whose codes are zero-filled too). */
template <bool NV, bool F16, bool MUL>
__device__ __forceinline__ uint4 wgra_row_scales(const uint8_t *scales, int layout, int64_t C, int64_t rows, int64_t r,
                                                 int kt) {
  return wgra_scale_pairs<NV, F16, MUL>(load_chunk_scales<NV>(scales, layout, C, rows, r, kt, 0),
                                   load_chunk_scales<NV>(scales, layout, C, rows, r, kt, 1));
}

/* Byte q of each of the four words: [w0.q, w1.q, w2.q, w3.q]; sel = q | (q + 4) << 4. */
__device__ __forceinline__ uint32_t wgra_gather(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, uint32_t sel) {
  return __byte_perm(__byte_perm(w0, w1, sel), __byte_perm(w2, w3, sel), 0x5410);
}

/* The multiply form (NVFP4 with bf16 activations, the two-CTA tiles: wgra_cfg::MUL): byte i of x
 * (codes 2i, 2i + 1) -> 16-bit pair i as bf16 e2m1 * 2^-126 (the code's magnitude bits in exponent
 * and mantissa, its sign in bit 15: a subnormal for 0.5) times the pair s = scale * 2^118
 * (wgra_e4m3x2_pairs), so e2m1 * scale * 2^-8: exact (at most 6 significant bits, 2^-18 .. 10.5), and
 * wgra_mainloop multiplies the FP32 sums by 2^8. The low nibbles of x and the high ones shifted down
 * are split once; a byte permute puts code 2i at bit 0 and code 2i + 1 at bit 16 (selector nibble 8:
 * the sign of a byte whose top bit is 0, a zero byte); one multiply by 2^6 + 2^12 copies each code's
 * magnitude to bits 6-8 and its sign to bit 15 of its half (the two copies of a nibble never overlap,
 * so nothing carries), one mask keeps them. The 32-token consumer loop then takes 122 ALU-pipe
 * instructions and 49 IMADs per two K tiles against the lookup form's (rd_decode_word2) 162 and 17:
 * the 32- and 64-token tiles ran 1.01-1.07x faster with it, the 128- and 256-token tiles 1-5% slower
 * (bench/results/h200/2026-12-04-wgra-multiply-decode/). */
__device__ __forceinline__ uint32_t wgra_spread_pair(uint32_t even, uint32_t odd, uint32_t sel) {
  uint32_t z;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(z) : "r"(even), "r"(odd), "r"(sel));
  return (z * 0x1040u) & 0x81C081C0u;
}
__device__ __forceinline__ void wgra_decode_word_mul(uint32_t x, uint32_t s, uint32_t t, uint32_t r[4]) {
  /* the high nibbles shifted down by a multiply's high word: an IMAD, off the ALU pipe */
  const uint32_t ev = x & 0x0F0F0F0Fu, od = __umulhi(x & 0xF0F0F0F0u, 1u << 28);
  r[0] = rd_mul2<false>(wgra_spread_pair(ev, od, 0x8480u), s);
  r[1] = rd_mul2<false>(wgra_spread_pair(ev, od, 0x8581u), s);
  r[2] = rd_mul2<false>(wgra_spread_pair(ev, od, 0x8682u), t);
  r[3] = rd_mul2<false>(wgra_spread_pair(ev, od, 0x8783u), t);
}
template <bool MUL, bool F16>
__device__ __forceinline__ void wgra_decode_word(uint32_t x, uint32_t s, uint32_t t, uint32_t r[4], const rd_tables &tb) {
  if (MUL) wgra_decode_word_mul(x, s, t, r);
  else rd_decode_word2<F16>(x, s, t, r, tb);
}

/* A fragments of one K tile for the thread's two rows: lo/hi = row g / g + 8 as (half 0, half 1)
 * 16-byte loads, slo/shi their scale pairs; a[s][0..3] = a0..a3 of k16 step s. */
template <bool MUL, bool F16>
__device__ __forceinline__ void wgra_decode_tile(const uint4 &lo0, const uint4 &lo1, const uint4 &hi0, const uint4 &hi1,
                                                 const uint4 &slo, const uint4 &shi, uint32_t sel, uint32_t (&a)[4][4],
                                                 const rd_tables &tb = rd_const_tables<F16>()) {
  uint32_t r[4];
  wgra_decode_word<MUL, F16>(wgra_gather(lo0.x, lo0.y, lo0.z, lo0.w, sel), slo.x, slo.y, r, tb); /* row g, steps 0-1 */
  a[0][0] = r[0], a[0][2] = r[1], a[1][0] = r[2], a[1][2] = r[3];
  wgra_decode_word<MUL, F16>(wgra_gather(hi0.x, hi0.y, hi0.z, hi0.w, sel), shi.x, shi.y, r, tb); /* row g + 8 */
  a[0][1] = r[0], a[0][3] = r[1], a[1][1] = r[2], a[1][3] = r[3];
  wgra_decode_word<MUL, F16>(wgra_gather(lo1.x, lo1.y, lo1.z, lo1.w, sel), slo.z, slo.w, r, tb); /* row g, steps 2-3 */
  a[2][0] = r[0], a[2][2] = r[1], a[3][0] = r[2], a[3][2] = r[3];
  wgra_decode_word<MUL, F16>(wgra_gather(hi1.x, hi1.y, hi1.z, hi1.w, sel), shi.z, shi.w, r, tb);
  a[2][1] = r[0], a[2][3] = r[1], a[3][1] = r[2], a[3][3] = r[3];
}

#if FP4_SM90A_BODY
/* ---- wgmma with A from registers --------------------------------------------------------------- */

/* D[64 x BT] += A[64 x 16] (registers, a0..a3) * B[BT x 16]^T (K-major in shared memory);
 * scale-d 1 (accumulate), scale-a/b 1, B not transposed (K-major). */
#define FP4_WGRA_MMA(N, T, REGS, OUTS, A0, A1, A2, A3, DB, ONE)                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ONE ", 0;\nwgmma.mma_async.sync.aligned.m64n" N "k16.f32." T \
               "." T " {" REGS "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" DB ", p, 1, 1, 0;\n}\n"          \
               : OUTS(d)                                                                                    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1u))
/* Both 16-bit types of one width: the operand numbers of a0..a3, the descriptor and the predicate
 * input follow the N / 2 accumulator registers. */
#define FP4_WGRA_MMA_N(N, REGS, OUTS, A0, A1, A2, A3, DB, ONE)      \
  if (F16) FP4_WGRA_MMA(N, "f16", REGS, OUTS, A0, A1, A2, A3, DB, ONE); \
  else FP4_WGRA_MMA(N, "bf16", REGS, OUTS, A0, A1, A2, A3, DB, ONE)
template <int BT, bool F16>
__device__ __forceinline__ void wgmma_rs_k16(float *d, const uint32_t (&a)[4], uint64_t db) {
  if constexpr (BT == 32) {
    FP4_WGRA_MMA_N("32", FP4_WG_REGS_16, FP4_WG_OUTS_16, "16", "17", "18", "19", "20", "21");
  } else if constexpr (BT == 64) {
    FP4_WGRA_MMA_N("64", FP4_WG_REGS_32, FP4_WG_OUTS_32, "32", "33", "34", "35", "36", "37");
  } else if constexpr (BT == 128) {
    FP4_WGRA_MMA_N("128", FP4_WG_REGS_64, FP4_WG_OUTS_64, "64", "65", "66", "67", "68", "69");
  } else if constexpr (BT == 160) {
    FP4_WGRA_MMA_N("160", FP4_WG_REGS_80, FP4_WG_OUTS_80, "80", "81", "82", "83", "84", "85");
  } else if constexpr (BT == 192) {
    FP4_WGRA_MMA_N("192", FP4_WG_REGS_96, FP4_WG_OUTS_96, "96", "97", "98", "99", "100", "101");
  } else {
    FP4_WGRA_MMA_N("256", FP4_WG_REGS_128, FP4_WG_OUTS_128, "128", "129", "130", "131", "132", "133");
  }
}
#undef FP4_WGRA_MMA_N
#undef FP4_WGRA_MMA

/* Named barrier 2 among the 256 consumer threads. */
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 2, 256;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

/* 4-byte asynchronous copy (cp.async.ca: the 4- and 8-byte sizes exist only there); valid == false
 * writes zeros and reads nothing. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

/* Weight scales whose bytes of a row and K tile lie in one aligned 32-bit word: four scale
 * columns (in the 128x4 layout always; in the linear one when the row length C is a multiple of 4),
 * which hold one K tile's four E4M3 bytes (NVFP4) or two K tiles' two UE8M0 bytes each (MXFP4).
 * With C % 4 == 0 there is no partial last tile either. Those words are copied asynchronously with
 * the tile (raw_async); the others (odd K) are loaded by the producer with plain loads. */
__device__ __forceinline__ bool wgra_raw_async(int64_t C, const uint8_t *scales) {
  return C % 4 == 0 && !(reinterpret_cast<uintptr_t>(scales) & 3);
}

/* The 16-bit scale pairs of K tile kt from its raw word. */
template <bool NV, bool F16, bool MUL>
__device__ __forceinline__ uint4 wgra_raw_pairs(uint32_t raw, int kt) {
  if (NV) return wgra_scale_pairs<NV, F16, MUL>(raw & 0xFFFFu, raw >> 16);
  const uint32_t b = raw >> (16 * (kt & 1));
  return wgra_scale_pairs<NV, F16, MUL>(b & 0xFFu, (b >> 8) & 0xFFu);
}

/* Producer thread pt's copies, addressed once per CTA: activation rows pt / 8 + 16 j (j < BT / 16)
 * at 16-byte chunk pt % 8 (so the swizzled destination, chunk (pt % 8) ^ (row % 8), is the same for
 * every j), FP4 weight rows pt / 2 and 64 + pt / 2 at 16-byte half pt % 2, and weight row pt's raw
 * scale word. The loads walk K with one 64-bit add per row and tile. (Recomputing every address
 * from the tile indices, with its bounds checks and 64-bit products, made the producer warp issue
 * about 560 instructions per K tile and starved the consumers: 220 TFLOP/s at 128x256.) Tiles at
 * the M, N or K edge take the bounds-checked copies of large_m_common.cuh. */
template <class G, int BT>
struct wgra_copier {
  const uint16_t *a;   /* activation row m0 + pt / 8, element 8 (pt % 8) */
  const uint8_t *w;    /* weight row n0 + pt / 2, byte 16 (pt % 2) */
  const uint8_t *sc;   /* row pt's raw scale word of K tile 0 (raw_async) */
  int64_t a_step;      /* 16 rows of A, in elements */
  int64_t w_step;      /* 64 rows of W, in bytes */
  int64_t sc_step;     /* from one raw word to the next (4 scale columns) */
  int64_t m0, n0;      /* the CTA's first token and weight row */
  uint32_t a_dst, w_dst0, w_dst1;
  bool inside;         /* every row of the CTA's tile lies inside A and W */
  bool sc_ok;          /* row pt lies inside W */
  bool raw_async;      /* the scale words travel with the tile (wgra_raw_async) */

  __device__ __forceinline__ wgra_copier(const lm_params &p, int64_t m0_, int64_t n0_, int pt) : m0(m0_), n0(n0_) {
    const int ar = pt >> 3, ac = pt & 7, wr = pt >> 1, wh = pt & 1;
    raw_async = wgra_raw_async(p.C, p.b_scales);
    inside = m0 + BT <= p.m && n0 + kWgraRows <= p.n;
    a = static_cast<const uint16_t *>(p.a) + (m0 + ar) * p.lda + 8 * ac;
    a_step = 16 * p.lda;
    w = p.b + (n0 + wr) * (p.k >> 1) + 16 * wh;
    w_step = 64 * (p.k >> 1);
    a_dst = (uint32_t)swz(ar, ac);
    w_dst0 = (uint32_t)rd_fp4_off(wr, wh);
    w_dst1 = (uint32_t)rd_fp4_off(wr + 64, wh);
    sc_ok = n0 + pt < p.n;
    const int64_t o0 = sc_ok ? fp4_layout_offset(p.b_layout, p.C, n0 + pt, 0) : 0;
    sc = p.b_scales + o0;
    sc_step = sc_ok ? fp4_layout_offset(p.b_layout, p.C, n0 + pt, 4) - o0 : 0;
  }

  /* The copies of K tile kt into slot sl. */
  __device__ __forceinline__ void load(const lm_params &p, uint8_t *sl, int kt, int pt) const {
    const int64_t k0 = (int64_t)kt * kWgraBK;
    if (inside && k0 + kWgraBK <= p.k) {
      const uint16_t *src = a + k0;
#pragma unroll
      for (int j = 0; j < BT / 16; j++, src += a_step) cp_async16(sl + a_dst + j * 16 * 128, src, true);
      const uint8_t *ws = w + (k0 >> 1);
      cp_async16(sl + G::ACT_BYTES + w_dst0, ws, true);
      cp_async16(sl + G::ACT_BYTES + w_dst1, ws + w_step, true);
    } else {
      copy_16bit_rows<BT, kWgraWg>(sl, static_cast<const uint16_t *>(p.a), p.lda, p.m, m0, k0, p.k, pt);
      rd_copy_fp4<kWgraRows, kWgraWg>(sl + G::ACT_BYTES, p.b, p.n, n0, k0, p.k, pt);
    }
    if (raw_async)
      cp_async4(sl + G::ACT_BYTES + G::W_BYTES + G::SC_BYTES + pt * 4,
                sc + (G::NV ? (int64_t)kt : (int64_t)(kt >> 1)) * sc_step, sc_ok);
  }

  /* Row pt's scale pairs of K tile kt with plain loads (when the words do not travel with the tile). */
  __device__ __forceinline__ uint4 loaded_pairs(const lm_params &p, int kt, int pt) const {
    return wgra_row_scales<G::NV, G::F16, G::MUL>(p.b_scales, p.b_layout, p.C, p.n, n0 + pt, kt);
  }
};

/* The copies of a grouped (MoE prefill) tile: as wgra_copier, except that activation row r comes
 * through the CTA's row table (its byte offset in A, -1 past the expert's rows: zero-filled) and the
 * weights and scales are expert e's. The thread's BT / 16 gathered row addresses are read from the
 * table once and kept in registers (NULL: a padding row), so a K tile costs one add per row as in
 * the dense copier. (Reading the table in every K tile made the 256-token tile 1.5x slower:
 * DeepSeek-R1 at B = 4096, 17.1 -> 11.4 ms; bench/results/h200/2026-11-30-moe-prefill/.) */
template <class G, int BT>
struct wgra_gather_copier {
  const uint8_t *arow[BT / 16]; /* gathered activation rows pt / 8 + 16 j, plus chunk pt % 8; NULL past the rows */
  const uint8_t *w;        /* expert e's weight row n0 + pt / 2, byte 16 (pt % 2) */
  const uint8_t *scales;   /* expert e's scales */
  const uint8_t *sc;       /* row pt's raw scale word of K tile 0 (raw_async) */
  int64_t w_step, sc_step, n0;
  uint32_t a_dst, w_dst0, w_dst1;
  bool n_inside, sc_ok, raw_async;

  __device__ __forceinline__ wgra_gather_copier(const glm_params &p, int64_t e, int64_t n0_, const int64_t *rows,
                                                int pt)
      : n0(n0_) {
    const int ar = pt >> 3, ac = pt & 7, wr = pt >> 1, wh = pt & 1;
#pragma unroll
    for (int j = 0; j < BT / 16; j++) {
      const int64_t off = rows[ar + 16 * j];
      arow[j] = off >= 0 ? static_cast<const uint8_t *>(p.a) + off + 16 * ac : nullptr;
    }
    a_dst = (uint32_t)swz(ar, ac);
    w = p.w + e * p.w_expert_bytes + (n0 + wr) * (p.k >> 1) + 16 * wh;
    w_step = 64 * (p.k >> 1);
    w_dst0 = (uint32_t)rd_fp4_off(wr, wh);
    w_dst1 = (uint32_t)rd_fp4_off(wr + 64, wh);
    n_inside = n0 + kWgraRows <= p.n;
    scales = p.w_scales + e * p.w_scale_stride;
    raw_async = wgra_raw_async(p.C, scales);
    sc_ok = n0 + pt < p.n;
    const int64_t o0 = sc_ok ? fp4_layout_offset(p.w_layout, p.C, n0 + pt, 0) : 0;
    sc = scales + o0;
    sc_step = sc_ok ? fp4_layout_offset(p.w_layout, p.C, n0 + pt, 4) - o0 : 0;
  }

  __device__ __forceinline__ void load(const glm_params &p, uint8_t *sl, int kt, int pt) const {
    const int64_t k0 = (int64_t)kt * kWgraBK;
    const bool ka = k0 + 8 * (pt & 7) < p.k, kw = k0 + 32 * (pt & 1) < p.k;
#pragma unroll
    for (int j = 0; j < BT / 16; j++) {
      const bool ok = ka && arow[j];
      cp_async16(sl + a_dst + j * 16 * 128, ok ? arow[j] + 2 * k0 : p.a, ok);
    }
    const uint8_t *ws = w + (k0 >> 1);
    const bool ok0 = kw && (n_inside || n0 + (pt >> 1) < p.n), ok1 = kw && (n_inside || n0 + 64 + (pt >> 1) < p.n);
    cp_async16(sl + G::ACT_BYTES + w_dst0, ok0 ? ws : p.w, ok0);
    cp_async16(sl + G::ACT_BYTES + w_dst1, ok1 ? ws + w_step : p.w, ok1);
    if (raw_async)
      cp_async4(sl + G::ACT_BYTES + G::W_BYTES + G::SC_BYTES + pt * 4,
                sc + (G::NV ? (int64_t)kt : (int64_t)(kt >> 1)) * sc_step, sc_ok);
  }

  __device__ __forceinline__ uint4 loaded_pairs(const glm_params &p, int kt, int pt) const {
    return wgra_row_scales<G::NV, G::F16, G::MUL>(scales, p.w_layout, p.C, p.n, n0 + pt, kt);
  }
};

/* The copies of the two-CTA dense tiles (32 and 64 tokens: batched decode, where M is often below
 * the tile, so that most tiles are M edges) and of every edge tile: as wgra_gather_copier, with the
 * thread's BT / 16 activation row addresses computed once from the tile's first token (NULL past
 * M: zero-filled), so that an edge tile costs what an inside one does and the producer fits the 48
 * registers it keeps at two CTAs per SM (wgra_copier's bounds-checked edge copies needed more than
 * 64). */
template <class G, int BT>
struct wgra_rows_copier {
  const uint8_t *arow[BT / 16]; /* activation rows m0 + pt / 8 + 16 j, plus chunk pt % 8; NULL past M */
  const uint8_t *w;             /* weight row n0 + pt / 2, byte 16 (pt % 2) */
  const uint8_t *sc;            /* row pt's raw scale word of K tile 0 (raw_async) */
  int64_t w_step, sc_step, n0;
  uint32_t a_dst, w_dst0, w_dst1;
  bool n_inside, sc_ok, raw_async;

  __device__ __forceinline__ wgra_rows_copier(const lm_params &p, int64_t m0, int64_t n0_, int pt) : n0(n0_) {
    const int ar = pt >> 3, ac = pt & 7, wr = pt >> 1, wh = pt & 1;
#pragma unroll
    for (int j = 0; j < BT / 16; j++) {
      const int64_t r = m0 + ar + 16 * j;
      arow[j] = r < p.m ? reinterpret_cast<const uint8_t *>(static_cast<const uint16_t *>(p.a) + r * p.lda + 8 * ac)
                        : nullptr;
    }
    a_dst = (uint32_t)swz(ar, ac);
    w = p.b + (n0 + wr) * (p.k >> 1) + 16 * wh;
    w_step = 64 * (p.k >> 1);
    w_dst0 = (uint32_t)rd_fp4_off(wr, wh);
    w_dst1 = (uint32_t)rd_fp4_off(wr + 64, wh);
    n_inside = n0 + kWgraRows <= p.n;
    raw_async = wgra_raw_async(p.C, p.b_scales);
    sc_ok = n0 + pt < p.n;
    const int64_t o0 = sc_ok ? fp4_layout_offset(p.b_layout, p.C, n0 + pt, 0) : 0;
    sc = p.b_scales + o0;
    sc_step = sc_ok ? fp4_layout_offset(p.b_layout, p.C, n0 + pt, 4) - o0 : 0;
  }

  __device__ __forceinline__ void load(const lm_params &p, uint8_t *sl, int kt, int pt) const {
    const int64_t k0 = (int64_t)kt * kWgraBK;
    const bool ka = k0 + 8 * (pt & 7) < p.k, kw = k0 + 32 * (pt & 1) < p.k;
#pragma unroll
    for (int j = 0; j < BT / 16; j++) {
      const bool ok = ka && arow[j];
      cp_async16(sl + a_dst + j * 16 * 128, ok ? arow[j] + 2 * k0 : p.b, ok);
    }
    const uint8_t *ws = w + (k0 >> 1);
    const bool ok0 = kw && (n_inside || n0 + (pt >> 1) < p.n), ok1 = kw && (n_inside || n0 + 64 + (pt >> 1) < p.n);
    cp_async16(sl + G::ACT_BYTES + w_dst0, ok0 ? ws : p.b, ok0);
    cp_async16(sl + G::ACT_BYTES + w_dst1, ok1 ? ws + w_step : p.b, ok1);
    if (raw_async)
      cp_async4(sl + G::ACT_BYTES + G::W_BYTES + G::SC_BYTES + pt * 4,
                sc + (G::NV ? (int64_t)kt : (int64_t)(kt >> 1)) * sc_step, sc_ok);
  }

  __device__ __forceinline__ uint4 loaded_pairs(const lm_params &p, int kt, int pt) const {
    return wgra_row_scales<G::NV, G::F16, G::MUL>(p.b_scales, p.b_layout, p.C, p.n, n0 + pt, kt);
  }
};

/* The copies of the two-CTA tiles when every K tile is whole and the scale words travel with the
 * tile (K a multiple of 64, wgra_raw_async): as wgra_rows_copier, but activation rows past M and
 * weight rows past N read the last row (valid memory) instead of a zero fill. Their results are
 * never stored: an MMA's output (weight row, token) depends on that row and that token only, and
 * the epilogue stores rows below N and tokens below M. So a K tile is five copies with no
 * predicate, each one add from the thread's row addresses. (With wgra_rows_copier's predicated
 * copies and the float scale decode the producer issued about 165 instructions per K tile, 31% of
 * the 32-token tile's instructions, and the consumers waited on `full`; with this copier,
 * wgra_e4m3x2_pairs and the ring slots carried in wgra_produce, about 85: 1.08-1.15x faster at
 * M = 17-64, bench/results/h200/2026-12-03-wgra-lean-producer/.) */
template <class G, int BT>
struct wgra_lean_copier {
  const uint8_t *arow[BT / 16]; /* activation rows min(m0 + pt / 8 + 16 j, M - 1), plus chunk pt % 8 */
  const uint8_t *w0, *w1;       /* weight rows min(n0 + pt / 2, N - 1) and min(n0 + 64 + pt / 2, N - 1), byte 16 (pt % 2) */
  const uint8_t *sc;            /* row min(n0 + pt, N - 1)'s raw scale word of K tile 0 */
  int64_t sc_step, n0;
  uint32_t a_dst, w_dst0, w_dst1;
  static constexpr bool raw_async = true;

  __device__ __forceinline__ wgra_lean_copier(const lm_params &p, int64_t m0, int64_t n0_, int pt) : n0(n0_) {
    const int ar = pt >> 3, ac = pt & 7, wr = pt >> 1, wh = pt & 1;
#pragma unroll
    for (int j = 0; j < BT / 16; j++) {
      const int64_t r = min(m0 + ar + 16 * j, p.m - 1);
      arow[j] = reinterpret_cast<const uint8_t *>(static_cast<const uint16_t *>(p.a) + r * p.lda + 8 * ac);
    }
    a_dst = (uint32_t)swz(ar, ac);
    w0 = p.b + min(n0 + wr, p.n - 1) * (p.k >> 1) + 16 * wh;
    w1 = p.b + min(n0 + 64 + wr, p.n - 1) * (p.k >> 1) + 16 * wh;
    w_dst0 = (uint32_t)rd_fp4_off(wr, wh);
    w_dst1 = (uint32_t)rd_fp4_off(wr + 64, wh);
    const int64_t sr = min(n0 + pt, p.n - 1);
    const int64_t o0 = fp4_layout_offset(p.b_layout, p.C, sr, 0);
    sc = p.b_scales + o0;
    sc_step = fp4_layout_offset(p.b_layout, p.C, sr, 4) - o0;
  }

  __device__ __forceinline__ void load(const lm_params &, uint8_t *sl, int kt, int pt) const {
    const uint32_t ka = (uint32_t)kt * (2u * kWgraBK), kw = (uint32_t)kt * (kWgraBK / 2);
#pragma unroll
    for (int j = 0; j < BT / 16; j++) cp_async16(sl + a_dst + j * 16 * 128, arow[j] + ka, true);
    cp_async16(sl + G::ACT_BYTES + w_dst0, w0 + kw, true);
    cp_async16(sl + G::ACT_BYTES + w_dst1, w1 + kw, true);
    cp_async4(sl + G::ACT_BYTES + G::W_BYTES + G::SC_BYTES + pt * 4,
              sc + (G::NV ? (int64_t)kt : (int64_t)(kt >> 1)) * sc_step, true);
  }

  __device__ __forceinline__ uint4 loaded_pairs(const lm_params &p, int kt, int pt) const {
    return wgra_row_scales<G::NV, G::F16, G::MUL>(p.b_scales, p.b_layout, p.C, p.n, n0 + pt, kt);
  }
};

/* Consumer: waits for K tile kt, loads this thread's raw weight words and scale pairs and decodes
 * them into a. */
template <class G>
__device__ __forceinline__ void wgra_fetch(uint8_t *ring, uint64_t *full, int kt, int wr, uint32_t sel,
                                           uint32_t (&a)[4][4], const rd_tables &tb) {
  constexpr int S = G::D + 1;
  const unsigned pos = (unsigned)kt; /* ring positions count up from 0: unsigned, no sign fix-ups */
  mbar_wait(&full[pos % S], (pos / S) & 1);
  fence_proxy_async(); /* the activation tile's cp.async writes, seen by this thread, reach wgmma's async-proxy reads */
  const uint8_t *sl = ring + (pos % S) * G::SLOT;
  const uint8_t *wt = sl + G::ACT_BYTES, *sc = wt + G::W_BYTES;
  const uint4 lo0 = *reinterpret_cast<const uint4 *>(wt + rd_fp4_off(wr, 0));
  const uint4 lo1 = *reinterpret_cast<const uint4 *>(wt + rd_fp4_off(wr, 1));
  const uint4 hi0 = *reinterpret_cast<const uint4 *>(wt + rd_fp4_off(wr + 8, 0));
  const uint4 hi1 = *reinterpret_cast<const uint4 *>(wt + rd_fp4_off(wr + 8, 1));
  const uint4 slo = *reinterpret_cast<const uint4 *>(sc + wr * 16);
  const uint4 shi = *reinterpret_cast<const uint4 *>(sc + (wr + 8) * 16);
  wgra_decode_tile<G::MUL, G::F16>(lo0, lo1, hi0, hi1, slo, shi, sel, a, tb);
}

/* Consumer, one K tile: the MMAs of tile kt from cur, then (tile kt - 1's MMAs done) its slot
 * released and tile kt + 1 decoded into nxt while these MMAs run. g0: the CTA's ring position of
 * tile 0 (the tiles of its earlier output tiles, stream-K). */
template <class G, int BT>
__device__ __forceinline__ void wgra_step(uint8_t *ring, uint64_t *full, uint64_t *empty, int g0, int kt, int kts,
                                          int wr, uint32_t sel, float *acc, const uint32_t (&cur)[4][4],
                                          uint32_t (&nxt)[4][4], const rd_tables &tb) {
  constexpr int S = G::D + 1;
  const uint64_t db = sw128_desc(ring + ((unsigned)(g0 + kt) % S) * G::SLOT);
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; s++) wgmma_rs_k16<BT, G::F16>(acc, cur[s], db + 2 * s);
  wgmma_commit();
  wgmma_wait<1>();
  if (kt > 0) mbar_arrive(&empty[(unsigned)(g0 + kt - 1) % S]);
  if (kt + 1 < kts) wgra_fetch<G>(ring, full, g0 + kt + 1, wr, sel, nxt, tb);
}

/* The producer's place in its ring, carried across the output tiles a CTA walks (stream-K): the
 * slot of the next tile it copies and of the next it publishes, the parity of the release it waits
 * for before reusing slot js, and how many tiles it has copied. */
struct wgra_producer_ring {
  int js = 0, ts = 0, issued = 0;
  uint32_t release_parity = 1;
};

/* The producer warpgroup's loop over K tiles kb .. kb + kts - 1 of one output tile (thread pt; the
 * copier addresses the copies: wgra_copier for dense operands, wgra_gather_copier for gathered
 * expert rows). Iteration j publishes tile j - kLag and then issues the copies of tile j. Its copies
 * signal `full` themselves when they land (cp.async.mbarrier.arrive.noinc), so the producer never
 * waits for its own copies on the consumers' behalf; it converts a tile's scales kLag tiles later
 * (by then the copies have usually landed), stores the pairs and arrives a second time. So the only
 * waits that can hold the producer are for free slots, and the consumers find each tile published
 * STAGES - 1 - kLag tiles before they need it. (Waiting for tile j's copies before issuing tile
 * j + STAGES - 1 made producer and consumers take turns, one tile per round trip: 190 TFLOP/s at
 * 128x256, M = 4096.) The last kLag tiles are published before the function returns, so the next
 * output tile's copies start from a drained lag. */
template <class G, int STAGES, class P, class Copier>
__device__ __forceinline__ void wgra_produce(const P &p, const Copier &copier, uint8_t *ring, uint64_t *full,
                                             uint64_t *empty, int kb, int kts, int pt, wgra_producer_ring &r) {
#pragma unroll 1
  for (int j = 0; j < kts + kLag; j++) {
    if (j >= kLag) {
      uint8_t *sl = ring + r.ts * G::SLOT;
      uint4 *pairs = reinterpret_cast<uint4 *>(sl + G::ACT_BYTES + G::W_BYTES + pt * 16);
      if (copier.raw_async) {
        cp_async_wait<kLag - 1>(); /* this thread's copies of tile t (raw word included) have landed */
        const uint32_t raw = *reinterpret_cast<const uint32_t *>(sl + G::ACT_BYTES + G::W_BYTES + G::SC_BYTES + pt * 4);
        *pairs = wgra_raw_pairs<G::NV, G::F16, G::MUL>(raw, kb + j - kLag);
      } else {
        *pairs = copier.loaded_pairs(p, kb + j - kLag, pt);
      }
      mbar_arrive(&full[r.ts]); /* release: the pairs are visible to the consumers' loads */
      if (++r.ts == STAGES) r.ts = 0;
    }
    if (j < kts) {
      /* slot js last held the tile copied STAGES tiles ago: wait until both consumers released it */
      if (r.issued >= STAGES) mbar_wait(&empty[r.js], r.release_parity);
      copier.load(p, ring + r.js * G::SLOT, kb + j, pt);
      cp_async_arrive_noinc(&full[r.js]);
      r.issued++;
      if (++r.js == STAGES) r.js = 0, r.release_parity ^= 1u;
    }
    cp_async_commit(); /* one group per iteration, empty past the last tile: wait_group counts stay uniform */
  }
}

/* The consumer warpgroups: warpgroup cw (1 or 2) computes weight rows 64 (cw - 1) .. + 63 of an
 * output tile over kts K tiles, whose first lies at ring position g0, into acc (register 4j + 2h + e:
 * weight row wr + 8h, token 8j + 2q + e, the wgmma D layout), and releases the last tile's slot. */
template <class G, int BT>
__device__ __forceinline__ void wgra_mainloop(uint8_t *ring, uint64_t *full, uint64_t *empty, int g0, int kts, int wr,
                                              uint32_t sel, const rd_tables &tb, float (&acc)[BT / 2]) {
  constexpr int S = G::D + 1;
#pragma unroll
  for (int i = 0; i < BT / 2; i++) acc[i] = 0.0f;
  uint32_t fa[4][4], fb[4][4];
  wgra_fetch<G>(ring, full, g0, wr, sel, fa, tb);
#pragma unroll 1
  for (int kt = 0; kt < kts; kt += 2) {
    wgra_step<G, BT>(ring, full, empty, g0, kt, kts, wr, sel, acc, fa, fb, tb);
    if (kt + 1 < kts) wgra_step<G, BT>(ring, full, empty, g0, kt + 1, kts, wr, sel, acc, fb, fa, tb);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < BT / 2; i++) fence_acc(acc[i]);
  if constexpr (G::MUL) {
#pragma unroll
    for (int i = 0; i < BT / 2; i++) acc[i] *= 0x1p8f; /* the multiply form's sums are 2^-8 times the product's: exact */
  }
  mbar_arrive(&empty[(unsigned)(g0 + kts - 1) % S]); /* the producer may be copying the CTA's next output tile */
}

/* Both consumers stage the FP32 tile in the ring as [token][weight row] (rows kStageLd floats apart)
 * and return it; only once the producer has copied its last tile (the CTA's last output tile).
 * Register 4j + 2h + e goes to stage[token][row]; the padding makes a warp's 32 stores of one
 * register hit 32 banks. Writing the output from there in a loop over token rows keeps the code
 * short: the unrolled per-register stores it replaces took about 230 KB of SASS, and the
 * instruction fetches of that one-time code took a third of the kernel's warp time at M = 4096. */
template <int BT>
__device__ __forceinline__ const float *wgra_stage(uint8_t *ring, const float (&acc)[BT / 2], int wr, int q) {
  consumer_sync(); /* both consumers are done with the ring */
  float *stage = reinterpret_cast<float *>(ring);
#pragma unroll
  for (int j = 0; j < BT / 8; j++)
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int e = 0; e < 2; e++) stage[(8 * j + 2 * q + e) * kStageLd + wr + 8 * h] = acc[4 * j + 2 * h + e];
  consumer_sync();
  return stage;
}

/* The consumers' tile straight from the registers, where the ring may hold the CTA's next output
 * tile: lanes g and g ^ 1 (weight rows wr and wr ^ 1) swap one value per register pair so that each
 * stores two adjacent outputs of one token row (even g token 2q, odd g token 2q + 1). */
template <int BT>
__device__ __forceinline__ void wgra_store_registers(const lm_params &p, const float (&acc)[BT / 2], int64_t m0,
                                                     int64_t n0, int wr, int g, int q) {
  const float scale = lm_out_scale(p);
  const bool odd = g & 1;
#pragma unroll
  for (int j = 0; j < BT / 8; j++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      const float got = __shfl_xor_sync(0xFFFFFFFFu, odd ? v0 : v1, 4);
      store_pair(p, scale, m0 + 8 * j + 2 * q + odd, n0 + wr + 8 * h - odd, odd ? got : v0, odd ? v1 : got);
    }
}
#endif

/* The CTAs' work (fp4_dense_wgra_ctas): the grid's `tiles` output tiles of `kall` K tiles each, in
 * tile-major order. With `ctas` == `tiles` CTA c computes tile c. Otherwise (stream-K, where one
 * tile per CTA would leave CTA slots idle in the last wave) CTA c walks iterations
 * [c I / ctas, (c + 1) I / ctas) of the I = tiles x kall (tile, K tile) pairs: the end of one
 * tile, whole tiles, the start of another; with `ctas` a multiple of `tiles` (a split) the CTAs of a
 * tile walk equal parts of it. A whole tile is stored from the CTA; a part writes its FP32 partial
 * (the accumulator layout) to ws, slot c for the CTA's first part and ctas + c for its last, and the
 * last CTA to arrive on the tile's counter adds the parts in K order (so the result does not depend
 * on which finishes first) and stores the tile. */
struct wgra_sched {
  int64_t tiles;
  int kall;
  int ctas;
  float *ws;          /* [2 ctas][BT / 8][256 consumer threads] float4 partials (a split: [ctas]) */
  unsigned *counters; /* per output tile, zero before the launch (unused with one tile per CTA) */
};

#if FP4_SM90A_BODY
/* First (tile, K tile) iteration of CTA c, and the CTA whose range holds iteration x
 * (config/dense_config.h, whose test checks that the parts cover every tile once). */
__device__ __forceinline__ int64_t wgra_begin(const wgra_sched &sk, int64_t c) {
  return fp4_dense_wgra_begin(sk.tiles, sk.kall, sk.ctas, c);
}
__device__ __forceinline__ int64_t wgra_cta_of(const wgra_sched &sk, int64_t x) {
  return fp4_dense_wgra_cta_of(sk.tiles, sk.kall, sk.ctas, x);
}

/* The producer's copies of K tiles kb .. kb + kts - 1 of output tile `tile`: wgra_copier for the
 * one-CTA tiles inside A and W; the row-address copier for the two-CTA tiles (register budget) and
 * for edge tiles, which wgra_copier's bounds-checked copies made twice as slow (the 128-token tile
 * at M = 96: 613 against 316 us at M = 128, 57344 x 8192; bench/results/h200/2026-12-02-batched-decode/). */
template <class G, int BT, int STAGES>
__device__ __forceinline__ void wgra_produce_tile(const lm_params &p, uint8_t *ring, uint64_t *full, uint64_t *empty,
                                                  int64_t tile, int kb, int kts, int pt, wgra_producer_ring &r) {
  int64_t m0, n0; /* tokens m0 .., weight rows n0 .. */
  lm_tile_origin(p, BT, kWgraRows, tile, &m0, &n0);
  if (wgra_ctas_per_sm(BT) == 2 && p.k % kWgraBK == 0 && wgra_raw_async(p.C, p.b_scales)) {
    const wgra_lean_copier<G, BT> copier(p, m0, n0, pt);
    wgra_produce<G, STAGES>(p, copier, ring, full, empty, kb, kts, pt, r);
  } else if (wgra_ctas_per_sm(BT) == 2 || m0 + BT > p.m || n0 + kWgraRows > p.n) {
    const wgra_rows_copier<G, BT> copier(p, m0, n0, pt);
    wgra_produce<G, STAGES>(p, copier, ring, full, empty, kb, kts, pt, r);
  } else {
    const wgra_copier<G, BT> copier(p, m0, n0, pt);
    wgra_produce<G, STAGES>(p, copier, ring, full, empty, kb, kts, pt, r);
  }
}

/* Both consumers store the tile through the staging tile (wgra_stage), whole token rows per warp. */
template <int BT>
__device__ __forceinline__ void wgra_store_staged(const lm_params &p, uint8_t *ring, const float (&acc)[BT / 2],
                                                  int64_t tile, int wr, int lane, int cwarp) {
  int64_t m0, n0;
  lm_tile_origin(p, BT, kWgraRows, tile, &m0, &n0);
  const float *stage = wgra_stage<BT>(ring, acc, wr, lane & 3);
  const float scale = lm_out_scale(p);
#pragma unroll 1
  for (int t = cwarp; t < BT; t += 8) {
    const float4 v = *reinterpret_cast<const float4 *>(stage + t * kStageLd + 4 * lane);
    store_pair(p, scale, m0 + t, n0 + 4 * lane, v.x, v.y);
    store_pair(p, scale, m0 + t, n0 + 4 * lane + 2, v.z, v.w);
  }
}
#endif

/* The grids (wgra_sched), each its own instantiation: one whole tile per CTA; one part of a tile per
 * CTA (a split, or a stream-K grid whose CTAs divide the tiles evenly), whose consumers also publish
 * and add the parts; stream-K, whose CTAs may walk several parts. The first two keep the K loop whose
 * ring position starts at 0: with the position carried from part to part the 32-token consumer's
 * loop takes 333 instead of 308 SASS instructions per two K tiles, and splits on the stream-K
 * instantiation ran 2-5% slower (bench/results/h200/2026-12-03-wgra-split-one-part/). The whole-tile
 * kernel leaves out the part code: with it, the 256-token tile ran 1.5% slower on 57344 x 8192. */
enum { kWgraWhole = 0, kWgraPart = 1, kWgraStream = 2 };
template <int BT, int STAGES, int FMT, int ACT, int MODE>
__global__ void __launch_bounds__(kWgraThreads, wgra_ctas_per_sm(BT)) gemm_wgra_kernel(lm_params p, wgra_sched sk) {
#if FP4_SM90A_BODY
  using G = wgra_cfg<BT, STAGES, FMT, ACT>;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  __shared__ unsigned last_part;
  __shared__ uint32_t tables[kRdTableWords]; /* the decode's lookup words (rd_lane_tables) */
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t *ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const int wg = threadIdx.x / kWgraWg;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], 2 * kWgraWg); /* per producer thread: its copies landed, its scale pairs stored */
      mbar_init(&empty[s], 2 * kWgraWg);
    }
  }
  if (threadIdx.x < 32) rd_store_tables(tables, threadIdx.x);
  __syncthreads(); /* barriers initialized before anyone arrives or waits */
  fp4_pdl_wait();  /* nothing is read before the producers of A, W and the scales have finished */

  /* this CTA's iterations begin .. begin + rem0 - 1 of the tile-major (tile, K tile) sequence */
  constexpr bool whole = MODE == kWgraWhole;
  const int64_t begin = whole ? (int64_t)blockIdx.x * sk.kall : wgra_begin(sk, blockIdx.x);
  const int rem0 = whole ? sk.kall : (int)(wgra_begin(sk, blockIdx.x + 1) - begin);

  if (wg == 0) {
    /* ---- producer: thread pt also converts the scales of weight row pt ---- */
    setmaxnreg_dec<wgra_producer_regs(BT)>();
    const int pt = threadIdx.x;
    wgra_producer_ring ring_pos;
    if constexpr (MODE != kWgraStream) {
      const int64_t tile = begin / sk.kall;
      wgra_produce_tile<G, BT, STAGES>(p, ring, full, empty, tile, (int)(begin - tile * sk.kall), rem0, pt, ring_pos);
    } else {
      int64_t tile = begin / sk.kall;
      int kb = (int)(begin - tile * sk.kall);
#pragma unroll 1
      for (int rem = rem0; rem > 0; tile++, kb = 0) {
        const int kts = min(sk.kall - kb, rem);
        wgra_produce_tile<G, BT, STAGES>(p, ring, full, empty, tile, kb, kts, pt, ring_pos);
        rem -= kts;
      }
    }
    cp_async_wait<0>();
    fp4_pdl_launch_dependents();
    return;
  }
  /* ---- consumers: per output tile (part) the K loop, then its store or its partial ---- */
  setmaxnreg_inc<wgra_consumer_regs(BT)>();
  const int ct = threadIdx.x - kWgraWg, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int cwarp = ct >> 5;
  const int wr = cwarp * 16 + g; /* this thread's fragment rows: wr and wr + 8 */
  const uint32_t sel = (uint32_t)(q | ((q + 4) << 4));
  const rd_tables tb = rd_lane_tables<G::F16>(tables, lane);
  if constexpr (whole) {
    float acc[BT / 2];
    wgra_mainloop<G, BT>(ring, full, empty, 0, sk.kall, wr, sel, tb, acc);
    fp4_pdl_launch_dependents();
    wgra_store_staged<BT>(p, ring, acc, blockIdx.x, wr, lane, cwarp);
    return;
  }
  /* Part kts K tiles of `tile` (its first at ring position g0): stored from the CTA when whole;
   * else published (slot c for the CTA's first part, ctas + c for its last), and the last part to
   * arrive adds them all, in K order, from the workspace and stores the tile. */
  const auto finish = [&](float (&acc)[BT / 2], int64_t tile, int kts, bool first, bool last) {
    if (last) fp4_pdl_launch_dependents();
    if (kts < sk.kall) {
      float4 *const parts = reinterpret_cast<float4 *>(sk.ws) + ct;
      float4 *mine = parts + (size_t)((first ? 0 : sk.ctas) + blockIdx.x) * (BT / 8) * 256;
#pragma unroll
      for (int i = 0; i < BT / 8; i++)
        __stcg(mine + i * 256, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
      __threadfence(); /* this thread's partial is visible GPU-wide before the tile's counter moves */
      const int64_t t0 = tile * sk.kall;
      const int c_first = (int)wgra_cta_of(sk, t0), c_last = (int)wgra_cta_of(sk, t0 + sk.kall - 1);
      consumer_sync();
      if (ct == 0) last_part = atomicAdd(&sk.counters[tile], 1u) == (unsigned)(c_last - c_first);
      consumer_sync();
      if (!last_part) return;
      __threadfence(); /* the other parts, published before their counter increments */
      /* CTA c_first holds the tile's start in its last part unless it begins there; every later
       * CTA begins inside the tile */
      const int slot0 = (int)fp4_dense_wgra_part_slot(sk.tiles, sk.kall, sk.ctas, c_first, tile);
      /* NB float4 loads in flight per part: more spill next to the accumulators (ptxas) */
      constexpr int NB = BT == 128 ? 16 : BT == 256 ? 8 : 4;
#pragma unroll
      for (int i0 = 0; i0 < BT / 8; i0 += NB) {
#pragma unroll 1
        for (int c = c_first, slot = slot0; c <= c_last; c++, slot = c) {
          const float4 *src = parts + (size_t)slot * (BT / 8) * 256;
#pragma unroll
          for (int i = i0; i < i0 + NB; i++) {
            const float4 w = __ldcg(src + i * 256);
            if (c == c_first) acc[4 * i] = w.x, acc[4 * i + 1] = w.y, acc[4 * i + 2] = w.z, acc[4 * i + 3] = w.w;
            else acc[4 * i] += w.x, acc[4 * i + 1] += w.y, acc[4 * i + 2] += w.z, acc[4 * i + 3] += w.w;
          }
        }
      }
    }
    if (last) {
      wgra_store_staged<BT>(p, ring, acc, tile, wr, lane, cwarp);
    } else {
      int64_t m0, n0;
      lm_tile_origin(p, BT, kWgraRows, tile, &m0, &n0);
      wgra_store_registers<BT>(p, acc, m0, n0, wr, g, q);
    }
  };
  int64_t tile = begin / sk.kall;
  if constexpr (MODE == kWgraPart) { /* one part, at ring position 0 */
    float acc[BT / 2];
    wgra_mainloop<G, BT>(ring, full, empty, 0, rem0, wr, sel, tb, acc);
    finish(acc, tile, rem0, true, true);
    return;
  }
  /* the CTA's parts, each from where the last one left the ring */
  int kts = min(sk.kall - (int)(begin - tile * sk.kall), rem0);
#pragma unroll 1
  for (int rem = rem0, g0 = 0; rem > 0; rem -= kts, g0 += kts, tile++, kts = min(sk.kall, rem)) {
    float acc[BT / 2];
    wgra_mainloop<G, BT>(ring, full, empty, g0, kts, wr, sel, tb, acc);
    finish(acc, tile, kts, g0 == 0, kts == rem);
  }
#elif defined(__CUDA_ARCH__)
  /* referenced here too, or the compiler reports them unused in the passes for other targets */
  using G = wgra_cfg<BT, STAGES, FMT, ACT>;
  (void)p, (void)sk;
  (void)G::NV, (void)G::F16, (void)G::MUL, (void)G::D, (void)kWgraBK, (void)G::CTAS_PER_SM, (void)wgra_producer_regs(BT),
      (void)wgra_consumer_regs(BT);
  __trap(); /* the host never launches this outside sm_90a code (the register-A check of config/dense_config.c) */
#else
  (void)p;
#endif
}

/* ---- grouped (MoE prefill) tiles --------------------------------------------------------------- */

/* The grouped GEMM of moe_grouped_large.cu (same arguments, numbering of an expert's M tiles, row
 * gathering and numerics: the per-expert scale in double, one rounding) on the register-A tiles:
 * CTA (M tile j, N tile) computes BT of expert e's rows against 128 of its weight rows. W4A16 with
 * bf16 activations, or f16 with NVFP4 (W4A4 stays on the mma.sync tiles). */
template <int BT, int STAGES, int FMT, int ACT>
__global__ void __launch_bounds__(kWgraThreads, wgra_ctas_per_sm(BT)) grouped_wgra_kernel(glm_params p) {
#if FP4_SM90A_BODY
  using G = wgra_cfg<BT, STAGES, FMT, ACT>;
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  __shared__ int64_t row_off[BT];
  __shared__ long long tile_info[3]; /* expert, first row, end row (-1: no tile) */
  __shared__ double tile_scale;
  __shared__ uint32_t tables[kRdTableWords]; /* the decode's lookup words (rd_lane_tables) */
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t *ring = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const int64_t j = (int64_t)blockIdx.x / p.tn, n0 = ((int64_t)blockIdx.x % p.tn) * kWgraRows;
  const int kts = (int)((p.k + kWgraBK - 1) / kWgraBK), wg = threadIdx.x / kWgraWg;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], 2 * kWgraWg);
      mbar_init(&empty[s], 2 * kWgraWg);
    }
  }
  if (threadIdx.x < 32) rd_store_tables(tables, threadIdx.x);
  fp4_pdl_wait(); /* offsets, the permutation and the activations come from earlier kernels */
  /* With the routing kernel's dense tile numbering for this width every M tile below its total has
   * rows, and the CTAs past it (the grid is sized from a bound) exit after one load. */
  const bool dense = p.tile_rows == BT;
  if (threadIdx.x < 32) {
    if (dense && j >= __ldg(p.tile_starts + p.experts)) {
      if (threadIdx.x == 0) tile_info[2] = -1;
    } else {
      const int64_t e = dense ? find_tile_expert<BT, true>(p, j, threadIdx.x) : find_tile_expert<BT>(p, j, threadIdx.x);
      if (threadIdx.x == 0) {
        const int64_t lo = clamp64(__ldg(p.offsets + e), 0, p.rows), hi = clamp64(__ldg(p.offsets + e + 1), lo, p.rows);
        const int64_t m0 = lo + (j - (dense ? (int64_t)__ldg(p.tile_starts + e) : lo / BT + e)) * BT;
        tile_info[0] = e;
        tile_info[1] = m0;
        tile_info[2] = m0 < hi ? hi : -1;
        tile_scale = (double)moe_alpha(p.alpha, p.alpha_device) * (double)(p.w_mult ? __ldg(p.w_mult + e) : 1.0f) *
                     (double)moe_a_mult(p.a_mult, p.a_scale_device);
      }
    }
  }
  __syncthreads(); /* barriers initialized, the tile known */
  if (tile_info[2] < 0) return; /* uniform across the CTA */
  for (int r = threadIdx.x; r < BT; r += kWgraThreads) {
    const int64_t pr = tile_info[1] + r;
    row_off[r] = pr < tile_info[2] ? (int64_t)(p.a_rows ? __ldg(p.a_rows + pr) / p.a_div : (int32_t)pr) * p.lda * 2 : -1;
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<wgra_producer_regs(BT)>();
    const int pt = threadIdx.x;
    const wgra_gather_copier<G, BT> copier(p, tile_info[0], n0, row_off, pt);
    wgra_producer_ring ring_pos;
    wgra_produce<G, STAGES>(p, copier, ring, full, empty, 0, kts, pt, ring_pos);
    cp_async_wait<0>();
    fp4_pdl_launch_dependents();
  } else {
    setmaxnreg_inc<wgra_consumer_regs(BT)>();
    const int lane = threadIdx.x & 31, cwarp = (threadIdx.x - kWgraWg) >> 5, q = lane & 3;
    const int wr = cwarp * 16 + (lane >> 2); /* this thread's fragment rows: wr and wr + 8 */
    float acc[BT / 2];
    wgra_mainloop<G, BT>(ring, full, empty, 0, kts, wr, (uint32_t)(q | ((q + 4) << 4)),
                         rd_lane_tables<G::F16>(tables, lane), acc);
    fp4_pdl_launch_dependents();
    const float *stage = wgra_stage<BT>(ring, acc, wr, q);
    const volatile long long *info = tile_info; /* re-read after the loop: nothing held across it */
    const int64_t m0 = info[1], hi = info[2], col = n0 + 4 * lane;
    const out_scale scale = make_out_scale(*static_cast<const volatile double *>(&tile_scale));
#pragma unroll 1
    for (int t = cwarp; t < BT && m0 + t < hi; t += 8)
      if (col < p.n) glm_store4(p, m0 + t, col, *reinterpret_cast<const float4 *>(stage + t * kStageLd + 4 * lane), scale);
  }
#elif defined(__CUDA_ARCH__)
  using G = wgra_cfg<BT, STAGES, FMT, ACT>; /* referenced, as in gemm_wgra_kernel */
  (void)p;
  (void)G::NV, (void)G::F16, (void)G::MUL, (void)G::D, (void)G::CTAS_PER_SM;
  __trap(); /* the host never launches this outside sm_90a code (fp4_cuda_grouped_wgra_supported) */
#else
  (void)p;
#endif
}

/* ---- decode self-test kernel: every E2M1 code x every scale byte through the consumer path ------ */

/* Code of element k of the self-test rows of thread (c = t % 16): row g (lo) and row g + 8 (hi),
 * chosen so that every code meets every position and the two rows differ. */
__host__ __device__ inline uint32_t wgra_selftest_code(int c, int hi, int k) {
  return (uint32_t)(hi ? c + 3 * k + 7 : c + k) & 15u;
}

/* Thread t (of 4096: scale byte b = t / 16, code offset c = t % 16, lane q = t % 4) packs the 64 codes
 * of its two rows (wgra_selftest_code) as the raw tile holds them, takes scale bits b for every block
 * and decodes the K tile exactly as a consumer lane with that q does: out[t * 16 + 4 s + i] = a[s][i]. */
template <bool NV, bool F16, bool MUL>
__global__ void __launch_bounds__(256) wgra_decode_selftest_kernel(uint32_t *out) {
  const int t = blockIdx.x * 256 + threadIdx.x;
  if (t >= 4096) return;
  const uint32_t b = (uint32_t)t >> 4, q = (uint32_t)t & 3;
  const int c = t & 15;
  uint32_t w[2][8];
#pragma unroll
  for (int hi = 0; hi < 2; hi++)
#pragma unroll
    for (int i = 0; i < 8; i++) {
      uint32_t v = 0;
#pragma unroll
      for (int e = 0; e < 8; e++) v |= wgra_selftest_code(c, hi, 8 * i + e) << (4 * e); /* element 2j low nibble */
      w[hi][i] = v;
    }
  const uint32_t bits = NV ? b * 0x0101u : b;
  const uint4 sc = wgra_scale_pairs<NV, F16, MUL>(bits, bits);
  uint32_t a[4][4];
  wgra_decode_tile<MUL, F16>(make_uint4(w[0][0], w[0][1], w[0][2], w[0][3]), make_uint4(w[0][4], w[0][5], w[0][6], w[0][7]),
                            make_uint4(w[1][0], w[1][1], w[1][2], w[1][3]), make_uint4(w[1][4], w[1][5], w[1][6], w[1][7]),
                            sc, sc, q | ((q + 4) << 4), a);
#pragma unroll
  for (int s = 0; s < 4; s++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      /* the multiply form: the values the MMAs see times 2^8, e2m1 * scale (exact: they are normal) */
      out[t * 16 + 4 * s + i] = MUL ? rd_mul2<false>(a[s][i], 0x43804380u) : a[s][i];
    }
}

/* ---- configurations: the tiles config/dense_config.c names (large-m.wgra[.pro].128x<BT>) ------------ */

/* 128 weight rows x 32 tokens (8 stages), 64 (6 stages), both two CTAs per SM (batched decode), 128
 * tokens (8 stages) or 256 tokens (5 stages: 5 x 38 KiB). A prologue config
 * takes W4A4 only: the FP4 activations are dequantized to bf16 once per GEMM (lm_run_with_dequant_a,
 * as the large-m.rd.pro.* configs), then the tile runs as W4A16. The grid (one output tile per CTA or
 * stream-K) and its workspace are the chooser's (fp4_dense_wgra_ctas, fp4_dense_wgra_sched_bytes). */

/* setmaxnreg.inc waits until the CTA's register pool holds what it claims, so the launch must
 * allocate at least what the producer and the consumers claim together, or the consumers wait
 * forever. ptxas gives these kernels the launch-bounds maximum (168 or 80 registers, the sums in
 * wgra_producer_regs); a build where it did not fails the launch with an error instead of hanging. */
template <int BT>
bool wgra_register_pool_ok(const void *kernel) {
  cudaFuncAttributes fa;
  if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) return false;
  return fa.numRegs * kWgraThreads >= kWgraWg * wgra_producer_regs(BT) + 2 * kWgraWg * wgra_consumer_regs(BT);
}

/* ws: the stream-K part of the context workspace (fp4_dense_wgra_sched_bytes; unused with one output
 * tile per CTA). */
template <int BT, int STAGES, int FMT, int ACT>
cudaError_t wgra_launch_tile(const lm_params &p, int sms, void *ws, cudaStream_t stream, int pdl) {
  using G = wgra_cfg<BT, STAGES, FMT, ACT>;
  auto kernel = gemm_wgra_kernel<BT, STAGES, FMT, ACT, kWgraWhole>;
  auto part_kernel = gemm_wgra_kernel<BT, STAGES, FMT, ACT, kWgraPart>;
  auto stream_kernel = gemm_wgra_kernel<BT, STAGES, FMT, ACT, kWgraStream>;
  static const bool pool_ok = wgra_register_pool_ok<BT>(reinterpret_cast<const void *>(kernel)) &&
                              wgra_register_pool_ok<BT>(reinterpret_cast<const void *>(part_kernel)) &&
                              wgra_register_pool_ok<BT>(reinterpret_cast<const void *>(stream_kernel));
  if (!pool_ok) return cudaErrorInvalidConfiguration;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(part_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e != cudaSuccess) return e;
  /* output tiles: (token tiles of BT) x (weight tiles of 128) */
  const int64_t tiles = ((p.m + BT - 1) / BT) * ((p.n + kWgraRows - 1) / kWgraRows);
  const int64_t kall = (p.k + kWgraBK - 1) / kWgraBK;
  const int64_t ctas = fp4_dense_wgra_ctas(tiles, kall, sms, BT);
  if (ctas > 0x7FFFFFFF || kall > 0x7FFFFFFF) return cudaErrorInvalidConfiguration;
  wgra_sched sk = {tiles, (int)kall, (int)ctas, NULL, NULL};
  if (ctas == tiles)
    return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(kWgraThreads), (size_t)G::SMEM, stream, pdl, p, sk);
  if (!ws) return cudaErrorInvalidValue;
  /* the partial tiles and the counters, zeroed in stream order (a memset node under capture) */
  size_t part_bytes = 0;
  fp4_dense_wgra_sched_bytes(p.m, p.n, p.k, BT, sms, &part_bytes);
  sk.ws = static_cast<float *>(ws);
  sk.counters = reinterpret_cast<unsigned *>(static_cast<char *>(ws) + part_bytes);
  e = cudaMemsetAsync(sk.counters, 0, (size_t)tiles * sizeof(unsigned), stream);
  if (e != cudaSuccess) return e;
  /* a grid whose CTAs divide the tiles evenly (every CTA one part of one tile) runs on the one-part kernel */
  return fp4_cuda_launch(ctas % tiles ? stream_kernel : part_kernel, dim3((unsigned)ctas), dim3(kWgraThreads),
                         (size_t)G::SMEM, stream, pdl, p, sk);
}

template <int FMT, int ACT>
cudaError_t wgra_launch_cfg(const lm_params &p, const fp4_dense_config *c, int sms, void *ws, cudaStream_t s, int pdl) {
  if (c->bm == 32 && c->stages == 8) return wgra_launch_tile<32, 8, FMT, ACT>(p, sms, ws, s, pdl);
  if (c->bm == 64 && c->stages == 6) return wgra_launch_tile<64, 6, FMT, ACT>(p, sms, ws, s, pdl);
  if (c->bm == 128 && c->stages == 8) return wgra_launch_tile<128, 8, FMT, ACT>(p, sms, ws, s, pdl);
  if (c->bm == 256 && c->stages == 5) return wgra_launch_tile<256, 5, FMT, ACT>(p, sms, ws, s, pdl);
  return cudaErrorInvalidValue;
}

/* The chooser's shared-memory figures (config/dense_config.h) are these tiles' own. */
static_assert(kWgraRows == 128 && kWgraBK == 64 &&
                  wgra_cfg<32, 8, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_WGRA_SMEM(32, 8) &&
                  wgra_cfg<64, 6, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_WGRA_SMEM(64, 6) &&
                  wgra_cfg<128, 8, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_WGRA_SMEM(128, 8) &&
                  wgra_cfg<256, 5, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM == FP4_DENSE_WGRA_SMEM(256, 5),
              "FP4_DENSE_WGRA_SMEM must give the shared memory of the register-A tiles");
static_assert(wgra_ctas_per_sm(32) == FP4_DENSE_WGRA_CTAS_PER_SM(32) && wgra_ctas_per_sm(64) == FP4_DENSE_WGRA_CTAS_PER_SM(64) &&
                  wgra_ctas_per_sm(128) == FP4_DENSE_WGRA_CTAS_PER_SM(128) &&
                  wgra_ctas_per_sm(256) == FP4_DENSE_WGRA_CTAS_PER_SM(256),
              "FP4_DENSE_WGRA_CTAS_PER_SM must give the resident CTAs of the register-A tiles");

/* ---- grouped tiles: host ------------------------------------------------------------------------ */

template <int BT, int STAGES, int FMT, int ACT>
cudaError_t grouped_wgra_launch(const glm_params &p, int64_t ctas, cudaStream_t s, int pdl) {
  using G = wgra_cfg<BT, STAGES, FMT, ACT>; /* the kernel's */
  auto kernel = grouped_wgra_kernel<BT, STAGES, FMT, ACT>;
  static const bool pool_ok = wgra_register_pool_ok<BT>(reinterpret_cast<const void *>(kernel));
  if (!pool_ok) return cudaErrorInvalidConfiguration;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (e != cudaSuccess) return e;
  return fp4_cuda_launch(kernel, dim3((unsigned)ctas), dim3(kWgraThreads), (size_t)G::SMEM, s, pdl, p);
}

template <int FMT, int ACT>
cudaError_t grouped_wgra_tile(const glm_params &p, int bt, int64_t ctas, cudaStream_t s, int pdl) {
  switch (bt) {
  case 32: return grouped_wgra_launch<32, 8, FMT, ACT>(p, ctas, s, pdl);
  case 64: return grouped_wgra_launch<64, 6, FMT, ACT>(p, ctas, s, pdl);
  case 128: return grouped_wgra_launch<128, 8, FMT, ACT>(p, ctas, s, pdl);
  case 160: return grouped_wgra_launch<160, 7, FMT, ACT>(p, ctas, s, pdl);
  case 192: return grouped_wgra_launch<192, 6, FMT, ACT>(p, ctas, s, pdl);
  case 256: return grouped_wgra_launch<256, 5, FMT, ACT>(p, ctas, s, pdl);
  default: return cudaErrorInvalidValue;
  }
}

/* The token width of the grouped tiles is the host's choice (fp4_cuda_grouped_args.variant.tile_m:
 * config/moe_config.c, the expected-cost rule fitted on the H200, or a moe.prefill.wgra<M> config). */
int64_t grouped_wgra_ctas(const fp4_cuda_grouped_args *a, int bt) { /* M tiles: the bound of either numbering */
  return (a->rows / bt + a->experts) * ((a->n + kWgraRows - 1) / kWgraRows);
}

int wgra_image_ok(int device, char *why, size_t why_size) {
  static lm_sm90a_probe_cache cache;
  return lm_sm90a_image_ok(reinterpret_cast<const void *>(gemm_wgra_kernel<128, 8, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16, kWgraWhole>),
                           "wgra", device, &cache, why, why_size);
}

} // namespace

extern "C" int fp4_cuda_wgra_image_ok(int device, char *why, size_t why_size) {
  return wgra_image_ok(device, why, why_size);
}

extern "C" int fp4_cuda_gemm_wgra(const fp4_cuda_gemm_args *a, const fp4_dense_config *c, void *stream, int pdl) {
  if (!c || c->family != FP4_DENSE_LARGE_M_WGRA || a->m < 1 || a->n < 1 || a->k % 32 || a->act == FP4_CUDA_ACT_F32 ||
      (a->format == FP4_FORMAT_MXFP4 && a->act == FP4_CUDA_ACT_F16) || (c->prologue != (a->act == FP4_CUDA_ACT_FP4)))
    return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  const bool nv = a->format == FP4_FORMAT_NVFP4;
  if (c->prologue) { /* the stream-K part of the workspace follows the bf16 activations */
    void *ws = a->workspace ? static_cast<char *>(a->workspace) + fp4_cuda_bf16_a_bytes(a->m, a->k) : NULL;
    if (nv)
      return (int)lm_run_with_dequant_a<FP4_FORMAT_NVFP4>(a, s, pdl, [&](const lm_params &p) {
        return wgra_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, c, a->sms, ws, s, pdl);
      });
    return (int)lm_run_with_dequant_a<FP4_FORMAT_MXFP4>(a, s, pdl, [&](const lm_params &p) {
      return wgra_launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, c, a->sms, ws, s, pdl);
    });
  }
  const lm_params p = lm_params_of(a);
  switch (a->act) {
  case FP4_CUDA_ACT_BF16:
    return (int)(nv ? wgra_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, c, a->sms, a->workspace, s, pdl)
                    : wgra_launch_cfg<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, c, a->sms, a->workspace, s, pdl));
  case FP4_CUDA_ACT_F16:
    return (int)wgra_launch_cfg<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, c, a->sms, a->workspace, s, pdl);
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int fp4_cuda_grouped_wgra_supported(const fp4_cuda_grouped_args *a, int device) {
  if (a->k % 32 || a->k < 32 || a->n < 1 || a->experts < 1 || a->rows < 1 || a->a_div < 1) return 0;
  if (a->act != FP4_CUDA_ACT_BF16 && !(a->act == FP4_CUDA_ACT_F16 && a->format == FP4_FORMAT_NVFP4)) return 0;
  if ((uintptr_t)a->a % 16 || (a->lda * 2) % 16 || (uintptr_t)a->w % 16) return 0; /* 16-byte row copies */
  char why[320];
  if (!wgra_image_ok(device, why, sizeof why)) return 0;
  const int optin = lm_device_attr(device, cudaDevAttrMaxSharedMemoryPerBlockOptin, 48 * 1024);
  if (wgra_cfg<256, 5, FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>::SMEM + 4096 > optin) return 0; /* + the row table */
  return grouped_wgra_ctas(a, 32) <= 0x7FFFFFFF && a->rows <= 0x7FFFFFFF;
}

extern "C" int fp4_cuda_grouped_gemm_wgra(const fp4_cuda_grouped_args *a, void *stream, int pdl) {
  /* The host asked fp4_cuda_grouped_wgra_supported once for the device and checked the rest of the
   * variant against a (config/moe_config.c): no device query per call. */
  if (a->act != FP4_CUDA_ACT_BF16 && !(a->act == FP4_CUDA_ACT_F16 && a->format == FP4_FORMAT_NVFP4))
    return (int)cudaErrorInvalidValue;
  const glm_params p = glm_params_of(a, kWgraRows);
  const int bt = a->variant.tile_m;
  const int64_t ctas = grouped_wgra_ctas(a, bt);
  if (bt < 32 || ctas > 0x7FFFFFFF) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  if (a->format == FP4_FORMAT_MXFP4) return (int)grouped_wgra_tile<FP4_FORMAT_MXFP4, FP4_CUDA_ACT_BF16>(p, bt, ctas, s, pdl);
  if (a->act == FP4_CUDA_ACT_F16) return (int)grouped_wgra_tile<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_F16>(p, bt, ctas, s, pdl);
  return (int)grouped_wgra_tile<FP4_FORMAT_NVFP4, FP4_CUDA_ACT_BF16>(p, bt, ctas, s, pdl);
}

extern "C" int fp4_cuda_wgra_decode_selftest(int format, int act, int mul, uint32_t *host_out) {
  if (act != FP4_CUDA_ACT_BF16 && act != FP4_CUDA_ACT_F16) return (int)cudaErrorInvalidValue;
  const bool nv = format == FP4_FORMAT_NVFP4, f16 = act == FP4_CUDA_ACT_F16;
  if (mul && !(nv && !f16)) return (int)cudaErrorInvalidValue; /* the multiply form is NVFP4 with bf16 only */
  uint32_t *d = NULL;
  const size_t bytes = 4096 * 16 * sizeof(uint32_t);
  cudaError_t e = cudaMalloc(&d, bytes);
  if (e != cudaSuccess) return (int)e;
  if (mul) wgra_decode_selftest_kernel<true, false, true><<<16, 256>>>(d);
  else if (nv && f16) wgra_decode_selftest_kernel<true, true, false><<<16, 256>>>(d);
  else if (nv) wgra_decode_selftest_kernel<true, false, false><<<16, 256>>>(d);
  else if (f16) wgra_decode_selftest_kernel<false, true, false><<<16, 256>>>(d);
  else wgra_decode_selftest_kernel<false, false, false><<<16, 256>>>(d);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaMemcpy(host_out, d, bytes, cudaMemcpyDeviceToHost);
  cudaFree(d);
  return (int)e;
}
