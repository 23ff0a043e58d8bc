/*
 * The reference grouped GEMM and MoE layer: the oracle of docs/moe.md's numeric contract.
 * Every GEMM is exact dequantization to double + double accumulation, its result rounded once to f32 (the
 * intermediates) or to the output dtype. The MoE intermediates live in the caller's workspace in
 * the common layout (src/dispatch/moe_workspace.h); only dequantization scratch is allocated here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ref/ref_gemm.h"
#include "backends/ref/ref_moe.h"
#include "core/error.h"
#include "dispatch/moe_workspace.h"
#include "format/codec.h"
#include "format/format.h"

static fp4_status oom(const char *what) { return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "ref: out of host memory for %s", what); }

/* Expert e of a validated host grouped matrix (the same view fp4_grouped_expert gives). */
static fp4_qmatrix expert_view(const fp4_grouped_qmatrix *g, int64_t e) {
  size_t sbytes = (size_t)fp4_layout_bytes((int)g->layout, g->rows, fp4_scale_cols(g->format, g->cols));
  return (fp4_qmatrix){(uint8_t *)g->data + e * g->rows * (g->cols / 2), (uint8_t *)g->scales + (size_t)e * sbytes,
                       g->rows, g->cols, g->format, g->layout, g->multipliers ? g->multipliers[e] : 1.0f, g->memory};
}

fp4_status fp4_ref_grouped_mm(const fp4_problem *p) {
  const int w4a4 = p->op == FP4_OP_GROUPED_MM;
  const int64_t K = fp4_problem_k(p);
  int64_t most = 0;
  for (int64_t e = 0; e < p->gb->experts; e++)
    if (p->offsets[e + 1] - p->offsets[e] > most) most = p->offsets[e + 1] - p->offsets[e];
  double *a = malloc((size_t)(most ? most : 1) * (size_t)K * sizeof *a);
  if (!a) return oom("the grouped GEMM's activations");
  fp4_status st = FP4_OK;
  for (int64_t e = 0; e < p->gb->experts && !st; e++) {
    const int64_t r0 = p->offsets[e], n = p->offsets[e + 1] - r0;
    if (n == 0) continue;
    fp4_qmatrix w = expert_view(p->gb, e);
    /* The same double operations in the same order as the reference fp4_mm of these rows. */
    double scale = (double)p->alpha * (double)w.multiplier;
    if (w4a4) {
      scale *= (double)p->a_q->multiplier;
      fp4_dequantize_rows_f64(p->a_q, r0, n, a);
    } else {
      for (int64_t m = 0; m < n; m++)
        for (int64_t k = 0; k < K; k++) a[m * K + k] = fp4_matrix_get(p->a, r0 + m, k);
    }
    st = fp4_ref_rows_times_weights(a, n, &w, scale, p->out, r0);
  }
  free(a);
  return st;
}

/* ---- MoE ------------------------------------------------------------------------------------------ */

typedef struct moe_run {
  const fp4_problem *p;
  fp4_moe_ws_layout ws;
  uint8_t *base;
  int64_t T, k, H;
  int32_t *sorted, *inverse;
  int64_t *offsets;
  double *scratch; /* activation rows of one expert, dequantized or converted */
} moe_run;

static void *section(const moe_run *r, size_t off) { return r->base + off; }

/* Groups the T*k (token, slot) pairs by expert, stably (token-major, then slot): offsets[e] is the
 * first permuted row of expert e, sorted[p] the pair of row p, inverse[pair] its row. */
static fp4_status permute(moe_run *r, int64_t E) {
  const int32_t *ids = r->p->routing->topk_ids;
  const int64_t P = r->T * r->k;
  int64_t *next = calloc((size_t)E, sizeof *next);
  if (!next) return oom("the expert permutation");
  memset(r->offsets, 0, (size_t)(E + 1) * sizeof *r->offsets);
  for (int64_t i = 0; i < P; i++) r->offsets[ids[i] + 1]++;
  for (int64_t e = 0; e < E; e++) r->offsets[e + 1] += r->offsets[e];
  for (int64_t i = 0; i < P; i++) {
    int64_t row = r->offsets[ids[i]] + next[ids[i]]++;
    r->sorted[row] = (int32_t)i;
    r->inverse[i] = (int32_t)row;
  }
  free(next);
  return FP4_OK;
}

/* One expert set (routed: E experts over the permuted rows; shared: 1 expert over the T tokens) from
 * the hidden states to its down outputs (f32 [rows, H], row p at down + p*H). */
