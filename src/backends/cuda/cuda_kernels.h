/*
 * The C interface between the cuda backend's host code (cuda_backend.c, plain C) and its kernels
 * (*.cu). Functions return a cudaError_t as int so the C side needs no CUDA headers to call them.
 */
#ifndef FP4_BACKENDS_CUDA_KERNELS_H
#define FP4_BACKENDS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backends/cuda/config/dense_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runtime-recipe quantization of dense rows (quantize.cu). */
typedef struct fp4_cuda_quantize_args {
  const void *x;       /* [rows, cols] with row stride ld elements                  */
  int64_t rows, cols, ld;
  int x_dtype;         /* fp4_dtype: F32, BF16 or F16                                */
  uint8_t *q;          /* [rows, cols/2] codes                                       */
  uint8_t *scales;     /* every byte of the layout written, padding zero             */
  int format;          /* fp4_format                                                 */
  int layout;          /* fp4_scale_layout                                           */
  float global_scale;  /* NVFP4 encode scale                                         */
  const float *global_scale_device; /* NULL, or the encode scale in device memory, read on the GPU
                                       in place of global_scale (after the launch's dependencies) */
} fp4_cuda_quantize_args;

int fp4_cuda_quantize(const fp4_cuda_quantize_args *args, void *stream, int pdl);

/* Activation kinds of the small-M GEMM. */
enum { FP4_CUDA_ACT_BF16 = 0, FP4_CUDA_ACT_F16 = 1, FP4_CUDA_ACT_F32 = 2, FP4_CUDA_ACT_FP4 = 3 };

/* out[M, N] = scale * A[M, K] * dq(B)[N, K]^T for M <= 64, K % 128 == 0 (gemm_small_m.cu). */
/* fp4_cuda_gemm_args.min_blocks of the shared-activation small-M kernel (8 warps in two K groups,
 * 64 rows, M <= 32, bf16/f16 activations; gemm_small_m.cu). */
enum { FP4_CUDA_SMALL_M_SHARED_ACT = 1 };

typedef struct fp4_cuda_gemm_args {
  int format;                /* fp4_format of B (and of A for FP4_CUDA_ACT_FP4)             */
  int act;                   /* FP4_CUDA_ACT_*                                               */
  const void *a;             /* dense activations (row stride lda elements) or FP4 codes      */
  int64_t lda;               /* elements (dense) or bytes (FP4: K/2)                          */
  const uint8_t *a_scales;   /* FP4 activations: scales in a_layout                          */
  int a_layout;
  const uint8_t *b;          /* weights [N, K/2]                                              */
  const uint8_t *b_scales;
  int b_layout;
  void *out;                 /* [M, N] with row stride ldo elements                           */
  int64_t ldo;
  int out_dtype;             /* fp4_dtype: F32, BF16 or F16                                   */
  int64_t m, n, k;
  float scale;               /* alpha times the per-tensor multipliers                        */
  const float *alpha_device; /* NULL, or a device f32 the kernels multiply scale by on the GPU,
                                read after griddepcontrol.wait (a producer kernel may write it) */
  int warps;                 /* warps per CTA splitting K (1, 2, 4, 8)                        */
  int rows;                  /* weight rows per CTA: 16, 32 (M <= 32) or 64 (M <= 16)         */
  int min_blocks;            /* 0, or 6/8: the lean 4-warp kernel capped for that many CTAs/SM;
                                FP4_CUDA_SMALL_M_SHARED_ACT: the shared-activation kernel */
  int dequant_a;             /* small-M W4A4: 1 = FP4 activations dequantized to bf16 once per GEMM,
                                then the W4A16 bf16 kernel of the same rows/warps/min_blocks     */
  int ksplit;                /* small-M: 0 or 1, or 2-8: the K slabs split over a thread block cluster
                                of that many CTAs per 16-row group (SM90+, M <= 16, bf16/f16)    */
  void *workspace;           /* the context's device workspace, at least the bytes the config's
                                workspace function names (NULL when it names none)               */
  int sms;                   /* SMs of the device (the context's cached count): split-K choices  */
} fp4_cuda_gemm_args;

