/*
 * GPU tests of the cuda backend's large-M GEMMs (skipped with exit 77 and the reason when the cuda
 * backend cannot run here):
 *   1. the default path (no config) through the shared harness: M = 65, 128, 300, 1000 on small shapes,
 *      every supported variant (W4A16 bf16/f16, W4A4) x (NVFP4, MXFP4), edge-value data, every
 *      weight-scale layout, f32/bf16/f16 outputs, NaN-prefilled outputs, against the reference;
 *   2. every tile configuration forced by name, on model shapes with M = 1 .. 8192: the whole output
 *      is checked for unwritten (NaN) elements and a subset of rows (tile edges, the tails and random
 *      rows; all columns) is compared with the double reference, so that M = 8192 stays quick on the
 *      host; f32 output must be within 1e-5 relative Frobenius error;
 *   3. the register-decode tiles and the register-A wgmma tiles on every variant at
 *      M = 65, 128, 1000, 4096, 8192, one 64 x 128 x 64 tile, and with odd M / N / K-tile tails
 *      (M = 333, 4097; N = 200, 1003; K = 96, 160);
 *   3b. the batched-decode register-A tiles (32 and 64 tokens, two CTAs per SM), the wide ones at M
 *      off their multiples (edge copies) and the default at M = 17, 33, 64, 100, 255, 256: N not a
 *      multiple of 128, K of one 128-element shard and K-tile tails, split-K grids (narrow N, long K);
 *   4. refusals that name their rule (f32 activations, MXFP4 with f16 activations, K % 32) and
 *      unknown config names of each family.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"

static int g_runs, g_failures, g_skips;

/* Entries 0-3 are the mma.sync tiles; 4-8 the register-decode configs (gemm_large_m_rd.cu):
 * rd.128x128 refuses W4A4 and the rd.pro.* (W4A4 prologue) configs refuse W4A16, each naming the
 * rule; 9-16 the register-A wgmma tiles (gemm_large_m_wgra.cu; skipped with the reason off SM90 or
 * without sm_90a code; the same W4A16 / W4A4-prologue split), the batched-decode ones (32 and 64
 * tokens) first. */
static const char *const k_configs[] = {
    "large-m.128x128.s4", "large-m.128x128.s3", "large-m.128x256.s3",     "large-m.64x128.s4",
    "large-m.rd.128x128", "large-m.rd.128x256", "large-m.rd.256x128", "large-m.rd.pro.128x128",
    "large-m.rd.pro.128x256",
    "large-m.wgra.128x32", "large-m.wgra.128x64", "large-m.wgra.pro.128x32", "large-m.wgra.pro.128x64",
    "large-m.wgra.128x128", "large-m.wgra.128x256", "large-m.wgra.pro.128x128", "large-m.wgra.pro.128x256"};
enum { NUM_CONFIGS = 17, FIRST_RD = 4, FIRST_WGRA = 9, NUM_BATCH_WGRA = 4 };

/* Variant v: 0 W4A16 bf16, 1 W4A16 f16, 2 W4A4; the format is separate. */
static const char *variant_name(int v) { return v == 0 ? "w4a16-bf16" : v == 1 ? "w4a16-f16" : "w4a4"; }

static int variant_supported(int v, fp4_format f) { return !(v == 1 && f == FP4_FORMAT_MXFP4); }

/* ---- 1. default path through the harness ------------------------------------------------------- */

/* One default-path case through the shared harness (whole output checked against the reference):
 * variant v (variant_name), format f; the 8x4 layout, defined for NVFP4 only, becomes linear (B) or
 * 128x4 (A) for MXFP4. label names the section in a failure. */
