/*
 * Host code of the cuda backend's grouped GEMM and MoE layer: the rules the kernels need, which
 * kernel variant runs each GEMM (a named config, config/moe_config.h: the chooser's default or the
 * one fp4_options.config names), the workspace they use (the common layout of
 * src/dispatch/moe_workspace.h plus routing scratch after it) and the launch sequence of a layer:
 * route -> [quantize] -> gate_up -> SiLU*up -> [quantize] -> down, again for the shared expert,
 * then the combine (W4A4 decode: each quantize writes bf16 values in one kernel, the second one
 * computing SiLU*up itself; W4A16 decode of up to 32 pairs: the routing in the gate_up launch). Nothing here reads device data, allocates, synchronizes or queries
 * the device per call (its facts are gathered once per device), so a layer call can be captured in
 * a CUDA graph; device scalars (fp4_options.alpha_device, act_scales_device) are passed to the
 * kernels as pointers.
 *
 * Two grouped GEMM paths, chosen per expert set from the mean rows per expert slot (T*k / min(E,
 * T*k): the host knows no more) unless the config names one: the streaming kernels of
 * moe_grouped.cu (decode: each active expert's weights read once) and the prefill tiles of
 * moe_grouped_large.cu (compute-bound, operands reused from shared memory). The prefill tiles take
 * no f32 activations, so on that path the W4A16 layer writes its SiLU*up intermediate in bf16
 * (docs/moe.md: within the W4A16 tolerance).
 */
#include "backends/cuda/moe_host.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "dispatch/moe_workspace.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/moe_kernels.h"

#include <stdatomic.h>

enum { MOE_K_MULTIPLE = 32, MOE_MAX_SLOTS = 65535, MOE_MAX_SPLITS = 16, MOE_ROWS_PER_CHUNK = 8, MOE_MAX_DEVICES = 64 };

/* The device facts the chooser needs, gathered once per device (not per call). */
static fp4_moe_arch g_arch[MOE_MAX_DEVICES];
static atomic_int g_arch_ready[MOE_MAX_DEVICES];

