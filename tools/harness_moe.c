#include "harness_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- data ---------------------------------------------------------------------------------------- */

fp4_status fp4h_grouped_make(fp4h_rng *g, fp4_grouped_qmatrix *w, int64_t E, int64_t N, int64_t K, fp4_format format,
                             fp4_scale_layout layout) {
  size_t sb = 0;
  memset(w, 0, sizeof *w);
  fp4_status st = fp4_scales_size(format, layout, N, K, &sb);
  if (st) return st;
  float *x = malloc((size_t)(N * K) * sizeof *x);
  float *mult = format == FP4_FORMAT_NVFP4 ? malloc((size_t)E * sizeof *mult) : NULL;
  *w = (fp4_grouped_qmatrix){malloc((size_t)(E * N * K / 2)), malloc((size_t)E * sb), mult, E, N, K, format, layout,
                             FP4_MEMORY_HOST};
  if (!x || !w->data || !w->scales || (format == FP4_FORMAT_NVFP4 && !mult)) {
    free(x);
    fp4h_grouped_free(w);
    return FP4_ERR_OUT_OF_MEMORY;
  }
  for (int64_t e = 0; e < E && !st; e++) {
    fp4h_fill(g, x, N * K, FP4H_DATA_NORMAL, fp4_format_block_size(format));
    /* Experts differ in magnitude, as real ones do: exercises per-expert multipliers. */
    for (int64_t i = 0; i < N * K; i++) x[i] *= 0.05f * (float)(1 + e % 3);
    fp4_matrix src = {x, N, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix view = {(uint8_t *)w->data + e * N * K / 2, (uint8_t *)w->scales + (size_t)e * sb, N, K, format, layout,
                        1.0f, FP4_MEMORY_HOST};
    if (format == FP4_FORMAT_NVFP4) st = fp4_quantize_modelopt(&src, &view, &mult[e]);
    else st = fp4_quantize(NULL, &src, 1.0f, &view, &(fp4_options){.backend = "ref"});
  }
  free(x);
  if (st) fp4h_grouped_free(w);
  return st;
}

void fp4h_grouped_free(fp4_grouped_qmatrix *w) {
  free(w->data);
  free(w->scales);
  free((void *)w->multipliers);
  memset(w, 0, sizeof *w);
}

void fp4h_routing_fill(fp4h_rng *g, int32_t *ids, float *weights, int64_t T, int64_t k, int64_t E, fp4h_routing kind) {
  int32_t *pool = malloc((size_t)E * sizeof *pool);
  if (!pool) return;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t e = 0; e < E; e++) pool[e] = (int32_t)e;
    const int hot = kind == FP4H_ROUTE_SKEWED && t % 2 == 0;
    int64_t first = kind == FP4H_ROUTE_SKEWED ? 1 : 0; /* expert 0 only where it is the hot one */
    for (int64_t j = 0; j < k; j++) { /* partial Fisher-Yates: distinct experts */
      int64_t pick = first + j + (int64_t)(fp4h_next(g) % (uint64_t)(E - first - j));
      int32_t tmp = pool[first + j];
      pool[first + j] = pool[pick];
      pool[pick] = tmp;
      ids[t * k + j] = pool[first + j];
    }
    if (hot) ids[t * k + (t / 2) % k] = 0;
    if (kind == FP4H_ROUTE_DUPLICATES && k > 1 && t % 3 == 0) ids[t * k + 1] = ids[t * k];
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++) sum += (weights[t * k + j] = (float)(0.1 + fp4h_uniform(g)));
    for (int64_t j = 0; j < k; j++) weights[t * k + j] = (float)(weights[t * k + j] / sum);
  }
  free(pool);
}

/* ---- staging ------------------------------------------------------------------------------------------ */

enum { MAX_BUFS = 24 };

/* Host buffers and their copies in the backend's memory (the same pointers for host memory). */
typedef struct stage {
  fp4_context *ctx;
  fp4_memory memory;
  int n;
  void *dev[MAX_BUFS];
} stage;

