/*
 * GPU tests of the cuda backend (skipped with exit 77 and the reason when it cannot run here):
 * quantize bit-exact against the reference on random and edge data for every format, layout and
 * input dtype; every small-M GEMM variant against the reference for M = 1..64 and model shapes;
 * refusals that name their rule; device scalars (alpha_device on every kernel family,
 * global_scale_device on quantize) bit-identical to the same scalars by value; and the PDL stress
 * test (dependent quantize -> GEMM chains on two streams, PDL on must equal PDL off bit for bit).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static int g_runs, g_failures;

/* Every GEMM configuration of the cuda backend, the largest M it takes, whether it takes W4A4
 * only (the ".pro" prologue variants), whether it takes only bf16/f16 activations (the
 * shared-activation kernel and the in-loop cluster K splits; they refuse others, tested below), the
 * smallest K it takes and whether it needs thread block clusters (SM90+) (cuda_backend.c). */
static const struct {
  const char *name;
  int64_t max_m;
  int w4a4_only, act16_only;
  int64_t min_k;
  int cluster;
} g_configs[] = {
    {"small-m.w8", 64, 0, 0, 0, 0},        {"small-m.w4", 64, 0, 0, 0, 0},        {"small-m.w2", 64, 0, 0, 0, 0},
    {"small-m.w1", 64, 0, 0, 0, 0},        {"small-m.r32.w8", 32, 0, 0, 0, 0},    {"small-m.r32.w4", 32, 0, 0, 0, 0},
    {"small-m.r64.w8", 16, 0, 0, 0, 0},    {"small-m.r64.w4", 16, 0, 0, 0, 0},    {"small-m.w4.b8", 16, 0, 0, 0, 0},
    {"small-m.w4.b6", 16, 0, 0, 0, 0},     {"small-m.r32.w4.b6", 8, 0, 0, 0, 0},  {"small-m.pro.w8", 64, 1, 0, 0, 0},
    {"small-m.pro.w4", 64, 1, 0, 0, 0},    {"small-m.pro.w2", 64, 1, 0, 0, 0},    {"small-m.pro.w1", 64, 1, 0, 0, 0},
    {"small-m.pro.r32.w8", 32, 1, 0, 0, 0}, {"small-m.pro.r32.w4", 32, 1, 0, 0, 0}, {"small-m.pro.r64.w8", 16, 1, 0, 0, 0},
    {"small-m.pro.r64.w4", 16, 1, 0, 0, 0}, {"small-m.pro.w4.b8", 16, 1, 0, 0, 0}, {"small-m.pro.w4.b6", 16, 1, 0, 0, 0},
    {"small-m.pro.r32.w4.b6", 8, 1, 0, 0, 0}, {"small-m.sa.r64.w8", 32, 0, 1, 0, 0}, {"small-m.pro.sa.r64.w8", 32, 1, 0, 0, 0},
    {"small-m.w8.k2", 16, 0, 1, 2048, 1},  {"small-m.w8.k4", 16, 0, 1, 4096, 1},  {"small-m.w4.k2", 16, 0, 1, 1024, 1},
    {"small-m.w4.k4", 16, 0, 1, 2048, 1},  {"small-m.pro.w8.k2", 16, 1, 0, 2048, 1}, {"small-m.pro.w8.k4", 16, 1, 0, 4096, 1},
    {"small-m.pro.w4.k2", 16, 1, 0, 1024, 1}, {"small-m.pro.w4.k4", 16, 1, 0, 2048, 1},
};
static int g_major; /* the device's compute capability major: the cluster configs need 9 or more */
enum { N_CONFIGS = (int)(sizeof g_configs / sizeof *g_configs) };
static int g_config_runs[N_CONFIGS];

static void run_case(fp4_context *ctx, const fp4h_case *c, uint64_t seed) {
  fp4h_result r;
  fp4h_run(ctx, "cuda", FP4_MEMORY_DEVICE, c, seed, &r);
  g_runs++;
  for (int i = 0; c->config && i < N_CONFIGS; i++) g_config_runs[i] += !strcmp(c->config, g_configs[i].name);
  if (r.status == FP4_OK && r.passed) return;
  g_failures++;
  printf("FAIL %-28s %s %s M=%lld N=%lld K=%lld a=%s out=%s lb=%s: %s (%s)\n", c->name,
         c->config ? c->config : "(default)", fp4_format_name(c->format), (long long)c->m, (long long)c->n, (long long)c->k, fp4_dtype_name(c->a_dtype),
         fp4_dtype_name(c->out_dtype), fp4_layout_name(c->layout_b), r.message, fp4_status_str(r.status));
}

/* The case on the default configuration (config NULL), then on every configuration that takes its M
 * (all > 0) or on the one picked by rotation (all == 0: keeps the host reference time of the large
 * shapes bounded while every configuration still meets every shape across the variants). */
static void run_configs(fp4_context *ctx, fp4h_case c, uint64_t seed, int all) {
  static int rotation;
  c.config = NULL;
  run_case(ctx, &c, seed);
  int fits[N_CONFIGS], n = 0;
  for (int i = 0; i < N_CONFIGS; i++)
    if (c.m <= g_configs[i].max_m && (c.op == FP4H_MM || !g_configs[i].w4a4_only) &&
        !(g_configs[i].act16_only && (c.op == FP4H_MM || c.a_dtype == FP4_DTYPE_F32)) &&
        c.k >= g_configs[i].min_k && !(g_configs[i].cluster && g_major < 9))
      fits[n++] = i;
  for (int j = 0; j < n; j++) {
    if (!all && j != rotation % n) continue;
    c.config = g_configs[fits[j]].name;
    run_case(ctx, &c, seed);
  }
  rotation++;
}

