#define _POSIX_C_SOURCE 200809L
/*
 * Paths of the cpu backend beyond tests/test_cpu.c, at every level this machine has.
 *
 * Streaming path (M <= 4): NaN block scales (E4M3 0x7F/0xFF, UE8M0 0xFF) in every chunk position
 * of a row (chunks are taken in pairs, then one at a time, then a partial one) must give NaN in
 * that row only. The data are all positive so that a scale decoded as infinity would give +inf,
 * not NaN: only the NaN tracking can produce the expected NaN.
 *
 * Panel path (M > 4), on shapes that exercise its blocking: several groups of FP4_CPU_PANELS
 * panels with a partial last group and a partial last panel, K blocks with a short last block and
 * K not a multiple of the 128-element chunk, several M tiles with a short last tile. Each case
 * runs against the reference through the shared harness (NaN-prefilled outputs, fresh random
 * data), then at 1 and 3 threads, whose outputs must be bit-identical (the summation order of an
 * output never depends on the threads).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

/* The config (a level) of every cpu call. */
static const char *g_level;

typedef struct shape {
  int64_t m, n, k;
} shape;

/* npanels = ceil(N / 6): 11, 17 and 49 panels (2, 3 and 7 groups of 8, the last partial);
 * K = 1040 (short last chunk and K block), 1568 (MXFP4 too), 4608 (9 full K blocks). */
static const shape shapes[] = {{70, 61, 1040}, {130, 100, 1568}, {9, 293, 4608}, {200, 50, 2080}};

