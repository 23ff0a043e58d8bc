/*
 * Host code of the cuda backend's grouped GEMM and MoE layer: the rules the kernels need, the
 * workspace they use (the common layout of src/dispatch/moe_workspace.h plus routing scratch after
 * it) and the launch sequence of a layer: route -> [quantize] -> gate_up -> SiLU*up -> [quantize]
 * -> down, again for the shared expert, then the combine (W4A4 decode: each quantize writes bf16
 * values in one kernel, the second one computing SiLU*up itself). Nothing here reads device data,
 * so a layer call never synchronizes with the host.
 *
 * Two grouped GEMM paths, chosen per call from the mean rows per expert slot (T*k / min(E, T*k):
 * the host knows no more): the streaming kernels of moe_grouped.cu (decode: each active expert's
 * weights read once) and, from MOE_LARGE_M_MIN_ROWS rows, the large-M tiles of
 * moe_grouped_large.cu (prefill: compute-bound, operands reused from shared memory). The large-M
 * tiles take no f32 activations, so on that path the W4A16 layer writes its SiLU*up intermediate
 * in bf16 (docs/moe.md: within the W4A16 tolerance); gate_up runs there when the hidden states
 * are bf16 (or f16 with NVFP4) or quantized (W4A4), else on the streaming kernel.
 */
#include "backends/cuda/moe_host.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dispatch/moe_workspace.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/moe_kernels.h"

enum { MOE_K_MULTIPLE = 32, MOE_MAX_SLOTS = 65535, MOE_MAX_SPLITS = 16, MOE_ROWS_PER_CHUNK = 8 };

/* Mean rows per expert slot from which the grouped GEMMs run the large-M tiles. Measured on the H200
 * (`fp4kit bench --moe` with both paths, bench/results/h200/2026-11-30-session3): at 5-8 rows per
 * expert (B = 256) streaming wins (Qwen3.5 3.7 vs 5.9 ms, DeepSeek-R1 6.6 vs 10.2 ms), at 20-32 rows
 * (B = 1024) the tiles win by 2.7-2.8x (6.2 vs 17.2 ms, 10.5 vs 28.3 ms). The environment variable
 * FP4KIT_MOE_LARGE_M_MIN_ROWS (a positive integer) overrides it, for measuring the crossover on
 * another device (docs/moe.md). */
enum { MOE_LARGE_M_MIN_ROWS = 16 };

static int64_t large_m_min_rows(void) {
  const char *e = getenv("FP4KIT_MOE_LARGE_M_MIN_ROWS");
  const long long v = e ? atoll(e) : 0;
  return v > 0 ? (int64_t)v : MOE_LARGE_M_MIN_ROWS;
}

static int large_m_wanted(int64_t rows, int64_t slots) {
  return slots > 0 && (rows + slots - 1) / slots >= large_m_min_rows();
}