static void test_quantize(fp4_context *ctx) {
  static const int64_t shapes[][2] = {{1, 128}, {7, 288}, {64, 4096}, {130, 96}, {3, 32}};
  static const fp4_dtype dtypes[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_EDGES, FP4H_DATA_UNIFORM};
  uint64_t seed = 1000;
  for (int f = 0; f < 2; f++)
    for (int l = 0; l < 3; l++) {
      if (f == FP4_FORMAT_MXFP4 && l == FP4_LAYOUT_8X4) continue; /* 8x4 is NVFP4 only */
      for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int d = 0; d < 3; d++)
          for (int dd = 0; dd < 3; dd++) {
            fp4h_case c = {"quantize", FP4H_QUANTIZE, (fp4_format)f, (fp4_scale_layout)l, FP4_LAYOUT_LINEAR,
                           shapes[s][0], 0, shapes[s][1], dtypes[d], FP4_DTYPE_F32, datas[dd], .experts = 0};
            run_case(ctx, &c, seed++);
            /* Codes 4 bytes past an aligned address: the kernel must take its element-wise path
             * (its vector path stores a block's codes in one 8- or 16-byte word). */
            if (s == 1 && dd == 0) {
              c.offset_codes = 4;
              run_case(ctx, &c, seed++);
            }
          }
    }
}

/* The eight kernel variants: (W4A16 with bf16/f16/f32 activations, W4A4) x (NVFP4, MXFP4). */
static fp4h_case variant(int v, int64_t m, int64_t n, int64_t k, int rot) {
  static const fp4_dtype outs[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  static const fp4h_data datas[] = {FP4H_DATA_NORMAL, FP4H_DATA_UNIFORM, FP4H_DATA_EDGES};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_8X4};
  fp4h_case c;
  memset(&c, 0, sizeof c);
  const int kind = v % 4;
  c.format = v < 4 ? FP4_FORMAT_NVFP4 : FP4_FORMAT_MXFP4;
  c.op = kind == 3 ? FP4H_MM : FP4H_MM_W4A16;
  c.name = kind == 3 ? "w4a4" : "w4a16";
  c.a_dtype = kind == 0 ? FP4_DTYPE_BF16 : kind == 1 ? FP4_DTYPE_F16 : FP4_DTYPE_F32;
  c.m = m;
  c.n = n;
  c.k = k;
  c.out_dtype = outs[rot % 3];
  c.data = datas[(rot / 3) % 3];
  c.layout_b = layouts[rot % 3];
  c.layout_a = layouts[(rot + 1) % 3];
  /* The edge data's large values (|x| ~ 1000) overflow f16 outputs, as in the reference: no check. */
  if (c.out_dtype == FP4_DTYPE_F16 && c.data == FP4H_DATA_EDGES) c.data = FP4H_DATA_NORMAL;
  if (c.format == FP4_FORMAT_MXFP4) { /* 8x4 is defined for NVFP4 only */
    if (c.layout_b == FP4_LAYOUT_8X4) c.layout_b = FP4_LAYOUT_128X4;
    if (c.layout_a == FP4_LAYOUT_8X4) c.layout_a = FP4_LAYOUT_LINEAR;
  }
  return c;
}

static void test_gemm_all_m(fp4_context *ctx) {
  uint64_t seed = 5000;
  for (int64_t m = 1; m <= 64; m++)
    for (int v = 0; v < 8; v++) {
      /* N = 72: not a multiple of the 16-row tile; K = 640: five slabs over two warps. */
      fp4h_case c = variant(v, m, 72, m % 2 ? 640 : 256, (int)m + v);
      run_configs(ctx, c, seed++, 1);
    }
}

static void test_gemm_model_shapes(fp4_context *ctx) {
  /* (N, K) of the embedded models' GEMMs, including K = 128 shards and N below one tile. */
  static const int64_t shapes[][2] = {{4096, 128}, {2560, 4096}, {16, 4096}, {4096, 1024}, {256, 4096},
                                      {1280, 8192}, {8192, 1024}, {4096, 1792}, {7168, 256}, {131, 512}};
  static const int64_t ms[] = {1, 3, 8, 13, 16, 31, 64};
  uint64_t seed = 9000;
  int rot = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
      const int64_t n = shapes[s][0], k = shapes[s][1], m = ms[mi];
      if ((double)m * (double)n * (double)k > 6e7) continue; /* keep the host reference (and the suite) quick */
      for (int v = 0; v < 8; v++) {
        fp4h_case c = variant(v, m, n, k, rot++);
        run_configs(ctx, c, seed++, 0);
      }
    }
}

/* The cluster K split configs (SM90+) on every M they take over weights of one, a few and a
 * partial 16-row group, K split 2 and 4 ways into parts of uneven slab counts, both formats, every
 * scale layout and output type, W4A16 on bf16/f16 rows and W4A4 through the prologue twins. */
static void test_cluster_ksplit(fp4_context *ctx) {
  static const int64_t shapes[][2] = {{16, 4096}, {200, 4224}, {640, 8192}};
  static const int64_t ms[] = {1, 5, 8, 9, 16};
  if (g_major < 9) {
    printf("  (cluster K split: SM%d has no thread block clusters, not run)\n", g_major);
    return;
  }
  uint64_t seed = 77000;
  int rot = 0;
  for (int i = 0; i < N_CONFIGS; i++) {
    if (!g_configs[i].cluster) continue;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
      for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
        const int64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
        if (k < g_configs[i].min_k || (double)m * n * k > 3e7) continue;
        /* variant(): 0 bf16 / 1 f16 W4A16 and 3 W4A4, NVFP4; 4, 5 and 7 the same for MXFP4 */
        const int v = (g_configs[i].w4a4_only ? 3 : rot % 2) + (rot / 2 % 2) * 4;
        fp4h_case c = variant(v, m, n, k, rot++);
        c.config = g_configs[i].name;
        run_case(ctx, &c, seed++);
      }
  }
}