static fp4_status put(stage *s, const void *host, size_t bytes, void **dev) {
  if (s->memory == FP4_MEMORY_HOST || !host || !bytes) {
    *dev = (void *)host;
    return FP4_OK;
  }
  if (s->n == MAX_BUFS) return FP4_ERR_INTERNAL;
  fp4_status st = fp4_alloc(s->ctx, s->memory, bytes, dev);
  if (!st) st = fp4_copy(s->ctx, *dev, s->memory, host, FP4_MEMORY_HOST, bytes);
  if (*dev) s->dev[s->n++] = *dev;
  return st;
}

static void stage_free(stage *s) {
  for (int i = 0; i < s->n; i++) fp4_free(s->ctx, s->memory, s->dev[i]);
  s->n = 0;
}

static fp4_status put_grouped(stage *s, const fp4_grouped_qmatrix *h, fp4_grouped_qmatrix *d) {
  size_t sb = 0;
  fp4_scales_size(h->format, h->layout, h->rows, h->cols, &sb);
  void *data = NULL, *scales = NULL, *mult = NULL; /* copied into d even when a put failed */
  fp4_status st = put(s, h->data, (size_t)(h->experts * h->rows * h->cols / 2), &data);
  if (!st) st = put(s, h->scales, (size_t)h->experts * sb, &scales);
  if (!st) st = put(s, h->multipliers, h->multipliers ? (size_t)h->experts * sizeof(float) : 0, &mult);
  *d = *h;
  d->data = data;
  d->scales = scales;
  d->multipliers = mult;
  d->memory = s->memory;
  return st;
}

static fp4_status put_experts(stage *s, const fp4_moe_experts *h, fp4_moe_experts *d) {
  *d = *h;
  fp4_status st = put_grouped(s, &h->gate_up, &d->gate_up);
  return st ? st : put_grouped(s, &h->down, &d->down);
}

/* ---- one case ------------------------------------------------------------------------------------------ */

/* Random row groups: each of the T rows goes to a random expert, so some experts get none. */
static void random_offsets(fp4h_rng *g, int64_t *offsets, int64_t E, int64_t T) {
  memset(offsets, 0, (size_t)(E + 1) * sizeof *offsets);
  for (int64_t t = 0; t < T; t++) offsets[1 + (int64_t)(fp4h_next(g) % (uint64_t)E)]++;
  for (int64_t e = 0; e < E; e++) offsets[e + 1] += offsets[e];
}

fp4h_case fp4h_moe_case(int64_t T, int64_t I, int64_t H, int64_t E, int64_t k, int w4a4, fp4_format f, int shared,
                        int routing, fp4_dtype dtype) {
  fp4h_case c;
  memset(&c, 0, sizeof c);
  c.name = w4a4 ? "moe_w4a4" : "moe_w4a16";
  c.op = FP4H_MOE;
  c.format = f;
  c.layout_a = FP4_LAYOUT_128X4;
  c.layout_b = shared ? FP4_LAYOUT_LINEAR : FP4_LAYOUT_128X4;
  c.m = T;
  c.n = I;
  c.k = H;
  c.a_dtype = dtype;
  c.out_dtype = dtype;
  c.data = FP4H_DATA_NORMAL;
  c.experts = E;
  c.top_k = k;
  c.moe_mode = w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16;
  c.shared = shared;
  c.routing = routing;
  return c;
}