static fp4_status refuse(char *reason, size_t reason_size, const char *fmt, long long v) {
  fp4_reason(reason, reason_size, fmt, v);
  return FP4_ERR_UNSUPPORTED;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* K multiple of 32: a lane's 32 weights are one aligned 16-byte load of whole scale blocks. */
static fp4_status check_k(const char *what, int64_t k, char *reason, size_t reason_size) {
  char fmt[160];
  snprintf(fmt, sizeof fmt, "%s = %%lld: the grouped kernels need it to be a multiple of %d (16-byte weight loads)", what,
           MOE_K_MULTIPLE);
  if (k % MOE_K_MULTIPLE) return refuse(reason, reason_size, fmt, (long long)k);
  return FP4_OK;
}

static fp4_status check_slots(int64_t experts, int64_t rows, char *reason, size_t reason_size) {
  if (min64(experts, rows) > MOE_MAX_SLOTS)
    return refuse(reason, reason_size, "min(E, rows) = %lld: the grouped kernels take at most 65535 active experts",
                  (long long)min64(experts, rows));
  return FP4_OK;
}

fp4_status fp4_cuda_moe_supports(const fp4_problem *p, char *reason, size_t reason_size) {
  fp4_status st;
  if (p->op == FP4_OP_MOE) {
    const fp4_moe_layer *L = p->moe;
    if ((st = check_k("H", L->routed.gate_up.cols, reason, reason_size))) return st;
    if ((st = check_k("I", L->routed.down.cols, reason, reason_size))) return st;
    if (L->shared && (st = check_k("the shared expert's I", L->shared->down.cols, reason, reason_size))) return st;
    uintptr_t bits = (uintptr_t)L->routed.gate_up.data | (uintptr_t)L->routed.down.data;
    if (L->shared) bits |= (uintptr_t)L->shared->gate_up.data | (uintptr_t)L->shared->down.data;
    if (bits & 15) {
      fp4_reason(reason, reason_size, "the expert weights must be 16-byte aligned (16-byte weight loads)");
      return FP4_ERR_UNSUPPORTED;
    }
    return check_slots(L->routed.gate_up.experts, p->a->rows * p->routing->top_k, reason, reason_size);
  }
  if ((st = check_k("K", p->gb->cols, reason, reason_size))) return st;
  if ((uintptr_t)p->gb->data & 15) {
    fp4_reason(reason, reason_size, "b->data must be 16-byte aligned (16-byte weight loads)");
    return FP4_ERR_UNSUPPORTED;
  }
  return check_slots(p->gb->experts, fp4_problem_m(p), reason, reason_size);
}

static int act_kind(fp4_dtype dtype) {
  return dtype == FP4_DTYPE_BF16 ? FP4_CUDA_ACT_BF16 : dtype == FP4_DTYPE_F16 ? FP4_CUDA_ACT_F16 : FP4_CUDA_ACT_F32;
}

/* Row chunks of one expert are split over CTAs when the mean rows per active expert is large
 * (prefill), so a hot expert's rows are not walked by one CTA per N tile alone. */
static int splits_for(int64_t rows, int64_t slots) {
  int64_t mean = (rows + slots - 1) / slots, chunks = (mean + MOE_ROWS_PER_CHUNK - 1) / MOE_ROWS_PER_CHUNK;
  return (int)(chunks < 1 ? 1 : chunks > MOE_MAX_SPLITS ? MOE_MAX_SPLITS : chunks);
}

static size_t expert_scale_bytes(const fp4_grouped_qmatrix *g) {
  size_t b = 0;
  fp4_scales_size(g->format, g->layout, g->rows, g->cols, &b);
  return b;
}

static void set_weights(fp4_cuda_grouped_args *a, const fp4_grouped_qmatrix *w) {
  a->format = (int)w->format;
  a->w = w->data;
  a->w_scales = w->scales;
  a->w_scale_stride = (int64_t)expert_scale_bytes(w);
  a->w_layout = (int)w->layout;
  a->w_mult = w->multipliers;
  a->experts = w->experts;
  a->n = w->rows;
  a->k = w->cols;
}

/* The kernel arguments of a grouped GEMM call. */
static void grouped_args_of(const fp4_problem *p, fp4_cuda_grouped_args *out) {
  fp4_cuda_grouped_args a;
  memset(&a, 0, sizeof a);
  set_weights(&a, p->gb);
  const int64_t T = fp4_problem_m(p);
  if (p->op == FP4_OP_GROUPED_MM) {
    a.act = FP4_CUDA_ACT_FP4;
    a.a = p->a_q->data;
    a.a_scales = p->a_q->scales;
    a.a_layout = (int)p->a_q->layout;
    a.a_mult = p->a_q->multiplier;
  } else {
    a.act = act_kind(p->a->dtype);
    a.a = p->a->data;
    a.lda = p->a->ld ? p->a->ld : p->a->cols;
    a.a_mult = 1.0f;
  }
  a.a_div = 1;
  a.offsets = p->offsets;
  a.rows = T;
  a.alpha = p->alpha;
  a.out = p->out->data;
  a.ldo = p->out->ld ? p->out->ld : p->out->cols;
  a.out_dtype = (int)p->out->dtype;
  a.slots = min64(a.experts, T);
  a.splits = splits_for(T, a.slots);
  *out = a;
}

/* The large-M tiles for this grouped GEMM (many rows per expert, activations they take). */
static int grouped_large(const fp4_cuda_grouped_args *a) {
  return large_m_wanted(a->rows, a->slots) && fp4_cuda_grouped_large_supported(a);
}

/* Runs g on the large-M tiles when wanted and possible, else on the streaming kernels. */
static int grouped_run(const fp4_cuda_grouped_args *g, int large, void *stream, int pdl) {
  return large && fp4_cuda_grouped_large_supported(g) ? fp4_cuda_grouped_gemm_large(g, stream, pdl)
                                                      : fp4_cuda_grouped_gemm(g, stream, pdl);
}

static int grouped_launch(const fp4_problem *p, int pdl) {
  fp4_cuda_grouped_args a;
  grouped_args_of(p, &a);
  return grouped_run(&a, large_m_wanted(a.rows, a.slots), p->stream, pdl);
}

/* The routed experts of a layer run the large-M tiles (the shared expert decides for itself: its
 * rows are all T tokens). */
static int moe_large(const fp4_problem *p) {
  const int64_t rows = p->a->rows * p->routing->top_k;
  return large_m_wanted(rows, min64(p->moe->routed.gate_up.experts, rows));
}

const char *fp4_cuda_moe_config(const fp4_problem *p) {
  if (p->op == FP4_OP_MOE) return moe_large(p) ? "moe.large-m" : "moe";
  fp4_cuda_grouped_args a;
  grouped_args_of(p, &a);
  return grouped_large(&a) ? "grouped.large-m" : "grouped";
}

/* Routing scratch after the common layout: counts [E], active [E], active count, shared offsets,
 * the dense M tile numbering of the prefill tiles [E+1]; for W4A4 the quantized hidden rows as
 * exact bf16 [T, H] (quantize_as_bf16). */
typedef struct moe_extra {
  size_t counts, active, active_count, shared_offsets, tile_starts, hidden_bf16, total;
} moe_extra;

static size_t align_up(size_t x) { return (x + FP4_MOE_WS_ALIGN - 1) / FP4_MOE_WS_ALIGN * FP4_MOE_WS_ALIGN; }

static moe_extra extra_layout(size_t common, const fp4_moe_layer *layer, int64_t tokens) {
  const int64_t experts = layer->routed.gate_up.experts;
  const size_t bf16_bytes =
      layer->mode == FP4_MOE_W4A4 ? (size_t)tokens * (size_t)layer->routed.gate_up.cols * sizeof(uint16_t) : 0;
  moe_extra x;
  x.counts = align_up(common);
  x.active = align_up(x.counts + (size_t)experts * sizeof(int32_t));
  x.active_count = align_up(x.active + (size_t)experts * sizeof(int32_t));
  x.shared_offsets = align_up(x.active_count + sizeof(int32_t));
  x.tile_starts = align_up(x.shared_offsets + 2 * sizeof(int64_t));
  x.hidden_bf16 = align_up(x.tile_starts + (size_t)(experts + 1) * sizeof(int32_t));
  x.total = x.hidden_bf16 + bf16_bytes;
  return x;
}

size_t fp4_cuda_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k) {
  fp4_moe_ws_layout ws;
  if (tokens == 0 || fp4_moe_ws_layout_make("cuda", layer, tokens, top_k, &ws)) return 0;
  return extra_layout(ws.total, layer, tokens).total;
}

