/*
 * The reference grouped GEMM against a per-expert loop over fp4_mm / fp4_mm_w4a16 (bit for bit), and
 * the reference MoE layer against a naive per-token computation of docs/moe.md's numeric contract
 * written here independently (no permutation, no workspace, elements decoded with the public
 * codecs): random, skewed (a hot expert in 50% of the tokens) and duplicate routing, W4A16 and W4A4,
 * NVFP4 and MXFP4, with and without a shared expert. Outputs are NaN-prefilled; experts that receive
 * no token have NaN scales, so using their weights for any row would show.
 */
#include <math.h>
#include <stdlib.h>

#include "fp4kit.h"
#include "harness.h"
#include "harness_moe.h"
#include "testing.h"

static const fp4_options ref_opts = {.backend = "ref"};

/* ---- grouped GEMM vs per-expert fp4_mm ------------------------------------------------------------ */

static void grouped_case(int w4a16, fp4_format fmt, int64_t T, int64_t N, int64_t K, int64_t E, fp4_dtype out_dtype) {
  fp4h_rng g = {(uint64_t)(T * 7919 + N * 31 + K + E) ^ (uint64_t)(fmt + 2 * w4a16)};
  fp4_grouped_qmatrix w;
  CHECK(fp4h_grouped_make(&g, &w, E, N, K, fmt, FP4_LAYOUT_128X4) == FP4_OK, "grouped weights");
  float *x = malloc(sizeof(float) * T * K);
  fp4h_fill(&g, x, T * K, FP4H_DATA_NORMAL, 32);
  void *xb = malloc(2 * T * K);
  fp4_convert(x, FP4_DTYPE_F32, xb, FP4_DTYPE_BF16, (size_t)(T * K));
  /* Offsets with empty experts: expert 1 always empty, the rest random. */
  int64_t *off = calloc((size_t)E + 1, sizeof *off);
  for (int64_t t = 0; t < T; t++) {
    int64_t e = (int64_t)(fp4h_next(&g) % (uint64_t)E);
    off[1 + (e == 1 ? 0 : e)]++;
  }
  for (int64_t e = 0; e < E; e++) off[e + 1] += off[e];
  size_t osz = fp4_dtype_size(out_dtype), sa = 0;
  fp4_scales_size(fmt, FP4_LAYOUT_128X4, T, K, &sa);
  fp4_qmatrix aq = {malloc(T * K / 2), malloc(sa), T, K, fmt, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix xm = {x, T, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, xbm = {xb, T, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  const float gsf = 50.0f, alpha = 1.5f;
  CHECK(fp4_quantize(NULL, &xm, gsf, &aq, &ref_opts) == FP4_OK, "%s", fp4_last_error());
  void *out = malloc(osz * T * N), *one = malloc(osz * N * (T ? T : 1));
  fp4h_fill_nan(out, out_dtype, T * N);
  fp4_matrix om = {out, T, N, 0, out_dtype, FP4_MEMORY_HOST};
  fp4_status st = w4a16 ? fp4_grouped_mm_w4a16(NULL, &xbm, &w, off, alpha, &om, &ref_opts)
                        : fp4_grouped_mm(NULL, &aq, &w, off, alpha, &om, &ref_opts);
  CHECK(st == FP4_OK, "grouped: %s", fp4_last_error());
  int64_t bad = 0;
  for (int64_t e = 0; e < E; e++) {
    const int64_t r0 = off[e], n = off[e + 1] - r0;
    if (!n) continue;
    fp4_qmatrix we;
    CHECK(fp4_grouped_expert(&w, e, &we) == FP4_OK, "%s", fp4_last_error());
    fp4_matrix oe = {one, n, N, 0, out_dtype, FP4_MEMORY_HOST};
    if (w4a16) {
      fp4_matrix xe = {(uint16_t *)xb + r0 * K, n, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
      st = fp4_mm_w4a16(NULL, &xe, &we, alpha, &oe, &ref_opts);
    } else {
      /* The runtime recipe quantizes rows independently: the same rows quantized alone give the
       * same codes and scales (in a layout of their own). */
      size_t se = 0;
      fp4_scales_size(fmt, FP4_LAYOUT_LINEAR, n, K, &se);
      fp4_qmatrix ae = {malloc(n * K / 2), malloc(se), n, K, fmt, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
      fp4_matrix xe = {x + r0 * K, n, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
      st = fp4_quantize(NULL, &xe, gsf, &ae, &ref_opts);
      if (!st) st = fp4_mm(NULL, &ae, &we, alpha, &oe, &ref_opts);
      free(ae.data);
      free(ae.scales);
    }
    CHECK(st == FP4_OK, "per-expert: %s", fp4_last_error());
    bad += memcmp((char *)out + osz * r0 * N, one, osz * n * N) != 0;
  }
  CHECK(bad == 0, "grouped %s %s T=%lld E=%lld: %lld experts differ from the per-expert loop", w4a16 ? "w4a16" : "w4a4",
        fp4_format_name(fmt), (long long)T, (long long)E, (long long)bad);
  free(x);
  free(xb);
  free(off);
  free(aq.data);
  free(aq.scales);
  free(out);
  free(one);
  fp4h_grouped_free(&w);
}

/* ---- naive MoE ------------------------------------------------------------------------------------- */

/* Element (n, c) of expert e, decoded with the public codecs, multiplier excluded. */
static double wel(const fp4_grouped_qmatrix *w, int64_t e, int64_t n, int64_t c) {
  size_t sb = 0;
  fp4_scales_size(w->format, w->layout, w->rows, w->cols, &sb);
  const uint8_t *d = (const uint8_t *)w->data + e * w->rows * w->cols / 2, *s = (const uint8_t *)w->scales + e * sb;
  uint8_t code = (uint8_t)(d[n * (w->cols / 2) + c / 2] >> (4 * (c & 1)));
  uint8_t sc = s[fp4_scale_offset(w->format, w->layout, w->rows, w->cols, n, c / fp4_format_block_size(w->format))];
  return (double)fp4_e2m1_decode(code) * (w->format == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode(sc) : fp4_ue8m0_decode(sc));
}

/* The activation row the contract feeds a GEMM: as given (W4A16) or quantized with the runtime
 * recipe and dequantized (W4A4); *mult receives the activation multiplier. */
static void act_row(const float *v, int64_t n, int w4a4, fp4_format fmt, float gsf, float *dst, float *mult) {
  *mult = 1.0f;
  if (!w4a4) {
    memcpy(dst, v, sizeof(float) * n);
    return;
  }
  size_t sb = 0;
  fp4_scales_size(fmt, FP4_LAYOUT_LINEAR, 1, n, &sb);
  uint8_t *codes = malloc(n / 2), *sc = malloc(sb);
  fp4_qmatrix q = {codes, sc, 1, n, fmt, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix m = {(void *)v, 1, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  CHECK(fp4_quantize(NULL, &m, fmt == FP4_FORMAT_NVFP4 ? gsf : 1.0f, &q, &ref_opts) == FP4_OK, "%s", fp4_last_error());
  int bs = fp4_format_block_size(fmt);
  for (int64_t c = 0; c < n; c++)
    dst[c] = fp4_e2m1_decode((uint8_t)(codes[c / 2] >> (4 * (c & 1)))) *
             (fmt == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode(sc[c / bs]) : fp4_ue8m0_decode(sc[c / bs]));
  *mult = q.multiplier;
  free(codes);
  free(sc);
}

/* One expert e of a set on one token's hidden row x [H]: the f32 result [H] of the contract. */
static void expert_forward(const fp4_moe_experts *s, int64_t e, int w4a4, const float *x, int64_t H, float *y) {
  const fp4_grouped_qmatrix *gu = &s->gate_up, *dn = &s->down;
  const int64_t I = gu->rows / 2;
  float *xa = malloc(sizeof(float) * H), *g = malloc(sizeof(float) * 2 * I), *act = malloc(sizeof(float) * I);
  float *aa = malloc(sizeof(float) * I), am, xm;
  act_row(x, H, w4a4, gu->format, s->gate_up_act_scale, xa, &xm);
  double m1 = (double)(gu->multipliers ? gu->multipliers[e] : 1.0f) * (double)xm;
  for (int64_t n = 0; n < 2 * I; n++) {
    double acc = 0.0;
    for (int64_t c = 0; c < H; c++) acc += (double)xa[c] * wel(gu, e, n, c);
    g[n] = (float)(acc * m1);
  }
  for (int64_t i = 0; i < I; i++) act[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * (double)g[I + i]);
  act_row(act, I, w4a4, dn->format, s->down_act_scale, aa, &am);
  double m2 = (double)(dn->multipliers ? dn->multipliers[e] : 1.0f) * (double)am;
  for (int64_t h = 0; h < H; h++) {
    double acc = 0.0;
    for (int64_t i = 0; i < I; i++) acc += (double)aa[i] * wel(dn, e, h, i);
    y[h] = (float)(acc * m2);
  }
  free(xa);
  free(g);
  free(act);
  free(aa);
}

/* Overwrites every scale byte of expert e with the format's NaN encoding. */
static void poison_expert(fp4_grouped_qmatrix *w, int64_t e) {
  size_t sb = 0;
  fp4_scales_size(w->format, w->layout, w->rows, w->cols, &sb);
  memset((uint8_t *)w->scales + e * sb, w->format == FP4_FORMAT_NVFP4 ? 0x7F : 0xFF, sb);
}

typedef struct moe_case {
  fp4_moe_mode mode;
  fp4_format fmt;
  int64_t T, H, I, Is, E, k;
  int shared, shared_gate;
  fp4h_routing route;
  fp4_dtype hidden_dtype, out_dtype;
} moe_case;

static void moe_case_run(const moe_case *c) {
  fp4h_rng g = {(uint64_t)(c->T * 131 + c->E * 17 + c->k) ^ ((uint64_t)c->route << 20) ^ ((uint64_t)c->mode << 24) ^
                ((uint64_t)c->fmt << 28) ^ ((uint64_t)c->shared << 32)};
  const int64_t T = c->T, H = c->H, I = c->I, E = c->E, k = c->k;
  const int w4a4 = c->mode == FP4_MOE_W4A4;
  fp4_grouped_qmatrix w1, w2, s1 = {0}, s2 = {0};
  CHECK(fp4h_grouped_make(&g, &w1, E, 2 * I, H, c->fmt, FP4_LAYOUT_128X4) == FP4_OK, "w13");
  CHECK(fp4h_grouped_make(&g, &w2, E, H, I, c->fmt, FP4_LAYOUT_LINEAR) == FP4_OK, "w2");
  int32_t *ids = malloc(sizeof *ids * T * k);
  float *tw = malloc(sizeof(float) * T * k), *sw = malloc(sizeof(float) * T), *x = malloc(sizeof(float) * T * H);
  fp4h_routing_fill(&g, ids, tw, T, k, E, c->route);
  fp4h_fill(&g, x, T * H, FP4H_DATA_NORMAL, 32);
  for (int64_t t = 0; t < T; t++) sw[t] = (float)fp4h_uniform(&g);
  /* The hidden states as the layer receives them (rounded to the hidden dtype). */
  void *hid = malloc(fp4_dtype_size(c->hidden_dtype) * T * H);
  fp4_convert(x, FP4_DTYPE_F32, hid, c->hidden_dtype, (size_t)(T * H));
  fp4_convert(hid, c->hidden_dtype, x, FP4_DTYPE_F32, (size_t)(T * H));

  int64_t used = 0, hot = 0;
  for (int64_t e = 0; e < E; e++) {
    int any = 0;
    for (int64_t i = 0; i < T * k; i++) any |= ids[i] == e;
    if (!any) poison_expert(&w1, e), poison_expert(&w2, e);
    used += any;
  }
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < k; j++) hot += ids[t * k + j] == 0;
  if (c->route == FP4H_ROUTE_SKEWED) CHECK(hot == (T + 1) / 2, "the hot expert is in %lld of %lld tokens", (long long)hot, (long long)T);

  fp4_moe_layer layer = {c->mode, {w1, w2, 448.0f * 6.0f / 4.0f, 448.0f * 6.0f / 2.0f}, NULL};
  fp4_moe_experts shared = {0};
  if (c->shared) {
    CHECK(fp4h_grouped_make(&g, &s1, 1, 2 * c->Is, H, c->fmt, FP4_LAYOUT_LINEAR) == FP4_OK, "shared w13");
    CHECK(fp4h_grouped_make(&g, &s2, 1, H, c->Is, c->fmt, FP4_LAYOUT_128X4) == FP4_OK, "shared w2");
    shared = (fp4_moe_experts){s1, s2, 448.0f * 6.0f / 5.0f, 448.0f * 6.0f / 3.0f};
    layer.shared = &shared;
  }
  fp4_moe_routing rt = {ids, T, k, {tw, T, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, c->shared_gate ? sw : NULL};
  size_t bytes = 0;
  CHECK(fp4_moe_workspace_size(&layer, T, k, &ref_opts, &bytes) == FP4_OK && bytes > 0, "%s", fp4_last_error());
  void *ws = malloc(bytes);
  memset(ws, 0xFF, bytes); /* stale NaN contents must not matter */
  size_t osz = fp4_dtype_size(c->out_dtype);
  void *out = malloc(osz * T * H);
  fp4h_fill_nan(out, c->out_dtype, T * H);
  fp4_matrix hm = {hid, T, H, 0, c->hidden_dtype, FP4_MEMORY_HOST}, om = {out, T, H, 0, c->out_dtype, FP4_MEMORY_HOST};
  fp4_status st = fp4_moe_forward(NULL, &layer, &hm, &rt, ws, bytes, &om, &ref_opts);
  CHECK(st == FP4_OK, "moe: %s", fp4_last_error());

  /* Naive: token by token, slot by slot. */
  float *y = malloc(sizeof(float) * H), *ys = malloc(sizeof(float) * H), *got = malloc(sizeof(float) * T * H);
  double *acc = malloc(sizeof(double) * H);
  fp4_convert(out, c->out_dtype, got, FP4_DTYPE_F32, (size_t)(T * H));
  int64_t bad = 0, nonfinite = 0;
  double maxerr = 0.0;
  for (int64_t t = 0; t < T; t++) {
    for (int64_t h = 0; h < H; h++) acc[h] = 0.0;
    for (int64_t j = 0; j < k; j++) {
      expert_forward(&layer.routed, ids[t * k + j], w4a4, x + t * H, H, y);
      for (int64_t h = 0; h < H; h++) acc[h] += (double)tw[t * k + j] * (double)y[h];
    }
    if (c->shared) {
      expert_forward(&shared, 0, w4a4, x + t * H, H, ys);
      for (int64_t h = 0; h < H; h++) acc[h] += (c->shared_gate ? (double)sw[t] : 1.0) * (double)ys[h];
    }
    for (int64_t h = 0; h < H; h++) {
      float want_f = (float)acc[h], want;
      fp4_convert(&want_f, FP4_DTYPE_F32, y, c->out_dtype, 1); /* round like the output dtype */
      fp4_convert(y, c->out_dtype, &want, FP4_DTYPE_F32, 1);
      float v = got[t * H + h];
      nonfinite += !isfinite(v);
      if (v != want) bad++;
      if (isfinite(v)) maxerr = fmax(maxerr, fabs((double)v - (double)want));
    }
  }
  CHECK(bad == 0 && nonfinite == 0,
        "moe %s %s T=%lld E=%lld k=%lld route=%d shared=%d: %lld of %lld outputs differ from the naive contract "
        "(%lld non-finite, max abs err %g; %lld experts used)",
        w4a4 ? "w4a4" : "w4a16", fp4_format_name(c->fmt), (long long)T, (long long)E, (long long)k, (int)c->route,
        c->shared, (long long)bad, (long long)(T * H), (long long)nonfinite, maxerr, (long long)used);
  free(y);
  free(ys);
  free(got);
  free(acc);
  free(ws);
  free(out);
  free(hid);
  free(ids);
  free(tw);
  free(sw);
  free(x);
  fp4h_grouped_free(&w1);
  fp4h_grouped_free(&w2);
  fp4h_grouped_free(&s1);
  fp4h_grouped_free(&s2);
}

/* A token naming expert 3 twice with weights 0.25 and 0.5 equals naming it once with 0.75. */
static void duplicate_ids_add(void) {
  fp4h_rng g = {99};
  fp4_grouped_qmatrix w1, w2;
  const int64_t E = 6, H = 64, I = 32, T = 3, k = 2;
  CHECK(fp4h_grouped_make(&g, &w1, E, 2 * I, H, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4) == FP4_OK, "w13");
  CHECK(fp4h_grouped_make(&g, &w2, E, H, I, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4) == FP4_OK, "w2");
  fp4_moe_layer layer = {FP4_MOE_W4A4, {w1, w2, 300.0f, 500.0f}, NULL};
  float x[T * 64], out_a[T * 64], out_b[T * 64];
  fp4h_fill(&g, x, T * H, FP4H_DATA_NORMAL, 16);
  int32_t ids_a[] = {3, 3, 1, 2, 0, 5}, ids_b[] = {3, 4, 1, 2, 0, 5};
  float w_a[] = {0.25f, 0.5f, 0.5f, 0.5f, 0.125f, 0.875f}, w_b[] = {0.75f, 0.0f, 0.5f, 0.5f, 0.125f, 0.875f};
  size_t bytes = 0;
  fp4_moe_workspace_size(&layer, T, k, NULL, &bytes);
  void *ws = malloc(bytes);
  fp4_matrix hm = {x, T, H, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_matrix oa = {out_a, T, H, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, ob = {out_b, T, H, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_moe_routing ra = {ids_a, T, k, {w_a, T, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
  fp4_moe_routing rb = {ids_b, T, k, {w_b, T, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, NULL};
  CHECK(fp4_moe_forward(NULL, &layer, &hm, &ra, ws, bytes, &oa, &ref_opts) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_moe_forward(NULL, &layer, &hm, &rb, ws, bytes, &ob, &ref_opts) == FP4_OK, "%s", fp4_last_error());
  CHECK(memcmp(out_a, out_b, sizeof out_a) == 0, "duplicate ids: contributions must add");
  int nonzero = 0;
  for (int i = 0; i < T * H; i++) nonzero += out_a[i] != 0.0f;
  CHECK(nonzero > T * H / 2, "the output is mostly nonzero (%d of %d)", nonzero, (int)(T * H));
  free(ws);
  fp4h_grouped_free(&w1);
  fp4h_grouped_free(&w2);
}

int main(void) {
  for (int w = 0; w < 2; w++) {
    grouped_case(w, FP4_FORMAT_NVFP4, 37, 48, 128, 8, FP4_DTYPE_BF16);
    grouped_case(w, FP4_FORMAT_NVFP4, 5, 16, 64, 12, FP4_DTYPE_F32);
    grouped_case(w, FP4_FORMAT_MXFP4, 20, 40, 96, 3, FP4_DTYPE_F16);
  }
  const fp4_moe_mode modes[] = {FP4_MOE_W4A16, FP4_MOE_W4A4};
  const fp4_format fmts[] = {FP4_FORMAT_NVFP4, FP4_FORMAT_MXFP4};
  for (int mi = 0; mi < 2; mi++)
    for (int fi = 0; fi < 2; fi++)
      for (int sh = 0; sh < 2; sh++) {
        moe_case uni = {modes[mi], fmts[fi], 9, 128, 64, 32, 16, 4, sh, sh, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16, FP4_DTYPE_F32};
        moe_case hot = {modes[mi], fmts[fi], 12, 64, 32, 64, 8, 2, sh, 0, FP4H_ROUTE_SKEWED, FP4_DTYPE_F32, FP4_DTYPE_BF16};
        moe_case dup = {modes[mi], fmts[fi], 6, 64, 64, 32, 5, 3, sh, 0, FP4H_ROUTE_DUPLICATES, FP4_DTYPE_F16, FP4_DTYPE_F16};
        moe_case_run(&uni);
        moe_case_run(&hot);
        moe_case_run(&dup);
      }
  moe_case decode = {FP4_MOE_W4A4, FP4_FORMAT_NVFP4, 1, 256, 64, 64, 32, 8, 1, 1, FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16, FP4_DTYPE_BF16};
  moe_case_run(&decode);
  duplicate_ids_add();
  return TEST_SUMMARY();
}
