/*
 * The cublas-dequant backend: the path users write by hand. Dequantize the FP4 operands into the
 * context workspace (exactly: e2m1 * e4m3 fits BF16), then run a cuBLASLt GEMM in the activations'
 * precision with the per-tensor multipliers folded into alpha. It runs wherever cuBLASLt runs, and
 * at very large M its cost is dominated by the BF16 tensor-core GEMM.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cublas_dequant/dequant.h"
#include "backends/cublaslt/lt_common.h"
#include "core/context.h"
#include "core/error.h"
#include "dispatch/arch.h"
#include "dispatch/dispatch.h"
#include "dispatch/probe.h"
#include "format/codec.h"

static const char name[] = "cublas-dequant";

static fp4_status dq_available(fp4_context *ctx, char *reason, size_t reason_size) {
  return fp4_lt_available(ctx, name, reason, reason_size);
}

/* The precision the GEMM runs in: bf16 for W4A4 (exact for both formats' products), the
 * activations' dtype for W4A16 (f16 only with NVFP4: UE8M0 scales do not fit FP16's range). */
static fp4_status gemm_dtype(const fp4_problem *p, fp4_dtype *t, char *reason, size_t reason_size) {
  if (p->op == FP4_OP_QUANTIZE) {
    fp4_reason(reason, reason_size, "cublas-dequant does not quantize (use the cuda or cpu backend)");
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->memory != FP4_MEMORY_DEVICE) {
    fp4_reason(reason, reason_size, "cublas-dequant runs on device memory");
    return FP4_ERR_UNSUPPORTED;
  }
  *t = p->op == FP4_OP_MM ? FP4_DTYPE_BF16 : p->a->dtype;
  if (*t == FP4_DTYPE_F16 && p->b->format == FP4_FORMAT_MXFP4) {
    fp4_reason(reason, reason_size, "MXFP4 scales (2^-127..2^127) do not fit FP16; pass bf16 or f32 activations");
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

#if FP4KIT_HAVE_CUDA
static int cuda_type_of(fp4_dtype t) {
  return t == FP4_DTYPE_BF16 ? CUDA_R_16BF : t == FP4_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* cuBLASLt writes the output directly when its dtype pairs with the GEMM's (same or f32);
 * otherwise (bf16 GEMM, f16 output) it writes f32 that a kernel converts. */
static int direct_output(fp4_dtype gemm, fp4_dtype out) { return out == gemm || out == FP4_DTYPE_F32; }

/* How a problem runs in the context workspace, laid out as
 *   [cuBLASLt scratch | dequantized weights of one chunk | dequantized A (W4A4) | f32 y of a chunk],
 * each part 256-byte aligned. The weights run as consecutive chunks of N rows, each dequantized into
 * the same buffer and multiplied into its columns of y (one stream, so a chunk's GEMM has read the
 * buffer before the next chunk's dequantization writes it). By default a chunk's parts take at most
 * 256 MiB: without a bound a vocabulary projection (248320 x 4096) would take 2 GiB. A context whose
 * workspace is smaller (fp4_context_reserve_workspace) but holds at least 128 rows runs in chunks
 * that fit it, so a call never grows a workspace the caller sized. Chunks are multiples of 128 rows,
 * which keeps every scale layout's chunk a contiguous byte range. */
#define DQ_CHUNK_BYTES ((size_t)256 << 20)

typedef struct dq_plan {
  fp4_dtype t;          /* the GEMM's precision                                 */
  int direct;           /* cuBLASLt writes the output (no f32 y)                */
  int64_t chunk;        /* weight rows per chunk                                */
  size_t w_off, x_off, y_off, bytes;
} dq_plan;

static size_t up256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Rows per chunk when a chunk's per-row parts may take budget bytes: equal chunks, rounded up to
 * 128 rows; at least 128. */
static int64_t chunk_rows(int64_t n, size_t per_row, size_t budget) {
  int64_t rows = (int64_t)(budget / per_row) / 128 * 128;
  if (rows < 128) rows = 128;
  if (rows >= n) return n;
  const int64_t chunks = (n + rows - 1) / rows;
  rows = ((n + chunks - 1) / chunks + 127) / 128 * 128;
  return rows < n ? rows : n;
}

static void plan_layout(dq_plan *pl, int64_t m, int64_t k, size_t x_bytes, int64_t chunk) {
  pl->chunk = chunk;
  pl->w_off = FP4_LT_MAX_WORKSPACE;
  pl->x_off = pl->w_off + up256((size_t)chunk * (size_t)k * fp4_dtype_size(pl->t));
  pl->y_off = pl->x_off + up256(x_bytes);
  pl->bytes = pl->y_off + (pl->direct ? 0 : up256((size_t)m * (size_t)chunk * sizeof(float)));
}

/* The plan for p in a context workspace holding `held` bytes now: the default plan, or smaller
 * chunks when the workspace is smaller than the default but holds 128 rows. */
static void plan_of(const fp4_problem *p, fp4_dtype t, size_t held, dq_plan *pl) {
  const int64_t M = fp4_problem_m(p), N = fp4_problem_n(p), K = fp4_problem_k(p);
  memset(pl, 0, sizeof *pl);
  pl->t = t;
  pl->direct = direct_output(t, p->out->dtype);
  const size_t es = fp4_dtype_size(t);
  const size_t x_bytes = p->op == FP4_OP_MM ? (size_t)M * (size_t)K * es : 0;
  const size_t per_row = (size_t)K * es + (pl->direct ? 0 : (size_t)M * sizeof(float));
  plan_layout(pl, M, K, x_bytes, chunk_rows(N, per_row, DQ_CHUNK_BYTES));
  const size_t fixed = FP4_LT_MAX_WORKSPACE + up256(x_bytes) + 2 * 256;
  if (held >= pl->bytes || held < fixed || held - fixed < 128 * per_row) return;
  plan_layout(pl, M, K, x_bytes, chunk_rows(N, per_row, held - fixed));
}

static fp4_lt_gemm gemm_of(const fp4_problem *p, fp4_dtype t, int64_t n) {
  const int64_t M = fp4_problem_m(p), N = fp4_problem_n(p), K = fp4_problem_k(p);
  fp4_lt_gemm g;
  memset(&g, 0, sizeof g);
  g.ab_type = cuda_type_of(t);
  g.d_type = direct_output(t, p->out->dtype) ? cuda_type_of(p->out->dtype) : CUDA_R_32F;
  g.scale_mode = -1;
  g.m = M;
  g.n = n;
  g.k = K;
  g.lda = K;
  g.ldb = p->op == FP4_OP_MM_W4A16 && p->a->ld ? p->a->ld : K;
  /* y: the caller's output (its columns n0.. of every row) or an f32 buffer of the chunk's width */
  g.ldd = direct_output(t, p->out->dtype) ? (p->out->ld ? p->out->ld : N) : n;
  /* The dequantized weights, A of W4A4 and the f32 y live in the workspace, each part 256-byte
   * aligned; W4A16 reads the caller's activations, and a direct output is the caller's, chunk c's
   * columns c * chunk elements in: a multiple of 128 elements, so of 256 bytes, past its start. */
  g.align_w = 256;
  g.align_x = p->op == FP4_OP_MM_W4A16 ? fp4_lt_align(p->a->data) : 256;
  g.align_y = direct_output(t, p->out->dtype) ? fp4_lt_align(p->out->data) : 256;
  return g;
}

/* cuBLASLt's answer for the GEMM of one chunk of n weight rows; *state receives the context's
 * state. */
static const fp4_lt_answer *ask_n(fp4_context *ctx, const fp4_problem *p, fp4_dtype t, int64_t n,
                                  fp4_lt_state **state, char *reason, size_t reason_size) {
  fp4_lt_state *s = NULL;
  if (fp4_lt_state_get(ctx, name, &s)) {
    fp4_reason(reason, reason_size, "%s", fp4_last_error());
    return NULL;
  }
  if (state) *state = s;
  fp4_lt_gemm g = gemm_of(p, t, n);
  const fp4_lt_answer *a = fp4_lt_ask(s, &g, NULL, NULL);
  char ver[48];
  fp4_lt_version(ver, sizeof ver);
  if (a->status)
    fp4_reason(reason, reason_size, "%s: no %s GEMM algorithm (cublasLtMatmulAlgoGetHeuristic: %s)", ver,
               fp4_dtype_name(t), fp4_lt_status_name(s, a->status));
  else
    fp4_reason(reason, reason_size, "%s: %s GEMM, %d algorithm%s", ver, fp4_dtype_name(t), a->count, a->count == 1 ? "" : "s");
  return a;
}

/* The plan for p in ctx's workspace as it is now, and cuBLASLt's answer for its chunk. */
static const fp4_lt_answer *ask(fp4_context *ctx, const fp4_problem *p, fp4_dtype t, dq_plan *pl, fp4_lt_state **state,
                                char *reason, size_t reason_size) {
  plan_of(p, t, fp4_context_workspace_bytes(ctx), pl);
  return ask_n(ctx, p, t, pl->chunk, state, reason, reason_size);
}
#endif

static fp4_status dq_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  fp4_dtype t;
  fp4_status st = gemm_dtype(p, &t, reason, reason_size);
  if (st) return st;
#if FP4KIT_HAVE_CUDA
  dq_plan pl;
  const fp4_lt_answer *a = ask(ctx, p, t, &pl, NULL, reason, reason_size);
  fp4_clear_error();
  return a && !a->status ? FP4_OK : FP4_ERR_UNSUPPORTED;
#else
  (void)ctx;
  fp4_reason(reason, reason_size, "built without CUDA");
  return FP4_ERR_UNSUPPORTED;
#endif
}

static int dq_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
#if FP4KIT_HAVE_CUDA
  char why[256];
  fp4_dtype t;
  dq_plan pl;
  if (gemm_dtype(p, &t, why, sizeof why)) return 0;
  const fp4_lt_answer *a = ask(ctx, p, t, &pl, NULL, why, sizeof why);
  return a ? fp4_lt_configs(a, names, max) : 0;
#else
  (void)ctx, (void)p, (void)names, (void)max;
  return 0;
#endif
}

#if FP4KIT_HAVE_CUDA
static fp4_status dq_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                  size_t reason_size) {
  char why[256];
  fp4_dtype t;
  dq_plan pl;
  const fp4_lt_answer *a = gemm_dtype(p, &t, why, sizeof why) ? NULL : ask(ctx, p, t, &pl, NULL, why, sizeof why);
  fp4_clear_error();
  return fp4_lt_check_config(config, a, reason, reason_size);
}
#else
#define dq_check_config NULL /* never asked: the backend is unavailable */
#endif