typedef struct moe_launch {
  const fp4_problem *p;
  uint8_t *base;
  fp4_moe_ws_layout ws;
  moe_extra x;
  int pdl;
  const int32_t *tile_starts; /* the routing kernel's dense M tile numbering, or NULL */
  int64_t tile_rows;
  int hidden_bf16_done; /* W4A4 decode: the routing launch also wrote the routed set's bf16 rows */
} moe_launch;

static void *at(const moe_launch *m, size_t off) { return m->base + off; }

/* W4A4: quantizes a GEMM's input rows (runtime recipe, 128x4 scales) into workspace sections and
 * points g's activations at them. */
static int quantize_input(const moe_launch *m, fp4_cuda_grouped_args *g, const void *x, int x_dtype, int64_t rows,
                          int64_t cols, int64_t ld, const fp4_grouped_qmatrix *w, float act_scale, size_t q_off,
                          size_t s_off) {
  const int nv = w->format == FP4_FORMAT_NVFP4;
  const float gsf = nv ? act_scale : 1.0f;
  fp4_cuda_quantize_args q = {.x = x, .rows = rows, .cols = cols, .ld = ld, .x_dtype = x_dtype, .q = at(m, q_off),
                              .scales = at(m, s_off), .format = (int)w->format, .layout = (int)FP4_LAYOUT_128X4,
                              .global_scale = gsf};
  int e = fp4_cuda_quantize(&q, m->p->stream, m->pdl);
  g->act = FP4_CUDA_ACT_FP4;
  g->a = q.q;
  g->a_scales = q.scales;
  g->a_layout = (int)FP4_LAYOUT_128X4;
  g->a_mult = nv ? 1.0f / gsf : 1.0f;
  return e;
}