static fp4_status run_experts(moe_run *r, const fp4_moe_experts *x, int shared, float *down) {
  const fp4_problem *p = r->p;
  const int w4a4 = p->moe->mode == FP4_MOE_W4A4;
  const int64_t E = x->gate_up.experts, I = x->gate_up.rows / 2, H = r->H;
  const int64_t rows = shared ? r->T : r->T * r->k;
  int64_t one_expert[2] = {0, rows};
  const int64_t *off = shared ? one_expert : r->offsets;
  fp4_status st = FP4_OK;

  /* W4A4: the hidden states quantized once (runtime recipe, the set's activation scale). */
  fp4_qmatrix hq = {section(r, r->ws.hidden_q), section(r, r->ws.hidden_q_scales), r->T, H, x->gate_up.format,
                    FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  if (w4a4)
    fp4_quantize_ref(p->a, x->gate_up.format == FP4_FORMAT_NVFP4 ? x->gate_up_act_scale : 1.0f, &hq);

  /* gate_up: g[row, 0..2I) in f32. */
  fp4_matrix g = {section(r, r->ws.gate_up_out), rows, 2 * I, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  for (int64_t e = 0; e < E && !st; e++) {
    const int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n == 0) continue; /* an expert without tokens is not touched */
    fp4_qmatrix w = expert_view(&x->gate_up, e);
    double scale = (double)w.multiplier;
    if (w4a4) scale *= (double)hq.multiplier;
    for (int64_t m = 0; m < n; m++) {
      int64_t t = shared ? r0 + m : r->sorted[r0 + m] / r->k;
      double *dst = r->scratch + m * H;
      if (w4a4) fp4_dequantize_rows_f64(&hq, t, 1, dst);
      else
        for (int64_t c = 0; c < H; c++) dst[c] = fp4_matrix_get(p->a, t, c);
    }
    st = fp4_ref_rows_times_weights(r->scratch, n, &w, scale, &g, r0);
  }
  if (st) return st;

  /* act = SiLU(gate) * up, in double from the f32 gate_up outputs, rounded to f32. */
  float *gd = g.data, *act = section(r, r->ws.act);
  for (int64_t m = 0; m < rows; m++)
    for (int64_t i = 0; i < I; i++) {
      double gate = gd[m * 2 * I + i], up = gd[m * 2 * I + I + i];
      act[m * I + i] = (float)(gate / (1.0 + exp(-gate)) * up);
    }
  fp4_matrix am = {act, rows, I, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {section(r, r->ws.act_q), section(r, r->ws.act_q_scales), rows, I, x->down.format,
                    FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  if (w4a4) fp4_quantize_ref(&am, x->down.format == FP4_FORMAT_NVFP4 ? x->down_act_scale : 1.0f, &aq);

  /* down: d[row, 0..H) in f32. */
  fp4_matrix d = {down, rows, H, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  for (int64_t e = 0; e < E && !st; e++) {
    const int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n == 0) continue;
    fp4_qmatrix w = expert_view(&x->down, e);
    double scale = (double)w.multiplier;
    if (w4a4) {
      scale *= (double)aq.multiplier;
      fp4_dequantize_rows_f64(&aq, r0, n, r->scratch);
    } else {
      for (int64_t j = 0; j < n * I; j++) r->scratch[j] = act[r0 * I + j];
    }
    st = fp4_ref_rows_times_weights(r->scratch, n, &w, scale, &d, r0);
  }
  return st;
}

fp4_status fp4_ref_moe(const fp4_problem *p) {
  const fp4_moe_layer *L = p->moe;
  const fp4_moe_routing *rt = p->routing;
  moe_run r = {.p = p, .base = p->workspace, .T = p->a->rows, .k = rt->top_k, .H = L->routed.gate_up.cols};
  fp4_status st = fp4_moe_ws_layout_make("ref", L, r.T, r.k, &r.ws);
  if (st) return st;
  if (p->workspace_bytes < r.ws.total)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "ref: workspace_bytes (%zu) is less than the %zu bytes the layout needs",
                    p->workspace_bytes, r.ws.total);
  r.sorted = section(&r, r.ws.sorted);
  r.inverse = section(&r, r.ws.inverse);
  r.offsets = section(&r, r.ws.offsets);
  /* Scratch: the rows of the busiest expert (at most max(P, T)) times max(H, Imax) doubles. */
  const int64_t width = r.H > r.ws.inter ? r.H : r.ws.inter;
  r.scratch = malloc((size_t)r.ws.rows * (size_t)width * sizeof *r.scratch);
  if (!r.scratch) return oom("the MoE activations");

  float *down = section(&r, r.ws.down_out), *shared_out = L->shared ? section(&r, r.ws.shared_out) : NULL;
  st = permute(&r, L->routed.gate_up.experts);
  if (!st) st = run_experts(&r, &L->routed, 0, down);
  if (!st && L->shared) st = run_experts(&r, L->shared, 1, shared_out);
  free(r.scratch);
  if (st) return st;

  /* Weighted combine in double, slots in order then the shared expert, one rounding at the end. */
  const fp4_matrix *w = &rt->topk_weights;
  const int64_t wld = w->ld ? w->ld : w->cols;
  const float *wd = w->data;
  for (int64_t t = 0; t < r.T; t++)
    for (int64_t h = 0; h < r.H; h++) {
      double acc = 0.0;
      for (int64_t j = 0; j < r.k; j++)
        acc += (double)wd[t * wld + j] * (double)down[(int64_t)r.inverse[t * r.k + j] * r.H + h];
      if (shared_out)
        acc += (rt->shared_weights ? (double)rt->shared_weights[t] : 1.0) * (double)shared_out[t * r.H + h];
      fp4_matrix_set(p->out, t, h, (float)acc);
    }
  return FP4_OK;
}