static fp4_status moe_arch(fp4_context *ctx, fp4_moe_arch *out, char *reason, size_t reason_size) {
  const int device = fp4_context_device(ctx);
  if (device < 0 || device >= MOE_MAX_DEVICES) {
    fp4_reason(reason, reason_size, "the cuda grouped kernels need a context on CUDA device 0..%d (this one: %d)",
               MOE_MAX_DEVICES - 1, device);
    return FP4_ERR_UNSUPPORTED;
  }
  if (atomic_load_explicit(&g_arch_ready[device], memory_order_acquire)) {
    *out = g_arch[device];
    return FP4_OK;
  }
  fp4_moe_arch a;
  memset(&a, 0, sizeof a);
  if (cudaDeviceGetAttribute(&a.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&a.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    fp4_reason(reason, reason_size, "querying CUDA device %d: %s", device, cudaGetErrorString(cudaGetLastError()));
    return FP4_ERR_UNSUPPORTED;
  }
  /* The register-A tiles: SM 9.0 running this binary's sm_90a code, asked once with a shape they take. */
  static _Alignas(16) const uint8_t aligned[16];
  fp4_cuda_grouped_args probe;
  memset(&probe, 0, sizeof probe);
  probe.format = (int)FP4_FORMAT_NVFP4;
  probe.act = FP4_CUDA_ACT_BF16;
  probe.a = aligned;
  probe.w = aligned;
  probe.lda = probe.k = 128;
  probe.n = probe.experts = probe.rows = 1;
  probe.a_div = 1;
  a.wgra = fp4_cuda_grouped_wgra_supported(&probe, device);
  (void)cudaGetLastError();
  g_arch[device] = a; /* benign race: every writer stores the same facts */
  atomic_store_explicit(&g_arch_ready[device], 1, memory_order_release);
  *out = a;
  return FP4_OK;
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

/* 16-byte aligned rows of a dense matrix (the tensor-core kernels' 16-byte loads). */
static int rows_aligned(const fp4_matrix *m) {
  const int64_t ld = m->ld ? m->ld : m->cols;
  return (uintptr_t)m->data % 16 == 0 && (ld * (int64_t)fp4_dtype_size(m->dtype)) % 16 == 0;
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

/* NULL or a path name ("moe.default", "moe.streaming", "moe.prefill"): the chooser on that path;
 * else the variant config names (FP4_ERR_NOT_FOUND if none). */
static fp4_status parse_config(const char *config, const fp4_moe_variant **forced, int *path, fp4_moe_variant *v) {
  *forced = NULL;
  *path = config ? fp4_moe_path_parse(config) : FP4_MOE_PATH_DEFAULT;
  if (*path >= 0) return FP4_OK;
  if (fp4_moe_variant_parse(config, v))
    return fp4_fail(FP4_ERR_NOT_FOUND,
                    "cuda: unknown grouped/MoE config '%s' (moe.default, moe.streaming, moe.prefill, "
                    "moe.lean.r32.k<1|2|4>.s<1-4>, "
                    "moe.lean.generic-k.r32.k<1|2|4>.s<1-4>, moe.lean.generic-k.r16.k4.s1, moe.mma.w<1|2|4|8>, "
                    "moe.fma, moe.prefill.mma<64|128>, moe.prefill.wgra<32|64|128|160|192|256>[.bound-tiles])",
                    config);
  *forced = v;
  return FP4_OK;
}

/* ---- grouped GEMM ------------------------------------------------------------------------------ */

/* The kernel arguments and chooser shape of a grouped GEMM call (variant not yet set). */
static void grouped_args_of(const fp4_problem *p, fp4_cuda_grouped_args *out, fp4_moe_gemm_shape *shape) {
  fp4_cuda_grouped_args a;
  memset(&a, 0, sizeof a);
  set_weights(&a, p->gb);
  const int64_t T = fp4_problem_m(p);
  int aligned = 1;
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
    aligned = rows_aligned(p->a);
  }
  a.a_div = 1;
  a.offsets = p->offsets;
  a.rows = T;
  a.alpha = p->alpha;
  a.alpha_device = p->alpha_device;
  a.out = p->out->data;
  a.ldo = p->out->ld ? p->out->ld : p->out->cols;
  a.out_dtype = (int)p->out->dtype;
  a.slots = min64(a.experts, T);
  a.splits = splits_for(T, a.slots);
  *out = a;
  *shape = (fp4_moe_gemm_shape){a.n, a.k, T, a.experts, a.act, a.format, a.w_layout, aligned};
}

/* The grouped GEMM's variant for config on arch; FP4_ERR_NOT_FOUND / FP4_ERR_UNSUPPORTED with the
 * reason when config names none or one that cannot run it. */
static fp4_status grouped_variant(const fp4_problem *p, const char *config, const fp4_moe_arch *arch,
                                  fp4_cuda_grouped_args *a, fp4_moe_variant *v) {
  fp4_moe_gemm_shape shape;
  grouped_args_of(p, a, &shape);
  const fp4_moe_variant *forced;
  int path;
  fp4_status st = parse_config(config, &forced, &path, v);
  if (st) return st;
  if (!forced) {
    *v = fp4_moe_choose_gemm(&shape, fp4_moe_path_prefill(path, shape.rows, shape.experts, arch), arch);
  } else {
    char why[320];
    if (fp4_moe_variant_check(v, &shape, arch, why, sizeof why)) return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: %s", why);
  }
  a->variant = *v;
  return FP4_OK;
}

/* Bytes of bf16 activations W4A4 needs on the register-A tiles (FP4 rows dequantized once). */
static size_t grouped_bf16_bytes(const fp4_cuda_grouped_args *a) {
  return a->act == FP4_CUDA_ACT_FP4 && a->variant.kernel == FP4_MOE_KERNEL_PREFILL_WGRA
             ? (size_t)a->rows * (size_t)a->k * sizeof(uint16_t)
             : 0;
}

static int grouped_launch_variant(const fp4_cuda_grouped_args *g, void *stream, int pdl) {
  if (g->variant.kernel >= FP4_MOE_KERNEL_PREFILL_MMA)
    return g->silu_out || g->extra_rows ? (int)cudaErrorInvalidValue /* the streaming lean kernel's only */
                       : fp4_cuda_grouped_gemm_large(g, stream, pdl);
  return fp4_cuda_grouped_gemm(g, stream, pdl);
}

static size_t shared_dense_workspace(fp4_context *ctx, const fp4_problem *p, const char *config);

size_t fp4_cuda_moe_context_workspace(fp4_context *ctx, const fp4_problem *p, const char *config) {
  if (p->op == FP4_OP_MOE) return shared_dense_workspace(ctx, p, config);
  fp4_moe_arch arch;
  fp4_cuda_grouped_args a;
  fp4_moe_variant v;
  char reason[256];
  if (moe_arch(ctx, &arch, reason, sizeof reason) || grouped_variant(p, config, &arch, &a, &v)) {
    fp4_clear_error(); /* a size query: the call itself will say what is wrong */
    return 0;
  }
  return grouped_bf16_bytes(&a);
}

/* Routing scratch after the common layout: counts [E], active [E], active count, shared offsets,
 * the dense M tile numbering of the prefill tiles [E+1], the down launch's arrival counters (a
 * combine in that launch); for W4A4 the quantized hidden rows as
 * exact bf16 [T, H] (quantize_as_bf16; on the register-A prefill tiles, the gate_up inputs' bf16
 * values, and the down inputs' go to the act section, whose f32 values they replace). */
typedef struct moe_extra {
  size_t counts, active, active_count, shared_offsets, tile_starts, arrivals, hidden_bf16, total;
} moe_extra;

/* The arrival counters of a down launch that combines (plan.combine_fused): one per x block of its
 * grid, whose blocks are at least 32 columns of the hidden size wide (moe_grouped.cu, lean_combine). */
static int64_t arrival_slots(const fp4_moe_layer *layer) { return (layer->routed.gate_up.cols + 31) / 32; }

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
  x.arrivals = align_up(x.tile_starts + (size_t)(experts + 1) * sizeof(int32_t));
  x.hidden_bf16 = align_up(x.arrivals + (size_t)arrival_slots(layer) * sizeof(uint32_t));
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
  fp4_moe_layer_plan plan;
  int pdl;
  const int32_t *tile_starts; /* the routing kernel's dense M tile numbering, or NULL */
  int64_t tile_rows;
  int hidden_bf16_done; /* W4A4 decode: the routing launch also wrote the routed set's bf16 rows */
  fp4_cuda_route_args route; /* plan.route_fused: the routing the routed gate_up launch does */
  /* plan.shared_dense: the shared expert's two GEMMs on the dense kernels, their configs and the
   * context workspace they take (NULL configs: on the grouped tiles, dense_why says why) */
  const fp4_dense_config *shared_dense[2];
  fp4_cuda_gemm_args shared_args[2];
  char dense_why[200];
} moe_launch;

static void *at(const moe_launch *m, size_t off) { return m->base + off; }

/* The NVFP4 global encode scale the runtime recipe quantizes w's inputs with (1 for MXFP4), and its
 * device form: act_scales_device + which (0 gate_up, 1 down) for NVFP4, else NULL. */
static float input_gsf(const fp4_grouped_qmatrix *w, float act_scale) {
  return w->format == FP4_FORMAT_NVFP4 ? act_scale : 1.0f;
}
static const float *input_gsf_device(const fp4_moe_experts *set, const fp4_grouped_qmatrix *w, int which) {
  return w->format == FP4_FORMAT_NVFP4 && set->act_scales_device ? set->act_scales_device + which : NULL;
}

/* W4A4: quantizes a GEMM's input rows (runtime recipe, 128x4 scales) into workspace sections and
 * points g's activations at them. */
static int quantize_input(const moe_launch *m, fp4_cuda_grouped_args *g, const void *x, int x_dtype, int64_t rows,
                          int64_t cols, int64_t ld, const fp4_moe_experts *set, int which, size_t q_off,
                          size_t s_off) {
  const fp4_grouped_qmatrix *w = which ? &set->down : &set->gate_up;
  const float gsf = input_gsf(w, which ? set->down_act_scale : set->gate_up_act_scale);
  const float *gsf_device = input_gsf_device(set, w, which);
  fp4_cuda_quantize_args q = {.x = x, .rows = rows, .cols = cols, .ld = ld, .x_dtype = x_dtype, .q = at(m, q_off),
                              .scales = at(m, s_off), .format = (int)w->format, .layout = (int)FP4_LAYOUT_128X4,
                              .global_scale = gsf, .global_scale_device = gsf_device};
  int e = fp4_cuda_quantize(&q, m->p->stream, m->pdl);
  g->act = FP4_CUDA_ACT_FP4;
  g->a = q.q;
  g->a_scales = q.scales;
  g->a_layout = (int)FP4_LAYOUT_128X4;
  g->a_mult = 1.0f / gsf;
  g->a_scale_device = gsf_device;
  return e;
}

/* W4A4 on the streaming tensor-core kernels (not the prefill tiles, which read FP4 directly): the
 * rows [rows, cols] quantized and written to out as the exact bf16 values of the quantized elements
 * in one kernel (fp4_cuda_moe_quantize_bf16; for down straight from gate_up, src
 * FP4_CUDA_MOE_SRC_SILU_MUL, so SiLU*up runs inside it), and g pointed at them. The GEMM then
 * multiplies the same bf16 values it would form from the codes in every weight tile (a small-M
 * ".pro" config's reasoning, docs/cuda-small-m.md), once per row instead of once per CTA, and runs
 * the bf16 kernels (the lean decode kernel at one token tile). One launch where quantize, the
 * dequantize and (for down) SiLU*up took three. Possible where those kernels can read such rows
 * (fp4_moe_bf16_rows_possible: cols % 128 == 0, 16-byte aligned); else the caller quantizes to FP4
 * rows. */
static int ws_aligned(const void *p) { return (uintptr_t)p % 16 == 0; }

/* Points g's activations at bf16 rows [*, cols] quantized with w's input scale. */
static void use_bf16_rows(fp4_cuda_grouped_args *g, const fp4_moe_experts *set, int which, void *rows, int64_t cols) {
  const fp4_grouped_qmatrix *w = which ? &set->down : &set->gate_up;
  g->act = FP4_CUDA_ACT_BF16;
  g->a = rows;
  g->lda = cols;
  g->a_scales = NULL;
  g->a_mult = 1.0f / input_gsf(w, which ? set->down_act_scale : set->gate_up_act_scale);
  g->a_scale_device = input_gsf_device(set, w, which);
}

static int quantize_as_bf16(const moe_launch *m, fp4_cuda_grouped_args *g, const void *x, int src, int64_t rows,
                            int64_t cols, int64_t ld, const fp4_moe_experts *set, int which, void *out) {
  const fp4_grouped_qmatrix *w = which ? &set->down : &set->gate_up;
  const int e = fp4_cuda_moe_quantize_bf16(x, src, ld, rows, cols, (int)w->format,
                                           input_gsf(w, which ? set->down_act_scale : set->gate_up_act_scale),
                                           input_gsf_device(set, w, which), out, m->p->stream, m->pdl);
  use_bf16_rows(g, set, which, out, cols);
  return e;
}

/* The layer's combine: the routed down rows and the shared expert's (where there is one), the
 * routing's weights and slot positions, into the layer's output. */
static fp4_cuda_combine_args combine_args(const moe_launch *m) {
  const fp4_problem *p = m->p;
  const fp4_moe_routing *rt = p->routing;
  const fp4_matrix *w = &rt->topk_weights;
  return (fp4_cuda_combine_args){.down = at(m, m->ws.down_out), .inverse = at(m, m->ws.inverse), .weights = w->data,
                                 .ldw = w->ld ? w->ld : w->cols,
                                 .shared = p->moe->shared ? at(m, m->ws.shared_out) : NULL,
                                 .shared_weights = rt->shared_weights, .out = p->out->data,
                                 .ldo = p->out->ld ? p->out->ld : p->out->cols, .out_dtype = (int)p->out->dtype,
                                 .tokens = p->a->rows, .top_k = rt->top_k, .hidden = p->out->cols,
                                 .alpha_device = p->alpha_device};
}

/* One expert set through gate_up, SiLU*up and down; rows = P (routed) or T (shared). The plan says
 * which variant runs each GEMM and on which activations (fp4_moe_plan_layer: the same rules). */
static int run_set(const moe_launch *m, const fp4_moe_experts *set, int shared, void *down_out) {
  const fp4_problem *p = m->p;
  const int w4a4 = p->moe->mode == FP4_MOE_W4A4;
  const int64_t T = p->a->rows, k = p->routing->top_k, rows = shared ? T : T * k;
  const int64_t H = set->gate_up.cols, I = set->gate_up.rows / 2;
  const int large = m->plan.prefill[shared];
  const fp4_moe_variant *vg = &m->plan.variant[2 * shared], *vd = &m->plan.variant[2 * shared + 1];
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
  g.variant = *vg;
  /* the shared expert as the routed launches' extra slot (plan.shared_fused: W4A16, SiLU*up fused):
   * its act rows follow the routed ones in the act section (bf16 rows: (P + T) * I fit in the f32
   * [max(P, T), I] section), its down output is its own section */
  const fp4_moe_experts *extra = !shared && m->plan.shared_fused ? p->moe->shared : NULL;
  uint16_t *extra_act = extra ? (uint16_t *)at(m, m->ws.act) + rows * I : NULL;
  if (extra) {
    g.extra_w = extra->gate_up.data;
    g.extra_w_scales = extra->gate_up.scales;
    g.extra_w_mult = extra->gate_up.multipliers;
    g.extra_rows = T;
    g.extra_a = p->a->data;
    g.extra_out = extra_act;
  }
  void *hidden_bf16 = at(m, m->x.hidden_bf16);
  if (w4a4) {
    const int64_t ld = p->a->ld ? p->a->ld : H;
    if (!shared && m->hidden_bf16_done) /* moe_launch_layer: in the routing launch */
      use_bf16_rows(&g, set, 0, hidden_bf16, H);
    else if ((e = !large && fp4_moe_bf16_rows_possible(H, ws_aligned(hidden_bf16))
                      ? quantize_as_bf16(m, &g, p->a->data, (int)p->a->dtype, T, H, ld, set, 0, hidden_bf16)
                      : quantize_input(m, &g, p->a->data, (int)p->a->dtype, T, H, ld, set, 0, m->ws.hidden_q,
                                       m->ws.hidden_q_scales)))
      return e;
    g.a_bf16 = hidden_bf16; /* the register-A tiles' bf16 values of the FP4 rows: T x H */
  } else {
    g.act = act_kind(p->a->dtype);
    g.a = p->a->data;
    g.lda = p->a->ld ? p->a->ld : H;
    g.a_mult = 1.0f;
  }
  float *gate_up = at(m, m->ws.gate_up_out);
  void *act = at(m, m->ws.act); /* f32 or bf16 (act_kind) in the same section */
  const int silu_fused = m->plan.silu_fused[shared];
  g.out = silu_fused ? act : (void *)gate_up;
  g.ldo = silu_fused ? I : 2 * I;
  g.out_dtype = (int)(silu_fused ? FP4_DTYPE_BF16 : FP4_DTYPE_F32);
  g.silu_out = silu_fused;
  if (!shared && m->plan.route_fused) g.route = m->route; /* the routing in this launch */
  if ((e = grouped_launch_variant(&g, p->stream, m->pdl))) return e;
  memset(&g.route, 0, sizeof g.route); /* down reads what gate_up's first CTA wrote */
  g.silu_out = 0;
  g.out_dtype = (int)FP4_DTYPE_F32; /* the down GEMM's f32 rows for the combine */
  /* W4A4 quantizes the f32 act (in decode straight from gate_up: quantize_as_bf16). W4A16: SiLU*up
   * in bf16 for the down GEMM on both paths where the tensor-core kernels can read it (I % 128 == 0
   * and 16-byte aligned rows, which a caller's workspace offset by 8 bytes would not give): the
   * prefill tiles take no f32, and in decode bf16 rows are a third of the bytes of f32 values split
   * into three exact bf16 parts (which the kernels would do in every weight tile) and one MMA per
   * step instead of three, so the down GEMM runs on the lean decode kernel. One rounding more than
   * the reference (relative 2^-9 per element), inside the W4A16 tolerance (docs/moe.md, numeric
   * contract). Else f32. */
  const int bf16_rows = fp4_moe_bf16_rows_possible(I, ws_aligned(act)) || large;
  const int act_kind = w4a4 ? FP4_CUDA_ACT_F32 : bf16_rows ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_F32;
  /* W4A4 decode: SiLU*up runs inside the down input's quantize (quantize_as_bf16) */
  const int w4a4_bf16 = w4a4 && !large && fp4_moe_bf16_rows_possible(I, ws_aligned(act));
  if (!w4a4_bf16 && !silu_fused && (e = fp4_cuda_moe_silu_mul(gate_up, act, act_kind, rows, I, p->stream, m->pdl)))
    return e;

  /* down: the same rows and experts, activations in permuted order (no gather). */
  set_weights(&g, &set->down);
  g.a_rows = NULL;
  g.a_div = 1;
  g.variant = *vd;
  g.a_bf16 = NULL;
  if (w4a4_bf16) {
    if ((e = quantize_as_bf16(m, &g, gate_up, FP4_CUDA_MOE_SRC_SILU_MUL, rows, I, 2 * I, set, 1, act))) return e;
  } else if (w4a4) {
    if ((e = quantize_input(m, &g, act, (int)FP4_DTYPE_F32, rows, I, I, set, 1, m->ws.act_q, m->ws.act_q_scales)))
      return e;
    g.a_bf16 = act; /* rows x I bf16 over the f32 act the quantize has consumed (stream order) */
  } else {
    g.act = act_kind;
    g.a = act;
    g.lda = I;
    g.a_scales = NULL;
    g.a_mult = 1.0f;
    g.a_scale_device = NULL;
  }
  g.out = down_out;
  g.ldo = H;
  if (extra) {
    g.extra_w = extra->down.data;
    g.extra_w_scales = extra->down.scales;
    g.extra_w_mult = extra->down.multipliers;
    g.extra_a = extra_act;
    g.extra_out = at(m, m->ws.shared_out);
  }
  if (!shared && m->plan.combine_fused) { /* the layer's combine at the end of this launch */
    g.combine = combine_args(m);
    g.arrivals = at(m, m->x.arrivals);
    g.arrival_slots = arrival_slots(p->moe);
  }
  return grouped_launch_variant(&g, p->stream, m->pdl);
}

/* The shared expert's gate_up (which 0) or down (1) as a dense GEMM (fp4_moe_shared_dense): T rows
 * of the hidden states (gate_up) or of SiLU*up in the act section (down: bf16 where the dense
 * kernels can read it, as on the grouped path), f32 out into the sections run_set fills, the
 * expert's decode multiplier read on the device. 0, or -1 with the rule broken in why. */
static int shared_dense_args(const fp4_problem *p, uintptr_t base, const fp4_moe_ws_layout *ws, int which,
                             fp4_cuda_gemm_args *a, char *why, size_t why_size) {
  const fp4_moe_experts *set = p->moe->shared;
  const fp4_grouped_qmatrix *w = which ? &set->down : &set->gate_up;
  const int64_t T = p->a->rows, H = set->gate_up.cols, I = set->gate_up.rows / 2;
  memset(a, 0, sizeof *a);
  a->format = (int)w->format;
  a->b = (const uint8_t *)w->data;
  a->b_scales = (const uint8_t *)w->scales;
  a->b_layout = (int)w->layout;
  a->m = T;
  a->n = w->rows;
  a->k = w->cols;
  a->scale = 1.0f;
  a->alpha_device = w->multipliers;
  a->out_dtype = (int)FP4_DTYPE_F32;
  if (which == 0) {
    a->act = act_kind(p->a->dtype);
    a->a = p->a->data;
    a->lda = p->a->ld ? p->a->ld : H;
    a->out = (void *)(base + ws->gate_up_out);
    a->ldo = 2 * I;
    if (!rows_aligned(p->a)) {
      fp4_reason(why, why_size, "the hidden rows are not 16-byte aligned with a 16-byte row stride");
      return -1;
    }
  } else {
    /* bf16, as the grouped tiles this set would run on read it (it goes dense only where it is on
     * the prefill tiles, fp4_moe_shared_dense): every dense kernel reads 16-byte aligned bf16 rows of
     * any I % 32 == 0, while the large-M ones take no f32 (the streaming kernels' I % 128 rule,
     * fp4_moe_bf16_rows_possible, does not apply here) */
    void *act = (void *)(base + ws->act);
    a->act = ws_aligned(act) && (I * 2) % 16 == 0 ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_F32;
    a->a = act;
    a->lda = I;
    a->out = (void *)(base + ws->shared_out);
    a->ldo = H;
  }
  if ((uintptr_t)w->data % 16 || (w->format == FP4_FORMAT_NVFP4 && (uintptr_t)w->scales % 2)) {
    fp4_reason(why, why_size, "the shared expert's weights are not 16-byte aligned (or its NVFP4 scales 2-byte)");
    return -1;
  }
  return 0;
}

/* The shared expert on the dense kernels (arguments and configs from fp4_cuda_moe_run): gate_up,
 * SiLU*up in a kernel of its own, down. */
static int run_shared_dense(const moe_launch *m) {
  const fp4_problem *p = m->p;
  const fp4_cuda_gemm_args *gu = &m->shared_args[0], *dn = &m->shared_args[1];
  int e;
  if ((e = fp4_cuda_dense_launch(gu, m->shared_dense[0], p->stream, m->pdl))) return e;
  if ((e = fp4_cuda_moe_silu_mul((const float *)gu->out, (void *)dn->a, dn->act, gu->m, gu->n / 2, p->stream, m->pdl)))
    return e;
  return fp4_cuda_dense_launch(dn, m->shared_dense[1], p->stream, m->pdl);
}

/* Whether the shared expert runs on the dense kernels (plan.shared_dense and the dense rules take
 * both GEMMs): their arguments, configs and context workspace into m, or m->dense_why. The
 * workspace is taken before any launch, so a capture that cannot have it queues nothing. */
static fp4_status plan_shared_dense(fp4_context *ctx, moe_launch *m) {
  size_t bytes[2] = {0, 0};
  for (int which = 0; which < 2; which++) {
    char why[160];
    if (shared_dense_args(m->p, (uintptr_t)m->base, &m->ws, which, &m->shared_args[which], why, sizeof why) ||
        fp4_cuda_dense_default(ctx, &m->shared_args[which], &m->shared_dense[which], &bytes[which], why, sizeof why)) {
      snprintf(m->dense_why, sizeof m->dense_why, "%s: %s", which ? "down" : "gate_up", why);
      m->shared_dense[0] = m->shared_dense[1] = NULL;
      fp4_clear_error();
      return FP4_OK;
    }
  }
  const size_t need = bytes[0] > bytes[1] ? bytes[0] : bytes[1];
  void *ws = NULL;
  fp4_status st = fp4_context_workspace(ctx, need, m->p->stream, "cuda MoE shared expert on the dense kernels", &ws);
  if (st) return st;
  for (int which = 0; which < 2; which++) m->shared_args[which].workspace = bytes[which] ? ws : NULL;
  return FP4_OK;
}

static fp4_moe_layer_shape layer_shape_of(const fp4_problem *p);

/* The context workspace a layer call takes: its shared expert's on the dense kernels, else 0. */
static size_t shared_dense_workspace(fp4_context *ctx, const fp4_problem *p, const char *config) {
  fp4_moe_arch arch;
  const fp4_moe_variant *forced;
  fp4_moe_variant v;
  fp4_moe_layer_plan plan;
  fp4_moe_ws_layout ws;
  int path;
  char why[320];
  const fp4_moe_layer_shape L = layer_shape_of(p);
  size_t need = 0;
  if (!moe_arch(ctx, &arch, why, sizeof why) && !parse_config(config, &forced, &path, &v) &&
      !fp4_moe_plan_layer(&L, forced, path, &arch, &plan, why, sizeof why) && plan.shared_dense &&
      !fp4_moe_ws_layout_make("cuda", p->moe, p->a->rows, p->routing->top_k, &ws))
    for (int which = 0; which < 2; which++) {
      fp4_cuda_gemm_args a;
      const fp4_dense_config *c;
      size_t bytes = 0;
      if (!shared_dense_args(p, (uintptr_t)p->workspace, &ws, which, &a, why, sizeof why) &&
          !fp4_cuda_dense_default(ctx, &a, &c, &bytes, why, sizeof why) && bytes > need)
        need = bytes;
    }
  fp4_clear_error(); /* a size query: the call itself will say what is wrong */
  return need;
}

/* The layer as the chooser sees it. */
static fp4_moe_layer_shape layer_shape_of(const fp4_problem *p) {
  const fp4_moe_layer *L = p->moe;
  const fp4_moe_experts *sh = L->shared;
  return (fp4_moe_layer_shape){.tokens = p->a->rows, .top_k = p->routing->top_k, .experts = L->routed.gate_up.experts,
                               .hidden = L->routed.gate_up.cols, .inter = L->routed.gate_up.rows / 2,
                               .shared_inter = sh ? sh->gate_up.rows / 2 : 0, .mode = L->mode,
                               .format = (int)L->routed.gate_up.format, .layout = (int)L->routed.gate_up.layout,
                               .shared_format = sh ? (int)sh->gate_up.format : 0,
                               .shared_layout = sh ? (int)sh->gate_up.layout : 0, .hidden_dtype = p->a->dtype,
                               .hidden_aligned = rows_aligned(p->a), .workspace_aligned = ws_aligned(p->workspace)};
}

static int moe_launch_layer(moe_launch *m) {
  const fp4_problem *p = m->p;
  const int pdl = m->pdl;
  const fp4_moe_layer *L = p->moe;
  const fp4_moe_routing *rt = p->routing;
  int e;
  fp4_cuda_route_args r = {.ids = rt->topk_ids, .tokens = p->a->rows, .top_k = rt->top_k,
                           .experts = L->routed.gate_up.experts, .offsets = at(m, m->ws.offsets),
                           .sorted = at(m, m->ws.sorted), .inverse = at(m, m->ws.inverse),
                           .counts = at(m, m->x.counts), .active = at(m, m->x.active),
                           .active_count = at(m, m->x.active_count), .shared_offsets = at(m, m->x.shared_offsets)};
  /* Prefill on the register-A tiles: the routing kernel also numbers the M tiles of their width, so
   * none of their CTAs finds an empty tile (docs/moe.md); the .bound-tiles configs keep the bound
   * numbering, for measuring the two. */
  for (int g = FP4_MOE_GATE_UP; g <= FP4_MOE_DOWN && !m->tile_starts; g++) { /* the routed GEMMs share the width */
    const fp4_moe_variant *v = &m->plan.variant[g];
    if (v->kernel == FP4_MOE_KERNEL_PREFILL_WGRA && !v->bound_tiles) {
      m->tile_rows = r.tile_rows = v->tile_m;
      m->tile_starts = r.tile_starts = at(m, m->x.tile_starts);
    }
  }
  /* W4A4 decode: the routed set's hidden rows are quantized (to their exact bf16 values, as run_set
   * would) by the routing launch's other CTAs: one dependent launch fewer. The condition is
   * run_set's for that form. */
  const int64_t H = L->routed.gate_up.cols, ld = p->a->ld ? p->a->ld : H;
  void *hidden_bf16 = at(m, m->x.hidden_bf16);
  if (m->plan.route_fused) { /* in the routed gate_up launch (fp4_moe_route_fusable): no kernel here */
    if (m->plan.combine_fused) { /* its first CTA zeroes the down launch's counters */
      r.arrivals = at(m, m->x.arrivals);
      r.arrival_slots = arrival_slots(L);
    }
    m->route = r;
    e = 0;
  } else if (L->mode == FP4_MOE_W4A4 && !m->plan.prefill[0] && fp4_moe_bf16_rows_possible(H, ws_aligned(hidden_bf16))) {
    const fp4_grouped_qmatrix *w = &L->routed.gate_up;
    e = fp4_cuda_moe_route_quantize_bf16(&r, p->a->data, (int)p->a->dtype, ld, p->a->rows, H, (int)w->format,
                                         input_gsf(w, L->routed.gate_up_act_scale),
                                         input_gsf_device(&L->routed, w, 0), hidden_bf16, p->stream, pdl);
    m->hidden_bf16_done = 1;
  } else {
    e = fp4_cuda_moe_route(&r, p->stream, pdl);
  }
  if (e) return e;
  if ((e = run_set(m, &L->routed, 0, at(m, m->ws.down_out)))) return e;
  if (L->shared && !m->plan.shared_fused &&
      (e = m->shared_dense[0] ? run_shared_dense(m) : run_set(m, L->shared, 1, at(m, m->ws.shared_out))))
    return e;
  if (m->plan.combine_fused) return 0; /* in the routed down launch (fp4_moe_combine_fusable) */
  const fp4_cuda_combine_args c = combine_args(m);
  return fp4_cuda_moe_combine(&c, p->stream, pdl);
}

/* ---- entry points -------------------------------------------------------------------------------- */

int fp4_cuda_moe_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
  fp4_moe_arch arch;
  char reason[256];
  if (max < 1 || moe_arch(ctx, &arch, reason, sizeof reason)) return 0;
  int count = 0, nv = 0;
  const char *const *all = fp4_moe_variant_names(&nv);
  if (p->op == FP4_OP_MOE) {
    const fp4_moe_layer_shape L = layer_shape_of(p);
    fp4_moe_layer_plan plan;
    static const char *const paths[] = {"moe.default", "moe.streaming", "moe.prefill"};
    for (int i = 0; i < 3 && count < max; i++) names[count++] = paths[i];
    for (int i = 0; i < nv && count < max; i++) {
      fp4_moe_variant v;
      if (!fp4_moe_variant_parse(all[i], &v) && !fp4_moe_plan_layer(&L, &v, 0, &arch, &plan, reason, sizeof reason))
        names[count++] = all[i];
    }
    return count;
  }
  fp4_cuda_grouped_args a;
  fp4_moe_gemm_shape shape;
  grouped_args_of(p, &a, &shape);
  const fp4_moe_variant first = fp4_moe_choose_gemm(&shape, fp4_moe_prefill_wanted(shape.rows, shape.experts, &arch), &arch);
  names[count++] = fp4_moe_variant_name(&first);
  for (int i = 0; i < nv && count < max; i++) {
    fp4_moe_variant v;
    if (!fp4_moe_variant_parse(all[i], &v) && strcmp(all[i], names[0]) &&
        !fp4_moe_variant_check(&v, &shape, &arch, reason, sizeof reason))
      names[count++] = all[i];
  }
  return count;
}

