/*
 * Small-M (decode) GEMMs: out[M, N] = scale * A[M, K] * dq(W)[N, K]^T for M <= 64, on SM80+.
 *
 * Decode is bound by the bytes of the FP4 weights (0.5625 per weight), so the kernels stream W
 * with 16-byte loads that bypass L1, several 128-K slabs in flight per warp, and do the math on
 * tensor cores (mma.sync m16n8k16) with the weights as the 16-row A operand and up to 8 tokens per
 * B tile ("swap AB"), because CUDA-core FMAs cannot keep up with HBM at M = 4..64.
 *
 * Work split: a CTA owns 16, 32 or 64 weight rows (R tiles of 16); its warps split K (warp w takes
 * slabs w, w + warps, ...) and reduce through shared memory in a fixed order, so results are
 * deterministic run to run. With R > 1 a warp loads (and for W4A4 decodes) each activation
 * fragment once for R weight tiles: the activation work per weight shrinks R-fold.
 *
 * Exactness (SPEC 3): e2m1 codes decode to bf16/f16 exactly with byte permutes; an NVFP4 weight
 * e2m1 * e4m3 is exact in bf16 and f16, so the block scale is applied with a 16-bit multiply. An
 * MXFP4 scale 2^(e-127) is not representable in 16 bits in general, so per row and 128-K slab the
 * kernel factors it as 2^(e - emax) (16-bit, exact while the slab's blocks lie within 2^126 (bf16)
 * or 2^22 (f16) of each other) times 2^(emax-127), applied to the slab's FP32 partial sum.
 * f32 activations are split into three bf16 parts (hi + mid + lo = x exactly) and multiplied on
 * three MMAs, keeping FP32 accuracy. All sums are FP32; alpha and the multipliers scale the FP32
 * result once.
 *
 * K permutation: within each 8-element group the kernel pairs element i with element i + 4 in one
 * 32-bit register (that is what the nibble decode produces cheaply); the activation fragments
 * use the same pairing, so the dot product is unchanged.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/launch.cuh"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

constexpr int kMaxWarps = 8;

struct gemm_params {
  const uint8_t *b;
  const uint8_t *b_scales;
  const void *a;
  const uint8_t *a_scales;
  void *out;
  int64_t lda, ldo, m, n, k, C;
  int b_layout, a_layout, out_dtype;
  float scale;
};

/* Weights are read exactly once: keep them out of L1, which holds the re-read activations. */
__device__ __forceinline__ uint4 ld_stream(const uint8_t *ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ uint4 ld_act(const void *ptr) { return __ldg(static_cast<const uint4 *>(ptr)); }

/* Eight e2m1 codes (element i in nibble i) -> four pairs p[i] = (elem i, elem i+4) as bf16x2 or
 * f16x2 bits, exact, without scale. Byte permutes look the magnitudes up in register tables; the
 * sign bits of elements i and i+4 sit 16 bits apart, so one shift puts both in place. */
template <bool F16>
__device__ __forceinline__ void decode8(uint32_t w, uint32_t p[4]) {
  const uint32_t mag = w & 0x77777777u;
  if (F16) { /* f16 values of e2m1 have a zero low byte */
    const uint32_t h0 = __byte_perm(0x3E3C3800u, 0x46444240u, mag);
    const uint32_t h1 = __byte_perm(0x3E3C3800u, 0x46444240u, mag >> 16);
    const uint32_t b01 = __byte_perm(h0, h1, 0x5140), b23 = __byte_perm(h0, h1, 0x7362);
    p[0] = __byte_perm(b01, 0u, 0x1404);
    p[1] = __byte_perm(b01, 0u, 0x3424);
    p[2] = __byte_perm(b23, 0u, 0x1404);
    p[3] = __byte_perm(b23, 0u, 0x3424);
  } else {
    const uint32_t h0 = __byte_perm(0x3F3F3F00u, 0x40404040u, mag);
    const uint32_t h1 = __byte_perm(0x3F3F3F00u, 0x40404040u, mag >> 16);
    const uint32_t l0 = __byte_perm(0xC0800000u, 0xC0804000u, mag);
    const uint32_t l1 = __byte_perm(0xC0800000u, 0xC0804000u, mag >> 16);
    const uint32_t a01 = __byte_perm(l0, l1, 0x5140), a23 = __byte_perm(l0, l1, 0x7362);
    const uint32_t b01 = __byte_perm(h0, h1, 0x5140), b23 = __byte_perm(h0, h1, 0x7362);
    p[0] = __byte_perm(a01, b01, 0x5140);
    p[1] = __byte_perm(a01, b01, 0x7362);
    p[2] = __byte_perm(a23, b23, 0x5140);
    p[3] = __byte_perm(a23, b23, 0x7362);
  }
  p[0] |= (w << 12) & 0x80008000u;
  p[1] |= (w << 8) & 0x80008000u;
  p[2] |= (w << 4) & 0x80008000u;
  p[3] |= w & 0x80008000u;
}

template <bool F16>
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  if (F16) {
    __half2 x = *reinterpret_cast<__half2 *>(&a), y = *reinterpret_cast<__half2 *>(&b);
    __half2 z = __hmul2(x, y);
    r = *reinterpret_cast<uint32_t *>(&z);
  } else {
    __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162 *>(&a), y = *reinterpret_cast<__nv_bfloat162 *>(&b);
    __nv_bfloat162 z = __hmul2(x, y);
    r = *reinterpret_cast<uint32_t *>(&z);
  }
  return r;
}