void fp4h_run_moe(fp4_context *ctx, const char *backend, fp4_memory memory, const fp4h_case *c, uint64_t seed,
                  fp4h_result *r) {
  memset(r, 0, sizeof *r);
  const int moe = c->op == FP4H_MOE, w4a4 = moe ? c->moe_mode == FP4_MOE_W4A4 : c->op == FP4H_GROUPED_MM;
  /* MoE: backends may round the f32 intermediates differently (bf16 activations for W4A16, a code
   * flipped at a rounding boundary by the W4A4 re-quantization): docs/moe.md. */
  r->tolerance = fp4h_tolerance(c->out_dtype);
  if (moe) r->tolerance = fmax(r->tolerance, w4a4 ? 2e-2 : 4e-3);
  fp4h_rng g = {seed ^ 0x8CB92BA72F3D8DD7ull};
  const int64_t T = c->m, E = c->experts, K = c->k;              /* K = H for MoE */
  const int64_t N = moe ? c->k : c->n, I = c->n, k = c->top_k;    /* out [T, N] */
  const fp4_options ref_opts = {.backend = "ref"}, opts = {.backend = backend, .config = c->config};
  stage s = {ctx, memory, 0, {0}};
  fp4_grouped_qmatrix w1 = {0}, w2 = {0}, s1 = {0}, s2 = {0};
  float *x = malloc((size_t)(T * K) * sizeof *x), *ref = malloc((size_t)(T * N) * sizeof *ref);
  float *got = malloc((size_t)(T * N) * sizeof *got);
  void *a_dense = malloc((size_t)(T * K) * fp4_dtype_size(c->a_dtype));
  void *out_h = malloc((size_t)(T * N) * fp4_dtype_size(c->out_dtype));
  size_t sa = 0;
  fp4_scales_size(c->format, c->layout_a, T, K, &sa);
  uint8_t *aq_data = malloc((size_t)(T * K / 2)), *aq_scales = malloc(sa ? sa : 1);
  int64_t *offsets = malloc((size_t)(E + 1) * sizeof *offsets);
  int32_t *ids = malloc((size_t)(T * (k ? k : 1)) * sizeof *ids);
  float *tw = malloc((size_t)(T * (k ? k : 1)) * sizeof *tw), *sw = malloc((size_t)T * sizeof *sw);
  void *ws_ref = NULL, *ws = NULL;
  fp4_status st = FP4_ERR_OUT_OF_MEMORY;
  if (!x || !ref || !got || !a_dense || !out_h || !aq_data || !aq_scales || !offsets || !ids || !tw || !sw) {
    fp4h_fail(r, st, "host allocation");
    goto done;
  }
  fp4h_fill(&g, x, T * K, c->data, fp4_format_block_size(c->format));
  fp4_convert(x, FP4_DTYPE_F32, a_dense, c->a_dtype, (size_t)(T * K));
  fp4_matrix hid = {a_dense, T, K, 0, c->a_dtype, FP4_MEMORY_HOST};
  fp4_matrix ref_out = {ref, T, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {aq_data, aq_scales, T, K, c->format, c->layout_a, 1.0f, FP4_MEMORY_HOST};
  fp4_moe_layer layer = {0};
  fp4_moe_experts shared = {0};
  fp4_moe_routing rt = {0};

  if (moe) {
    if ((st = fp4h_grouped_make(&g, &w1, E, 2 * I, K, c->format, c->layout_b)) ||
        (st = fp4h_grouped_make(&g, &w2, E, K, I, c->format, c->layout_b))) {
      fp4h_fail(r, st, "making experts");
      goto done;
    }
    layer = (fp4_moe_layer){(fp4_moe_mode)c->moe_mode, {w1, w2, fp4h_global_scale(x, T * K), 1.0f}, NULL};
    if (c->shared) {
      if ((st = fp4h_grouped_make(&g, &s1, 1, 2 * I, K, c->format, c->layout_b)) ||
          (st = fp4h_grouped_make(&g, &s2, 1, K, I, c->format, c->layout_b))) {
        fp4h_fail(r, st, "making the shared expert");
        goto done;
      }
      shared = (fp4_moe_experts){s1, s2, fp4h_global_scale(x, T * K), 1.0f};
      layer.shared = &shared;
      for (int64_t t = 0; t < T; t++) sw[t] = (float)fp4h_uniform(&g);
    }
    fp4h_routing_fill(&g, ids, tw, T, k, E, (fp4h_routing)c->routing);
    rt = (fp4_moe_routing){ids, T, k, {tw, T, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, c->shared ? sw : NULL};
    size_t bytes = 0;
    if (!(st = fp4_moe_workspace_size(&layer, T, k, &ref_opts, &bytes)) && !(ws_ref = malloc(bytes))) st = FP4_ERR_OUT_OF_MEMORY;
    if (!st) st = fp4_moe_forward(NULL, &layer, &hid, &rt, ws_ref, bytes, &ref_out, &ref_opts);
  } else {
    if ((st = fp4h_grouped_make(&g, &w1, E, N, K, c->format, c->layout_b))) {
      fp4h_fail(r, st, "making experts");
      goto done;
    }
    random_offsets(&g, offsets, E, T);
    fp4_matrix xm = {x, T, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    if (w4a4 && !(st = fp4_quantize(NULL, &xm, fp4h_global_scale(x, T * K), &aq, &ref_opts)))
      st = fp4_grouped_mm(NULL, &aq, &w1, offsets, 0.75f, &ref_out, &ref_opts);
    else if (!w4a4)
      st = fp4_grouped_mm_w4a16(NULL, &hid, &w1, offsets, 0.75f, &ref_out, &ref_opts);
  }
  if (st) {
    fp4h_fail(r, st, "reference");
    goto done;
  }

  /* The same operands in the backend's memory, the output NaN-filled. */
  fp4h_fill_nan(out_h, c->out_dtype, T * N);
  void *d_out, *d_a, *d_aqd, *d_aqs, *d_off, *d_ids, *d_tw, *d_sw;
  fp4_moe_experts d_routed, d_shared;
  fp4_grouped_qmatrix d_w1;
  st = put(&s, out_h, (size_t)(T * N) * fp4_dtype_size(c->out_dtype), &d_out);
  if (!st) st = put(&s, a_dense, (size_t)(T * K) * fp4_dtype_size(c->a_dtype), &d_a);
  if (moe) {
    if (!st) st = put_experts(&s, &layer.routed, &d_routed);
    if (!st && c->shared) st = put_experts(&s, &shared, &d_shared);
    if (!st) st = put(&s, ids, (size_t)(T * k) * sizeof *ids, &d_ids);
    if (!st) st = put(&s, tw, (size_t)(T * k) * sizeof *tw, &d_tw);
    if (!st) st = put(&s, c->shared ? sw : NULL, (size_t)T * sizeof *sw, &d_sw);
  } else {
    if (!st) st = put_grouped(&s, &w1, &d_w1);
    if (!st) st = put(&s, aq_data, (size_t)(T * K / 2), &d_aqd);
    if (!st) st = put(&s, aq_scales, sa, &d_aqs);
    if (!st) st = put(&s, offsets, (size_t)(E + 1) * sizeof *offsets, &d_off);
  }
  if (st) {
    fp4h_fail(r, st, "staging operands");
    goto done;
  }
  fp4_matrix xa = {d_a, T, K, 0, c->a_dtype, memory}, xout = {d_out, T, N, 0, c->out_dtype, memory};
  if (moe) {
    fp4_moe_layer xl = {layer.mode, d_routed, c->shared ? &d_shared : NULL};
    fp4_moe_routing xr = {d_ids, T, k, {d_tw, T, k, 0, FP4_DTYPE_F32, memory}, d_sw};
    size_t bytes = 0;
    st = fp4_moe_workspace_size(&xl, T, k, &opts, &bytes);
    if (!st) st = fp4_alloc(ctx, memory, bytes, &ws);
    if (!st) st = fp4_moe_forward(ctx, &xl, &xa, &xr, ws, bytes, &xout, &opts);
  } else {
    fp4_qmatrix xaq = aq;
    xaq.data = d_aqd;
    xaq.scales = d_aqs;
    xaq.memory = memory;
    st = w4a4 ? fp4_grouped_mm(ctx, &xaq, &d_w1, d_off, 0.75f, &xout, &opts)
              : fp4_grouped_mm_w4a16(ctx, &xa, &d_w1, d_off, 0.75f, &xout, &opts);
  }
  if (!st) st = fp4_synchronize(ctx);
  if (!st && memory != FP4_MEMORY_HOST)
    st = fp4_copy(ctx, out_h, FP4_MEMORY_HOST, d_out, memory, (size_t)(T * N) * fp4_dtype_size(c->out_dtype));
  if (st) {
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", fp4_last_error());
    goto done;
  }
  fp4_convert(out_h, c->out_dtype, got, FP4_DTYPE_F32, (size_t)(T * N));
  fp4h_compare(got, ref, T * N, c->out_dtype, r);

done:
  if (ws) fp4_free(ctx, memory, ws);
  stage_free(&s);
  fp4h_grouped_free(&w1);
  fp4h_grouped_free(&w2);
  fp4h_grouped_free(&s1);
  fp4h_grouped_free(&s2);
  free(ws_ref);
  free(x);
  free(ref);
  free(got);
  free(a_dense);
  free(out_h);
  free(aq_data);
  free(aq_scales);
  free(offsets);
  free(ids);
  free(tw);
  free(sw);
}