/* info: the backend, the config, PDL, and for the layer's default (m) which variant ran each GEMM. */
static void fill_info(fp4_run_info *info, const fp4_problem *p, const fp4_moe_arch *arch, const char *config, int pdl,
                      const moe_launch *m) {
  if (!info) return;
  snprintf(info->backend, sizeof info->backend, "cuda");
  snprintf(info->config, sizeof info->config, "%s", config);
  info->pdl = pdl;
  info->note[0] = 0;
  char *n = info->note;
  const size_t size = sizeof info->note;
  if (m) {
    const fp4_moe_layer_plan *plan = &m->plan;
    static const char *const what[FP4_MOE_GEMMS] = {"gate_up", "down", "shared gate_up", "shared down"};
    for (int g = 0; g < (plan->shared_fused ? 2 : 2 * plan->sets); g++) {
      const int dense = g >= 2 && m->shared_dense[0];
      snprintf(n + strlen(n), size - strlen(n), "%s%s %s%s%s", g ? ", " : "", what[g],
               dense ? m->shared_dense[g - 2]->name : fp4_moe_variant_name(&plan->variant[g]),
               g % 2 == 0 && !dense && plan->silu_fused[g / 2] ? "+SiLU" : "",
               g == FP4_MOE_GATE_UP && plan->route_fused ? "+routing" : g == FP4_MOE_DOWN && plan->combine_fused ? "+combine" : "");
    }
    if (plan->shared_fused) snprintf(n + strlen(n), size - strlen(n), ", the shared expert in both");
    /* a shared GEMM on the dense kernels shows its dense config's name (small-m.* / large-m.*) */
    if (plan->shared_dense && !m->shared_dense[0])
      snprintf(n + strlen(n), size - strlen(n), "; shared not dense: %s", m->dense_why);
  }
  if (p->enable_pdl && !pdl)
    snprintf(n + strlen(n), size - strlen(n), "%sPDL needs SM90+, device is SM%d%d", n[0] ? "; " : "", arch->major,
             arch->minor);
}

