/* Per-context cuBLASLt handle, scratch and the remembered answers of the heuristic. */
#include "backends/cublaslt/lt_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"

fp4_status fp4_lt_available(fp4_context *ctx, const char *who, char *reason, size_t reason_size) {
#if FP4KIT_HAVE_CUDA
  const int device = fp4_context_device(ctx), count = fp4_probe_device_count();
  fp4_clear_error();
  if (device < 0) {
    fp4_reason(reason, reason_size, "%s runs on a CUDA device; the context is host-only", who);
    return FP4_ERR_UNSUPPORTED;
  }
  if (device >= count) {
    fp4_reason(reason, reason_size, "CUDA device %d is not present (%d visible)", device, count);
    return FP4_ERR_UNSUPPORTED;
  }
  fp4_reason(reason, reason_size, "%s", "");
  return FP4_OK;
#else
  (void)ctx;
  fp4_reason(reason, reason_size, "%s: built without CUDA", who);
  return FP4_ERR_UNSUPPORTED;
#endif
}

#if FP4KIT_HAVE_CUDA

const char *fp4_lt_dtype_text(int t) {
  switch (t) {
  case CUDA_R_4F_E2M1: return "e2m1";
  case CUDA_R_16BF: return "bf16";
  case CUDA_R_16F: return "f16";
  case CUDA_R_32F: return "f32";
  default: return "?";
  }
}

void fp4_lt_state_release(void *state) {
  fp4_lt_state *s = state;
  if (!s) return;
  cudaSetDevice(s->device);
  if (s->scratch) cudaFree(s->scratch);
  if (s->handle) cublasLtDestroy(s->handle);
  free(s);
}

fp4_status fp4_lt_state_get(fp4_context *ctx, const char *backend, fp4_lt_state **state) {
  void **slot = fp4_context_state(ctx, backend);
  if (!slot) return fp4_fail(FP4_ERR_INTERNAL, "%s: no context slot for the backend", backend);
  cudaError_t ce = cudaSetDevice(fp4_context_device(ctx));
  if (ce != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "%s: cudaSetDevice(%d): %s", backend, fp4_context_device(ctx), cudaGetErrorString(ce));
  if (!*slot) {
    fp4_lt_state *s = calloc(1, sizeof *s);
    if (!s) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", backend);
    s->device = fp4_context_device(ctx);
    cublasStatus_t bs = cublasLtCreate(&s->handle);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      free(s);
      return fp4_fail(FP4_ERR_CUDA, "%s: cublasLtCreate: %s", backend, cublasLtGetStatusName(bs));
    }
    *slot = s;
  }
  *state = *slot;
  return FP4_OK;
}

fp4_status fp4_lt_scratch(fp4_lt_state *s, size_t bytes, void **operands) {
  size_t need = FP4_LT_WORKSPACE + ((bytes + 255) & ~(size_t)255);
  if (need > s->scratch_bytes) {
    /* cudaFree waits for work that may still read the old scratch. */
    if (s->scratch) cudaFree(s->scratch);
    s->scratch = NULL;
    s->scratch_bytes = 0;
    cudaError_t e = cudaMalloc(&s->scratch, need);
    if (e != cudaSuccess) {
      s->scratch = NULL;
      return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "cuBLASLt scratch of %zu bytes: %s", need, cudaGetErrorString(e));
    }
    s->scratch_bytes = need;
  }
  if (operands) *operands = (char *)s->scratch + FP4_LT_WORKSPACE;
  return FP4_OK;
}

