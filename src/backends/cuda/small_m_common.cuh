/*
 * Device helpers of the small-M tensor-core GEMMs, shared by the dense decode kernels
 * (gemm_small_m_kernels.cuh) and the grouped MoE decode kernel (moe_grouped.cu): streaming weight
 * loads,
 * the exact e2m1 -> bf16/f16 decode, weight and activation scale handling, the activation
 * fragments (bf16, f16, f32 as three bf16 parts, FP4) and the per-slab mma.sync m16n8k16 step with
 * the weights as the 16-row A operand ("swap AB"); the decode helpers shared with other backends are
 * in format/codec_device.cuh. The numeric reasoning is in gemm_small_m_kernels.cuh's
 * header comment. Everything sits in an unnamed namespace: each kernel file gets its own copy.
 */
#ifndef FP4_BACKENDS_CUDA_SMALL_M_COMMON_CUH
#define FP4_BACKENDS_CUDA_SMALL_M_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backends/cuda/cuda_kernels.h"
#include "format/codec.h"
#include "format/codec_device.cuh"
#include "fp4kit.h"

namespace {

/* Weights are read exactly once: keep them out of L1, which holds the re-read activations. PF > 0:
 * L2 fetches the PF-byte aligned block around the address as one unit (.L2::128B / ::256B). */
#define FP4_LD_STREAM(size)                                                                          \
  asm volatile("ld.global.nc.L1::no_allocate" size ".v4.u32 {%0,%1,%2,%3}, [%4];"                   \
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                                          \
               : "l"(ptr))
template <int PF = 0>
__device__ __forceinline__ uint4 ld_stream(const uint8_t *ptr) {
  static_assert(PF == 0 || PF == 128 || PF == 256, "L2 prefetch sizes: 128 or 256 bytes");
  uint4 v;
  if (PF == 256) FP4_LD_STREAM(".L2::256B");
  else if (PF == 128) FP4_LD_STREAM(".L2::128B");
  else FP4_LD_STREAM("");
  return v;
}
#undef FP4_LD_STREAM

__device__ __forceinline__ uint4 ld_act(const void *ptr) { return __ldg(static_cast<const uint4 *>(ptr)); }

/* 2^d as a 16-bit pair, for d up to 127 (bf16) or 15 (f16); 0 below the smallest subnormal. */
template <bool F16>
__device__ __forceinline__ uint32_t pow2_pair(int d) {
  uint32_t h;
  if (F16) h = d >= -14 ? (uint32_t)(15 + d) << 10 : d >= -24 ? 1u << (d + 24) : 0u;
  else h = d >= -126 ? (uint32_t)(127 + d) << 7 : d >= -133 ? 1u << (d + 133) : 0u;
  return h | (h << 16);
}

/* Weight codes, cheaply: sign to bit 15, the three magnitude bits to the two low exponent bits and
 * the top mantissa bit. That makes the 16-bit value e2m1 * 2^-126 (bf16) or e2m1 * 2^-14 (f16),
 * subnormal for the 0.5 code and exact; the block-scale multiply then removes the power of two.
 * Pairs p[i] = (element i, element i+4) as in decode8.
 * MUL (bf16): one multiply makes two copies of each of a pair's nibbles, 6 bits apart (the
 * magnitude goes to bits 8:6 and the sign to bit 15: shifts that differ by 6), and one mask keeps
 * the wanted bits of each copy: 13 instructions per 8 weights instead of 16, the same bits for all
 * 2^32 words (the copies of a 4-bit nibble 6 apart never overlap, so the sum has no carries). It
 * needs a register more at times: the dense lean kernels capped at 64 or 80 registers spilled with
 * it (sm_80 to sm_120a) and keep the shifts (MUL = false). In f16 the two shifts differ by 3 and
 * the copies would overlap. */
template <bool F16, bool MUL = true>
__device__ __forceinline__ void decode8_raw(uint32_t w, uint32_t p[4]) {
  if (F16) {
    p[0] = ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
    p[1] = ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
    p[2] = ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
    p[3] = ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
  } else if (MUL) {
    const uint32_t hi = w >> 8; /* nibbles 2, 3 and 6, 7 down to where 0, 1 and 4, 5 sit */
    p[0] = ((w & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
    p[1] = ((w & 0x00F000F0u) * 0x104u) & 0x81C081C0u;
    p[2] = ((hi & 0x000F000Fu) * 0x1040u) & 0x81C081C0u;
    p[3] = ((hi & 0x00F000F0u) * 0x104u) & 0x81C081C0u;
  } else {
    p[0] = ((w << 6) & 0x01C001C0u) | ((w << 12) & 0x80008000u);
    p[1] = ((w << 2) & 0x01C001C0u) | ((w << 8) & 0x80008000u);
    p[2] = ((w >> 2) & 0x01C001C0u) | ((w << 4) & 0x80008000u);
    p[3] = ((w >> 6) & 0x01C001C0u) | (w & 0x80008000u);
  }
}

/* The multiplier of decode8_raw pairs for an NVFP4 weight block: scale * 2^118 (bf16) or
 * scale * 2^6 (f16), so weights become e2m1 * scale * 2^-8 (exact, normal or f16-subnormal with
 * room to spare); the kernel multiplies the FP32 result by 2^8. The E4M3 bits placed in a float
 * give scale * 2^-120 (a float subnormal for E4M3 subnormals, which FMUL handles exactly). */
template <bool F16>
__device__ __forceinline__ uint32_t nv_weight_scale_pair(uint32_t byte) {
  const float f = __uint_as_float(((byte & 0x7Fu) << 20) | ((byte & 0x80u) << 24));
  uint32_t h;
  if (F16) h = __half_as_ushort(__float2half_rn(__fmul_rn(f, 0x1p126f)));
  else h = __float_as_uint(__fmul_rn(__fmul_rn(f, 0x1p120f), 0x1p118f)) >> 16;
  if ((byte & 0x7Fu) == 0x7Fu) h = F16 ? 0x7E00u : 0x7FC0u; /* E4M3 NaN stays NaN */
  return h | (h << 16);
}

/* acc <- 0: the FP32 accumulators of R row tiles x NT token tiles of one thread. */
template <int R, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[R][NT][4]) {
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[r][nt][0] = acc[r][nt][1] = acc[r][nt][2] = acc[r][nt][3] = 0.0f;
}

template <bool F16>
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if (F16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Where a thread's scale bytes of slab s are: two E4M3 (NVFP4, blocks 8s+2t and 8s+2t+1, adjacent
 * in every layout) or one UE8M0 (MXFP4, block 4s+t). In every layout the offset is
 * base + s * stride, so the kernel walks pointers instead of recomputing the swizzle. */
struct scale_walk {
  const uint8_t *base;
  int64_t stride;
};

template <bool NV>
__device__ __forceinline__ scale_walk make_walk(const uint8_t *scales, int layout, int64_t C, int64_t r, int t) {
  const int64_t c0 = NV ? 2 * t : t, step = NV ? 8 : 4;
  const int64_t o0 = fp4_layout_offset(layout, C, r, c0);
  scale_walk w = {scales + o0, fp4_layout_offset(layout, C, r, c0 + step) - o0};
  return w;
}

template <bool NV>
__device__ __forceinline__ uint32_t load_scales(const scale_walk &w, int s) {
  const uint8_t *p = w.base + (int64_t)s * w.stride;
  if (NV) return __ldg(reinterpret_cast<const uint16_t *>(p));
  return __ldg(p);
}

/* Slab s of a warp's 16-row weight tile: this thread's 16 code bytes of rows g and g + 8 (at
 * wa_ptr / wb_ptr + 64 s) and their scale bytes. */
template <bool NV>
__device__ __forceinline__ void load_slab(const uint8_t *wa_ptr, const uint8_t *wb_ptr, const scale_walk &swa,
                                          const scale_walk &swb, int s, uint4 &wa, uint4 &wb, uint32_t &sca,
                                          uint32_t &scb) {
  wa = ld_stream(wa_ptr + (int64_t)s * 64);
  wb = ld_stream(wb_ptr + (int64_t)s * 64);
  sca = load_scales<NV>(swa, s);
  scb = load_scales<NV>(swb, s);
}

/* Activation addressing of one thread: token g of tile 0, its 32 K elements of slab 0. */
template <int ACT>
struct act_walk {
  static constexpr int kElem = ACT == FP4_CUDA_ACT_F32 ? 4 : 2; /* bytes per element, dense      */
  static constexpr int kSlab = ACT == FP4_CUDA_ACT_FP4 ? 64 : 128 * kElem; /* bytes per slab   */
  static constexpr int kGroup = ACT == FP4_CUDA_ACT_FP4 ? 4 : 8 * kElem;   /* bytes per 8-group */
  const char *base;
  int64_t tile; /* bytes between token tiles (8 rows) */
};

/* The B fragments of token m = 8 nt + g for 8-group q of slab s (row_slab: that token's slab s at
 * this thread's 32 K elements): pairs (x_i, x_i+4), i = 0..3, in
 * x[0] (and the mid and lo parts of f32 activations in x[1], x[2]); zero past M. SMEM (bf16/f16
 * only): row_slab points into a shared-memory stage whose 16-byte chunks are swizzled within each
 * row (the shared-activation kernel of gemm_small_m_sa.cu): group q sits at chunk
 * q ^ ((lane >> 1) & 3) of this thread's 64-byte span. */
template <int FMT, int ACT, bool SMEM = false>
__device__ __forceinline__ void activation_group(const char *row_slab, bool valid, int q, uint32_t asc,
                                                 uint32_t x[3][4]) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  const char *src = row_slab + q * act_walk<ACT>::kGroup;
  if (SMEM) {
    const uint4 w = *reinterpret_cast<const uint4 *>(row_slab + ((q ^ ((threadIdx.x >> 1) & 3)) << 4));
    x[0][0] = __byte_perm(w.x, w.z, 0x5410);
    x[0][1] = __byte_perm(w.x, w.z, 0x7632);
    x[0][2] = __byte_perm(w.y, w.w, 0x5410);
    x[0][3] = __byte_perm(w.y, w.w, 0x7632);
  } else if (ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16) {
    const uint4 w = valid ? ld_act(src) : make_uint4(0u, 0u, 0u, 0u);
    x[0][0] = __byte_perm(w.x, w.z, 0x5410);
    x[0][1] = __byte_perm(w.x, w.z, 0x7632);
    x[0][2] = __byte_perm(w.y, w.w, 0x5410);
    x[0][3] = __byte_perm(w.y, w.w, 0x7632);
  } else if (ACT == FP4_CUDA_ACT_F32) {
    const uint4 lo4 = valid ? ld_act(src) : make_uint4(0u, 0u, 0u, 0u);
    const uint4 hi4 = valid ? ld_act(src + 16) : make_uint4(0u, 0u, 0u, 0u);
    const float v[8] = {__uint_as_float(lo4.x), __uint_as_float(lo4.y), __uint_as_float(lo4.z),
                        __uint_as_float(lo4.w), __uint_as_float(hi4.x), __uint_as_float(hi4.y),
                        __uint_as_float(hi4.z), __uint_as_float(hi4.w)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
      /* x = hi + mid + lo exactly: each residual is an exact float subtraction. */
      const float a0 = v[i], a1 = v[i + 4];
      const __nv_bfloat162 hi = __floats2bfloat162_rn(a0, a1);
      const float r0 = __fsub_rn(a0, __low2float(hi)), r1 = __fsub_rn(a1, __high2float(hi));
      const __nv_bfloat162 mid = __floats2bfloat162_rn(r0, r1);
      const __nv_bfloat162 lo =
          __floats2bfloat162_rn(__fsub_rn(r0, __low2float(mid)), __fsub_rn(r1, __high2float(mid)));
      x[0][i] = *reinterpret_cast<const uint32_t *>(&hi);
      x[1][i] = *reinterpret_cast<const uint32_t *>(&mid);
      x[2][i] = *reinterpret_cast<const uint32_t *>(&lo);
    }
  } else { /* FP4 activations (W4A4), dequantized exactly to bf16 */
    decode8<false>(valid ? __ldg(reinterpret_cast<const uint32_t *>(src)) : 0u, x[0]);
    const uint32_t s2 = NV ? e4m3_pair<false>((asc >> (8 * (q >> 1))) & 0xFF) : ue8m0_bf16_pair(asc & 0xFF);
#pragma unroll
    for (int i = 0; i < 4; i++) x[0][i] = hmul2<false>(x[0][i], s2);
  }
}

/* One 128-K slab of one warp (row_slab[nt]: token tile nt's row of this thread at slab s, so the
 * rows may come from anywhere, e.g. gathered by a permutation): R tiles of 16 rows x 128 K of weights times every token tile. Loops
 * run over the four 8-groups q of the thread's 32 K elements so only one group's fragments are live;
 * each activation fragment is loaded (and, for W4A4, decoded) once and used by all R weight tiles. */
template <int FMT, int ACT, int NT, int R, bool SMEM = false, bool MUL = true>
__device__ __forceinline__ void slab_mma_rows(const char *const *row_slab, const scale_walk *asw, const bool *valid,
                                              int s, const uint32_t *table, const uint4 *wa, const uint4 *wb,
                                              const uint32_t *sca, const uint32_t *scb, float acc[R][NT][4]) {
  static_assert(!SMEM || ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16, "shared stages hold 16-bit rows");
  constexpr bool F16 = ACT == FP4_CUDA_ACT_F16;
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int PARTS = ACT == FP4_CUDA_ACT_F32 ? 3 : 1;
  float post_a[R], post_b[R];
  uint32_t fa[R][2], fb[R][2];
#pragma unroll
  for (int r = 0; r < R; r++) {
    post_a[r] = post_b[r] = 1.0f;
    if (NV) {
      fa[r][0] = table[sca[r] & 0xFF];
      fa[r][1] = table[sca[r] >> 8];
      fb[r][0] = table[scb[r] & 0xFF];
      fb[r][1] = table[scb[r] >> 8];
    } else {
      const int ea = (int)sca[r], eb = (int)scb[r];
      int ma = max(ea, __shfl_xor_sync(0xFFFFFFFFu, ea, 1)), mb = max(eb, __shfl_xor_sync(0xFFFFFFFFu, eb, 1));
      ma = max(ma, __shfl_xor_sync(0xFFFFFFFFu, ma, 2));
      mb = max(mb, __shfl_xor_sync(0xFFFFFFFFu, mb, 2));
      /* raw pairs are e2m1 * 2^-126 (bf16) / 2^-14 (f16): the factor also undoes that */
      fa[r][0] = fa[r][1] = pow2_pair<F16>(ea - ma + (F16 ? 14 : 126));
      fb[r][0] = fb[r][1] = pow2_pair<F16>(eb - mb + (F16 ? 14 : 126));
      post_a[r] = fp4_ue8m0_decode_inline((uint8_t)ma);
      post_b[r] = fp4_ue8m0_decode_inline((uint8_t)mb);
    }
  }
  uint32_t asc[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
    asc[nt] = ACT == FP4_CUDA_ACT_FP4 && valid[nt] ? load_scales<NV>(asw[nt], s) : 0u;
  float d[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) d[r][nt][0] = d[r][nt][1] = d[r][nt][2] = d[r][nt][3] = 0.0f;
#pragma unroll
  for (int q = 0; q < 4; q++) {
    uint32_t pa[R][4], pb[R][4];
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint32_t wa_q = q == 0 ? wa[r].x : q == 1 ? wa[r].y : q == 2 ? wa[r].z : wa[r].w;
      const uint32_t wb_q = q == 0 ? wb[r].x : q == 1 ? wb[r].y : q == 2 ? wb[r].z : wb[r].w;
      decode8_raw<F16, MUL>(wa_q, pa[r]);
      decode8_raw<F16, MUL>(wb_q, pb[r]);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        pa[r][i] = hmul2<F16>(pa[r][i], fa[r][q >> 1]);
        pb[r][i] = hmul2<F16>(pb[r][i], fb[r][q >> 1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint32_t x[3][4];
      activation_group<FMT, ACT, SMEM>(row_slab[nt], valid[nt], q, asc[nt], x);
#pragma unroll
      for (int r = 0; r < R; r++) {
        /* NVFP4 with 16-bit activations accumulates straight into acc; the three-part f32 path (and
         * MXFP4) sums each slab in d first and adds it to acc once, which keeps the FP32 rounding
         * of long-K sums inside the 1e-5 contract (3 MMAs per step otherwise grow acc's error). */
        float *dst = NV && PARTS == 1 ? acc[r][nt] : d[r][nt];
#pragma unroll
        for (int i0 = 0; i0 < 4; i0 += 2) {
          const uint32_t a[4] = {pa[r][i0], pb[r][i0], pa[r][i0 + 1], pb[r][i0 + 1]};
#pragma unroll
          for (int v = PARTS - 1; v >= 0; v--) mma16816<F16>(dst, a, x[v][i0], x[v][i0 + 1]);
        }
      }
    }
  }
  if (!NV || PARTS > 1) { /* post_a/post_b stay 1 for NVFP4: the multiply is exact */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        acc[r][nt][0] = __fadd_rn(acc[r][nt][0], __fmul_rn(d[r][nt][0], post_a[r]));
        acc[r][nt][1] = __fadd_rn(acc[r][nt][1], __fmul_rn(d[r][nt][1], post_a[r]));
        acc[r][nt][2] = __fadd_rn(acc[r][nt][2], __fmul_rn(d[r][nt][2], post_b[r]));
        acc[r][nt][3] = __fadd_rn(acc[r][nt][3], __fmul_rn(d[r][nt][3], post_b[r]));
      }
  }
}

/* slab_mma_rows for token tiles that lie tile bytes apart from slab (dense row-major activations). */
template <int FMT, int ACT, int NT, int R>
__device__ __forceinline__ void slab_mma(const char *slab, int64_t tile, const scale_walk *asw, const bool *valid,
                                         int s, const uint32_t *table, const uint4 *wa, const uint4 *wb,
                                         const uint32_t *sca, const uint32_t *scb, float acc[R][NT][4]) {
  const char *rows[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) rows[nt] = slab + nt * tile;
  slab_mma_rows<FMT, ACT, NT, R>(rows, asw, valid, s, table, wa, wb, sca, scb, acc);
}

/* The lean streaming loop (the lean kernel of gemm_small_m_kernels.cuh and the grouped MoE lean
 * kernel): a CTA of kLeanWarps warps covers R 16-row weight tiles, warp w taking slabs w, w + kLeanWarps, ... (STEP =
 * kLeanWarps), or each warp its own R tiles and all their slabs (STEP = 1); UU slabs in flight per
 * warp. The pointers (weights, weight scales, activations) are this warp's at slab s and advance by
 * constant steps, so no layout arithmetic runs in the loop. */
constexpr int kLeanWarps = 4;

template <int FMT, int ACT, int NT, int R, int UU, bool MUL, int STEP>
__device__ __forceinline__ void lean_slabs(const uint8_t *const *wa_ptr, const uint8_t *const *wb_ptr,
                                           const uint8_t *const *sa_ptr, const uint8_t *const *sb_ptr, int64_t sstep,
                                           const char *const *act, const scale_walk *asw, int s, const uint32_t *table,
                                           float acc[R][NT][4]) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  constexpr int kStep = STEP * 64; /* weight bytes between one warp's slabs */
  /* The STEP warps sharing a row's K read STEP consecutive 64-byte pieces of it in the same step:
   * L2 fetches them as one unit (ld .L2::128B / ::256B). ncu on the H200 (MoE decode, bench/results/
   * h200/2026-11-30-moe-decode/README.md):
   * gate_up at 4 warps 3-4% faster, down at 2 warps 3-4%; a warp walking a row alone (STEP = 1)
   * was slower with either size (Qwen3.5 down, B = 8: 73.7 and 86.0 against 70.8 us). */
  constexpr int PF = STEP >= 4 ? 256 : STEP == 2 ? 128 : 0;
  uint4 wa[UU][R], wb[UU][R];
  uint32_t sca[UU][R], scb[UU][R];
#pragma unroll
  for (int u = 0; u < UU; u++)
#pragma unroll
    for (int r = 0; r < R; r++) {
      wa[u][r] = ld_stream<PF>(wa_ptr[r] + u * kStep);
      wb[u][r] = ld_stream<PF>(wb_ptr[r] + u * kStep);
      const scale_walk ws_a = {sa_ptr[r] + u * sstep, 0}, ws_b = {sb_ptr[r] + u * sstep, 0};
      sca[u][r] = load_scales<NV>(ws_a, 0);
      scb[u][r] = load_scales<NV>(ws_b, 0);
    }
  bool valid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) valid[nt] = true; /* rows past M are clamped, not skipped */
#pragma unroll
  for (int u = 0; u < UU; u++) {
    const char *rows[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) rows[nt] = act[nt] + u * (STEP * act_walk<ACT>::kSlab);
    slab_mma_rows<FMT, ACT, NT, R, false, MUL>(rows, asw, valid, s + u * STEP, table, wa[u], wb[u], sca[u], scb[u], acc);
  }
}


