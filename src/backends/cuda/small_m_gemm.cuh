/*
 * The dense small-M GEMM's kernel parameters and output store, shared by gemm_small_m.cu (the
 * K-splitting kernels) and gemm_small_m_sa.cu (the shared-activation kernel).
 */
#ifndef FP4_BACKENDS_CUDA_SMALL_M_GEMM_CUH
#define FP4_BACKENDS_CUDA_SMALL_M_GEMM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backends/cuda/cuda_kernels.h"
#include "format/codec.h"
#include "fp4kit.h"

/* Identical in both files (one definition): fp4_cuda_gemm_small_m_sa takes it across them. */
struct gemm_params {
  const uint8_t *b;
  const uint8_t *b_scales;
  const void *a;
  const uint8_t *a_scales;
  void *out;
  int64_t lda, ldo, m, n, k, C;
  int b_layout, a_layout, out_dtype;
  float scale;
  const float *alpha_device; /* NULL, or multiplies scale on the GPU (fp4_cuda_gemm_args) */
};

namespace {

/* v times scale, then times *alpha_device when one is given: loaded here, in the epilogue after
 * griddepcontrol.wait (a producer kernel may have written it), and nowhere else, so the streaming
 * loop's registers stay as they were (a scale kept in a register spilled the lean kernels on
 * sm_100a/sm_120a). With a host scale of 1, scale is 1 or 2^8 (NVFP4), the first product is exact and
 * the result has the bits of v times the by-value alpha (barring |v| >= 2^120). */
__device__ __forceinline__ void store_out(const gemm_params &p, int64_t row0, int nt, int c, int l, float v) {
  const int g = l >> 2, t = l & 3;
  const int64_t row = row0 + g + (c >= 2 ? 8 : 0), m = (int64_t)nt * 8 + 2 * t + (c & 1);
  if (row >= p.n || m >= p.m) return;
  v = __fmul_rn(v, p.scale);
  if (p.alpha_device) v = __fmul_rn(v, __ldg(p.alpha_device));
  const int64_t i = m * p.ldo + row;
  if (p.out_dtype == FP4_DTYPE_F32) static_cast<float *>(p.out)[i] = v;
  else if (p.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(p.out)[i] = fp4_bf16_from_f32_inline(v);
  else static_cast<uint16_t *>(p.out)[i] = fp4_f16_from_f32_inline(v);
}

} // namespace

/* The shared-activation kernel for p (gemm_small_m_sa.cu): bf16/f16 activations, M <= 32. */
cudaError_t fp4_cuda_gemm_small_m_sa(const gemm_params *p, int format, int act, cudaStream_t stream, int pdl);

#endif
