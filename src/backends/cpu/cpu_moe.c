/*
 * The cpu backend's grouped GEMM and MoE layer (docs/moe.md). Each expert's rows go through the
 * backend's plain GEMM (fp4_cpu_gemm_problem), which splits the expert's weight rows over the
 * threads, so a decode step with one row per expert still keeps every thread streaming weights.
 * The MoE intermediates live in the caller's workspace in the common layout
 * (src/dispatch/moe_workspace.h); sections are reused once their contents are consumed (see
 * run_experts), so the cpu backend needs no more than the common layout.
 *
 * W4A4 activations are passed to the GEMM as bf16 copies of their dequantized values: E2M1 times an
 * E4M3 or UE8M0 scale has at most 6 significant bits and fits bf16's exponent range, so the copy is
 * exact and the GEMM sees exactly dq(a); the activation multiplier goes into the GEMM's double
 * output scale, never into the float alpha (whose product with it could leave the float range).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_moe.h"
#include "core/error.h"
#include "dispatch/moe_workspace.h"
#include "format/codec.h"
#include "format/format.h"

static fp4_status oom(const char *what, size_t bytes) {
  return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "cpu: out of host memory for %zu bytes of %s", bytes, what);
}

/* Expert e of a validated host grouped matrix (fp4_grouped_expert's view, without its checks). */
static fp4_qmatrix expert_view(const fp4_grouped_qmatrix *g, int64_t e) {
  size_t sbytes = (size_t)fp4_layout_bytes((int)g->layout, g->rows, fp4_scale_cols(g->format, g->cols));
  return (fp4_qmatrix){(uint8_t *)g->data + e * g->rows * (g->cols / 2), (uint8_t *)g->scales + (size_t)e * sbytes,
                       g->rows, g->cols, g->format, g->layout, g->multipliers ? g->multipliers[e] : 1.0f, g->memory};
}

/* Rows [r0, r0+n) of a dense host matrix as a matrix of its own (same ld). */
static fp4_matrix rows_view(const fp4_matrix *x, int64_t r0, int64_t n) {
  fp4_matrix v = *x;
  v.data = (void *)fp4_cpu_dense_row(x, r0);
  v.rows = n;
  v.ld = x->ld ? x->ld : x->cols;
  return v;
}

/* ---- dequantization to exact bf16 --------------------------------------------------------------- */

typedef struct dq_job {
  const fp4_qmatrix *q;
  uint16_t *dst; /* [q->rows, q->cols] */
  float *rows;   /* per thread: one row of q->cols floats */
} dq_job;

static void dq_unit(void *arg, int64_t r, int thread) {
  dq_job *j = arg;
  const int64_t C = j->q->cols;
  float *row = j->rows + (size_t)thread * (size_t)C;
  fp4_dequantize_rows(j->q, r, 1, row);
  uint16_t *d = j->dst + r * C;
  for (int64_t c = 0; c < C; c++) d[c] = fp4_bf16_from_f32_inline(row[c]);
}

/* dst[r, c] = bf16(dq(q)[r, c]) for every row (exact, see the top of the file). */
static fp4_status dequantize_bf16(int threads, const fp4_qmatrix *q, uint16_t *dst) {
  size_t bytes = (size_t)threads * (size_t)q->cols * sizeof(float);
  dq_job j = {q, dst, malloc(bytes)};
  if (!j.rows) return oom("dequantized rows", bytes);
  fp4_cpu_parallel(threads, q->rows, dq_unit, &j);
  free(j.rows);
  return FP4_OK;
}

/* ---- grouped GEMM -------------------------------------------------------------------------------- */

typedef struct gemm_env {
  const fp4_cpu_kernels *k;
  int threads;
  char *config;
  size_t config_size;
} gemm_env;

/* out = alpha * w_mult * a_mult * a * dq(w)^T for a dense host a (f32/bf16/f16) on the cpu GEMM; a_mult
 * is the multiplier of activations a holds dequantized (1 for W4A16), applied in the GEMM's double
 * scale as the reference applies it: never rounded into the float alpha first. */