static void run_default(fp4_context *ctx, const char *label, int v, int f, int64_t m, int64_t n, int64_t k,
                        fp4_dtype out, fp4h_data data, fp4_scale_layout lb, fp4_scale_layout la, uint64_t seed) {
  fp4h_case c;
  memset(&c, 0, sizeof c);
  c.name = variant_name(v);
  c.op = v == 2 ? FP4H_MM : FP4H_MM_W4A16;
  c.format = (fp4_format)f;
  c.a_dtype = v == 1 ? FP4_DTYPE_F16 : FP4_DTYPE_BF16;
  c.m = m;
  c.n = n;
  c.k = k;
  c.out_dtype = out;
  c.data = data;
  c.layout_b = lb;
  c.layout_a = la;
  if (c.format == FP4_FORMAT_MXFP4) {
    if (c.layout_b == FP4_LAYOUT_8X4) c.layout_b = FP4_LAYOUT_LINEAR;
    if (c.layout_a == FP4_LAYOUT_8X4) c.layout_a = FP4_LAYOUT_128X4;
  }
  fp4h_result r;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, &c, seed, &r);
  g_runs++;
  if (r.status == FP4_OK && r.passed) return;
  g_failures++;
  printf("FAIL %s %-10s %s M=%lld N=%lld K=%lld out=%s lb=%s la=%s data=%d: %s (%s)\n", label, c.name,
         fp4_format_name(c.format), (long long)c.m, (long long)c.n, (long long)c.k, fp4_dtype_name(c.out_dtype),
         fp4_layout_name(c.layout_b), fp4_layout_name(c.layout_a), (int)c.data, r.message, fp4_status_str(r.status));
}

static void test_default_path(fp4_context *ctx) {
  static const int64_t ms[] = {65, 128, 300, 1000};
  /* 256 x 2048: few output tiles over a long K (above 256 tokens a grid that leaves most SMs idle) */
  static const int64_t shapes[][2] = {{72, 96}, {200, 512}, {136, 160}, {256, 2048}};
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES, FP4H_DATA_UNIFORM};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_8X4};
  uint64_t seed = 41000;
  int rot = 0;
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
      for (int f = 0; f < 2; f++)
        for (int v = 0; v < 3; v++) {
          if (!variant_supported(v, (fp4_format)f)) continue;
          run_default(ctx, "default", v, f, ms[mi], shapes[s][0], shapes[s][1], outs[rot % 3], datas[(rot / 3) % 3],
                      layouts[rot % 3], layouts[(rot + 2) % 3], seed++);
          rot++;
        }
}

/* ---- 2. forced configurations, row-subset comparison --------------------------------------------- */

typedef struct lm_case {
  int64_t m, n, k;
  fp4_format format;
  int variant;
  fp4_dtype out;
  fp4_scale_layout lb, la;
  fp4h_data data;
} lm_case;

static float gsf_of(const float *x, int64_t n) {
  float a = 0.0f;
  for (int64_t i = 0; i < n; i++) a = fmaxf(a, fabsf(x[i]));
  return a > 0.0f ? 448.0f * 6.0f / a : 1.0f;
}

/* Rows compared with the reference: the first and last rows, both sides of every 64-row boundary
 * up to 256, and random rows; at most 64, sorted order not needed. */
static int pick_rows(fp4h_rng *g, int64_t m, int64_t *rows) {
  int n = 0;
  const int64_t fixed[] = {0, 1, 63, 64, 127, 128, 191, 255, 256, m - 1, m - 2, m - 65, (m / 128) * 128};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
    int dup = fixed[i] < 0 || fixed[i] >= m;
    for (int j = 0; j < n && !dup; j++) dup = rows[j] == fixed[i];
    if (!dup) rows[n++] = fixed[i];
  }
  for (int tries = 0; n < 64 && n < m && tries < 1000; tries++) {
    const int64_t r = (int64_t)(fp4h_uniform(g) * (double)m);
    int dup = 0;
    for (int j = 0; j < n && !dup; j++) dup = rows[j] == r;
    if (!dup) rows[n++] = r;
  }
  return n;
}

typedef struct host_bufs {
  float *a, *b, *got, *ref, *got_rows, *a_rows;
  void *a16, *aq, *aqs, *bq, *bqs, *out, *a16_rows, *aq_rows, *aqs_rows;
  void *d_a, *d_as, *d_b, *d_bs, *d_out;
} host_bufs;

static void free_bufs(fp4_context *ctx, host_bufs *h) {
  void *host[] = {h->a, h->b, h->got, h->ref, h->got_rows, h->a_rows, h->a16, h->aq, h->aqs, h->bq, h->bqs, h->out,
                  h->a16_rows, h->aq_rows, h->aqs_rows};
  for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
  void *dev[] = {h->d_a, h->d_as, h->d_b, h->d_bs, h->d_out};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) fp4_free(ctx, FP4_MEMORY_DEVICE, dev[i]);
}