/* W4A4 on the streaming tensor-core kernels (not the large-M tiles, which read FP4 directly): the
 * rows [rows, cols] quantized and written to out as the exact bf16 values of the quantized elements
 * in one kernel (fp4_cuda_moe_quantize_bf16; for down straight from gate_up, src
 * FP4_CUDA_MOE_SRC_SILU_MUL, so SiLU*up runs inside it), and g pointed at them. The GEMM then
 * multiplies the same bf16 values it would form from the codes in every weight tile (a small-M
 * ".pro" config's reasoning, docs/cuda-small-m.md), once per row instead of once per CTA, and runs
 * the bf16 kernels (the lean decode kernel at one token tile). One launch where quantize, the
 * dequantize and (for down) SiLU*up took three. bf16_rows_possible: whether those kernels can read
 * such rows (cols % 128 == 0, 16-byte aligned); else the caller quantizes to FP4 rows. */
static int bf16_rows_possible(int64_t cols, const void *out) { return cols % 128 == 0 && (uintptr_t)out % 16 == 0; }

/* The NVFP4 global encode scale the runtime recipe quantizes w's inputs with (1 for MXFP4). */
static float input_gsf(const fp4_grouped_qmatrix *w, float act_scale) {
  return w->format == FP4_FORMAT_NVFP4 ? act_scale : 1.0f;
}

/* Points g's activations at bf16 rows [*, cols] quantized with input_gsf(w, act_scale). */
static void use_bf16_rows(fp4_cuda_grouped_args *g, const fp4_grouped_qmatrix *w, float act_scale, void *rows,
                          int64_t cols) {
  g->act = FP4_CUDA_ACT_BF16;
  g->a = rows;
  g->lda = cols;
  g->a_scales = NULL;
  g->a_mult = 1.0f / input_gsf(w, act_scale);
}

static int quantize_as_bf16(const moe_launch *m, fp4_cuda_grouped_args *g, const void *x, int src, int64_t rows,
                            int64_t cols, int64_t ld, const fp4_grouped_qmatrix *w, float act_scale, void *out) {
  const int e = fp4_cuda_moe_quantize_bf16(x, src, ld, rows, cols, (int)w->format, input_gsf(w, act_scale), out,
                                           m->p->stream, m->pdl);
  use_bf16_rows(g, w, act_scale, out, cols);
  return e;
}