static fp4_status launch_failed(int e, const char *what, const fp4_context *ctx) {
  return fp4_fail(FP4_ERR_CUDA, "cuda: launching %s on device %d failed: %s", what, fp4_context_device(ctx),
                  cudaGetErrorString((cudaError_t)e));
}

fp4_status fp4_cuda_moe_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                     size_t reason_size) {
  fp4_moe_variant v;
  const fp4_moe_variant *forced;
  int path;
  fp4_status st = parse_config(config, &forced, &path, &v);
  if (!st && fp4_problem_m(p) > 0) { /* what run() decides before launching anything */
    fp4_moe_arch arch;
    if ((st = moe_arch(ctx, &arch, reason, reason_size))) return st;
    if (p->op != FP4_OP_MOE) {
      fp4_cuda_grouped_args a;
      st = grouped_variant(p, config, &arch, &a, &v);
    } else {
      const fp4_moe_layer_shape L = layer_shape_of(p);
      fp4_moe_layer_plan plan;
      char why[320];
      if (fp4_moe_plan_layer(&L, forced, path, &arch, &plan, why, sizeof why))
        st = fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: config %s cannot run this layer: %s", config, why);
    }
  }
  if (st) fp4_reason(reason, reason_size, "%s", fp4_last_error()); /* the rule, as run() would say it */
  return st;
}