/* The default plan's bytes: what a context must hold for the call to neither grow its workspace
 * nor run in more chunks than by default. */
static size_t dq_workspace_size(fp4_context *ctx, const fp4_problem *p, const char *config) {
#if FP4KIT_HAVE_CUDA
  (void)ctx, (void)config;
  char why[256];
  fp4_dtype t;
  dq_plan pl;
  if (gemm_dtype(p, &t, why, sizeof why)) return 0;
  plan_of(p, t, 0, &pl);
  return pl.bytes;
#else
  (void)ctx, (void)p, (void)config;
  return 0;
#endif
}

static fp4_status dq_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
#if FP4KIT_HAVE_CUDA
  int algo = fp4_lt_config_index(config);
  if (algo < 0) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: unknown config '%s' (heur0..heur3)", name, config);
  char why[256];
  fp4_dtype t;
  fp4_status st = gemm_dtype(p, &t, why, sizeof why);
  if (st) return fp4_fail(st, "%s: %s", name, why);
  dq_plan pl;
  fp4_lt_state *s = NULL;
  const fp4_lt_answer *a = ask(ctx, p, t, &pl, &s, why, sizeof why);
  if (!a || a->status) return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: %s", name, why);
  const int64_t M = fp4_problem_m(p), N = fp4_problem_n(p), K = fp4_problem_k(p);
  char *ws = NULL;
  if ((st = fp4_context_workspace(ctx, pl.bytes, p->stream, "cublas-dequant", (void **)&ws))) return st;
  char *w = ws + pl.w_off, *x = ws + pl.x_off, *y = ws + pl.y_off;
  float alpha = p->alpha * p->b->multiplier;
  const void *xin = p->op == FP4_OP_MM ? (const void *)x : p->a->data;
  if (p->op == FP4_OP_MM) {
    alpha *= p->a_q->multiplier;
    if ((st = fp4_cuda_dequantize(p->a_q, x, t, p->stream))) return st;
  }
  const int64_t ldo = p->out->ld ? p->out->ld : N;
  const size_t out_es = fp4_dtype_size(p->out->dtype);
  const int64_t scale_cols = K / (p->b->format == FP4_FORMAT_NVFP4 ? FP4_NVFP4_BLOCK : FP4_MXFP4_BLOCK);
  char tail_why[96] = ""; /* set where the last chunk ran another algorithm than the config's */
  for (int64_t n0 = 0; n0 < N && !st; n0 += pl.chunk) {
    const int64_t n = N - n0 < pl.chunk ? N - n0 : pl.chunk;
    fp4_qmatrix chunk = *p->b; /* rows n0 .. n0+n-1: a contiguous range of codes and of scales */
    chunk.data = (char *)p->b->data + n0 * (K / 2);
    chunk.scales = (char *)p->b->scales + fp4_layout_offset((int)p->b->layout, scale_cols, n0, 0);
    chunk.rows = n;
    const fp4_lt_answer *an = n == pl.chunk ? a : ask_n(ctx, p, t, n, NULL, why, sizeof why);
    if (!an || an->status) return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: last chunk of %lld rows: %s", name, (long long)n, why);
    /* The tail chunk's own answer may list fewer algorithms than the one the config names: it runs
     * cuBLASLt's first, and the run info says so. */
    const int an_algo = algo < an->count ? algo : 0;
    if (an_algo != algo)
      snprintf(tail_why, sizeof tail_why, "the last chunk (%lld rows) ran heur0: cuBLASLt offers %d algorithm%s",
               (long long)n, an->count, an->count == 1 ? "" : "s");
    if (fp4_lt_workspace(an, an_algo) > FP4_LT_MAX_WORKSPACE)
      return fp4_fail(FP4_ERR_INTERNAL, "%s: cuBLASLt chose an algorithm needing %zu bytes of scratch (asked for at most %zu)",
                      name, fp4_lt_workspace(an, an_algo), FP4_LT_MAX_WORKSPACE);
    char *out_cols = (char *)p->out->data + (size_t)n0 * out_es;
    if ((st = fp4_cuda_dequantize(&chunk, w, t, p->stream))) return st;
    st = fp4_lt_run(s, an, an_algo, alpha, w, NULL, xin, NULL, pl.direct ? (void *)out_cols : (void *)y, ws, p->stream,
                    name);
    if (!st && !pl.direct) st = fp4_cuda_convert_f32((const float *)y, M, n, out_cols, ldo, p->out->dtype, p->stream);
  }
  if (!st && info) {
    fp4_reason(info->backend, sizeof info->backend, "%s", name);
    snprintf(info->config, sizeof info->config, "heur%d", algo);
    const char *pdl = p->enable_pdl ? "cuBLASLt and the dequantize kernel launch without PDL" : "";
    snprintf(info->note, sizeof info->note, "%s%s%s", pdl, *pdl && *tail_why ? "; " : "", tail_why);
  }
  return st;