/* A lean CTA's weight walk: a warp's pointers at its first slab (slab0) for R 16-row tiles, tile r
 * from row row0 + r * tile_stride (16: consecutive tiles; the MoE gate_up GEMM with SiLU*up in its
 * epilogue pairs gate tile rows with the up rows I further on) of the [n, k/2] weights w with their
 * scales, and the scale bytes between the warp's slabs (step slabs apart). Rows past n read row n-1
 * (valid memory) and are never stored. */
template <bool NV, int R>
struct lean_weights {
  const uint8_t *wa[R], *wb[R], *sa[R], *sb[R];
  int64_t sstep;
  __device__ __forceinline__ lean_weights(const uint8_t *w, const uint8_t *scales, int layout, int64_t C, int64_t n,
                                          int64_t k, int64_t row0, int slab0, int step, int g, int t,
                                          int64_t tile_stride = 16) {
    sstep = 0;
#pragma unroll
    for (int r = 0; r < R; r++) {
      const int64_t ra = min(row0 + tile_stride * r + g, n - 1), rb = min(row0 + tile_stride * r + g + 8, n - 1);
      wa[r] = w + ra * (k >> 1) + 16 * t + slab0 * 64;
      wb[r] = w + rb * (k >> 1) + 16 * t + slab0 * 64;
      const scale_walk swa = make_walk<NV>(scales, layout, C, ra, t);
      const scale_walk swb = make_walk<NV>(scales, layout, C, rb, t);
      sa[r] = swa.base + slab0 * swa.stride;
      sb[r] = swb.base + slab0 * swb.stride;
      sstep = step * swa.stride;
    }
  }
};