fp4_status fp4_cuda_moe_run(fp4_context *ctx, const fp4_problem *p, const char *config, int pdl, fp4_run_info *info) {
  fp4_moe_arch arch;
  char reason[320];
  fp4_status st = moe_arch(ctx, &arch, reason, sizeof reason);
  if (st) return fp4_fail(st, "cuda: %s", reason);
  fp4_moe_variant v;
  const fp4_moe_variant *forced;
  int path;
  if ((st = parse_config(config, &forced, &path, &v))) return st;
  if (p->op != FP4_OP_MOE) {
    fp4_cuda_grouped_args a;
    if ((st = grouped_variant(p, config, &arch, &a, &v))) return st;
    const size_t bytes = grouped_bf16_bytes(&a);
    if ((st = fp4_context_workspace(ctx, bytes, p->stream, "cuda grouped W4A4 on the register-A prefill tiles", &a.a_bf16)))
      return st;
    const char *name = fp4_moe_variant_name(&v);
    const int e = grouped_launch_variant(&a, p->stream, pdl);
    if (e) return launch_failed(e, name, ctx);
    fill_info(info, p, &arch, name, pdl, NULL);
    return FP4_OK;
  }
  moe_launch m;
  memset(&m, 0, sizeof m);
  m.p = p;
  m.base = p->workspace;
  m.pdl = pdl;
  const fp4_moe_layer_shape L = layer_shape_of(p);
  if (fp4_moe_plan_layer(&L, forced, path, &arch, &m.plan, reason, sizeof reason))
    return fp4_fail(FP4_ERR_UNSUPPORTED, "cuda: config %s cannot run this layer: %s", config, reason);
  if ((st = fp4_moe_ws_layout_make("cuda", p->moe, p->a->rows, p->routing->top_k, &m.ws))) return st;
  m.x = extra_layout(m.ws.total, p->moe, p->a->rows);
  if (p->workspace_bytes < m.x.total) /* the dispatcher asked fp4_cuda_moe_workspace_size: never */
    return fp4_fail(FP4_ERR_INTERNAL, "cuda: the MoE workspace holds %zu bytes, the layer needs %zu",
                    p->workspace_bytes, m.x.total);
  if (m.plan.shared_dense && (st = plan_shared_dense(ctx, &m))) return st;
  const int e = moe_launch_layer(&m);
  if (e) return launch_failed(e, forced ? config : "the MoE layer", ctx);
  fill_info(info, p, &arch, config ? config : "moe.default", pdl, forced ? NULL : &m);
  return FP4_OK;
}

#else /* !FP4KIT_HAVE_CUDA: cuda_backend.c never calls these without CUDA */

size_t fp4_cuda_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k) {
  (void)layer;
  (void)tokens;
  (void)top_k;
  return 0;
}

#endif