/* One expert set through gate_up, SiLU*up and down; rows = P (routed) or T (shared). */
static int run_set(const moe_launch *m, const fp4_moe_experts *set, int shared, void *down_out) {
  const fp4_problem *p = m->p;
  const int w4a4 = p->moe->mode == FP4_MOE_W4A4;
  const int64_t T = p->a->rows, k = p->routing->top_k, rows = shared ? T : T * k;
  const int64_t H = set->gate_up.cols, I = set->gate_up.rows / 2;
  int e;
  fp4_cuda_grouped_args g;
  memset(&g, 0, sizeof g);
  set_weights(&g, &set->gate_up);
  g.alpha = 1.0f;
  g.rows = rows;
  g.offsets = shared ? at(m, m->x.shared_offsets) : at(m, m->ws.offsets);
  if (!shared) {
    g.active = at(m, m->x.active);
    g.active_count = at(m, m->x.active_count);
    g.a_rows = at(m, m->ws.sorted);
    g.a_div = (int32_t)k;
    g.tile_starts = m->tile_starts;
    g.tile_rows = m->tile_rows;
  } else {
    g.a_div = 1;
  }
  g.slots = min64(g.experts, rows);
  g.splits = splits_for(rows, g.slots);
  const int large = large_m_wanted(rows, g.slots);
  if (w4a4) {
    const int64_t ld = p->a->ld ? p->a->ld : H;
    void *hidden_bf16 = at(m, m->x.hidden_bf16);
    if (!shared && m->hidden_bf16_done) /* moe_launch_layer: in the routing launch */
      use_bf16_rows(&g, &set->gate_up, set->gate_up_act_scale, hidden_bf16, H);
    else if ((e = !large && bf16_rows_possible(H, hidden_bf16)
                      ? quantize_as_bf16(m, &g, p->a->data, (int)p->a->dtype, T, H, ld, &set->gate_up,
                                         set->gate_up_act_scale, hidden_bf16)
                      : quantize_input(m, &g, p->a->data, (int)p->a->dtype, T, H, ld, &set->gate_up,
                                       set->gate_up_act_scale, m->ws.hidden_q, m->ws.hidden_q_scales)))
      return e;
  } else {
    g.act = act_kind(p->a->dtype);
    g.a = p->a->data;
    g.lda = p->a->ld ? p->a->ld : H;
    g.a_mult = 1.0f;
  }
  float *gate_up = at(m, m->ws.gate_up_out);
  void *act = at(m, m->ws.act); /* f32 or bf16 (act_kind) in the same section */
  g.out = gate_up;
  g.ldo = 2 * I;
  g.out_dtype = (int)FP4_DTYPE_F32;
  if ((e = grouped_run(&g, large, p->stream, m->pdl))) return e;
  /* W4A4 quantizes the f32 act (in decode straight from gate_up: quantize_as_bf16). W4A16: SiLU*up
   * in bf16 for the down GEMM on both paths where the tensor-core kernels can read it (I % 128 == 0
   * and 16-byte aligned rows, which a caller's workspace offset by 8 bytes would not give): the
   * large-M tiles take no f32, and in decode bf16 rows are a third of the bytes of f32 values split
   * into three exact bf16 parts (which the kernels would do in every weight tile) and one MMA per
   * step instead of three, so the down GEMM runs on the lean decode kernel. One rounding more than
   * the reference (relative 2^-9 per element), inside the W4A16 tolerance (docs/moe.md, numeric
   * contract). Else f32. */
  const int bf16_rows = bf16_rows_possible(I, act) || large;
  const int act_kind = w4a4 ? FP4_CUDA_ACT_F32 : bf16_rows ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_F32;
  /* W4A4 decode: SiLU*up runs inside the down input's quantize (quantize_as_bf16) */
  const int w4a4_bf16 = w4a4 && !large && bf16_rows_possible(I, act);
  if (!w4a4_bf16 && (e = fp4_cuda_moe_silu_mul(gate_up, act, act_kind, rows, I, p->stream, m->pdl))) return e;

  /* down: the same rows and experts, activations in permuted order (no gather). */
  set_weights(&g, &set->down);
  g.a_rows = NULL;
  g.a_div = 1;
  if (w4a4_bf16) {
    if ((e = quantize_as_bf16(m, &g, gate_up, FP4_CUDA_MOE_SRC_SILU_MUL, rows, I, 2 * I, &set->down,
                              set->down_act_scale, act)))
      return e;
  } else if (w4a4) {
    if ((e = quantize_input(m, &g, act, (int)FP4_DTYPE_F32, rows, I, I, &set->down, set->down_act_scale, m->ws.act_q,
                            m->ws.act_q_scales)))
      return e;
  } else {
    g.act = act_kind;
    g.a = act;
    g.lda = I;
    g.a_scales = NULL;
    g.a_mult = 1.0f;
  }
  g.out = down_out;
  g.ldo = H;
  return grouped_run(&g, large, p->stream, m->pdl);
}