/* Every slab of this warp, from slab s0 on in steps of STEP: U at a time, then the rest one by one.
 * The pointer arrays are this warp's at slab s0 (copies: advanced here). */
template <int FMT, int ACT, int NT, int R, int U, bool MUL = true, int STEP = kLeanWarps>
__device__ __forceinline__ void lean_stream(const uint8_t *const *wa0, const uint8_t *const *wb0,
                                            const uint8_t *const *sa0, const uint8_t *const *sb0, int64_t sstep,
                                            const char *const *act0, const scale_walk *asw, int s0, int nslabs,
                                            const uint32_t *table, float acc[R][NT][4]) {
  constexpr int kSlab = act_walk<ACT>::kSlab;
  const uint8_t *wa_ptr[R], *wb_ptr[R], *sa_ptr[R], *sb_ptr[R];
  const char *act[NT];
#pragma unroll
  for (int r = 0; r < R; r++) {
    wa_ptr[r] = wa0[r];
    wb_ptr[r] = wb0[r];
    sa_ptr[r] = sa0[r];
    sb_ptr[r] = sb0[r];
  }
#pragma unroll
  for (int nt = 0; nt < NT; nt++) act[nt] = act0[nt];
  int s = s0;
  for (; s + (U - 1) * STEP < nslabs; s += U * STEP) {
    lean_slabs<FMT, ACT, NT, R, U, MUL, STEP>(wa_ptr, wb_ptr, sa_ptr, sb_ptr, sstep, act, asw, s, table, acc);
#pragma unroll
    for (int r = 0; r < R; r++) {
      wa_ptr[r] += U * STEP * 64;
      wb_ptr[r] += U * STEP * 64;
      sa_ptr[r] += U * sstep;
      sb_ptr[r] += U * sstep;
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) act[nt] += U * STEP * kSlab;
  }
  for (; U > 1 && s < nslabs; s += STEP) { /* the last slabs, fewer than U per warp */
    lean_slabs<FMT, ACT, NT, R, 1, MUL, STEP>(wa_ptr, wb_ptr, sa_ptr, sb_ptr, sstep, act, asw, s, table, acc);
#pragma unroll
    for (int r = 0; r < R; r++) {
      wa_ptr[r] += STEP * 64;
      wb_ptr[r] += STEP * 64;
      sa_ptr[r] += sstep;
      sb_ptr[r] += sstep;
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) act[nt] += STEP * kSlab;
  }
}