#define CHECK(cond, what)                                                                                         \
  do {                                                                                                            \
    if (!(cond)) {                                                                                                \
      snprintf(msg, sizeof msg, "%s: %s", what, fp4_last_error());                                               \
      goto done;                                                                                                  \
    }                                                                                                             \
  } while (0)

static void run_forced(fp4_context *ctx, const lm_case *c, const char *config, uint64_t seed) {
  host_bufs h;
  memset(&h, 0, sizeof h);
  char msg[400] = "";
  int passed = 0, skipped = 0;
  const int64_t M = c->m, N = c->n, K = c->k;
  const int w4a4 = c->variant == 2;
  const fp4_dtype adt = c->variant == 1 ? FP4_DTYPE_F16 : FP4_DTYPE_BF16;
  const int bs = fp4_format_block_size(c->format);
  fp4h_rng g = {seed * 0x9E3779B97F4A7C15ull + 1};
  size_t sa = 0, sb = 0;
  fp4_scales_size(c->format, c->la, M, K, &sa);
  fp4_scales_size(c->format, c->lb, N, K, &sb);
  const size_t out_bytes = (size_t)(M * N) * fp4_dtype_size(c->out);
  h.a = malloc(sizeof(float) * (size_t)(M * K));
  h.b = malloc(sizeof(float) * (size_t)(N * K));
  h.bq = malloc((size_t)(N * K / 2));
  h.bqs = malloc(sb);
  h.out = malloc(out_bytes);
  h.got = malloc(sizeof(float) * (size_t)(M * N));
  CHECK(h.a && h.b && h.bq && h.bqs && h.out && h.got, "host allocation");
  fp4h_fill(&g, h.a, M * K, c->data, bs);
  fp4h_fill(&g, h.b, N * K, c->data == FP4H_DATA_EDGES ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL, bs);
  const float gsf_a = gsf_of(h.a, M * K);
  fp4_options ro = {.backend = "ref"};
  fp4_matrix bd = {h.b, N, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix bq = {h.bq, h.bqs, N, K, c->format, c->lb, 1.0f, FP4_MEMORY_HOST};
  CHECK(!fp4_quantize(NULL, &bd, gsf_of(h.b, N * K), &bq, &ro), "reference quantize of b");
  fp4_matrix ad = {h.a, M, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {NULL, NULL, M, K, c->format, c->la, 1.0f, FP4_MEMORY_HOST};
  size_t a_bytes;
  if (w4a4) {
    h.aq = malloc((size_t)(M * K / 2));
    h.aqs = malloc(sa);
    CHECK(h.aq && h.aqs, "host allocation");
    aq.data = h.aq;
    aq.scales = h.aqs;
    CHECK(!fp4_quantize(NULL, &ad, gsf_a, &aq, &ro), "reference quantize of a");
    a_bytes = (size_t)(M * K / 2);
  } else {
    a_bytes = (size_t)(M * K) * 2;
    h.a16 = malloc(a_bytes);
    CHECK(h.a16, "host allocation");
    CHECK(!fp4_convert(h.a, FP4_DTYPE_F32, h.a16, adt, (size_t)(M * K)), "convert a");
  }

  /* Device operands; the output poisoned with NaN. */
  fp4h_fill_nan(h.out, c->out, M * N);
  CHECK(!fp4_alloc(ctx, FP4_MEMORY_DEVICE, a_bytes, &h.d_a), "device allocation");
  CHECK(!fp4_copy(ctx, h.d_a, FP4_MEMORY_DEVICE, w4a4 ? h.aq : h.a16, FP4_MEMORY_HOST, a_bytes), "copy a");
  if (w4a4) {
    CHECK(!fp4_alloc(ctx, FP4_MEMORY_DEVICE, sa, &h.d_as), "device allocation");
    CHECK(!fp4_copy(ctx, h.d_as, FP4_MEMORY_DEVICE, h.aqs, FP4_MEMORY_HOST, sa), "copy a scales");
  }
  CHECK(!fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(N * K / 2), &h.d_b), "device allocation");
  CHECK(!fp4_alloc(ctx, FP4_MEMORY_DEVICE, sb, &h.d_bs), "device allocation");
  CHECK(!fp4_alloc(ctx, FP4_MEMORY_DEVICE, out_bytes, &h.d_out), "device allocation");
  CHECK(!fp4_copy(ctx, h.d_b, FP4_MEMORY_DEVICE, h.bq, FP4_MEMORY_HOST, (size_t)(N * K / 2)), "copy b");
  CHECK(!fp4_copy(ctx, h.d_bs, FP4_MEMORY_DEVICE, h.bqs, FP4_MEMORY_HOST, sb), "copy b scales");
  CHECK(!fp4_copy(ctx, h.d_out, FP4_MEMORY_DEVICE, h.out, FP4_MEMORY_HOST, out_bytes), "copy out");

  const float alpha = 0.75f;
  fp4_run_info info;
  memset(&info, 0, sizeof info);
  fp4_options o = {.backend = "cuda", .config = config, .enable_pdl = 1, .info = &info};
  fp4_qmatrix dbq = bq;
  dbq.data = h.d_b;
  dbq.scales = h.d_bs;
  dbq.memory = FP4_MEMORY_DEVICE;
  fp4_matrix dout = {h.d_out, M, N, 0, c->out, FP4_MEMORY_DEVICE};
  fp4_status st;
  if (w4a4) {
    fp4_qmatrix daq = aq;
    daq.data = h.d_a;
    daq.scales = h.d_as;
    daq.memory = FP4_MEMORY_DEVICE;
    st = fp4_mm(ctx, &daq, &dbq, alpha, &dout, &o);
  } else {
    fp4_matrix da = {h.d_a, M, K, 0, adt, FP4_MEMORY_DEVICE};
    st = fp4_mm_w4a16(ctx, &da, &dbq, alpha, &dout, &o);
  }
  /* a tile this device cannot hold is a normal refusal; so are the register-A tiles off SM90 /
   * without sm_90a code, W4A4 on the rd and wgra W4A16 tiles and
   * W4A16 on their pro configs (each refusal names its rule) */
  const char *err = fp4_last_error();
  const int wgra = !strncmp(config, "large-m.wgra.", 13);
  const int rd = !strncmp(config, "large-m.rd.", 11) || wgra; /* the same W4A16 / W4A4-prologue split */
  if (st == FP4_ERR_UNSUPPORTED &&
      (strstr(err, "shared memory") ||
       (wgra && (strstr(err, "SM90 only") || strstr(err, "no sm_90a code"))) ||
       (rd && w4a4 && strstr(err, "W4A4 runs on")) || (rd && !w4a4 && strstr(err, "W4A4 prologue variant")))) {
    skipped = 1;
    snprintf(msg, sizeof msg, "%s", fp4_last_error());
    goto done;
  }
  CHECK(st == FP4_OK, "fp4 GEMM on cuda");
  CHECK(!fp4_synchronize(ctx), "synchronize");
  CHECK(!strcmp(info.config, config), "fp4_run_info.config names another config");
  CHECK(!fp4_copy(ctx, h.out, FP4_MEMORY_HOST, h.d_out, FP4_MEMORY_DEVICE, out_bytes), "copy out back");
  CHECK(!fp4_convert(h.out, c->out, h.got, FP4_DTYPE_F32, (size_t)(M * N)), "convert out");
  int64_t nonfinite = 0; /* NaN = unwritten; inf can be a right f16 answer, checked on the sampled rows */
  for (int64_t i = 0; i < M * N; i++) nonfinite += isnan(h.got[i]);
  if (nonfinite) {
    snprintf(msg, sizeof msg, "%lld of %lld outputs are NaN (unwritten tiles?)", (long long)nonfinite,
             (long long)(M * N));
    goto done;
  }

  /* Reference of the chosen rows: per-row quantization makes a row subset's codes those of the full A. */
  int64_t rows[64];
  const int R = pick_rows(&g, M, rows);
  h.a_rows = malloc(sizeof(float) * (size_t)(R * K));
  h.ref = malloc(sizeof(float) * (size_t)(R * N));
  h.got_rows = malloc(sizeof(float) * (size_t)(R * N));
  CHECK(h.a_rows && h.ref && h.got_rows, "host allocation");
  for (int i = 0; i < R; i++) {
    memcpy(h.a_rows + (size_t)i * (size_t)K, h.a + rows[i] * K, sizeof(float) * (size_t)K);
    memcpy(h.got_rows + (size_t)i * (size_t)N, h.got + rows[i] * N, sizeof(float) * (size_t)N);
  }
  fp4_matrix ar = {h.a_rows, R, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_matrix refm = {h.ref, R, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  if (w4a4) {
    size_t srs = 0;
    fp4_scales_size(c->format, FP4_LAYOUT_LINEAR, R, K, &srs);
    h.aq_rows = malloc((size_t)(R * K / 2));
    h.aqs_rows = malloc(srs);
    CHECK(h.aq_rows && h.aqs_rows, "host allocation");
    fp4_qmatrix aqr = {h.aq_rows, h.aqs_rows, R, K, c->format, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
    CHECK(!fp4_quantize(NULL, &ar, gsf_a, &aqr, &ro), "reference quantize of the rows");
    CHECK(!fp4_mm(NULL, &aqr, &bq, alpha, &refm, &ro), "reference GEMM");
  } else {
    h.a16_rows = malloc((size_t)(R * K) * 2);
    CHECK(h.a16_rows, "host allocation");
    CHECK(!fp4_convert(h.a_rows, FP4_DTYPE_F32, h.a16_rows, adt, (size_t)(R * K)), "convert rows");
    fp4_matrix a16r = {h.a16_rows, R, K, 0, adt, FP4_MEMORY_HOST};
    CHECK(!fp4_mm_w4a16(NULL, &a16r, &bq, alpha, &refm, &ro), "reference GEMM");
  }
  fp4h_result r;
  memset(&r, 0, sizeof r);
  r.tolerance = fp4h_tolerance(c->out);
  fp4h_compare(h.got_rows, h.ref, (int64_t)R * N, c->out, &r);
  passed = r.passed;
  snprintf(msg, sizeof msg, "%s over %d rows", r.message, R);

done:
  g_runs++;
  if (skipped) {
    g_skips++;
    printf("skip %-18s: %s\n", config, msg);
  } else if (!passed) {
    g_failures++;
    printf("FAIL %-18s %-10s %s M=%lld N=%lld K=%lld out=%s lb=%s la=%s: %s\n", config, variant_name(c->variant),
           fp4_format_name(c->format), (long long)M, (long long)N, (long long)K, fp4_dtype_name(c->out),
           fp4_layout_name(c->lb), fp4_layout_name(c->la), msg);
  }
  free_bufs(ctx, &h);
}

static void test_forced_configs(fp4_context *ctx) {
  /* (M, N, K): the embedded models' shapes; the largest M on shapes that keep the host side quick. */
  static const int64_t shapes[][3] = {
      {1, 200, 256},     {17, 136, 96},     {65, 7168, 256},   {128, 4096, 128},  {200, 2048, 96},
      {1000, 1280, 8192}, {4096, 2560, 4096}, {8192, 4096, 1024}, {333, 4096, 1792},
  };
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4_scale_layout lbs[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR};
  static const fp4_scale_layout las[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_8X4};
  uint64_t seed = 77000;
  int rot = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    /* Big shapes cost the host ~2 s per case (random data, quantization, reference rows): there each
     * variant runs one config, rotating so that every config meets every big shape's neighbours. */
    const int big = shapes[s][0] * shapes[s][1] * shapes[s][2] > (int64_t)1e9;
    for (int cfg = 0; cfg < NUM_CONFIGS; cfg++)
      for (int f = 0; f < 2; f++)
        for (int v = 0; v < 3; v++) {
          if (!variant_supported(v, (fp4_format)f)) continue;
          if (big && cfg != (int)((s + (size_t)v + 2 * (size_t)f) % NUM_CONFIGS)) continue;
          lm_case c = {shapes[s][0], shapes[s][1], shapes[s][2], (fp4_format)f, v,
                       /* the f32 output (the 1e-5 check) comes first for every shape and config */
                       (rot % 4 == 0 || cfg == 0) ? FP4_DTYPE_F32 : outs[rot % 3], lbs[rot % 2], las[rot % 3],
                       rot % 5 == 4 ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL};
          if (c.format == FP4_FORMAT_MXFP4 && c.la == FP4_LAYOUT_8X4) c.la = FP4_LAYOUT_LINEAR;
          rot++;
          run_forced(ctx, &c, k_configs[cfg], seed++);
        }
    printf("  forced configs, M=%lld N=%lld K=%lld: %d checks so far, %d failures, %d skips\n",
           (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2], g_runs, g_failures, g_skips);
    fflush(stdout);
  }
}

/* The configs first .. first + count - 1 (the register-decode tiles, the register-A tiles) on every
 * variant at M = 65, 128, 1000, 4096, 8192 and with odd M, N and K-tile tails, f32
 * output (the 1e-5 check) and, rotating, bf16/f16 outputs and edge-value data. */
static void test_family_configs(fp4_context *ctx, int first, int count, const char *family, uint64_t seed) {
  static const int64_t shapes[][3] = {
      {65, 7168, 256},   {128, 4096, 128}, {1000, 1280, 8192}, {4096, 2560, 4096},
      {8192, 4096, 1024}, {333, 200, 96},  {4097, 1003, 160}, {64, 128, 64},
  };
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4_scale_layout lbs[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR};
  int rot = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    /* the register-decode refusals (W4A4 on the in-register tiles, W4A16 on the prologue configs)
     * are checked on the small shapes only: each case costs its random data on the host first */
    const int big = shapes[s][0] * shapes[s][1] * shapes[s][2] > (int64_t)1e9;
    for (int cfg = first; cfg < first + count; cfg++)
      for (int f = 0; f < 2; f++)
        for (int v = 0; v < 3; v++) {
          if (!variant_supported(v, (fp4_format)f)) continue;
          const int rd = !strncmp(k_configs[cfg], "large-m.rd.", 11) || !strncmp(k_configs[cfg], "large-m.wgra.", 13);
          const int pro = !strncmp(k_configs[cfg], "large-m.rd.pro.", 15) || !strncmp(k_configs[cfg], "large-m.wgra.pro.", 17);
          if (big && rd && (pro ? v != 2 : v == 2)) continue;
          lm_case c = {shapes[s][0], shapes[s][1], shapes[s][2], (fp4_format)f, v,
                       rot % 3 == 0 ? FP4_DTYPE_F32 : outs[rot % 3], lbs[rot % 2], lbs[(rot / 2) % 2],
                       rot % 5 == 4 ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL};
          rot++;
          run_forced(ctx, &c, k_configs[cfg], seed++);
        }
    printf("  %s configs, M=%lld N=%lld K=%lld: %d checks so far, %d failures, %d skips\n", family,
           (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2], g_runs, g_failures, g_skips);
    fflush(stdout);
  }
}

/* The batched-decode register-A tiles (the first NUM_BATCH_WGRA register-A configs), the wide ones
 * at M below or between their multiples (their edge copies), and the default choice, on every
 * variant at M = 17 .. 256: odd M, N not a multiple of the 128-row tile, one 128-element K shard
 * and a K-tile tail (K = 160), narrow weights with long K (the split-K grids), 1536 x 2048 (at M = 17
 * the 12 tiles of 32 tokens get the 264 CTA slots of a stream-K grid, 22 CTAs a tile: the one-part
 * kernel); f32 output (the 1e-5 check) and, rotating, bf16/f16 outputs, every weight scale layout
 * and edge-value data. */
static void test_batched_decode(fp4_context *ctx, uint64_t seed) {
  static const int64_t ms[] = {17, 33, 64, 100, 255, 256};
  static const int64_t nks[][2] = {{1003, 128}, {200, 4096}, {4096, 160}, {2048, 1024}, {1536, 2048}};
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4_scale_layout lbs[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR};
  static const fp4_scale_layout las[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_8X4};
  int rot = 0;
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
    for (size_t s = 0; s < sizeof nks / sizeof *nks; s++)
      for (int cfg = FIRST_WGRA; cfg < NUM_CONFIGS; cfg++)
        for (int f = 0; f < 2; f++)
          for (int v = 0; v < 3; v++) {
            const int pro = !strncmp(k_configs[cfg], "large-m.wgra.pro.", 17);
            if (!variant_supported(v, (fp4_format)f) || (pro ? v != 2 : v == 2)) continue;
            /* the wide tiles (their M-edge copies) at the M that are not multiples of them */
            if (cfg >= FIRST_WGRA + NUM_BATCH_WGRA && (ms[mi] == 64 || ms[mi] == 256 || f != (int)(s % 2))) continue;
            lm_case c = {ms[mi], nks[s][0], nks[s][1], (fp4_format)f, v,
                         rot % 3 == 0 ? FP4_DTYPE_F32 : outs[rot % 3], lbs[rot % 2], las[rot % 3],
                         rot % 5 == 4 ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL};
            if (c.format == FP4_FORMAT_MXFP4 && c.la == FP4_LAYOUT_8X4) c.la = FP4_LAYOUT_LINEAR;
            rot++;
            run_forced(ctx, &c, k_configs[cfg], seed++);
          }
    printf("  batched-decode register-A configs, M=%lld: %d checks so far, %d failures, %d skips\n", (long long)ms[mi],
           g_runs, g_failures, g_skips);
    fflush(stdout);
  }
  /* the default choice over the same range, through the shared harness (whole output checked) */
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES, FP4H_DATA_UNIFORM};
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (int f = 0; f < 2; f++)
      for (int v = 0; v < 3; v++) {
        if (!variant_supported(v, (fp4_format)f)) continue;
        run_default(ctx, "batched default", v, f, ms[mi], rot % 2 ? 1003 : 2048, rot % 2 ? 1024 : 2048, outs[rot % 3],
                    datas[(rot / 3) % 3], lbs[rot % 2], las[rot % 3], seed++);
        rot++;
      }
  printf("  batched-decode default choice, M = 17 .. 256: %d checks so far, %d failures\n", g_runs, g_failures);
  fflush(stdout);
}

