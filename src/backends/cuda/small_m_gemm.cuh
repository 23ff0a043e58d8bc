/*
 * The dense small-M GEMM's kernel parameters and output store, shared by the K-splitting kernels
 * (gemm_small_m_kernels.cuh, built per format by gemm_small_m_nvfp4.cu and gemm_small_m_mxfp4.cu,
 * entered through gemm_small_m.cu) and gemm_small_m_sa.cu (the shared-activation kernel).
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

/* The device alpha of a CTA, staged in shared memory by fp4_small_m_stage_alpha after griddepcontrol.wait
 * (a producer kernel may have written it): the epilogue reads it with a shared load at a constant
 * address, so no register of the streaming loop, and no address register, is spent on it (a scale
 * held in a register, or a global load in the store, spilled the 64- and 80-register lean kernels on
 * some targets). */
__shared__ float fp4_small_m_alpha;

__device__ __forceinline__ void fp4_small_m_stage_alpha(const gemm_params &p) {
  if (p.alpha_device && threadIdx.x == 0) fp4_small_m_alpha = __ldg(p.alpha_device);
}

/* v times scale, then times the staged device alpha when one is given (visible after the CTA's
 * next barrier). With a host scale of 1, scale is 1 or 2^8 (NVFP4), the first product is exact and the
 * result has the bits of v times the by-value alpha (barring |v| >= 2^120). */
__device__ __forceinline__ void store_out(const gemm_params &p, int64_t row0, int nt, int c, int l, float v) {
  const int g = l >> 2, t = l & 3;
  const int64_t row = row0 + g + (c >= 2 ? 8 : 0), m = (int64_t)nt * 8 + 2 * t + (c & 1);
  if (row >= p.n || m >= p.m) return;
  v = __fmul_rn(v, p.scale);
  if (p.alpha_device) v = __fmul_rn(v, fp4_small_m_alpha);
  const int64_t i = m * p.ldo + row;
  if (p.out_dtype == FP4_DTYPE_F32) static_cast<float *>(p.out)[i] = v;
  else if (p.out_dtype == FP4_DTYPE_BF16) static_cast<uint16_t *>(p.out)[i] = fp4_bf16_from_f32_inline(v);
  else static_cast<uint16_t *>(p.out)[i] = fp4_f16_from_f32_inline(v);
}

} // namespace

/* Warps of the largest K-splitting CTA. */
constexpr int kMaxWarps = 8;

/* Token tiles of 8 a K-splitting kernel runs for m tokens, and the shared memory its warps reduce
 * through (none for one warp). */
inline int fp4_small_m_token_tiles(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8; }
inline size_t fp4_small_m_smem(int warps, int64_t m, int rows) {
  return warps > 1 ? (size_t)warps * (size_t)(rows / 16) * (size_t)fp4_small_m_token_tiles(m) * 128 * sizeof(float) : 0;
}

/* The shared-activation kernel for p (gemm_small_m_sa.cu): bf16/f16 activations, M <= 32. */
cudaError_t fp4_cuda_gemm_small_m_sa(const gemm_params *p, int format, int act, cudaStream_t stream, int pdl);
/* The K-splitting kernels of one weight format (gemm_small_m_nvfp4.cu, gemm_small_m_mxfp4.cu; the
 * kernels are in gemm_small_m_kernels.cuh): act, warps, rows, min_blocks and ksplit as
 * fp4_cuda_gemm_args. */
cudaError_t fp4_cuda_small_m_launch_nvfp4(const gemm_params &p, int act, int warps, int rows, int min_blocks,
                                          int ksplit, cudaStream_t stream, int pdl);
cudaError_t fp4_cuda_small_m_launch_mxfp4(const gemm_params &p, int act, int warps, int rows, int min_blocks,
                                          int ksplit, cudaStream_t stream, int pdl);

#endif
