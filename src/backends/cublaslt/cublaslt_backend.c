/*
 * The cublaslt backend: native block-scaled NVFP4 / MXFP4 matmul through cuBLASLt (cuBLASLt's TN
 * mapping, 128x4 scales, alpha as the product of the per-tensor multipliers). Whether a problem is
 * supported is asked of cublasLtMatmulAlgoGetHeuristic at run time, never assumed: the answer (and
 * the cuBLASLt status when it is "no") is the reason shown to the user.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cublaslt/lt_common.h"
#include "core/context.h"
#include "core/error.h"
#include "dispatch/probe.h"

static const char name[] = "cublaslt";

static fp4_status lt_available(fp4_context *ctx, char *reason, size_t reason_size) {
  return fp4_lt_available(ctx, name, reason, reason_size);
}

/* Checks that need no library call; FP4_OK when only cuBLASLt can answer. */
static fp4_status static_checks(const fp4_problem *p, char *reason, size_t reason_size) {
  if (p->op == FP4_OP_QUANTIZE) {
    fp4_reason(reason, reason_size, "cuBLASLt does not quantize (use the cuda or cpu backend)");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->op == FP4_OP_MM_W4A16) {
    fp4_reason(reason, reason_size, "cuBLASLt has no FP4 x BF16 (mixed-input) matmul; cublas-dequant covers W4A16");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->memory != FP4_MEMORY_DEVICE) {
    fp4_reason(reason, reason_size, "cuBLASLt runs on device memory");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->a_q->layout != FP4_LAYOUT_128X4 || p->b->layout != FP4_LAYOUT_128X4) {
    fp4_reason(reason, reason_size, "cuBLASLt block scaling needs 128x4 scales (a: %s, b: %s)",
               fp4_layout_name(p->a_q->layout), fp4_layout_name(p->b->layout));
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

#if FP4KIT_HAVE_CUDA
static int cuda_type_of(fp4_dtype t) {
  return t == FP4_DTYPE_BF16 ? CUDA_R_16BF : t == FP4_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static fp4_lt_gemm gemm_of(const fp4_problem *p) {
  const int64_t M = fp4_problem_m(p), N = fp4_problem_n(p), K = fp4_problem_k(p);
  fp4_lt_gemm g;
  memset(&g, 0, sizeof g); /* the struct is compared bytewise */
  g.ab_type = CUDA_R_4F_E2M1;
  g.d_type = cuda_type_of(p->out->dtype);
  g.scale_mode = p->b->format == FP4_FORMAT_NVFP4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 : CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
  g.m = M;
  g.n = N;
  g.k = K;
  g.lda = K;
  g.ldb = K;
  g.ldd = p->out->ld ? p->out->ld : N;
  g.align_w = fp4_lt_align(p->b->data);
  g.align_x = fp4_lt_align(p->a_q->data);
  g.align_y = fp4_lt_align(p->out->data);
  return g;
}

/* cuBLASLt's answer for p, with the reason when it is "no"; *state receives the context's state. */
static const fp4_lt_answer *ask(fp4_context *ctx, const fp4_problem *p, fp4_lt_state **state, char *reason,
                                size_t reason_size) {
  fp4_lt_state *s = NULL;
  if (fp4_lt_state_get(ctx, name, &s)) {
    fp4_reason(reason, reason_size, "%s", fp4_last_error());
    return NULL;
  }
  if (state) *state = s;
  fp4_lt_gemm g = gemm_of(p);
  const fp4_lt_answer *a = fp4_lt_ask(s, &g, p->b->scales, p->a_q->scales);
  char ver[48];
  fp4_lt_version(ver, sizeof ver);
  if (a->status)
    fp4_reason(reason, reason_size, "%s: no algorithm (cublasLtMatmulAlgoGetHeuristic: %s%s) for %s %lldx%lldx%lld, out %s",
               ver, fp4_lt_status_name(s, a->status),
               a->status == CUBLAS_STATUS_INVALID_VALUE ? ", the description was refused; CUBLASLT_LOG_LEVEL=1 says why" : "",
               fp4_format_name(p->b->format), (long long)g.m, (long long)g.n, (long long)g.k, fp4_dtype_name(p->out->dtype));
  else
    fp4_reason(reason, reason_size, "%s: %d algorithm%s", ver, a->count, a->count == 1 ? "" : "s");
  return a;
}
#endif

static fp4_status lt_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  fp4_status st = static_checks(p, reason, reason_size);
  if (st) return st;
#if FP4KIT_HAVE_CUDA
  const fp4_lt_answer *a = ask(ctx, p, NULL, reason, reason_size);
  fp4_clear_error();
  return a && !a->status ? FP4_OK : FP4_ERR_UNSUPPORTED;
#else
  (void)ctx;
  fp4_reason(reason, reason_size, "built without CUDA");
  return FP4_ERR_UNSUPPORTED;
#endif
}

static int lt_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
#if FP4KIT_HAVE_CUDA
  char why[256];
  const fp4_lt_answer *a = ask(ctx, p, NULL, why, sizeof why);
  return a ? fp4_lt_configs(a, names, max) : 0;
#else
  (void)ctx, (void)p, (void)names, (void)max;
  return 0;
#endif
}

#if FP4KIT_HAVE_CUDA
static fp4_status lt_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                  size_t reason_size) {
  char why[256];
  const fp4_lt_answer *a = ask(ctx, p, NULL, why, sizeof why);
  fp4_clear_error();
  return fp4_lt_check_config(config, a, reason, reason_size);
}
#else
#define lt_check_config NULL /* never asked: the backend is unavailable */
#endif