static fp4_status expert_gemm(const gemm_env *env, const fp4_matrix *a, const fp4_qmatrix *w, float alpha, float a_mult,
                              fp4_matrix *out) {
  fp4_problem q = {.op = FP4_OP_MM_W4A16, .a = a, .b = w, .alpha = alpha, .out = out, .memory = FP4_MEMORY_HOST};
  return fp4_cpu_gemm_problem_scaled(env->k, env->threads, &q, (double)a_mult, env->config, env->config_size);
}

fp4_status fp4_cpu_grouped_mm(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config,
                              size_t config_size) {
  const int w4a4 = p->op == FP4_OP_GROUPED_MM;
  const int64_t T = fp4_problem_m(p), K = fp4_problem_k(p);
  char used[64] = "none";
  gemm_env env = {k, threads, used, sizeof used};
  uint16_t *staged = NULL;
  float a_mult = 1.0f;
  fp4_matrix a;
  if (w4a4) {
    /* The whole W4A4 operand once as exact bf16, so every expert's rows are a plain row range. */
    size_t bytes = (size_t)T * (size_t)K * sizeof *staged;
    staged = malloc(bytes ? bytes : 1);
    if (!staged) return oom("the grouped GEMM's activations", bytes);
    fp4_status st = dequantize_bf16(threads, p->a_q, staged);
    if (st) {
      free(staged);
      return st;
    }
    a = (fp4_matrix){staged, T, K, K, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    a_mult = p->a_q->multiplier;
  } else {
    a = *p->a;
  }
  fp4_status st = FP4_OK;
  for (int64_t e = 0; e < p->gb->experts && !st; e++) {
    const int64_t r0 = p->offsets[e], n = p->offsets[e + 1] - r0;
    if (n == 0) continue; /* an expert without rows is not touched */
    fp4_qmatrix w = expert_view(p->gb, e);
    fp4_matrix av = rows_view(&a, r0, n), ov = rows_view(p->out, r0, n);
    st = expert_gemm(&env, &av, &w, p->alpha, a_mult, &ov);
  }
  free(staged);
  snprintf(config, config_size, "grouped:%s", used);
  return st;
}

/* ---- MoE ------------------------------------------------------------------------------------------ */

typedef struct moe_run {
  const fp4_problem *p;
  gemm_env env;
  fp4_moe_ws_layout ws;
  uint8_t *base;
  int64_t T, k, H;
  int32_t *sorted, *inverse;
  int64_t *offsets;
  void *gather;       /* the busiest routed expert's gate_up input rows */
  size_t gather_bytes;
} moe_run;

static void *section(const moe_run *r, size_t off) { return r->base + off; }

/* Groups the T*k (token, slot) pairs by expert, stably (token-major, then slot), as the reference
 * does. offsets[e] serves as expert e's fill cursor, which leaves it at the start of expert e+1;
 * one shift then restores the starts. */
static void permute(moe_run *r, int64_t E) {
  const int32_t *ids = r->p->routing->topk_ids;
  const int64_t P = r->T * r->k;
  int64_t *off = r->offsets;
  memset(off, 0, (size_t)(E + 1) * sizeof *off);
  for (int64_t i = 0; i < P; i++) off[ids[i] + 1]++;
  for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
  for (int64_t i = 0; i < P; i++) {
    int64_t row = off[ids[i]]++;
    r->sorted[row] = (int32_t)i;
    r->inverse[i] = (int32_t)row;
  }
  memmove(off + 1, off, (size_t)E * sizeof *off);
  off[0] = 0;
}

/* SiLU(gate) * up in double from the f32 gate_up outputs, rounded once to f32 (contract step 4). */
typedef struct act_job {
  const float *g; /* [rows, 2I] */
  float *act;     /* [rows, I]  */
  int64_t I;
} act_job;

static void act_unit(void *arg, int64_t m, int thread) {
  (void)thread;
  const act_job *j = arg;
  const float *g = j->g + m * 2 * j->I;
  float *a = j->act + m * j->I;
  for (int64_t i = 0; i < j->I; i++) {
    double gate = g[i], up = g[j->I + i];
    a[i] = (float)(gate / (1.0 + exp(-gate)) * up);
  }
}

/* Runtime-recipe quantization of x into q (128x4 scales, the workspace's layout) on the cpu
 * kernels: bit-identical to the reference's fp4_quantize_ref. */
static void quantize(const moe_run *r, const fp4_matrix *x, fp4_format format, float act_scale, fp4_qmatrix *q) {
  *q = (fp4_qmatrix){q->data, q->scales, x->rows, x->cols, format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_problem qp = {.op = FP4_OP_QUANTIZE, .a = x, .global_scale = format == FP4_FORMAT_NVFP4 ? act_scale : 1.0f,
                    .q_out = q, .memory = FP4_MEMORY_HOST};
  fp4_cpu_quantize_problem(r->env.k, r->env.threads, &qp);
}

/* Copies rows sorted[r0..r0+n)/k of src (dense, its dtype and ld) into the gather buffer. */
static fp4_matrix gather_rows(const moe_run *r, const fp4_matrix *src, int64_t r0, int64_t n) {
  const size_t es = fp4_dtype_size(src->dtype), row_bytes = (size_t)src->cols * es;
  unsigned char *dst = r->gather;
  for (int64_t m = 0; m < n; m++)
    memcpy(dst + (size_t)m * row_bytes, fp4_cpu_dense_row(src, r->sorted[r0 + m] / r->k), row_bytes);
  return (fp4_matrix){r->gather, n, src->cols, src->cols, src->dtype, FP4_MEMORY_HOST};
}

/*
 * One expert set (routed: E experts over the permuted rows; shared: 1 expert over the T tokens),
 * from the hidden states to its down outputs (f32 [rows, H] at down). Workspace reuse, in order:
 * W4A4 stages the dequantized hidden states (bf16 [T, H]) in `down` (4*rows*H bytes, rows >= T)
 * until the gate_up GEMMs have read them; W4A4 stages the dequantized activations (bf16 [rows, I])
 * in the gate_up output section once SiLU*up has consumed it.
 */
static fp4_status run_experts(moe_run *r, const fp4_moe_experts *x, int shared, float *down) {
  const fp4_problem *p = r->p;
  const int w4a4 = p->moe->mode == FP4_MOE_W4A4;
  const int64_t E = x->gate_up.experts, I = x->gate_up.rows / 2, H = r->H, T = r->T;
  const int64_t rows = shared ? T : T * r->k;
  int64_t one_expert[2] = {0, rows};
  const int64_t *off = shared ? one_expert : r->offsets;
  fp4_status st = FP4_OK;

  /* gate_up input: W4A16 the hidden states as given; W4A4 each token quantized once (contract 2). */
  fp4_matrix hidden = *p->a;
  float a_mult = 1.0f;
  if (w4a4) {
    fp4_qmatrix hq = {section(r, r->ws.hidden_q), section(r, r->ws.hidden_q_scales)};
    quantize(r, p->a, x->gate_up.format, x->gate_up_act_scale, &hq);
    if ((st = dequantize_bf16(r->env.threads, &hq, (uint16_t *)down))) return st;
    hidden = (fp4_matrix){down, T, H, H, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    a_mult = hq.multiplier;
  }

  /* gate_up: g[row, 0..2I) in f32. */
  float *gd = section(r, r->ws.gate_up_out);
  fp4_matrix g = {gd, rows, 2 * I, 2 * I, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  for (int64_t e = 0; e < E && !st; e++) {
    const int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n == 0) continue; /* an expert without tokens is not touched */
    fp4_qmatrix w = expert_view(&x->gate_up, e);
    fp4_matrix av = shared ? rows_view(&hidden, r0, n) : gather_rows(r, &hidden, r0, n);
    fp4_matrix ov = rows_view(&g, r0, n);
    st = expert_gemm(&r->env, &av, &w, 1.0f, a_mult, &ov);
  }
  if (st) return st;

  float *act = section(r, r->ws.act);
  act_job aj = {gd, act, I};
  fp4_cpu_parallel(r->env.threads, rows, act_unit, &aj);

  /* down input: W4A16 act (f32); W4A4 act re-quantized row-wise (contract 5), staged as bf16. */
  fp4_matrix am = {act, rows, I, I, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  a_mult = 1.0f;
  if (w4a4) {
    fp4_qmatrix aq = {section(r, r->ws.act_q), section(r, r->ws.act_q_scales)};
    quantize(r, &am, x->down.format, x->down_act_scale, &aq);
    if ((st = dequantize_bf16(r->env.threads, &aq, (uint16_t *)gd))) return st;
    am = (fp4_matrix){gd, rows, I, I, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    a_mult = aq.multiplier;
  }

  /* down: d[row, 0..H) in f32, rows in permuted order (no gather: each expert's rows are contiguous). */
  fp4_matrix d = {down, rows, H, H, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  for (int64_t e = 0; e < E && !st; e++) {
    const int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n == 0) continue;
    fp4_qmatrix w = expert_view(&x->down, e);
    fp4_matrix av = rows_view(&am, r0, n), ov = rows_view(&d, r0, n);
    st = expert_gemm(&r->env, &av, &w, 1.0f, a_mult, &ov);
  }
  return st;
}

/* Weighted combine in double, slots in order then the shared expert, one rounding (contract 7). */
typedef struct combine_job {
  const moe_run *r;
  const float *down, *shared_out;
} combine_job;

static void combine_unit(void *arg, int64_t t, int thread) {
  (void)thread;
  const combine_job *j = arg;
  const moe_run *r = j->r;
  const fp4_moe_routing *rt = r->p->routing;
  const fp4_matrix *w = &rt->topk_weights;
  const float *wt = (const float *)w->data + t * (w->ld ? w->ld : w->cols);
  const int32_t *inv = r->inverse + t * r->k;
  const double sw = rt->shared_weights ? (double)rt->shared_weights[t] : 1.0;
  for (int64_t h = 0; h < r->H; h++) {
    double acc = 0.0;
    for (int64_t s = 0; s < r->k; s++) acc += (double)wt[s] * (double)j->down[(int64_t)inv[s] * r->H + h];
    if (j->shared_out) acc += sw * (double)j->shared_out[t * r->H + h];
    fp4_matrix_set(r->p->out, t, h, (float)acc);
  }
}

fp4_status fp4_cpu_moe(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config, size_t config_size) {
  const fp4_moe_layer *L = p->moe;
  char used[64] = "none";
  moe_run r = {.p = p, .env = {k, threads, used, sizeof used}, .base = p->workspace, .T = p->a->rows,
               .k = p->routing->top_k, .H = L->routed.gate_up.cols};
  snprintf(config, config_size, "moe");
  if (r.T == 0) return FP4_OK;
  fp4_status st = fp4_moe_ws_layout_make("cpu", L, r.T, r.k, &r.ws);
  if (st) return st;
  if (p->workspace_bytes < r.ws.total)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "cpu: workspace_bytes (%zu) is less than the %zu bytes the layout needs",
                    p->workspace_bytes, r.ws.total);
  r.sorted = section(&r, r.ws.sorted);
  r.inverse = section(&r, r.ws.inverse);
  r.offsets = section(&r, r.ws.offsets);
  const int64_t E = L->routed.gate_up.experts;
  permute(&r, E);

  int64_t most = 0;
  for (int64_t e = 0; e < E; e++)
    if (r.offsets[e + 1] - r.offsets[e] > most) most = r.offsets[e + 1] - r.offsets[e];
  const size_t es = L->mode == FP4_MOE_W4A4 ? 2 : fp4_dtype_size(p->a->dtype);
  r.gather_bytes = (size_t)most * (size_t)r.H * es;
  r.gather = malloc(r.gather_bytes ? r.gather_bytes : 1);
  if (!r.gather) return oom("the routed experts' gathered inputs", r.gather_bytes);

  float *down = section(&r, r.ws.down_out), *shared_out = L->shared ? section(&r, r.ws.shared_out) : NULL;
  st = run_experts(&r, &L->routed, 0, down);
  if (!st && L->shared) st = run_experts(&r, L->shared, 1, shared_out);
  free(r.gather);
  if (st) return st;
  combine_job cj = {&r, down, shared_out};
  fp4_cpu_parallel(threads, r.T, combine_unit, &cj);
  snprintf(config, config_size, "moe:%s", used);
  return FP4_OK;
}