/* One W4A16 GEMM (f32 activations and output) on the cpu backend at a thread count, into o. */
static int run_threads(const fp4_matrix *a, const fp4_qmatrix *b, float *o, const char *threads) {
  setenv("FP4KIT_NUM_THREADS", threads, 1);
  for (int64_t i = 0; i < a->rows * b->rows; i++)
    o[i] = NAN;
  fp4_matrix out = {o, a->rows, b->rows, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_options opt = {.backend = "cpu", .config = g_level};
  return fp4_mm_w4a16(NULL, a, b, 1.0f, &out, &opt) == FP4_OK;
}

/* 1 and 3 threads give bit-identical outputs. */
static void determinism(const char *level, const shape *s) {
  const int64_t m = s->m, n = s->n, k = s->k;
  size_t sb = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, n, k, &sb);
  float *a = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
  float *o1 = malloc(sizeof(float) * (size_t)(m * n)), *o3 = malloc(sizeof(float) * (size_t)(m * n));
  uint8_t *codes = malloc((size_t)(n * k / 2)), *scales = malloc(sb);
  if (!a || !w || !o1 || !o3 || !codes || !scales) {
    CHECK(0, "test data allocation");
  } else {
    fp4h_rng g = {(uint64_t)(n * 7919 + k)};
    fp4h_fill(&g, a, m * k, FP4H_DATA_NORMAL, 16);
    fp4h_fill(&g, w, n * k, FP4H_DATA_NORMAL, 16);
    fp4_matrix am = {a, m, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, wm = {w, n, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix qb = {codes, scales, n, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
    fp4_options ro = {.backend = "ref"};
    CHECK(fp4_quantize(NULL, &wm, 20.0f, &qb, &ro) == FP4_OK, "quantize: %s", fp4_last_error());
    int ok = run_threads(&am, &qb, o1, "1") && run_threads(&am, &qb, o3, "3");
    CHECK(ok, "[%s] M=%lld N=%lld K=%lld: run failed: %s", level, (long long)m, (long long)n, (long long)k,
          fp4_last_error());
    int nan = 0;
    for (int64_t i = 0; ok && i < m * n; i++)
      nan |= isnan(o1[i]);
    CHECK(ok && !nan && !memcmp(o1, o3, sizeof(float) * (size_t)(m * n)),
          "[%s] M=%lld N=%lld K=%lld: 1 and 3 threads differ or left outputs unwritten", level, (long long)m,
          (long long)n, (long long)k);
  }
  free(a), free(w), free(o1), free(o3), free(codes), free(scales);
}

/* All weights 1.0 with scale 1.0, A all 1.0: every output is K, except rows with a NaN scale. */
static void nan_positions(const char *level) {
  static const int64_t ks[] = {1024, 1152, 1184}; /* 8 chunks; 9 (one single); 9 + a partial one */
  for (int f = 0; f < 2; f++)
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
      const fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
      const int64_t n = 40, k = ks[ki], m = 2, cols = k / fp4_format_block_size(fmt);
      size_t sb = 0;
      fp4_scales_size(fmt, FP4_LAYOUT_128X4, n, k, &sb);
      uint8_t *codes = malloc((size_t)(n * k / 2)), *scales = calloc(1, sb);
      uint16_t *a = malloc(2 * (size_t)(m * k));
      float *o = malloc(sizeof(float) * (size_t)(m * n));
      if (!codes || !scales || !a || !o) {
        CHECK(0, "test data allocation");
      } else {
        memset(codes, 0x22, (size_t)(n * k / 2)); /* E2M1 code 2 = 1.0 in both nibbles */
        for (int64_t r = 0; r < n; r++)
          for (int64_t c = 0; c < cols; c++)
            scales[fp4_scale_offset(fmt, FP4_LAYOUT_128X4, n, k, r, c)] = f ? 127 : 0x38;
        for (int64_t i = 0; i < m * k; i++)
          a[i] = 0x3F80; /* bf16 1.0 */
        /* row r (odd) gets a NaN code in scale column (r * 7) % cols: every chunk position */
        for (int64_t r = 1; r < n; r += 2)
          scales[fp4_scale_offset(fmt, FP4_LAYOUT_128X4, n, k, r, (r * 7) % cols)] =
              f ? 0xFF : (r % 4 == 1 ? 0x7F : 0xFF);
        for (int64_t i = 0; i < m * n; i++)
          o[i] = -1.0f;
        fp4_matrix am = {a, m, k, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST},
                   om = {o, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
        fp4_qmatrix qb = {codes, scales, n, k, fmt, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
        fp4_options opt = {.backend = "cpu", .config = g_level};
        fp4_status st = fp4_mm_w4a16(NULL, &am, &qb, 1.0f, &om, &opt);
        CHECK(st == FP4_OK, "[%s] run: %s", level, fp4_last_error());
        int bad = 0;
        for (int64_t i = 0; st == FP4_OK && i < m * n; i++) {
          int64_t r = i % n;
          bad += r % 2 ? !isnan(o[i]) : o[i] != (float)k;
        }
        CHECK(!bad, "[%s] %s K=%lld: %d outputs wrong (NaN scale rows must be NaN, the others %lld)", level,
              fp4_format_name(fmt), (long long)k, bad, (long long)k);
      }
      free(codes), free(scales), free(a), free(o);
    }
}

int main(void) {
  static const char *const levels[] = {"generic", "avx2", "avx512"};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};
  int run = 0;
  for (int l = 0; l < 3; l++) {
    if (!fp4h_cpu_level_runs(levels[l])) {
      printf("level %s: not available on this CPU, skipped\n", levels[l]);
      continue;
    }
    g_level = levels[l];
    setenv("FP4KIT_NUM_THREADS", "2", 1);
    nan_positions(levels[l]);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      for (int v = 0; v < 4; v++) {
        fp4_format fmt = v & 1 ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
        if (shapes[s].k % fp4_format_block_size(fmt))
          continue;
        char name[96];
        fp4h_case c = {name,
                       v & 2 ? FP4H_MM_W4A16 : FP4H_MM,
                       fmt,
                       FP4_LAYOUT_128X4,
                       layouts[(s + (size_t)v) % (fmt == FP4_FORMAT_MXFP4 ? 2 : 3)],
                       shapes[s].m,
                       shapes[s].n,
                       shapes[s].k,
                       v & 2 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32,
                       FP4_DTYPE_F32,
                       s % 2 ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL};
        snprintf(name, sizeof name, "%s %s M=%lld N=%lld K=%lld", v & 2 ? "w4a16" : "w4a4", fp4_format_name(fmt),
                 (long long)c.m, (long long)c.n, (long long)c.k);
        fp4h_result r;
        c.config = g_level;
        fp4h_run(NULL, "cpu", FP4_MEMORY_HOST, &c, 4242u + (uint64_t)(s * 4 + (size_t)v), &r);
        CHECK(r.status == FP4_OK && r.passed, "[%s] %s: %s", levels[l], name, r.message);
        run++;
      }
      determinism(levels[l], &shapes[s]);
    }
  }
  printf("%d harness cases run\n", run);
  return TEST_SUMMARY();
}