/* Refusals must name the rule (K = 80 is a valid NVFP4 K that neither kernel family takes). */
static void test_refusals(fp4_context *ctx) {
  static const struct {
    int64_t m, k;
    const char *config, *needle;
    fp4_status status;
  } cases[] = {{4, 80, NULL, "multiple of 128", FP4_ERR_UNSUPPORTED},
               {65, 80, NULL, "M <= 64", FP4_ERR_UNSUPPORTED},
               {17, 256, "small-m.r64.w8", "M <= 16", FP4_ERR_UNSUPPORTED},
               {33, 256, "small-m.r32.w4", "M <= 32", FP4_ERR_UNSUPPORTED},
               {17, 256, "small-m.w4.b8", "M <= 16", FP4_ERR_UNSUPPORTED},
               {9, 256, "small-m.r32.w4.b6", "M <= 8", FP4_ERR_UNSUPPORTED},
               {9, 256, "small-m.pro.r32.w4.b6", "M <= 8", FP4_ERR_UNSUPPORTED},
               {4, 256, "small-m.pro.w4", "W4A4 prologue", FP4_ERR_UNSUPPORTED}, /* these are W4A16 calls */
               {33, 256, "small-m.sa.r64.w8", "M <= 32", FP4_ERR_UNSUPPORTED},
               {17, 4096, "small-m.w8.k2", "M <= 16", FP4_ERR_UNSUPPORTED},
               {4, 2048, "small-m.w8.k4", "K >= 4096", FP4_ERR_UNSUPPORTED},
               {4, 256, "small-m.nope", "small-m.r32.w8", FP4_ERR_NOT_FOUND}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const int64_t m = cases[i].m, n = 32, k = cases[i].k;
    void *a = NULL, *b = NULL, *bs = NULL, *out = NULL;
    size_t sb = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, n, k, &sb);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * k * 2), &a);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(n * k / 2), &b);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, sb, &bs);
    fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * n * 4), &out);
    fp4_matrix xa = {a, m, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_qmatrix xb = {b, bs, n, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
    fp4_matrix xo = {out, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
    fp4_options o = {.backend = "cuda", .config = cases[i].config};
    fp4_status st = fp4_mm_w4a16(ctx, &xa, &xb, 1.0f, &xo, &o);
    g_runs++;
    if (st != cases[i].status || !strstr(fp4_last_error(), cases[i].needle)) {
      g_failures++;
      printf("FAIL refusal M=%lld K=%lld config %s: status %s, message '%s' (expected %s naming '%s')\n", (long long)m,
             (long long)k, cases[i].config ? cases[i].config : "(default)", fp4_status_str(st), fp4_last_error(),
             fp4_status_str(cases[i].status), cases[i].needle);
    }
    fp4_free(ctx, FP4_MEMORY_DEVICE, a);
    fp4_free(ctx, FP4_MEMORY_DEVICE, b);
    fp4_free(ctx, FP4_MEMORY_DEVICE, bs);
    fp4_free(ctx, FP4_MEMORY_DEVICE, out);
  }
}

/* Host FP4 operand of rows x k, quantized by the reference from fresh random data, copied to the
 * device (q->data/scales device pointers; 0 on success). */
static int device_operand(fp4_context *ctx, fp4h_rng *g, fp4_format f, fp4_scale_layout l, int64_t rows, int64_t k,
                          fp4h_data data, fp4_qmatrix *q) {
  size_t ss = 0;
  fp4_scales_size(f, l, rows, k, &ss);
  float *x = malloc(sizeof *x * (size_t)(rows * k));
  uint8_t *hq = malloc((size_t)(rows * k) / 2), *hs = malloc(ss);
  fp4_qmatrix hm = {hq, hs, rows, k, f, l, 1.0f, FP4_MEMORY_HOST};
  *q = hm;
  q->memory = FP4_MEMORY_DEVICE;
  q->data = q->scales = NULL;
  int bad = !x || !hq || !hs;
  if (!bad) {
    fp4h_fill(g, x, rows * k, data, f == FP4_FORMAT_NVFP4 ? 16 : 32);
    fp4_matrix xm = {x, rows, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_options ro = {.backend = "ref"};
    bad = fp4_quantize(NULL, &xm, 448.0f, &hm, &ro) || fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(rows * k) / 2, &q->data) ||
          fp4_alloc(ctx, FP4_MEMORY_DEVICE, ss, &q->scales) ||
          fp4_copy(ctx, q->data, FP4_MEMORY_DEVICE, hq, FP4_MEMORY_HOST, (size_t)(rows * k) / 2) ||
          fp4_copy(ctx, q->scales, FP4_MEMORY_DEVICE, hs, FP4_MEMORY_HOST, ss);
    q->multiplier = hm.multiplier;
  }
  free(x);
  free(hq);
  free(hs);
  return bad;
}

/* The W4A4 prologue configs ("small-m.pro.X": activations dequantized to bf16 once, then the W4A16
 * kernel) must equal their in-loop twin "small-m.X" bit for bit: the staged bf16 values are exactly
 * the ones the in-loop decode forms (gemm_small_m_kernels.cuh), and the MMA sequence is the same. */
static void test_prologue_bit_identity(fp4_context *ctx) {
  static const int64_t ms[] = {1, 6, 16, 27, 64};
  const int64_t n = 200, k = 1152; /* N: not a multiple of 32 or 64; K: nine slabs */
  fp4h_rng g = {4242};
  for (int f = 0; f < 2; f++)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
      const int64_t m = ms[mi];
      const fp4_format fmt = (fp4_format)f;
      const fp4h_data data = mi % 2 ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL;
      fp4_qmatrix a, b;
      void *out = NULL;
      float *got[2] = {malloc(sizeof(float) * (size_t)(m * n)), malloc(sizeof(float) * (size_t)(m * n))};
      int bad = device_operand(ctx, &g, fmt, FP4_LAYOUT_128X4, m, k, data, &a);
      bad = device_operand(ctx, &g, fmt, f ? FP4_LAYOUT_LINEAR : FP4_LAYOUT_8X4, n, k, FP4H_DATA_NORMAL, &b) || bad;
      bad = bad || !got[0] || !got[1] || fp4_alloc(ctx, FP4_MEMORY_DEVICE, sizeof(float) * (size_t)(m * n), &out);
      for (int i = 0; !bad && i < N_CONFIGS; i++) {
        if (g_configs[i].w4a4_only || g_configs[i].act16_only || m > g_configs[i].max_m) continue;
        char twin[64];
        snprintf(twin, sizeof twin, "small-m.pro.%s", g_configs[i].name + strlen("small-m."));
        const char *names[2] = {g_configs[i].name, twin};
        int ok = 1;
        for (int v = 0; v < 2 && ok; v++) {
          fp4h_fill_nan(got[v], FP4_DTYPE_F32, m * n);
          fp4_matrix om = {out, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
          fp4_options o = {.backend = "cuda", .config = names[v]};
          ok = !fp4_copy(ctx, out, FP4_MEMORY_DEVICE, got[v], FP4_MEMORY_HOST, sizeof(float) * (size_t)(m * n)) &&
               !fp4_mm(ctx, &a, &b, 0.75f, &om, &o) && !fp4_synchronize(ctx) &&
               !fp4_copy(ctx, got[v], FP4_MEMORY_HOST, out, FP4_MEMORY_DEVICE, sizeof(float) * (size_t)(m * n));
        }
        int64_t diff = 0, nan = 0;
        for (int64_t j = 0; ok && j < m * n; j++) {
          const float x = got[0][j], y = got[1][j];
          nan += isnan(x);
          diff += !(isnan(x) && isnan(y)) && memcmp(&x, &y, sizeof x) != 0;
        }
        g_runs++;
        if (!ok || diff || nan) {
          g_failures++;
          printf("FAIL prologue bit identity %s M=%lld N=%lld K=%lld %s vs %s: %s%lld of %lld outputs differ, %lld NaN\n",
                 fp4_format_name(fmt), (long long)m, (long long)n, (long long)k, names[0], names[1],
                 ok ? "" : fp4_last_error(), (long long)diff, (long long)(m * n), (long long)nan);
        }
      }
      if (bad) {
        g_runs++;
        g_failures++;
        printf("FAIL prologue bit identity: setup failed: %s\n", fp4_last_error());
      }
      fp4_free(ctx, FP4_MEMORY_DEVICE, a.data);
      fp4_free(ctx, FP4_MEMORY_DEVICE, a.scales);
      fp4_free(ctx, FP4_MEMORY_DEVICE, b.data);
      fp4_free(ctx, FP4_MEMORY_DEVICE, b.scales);
      fp4_free(ctx, FP4_MEMORY_DEVICE, out);
      free(got[0]);
      free(got[1]);
    }
}

#if FP4KIT_HAVE_CUDA
/* v in device memory (NULL, counted as a failure of test, when that fails). */
static float *device_scalar(float v, const char *test) {
  float *d = NULL;
  if (cudaMalloc((void **)&d, sizeof v) == cudaSuccess && cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess)
    return d;
  cudaFree(d);
  g_runs++;
  g_failures++;
  printf("FAIL %s: cannot place the device scalar\n", test);
  return NULL;
}

/* Device bf16 rows x k of fresh random values (0 on success). */
static int device_bf16(fp4_context *ctx, fp4h_rng *g, int64_t rows, int64_t k, void **ptr) {
  float *x = malloc(sizeof *x * (size_t)(rows * k));
  uint16_t *h = malloc(2 * (size_t)(rows * k));
  *ptr = NULL;
  int bad = !x || !h;
  if (!bad) {
    fp4h_fill(g, x, rows * k, FP4H_DATA_NORMAL, 16);
    bad = fp4_convert(x, FP4_DTYPE_F32, h, FP4_DTYPE_BF16, (size_t)(rows * k)) ||
          fp4_alloc(ctx, FP4_MEMORY_DEVICE, 2 * (size_t)(rows * k), ptr) ||
          fp4_copy(ctx, *ptr, FP4_MEMORY_DEVICE, h, FP4_MEMORY_HOST, 2 * (size_t)(rows * k));
  }
  free(x);
  free(h);
  return bad;
}

/* f32 out[m, n] of one GEMM (W4A4 when a16 is NULL) on the named backend and config, the device
 * output NaN-prefilled, copied to host. */
static fp4_status gemm_f32(fp4_context *ctx, const char *backend, const char *config, const fp4_qmatrix *aq,
                           const fp4_matrix *a16, const fp4_qmatrix *b, float alpha, const float *alpha_device, void *out,
                           float *host) {
  const int64_t m = aq ? aq->rows : a16->rows, n = b->rows;
  fp4h_fill_nan(host, FP4_DTYPE_F32, m * n);
  fp4_status st = fp4_copy(ctx, out, FP4_MEMORY_DEVICE, host, FP4_MEMORY_HOST, sizeof(float) * (size_t)(m * n));
  fp4_matrix om = {out, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
  fp4_options o = {.backend = backend, .config = config, .alpha_device = alpha_device};
  if (!st) st = aq ? fp4_mm(ctx, aq, b, alpha, &om, &o) : fp4_mm_w4a16(ctx, a16, b, alpha, &om, &o);
  if (!st) st = fp4_synchronize(ctx);
  if (!st) st = fp4_copy(ctx, host, FP4_MEMORY_HOST, out, FP4_MEMORY_DEVICE, sizeof(float) * (size_t)(m * n));
  return st;
}

/* alpha given as a device scalar (fp4_options.alpha_device, alpha argument 1) must give the bits of
 * the same alpha by value, on every kernel family: small-M classic, lean, shared-activation and
 * prologue, large-M mma.sync, register-decode (and its prologue), register-A wgmma (a batched-decode
 * tile, a prologue one; the 128 x 8192 case takes its split-K path), and cuda-sm120. The multipliers are 1,
 * so the by-value scale is alpha itself. */
static void test_device_alpha(fp4_context *ctx, int major, int minor) {
  static const struct {
    const char *backend, *config;
    int w4a4;
    int64_t m, n, k;
  } cases[] = {
      {"cuda", NULL, 0, 1, 200, 1152},
      {"cuda", "small-m.w4", 0, 5, 200, 1152},
      {"cuda", "small-m.w4", 1, 5, 200, 1152},
      {"cuda", "small-m.r32.w4.b6", 0, 3, 200, 1152},
      {"cuda", "small-m.w4.b8", 1, 9, 200, 1152},
      {"cuda", "small-m.sa.r64.w8", 0, 20, 200, 1152},
      {"cuda", "small-m.pro.w4", 1, 7, 200, 1152},
      {"cuda", NULL, 1, 300, 520, 1152},
      {"cuda", "large-m.128x128.s4", 0, 300, 520, 1152},
      {"cuda", "large-m.64x128.s4", 1, 300, 520, 1152},
      {"cuda", "large-m.rd.128x128", 0, 300, 520, 1152},
      {"cuda", "large-m.rd.pro.128x128", 1, 300, 520, 1152},
      {"cuda", "large-m.wgra.128x64", 0, 100, 520, 1152},
      {"cuda", "large-m.wgra.128x128", 0, 300, 520, 1152},
      {"cuda", "large-m.wgra.pro.128x256", 1, 300, 520, 1152},
      {"cuda", "large-m.wgra.128x128", 0, 128, 256, 8192},
      {"cuda-sm120", "m16n64", 1, 5, 200, 1152},
      {"cuda-sm120", "m64n128", 1, 70, 200, 1152},
      {"cuda-sm120", "m128n128", 1, 300, 520, 1152},
  };
  const float alpha = 0.3712f;
  float *d_alpha = device_scalar(alpha, "device alpha");
  if (!d_alpha) return;
  fp4h_rng g = {9090};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int f = 0; f < 2; f++) {
      const fp4_format fmt = (fp4_format)f;
      const int64_t m = cases[i].m, n = cases[i].n, k = cases[i].k;
      const char *cfg = cases[i].config;
      const int sm90_only = cfg && !strncmp(cfg, "large-m.wg", 10);
      const int sm120 = !strcmp(cases[i].backend, "cuda-sm120");
      const int must = sm120 ? (major == 12 || (major == 9 && minor == 0)) : !sm90_only || (major == 9 && minor == 0);
      fp4_qmatrix aq, b;
      memset(&aq, 0, sizeof aq);
      memset(&b, 0, sizeof b);
      void *a16 = NULL, *out = NULL;
      float *got[2] = {malloc(sizeof(float) * (size_t)(m * n)), malloc(sizeof(float) * (size_t)(m * n))};
      int bad = device_operand(ctx, &g, fmt, FP4_LAYOUT_128X4, n, k, FP4H_DATA_NORMAL, &b);
      if (cases[i].w4a4) bad = device_operand(ctx, &g, fmt, FP4_LAYOUT_128X4, m, k, FP4H_DATA_NORMAL, &aq) || bad;
      else bad = device_bf16(ctx, &g, m, k, &a16) || bad;
      bad = bad || !got[0] || !got[1] || fp4_alloc(ctx, FP4_MEMORY_DEVICE, sizeof(float) * (size_t)(m * n), &out);
      b.multiplier = 1.0f;
      aq.multiplier = 1.0f;
      const fp4_matrix am = {a16, m, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
      const fp4_qmatrix *ap = cases[i].w4a4 ? &aq : NULL;
      fp4_status st = bad ? FP4_ERR_INVALID_ARGUMENT
                          : gemm_f32(ctx, cases[i].backend, cfg, ap, ap ? NULL : &am, &b, alpha, NULL, out, got[0]);
      if (!bad && st == FP4_ERR_UNSUPPORTED && !must) {
        printf("SKIP device alpha %s %s: %s\n", cases[i].backend, cfg ? cfg : "(default)", fp4_last_error());
      } else {
        if (!st) st = gemm_f32(ctx, cases[i].backend, cfg, ap, ap ? NULL : &am, &b, 1.0f, d_alpha, out, got[1]);
        int64_t diff = 0, nan = 0;
        for (int64_t j = 0; !st && j < m * n; j++) {
          nan += isnan(got[0][j]);
          diff += memcmp(&got[0][j], &got[1][j], sizeof(float)) != 0;
        }
        g_runs++;
        if (bad || st || diff || nan) {
          g_failures++;
          printf("FAIL device alpha %s %s %s %s M=%lld N=%lld K=%lld: %s%lld of %lld outputs differ, %lld NaN\n",
                 cases[i].backend, cfg ? cfg : "(default)", cases[i].w4a4 ? "W4A4" : "W4A16", fp4_format_name(fmt),
                 (long long)m, (long long)n, (long long)k, bad || st ? fp4_last_error() : "", (long long)diff,
                 (long long)(m * n), (long long)nan);
        }
      }
      if (cases[i].w4a4) {
        fp4_free(ctx, FP4_MEMORY_DEVICE, aq.data);
        fp4_free(ctx, FP4_MEMORY_DEVICE, aq.scales);
      }
      fp4_free(ctx, FP4_MEMORY_DEVICE, a16);
      fp4_free(ctx, FP4_MEMORY_DEVICE, b.data);
      fp4_free(ctx, FP4_MEMORY_DEVICE, b.scales);
      fp4_free(ctx, FP4_MEMORY_DEVICE, out);
      free(got[0]);
      free(got[1]);
    }
  cudaFree(d_alpha);
}

/* NVFP4 quantize with the encode scale as a device scalar (fp4_options.global_scale_device) writes
 * the codes and scale bytes of the same scale by value, and sets the output multiplier to 1. */
static void test_device_global_scale(fp4_context *ctx) {
  static const fp4_dtype dtypes[] = {FP4_DTYPE_F32, FP4_DTYPE_BF16, FP4_DTYPE_F16};
  const int64_t rows = 37, cols = 288;
  const float gs = 448.0f * 6.0f / 3.7f;
  float *d_gs = device_scalar(gs, "device global scale");
  if (!d_gs) return;
  fp4h_rng g = {5151};
  for (int d = 0; d < 3; d++)
    for (int l = 0; l < 3; l++) {
      const size_t esz = fp4_dtype_size(dtypes[d]), codes = (size_t)(rows * cols) / 2;
      size_t ss = 0;
      fp4_scales_size(FP4_FORMAT_NVFP4, (fp4_scale_layout)l, rows, cols, &ss);
      float *xf = malloc(sizeof *xf * (size_t)(rows * cols));
      void *xh = malloc(esz * (size_t)(rows * cols));
      uint8_t *host[2][2] = {{malloc(codes), malloc(ss)}, {malloc(codes), malloc(ss)}};
      void *x = NULL, *q = NULL, *sc = NULL;
      int ok = xf && xh && host[0][0] && host[0][1] && host[1][0] && host[1][1];
      float mult[2] = {0.0f, 0.0f};
      if (ok) {
        fp4h_fill(&g, xf, rows * cols, FP4H_DATA_NORMAL, 16);
        ok = !fp4_convert(xf, FP4_DTYPE_F32, xh, dtypes[d], (size_t)(rows * cols)) &&
             !fp4_alloc(ctx, FP4_MEMORY_DEVICE, esz * (size_t)(rows * cols), &x) &&
             !fp4_copy(ctx, x, FP4_MEMORY_DEVICE, xh, FP4_MEMORY_HOST, esz * (size_t)(rows * cols)) &&
             !fp4_alloc(ctx, FP4_MEMORY_DEVICE, codes, &q) && !fp4_alloc(ctx, FP4_MEMORY_DEVICE, ss, &sc);
      }
      for (int v = 0; v < 2 && ok; v++) { /* 0: by value, 1: device scalar (the argument is then ignored) */
        fp4_matrix xm = {x, rows, cols, 0, dtypes[d], FP4_MEMORY_DEVICE};
        fp4_qmatrix qm = {q, sc, rows, cols, FP4_FORMAT_NVFP4, (fp4_scale_layout)l, 0.0f, FP4_MEMORY_DEVICE};
        fp4_options o = {.backend = "cuda", .global_scale_device = v ? d_gs : NULL};
        ok = !cudaMemset(q, 0xA5, codes) && !cudaMemset(sc, 0xA5, ss) &&
             !fp4_quantize(ctx, &xm, v ? -1.0f : gs, &qm, &o) && !fp4_synchronize(ctx) &&
             !fp4_copy(ctx, host[v][0], FP4_MEMORY_HOST, q, FP4_MEMORY_DEVICE, codes) &&
             !fp4_copy(ctx, host[v][1], FP4_MEMORY_HOST, sc, FP4_MEMORY_DEVICE, ss);
        mult[v] = qm.multiplier;
      }
      g_runs++;
      if (!ok || memcmp(host[0][0], host[1][0], codes) || memcmp(host[0][1], host[1][1], ss) || mult[1] != 1.0f) {
        g_failures++;
        printf("FAIL device global scale %s %s: %s (multiplier %g)\n", fp4_dtype_name(dtypes[d]),
               fp4_layout_name((fp4_scale_layout)l), ok ? "codes or scales differ from the by-value call" : fp4_last_error(),
               (double)mult[1]);
      }
      fp4_free(ctx, FP4_MEMORY_DEVICE, x);
      fp4_free(ctx, FP4_MEMORY_DEVICE, q);
      fp4_free(ctx, FP4_MEMORY_DEVICE, sc);
      free(xf);
      free(xh);
      for (int v = 0; v < 2; v++) free(host[v][0]), free(host[v][1]);
    }
  cudaFree(d_gs);
}

/* A device scalar that is not in device memory of the context's device is refused with a message
 * saying what it is, every time: before and after a valid device scalar was accepted (twice, the
 * second time from the context's memory of valid scalars), for plain host memory and pinned host
 * memory. */
static void test_device_scalar_refusals(fp4_context *ctx) {
  const int64_t rows = 4, cols = 64;
  const size_t codes = (size_t)(rows * cols) / 2;
  size_t ss = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, rows, cols, &ss);
  float *d_gs = device_scalar(100.0f, "device scalar refusals"), *pinned = NULL, *host = malloc(sizeof(float));
  void *x = NULL, *q = NULL, *sc = NULL;
  int ok = d_gs && host && cudaMallocHost((void **)&pinned, sizeof(float)) == cudaSuccess &&
           !fp4_alloc(ctx, FP4_MEMORY_DEVICE, 4 * (size_t)(rows * cols), &x) &&
           !fp4_alloc(ctx, FP4_MEMORY_DEVICE, codes, &q) && !fp4_alloc(ctx, FP4_MEMORY_DEVICE, ss, &sc) &&
           !cudaMemset(x, 0, 4 * (size_t)(rows * cols));
  if (ok) {
    *host = *pinned = 100.0f;
    fp4_matrix xm = {x, rows, cols, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
    fp4_qmatrix qm = {q, sc, rows, cols, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 0.0f, FP4_MEMORY_DEVICE};
    static const char *const order[] = {"host", "pinned", "device", "device", "host", "pinned"};
    for (int i = 0; i < 6; i++) {
      const int dev = !strcmp(order[i], "device");
      fp4_options o = {.backend = "cuda",
                       .global_scale_device = dev ? d_gs : !strcmp(order[i], "host") ? host : pinned};
      const fp4_status st = fp4_quantize(ctx, &xm, -1.0f, &qm, &o);
      const char *msg = fp4_last_error();
      g_runs++;
      if (dev ? st != FP4_OK
              : st != FP4_ERR_INVALID_ARGUMENT || !strstr(msg, "global_scale_device") ||
                    !strstr(msg, dev ? "" : !strcmp(order[i], "host") ? "host" : "pinned host")) {
        g_failures++;
        printf("FAIL device scalar refusals, call %d (%s memory): status %d, '%s'\n", i, order[i], (int)st, msg);
      }
    }
  } else {
    g_runs++;
    g_failures++;
    printf("FAIL device scalar refusals: setting up: %s\n", fp4_last_error());
  }
  fp4_free(ctx, FP4_MEMORY_DEVICE, x);
  fp4_free(ctx, FP4_MEMORY_DEVICE, q);
  fp4_free(ctx, FP4_MEMORY_DEVICE, sc);
  cudaFreeHost(pinned);
  cudaFree(d_gs);
  free(host);
}

/* One chain per stream: x -> quantize -> fp4_mm with W -> y, and y is the next x. */
typedef struct chain {
  int64_t m, k;
  fp4_format format;
  cudaStream_t stream;
  void *x[2], *q, *qs, *w, *ws;
  float *x0_host;
  const char *config; /* GEMM config; NULL: the default */
  int w4a16;          /* 1: x -> fp4_mm_w4a16 -> y, GEMM after GEMM with no quantize between */
  float alpha;        /* keeps y's magnitude x's: 1 / sqrt(k) after a quantize, else from W's norm */
} chain;

/* The third chain runs W4A4 through the bf16 prologue: three dependent kernels per pair. The last
 * three chain W4A16 GEMMs directly (each GEMM's output is the next one's input, and the one after
 * overwrites its input) on the lean, classic and shared-activation small-M kernels. */
enum { STRESS_PAIRS = 600, STRESS_K = 2048, STRESS_CHAINS = 6 };

static void test_pdl_stress(fp4_context *ctx, int sm90) {
  chain ch[STRESS_CHAINS] = {{8, STRESS_K, FP4_FORMAT_NVFP4, 0, {0}, 0, 0, 0, 0, 0, NULL, 0, 0},
                             {3, STRESS_K, FP4_FORMAT_MXFP4, 0, {0}, 0, 0, 0, 0, 0, NULL, 0, 0},
                             {5, STRESS_K, FP4_FORMAT_NVFP4, 0, {0}, 0, 0, 0, 0, 0, "small-m.pro.w4.b6", 0, 0},
                             {1, STRESS_K, FP4_FORMAT_NVFP4, 0, {0}, 0, 0, 0, 0, 0, "small-m.r32.w4.b6", 1, 0},
                             {4, STRESS_K, FP4_FORMAT_MXFP4, 0, {0}, 0, 0, 0, 0, 0, "small-m.w8", 1, 0},
                             {32, STRESS_K, FP4_FORMAT_NVFP4, 0, {0}, 0, 0, 0, 0, 0, "small-m.sa.r64.w8", 1, 0}};
  uint16_t *res[STRESS_CHAINS][2] = {{0}};
  int ok = 1;
  fp4h_rng g = {77};
  for (int s = 0; s < STRESS_CHAINS && ok; s++) {
    chain *c = &ch[s];
    const int64_t m = c->m, k = c->k;
    size_t sq = 0, sw = 0;
    fp4_scales_size(c->format, FP4_LAYOUT_128X4, m, k, &sq);
    fp4_scales_size(c->format, FP4_LAYOUT_128X4, k, k, &sw);
    ok = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) == cudaSuccess;
    ok = ok && !fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * k) * 2, &c->x[0]) &&
         !fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * k) * 2, &c->x[1]) &&
         !fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(m * k) / 2, &c->q) && !fp4_alloc(ctx, FP4_MEMORY_DEVICE, sq, &c->qs) &&
         !fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(k * k) / 2, &c->w) && !fp4_alloc(ctx, FP4_MEMORY_DEVICE, sw, &c->ws);
    /* Random weights and starting activations, quantized on the host by the reference. */
    float *wf = malloc(sizeof *wf * (size_t)(k * k));
    uint8_t *wq = malloc((size_t)(k * k) / 2), *wsq = malloc(sw);
    float *xf = malloc(sizeof *xf * (size_t)(m * k));
    c->x0_host = malloc((size_t)(m * k) * 2);
    float qmult = 1.0f;
    res[s][0] = malloc((size_t)(m * k) * 2);
    res[s][1] = malloc((size_t)(m * k) * 2);
    ok = ok && wf && wq && wsq && xf && c->x0_host && res[s][0] && res[s][1];
    if (ok) {
      fp4h_fill(&g, wf, k * k, FP4H_DATA_NORMAL, 16);
      fp4h_fill(&g, xf, m * k, FP4H_DATA_NORMAL, 16);
      fp4_matrix wm = {wf, k, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
      fp4_qmatrix wqm = {wq, wsq, k, k, c->format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
      fp4_options ro = {.backend = "ref"};
      ok = !fp4_quantize(NULL, &wm, 448.0f, &wqm, &ro) && !fp4_dequantize(&wqm, &wm) &&
           !fp4_convert(xf, FP4_DTYPE_F32, c->x0_host, FP4_DTYPE_BF16, (size_t)(m * k)) &&
           !fp4_copy(ctx, c->w, FP4_MEMORY_DEVICE, wq, FP4_MEMORY_HOST, (size_t)(k * k) / 2) &&
           !fp4_copy(ctx, c->ws, FP4_MEMORY_DEVICE, wsq, FP4_MEMORY_HOST, sw);
      qmult = wqm.multiplier;
    }
    if (ok) { /* W4A16: alpha * multiplier * dq(W) of unit gain on random x, so 600 steps stay finite */
      double ms = 0.0;
      for (int64_t i = 0; i < k * k; i++) ms += (double)wf[i] * wf[i];
      ms /= (double)(k * k);
      /* wf holds dq(W) times the multiplier fp4_quantize set; the GEMMs below pass their own */
      const double mult = (c->format == FP4_FORMAT_NVFP4 ? 1.0 / 448.0 : 1.0) / (double)qmult;
      c->alpha = (float)(c->w4a16 ? 1.0 / (sqrt(ms * (double)k) * mult) : 1.0 / sqrt((double)k));
    }
    free(wf);
    free(wq);
    free(wsq);
    free(xf);
  }
  int pdl_used = 1;
  for (int run = 0; run < 2 && ok; run++) { /* first pass PDL on, second pass PDL off */
    /* Interleave the two chains' launches so both streams are busy at once. */
    for (int s = 0; s < STRESS_CHAINS && ok; s++) ok = !fp4_copy(ctx, ch[s].x[0], FP4_MEMORY_DEVICE, ch[s].x0_host, FP4_MEMORY_HOST, (size_t)(ch[s].m * ch[s].k) * 2);
    fp4_run_info info;
    for (int i = 0; i < STRESS_PAIRS && ok; i++)
      for (int s = 0; s < STRESS_CHAINS && ok; s++) {
        chain *c = &ch[s];
        fp4_options o = {.backend = "cuda", .enable_pdl = run == 0, .stream = c->stream, .info = &info};
        fp4_matrix x = {c->x[i % 2], c->m, c->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
        fp4_matrix y = {c->x[(i + 1) % 2], c->m, c->k, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
        fp4_qmatrix q = {c->q, c->qs, c->m, c->k, c->format, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
        fp4_qmatrix w = {c->w, c->ws, c->k, c->k, c->format, FP4_LAYOUT_128X4,
                         c->format == FP4_FORMAT_NVFP4 ? 1.0f / 448.0f : 1.0f, FP4_MEMORY_DEVICE};
        if (c->w4a16) {
          o.config = c->config;
          ok = !fp4_mm_w4a16(ctx, &x, &w, c->alpha, &y, &o);
          if (run == 0) pdl_used &= info.pdl;
          continue;
        }
        ok = !fp4_quantize(ctx, &x, 448.0f * 6.0f / 8.0f, &q, &o);
        if (run == 0) pdl_used &= info.pdl;
        o.config = c->config; /* the quantize call above takes its one config */
        ok = ok && !fp4_mm(ctx, &q, &w, c->alpha, &y, &o);
        if (run == 0) pdl_used &= info.pdl;
      }
    if (!ok) printf("FAIL pdl stress: launch failed: %s\n", fp4_last_error());
    ok = ok && !fp4_synchronize(ctx);
    for (int s = 0; s < STRESS_CHAINS && ok; s++)
      ok = !fp4_copy(ctx, res[s][run], FP4_MEMORY_HOST, ch[s].x[STRESS_PAIRS % 2], FP4_MEMORY_DEVICE, (size_t)(ch[s].m * ch[s].k) * 2);
  }
  g_runs++;
  if (!ok) {
    g_failures++;
    printf("FAIL pdl stress: %s\n", fp4_last_error());
  } else {
    for (int s = 0; s < STRESS_CHAINS; s++) {
      const int64_t n = ch[s].m * ch[s].k;
      int64_t diff = 0, nonfinite = 0, zero = 0;
      for (int64_t i = 0; i < n; i++) {
        diff += res[s][0][i] != res[s][1][i];
        float v = fp4_bf16_to_f32(res[s][0][i]);
        nonfinite += !isfinite(v);
        zero += v == 0.0f;
      }
      printf("pdl stress stream %d (%s, M=%lld, %s, %d pairs): %lld of %lld outputs differ PDL on vs off, %lld non-finite, %lld zero\n",
             s, fp4_format_name(ch[s].format), (long long)ch[s].m, ch[s].config ? ch[s].config : "default config", STRESS_PAIRS, (long long)diff, (long long)n,
             (long long)nonfinite, (long long)zero);
      if (diff || nonfinite || zero == n) g_failures++;
    }
    if (sm90 && !pdl_used) {
      g_failures++;
      printf("FAIL pdl stress: the device is SM90+ but fp4_run_info.pdl was 0\n");
    }
  }
  for (int s = 0; s < STRESS_CHAINS; s++) {
    chain *c = &ch[s];
    if (c->stream) cudaStreamDestroy(c->stream);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->x[0]);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->x[1]);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->q);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->qs);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->w);
    fp4_free(ctx, FP4_MEMORY_DEVICE, c->ws);
    free(c->x0_host);
    free(res[s][0]);
    free(res[s][1]);
  }
}
#endif

