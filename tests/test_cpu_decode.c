#define _POSIX_C_SOURCE 200809L
/*
 * Weight decoding of the cpu backend, bit for bit, at every level this machine has.
 *
 * Each row of A is one-hot (a single nonzero activation at position k), so every output is one
 * product w[n, k] * scale[n, block(k)] * a, exact in f32: the cpu backend must return exactly the
 * reference backend's value whatever its summation order. Sweeping k over every position of K
 * checks the element order in which a level decodes and packs (a permuted nibble, lane or block
 * scale gives a wrong value at some k), every E2M1 code (codes vary with n and k), every E4M3 and
 * UE8M0 scale byte other than the NaN codes (subnormal E4M3 and UE8M0 0 included; UE8M0 above 252
 * left out, see scale_byte), -0 codes, K with and without a partial 128-element chunk, odd N,
 * every scale layout, bf16 and f32 activations, and M = 1-4 (streaming kernels) and M = 6 (panel
 * path). Outputs are NaN-prefilled, so an unwritten output fails.
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

/* Scale byte of (row, column): a sweep over all bytes, NaN codes replaced by 1.0, and UE8M0 codes
 * above 252 too (6 * 2^126 overflows f32: the reference dequantizes a whole row first, so one such
 * weight makes its row NaN even where A is zero). */
static uint8_t scale_byte(fp4_format fmt, int64_t r, int64_t c, int64_t cols) {
  uint8_t b = (uint8_t)((r * cols + c) * 37 + 11);
  if (fmt == FP4_FORMAT_MXFP4) return b > 252 ? 127 : b;
  return (b & 0x7F) == 0x7F ? 0x38 : b;
}

typedef struct setup {
  fp4_format fmt;
  fp4_scale_layout layout;
  int64_t n, k;
  uint8_t *codes, *scales;
} setup;

static int make(setup *s, fp4_format fmt, fp4_scale_layout layout, int64_t n, int64_t k) {
  s->fmt = fmt, s->layout = layout, s->n = n, s->k = k;
  size_t sb = 0;
  fp4_scales_size(fmt, layout, n, k, &sb);
  s->codes = malloc((size_t)(n * k / 2));
  s->scales = calloc(1, sb);
  if (!s->codes || !s->scales) return 0;
  const int64_t cols = k / (fmt == FP4_FORMAT_MXFP4 ? 32 : 16);
  for (int64_t r = 0; r < n; r++) {
    for (int64_t b = 0; b < k / 2; b++) { /* codes (r + j) % 16 and (r + j + 5) % 16 */
      const int64_t j = (b * 3 + r * 7) % 16;
      s->codes[r * (k / 2) + b] = (uint8_t)(j | ((j + 5) % 16) << 4);
    }
    for (int64_t c = 0; c < cols; c++)
      s->scales[fp4_scale_offset(fmt, layout, n, k, r, c)] = scale_byte(fmt, r, c, cols);
  }
  return 1;
}

/* Activation value of row i (exact in bf16, so every product is exact in f32). */
static float act_value(int64_t i) {
  static const float v[] = {1.0f, -3.0f, 0.15625f, -1.5f, 96.0f, 0.0078125f};
  return v[i % 6];
}

/* One GEMM with rows i = 0..m-1 one-hot at position pos[i]; the cpu output must equal the
 * reference's bit for bit. */
static int one_hot(const char *level, const setup *s, int64_t m, const int64_t *pos, int f32_act) {
  const int64_t n = s->n, k = s->k;
  float *a = calloc((size_t)(m * k), sizeof(float));
  uint16_t *ab = calloc((size_t)(m * k), sizeof(uint16_t));
  float *got = malloc(sizeof(float) * (size_t)(m * n)), *want = malloc(sizeof(float) * (size_t)(m * n));
  int ok = a && ab && got && want;
  if (ok) {
    for (int64_t i = 0; i < m; i++) a[i * k + pos[i]] = act_value(i + pos[i]);
    fp4_convert(a, FP4_DTYPE_F32, ab, FP4_DTYPE_BF16, (size_t)(m * k));
    for (int64_t i = 0; i < m * n; i++) got[i] = want[i] = NAN;
    fp4_matrix am = {f32_act ? (void *)a : (void *)ab, m, k, 0, f32_act ? FP4_DTYPE_F32 : FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    fp4_matrix og = {got, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, ow = {want, m, n, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix qb = {s->codes, s->scales, n, k, s->fmt, s->layout, 1.0f, FP4_MEMORY_HOST};
    fp4_options co = {.backend = "cpu", .config = g_level}, ro = {.backend = "ref"};
    fp4_status sc = fp4_mm_w4a16(NULL, &am, &qb, 1.0f, &og, &co), sr = fp4_mm_w4a16(NULL, &am, &qb, 1.0f, &ow, &ro);
    CHECK(sc == FP4_OK && sr == FP4_OK, "[%s] run: %s", level, fp4_last_error());
    int64_t bad = -1;
    for (int64_t i = 0; i < m * n && bad < 0; i++)
      if (isnan(got[i]) || isnan(want[i]) ? !(isnan(got[i]) && isnan(want[i])) : got[i] != want[i]) bad = i;
    if (bad >= 0) {
      ok = 0;
      CHECK(0, "[%s] %s %s K=%lld M=%lld %s: out[%lld][%lld] (one-hot at k=%lld) = %a, reference %a", level,
            fp4_format_name(s->fmt), fp4_layout_name(s->layout), (long long)k, (long long)m, f32_act ? "f32" : "bf16",
            (long long)(bad / n), (long long)(bad % n), (long long)pos[bad / n], (double)got[bad], (double)want[bad]);
    }
  }
  free(a), free(ab), free(got), free(want);
  return ok;
}

int main(void) {
  static const char *const levels[] = {"generic", "avx2", "avx512"};
  static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};
  static const int64_t ks_nv[] = {16, 144, 1040}, ks_mx[] = {32, 160, 1056};
  static const int64_t ms[] = {1, 2, 3, 4, 6};
  setenv("FP4KIT_NUM_THREADS", "2", 1);
  for (int l = 0; l < 3; l++) {
    if (!fp4h_cpu_level_runs(levels[l])) {
      printf("level %s: not available on this CPU, skipped\n", levels[l]);
      continue;
    }
    g_level = levels[l];
    int64_t calls = 0;
    for (int f = 0; f < 2; f++)
      for (int li = 0; li < 3; li++)
        for (int ki = 0; ki < 3; ki++) {
          const fp4_format fmt = f ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
          if (fmt == FP4_FORMAT_MXFP4 && layouts[li] == FP4_LAYOUT_8X4) continue;
          setup s;
          const int64_t k = f ? ks_mx[ki] : ks_nv[ki];
          if (!make(&s, fmt, layouts[li], 37, k)) {
            CHECK(0, "test data allocation");
          } else {
            /* positions k0, k0+1, ... spread over the rows of each call; M cycles through ms */
            int failed = 0;
            for (int64_t k0 = 0, c = 0; k0 < k && !failed; c++) {
              const int64_t m = ms[c % 5];
              int64_t pos[6];
              for (int64_t i = 0; i < m; i++) pos[i] = (k0 + i) % k;
              failed = !one_hot(levels[l], &s, m, pos, (int)(c % 2));
              k0 += m;
              calls++;
            }
          }
          free(s.codes), free(s.scales);
        }
    printf("[%s] %lld one-hot GEMMs\n", levels[l], (long long)calls);
  }
  return TEST_SUMMARY();
}