static int moe_launch_layer(const fp4_problem *p, int pdl) {
  moe_launch m = {.p = p, .base = p->workspace, .pdl = pdl};
  const fp4_moe_layer *L = p->moe;
  const fp4_moe_routing *rt = p->routing;
  if (fp4_moe_ws_layout_make("cuda", L, p->a->rows, rt->top_k, &m.ws)) return (int)cudaErrorInvalidValue;
  m.x = extra_layout(m.ws.total, L, p->a->rows);
  if (p->workspace_bytes < m.x.total) return (int)cudaErrorInvalidValue; /* the dispatcher asked us: never */
  int e;
  fp4_cuda_route_args r = {.ids = rt->topk_ids, .tokens = p->a->rows, .top_k = rt->top_k,
                           .experts = L->routed.gate_up.experts, .offsets = at(&m, m.ws.offsets),
                           .sorted = at(&m, m.ws.sorted), .inverse = at(&m, m.ws.inverse),
                           .counts = at(&m, m.x.counts), .active = at(&m, m.x.active),
                           .active_count = at(&m, m.x.active_count), .shared_offsets = at(&m, m.x.shared_offsets)};
  /* Prefill: the routing kernel also numbers the M tiles of the width the register-A tiles will
   * pick (the same rule, from the same rows and slots), so none of their CTAs finds an empty tile
   * (docs/moe.md). FP4KIT_MOE_DENSE_TILES=0 keeps the bound numbering, for measuring the two. */
  const char *dense_env = getenv("FP4KIT_MOE_DENSE_TILES");
  if (moe_large(p) && !(dense_env && !strcmp(dense_env, "0"))) {
    const int64_t rows = p->a->rows * rt->top_k;
    m.tile_rows = r.tile_rows = fp4_cuda_grouped_wgra_width(rows, min64(L->routed.gate_up.experts, rows));
    m.tile_starts = r.tile_starts = at(&m, m.x.tile_starts);
  }
  /* W4A4 decode: the routed set's hidden rows are quantized (to their exact bf16 values, as run_set
   * would) by the routing launch's other CTAs: one dependent launch fewer. The condition is
   * run_set's for that form. */
  const int64_t H = L->routed.gate_up.cols, ld = p->a->ld ? p->a->ld : H;
  void *hidden_bf16 = at(&m, m.x.hidden_bf16);
  if (L->mode == FP4_MOE_W4A4 && !moe_large(p) && bf16_rows_possible(H, hidden_bf16)) {
    const fp4_grouped_qmatrix *w = &L->routed.gate_up;
    e = fp4_cuda_moe_route_quantize_bf16(&r, p->a->data, (int)p->a->dtype, ld, p->a->rows, H, (int)w->format,
                                         input_gsf(w, L->routed.gate_up_act_scale), hidden_bf16, p->stream, pdl);
    m.hidden_bf16_done = 1;
  } else {
    e = fp4_cuda_moe_route(&r, p->stream, pdl);
  }
  if (e) return e;
  if ((e = run_set(&m, &L->routed, 0, at(&m, m.ws.down_out)))) return e;
  if (L->shared && (e = run_set(&m, L->shared, 1, at(&m, m.ws.shared_out)))) return e;
  const fp4_matrix *w = &rt->topk_weights;
  fp4_cuda_combine_args c = {.down = at(&m, m.ws.down_out), .inverse = at(&m, m.ws.inverse), .weights = w->data,
                             .ldw = w->ld ? w->ld : w->cols, .shared = L->shared ? at(&m, m.ws.shared_out) : NULL,
                             .shared_weights = rt->shared_weights, .out = p->out->data,
                             .ldo = p->out->ld ? p->out->ld : p->out->cols, .out_dtype = (int)p->out->dtype,
                             .tokens = p->a->rows, .top_k = rt->top_k, .hidden = p->out->cols};
  return fp4_cuda_moe_combine(&c, p->stream, pdl);
}

int fp4_cuda_moe_launch(const fp4_problem *p, int pdl) {
  return p->op == FP4_OP_MOE ? moe_launch_layer(p, pdl) : grouped_launch(p, pdl);
}

#else /* !FP4KIT_HAVE_CUDA: cuda_backend.c never calls these without CUDA */

size_t fp4_cuda_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k) {
  (void)layer;
  (void)tokens;
  (void)top_k;
  return 0;
}

#endif