int main(void) {
  fp4_context *ctx = NULL;
  char reason[256];
  const fp4_status created = fp4_context_create(&ctx, 0);
  if (created != FP4_OK) {
    /* A build without CUDA refuses device contexts: nothing here can run. */
    printf("%s: cannot create a context on device 0: %s\n", created == FP4_ERR_UNSUPPORTED ? "SKIP" : "FAILED",
           fp4_last_error());
    return created == FP4_ERR_UNSUPPORTED ? 77 : 1;
  }
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    printf("SKIP: the cuda backend cannot run here: %s\n", reason);
    fp4_context_destroy(ctx);
    return 77;
  }
#if FP4KIT_HAVE_CUDA
  cudaDeviceGetAttribute(&g_major, cudaDevAttrComputeCapabilityMajor, 0);
#endif
  test_quantize(ctx);
  printf("quantize: %d cases, %d failures\n", g_runs, g_failures);
  test_gemm_all_m(ctx);
  printf("+ GEMM M = 1..64: %d cases, %d failures\n", g_runs, g_failures);
  test_gemm_model_shapes(ctx);
  printf("+ GEMM model shapes: %d cases, %d failures\n", g_runs, g_failures);
  test_cluster_ksplit(ctx);
  printf("+ cluster K split: %d cases, %d failures\n", g_runs, g_failures);
  for (int i = 0; i < N_CONFIGS; i++) {
    printf("  config %-16s %d cases\n", g_configs[i].name, g_config_runs[i]);
    if (g_configs[i].cluster && g_major < 9) {
      printf("  (config %s needs thread block clusters, SM90+: not run on SM%d)\n", g_configs[i].name, g_major);
      continue;
    }
    if (!g_config_runs[i]) { /* a configuration the suite never ran is a hole in the suite */
      g_failures++;
      printf("FAIL config %s was never run\n", g_configs[i].name);
    }
  }
  test_refusals(ctx);
  test_prologue_bit_identity(ctx);
  printf("+ refusals and W4A4 prologue bit identity: %d checks, %d failures\n", g_runs, g_failures);
#if FP4KIT_HAVE_CUDA
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  test_device_alpha(ctx, major, minor);
  test_device_global_scale(ctx);
  test_device_scalar_refusals(ctx);
  printf("+ device scalars (alpha_device, global_scale_device) bit identity and refusals: %d checks, %d failures\n",
         g_runs, g_failures);
  test_pdl_stress(ctx, major >= 9);
#else
  printf("SKIP device scalars and pdl stress: the test was built without the CUDA runtime header\n");
#endif
  printf("test_cuda: %d checks, %d failures\n", g_runs, g_failures);
  fp4_context_destroy(ctx);
  return g_failures ? 1 : 0;
}
