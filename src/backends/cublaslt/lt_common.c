/* Per-context cuBLASLt handle and the remembered answers of the heuristic. */
#include "backends/cublaslt/lt_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"

fp4_status fp4_lt_available(fp4_context *ctx, const char *who, char *reason, size_t reason_size) {
#if FP4KIT_HAVE_CUDA
  char why[256];
  if (!fp4_cublaslt(why, sizeof why)) {
    fp4_reason(reason, reason_size, "%s", why);
    return FP4_ERR_UNSUPPORTED;
  }
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
#include <cuda_runtime.h>

void fp4_lt_state_release(void *state) {
  fp4_lt_state *s = state;
  if (!s) return;
  cudaSetDevice(s->device);
  if (s->handle) s->lt->cublasLtDestroy(s->handle);
  free(s);
}

fp4_status fp4_lt_state_get(fp4_context *ctx, const char *backend, fp4_lt_state **state) {
  void **slot = fp4_context_state(ctx, backend);
  if (!slot) return fp4_fail(FP4_ERR_INTERNAL, "%s: no context slot for the backend", backend);
  cudaError_t ce = cudaSetDevice(fp4_context_device(ctx));
  if (ce != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "%s: cudaSetDevice(%d): %s", backend, fp4_context_device(ctx), cudaGetErrorString(ce));
  if (!*slot) {
    char why[256];
    const fp4_cublaslt_api *lt = fp4_cublaslt(why, sizeof why);
    if (!lt) return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: %s", backend, why);
    fp4_lt_state *s = calloc(1, sizeof *s);
    if (!s) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", backend);
    s->device = fp4_context_device(ctx);
    s->lt = lt;
    cublasStatus_t bs = lt->cublasLtCreate(&s->handle);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      free(s);
      return fp4_fail(FP4_ERR_CUDA, "%s: cublasLtCreate: %s", backend, lt->cublasLtGetStatusName(bs));
    }
    *slot = s;
  }
  *state = *slot;
  return FP4_OK;
}

void fp4_lt_version(char *buf, size_t size) {
  size_t v = (size_t)fp4_cublaslt_version();
  snprintf(buf, size, "cuBLASLt %zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
}

const char *fp4_lt_status_name(const fp4_lt_state *s, cublasStatus_t status) {
  return s->lt->cublasLtGetStatusName(status);
}

uint32_t fp4_lt_align(const void *ptr) {
  const uintptr_t a = (uintptr_t)ptr;
  uint32_t align = 256;
  while (align > 1 && a % align) align /= 2;
  return align;
}

static int same_gemm(const fp4_lt_gemm *a, const fp4_lt_gemm *b) { return !memcmp(a, b, sizeof *a); }

/* Descriptors for g; returns the first failing status. */
static cublasStatus_t make_descs(const fp4_cublaslt_api *lt, const fp4_lt_gemm *g, cublasLtMatmulDesc_t *op,
                                 cublasLtMatrixLayout_t lay[3]) {
  cublasStatus_t st = lt->cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st) return st;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  lt->cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  lt->cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (g->scale_mode >= 0) {
    int32_t mode = g->scale_mode;
    if ((st = lt->cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode)) ||
        (st = lt->cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode)))
      return st;
  }
  /* w: K x N column-major (row-major [N, K]); x: K x M; y: N x M column-major (row-major [M, N]). */
  if ((st = lt->cublasLtMatrixLayoutCreate(&lay[0], (cudaDataType_t)g->ab_type, (uint64_t)g->k, (uint64_t)g->n, g->lda)))
    return st;
  if ((st = lt->cublasLtMatrixLayoutCreate(&lay[1], (cudaDataType_t)g->ab_type, (uint64_t)g->k, (uint64_t)g->m, g->ldb)))
    return st;
  return lt->cublasLtMatrixLayoutCreate(&lay[2], (cudaDataType_t)g->d_type, (uint64_t)g->n, (uint64_t)g->m, g->ldd);
}

static void free_descs(const fp4_cublaslt_api *lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t lay[3]) {
  for (int i = 0; i < 3; i++)
    if (lay[i]) lt->cublasLtMatrixLayoutDestroy(lay[i]);
  if (op) lt->cublasLtMatmulDescDestroy(op);
}

/* The scale pointers of a block-scaled matmul on its descriptor. */
static cublasStatus_t set_scales(const fp4_cublaslt_api *lt, cublasLtMatmulDesc_t op, const void *w_scales,
                                 const void *x_scales) {
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (w_scales) st = lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales);
  if (!st && x_scales)
    st = lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof x_scales);
  return st;
}