static fp4_status lt_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
#if FP4KIT_HAVE_CUDA
  int algo = fp4_lt_config_index(config);
  if (algo < 0) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: unknown config '%s' (heur0..heur3)", name, config);
  char why[256];
  fp4_lt_state *s = NULL;
  const fp4_lt_answer *a = ask(ctx, p, &s, why, sizeof why);
  if (!a || a->status) return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: %s", name, why);
  void *workspace = NULL;
  fp4_status st = fp4_context_workspace(ctx, fp4_lt_workspace(a, algo), p->stream, "cublaslt", &workspace);
  if (st) return st;
  const float alpha = p->alpha * p->a_q->multiplier * p->b->multiplier;
  st = fp4_lt_run(s, a, algo, alpha, p->b->data, p->b->scales, p->a_q->data, p->a_q->scales, p->out->data, workspace,
                  p->stream, name);
  if (!st && info) {
    fp4_reason(info->backend, sizeof info->backend, "%s", name);
    snprintf(info->config, sizeof info->config, "heur%d", algo);
    if (p->enable_pdl) snprintf(info->note, sizeof info->note, "cuBLASLt launches its own kernels; enable_pdl is not honoured");
  }
  return st;
#else
  (void)ctx, (void)p, (void)config, (void)info;
  return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: built without CUDA", name);
#endif
}

/* The scratch of the algorithm the config names (cuBLASLt's own need, 0 for many shapes). */
static size_t lt_workspace_size(fp4_context *ctx, const fp4_problem *p, const char *config) {
#if FP4KIT_HAVE_CUDA
  char why[256];
  const int algo = fp4_lt_config_index(config);
  const fp4_lt_answer *a = static_checks(p, why, sizeof why) ? NULL : ask(ctx, p, NULL, why, sizeof why);
  fp4_clear_error();
  return a ? fp4_lt_workspace(a, algo) : 0;
#else
  (void)ctx, (void)p, (void)config;
  return 0;
#endif
}

#define set fp4_probe_set
extern const fp4_backend fp4_backend_cublaslt;

static fp4_status lt_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out) {
  char why[192];
  out->device_memory = 1;
  set(out, FP4_CAP_W4A16, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "cuBLASLt has no FP4 x BF16 matmul (cublas-dequant covers W4A16)");
  set(out, FP4_CAP_GROUPED, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "this backend does not implement grouped GEMM / the MoE layer");
  set(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "cuBLASLt launches its own kernels; enable_pdl is not honoured");
#if !FP4KIT_HAVE_CUDA
  (void)ctx, (void)arch;
  fp4_probe_unavailable(out, FP4_EVIDENCE_TABLE, "cublaslt: built without CUDA");
  return FP4_OK;
#endif
  if (!ctx) { /* a hypothetical architecture: cuBLASLt can only be asked on the device itself */
    out->available = FP4_SUPPORT_UNKNOWN;
    snprintf(out->reason, sizeof out->reason, "decided by cuBLASLt at run time on the device");
    for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_MXFP4_W4A4; c++) {
      if (arch->fp4_mma)
        snprintf(why, sizeof why, "asked of cuBLASLt at run time; %s has an FP4 MMA (%s)", arch->name, arch->fp4_mma_insn);
      else
        snprintf(why, sizeof why, "%s has no FP4 tensor-core MMA; cuBLASLt said NOT_SUPPORTED on sm_90 (H200)", arch->name);
      set(out, (fp4_cap)c, arch->fp4_mma ? FP4_SUPPORT_UNKNOWN : FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
    }
    return FP4_OK;
  }
  if (lt_available(ctx, why, sizeof why)) {
    fp4_probe_unavailable(out, FP4_EVIDENCE_QUERIED, why);
    return FP4_OK;
  }
  out->available = FP4_SUPPORT_YES;
  fp4_probe_ask_supports(ctx, &fp4_backend_cublaslt, FP4_MEMORY_DEVICE, FP4_CAP_NVFP4_W4A4, FP4_CAP_MXFP4_W4A4, out);
  (void)arch;
  return FP4_OK;
}

/* Native block-scaled FP4 on SM100+, first at large M; below SM100 it has no FP4 matmul. */
static const fp4_backend_ranks lt_ranks =
    /* quantize, SM80-SM90 M small, large; SM100/103 small, large; SM120/121 small, large */
    FP4_DEVICE_RANKS(1, 2, 2, 1, 0, 1, 0);

const fp4_backend fp4_backend_cublaslt = {
    .name = name,
    .summary = "cuBLASLt native block-scaled NVFP4/MXFP4 matmul (support asked of cuBLASLt)",
    .available = lt_available,
    .supports = lt_supports,
    .configs = lt_configs,
    .check_config = lt_check_config,
    .run = lt_run,
#if FP4KIT_HAVE_CUDA
    .release_state = fp4_lt_state_release,
#else
    .release_state = NULL,
#endif
    .probe = lt_probe,
    .workspace_size = lt_workspace_size,
    .ranks = &lt_ranks,
};
