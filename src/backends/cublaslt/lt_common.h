/*
 * What the cublaslt and cublas-dequant backends share: cuBLASLt opened at first use
 * (cublaslt_api.h), a per-context handle, and one TN matmul y[M,N] = x[M,K] * w[N,K]^T whose support
 * is asked of cublasLtMatmulAlgoGetHeuristic (answers remembered per shape). cuBLASLt's scratch is
 * the context workspace (fp4_context_workspace), never an allocation of its own.
 */
#ifndef FP4_BACKENDS_CUBLASLT_LT_COMMON_H
#define FP4_BACKENDS_CUBLASLT_LT_COMMON_H

#include "dispatch/backend.h"

/* Shared availability: built with CUDA, cuBLASLt loadable, a device context, the device present. */
fp4_status fp4_lt_available(fp4_context *ctx, const char *who, char *reason, size_t reason_size);

#if FP4KIT_HAVE_CUDA
#include "backends/cublaslt/cublaslt_api.h"

enum { FP4_LT_MAX_ALGOS = 4, FP4_LT_MEMO = 32 };
/* The most scratch cuBLASLt may choose an algorithm for (its recommendation for Hopper and later);
 * an algorithm's own need (workspaceSize) is what is taken from the context workspace. */
#define FP4_LT_MAX_WORKSPACE ((size_t)32 << 20)

/* One matmul in cuBLAS terms: A = w (op T, lda), B = x (op N, ldb), D = y as N x M column-major. */
typedef struct fp4_lt_gemm {
  int ab_type;      /* cudaDataType_t of w and x                                   */
  int d_type;       /* cudaDataType_t of y                                         */
  int scale_mode;   /* cublasLtMatmulMatrixScale_t for w and x; -1 for none        */
  int64_t m, n, k;  /* fp4kit's M, N, K                                            */
  int64_t lda, ldb, ldd;
  /* The byte alignment of the w, x and y pointers (the largest power of two dividing the
   * address, at most 256; fp4_lt_align). cuBLASLt's heuristic assumes 256 unless told, and an
   * algorithm it picks under that assumption may refuse or misread a less aligned buffer, so the
   * answers are asked, and remembered, per alignment. */
  uint32_t align_w, align_x, align_y;
} fp4_lt_gemm;

typedef struct fp4_lt_answer {
  fp4_lt_gemm g;
  cublasStatus_t status;
  int count;
  cublasLtMatmulHeuristicResult_t algos[FP4_LT_MAX_ALGOS];
} fp4_lt_answer;

typedef struct fp4_lt_state {
  int device;
  const fp4_cublaslt_api *lt;
  cublasLtHandle_t handle;
  fp4_lt_answer memo[FP4_LT_MEMO];
  int memo_count, memo_next;
} fp4_lt_state;

/* The alignment of ptr for fp4_lt_gemm: the largest power of two dividing it, at most 256. */
uint32_t fp4_lt_align(const void *ptr);
/* The context's state for a backend, created on first use. */
fp4_status fp4_lt_state_get(fp4_context *ctx, const char *backend, fp4_lt_state **state);
void fp4_lt_state_release(void *state);
/* cuBLASLt's answer for g (remembered per shape). Block-scaled modes need the scale pointers set
 * even to be asked (without them cuBLASLt answers INVALID_VALUE): pass the problem's. */
const fp4_lt_answer *fp4_lt_ask(fp4_lt_state *s, const fp4_lt_gemm *g, const void *w_scales, const void *x_scales);
/* Bytes of scratch algorithm algo of ans needs (0 when it has none), rounded up to 256. */
size_t fp4_lt_workspace(const fp4_lt_answer *ans, int algo);
/* Runs g with the answer's algorithm algo (0 = the heuristic's first); workspace holds at least
 * fp4_lt_workspace(ans, algo) bytes. */
fp4_status fp4_lt_run(fp4_lt_state *s, const fp4_lt_answer *ans, int algo, float alpha, const void *w,
                      const void *w_scales, const void *x, const void *x_scales, void *y, void *workspace,
                      void *stream, const char *who);
/* "cuBLASLt 13.1.0" */
void fp4_lt_version(char *buf, size_t size);
/* cuBLASLt's name of a status ("CUBLAS_STATUS_NOT_SUPPORTED"). */
const char *fp4_lt_status_name(const fp4_lt_state *s, cublasStatus_t status);
/* The config names "heur0".."heur3"; returns the index named by config (NULL: 0), -1 if unknown. */
int fp4_lt_config_index(const char *config);
int fp4_lt_configs(const fp4_lt_answer *ans, const char **names, int max);
/* A backend's check_config over these names: FP4_ERR_NOT_FOUND for another name, FP4_ERR_UNSUPPORTED
 * for an algorithm past the ones ans offers (ans NULL or failed: the name alone), with the reason. */
fp4_status fp4_lt_check_config(const char *config, const fp4_lt_answer *ans, char *reason, size_t reason_size);
#endif /* FP4KIT_HAVE_CUDA */

#endif