const fp4_lt_answer *fp4_lt_ask(fp4_lt_state *s, const fp4_lt_gemm *g, const void *w_scales, const void *x_scales) {
  for (int i = 0; i < s->memo_count; i++)
    if (same_gemm(&s->memo[i].g, g)) return &s->memo[i];
  const fp4_cublaslt_api *lt = s->lt;
  fp4_lt_answer *a = &s->memo[s->memo_next];
  s->memo_next = (s->memo_next + 1) % FP4_LT_MEMO;
  if (s->memo_count < FP4_LT_MEMO) s->memo_count++;
  memset(a, 0, sizeof *a);
  a->g = *g;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t lay[3] = {NULL, NULL, NULL};
  cublasLtMatmulPreference_t pref = NULL;
  a->status = make_descs(lt, g, &op, lay);
  if (!a->status) a->status = set_scales(lt, op, w_scales, x_scales);
  if (!a->status) a->status = lt->cublasLtMatmulPreferenceCreate(&pref);
  if (!a->status) {
    size_t ws = FP4_LT_MAX_WORKSPACE;
    lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    /* y is both C (beta 0, never read) and D */
    const uint32_t align[4] = {g->align_w, g->align_x, g->align_y, g->align_y};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4 && !a->status; i++)
      a->status = lt->cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i], sizeof align[i]);
  }
  if (!a->status) {
    a->status = lt->cublasLtMatmulAlgoGetHeuristic(s->handle, op, lay[0], lay[1], lay[2], lay[2], pref, FP4_LT_MAX_ALGOS,
                                                   a->algos, &a->count);
    if (!a->status && a->count == 0) a->status = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (pref) lt->cublasLtMatmulPreferenceDestroy(pref);
  free_descs(lt, op, lay);
  return a;
}

size_t fp4_lt_workspace(const fp4_lt_answer *ans, int algo) {
  if (ans->status || algo < 0 || algo >= ans->count) return 0;
  return (ans->algos[algo].workspaceSize + 255) & ~(size_t)255;
}

fp4_status fp4_lt_run(fp4_lt_state *s, const fp4_lt_answer *ans, int algo, float alpha, const void *w,
                      const void *w_scales, const void *x, const void *x_scales, void *y, void *workspace,
                      void *stream, const char *who) {
  if (ans->status || algo < 0 || algo >= ans->count)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm %d for this matmul", who, algo);
  const fp4_cublaslt_api *lt = s->lt;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t lay[3] = {NULL, NULL, NULL};
  cublasStatus_t st = make_descs(lt, &ans->g, &op, lay);
  if (!st) st = set_scales(lt, op, w_scales, x_scales);
  const float beta = 0.0f;
  if (!st)
    st = lt->cublasLtMatmul(s->handle, op, &alpha, w, lay[0], x, lay[1], &beta, y, lay[2], y, lay[2],
                            &ans->algos[algo].algo, workspace, ans->algos[algo].workspaceSize, (cudaStream_t)stream);
  free_descs(lt, op, lay);
  if (st) return fp4_fail(FP4_ERR_CUDA, "%s: cublasLtMatmul: %s", who, lt->cublasLtGetStatusName(st));
  return FP4_OK;
}

int fp4_lt_config_index(const char *config) {
  if (!config || !strcmp(config, "default")) return 0;
  if (!strncmp(config, "heur", 4) && config[4] >= '0' && config[4] < '0' + FP4_LT_MAX_ALGOS && !config[5])
    return config[4] - '0';
  return -1;
}

fp4_status fp4_lt_check_config(const char *config, const fp4_lt_answer *ans, char *reason, size_t reason_size) {
  const int algo = fp4_lt_config_index(config);
  if (algo < 0) {
    fp4_reason(reason, reason_size, "unknown config '%s' (default, heur0..heur%d: the algorithms cuBLASLt ranks)", config,
               FP4_LT_MAX_ALGOS - 1);
    return FP4_ERR_NOT_FOUND;
  }
  if (ans && !ans->status && algo >= ans->count) {
    fp4_reason(reason, reason_size, "config '%s': cuBLASLt offers %d algorithm%s for this matmul", config, ans->count,
               ans->count == 1 ? "" : "s");
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

int fp4_lt_configs(const fp4_lt_answer *ans, const char **names, int max) {
  static const char *const all[FP4_LT_MAX_ALGOS] = {"heur0", "heur1", "heur2", "heur3"};
  int n = 0;
  for (; !ans->status && n < ans->count && n < max; n++) names[n] = all[n];
  return n;
}

#endif /* FP4KIT_HAVE_CUDA */