/* Bytes of the bf16 copy of W4A4 activations the prologue configs stage in the workspace (M x K x 2,
 * rounded up to 256 so what follows it stays aligned). */
static inline size_t fp4_cuda_bf16_a_bytes(int64_t m, int64_t k) {
  return ((size_t)m * (size_t)k * 2 + 255) & ~(size_t)255;
}

int fp4_cuda_gemm_small_m(const fp4_cuda_gemm_args *args, void *stream, int pdl);
/* W4A4 through a bf16 prologue, shared by the small-M and the register-decode large-M families
 * (gemm_large_m_rd.cu): dequantizes the FP4 activations of a (exactly, K % 32 == 0) into the first
 * fp4_cuda_bf16_a_bytes(M, K) of a->workspace, then calls gemm(w4a16, user) where w4a16 is a with
 * those bf16 rows as activations (act BF16, lda K, dequant_a 0). The prologue kernel waits for its
 * producers (PDL). Returns the first cudaError_t (cudaErrorInvalidValue without a workspace). */
int fp4_cuda_gemm_via_bf16_a(const fp4_cuda_gemm_args *a, int (*gemm)(const fp4_cuda_gemm_args *w4a16, void *user),
                             void *user, void *stream, int pdl);
/* out[rows, k] (row stride k) = the exact bf16 values of FP4 rows (codes [rows, k/2], scales in
 * layout; k % 32 == 0): the values the tensor-core kernels form in registers when they decode FP4
 * activations in their loop (gemm_large_m_rd.cu). Waits for its producers (PDL). */
int fp4_cuda_dequant_fp4_rows(const void *codes, const uint8_t *scales, int format, int layout, int64_t rows,
                              int64_t k, uint16_t *out, void *stream, int pdl);
/* Shared memory the GEMM needs for a warp count, M and rows per CTA (the split-K reduction buffer). */
int64_t fp4_cuda_gemm_small_m_smem(int warps, int64_t m, int rows);

/* Large-M GEMMs: any M >= 1, K % 32 == 0, bf16/f16 activations or FP4 (W4A4); each runs the tile of
 * a config of its family (config/dense_config.h; the config's check there has passed) and returns
 * the cudaError_t. mma.sync tiles (gemm_large_m.cu); register-decode tiles, FP4 weights decoded in
 * registers (gemm_large_m_rd.cu); sm_90a register-A wgmma tiles, out^T = dq(W) * A^T with the weights decoded into wgmma's register operand
 * (gemm_large_m_wgra.cu). The ".pro" configs take W4A4 through the bf16 prologue and args->workspace
 * (config/dense_config.c, fp4_dense_workspace). */
int fp4_cuda_gemm_large_m(const fp4_cuda_gemm_args *args, const fp4_dense_config *config, void *stream, int pdl);
int fp4_cuda_gemm_large_m_rd(const fp4_cuda_gemm_args *args, const fp4_dense_config *config, void *stream, int pdl);
int fp4_cuda_gemm_wgra(const fp4_cuda_gemm_args *args, const fp4_dense_config *config, void *stream, int pdl);
/* 1 when device (SM 9.0) runs this binary's sm_90a code of the register-A tiles, else 0 with the
 * reason; probed once per device (cudaFuncGetAttributes), so a context asks once. */
int fp4_cuda_wgra_image_ok(int device, char *why, size_t why_size);
/* The register-A tiles' consumer decode of a test tile for every code x scale byte (format,
 * FP4_CUDA_ACT_BF16/F16; mul: the multiply form of the dense two-CTA tiles, NVFP4 with bf16 only) into
 * host_out (4096 x 16 words, see gemm_large_m_wgra.cu). */
int fp4_cuda_wgra_decode_selftest(int format, int act, int mul, uint32_t *host_out);

/* cudaFuncGetAttributes on the kernels: cudaErrorNoKernelImageForDevice (or
 * cudaErrorInvalidDeviceFunction) when the binary carries no code for the current device. */
int fp4_cuda_kernel_image_status(void);

#ifdef __cplusplus
}
#endif

#endif