/* lean_stream for one token tile, a compile-time K (KC) and the 128x4 scale layout, on whole 32-row
 * groups (no row clamped): the 2R rows of a warp lie 8 rows apart, so their code addresses are one
 * pointer plus immediates (j * 8 * KC / 2 bytes) and their scale bytes one pointer plus j * 128
 * (rows g + 8j of a 32-row block of the 128x4 layout), and the next slab's scales lie 1024 bytes on
 * (NVFP4: two 4-column tiles of 512). The loop then advances three pointers instead of 4R + 1 and
 * ptxas has no 64-bit pairs to copy (the generic walk spends 30-38 of its 375-383 instructions per
 * slab group on them, sm_90a). w0 / s0 / act0: this warp's row g codes, scale bytes and activation
 * row at slab s_begin. PAIRED (R = 2, the MoE gate_up GEMM with SiLU*up in its epilogue): tile 1 is
 * the 16 rows tile1_codes code bytes and tile1_scales scale bytes after tile 0 (the up rows I
 * further on: I * KC / 2 and, I a multiple of 128 in the 128x4 layout, I * KC / 16). */
template <int ACT, int R, bool MUL, int STEP, int KC, bool PAIRED = false>
__device__ __forceinline__ void lean_stream_fixed_k(const uint8_t *w0, const uint8_t *s0, const char *act0,
                                                    int s_begin, int nslabs, const uint32_t *table,
                                                    float acc[R][1][4], int64_t tile1_codes = 0,
                                                    int64_t tile1_scales = 0) {
  static_assert(KC % 128 == 0 && KC > 0, "K: whole slabs");
  static_assert(!PAIRED || R == 2, "a paired walk has two tiles");
  constexpr int64_t kRow8 = 8 * (KC / 2); /* code bytes between rows g and g + 8 */
  constexpr int kScaleRow8 = 128, kScaleSlab = 1024;
  const scale_walk asw[1] = {{NULL, 0}};
  const uint8_t *w = w0, *sc = s0;
  const char *act = act0;
  for (int s = s_begin; s < nslabs; s += STEP) {
    const uint8_t *wa[R], *wb[R], *sa[R], *sb[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
      const uint8_t *wt = PAIRED ? w + r * tile1_codes : w + 2 * r * kRow8;
      const uint8_t *st = PAIRED ? sc + r * tile1_scales : sc + 2 * r * kScaleRow8;
      wa[r] = wt;
      wb[r] = wt + kRow8;
      sa[r] = st;
      sb[r] = st + kScaleRow8;
    }
    lean_slabs<FP4_FORMAT_NVFP4, ACT, 1, R, 1, MUL, STEP>(wa, wb, sa, sb, 0, &act, asw, s, table, acc);
    w += STEP * 64;
    sc += STEP * kScaleSlab;
    act += STEP * act_walk<ACT>::kSlab;
  }
}

} // namespace

#endif
