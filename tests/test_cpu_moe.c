#define _POSIX_C_SOURCE 200809L
/*
 * The cpu backend's grouped GEMM and MoE layer at every instruction-set level this machine has
 * (each level the backend's config) on 1 and 2 threads:
 *   - against the reference through the harness (fresh random data, NaN-prefilled outputs, host
 *     memory): the embedded grouped/MoE cases of `fp4kit check`; grouped GEMM W4A4/W4A16 x
 *     NVFP4/MXFP4 for T in {1, 8, 64, 300}; the MoE layer W4A4/W4A16 x NVFP4/MXFP4 x shared expert
 *     on/off x uniform, skewed (a hot expert with 50% of the pairs) and duplicate-id routing for T in
 *     {1, 8, 64, 300};
 *   - T = 0 is a no-op that leaves the output untouched;
 *   - the MoE output is bit-identical on 1 and 2 threads (and shared_weights scale the shared
 *     expert: weight 0 equals the layer without it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"
#include "harness_moe.h"

static int g_runs, g_failures;

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    g_runs++;                                                                                                          \
    if (!(cond)) {                                                                                                     \
      g_failures++;                                                                                                    \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                      \
      printf(__VA_ARGS__);                                                                                             \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  } while (0)

static const char *g_where = ""; /* level and threads of the current pass, for messages */
static const char *g_level;      /* the config (a level) of every cpu call */