/* ---- 3. refusals ---------------------------------------------------------------------------------- */

static void test_refusals(fp4_context *ctx) {
  static const struct {
    int64_t m, k;
    fp4_dtype a;
    fp4_format f;
    const char *needle;
  } cases[] = {
      {100, 256, FP4_DTYPE_F32, FP4_FORMAT_NVFP4, "not f32"},
      {100, 256, FP4_DTYPE_F16, FP4_FORMAT_MXFP4, "f16"},
      {100, 80, FP4_DTYPE_BF16, FP4_FORMAT_NVFP4, "multiple of 32"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const int64_t m = cases[i].m, n = 32, k = cases[i].k;
    void *a = NULL, *b = NULL, *bs = NULL, *out = NULL;
    size_t sb = 0;
    fp4_scales_size(cases[i].f, FP4_LAYOUT_128X4, n, k, &sb);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * k) * fp4_dtype_size(cases[i].a), &a);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(n * k / 2), &b);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, sb, &bs);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * n * 4), &out);
    fp4_matrix xa = {a, m, k, 0, cases[i].a, FP4_MEMORY_DEVICE};
    fp4_qmatrix xb = {b, bs, n, k, cases[i].f, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
    fp4_matrix xo = {out, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
    fp4_options o = {.backend = "cuda"};
    fp4_status st = fp4_mm_w4a16(ctx, &xa, &xb, 1.0f, &xo, &o);
    g_runs++;
    if (st != FP4_ERR_UNSUPPORTED || !strstr(fp4_last_error(), cases[i].needle)) {
      g_failures++;
      printf("FAIL refusal M=%lld K=%lld a=%s %s: status %s, message '%s' (expected UNSUPPORTED naming '%s')\n",
             (long long)m, (long long)k, fp4_dtype_name(cases[i].a), fp4_format_name(cases[i].f), fp4_status_str(st),
             fp4_last_error(), cases[i].needle);
    }
    /* An unknown config name is NOT_FOUND, not a crash. */
    fp4_options bad = {.backend = "cuda", .config = "large-m.1x1.s9"};
    fp4_matrix ya = {a, m, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_qmatrix yb = xb;
    yb.format = FP4_FORMAT_NVFP4;
    st = i == 0 ? fp4_mm_w4a16(ctx, &ya, &yb, 1.0f, &xo, &bad) : FP4_ERR_NOT_FOUND;
    if (st != FP4_ERR_NOT_FOUND) {
      g_failures++;
      printf("FAIL unknown config: status %s, message '%s'\n", fp4_status_str(st), fp4_last_error());
    }
    fp4_options badwg = {.backend = "cuda", .config = "large-m.wgmma.128x128"}; /* a removed family */
    st = i == 0 ? fp4_mm_w4a16(ctx, &ya, &yb, 1.0f, &xo, &badwg) : FP4_ERR_NOT_FOUND;
    if (st != FP4_ERR_NOT_FOUND) {
      g_failures++;
      printf("FAIL unknown wgmma config: status %s, message '%s'\n", fp4_status_str(st), fp4_last_error());
    }
    fp4_options badwgra = {.backend = "cuda", .config = "large-m.wgra.1x1"};
    st = i == 0 ? fp4_mm_w4a16(ctx, &ya, &yb, 1.0f, &xo, &badwgra) : FP4_ERR_NOT_FOUND;
    if (st != FP4_ERR_NOT_FOUND) {
      g_failures++;
      printf("FAIL unknown register-A wgmma config: status %s, message '%s'\n", fp4_status_str(st), fp4_last_error());
    }
    fp4_options badrd = {.backend = "cuda", .config = "large-m.rd.1x1"};
    st = i == 0 ? fp4_mm_w4a16(ctx, &ya, &yb, 1.0f, &xo, &badrd) : FP4_ERR_NOT_FOUND;
    if (st != FP4_ERR_NOT_FOUND) {
      g_failures++;
      printf("FAIL unknown register-decode config: status %s, message '%s'\n", fp4_status_str(st), fp4_last_error());
    }
    fp4_free(ctx, FP4_MEMORY_DEVICE, a);
    fp4_free(ctx, FP4_MEMORY_DEVICE, b);
    fp4_free(ctx, FP4_MEMORY_DEVICE, bs);
    fp4_free(ctx, FP4_MEMORY_DEVICE, out);
  }
}

/* With an argument (register-decode, register-A or batched-decode), only that section runs: a
 * quick check of one kernel family on the GPU machine. ctest runs everything. */
int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  if (only && strcmp(only, "register-decode") && strcmp(only, "register-A") && strcmp(only, "batched-decode") &&
      strcmp(only, "default-path")) {
    fprintf(stderr, "usage: test_cuda_large_m [register-decode | register-A | batched-decode | default-path]\n");
    return 2;
  }
  fp4_context *ctx = NULL;
  char reason[256];
  if (fp4_context_create(&ctx, 0) != FP4_OK) {
    printf("SKIP: cannot create a context on CUDA device 0: %s\n", fp4_last_error());
    return 77;
  }
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: the cuda backend cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
  if (!only || !strcmp(only, "default-path")) {
    test_default_path(ctx);
    printf("default path (harness), M = 65, 128, 300, 1000: %d cases, %d failures\n", g_runs, g_failures);
    fflush(stdout);
  }
  if (!only) {
    test_refusals(ctx);
    printf("+ refusals: %d checks, %d failures\n", g_runs, g_failures);
    test_forced_configs(ctx);
  }
  if (!only || !strcmp(only, "register-decode"))
    test_family_configs(ctx, FIRST_RD, FIRST_WGRA - FIRST_RD, "register-decode", 111000);
  if (!only || !strcmp(only, "register-A"))
    test_family_configs(ctx, FIRST_WGRA, NUM_CONFIGS - FIRST_WGRA, "register-A wgmma", 123000);
  if (!only || !strcmp(only, "batched-decode")) test_batched_decode(ctx, 135000);
  printf("test_cuda_large_m: %d checks, %d failures, %d skipped (config refuses the operands or does not fit this "
         "device)\n",
         g_runs, g_failures, g_skips);
  fp4_context_destroy(ctx);
  return g_failures ? 1 : 0;
}
