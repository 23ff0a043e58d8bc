/*
 * The small-M (decode) GEMM's entry point: the launch rules of fp4_cuda_gemm_small_m (configs:
 * config/dense_config.c), the W4A4 prologue route, and the hand-off to the kernels of the weight
 * format (gemm_small_m_nvfp4.cu / gemm_small_m_mxfp4.cu; kernels, numerics and exactness in
 * gemm_small_m_kernels.cuh).
 */
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/small_m_common.cuh"
#include "backends/cuda/small_m_gemm.cuh"
#include "fp4kit.h"

namespace {

/* W4A4 through a prologue ("small-m.pro.*"): the FP4 activations are dequantized once per GEMM to
 * bf16 (M x K x 2 bytes, at most 1 MB at M = 64, K = 8192: it stays in L2) in the context
 * workspace, then the W4A16 bf16 kernel of the same rows, warps and register cap runs on them
 * unchanged. The in-loop path decodes every activation element once per CTA (and 8 token rows per
 * tile even at M = 1); the prologue decodes it once per GEMM, leaving the streaming loop the
 * W4A16 instruction mix. Exact: e2m1 x E4M3 has at most 6 significant bits, e2m1 x 2^(e-127) at
 * most 2, and bf16 has FP32's exponent range (subnormals included), so the staged values are the
 * ones the in-loop decode forms in bf16 registers (overflow to inf and NaN scales included) and the
 * results equal the in-loop configuration's bit for bit (tests/test_cuda.c checks both). */
struct dequant_a_call {
  cudaStream_t stream;
  int pdl;
};

int launch_w4a16_of(const fp4_cuda_gemm_args *w4a16, void *user) {
  const dequant_a_call *c = static_cast<const dequant_a_call *>(user);
  return fp4_cuda_gemm_small_m(w4a16, c->stream, c->pdl); /* dequant_a is 0 there: the plain bf16 path */
}

} // namespace

extern "C" int64_t fp4_cuda_gemm_small_m_smem(int warps, int64_t m, int rows) {
  return (int64_t)fp4_small_m_smem(warps, m, rows);
}

extern "C" int fp4_cuda_gemm_small_m(const fp4_cuda_gemm_args *a, void *stream, int pdl) {
  if (a->m < 1 || a->m > 64 || a->k % 128 || a->warps < 1 || a->warps > kMaxWarps) return (int)cudaErrorInvalidValue;
  /* Row tiles x token tiles <= 8 keeps the accumulators in registers (ptxas spills beyond). */
  if (a->rows != 16 && !(a->rows == 32 && a->m <= 32) && !(a->rows == 64 && a->m <= 16) &&
      a->min_blocks != FP4_CUDA_SMALL_M_SHARED_ACT)
    return (int)cudaErrorInvalidValue;
  /* The shared-activation kernel: 8 warps, 64 rows, M <= 32, 16-bit activations. */
  if (a->min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT &&
      (a->warps != 8 || a->rows != 64 || a->m > 32 ||
       (a->act != FP4_CUDA_ACT_BF16 && a->act != FP4_CUDA_ACT_F16 && !a->dequant_a)))
    return (int)cudaErrorInvalidValue;
  /* Lean kernels: 4 warps, 16 rows (M <= 16) or 32 (M <= 8), 6 or 8 CTAs per SM (0: the classic kernels). */
  if (a->min_blocks != 0 && a->min_blocks != FP4_CUDA_SMALL_M_SHARED_ACT && (a->warps != kLeanWarps || a->rows > 32 || a->m > (a->rows == 32 ? 8 : 16) ||
                             (a->min_blocks != 6 && a->min_blocks != 8)))
    return (int)cudaErrorInvalidValue;
  /* K split over a cluster: 16-row classic CTAs of 4 or 8 warps, M <= 16, bf16/f16 activations (or
   * FP4 through the prologue), every warp at least one slab, at most 8 CTAs (the portable cluster). */
  if (a->ksplit > 1 &&
      (a->ksplit > 8 || a->rows != 16 || a->min_blocks || a->warps < 4 || a->m > 16 ||
       a->k / 128 < (int64_t)a->ksplit * a->warps ||
       (a->act != FP4_CUDA_ACT_BF16 && a->act != FP4_CUDA_ACT_F16 && !a->dequant_a)))
    return (int)cudaErrorInvalidValue;
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
  p.alpha_device = a->alpha_device;
  cudaStream_t s = (cudaStream_t)stream;
  if (a->dequant_a) {
    if (a->act != FP4_CUDA_ACT_FP4) return (int)cudaErrorInvalidValue;
    dequant_a_call c = {s, pdl};
    return fp4_cuda_gemm_via_bf16_a(a, launch_w4a16_of, &c, s, pdl);
  }
  cudaError_t e = a->format == FP4_FORMAT_NVFP4
                      ? fp4_cuda_small_m_launch_nvfp4(p, a->act, a->warps, a->rows, a->min_blocks, a->ksplit, s, pdl)
                      : fp4_cuda_small_m_launch_mxfp4(p, a->act, a->warps, a->rows, a->min_blocks, a->ksplit, s, pdl);
  return (int)e;
}
