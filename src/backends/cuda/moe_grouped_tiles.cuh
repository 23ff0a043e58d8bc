/*
 * Pieces of the grouped large-M (MoE prefill) tiles shared by the mma.sync kernel
 * (moe_grouped_large.cu) and the register-A wgmma kernel (gemm_large_m_wgra.cu): the kernel
 * parameters, the numbering of an expert's M tiles and the search for a CTA's expert (explained
 * at the top of moe_grouped_large.cu), and the output write of four columns of one row.
 */
#ifndef FP4_BACKENDS_CUDA_MOE_GROUPED_TILES_CUH
#define FP4_BACKENDS_CUDA_MOE_GROUPED_TILES_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/moe_kernels.h"
#include "format/codec.h"
#include "fp4kit.h"

namespace {

struct glm_params {
  const void *a;           /* dense [*, lda] 16-bit, or FP4 codes [*, K/2] */
  const uint8_t *a_scales; /* W4A4, a_layout */
  const int32_t *a_rows;   /* NULL: identity */
  const uint8_t *w;        /* [E, N, K/2] */
  const uint8_t *w_scales; /* E buffers of w_scale_stride bytes */
  const float *w_mult;     /* [E] or NULL */
  const int64_t *offsets;  /* [E+1] */
  const int32_t *tile_starts; /* dense M tile numbering ([E+1]) for tiles of tile_rows rows, or NULL */
  int64_t tile_rows;
  void *out;
  int64_t lda, ldo, w_expert_bytes, w_scale_stride, experts, rows, n, k, C, a_C, tn;
  int a_layout, w_layout, out_dtype;
  int32_t a_div;
  float alpha, a_mult;
  const float *alpha_device, *a_scale_device; /* device scalars (moe_scalars.cuh), or NULL */
};

/* The kernel parameters of a grouped GEMM whose N tiles are bn wide (the caller validated a). */
inline glm_params glm_params_of(const fp4_cuda_grouped_args *a, int bn) {
  const int bs = a->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK;
  glm_params p;
  p.a = a->a;
  p.a_scales = a->a_scales;
  p.a_rows = a->a_rows;
  p.w = a->w;
  p.w_scales = a->w_scales;
  p.w_mult = a->w_mult;
  p.offsets = a->offsets;
  p.tile_starts = a->tile_starts;
  p.tile_rows = a->tile_starts ? a->tile_rows : 0;
  p.out = a->out;
  p.lda = a->lda;
  p.ldo = a->ldo;
  p.w_expert_bytes = a->n * (a->k / 2);
  p.w_scale_stride = a->w_scale_stride;
  p.experts = a->experts;
  p.rows = a->rows;
  p.n = a->n;
  p.k = a->k;
  p.C = a->k / bs;
  p.a_C = a->k / bs;
  p.tn = (a->n + bn - 1) / bn;
  p.a_layout = a->a_layout;
  p.w_layout = a->w_layout;
  p.out_dtype = a->out_dtype;
  p.a_div = a->a_div;
  p.alpha = a->alpha;
  p.a_mult = a->a_mult;
  p.alpha_device = a->alpha_device;
  p.a_scale_device = a->a_scale_device;
  return p;
}

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

template <int BM>
__device__ __forceinline__ int64_t tile_start(const glm_params &p, int64_t e) {
  return clamp64(__ldg(p.offsets + e), 0, p.rows) / BM + e;
}

/* Warp 0: the last expert e with start(e) <= j (the CTA then checks that j is one of its tiles).
 * DENSE: start(e) from p.tile_starts (the routing kernel's numbering) instead of the bound one. */
template <int BM, bool DENSE = false>
__device__ int64_t find_tile_expert(const glm_params &p, int64_t j, int lane) {
  int64_t a = 0, b = p.experts; /* invariant: start(a) <= j (start(0) = 0), the answer in [a, b) */
  while (b - a > 1) {
    const int64_t step = (b - a + 31) / 32, c = a + lane * step;
    const bool ok = c < b && (DENSE ? (int64_t)__ldg(p.tile_starts + c) : tile_start<BM>(p, c)) <= j;
    const unsigned m = __ballot_sync(0xFFFFFFFFu, ok); /* lane 0 always: c = a */
    const int last = 31 - __clz(m);
    a += last * step;
    b = min(b, a + step);
  }
  return a;
}

__device__ __forceinline__ uint16_t to16(int out_dtype, float v) {
  return out_dtype == FP4_DTYPE_BF16 ? fp4_bf16_from_f32_inline(v) : fp4_f16_from_f32_inline(v);
}

/* The per-expert output scale s = alpha * w_mult * a_mult, formed in double. The contract rounds
 * s * acc once to f32 (docs/moe.md). When s is itself a float, the double product of two floats is
 * exact and its rounding is the correctly rounded f32 product: one FMUL gives the same bits as the
 * two conversions and the DMUL, which the H200 issues at an eighth and a half of the FP32 rate
 * (235 M outputs in DeepSeek-R1's down GEMM at B = 4096). W4A16 layers have s = w_mult. */
struct out_scale {
  double d;
  float f;
  bool single; /* (double)f == d */
};

__device__ __forceinline__ out_scale make_out_scale(double s) {
  const float f = (float)s;
  const out_scale o = {s, f, (double)f == s};
  return o;
}

__device__ __forceinline__ float scaled(const out_scale &s, float v) {
  return s.single ? __fmul_rn(s.f, v) : (float)(s.d * (double)v);
}

/* out[row, col .. col + 3] (as far as N goes) = s * v, rounded once to f32 and then to the output
 * type. */
__device__ __forceinline__ void glm_store4(const glm_params &p, int64_t row, int64_t col, float4 a, const out_scale &s) {
  const float v0 = scaled(s, a.x), v1 = scaled(s, a.y), v2 = scaled(s, a.z), v3 = scaled(s, a.w);
  const int64_t o = row * p.ldo + col;
  const int64_t nv = p.n - col; /* columns left, >= 1 */
  if (p.out_dtype == FP4_DTYPE_F32) {
    float *d = static_cast<float *>(p.out) + o;
    if (nv >= 4 && !(reinterpret_cast<uintptr_t>(d) & 15)) {
      *reinterpret_cast<float4 *>(d) = make_float4(v0, v1, v2, v3);
    } else {
      d[0] = v0;
      if (nv > 1) d[1] = v1;
      if (nv > 2) d[2] = v2;
      if (nv > 3) d[3] = v3;
    }
  } else {
    uint16_t *d = static_cast<uint16_t *>(p.out) + o;
    const uint16_t h0 = to16(p.out_dtype, v0), h1 = to16(p.out_dtype, v1), h2 = to16(p.out_dtype, v2),
                   h3 = to16(p.out_dtype, v3);
    if (nv >= 4 && !(reinterpret_cast<uintptr_t>(d) & 7)) {
      *reinterpret_cast<uint2 *>(d) =
          make_uint2((uint32_t)h0 | ((uint32_t)h1 << 16), (uint32_t)h2 | ((uint32_t)h3 << 16));
    } else {
      d[0] = h0;
      if (nv > 1) d[1] = h1;
      if (nv > 2) d[2] = h2;
      if (nv > 3) d[3] = h3;
    }
  }
}

} // namespace

#endif