static void run_case(const fp4h_case *cin, uint64_t seed) {
  fp4h_case cc = *cin;
  cc.config = g_level;
  const fp4h_case *c = &cc;
  fp4h_result r;
  fp4h_run(NULL, "cpu", FP4_MEMORY_HOST, c, seed, &r);
  CHECK(r.status == FP4_OK && r.passed,
        "[%s] %-14s %s T=%lld N/I=%lld K/H=%lld E=%lld k=%lld mode=%d shared=%d route=%d a=%s out=%s: %s (%s)", g_where,
        c->name, fp4_format_name(c->format), (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->experts,
        (long long)c->top_k, c->moe_mode, c->shared, c->routing, fp4_dtype_name(c->a_dtype),
        fp4_dtype_name(c->out_dtype), r.message, fp4_status_str(r.status));
}

static const int64_t kTokens[] = {1, 8, 64, 300};
static const fp4_dtype kDtypes[] = {FP4_DTYPE_BF16, FP4_DTYPE_F16, FP4_DTYPE_F32};
static const fp4_scale_layout kLayouts[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR};

static void test_check_cases(void) {
  int n = 0;
  const fp4h_case *cases = fp4h_default_cases(&n);
  int moe = 0;
  for (int i = 0; i < n; i++)
    if (cases[i].op == FP4H_GROUPED_MM || cases[i].op == FP4H_GROUPED_MM_W4A16 || cases[i].op == FP4H_MOE) {
      run_case(&cases[i], 1 + (uint64_t)i);
      moe++;
    }
  CHECK(moe >= 3, "the embedded case table has %d grouped/MoE cases; expected at least 3", moe);
}

static void test_grouped(void) {
  uint64_t seed = 100;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (size_t t = 0; t < sizeof kTokens / sizeof *kTokens; t++) {
        const int rot = (int)(f * 8 + w4a4 * 4 + t);
        fp4h_case c;
        memset(&c, 0, sizeof c);
        c.name = w4a4 ? "grouped_w4a4" : "grouped_w4a16";
        c.op = w4a4 ? FP4H_GROUPED_MM : FP4H_GROUPED_MM_W4A16;
        c.format = (fp4_format)f;
        c.layout_a = kLayouts[rot % 2];
        c.layout_b = kLayouts[(rot + 1) % 2];
        c.m = kTokens[t];
        c.n = t % 2 ? 40 : 64;    /* a partial panel of weight rows */
        c.k = t % 2 ? 160 : 256;  /* padded packed rows */
        c.a_dtype = kDtypes[rot % 3];
        c.out_dtype = kDtypes[(rot + 2) % 3];
        c.data = rot % 4 == 3 ? FP4H_DATA_UNIFORM : FP4H_DATA_NORMAL;
        c.experts = t == 3 ? 24 : 6;
        run_case(&c, seed++);
      }
}

static void test_moe(void) {
  uint64_t seed = 2000;
  for (int f = 0; f < 2; f++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++)
      for (int shared = 0; shared < 2; shared++)
        for (size_t t = 0; t < sizeof kTokens / sizeof *kTokens; t++) {
          const int rot = (int)(f + w4a4 + shared + t);
          const int routing = rot % 3; /* uniform, skewed, duplicates */
          const fp4_dtype dtype = kDtypes[rot % 3];
          /* 300 tokens: fewer experts, so each gets many rows (the panel path of the GEMM). */
          const int64_t E = t == 3 ? 8 : 20, k = t == 3 ? 2 : 4;
          fp4h_case c = fp4h_moe_case(kTokens[t], 64, 128, E, k, w4a4, (fp4_format)f, shared, routing, dtype);
          run_case(&c, seed++);
        }
  /* Top-10 over many experts, as Qwen3.5's layers route (widths scaled down). */
  for (int w4a4 = 0; w4a4 < 2; w4a4++) {
    fp4h_case c = fp4h_moe_case(8, 64, 256, 128, 10, w4a4, FP4_FORMAT_NVFP4, w4a4, FP4H_ROUTE_SKEWED, FP4_DTYPE_BF16);
    run_case(&c, seed++);
  }
}

/* ---- direct calls: T = 0, thread-count determinism, shared_weights ---- */

typedef struct layer_data {
  fp4_grouped_qmatrix w1, w2, s1, s2;
  fp4_moe_layer layer;
  int32_t *ids;
  float *tw, *hidden, *sw;
} layer_data;

enum { LT = 37, LK = 3, LE = 9, LH = 96, LI = 64 };

static int layer_make(layer_data *d, int w4a4, fp4_format f) {
  memset(d, 0, sizeof *d);
  fp4h_rng g = {4242 + (uint64_t)w4a4 * 7 + (uint64_t)f};
  if (fp4h_grouped_make(&g, &d->w1, LE, 2 * LI, LH, f, FP4_LAYOUT_128X4) ||
      fp4h_grouped_make(&g, &d->w2, LE, LH, LI, f, FP4_LAYOUT_128X4) ||
      fp4h_grouped_make(&g, &d->s1, 1, 2 * LI, LH, f, FP4_LAYOUT_LINEAR) ||
      fp4h_grouped_make(&g, &d->s2, 1, LH, LI, f, FP4_LAYOUT_LINEAR))
    return 0;
  d->ids = malloc(sizeof *d->ids * LT * LK);
  d->tw = malloc(sizeof *d->tw * LT * LK);
  d->hidden = malloc(sizeof *d->hidden * LT * LH);
  d->sw = malloc(sizeof *d->sw * LT);
  if (!d->ids || !d->tw || !d->hidden || !d->sw) return 0;
  fp4h_routing_fill(&g, d->ids, d->tw, LT, LK, LE, FP4H_ROUTE_DUPLICATES);
  fp4h_fill(&g, d->hidden, LT * LH, FP4H_DATA_NORMAL, 16);
  for (int t = 0; t < LT; t++) d->sw[t] = (float)fp4h_uniform(&g);
  d->layer = (fp4_moe_layer){w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16, {d->w1, d->w2, 0.25f, 0.5f}, NULL};
  return 1;
}

static void layer_free(layer_data *d) {
  fp4h_grouped_free(&d->w1);
  fp4h_grouped_free(&d->w2);
  fp4h_grouped_free(&d->s1);
  fp4h_grouped_free(&d->s2);
  free(d->ids);
  free(d->tw);
  free(d->hidden);
  free(d->sw);
}

/* The layer on the cpu backend over the first T tokens into out (f32 [T, LH], NaN-prefilled). */
static fp4_status layer_run(layer_data *d, const fp4_moe_experts *shared, const float *sw, int64_t T, float *out) {
  fp4_moe_layer layer = d->layer;
  layer.shared = shared;
  fp4_moe_routing rt = {T ? d->ids : NULL, T, LK, {T ? d->tw : NULL, T, LK, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, sw};
  fp4_matrix x = {T ? d->hidden : NULL, T, LH, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_matrix o = {out, T, LH, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  const fp4_options opts = {.backend = "cpu", .config = g_level};
  size_t bytes = 0;
  fp4_status st = fp4_moe_workspace_size(&layer, T, LK, &opts, &bytes);
  if (st) return st;
  void *ws = bytes ? malloc(bytes) : NULL;
  if (bytes && !ws) return FP4_ERR_OUT_OF_MEMORY;
  if (ws) memset(ws, 0xff, bytes); /* stale workspace contents must not matter */
  for (int64_t i = 0; i < T * LH; i++) out[i] = NAN;
  st = fp4_moe_forward(NULL, &layer, &x, &rt, ws, bytes, &o, &opts);
  free(ws);
  return st;
}

static void test_direct(void) {
  for (int w4a4 = 0; w4a4 < 2; w4a4++)
    for (int f = 0; f < 2; f++) {
      layer_data d;
      float *a = malloc(sizeof *a * LT * LH), *b = malloc(sizeof *b * LT * LH);
      if (!layer_make(&d, w4a4, (fp4_format)f) || !a || !b) {
        CHECK(0, "test data: %s", fp4_last_error());
        layer_free(&d);
        free(a);
        free(b);
        continue;
      }
      const char *what = w4a4 ? "W4A4" : "W4A16";
      const char *fmt = fp4_format_name((fp4_format)f);
      fp4_moe_experts sh = {d.s1, d.s2, 0.75f, 0.125f};

      /* T = 0: FP4_OK with NULL data, nothing written. */
      a[0] = 12.5f;
      fp4_matrix o0 = {a, 0, LH, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
      fp4_moe_routing r0 = {NULL, 0, LK, {NULL, 0, LK, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
      fp4_matrix x0 = {NULL, 0, LH, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
      const fp4_options opts = {.backend = "cpu", .config = g_level};
      fp4_status st = fp4_moe_forward(NULL, &d.layer, &x0, &r0, NULL, 0, &o0, &opts);
      CHECK(st == FP4_OK && a[0] == 12.5f, "[%s] %s %s T=0: %s, out[0] = %g", g_where, what, fmt, fp4_status_str(st),
            (double)a[0]);

      /* 1 vs 2 threads, with and without a shared expert: bit-identical. */
      for (int s = 0; s < 2; s++) {
        setenv("FP4KIT_NUM_THREADS", "1", 1);
        fp4_status s1 = layer_run(&d, s ? &sh : NULL, s ? d.sw : NULL, LT, a);
        setenv("FP4KIT_NUM_THREADS", "2", 1);
        fp4_status s2 = layer_run(&d, s ? &sh : NULL, s ? d.sw : NULL, LT, b);
        int finite = 1;
        for (int i = 0; i < LT * LH; i++) finite &= isfinite(a[i]) != 0;
        CHECK(s1 == FP4_OK && s2 == FP4_OK && finite && !memcmp(a, b, sizeof *a * LT * LH),
              "[%s] %s %s shared=%d: 2 threads differ from 1 thread or failed (%s, %s, finite %d): %s", g_where, what,
              fmt, s, fp4_status_str(s1), fp4_status_str(s2), finite, fp4_last_error());
      }

      /* shared_weights all zero: the same as no shared expert (exactly: +0 * finite adds nothing). */
      float *zero = calloc(LT, sizeof *zero);
      fp4_status s1 = layer_run(&d, NULL, NULL, LT, a);
      fp4_status s2 = zero ? layer_run(&d, &sh, zero, LT, b) : FP4_ERR_OUT_OF_MEMORY;
      CHECK(s1 == FP4_OK && s2 == FP4_OK && !memcmp(a, b, sizeof *a * LT * LH),
            "[%s] %s %s: shared_weights = 0 differs from no shared expert", g_where, what, fmt);
      free(zero);
      layer_free(&d);
      free(a);
      free(b);
    }
  unsetenv("FP4KIT_NUM_THREADS");
}

/* ---- strided views and the layer's own activation scales, against the reference ---- */

enum { VPAD = 5 };           /* extra elements per row of every strided view */
static const float kPadMark = 3.5f; /* what the output's padding holds before and after a call */

/* rows x cols of src (f32, packed) into a buffer with ld = cols + VPAD, the padding NaN. */
static float *strided_copy(const float *src, int64_t rows, int64_t cols) {
  float *d = malloc(sizeof *d * (size_t)(rows * (cols + VPAD)));
  if (!d) return NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols + VPAD; c++) d[r * (cols + VPAD) + c] = c < cols ? src[r * cols + c] : NAN;
  return d;
}

/* An f32 output [rows, cols] at ld cols + VPAD (strided) or cols, outputs NaN and padding kPadMark. */
static float *output_buffer(int64_t rows, int64_t cols, int strided) {
  const int64_t ld = cols + (strided ? VPAD : 0);
  float *o = malloc(sizeof *o * (size_t)(rows * ld));
  for (int64_t i = 0; o && i < rows * ld; i++) o[i] = i % ld < cols ? NAN : kPadMark;
  return o;
}

/* Output o (ld as output_buffer made it) into the packed dst; 0 when a padding element changed. */
static int output_unpack(const float *o, int64_t rows, int64_t cols, int strided, float *dst) {
  const int64_t ld = cols + (strided ? VPAD : 0);
  int pad_ok = 1;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) {
      if (c < cols) dst[r * cols + c] = o[r * ld + c];
      else pad_ok &= o[r * ld + c] == kPadMark;
    }
  return pad_ok;
}

/* The layer of d (shared expert sh with per-token weights) on a backend, hidden states, top-k weights
 * and output packed or as strided views (ld = cols + VPAD, NaN in the hidden and weight padding),
 * into out (packed f32 [LT, LH]). */
static fp4_status layer_view_run(layer_data *d, const fp4_moe_experts *sh, const char *backend, int strided,
                                 float *out, int *pad_ok) {
  fp4_moe_layer layer = d->layer;
  layer.shared = sh;
  float *hid = strided ? strided_copy(d->hidden, LT, LH) : d->hidden;
  float *tw = strided ? strided_copy(d->tw, LT, LK) : d->tw;
  float *o = output_buffer(LT, LH, strided);
  const int64_t pad = strided ? VPAD : 0;
  fp4_status st = FP4_ERR_OUT_OF_MEMORY;
  if (hid && tw && o) {
    fp4_moe_routing rt = {d->ids, LT, LK, {tw, LT, LK, LK + pad, FP4_DTYPE_F32, FP4_MEMORY_HOST}, d->sw};
    fp4_matrix x = {hid, LT, LH, LH + pad, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_matrix om = {o, LT, LH, LH + pad, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    const fp4_options opts = {.backend = backend, .config = strcmp(backend, "cpu") ? NULL : g_level};
    size_t bytes = 0;
    st = fp4_moe_workspace_size(&layer, LT, LK, &opts, &bytes);
    void *ws = st == FP4_OK ? malloc(bytes ? bytes : 1) : NULL;
    if (st == FP4_OK && !ws) st = FP4_ERR_OUT_OF_MEMORY;
    if (ws) {
      memset(ws, 0xff, bytes);
      st = fp4_moe_forward(NULL, &layer, &x, &rt, ws, bytes, &om, &opts);
      *pad_ok = output_unpack(o, LT, LH, strided, out);
    }
    free(ws);
  }
  if (strided) free(hid), free(tw);
  free(o);
  return st;
}

/* A grouped GEMM of the first LT hidden states with d's gate_up weights (contiguous row groups of
 * uneven sizes, one of them empty) on a backend, activations and output packed or strided. */
static fp4_status grouped_view_run(layer_data *d, int w4a4, const char *backend, int strided, float *out, int *pad_ok) {
  const int64_t N = 2 * LI;
  int64_t offsets[LE + 1];
  for (int64_t e = 0; e <= LE; e++) offsets[e] = e == 3 ? offsets[2] : (e * LT) / LE;
  float *hid = strided ? strided_copy(d->hidden, LT, LH) : d->hidden;
  float *o = output_buffer(LT, N, strided);
  size_t sb = 0;
  fp4_scales_size(d->w1.format, FP4_LAYOUT_128X4, LT, LH, &sb);
  uint8_t *qd = malloc(LT * LH / 2), *qs = malloc(sb);
  const int64_t pad = strided ? VPAD : 0;
  fp4_status st = FP4_ERR_OUT_OF_MEMORY;
  if (hid && o && qd && qs) {
    fp4_matrix x = {hid, LT, LH, LH + pad, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_matrix om = {o, LT, N, N + pad, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    const fp4_options opts = {.backend = backend, .config = strcmp(backend, "cpu") ? NULL : g_level};
    const fp4_options ref = {.backend = "ref"};
    if (w4a4) {
      fp4_qmatrix aq = {qd, qs, LT, LH, d->w1.format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
      st = fp4_quantize(NULL, &x, 0.5f, &aq, &ref);
      if (!st) st = fp4_grouped_mm(NULL, &aq, &d->w1, offsets, 0.75f, &om, &opts);
    } else {
      st = fp4_grouped_mm_w4a16(NULL, &x, &d->w1, offsets, 0.75f, &om, &opts);
    }
    *pad_ok = output_unpack(o, LT, N, strided, out);
  }
  if (strided) free(hid);
  free(o), free(qd), free(qs);
  return st;
}

/* Strided hidden states, top-k weights and outputs (views into wider rows, as a framework hands over
 * slices) give the bits of packed ones and leave the output's padding alone, on the cpu backend and
 * on the reference; the layer's activation encode scales (0.25 and 0.5 for the routed experts, 0.75
 * and 0.125 for the shared one) reach the result as the reference applies them, so the cpu layer
 * and grouped GEMM agree with the reference within the f32 tolerance. */
static void test_views(void) {
  for (int w4a4 = 0; w4a4 < 2; w4a4++)
    for (int f = 0; f < 2; f++) {
      layer_data d;
      float *r0 = malloc(sizeof(float) * LT * 2 * LI), *r1 = malloc(sizeof(float) * LT * 2 * LI);
      float *c0 = malloc(sizeof(float) * LT * 2 * LI), *c1 = malloc(sizeof(float) * LT * 2 * LI);
      if (!layer_make(&d, w4a4, (fp4_format)f) || !r0 || !r1 || !c0 || !c1) {
        CHECK(0, "test data: %s", fp4_last_error());
        layer_free(&d);
        free(r0), free(r1), free(c0), free(c1);
        continue;
      }
      const char *what = w4a4 ? "W4A4" : "W4A16";
      const char *fmt = fp4_format_name((fp4_format)f);
      fp4_moe_experts sh = {d.s1, d.s2, 0.75f, 0.125f};
      for (int op = 0; op < 2; op++) {
        const char *opname = op ? "grouped" : "moe";
        const int64_t n = LT * (op ? 2 * LI : LH);
        int pads[4] = {1, 1, 1, 1};
        fp4_status st[4];
        float *outs[4] = {r0, r1, c0, c1};
        for (int i = 0; i < 4; i++) {
          const char *backend = i < 2 ? "ref" : "cpu";
          st[i] = op ? grouped_view_run(&d, w4a4, backend, i & 1, outs[i], &pads[i])
                     : layer_view_run(&d, &sh, backend, i & 1, outs[i], &pads[i]);
        }
        CHECK(st[0] == FP4_OK && st[1] == FP4_OK && st[2] == FP4_OK && st[3] == FP4_OK, "[%s] %s %s %s: %s", g_where,
              opname, what, fmt, fp4_last_error());
        if (st[0] || st[1] || st[2] || st[3]) continue;
        CHECK(!memcmp(r0, r1, sizeof(float) * (size_t)n) && pads[1],
              "[%s] %s %s %s: the reference with strided views differs from packed ones (padding kept: %d)", g_where,
              opname, what, fmt, pads[1]);
        CHECK(!memcmp(c0, c1, sizeof(float) * (size_t)n) && pads[3],
              "[%s] %s %s %s: cpu with strided views differs from packed ones (padding kept: %d)", g_where, opname,
              what, fmt, pads[3]);
        fp4h_result r;
        memset(&r, 0, sizeof r);
        r.tolerance = fp4h_tolerance(FP4_DTYPE_F32);
        fp4h_compare(c0, r0, n, FP4_DTYPE_F32, &r);
        CHECK(r.passed, "[%s] %s %s %s: cpu against the reference: %s", g_where, opname, what, fmt, r.message);
      }
      layer_free(&d);
      free(r0), free(r1), free(c0), free(c1);
    }
}

static const char *const kLevels[] = {"generic", "avx2", "avx512"};

int main(void) {
  int levels = 0;
  for (size_t l = 0; l < sizeof kLevels / sizeof *kLevels; l++) {
    if (!fp4h_cpu_level_runs(kLevels[l])) {
      printf("level %s: not available on this CPU/build, skipped\n", kLevels[l]);
      continue;
    }
    g_level = kLevels[l];
    levels++;
    static const char *const threads[] = {"1", "2"};
    for (int t = 0; t < 2; t++) {
      char where[64];
      snprintf(where, sizeof where, "%s, %s thread%s", kLevels[l], threads[t], t ? "s" : "");
      g_where = where;
      setenv("FP4KIT_NUM_THREADS", threads[t], 1);
      test_check_cases();
      test_grouped();
      test_moe();
    }
    g_where = kLevels[l];
    test_direct();
    test_views();
  }
  CHECK(levels >= 1, "no cpu level ran (the generic level is always available)");
  printf("%d checks, %d failures, %d levels\n", g_runs, g_failures, levels);
  return g_failures ? 1 : 0;
}