#else
  (void)ctx, (void)p, (void)config, (void)info;
  return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: built without CUDA", name);
#endif
}

#define set fp4_probe_set
extern const fp4_backend fp4_backend_cublas_dequant;

static fp4_status dq_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out) {
  char why[192];
  out->device_memory = 1;
  set(out, FP4_CAP_GROUPED, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "this backend does not implement grouped GEMM / the MoE layer");
  set(out, FP4_CAP_PDL, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, "cuBLASLt and the dequantize kernel launch without PDL");
#if !FP4KIT_HAVE_CUDA
  (void)ctx, (void)arch;
  fp4_probe_unavailable(out, FP4_EVIDENCE_TABLE, "cublas-dequant: built without CUDA");
  return FP4_OK;
#endif
  if (!ctx) {
    out->available = FP4_SUPPORT_UNKNOWN;
    snprintf(out->reason, sizeof out->reason, "decided by cuBLASLt at run time on the device");
    const int has_code = fp4_arch_build_runs_on(arch->cc);
    snprintf(why, sizeof why, has_code ? "BF16 GEMM asked of cuBLASLt at run time (%s: %s)"
                                       : "binary has no code for %s (its dequantize kernel); built for %s",
             arch->name, has_code ? arch->bf16_mma : (fp4_build_cuda_targets()[0] ? fp4_build_cuda_targets() : "no CUDA"));
    for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++)
      set(out, (fp4_cap)c, has_code ? FP4_SUPPORT_UNKNOWN : FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
    if (!has_code) {
      out->available = FP4_SUPPORT_NO;
      fp4_reason(out->reason, sizeof out->reason, "%s", why);
    }
    return FP4_OK;
  }
  if (dq_available(ctx, why, sizeof why)) {
    fp4_probe_unavailable(out, FP4_EVIDENCE_QUERIED, why);
    return FP4_OK;
  }
  out->available = FP4_SUPPORT_YES;
  if (!fp4_arch_build_runs_on(fp4_device_cc(fp4_context_device(ctx)))) {
    snprintf(why, sizeof why, "binary has no code for %s (the dequantize kernel); built for %s", arch->name, fp4_build_cuda_targets());
    out->available = FP4_SUPPORT_NO;
    fp4_reason(out->reason, sizeof out->reason, "%s", why);
    for (int c = FP4_CAP_NVFP4_W4A4; c <= FP4_CAP_W4A16; c++) set(out, (fp4_cap)c, FP4_SUPPORT_NO, FP4_EVIDENCE_TABLE, why);
    return FP4_OK;
  }
  fp4_probe_ask_supports(ctx, &fp4_backend_cublas_dequant, FP4_MEMORY_DEVICE, FP4_CAP_NVFP4_W4A4, FP4_CAP_W4A16, out);
  return FP4_OK;
}

/* First at large M on SM80-SM90 (a BF16 GEMM amortises the dequantization over M rows; the
 * crossover is in src/dispatch/dispatch.c), second at small M; last where FP4 is native. */
static const fp4_backend_ranks dq_ranks =
    /* quantize, SM80-SM90 M small, large; SM100/103 small, large; SM120/121 small, large */
    FP4_DEVICE_RANKS(3, 1, 0, 3, 3, 3, 3);

const fp4_backend fp4_backend_cublas_dequant = {
    .name = name,
    .summary = "dequantize to BF16 in the context workspace, then a cuBLASLt BF16 GEMM (large M; weights over "
               "256 MiB of BF16, or over a smaller reserved workspace, run in chunks of N rows)",
    .available = dq_available,
    .supports = dq_supports,
    .configs = dq_configs,
    .check_config = dq_check_config,
    .run = dq_run,
#if FP4KIT_HAVE_CUDA
    .release_state = fp4_lt_state_release,
#else
    .release_state = NULL,
#endif
    .probe = dq_probe,
    .workspace_size = dq_workspace_size,
    .ranks = &dq_ranks,
};