void fp4_lt_version(char *buf, size_t size) {
  size_t v = cublasLtGetVersion();
  snprintf(buf, size, "cuBLASLt %zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
}

static int same_gemm(const fp4_lt_gemm *a, const fp4_lt_gemm *b) { return !memcmp(a, b, sizeof *a); }

/* Descriptors for g; returns the first failing status. */
static cublasStatus_t make_descs(const fp4_lt_gemm *g, cublasLtMatmulDesc_t *op, cublasLtMatrixLayout_t lay[3]) {
  cublasStatus_t st = cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st) return st;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (g->scale_mode >= 0) {
    int32_t mode = g->scale_mode;
    if ((st = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode)) ||
        (st = cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode)))
      return st;
  }
  /* w: K x N column-major (row-major [N, K]); x: K x M; y: N x M column-major (row-major [M, N]). */
  if ((st = cublasLtMatrixLayoutCreate(&lay[0], (cudaDataType_t)g->ab_type, (uint64_t)g->k, (uint64_t)g->n, g->lda)))
    return st;
  if ((st = cublasLtMatrixLayoutCreate(&lay[1], (cudaDataType_t)g->ab_type, (uint64_t)g->k, (uint64_t)g->m, g->ldb)))
    return st;
  return cublasLtMatrixLayoutCreate(&lay[2], (cudaDataType_t)g->d_type, (uint64_t)g->n, (uint64_t)g->m, g->ldd);
}

static void free_descs(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t lay[3]) {
  for (int i = 0; i < 3; i++)
    if (lay[i]) cublasLtMatrixLayoutDestroy(lay[i]);
  if (op) cublasLtMatmulDescDestroy(op);
}

const fp4_lt_answer *fp4_lt_ask(fp4_lt_state *s, const fp4_lt_gemm *g, const void *w_scales, const void *x_scales) {
  for (int i = 0; i < s->memo_count; i++)
    if (same_gemm(&s->memo[i].g, g)) return &s->memo[i];
  fp4_lt_answer *a = &s->memo[s->memo_next];
  s->memo_next = (s->memo_next + 1) % FP4_LT_MEMO;
  if (s->memo_count < FP4_LT_MEMO) s->memo_count++;
  memset(a, 0, sizeof *a);
  a->g = *g;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t lay[3] = {NULL, NULL, NULL};
  cublasLtMatmulPreference_t pref = NULL;
  a->status = make_descs(g, &op, lay);
  if (!a->status && w_scales)
    a->status = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales);
  if (!a->status && x_scales)
    a->status = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof x_scales);
  if (!a->status) a->status = cublasLtMatmulPreferenceCreate(&pref);
  if (!a->status) {
    size_t ws = FP4_LT_WORKSPACE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    a->status = cublasLtMatmulAlgoGetHeuristic(s->handle, op, lay[0], lay[1], lay[2], lay[2], pref, FP4_LT_MAX_ALGOS,
                                               a->algos, &a->count);
    if (!a->status && a->count == 0) a->status = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  free_descs(op, lay);
  return a;
}

fp4_status fp4_lt_run(fp4_lt_state *s, const fp4_lt_answer *ans, int algo, float alpha, const void *w,
                      const void *w_scales, const void *x, const void *x_scales, void *y, void *stream,
                      const char *who) {
  if (ans->status || algo < 0 || algo >= ans->count)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm %d for this matmul", who, algo);
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t lay[3] = {NULL, NULL, NULL};
  cublasStatus_t st = make_descs(&ans->g, &op, lay);
  if (!st && w_scales) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales);
  if (!st && x_scales) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof x_scales);
  const float beta = 0.0f;
  if (!st)
    st = cublasLtMatmul(s->handle, op, &alpha, w, lay[0], x, lay[1], &beta, y, lay[2], y, lay[2], &ans->algos[algo].algo,
                        s->scratch, FP4_LT_WORKSPACE, (cudaStream_t)stream);
  free_descs(op, lay);
  if (st) return fp4_fail(FP4_ERR_CUDA, "%s: cublasLtMatmul: %s", who, cublasLtGetStatusName(st));
  return FP4_OK;
}

int fp4_lt_config_index(const char *config) {
  if (!config || !strcmp(config, "default")) return 0;
  if (!strncmp(config, "heur", 4) && config[4] >= '0' && config[4] < '0' + FP4_LT_MAX_ALGOS && !config[5])
    return config[4] - '0';
  return -1;
}

int fp4_lt_configs(const fp4_lt_answer *ans, const char **names, int max) {
  static const char *const all[FP4_LT_MAX_ALGOS] = {"heur0", "heur1", "heur2", "heur3"};
  int n = 0;
  for (; !ans->status && n < ans->count && n < max; n++) names[n] = all[n];
  return n;
}

#endif /* FP4KIT_HAVE_CUDA */
