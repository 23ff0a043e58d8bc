#define _POSIX_C_SOURCE 200809L
/*
 * Row independence of the cpu backend's GEMM, bit for bit, at every level this machine has.
 *
 * Every output's summation order depends only on its own row of A and its weight row, not on how
 * many rows of A a call has or where a row sits among them. So row i of an M-row call must equal,
 * bit for bit, the same row computed in a call of its own (streaming path: M = 2-4 against M = 1)
 * or in a call of 5 rows (panel path: M = 7, 15, 17 against M = 5). This catches kernels that mix
 * up accumulators across rows of A, weight rows or K blocks: the AVX2 streaming kernel (f32) and
 * the AVX-512 one (bf16 activations) walk 2-4 rows of A over groups of weight rows a K block at a
 * time, while M = 1 streams each weight row whole; the panel path pads its rows (FP4_CPU_ROWPAD).
 * The streaming cases run with f32 and bf16 activations at both thread counts.
 *
 * Shapes: N = 300 (groups of weight rows full and partial at 1 and 2 threads; 50 panels of 6),
 * K = 64 (a partial chunk only: the blocked kernel has no K block to walk), 128 (one chunk), 1152
 * (9 chunks: a K block and a single chunk), 2192 / 2208 (17 chunks and a partial one), 2304 (18),
 * 4096, 14336 (7 KiB weight rows, 14 K blocks: the blocked kernel's prefetches, which follow its
 * reading order, cross from one group of rows into the next there); NVFP4 and MXFP4, every scale
 * layout, f32 and bf16 activations.
 * The data hold NaN and infinite activations in some rows and a NaN block scale in one weight row
 * of a later group, in a later K block, in its last scale column: in a single chunk at K = 1152,
 * a pair of chunks at 2304 and the partial chunk at 2192 (the AVX-512 kernel tracks NaN codes of
 * pairs and of single chunks apart and decodes the partial chunk's scales exactly). Each call is
 * also checked against the reference (relative difference of the finite outputs below 2e-6, NaN
 * and infinities where the reference has them).
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

enum { ROWS_N = 300, ROWS_MAXM = 17 };

typedef struct rows_data {
  fp4_format fmt;
  fp4_scale_layout layout;
  int64_t k;
  float *a;      /* ROWS_MAXM x k, f32 (each value exact in bf16) */
  uint16_t *ab;  /* the same in bf16 */
  uint8_t *codes, *scales;
} rows_data;