/* An E4M3 scale byte as a 16-bit pair (exact in bf16 and f16): W4A4 activation scales. */
template <bool F16>
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t byte) {
  const float s = fp4_e4m3_decode_inline((uint8_t)byte);
  const uint32_t h = F16 ? fp4_f16_from_f32_inline(s) : fp4_bf16_from_f32_inline(s);
  return h | (h << 16);
}

/* 2^d as a 16-bit pair, for d up to 127 (bf16) or 15 (f16); 0 below the smallest subnormal. */
template <bool F16>
__device__ __forceinline__ uint32_t pow2_pair(int d) {
  uint32_t h;
  if (F16) h = d >= -14 ? (uint32_t)(15 + d) << 10 : d >= -24 ? 1u << (d + 24) : 0u;
  else h = d >= -126 ? (uint32_t)(127 + d) << 7 : d >= -133 ? 1u << (d + 133) : 0u;
  return h | (h << 16);
}

/* A UE8M0 activation scale 2^(e-127) as a bf16 pair (W4A4 stages FP4 activations as bf16). */
__device__ __forceinline__ uint32_t ue8m0_bf16_pair(uint32_t e) {
  const uint32_t h = e == 0xFF ? 0x7FC0u : e == 0 ? 0x0040u : e << 7;
  return h | (h << 16);
}

/* Weight codes, cheaply: sign to bit 15, the three magnitude bits to the two low exponent bits and
 * the top mantissa bit. That makes the 16-bit value e2m1 * 2^-126 (bf16) or e2m1 * 2^-14 (f16),
 * subnormal for the 0.5 code and exact; the block-scale multiply then removes the power of two.
 * Pairs p[i] = (element i, element i+4) as in decode8. */
