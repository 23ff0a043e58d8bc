/*
 * What the cublaslt and cublas-dequant backends share: a per-context cuBLASLt handle and device
 * workspace, and one TN matmul y[M,N] = x[M,K] * w[N,K]^T whose support is asked of
 * cublasLtMatmulAlgoGetHeuristic (answers remembered per shape).
 */
#ifndef FP4_BACKENDS_CUBLASLT_LT_COMMON_H
#define FP4_BACKENDS_CUBLASLT_LT_COMMON_H

#include "dispatch/backend.h"

/* Shared availability: built with CUDA, a device context, the device present. */
fp4_status fp4_lt_available(fp4_context *ctx, const char *who, char *reason, size_t reason_size);
/* The TN shape of a problem and the names used in reasons. */
const char *fp4_lt_dtype_text(int cuda_type);

#if FP4KIT_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { FP4_LT_MAX_ALGOS = 4, FP4_LT_MEMO = 32 };
#define FP4_LT_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's own scratch, in front of the operand scratch */

/* One matmul in cuBLAS terms: A = w (op T, lda), B = x (op N, ldb), D = y as N x M column-major. */
typedef struct fp4_lt_gemm {
  int ab_type;      /* cudaDataType_t of w and x                                   */
  int d_type;       /* cudaDataType_t of y                                         */
  int scale_mode;   /* cublasLtMatmulMatrixScale_t for w and x; -1 for none        */
  int64_t m, n, k;  /* fp4kit's M, N, K                                            */
  int64_t lda, ldb, ldd;
} fp4_lt_gemm;

typedef struct fp4_lt_answer {
  fp4_lt_gemm g;
  cublasStatus_t status;
  int count;
  cublasLtMatmulHeuristicResult_t algos[FP4_LT_MAX_ALGOS];
} fp4_lt_answer;

typedef struct fp4_lt_state {
  int device;
  cublasLtHandle_t handle;
  void *scratch;          /* device: FP4_LT_WORKSPACE bytes for cuBLASLt, then operand scratch */
  size_t scratch_bytes;
  fp4_lt_answer memo[FP4_LT_MEMO];
  int memo_count, memo_next;
} fp4_lt_state;

/* The context's state for a backend, created on first use. */
fp4_status fp4_lt_state_get(fp4_context *ctx, const char *backend, fp4_lt_state **state);
void fp4_lt_state_release(void *state);
/* Grows the scratch to hold FP4_LT_WORKSPACE + bytes (synchronizes the device when it grows). */
fp4_status fp4_lt_scratch(fp4_lt_state *s, size_t bytes, void **operands);
/* cuBLASLt's answer for g (remembered per shape). Block-scaled modes need the scale pointers set
 * even to be asked (without them cuBLASLt answers INVALID_VALUE): pass the problem's. */
const fp4_lt_answer *fp4_lt_ask(fp4_lt_state *s, const fp4_lt_gemm *g, const void *w_scales, const void *x_scales);
/* Runs g with the answer's algorithm algo (0 = the heuristic's first). */
fp4_status fp4_lt_run(fp4_lt_state *s, const fp4_lt_answer *ans, int algo, float alpha, const void *w,
                      const void *w_scales, const void *x, const void *x_scales, void *y, void *stream,
                      const char *who);
/* "cuBLASLt 13.1.0" */
void fp4_lt_version(char *buf, size_t size);
/* The config names "heur0".."heur3"; returns the index named by config (NULL: 0), -1 if unknown. */
int fp4_lt_config_index(const char *config);
int fp4_lt_configs(const fp4_lt_answer *ans, const char **names, int max);

/* dequant.cu: q (device) -> out (device) [rows, cols] of dtype (f32, bf16 or f16) without the
 * multiplier; every scale layout. And f32 [rows, cols] -> dst with leading dimension ld. */
fp4_status fp4_cuda_dequantize(const fp4_qmatrix *q, void *out, fp4_dtype dtype, void *stream);
fp4_status fp4_cuda_convert_f32(const float *src, int64_t rows, int64_t cols, void *dst, int64_t ld, fp4_dtype dtype,
                                void *stream);

#ifdef __cplusplus
}
#endif

#endif /* FP4KIT_HAVE_CUDA */
#endif