static int rows_make(rows_data *d, fp4_format fmt, fp4_scale_layout layout, int64_t k, uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->fmt = fmt, d->layout = layout, d->k = k;
  size_t sb = 0;
  fp4_scales_size(fmt, layout, ROWS_N, k, &sb);
  float *w = malloc(sizeof(float) * (size_t)(ROWS_N * k));
  d->a = malloc(sizeof(float) * (size_t)(ROWS_MAXM * k));
  d->ab = malloc(2 * (size_t)(ROWS_MAXM * k));
  d->codes = malloc((size_t)(ROWS_N * k / 2));
  d->scales = malloc(sb);
  int ok = w && d->a && d->ab && d->codes && d->scales;
  if (ok) {
    fp4h_rng g = {seed};
    fp4h_fill(&g, w, ROWS_N * k, FP4H_DATA_NORMAL, 16);
    fp4h_fill(&g, d->a, ROWS_MAXM * k, FP4H_DATA_NORMAL, 16);
    /* exact in bf16, so f32 and bf16 activations are the same values */
    fp4_convert(d->a, FP4_DTYPE_F32, d->ab, FP4_DTYPE_BF16, (size_t)(ROWS_MAXM * k));
    fp4_convert(d->ab, FP4_DTYPE_BF16, d->a, FP4_DTYPE_F32, (size_t)(ROWS_MAXM * k));
    /* NaN in row 1, +inf in row 3 (last K block), -inf in row 6 */
    d->a[1 * k + k / 3] = NAN;
    d->a[3 * k + k - 1] = INFINITY;
    d->a[6 * k + 5] = -INFINITY;
    fp4_convert(d->a, FP4_DTYPE_F32, d->ab, FP4_DTYPE_BF16, (size_t)(ROWS_MAXM * k));
    fp4_matrix wm = {w, ROWS_N, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix qb = {d->codes, d->scales, ROWS_N, k, fmt, layout, 1.0f, FP4_MEMORY_HOST};
    fp4_options ro = {.backend = "ref"};
    ok = fp4_quantize(NULL, &wm, 20.0f, &qb, &ro) == FP4_OK;
    /* a NaN scale in weight row 203 (a later group of rows), in its last scale column */
    const int64_t cols = k / fp4_format_block_size(fmt);
    d->scales[fp4_scale_offset(fmt, layout, ROWS_N, k, 203, cols - 1)] = fmt == FP4_FORMAT_MXFP4 ? 0xFF : 0x7F;
  }
  free(w);
  return ok;
}

static void rows_free(rows_data *d) { free(d->a), free(d->ab), free(d->codes), free(d->scales); }

/* Rows rows[0..m) of A times the weights on a backend, f32 output into o (m x ROWS_N). */
static int rows_gemm(const rows_data *d, const char *backend, const int64_t *rows, int64_t m, int bf16, float *o) {
  const int64_t k = d->k;
  void *a = malloc((size_t)(m * k) * (bf16 ? 2 : 4));
  if (!a) return 0;
  for (int64_t i = 0; i < m; i++) {
    if (bf16) memcpy((uint16_t *)a + i * k, d->ab + rows[i] * k, 2 * (size_t)k);
    else memcpy((float *)a + i * k, d->a + rows[i] * k, 4 * (size_t)k);
  }
  for (int64_t i = 0; i < m * ROWS_N; i++) o[i] = -12345.0f;
  fp4_matrix am = {a, m, k, 0, bf16 ? FP4_DTYPE_BF16 : FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_matrix om = {o, m, ROWS_N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix qb = {d->codes, d->scales, ROWS_N, k, d->fmt, d->layout, 1.0f, FP4_MEMORY_HOST};
  fp4_options opt = {.backend = backend, .config = strcmp(backend, "cpu") ? NULL : g_level};
  fp4_status st = fp4_mm_w4a16(NULL, &am, &qb, 0.75f, &om, &opt);
  free(a);
  if (st != FP4_OK) printf("  %s GEMM failed: %s\n", backend, fp4_last_error());
  return st == FP4_OK;
}

static int same_bits(float x, float y) { return isnan(x) ? isnan(y) : !memcmp(&x, &y, sizeof x); }

/* One M-row call against calls of `ref_m` rows (M = 1: one row each; M = 5: windows of 5 rows)
 * bit for bit, and against the reference (relative difference below 2e-6, NaN and infinities where it has them). */
static void rows_case(const char *level, const rows_data *d, int64_t m, int64_t ref_m, int bf16) {
  static const int64_t order[ROWS_MAXM] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  float *big = malloc(sizeof(float) * (size_t)(m * ROWS_N)), *part = malloc(sizeof(float) * (size_t)(5 * ROWS_N));
  float *want = malloc(sizeof(float) * (size_t)(m * ROWS_N));
  char name[160];
  snprintf(name, sizeof name, "[%s] %s %s K=%lld M=%lld %s", level, fp4_format_name(d->fmt), fp4_layout_name(d->layout),
           (long long)d->k, (long long)m, bf16 ? "bf16" : "f32");
  if (!big || !part || !want || !rows_gemm(d, "cpu", order, m, bf16, big) || !rows_gemm(d, "ref", order, m, bf16, want)) {
    CHECK(0, "%s: run", name);
    free(big), free(part), free(want);
    return;
  }
  int64_t bad = 0, first = -1;
  for (int64_t r0 = 0; r0 < m; r0 += ref_m) {
    const int64_t s0 = r0 + ref_m <= m ? r0 : m - ref_m; /* last window ends at row m - 1 */
    if (!rows_gemm(d, "cpu", order + s0, ref_m, bf16, part)) {
      CHECK(0, "%s: run of rows %lld..%lld", name, (long long)s0, (long long)(s0 + ref_m - 1));
      continue;
    }
    for (int64_t i = r0; i < s0 + ref_m; i++)
      for (int64_t n = 0; n < ROWS_N; n++)
        if (!same_bits(big[i * ROWS_N + n], part[(i - s0) * ROWS_N + n])) bad++, first = first < 0 ? i * ROWS_N + n : first;
  }
  CHECK(!bad, "%s: %lld outputs differ from the %lld-row calls (first: row %lld, column %lld)", name, (long long)bad,
        (long long)ref_m, (long long)(first / ROWS_N), (long long)(first % ROWS_N));
  int64_t off = 0, nan_rows = 0;
  double num = 0, den = 0;
  for (int64_t i = 0; i < m * ROWS_N; i++) {
    const float g = big[i], w = want[i];
    if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
      off += !(isnan(w) && isnan(g)) && g != w;
      nan_rows += i % ROWS_N == 203 && isnan(g);
    } else {
      num += ((double)g - (double)w) * ((double)g - (double)w);
      den += (double)w * (double)w;
    }
  }
  const double e = den > 0 ? sqrt(num / den) : sqrt(num);
  CHECK(!off && e < 2e-6, "%s: %lld NaN/inf outputs differ from the reference, relative difference %.3g", name,
        (long long)off, e);
  CHECK(nan_rows == m, "%s: weight row 203 (NaN scale) gave %lld NaN outputs of %lld", name, (long long)nan_rows,
        (long long)m);
  free(big), free(part), free(want);
}

int main(void) {
  static const char *const levels[] = {"generic", "avx2", "avx512"};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};
  static const int64_t ks_nv[] = {64, 128, 1152, 2192, 2304, 4096, 14336};
  static const int64_t ks_mx[] = {64, 128, 1152, 2208, 2304, 4096, 14336};
  enum { NKS = sizeof ks_nv / sizeof ks_nv[0] };
  static const char *const threads[] = {"1", "2"};
  int cases = 0;
  for (int l = 0; l < 3; l++) {
    if (!fp4h_cpu_level_runs(levels[l])) {
      printf("level %s: not available on this CPU, skipped\n", levels[l]);
      continue;
    }
    g_level = levels[l];
    for (int f = 0; f < 2; f++)
      for (int ki = 0; ki < NKS; ki++) {
        const fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
        const fp4_scale_layout layout = layouts[(ki + (size_t)l) % (f ? 2 : 3)];
        rows_data d;
        if (!rows_make(&d, fmt, layout, f ? ks_mx[ki] : ks_nv[ki], 77u + (uint64_t)(10 * f + ki))) {
          CHECK(0, "test data allocation");
          rows_free(&d);
          continue;
        }
        for (int t = 0; t < 2; t++) {
          setenv("FP4KIT_NUM_THREADS", threads[t], 1);
          for (int64_t m = 2; m <= 4; m++)
            for (int bf16 = 0; bf16 < 2; bf16++, cases++) rows_case(levels[l], &d, m, 1, bf16);
          static const int64_t panel_ms[] = {7, 15, 17};
          for (int i = 0; i < 3; i++, cases++) rows_case(levels[l], &d, panel_ms[i], 5, (i + ki + t) % 2);
        }
        rows_free(&d);
      }
  }
  printf("%d cases\n", cases);
  return TEST_SUMMARY();
}