template <bool F16>
__device__ __forceinline__ void decode8_raw(uint32_t w, uint32_t p[4]) {
  if (F16) {
    p[0] = ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
    p[1] = ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
    p[2] = ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
    p[3] = ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
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

/* Activation addressing of one thread: token g of tile 0, its 32 K elements of slab 0. */
template <int ACT>
struct act_walk {
  static constexpr int kElem = ACT == FP4_CUDA_ACT_F32 ? 4 : 2; /* bytes per element, dense      */
  static constexpr int kSlab = ACT == FP4_CUDA_ACT_FP4 ? 64 : 128 * kElem; /* bytes per slab   */
  static constexpr int kGroup = ACT == FP4_CUDA_ACT_FP4 ? 4 : 8 * kElem;   /* bytes per 8-group */
  const char *base;
  int64_t tile; /* bytes between token tiles (8 rows) */
};

/* The B fragments of token m = 8 nt + g for 8-group q of slab s: pairs (x_i, x_i+4), i = 0..3, in
 * x[0] (and the mid and lo parts of f32 activations in x[1], x[2]); zero past M. */
template <int FMT, int ACT>
__device__ __forceinline__ void activation_group(const char *slab, int64_t tile, bool valid, int nt, int q,
                                                 uint32_t asc, uint32_t x[3][4]) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  const char *src = slab + nt * tile + q * act_walk<ACT>::kGroup;
  if (ACT == FP4_CUDA_ACT_BF16 || ACT == FP4_CUDA_ACT_F16) {
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

/* One 128-K slab of one warp: R tiles of 16 rows x 128 K of weights times every token tile. Loops
 * run over the four 8-groups q of the thread's 32 K elements so only one group's fragments are live;
 * each activation fragment is loaded (and, for W4A4, decoded) once and used by all R weight tiles. */
template <int FMT, int ACT, int NT, int R>
__device__ __forceinline__ void slab_mma(const char *slab, int64_t tile, const scale_walk *asw, const bool *valid,
                                         int s, const uint32_t *table, const uint4 *wa, const uint4 *wb,
                                         const uint32_t *sca, const uint32_t *scb, float acc[R][NT][4]) {
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
      decode8_raw<F16>(wa_q, pa[r]);
      decode8_raw<F16>(wb_q, pb[r]);
#pragma unroll
      for (int i = 0; i < 4; i++) {
        pa[r][i] = hmul2<F16>(pa[r][i], fa[r][q >> 1]);
        pb[r][i] = hmul2<F16>(pb[r][i], fb[r][q >> 1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      uint32_t x[3][4];
      activation_group<FMT, ACT>(slab, tile, valid[nt], nt, q, asc[nt], x);
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

__device__ __forceinline__ void store_out(const gemm_params &p, int64_t row0, int nt, int c, int l, float v) {
  const int g = l >> 2, t = l & 3;
  const int64_t row = row0 + g + (c >= 2 ? 8 : 0), m = (int64_t)nt * 8 + 2 * t + (c & 1);
  if (row >= p.n || m >= p.m) return;
  v = __fmul_rn(v, p.scale);
  const int64_t i = m * p.ldo + row;
  if (p.out_dtype == FP4_DTYPE_F32) static_cast<float *>(p.out)[i] = v;
  else if (p.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(p.out)[i] = fp4_bf16_from_f32_inline(v);
  else static_cast<uint16_t *>(p.out)[i] = fp4_f16_from_f32_inline(v);
}

/* R: 16-row weight tiles per CTA (every warp covers all of them on its slabs, so an activation
 * fragment serves R tiles). U: slabs whose weights one warp keeps in flight (16 B per lane, row and
 * tile each). Up to 16 tokens two CTAs share an SM (128 registers); with 4 or 8 token tiles, or
 * several row tiles, the accumulators need more registers. */
template <int FMT, int ACT, int NT, int U, int R>
__global__ void __launch_bounds__(kMaxWarps * 32, NT * R >= 4 ? 1 : 2) gemm_small_m_kernel(gemm_params p) {
  constexpr bool NV = FMT == FP4_FORMAT_NVFP4;
  extern __shared__ float red[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = (int64_t)blockIdx.x * 16 * R;
  const int nslabs = (int)(p.k >> 7);
  const uint8_t *wa_ptr[R], *wb_ptr[R];
  scale_walk swa[R], swb[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    /* Rows past N read row N-1 (valid memory) and are never stored. */
    const int64_t ra = min(row0 + 16 * r + g, p.n - 1), rb = min(row0 + 16 * r + g + 8, p.n - 1);
    wa_ptr[r] = p.b + ra * (p.k >> 1) + 16 * t;
    wb_ptr[r] = p.b + rb * (p.k >> 1) + 16 * t;
    swa[r] = make_walk<NV>(p.b_scales, p.b_layout, p.C, ra, t);
    swb[r] = make_walk<NV>(p.b_scales, p.b_layout, p.C, rb, t);
  }
  act_walk<ACT> aw;
  const int64_t row_bytes = ACT == FP4_CUDA_ACT_FP4 ? p.lda : p.lda * act_walk<ACT>::kElem;
  aw.base = static_cast<const char *>(p.a) + g * row_bytes + t * (act_walk<ACT>::kSlab / 4);
  aw.tile = 8 * row_bytes;
  scale_walk asw[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    asw[nt].base = NULL;
    asw[nt].stride = 0;
    if (ACT == FP4_CUDA_ACT_FP4 && nt * 8 + g < p.m) asw[nt] = make_walk<NV>(p.a_scales, p.a_layout, p.C, nt * 8 + g, t);
  }
  bool valid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) valid[nt] = nt * 8 + g < p.m;
  float acc[R][NT][4];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[r][nt][0] = acc[r][nt][1] = acc[r][nt][2] = acc[r][nt][3] = 0.0f;
  /* NVFP4 weight scale byte -> 16-bit multiplier pair, looked up instead of converted per block. */
  __shared__ uint32_t table[NV ? 256 : 1];
  if (NV) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = nv_weight_scale_pair<ACT == FP4_CUDA_ACT_F16>(i);
    __syncthreads();
  }

  /* The activations of slab s start at aw.base + s * kSlab; walk a pointer instead. */
  const int64_t act_step = (int64_t)warps * act_walk<ACT>::kSlab;
  const char *act_slab = aw.base + (int64_t)warp * act_walk<ACT>::kSlab;

  fp4_pdl_wait(); /* nothing is read before the producer of A (or W) has finished */
  for (int s0 = warp; s0 < nslabs; s0 += warps * U, act_slab += U * act_step) {
    uint4 wa[U][R], wb[U][R];
    uint32_t sca[U][R], scb[U][R];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < nslabs) {
#pragma unroll
        for (int r = 0; r < R; r++) {
          wa[u][r] = ld_stream(wa_ptr[r] + (int64_t)s * 64);
          wb[u][r] = ld_stream(wb_ptr[r] + (int64_t)s * 64);
          sca[u][r] = load_scales<NV>(swa[r], s);
          scb[u][r] = load_scales<NV>(swb[r], s);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int s = s0 + u * warps;
      if (s < nslabs)
        slab_mma<FMT, ACT, NT, R>(act_slab + u * act_step, aw.tile, asw, valid, s, table, wa[u], wb[u], sca[u], scb[u],
                                  acc);
    }
  }
  fp4_pdl_launch_dependents(); /* every input has been read */

  if (warps == 1) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) store_out(p, row0 + 16 * r, nt, c, lane, acc[r][nt][c]);
    return;
  }
  constexpr int kPerWarp = R * NT * 128; /* floats of one warp's partial results */
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) red[warp * kPerWarp + ((r * NT + nt) * 4 + c) * 32 + lane] = acc[r][nt][c];
  __syncthreads();
  for (int idx = threadIdx.x; idx < kPerWarp; idx += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < warps; w++) v = __fadd_rn(v, red[w * kPerWarp + idx]); /* fixed order */
    const int r = idx / (NT * 128), rest = idx % (NT * 128);
    store_out(p, row0 + 16 * r, rest >> 7, (rest >> 5) & 3, rest & 31, v);
  }
}

int tiles_for(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8; }

size_t smem_for(int warps, int64_t m, int rows) {
  return warps > 1 ? (size_t)warps * (size_t)(rows / 16) * (size_t)tiles_for(m) * 128 * sizeof(float) : 0;
}

template <int FMT, int ACT, int NT, int U, int R>
cudaError_t launch_one(const gemm_params &p, int warps, cudaStream_t stream, int pdl) {
  const int64_t ctas = (p.n + 16 * R - 1) / (16 * R);
  const size_t smem = smem_for(warps, p.m, 16 * R);
  if (smem > 48 * 1024) { /* above the default dynamic shared memory limit: opt in */
    const cudaError_t e = cudaFuncSetAttribute(gemm_small_m_kernel<FMT, ACT, NT, U, R>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }
  return fp4_cuda_launch(gemm_small_m_kernel<FMT, ACT, NT, U, R>, dim3((unsigned)ctas), dim3(32 * warps), smem,
                         stream, pdl, p);
}

/* Slabs in flight: 4 x 32 B per lane in total at one token tile (16 rows: four slabs), fewer as the
 * token tiles' registers grow. 32 rows take M <= 32 and 64 rows M <= 16: row tiles x token tiles
 * <= 8 keeps the accumulators in registers. */
template <int FMT, int ACT>
cudaError_t launch_act(const gemm_params &p, int warps, int rows, cudaStream_t stream, int pdl) {
  if (rows == 64) {
    if (p.m <= 8) return launch_one<FMT, ACT, 1, 1, 4>(p, warps, stream, pdl);
    return launch_one<FMT, ACT, 2, 1, 4>(p, warps, stream, pdl); /* M <= 16: the caller refuses more */
  }
  if (rows == 32) {
    if (p.m <= 8) return launch_one<FMT, ACT, 1, 2, 2>(p, warps, stream, pdl);
    if (p.m <= 16) return launch_one<FMT, ACT, 2, 1, 2>(p, warps, stream, pdl);
    return launch_one<FMT, ACT, 4, 1, 2>(p, warps, stream, pdl); /* M <= 32: the caller refuses more */
  }
  if (p.m <= 8) return launch_one<FMT, ACT, 1, 4, 1>(p, warps, stream, pdl);
  if (p.m <= 16) return launch_one<FMT, ACT, 2, 2, 1>(p, warps, stream, pdl);
  if (p.m <= 32) return launch_one<FMT, ACT, 4, 1, 1>(p, warps, stream, pdl);
  return launch_one<FMT, ACT, 8, 1, 1>(p, warps, stream, pdl);
}

template <int FMT>
cudaError_t launch_fmt(const gemm_params &p, int act, int warps, int rows, cudaStream_t stream, int pdl) {
  switch (act) {
  case FP4_CUDA_ACT_BF16: return launch_act<FMT, FP4_CUDA_ACT_BF16>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_F16: return launch_act<FMT, FP4_CUDA_ACT_F16>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_F32: return launch_act<FMT, FP4_CUDA_ACT_F32>(p, warps, rows, stream, pdl);
  case FP4_CUDA_ACT_FP4: return launch_act<FMT, FP4_CUDA_ACT_FP4>(p, warps, rows, stream, pdl);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace

extern "C" int64_t fp4_cuda_gemm_small_m_smem(int warps, int64_t m, int rows) { return (int64_t)smem_for(warps, m, rows); }

extern "C" int fp4_cuda_gemm_small_m(const fp4_cuda_gemm_args *a, void *stream, int pdl) {
  if (a->m < 1 || a->m > 64 || a->k % 128 || a->warps < 1 || a->warps > kMaxWarps) return (int)cudaErrorInvalidValue;
  /* Row tiles x token tiles <= 8 keeps the accumulators in registers (ptxas spills beyond). */
  if (a->rows != 16 && !(a->rows == 32 && a->m <= 32) && !(a->rows == 64 && a->m <= 16)) return (int)cudaErrorInvalidValue;
  gemm_params p;
  p.b = a->b;
  p.b_scales = a->b_scales;
  p.a = a->a;
  p.a_scales = a->a_scales;
  p.out = a->out;
  p.lda = a->lda;
  p.ldo = a->ldo;
  p.m = a->m;
  p.n = a->n;
  p.k = a->k;
  p.C = a->k / (a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  p.b_layout = a->b_layout;
  p.a_layout = a->a_layout;
  p.out_dtype = a->out_dtype;
  /* NVFP4 weights are decoded as e2m1 * scale * 2^-8 (see nv_weight_scale_pair). */
  p.scale = a->format == FP4_FORMAT_NVFP4 ? a->scale * 256.0f : a->scale;
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = a->format == FP4_FORMAT_NVFP4 ? launch_fmt<FP4_FORMAT_NVFP4>(p, a->act, a->warps, a->rows, s, pdl)
                                                : launch_fmt<FP4_FORMAT_MXFP4>(p, a->act, a->warps, a->rows, s, pdl);
  return (int)e;
}
