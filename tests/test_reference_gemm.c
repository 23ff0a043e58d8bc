/* The reference GEMM against an independent naive double computation that decodes every element
 * through the public scalar codecs and scale offsets. */
#include <math.h>
#include <stdlib.h>

#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

/* Element (r, k) of a host quantized matrix, decoded with the public codecs only. */
static double element(const fp4_qmatrix *q, int64_t r, int64_t k) {
  const uint8_t *d = q->data, *s = q->scales;
  uint8_t code = (uint8_t)(d[r * (q->cols / 2) + k / 2] >> (4 * (k & 1)));
  uint8_t sb = s[fp4_scale_offset(q->format, q->layout, q->rows, q->cols, r, k / fp4_format_block_size(q->format))];
  double scale = q->format == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode(sb) : fp4_ue8m0_decode(sb);
  return (double)fp4_e2m1_decode(code) * scale * (double)q->multiplier;
}

static void quantize_random(fp4h_rng *g, fp4_qmatrix *q, int64_t rows, int64_t k, fp4_format fmt, fp4_scale_layout lay) {
  float *x = malloc(sizeof(float) * rows * k);
  fp4h_fill(g, x, rows * k, FP4H_DATA_NORMAL, 32);
  size_t sb = 0;
  fp4_scales_size(fmt, lay, rows, k, &sb);
  *q = (fp4_qmatrix){malloc(rows * k / 2), malloc(sb), rows, k, fmt, lay, 0.0f, FP4_MEMORY_HOST};
  fp4_matrix m = {x, rows, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  CHECK(fp4_quantize(NULL, &m, 3.0f, q, NULL) == FP4_OK, "quantize: %s", fp4_last_error());
  free(x);
}

static void run_case(int64_t M, int64_t N, int64_t K, fp4_format fmt, fp4_dtype a_dtype, fp4_dtype out_dtype, int w4a16) {
  fp4h_rng g = {(uint64_t)(M * 1000003 + N * 101 + K) ^ (uint64_t)fmt};
  fp4_qmatrix a, b;
  quantize_random(&g, &a, M, K, fmt, FP4_LAYOUT_128X4);
  quantize_random(&g, &b, N, K, fmt, fmt == FP4_FORMAT_NVFP4 ? FP4_LAYOUT_8X4 : FP4_LAYOUT_LINEAR);
  float *af = malloc(sizeof(float) * M * K);
  fp4h_fill(&g, af, M * K, FP4H_DATA_NORMAL, 32);
  void *ad = malloc(M * K * fp4_dtype_size(a_dtype));
  fp4_convert(af, FP4_DTYPE_F32, ad, a_dtype, (size_t)(M * K));
  fp4_convert(ad, a_dtype, af, FP4_DTYPE_F32, (size_t)(M * K)); /* the values actually passed */
  void *out = malloc(M * N * fp4_dtype_size(out_dtype));
  float *got = malloc(sizeof(float) * M * N);
  memset(out, 0xFF, M * N * fp4_dtype_size(out_dtype)); /* NaN in every dtype */
  const float alpha = 1.25f;
  fp4_matrix o = {out, M, N, 0, out_dtype, FP4_MEMORY_HOST};
  fp4_options opts = {.backend = "ref"};
  fp4_status st;
  if (w4a16) {
    fp4_matrix am = {ad, M, K, 0, a_dtype, FP4_MEMORY_HOST};
    st = fp4_mm_w4a16(NULL, &am, &b, alpha, &o, &opts);
  } else {
    st = fp4_mm(NULL, &a, &b, alpha, &o, &opts);
  }
  CHECK(st == FP4_OK, "mm: %s", fp4_last_error());
  fp4_convert(out, out_dtype, got, FP4_DTYPE_F32, (size_t)(M * N));
  /* Reference rounds the exact double result to float, then to the output dtype: compare with a
   * relative tolerance of one output ulp (exact for f32 up to the final rounding). */
  double tol = out_dtype == FP4_DTYPE_F32 ? 0x1.0p-23 : out_dtype == FP4_DTYPE_BF16 ? 0x1.0p-7 : 0x1.0p-10;
  int bad = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++) acc += (w4a16 ? (double)af[m * K + k] : element(&a, m, k)) * element(&b, n, k);
      acc *= alpha;
      double v = got[m * N + n];
      if (!(fabs(v - acc) <= tol * fabs(acc) + 1e-30)) bad++;
    }
  CHECK(bad == 0, "%s M=%lld N=%lld K=%lld %s a=%s out=%s: %d wrong elements", w4a16 ? "w4a16" : "w4a4", (long long)M,
        (long long)N, (long long)K, fp4_format_name(fmt), fp4_dtype_name(a_dtype), fp4_dtype_name(out_dtype), bad);
  free(a.data);
  free(a.scales);
  free(b.data);
  free(b.scales);
  free(af);
  free(ad);
  free(out);
  free(got);
}

/* Values at the ends of the float range, on ref and cpu (default and generic kernels), W4A16 and
 * W4A4 with f32 output: an MXFP4 element of 4 x 2^126 = 2^128 (past FLT_MAX, as fp4_quantize makes
 * from 3e38) times 2^-20 is 2^108; a multiplier and alpha whose product is below the floats (1e-45)
 * or above them (1e40) while the result is an ordinary float; and fp4_dequantize of 2^128 x 0.5. */
static void extreme_scales(void) {
  const int K = 32;
  uint8_t wcodes[2 * 16] = {0x06}, wscale[2] = {253, 253}; /* row 0: 4.0 at k = 0 x 2^126; row 1: 0 */
  uint8_t acodes[16] = {0x02}, ascale[1] = {107};          /* 1.0 at k = 0 x 2^-20 */
  fp4_qmatrix w = {wcodes, wscale, 2, K, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {acodes, ascale, 1, K, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  float a[32] = {0x1p-20f}, out[2];
  fp4_matrix am = {a, 1, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, om = {out, 1, 2, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  const char *backends[3][2] = {{"ref", NULL}, {"cpu", NULL}, {"cpu", "generic"}};
  for (int b = 0; b < 3; b++)
    for (int w4a4 = 0; w4a4 < 2; w4a4++) {
      fp4_options o = {.backend = backends[b][0], .config = backends[b][1]};
      out[0] = out[1] = NAN;
      const fp4_status st = w4a4 ? fp4_mm(NULL, &aq, &w, 1.0f, &om, &o) : fp4_mm_w4a16(NULL, &am, &w, 1.0f, &om, &o);
      CHECK(st == FP4_OK && out[0] == 0x1p108f && out[1] == 0.0f, "%s%s%s %s: 2^128 x 2^-20 = %a, 0 = %a (%s)",
            backends[b][0], backends[b][1] ? ":" : "", backends[b][1] ? backends[b][1] : "", w4a4 ? "w4a4" : "w4a16",
            (double)out[0], (double)out[1], st ? fp4_last_error() : "ok");
    }
  float deq[64];
  fp4_matrix dm = {deq, 2, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  w.multiplier = 0.5f;
  CHECK(fp4_dequantize(&w, &dm) == FP4_OK && deq[0] == 0x1p127f && deq[1] == 0.0f,
        "fp4_dequantize: 2^128 x 0.5 = %a (%s)", (double)deq[0], fp4_last_error());

  /* NVFP4 row 0: 1.0 everywhere (scale 0x38 = 1.0), row 1: 0; activations x, alpha and multiplier. */
  uint8_t ncodes[2 * 16], nscale[4] = {0x38, 0x38, 0x38, 0x38};
  memset(ncodes, 0x22, 16);
  memset(ncodes + 16, 0, 16);
  /* x, multiplier, alpha; x a power of two so that every kernel's sum of the 32 products is exact */
  const float cases[2][3] = {{0x1p100f, 1e-15f, 1e-30f}, {0x1p-100f, 1e20f, 1e20f}};
  for (int c = 0; c < 2; c++) {
    fp4_qmatrix nw = {ncodes, nscale, 2, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, cases[c][1], FP4_MEMORY_HOST};
    for (int k = 0; k < K; k++) a[k] = cases[c][0];
    const float want = (float)((double)K * (double)cases[c][0] * (double)cases[c][1] * (double)cases[c][2]);
    for (int b = 0; b < 3; b++) {
      fp4_options o = {.backend = backends[b][0], .config = backends[b][1]};
      out[0] = out[1] = NAN;
      const fp4_status st = fp4_mm_w4a16(NULL, &am, &nw, cases[c][2], &om, &o);
      CHECK(st == FP4_OK && out[0] == want && out[1] == 0.0f,
            "%s%s%s: 32 x %g x multiplier %g x alpha %g = %a (want %a), 0 = %a (%s)", backends[b][0],
            backends[b][1] ? ":" : "", backends[b][1] ? backends[b][1] : "", (double)cases[c][0], (double)cases[c][1],
            (double)cases[c][2], (double)out[0], (double)want, (double)out[1], st ? fp4_last_error() : "ok");
    }
  }

  /* bf16 activations at the bottom of the floats (the streaming kernels at M <= 4; the AVX-512 bf16
   * dot product takes subnormals as zero): one subnormal 2^-130, one normal 2^-126, each times the
   * MXFP4 weights 1.0 x 2^100 of row 0 (code 0x2, scale byte 227); W4A4 codes 1.0 x 2^-127. */
  uint8_t mcodes[2 * 16], mscale[2] = {227, 227};
  memset(mcodes, 0x22, 16);
  memset(mcodes + 16, 0, 16);
  fp4_qmatrix mw = {mcodes, mscale, 2, K, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  uint16_t tiny[32];
  fp4_matrix tm = {tiny, 1, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  const float values[2] = {0x1p-130f, 0x1p-126f};
  for (int c = 0; c < 3; c++) {
    for (int k = 0; k < K; k++) tiny[k] = fp4_bf16_from_f32(c < 2 ? values[c] : 0.0f);
    uint8_t qcodes[16], qscale[1] = {0}; /* 1.0 x 2^-127 */
    memset(qcodes, 0x22, 16);
    fp4_qmatrix tq = {qcodes, qscale, 1, K, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
    const float want = c < 2 ? 32.0f * values[c] * 0x1p100f : 32.0f * 0x1p-127f * 0x1p100f;
    for (int b = 1; b < 3; b++) {
      fp4_options o = {.backend = backends[b][0], .config = backends[b][1]};
      out[0] = out[1] = NAN;
      const fp4_status st = c < 2 ? fp4_mm_w4a16(NULL, &tm, &mw, 1.0f, &om, &o) : fp4_mm(NULL, &tq, &mw, 1.0f, &om, &o);
      CHECK(st == FP4_OK && out[0] == want && out[1] == 0.0f, "%s%s%s %s: 32 x %a x 2^100 = %a (want %a) (%s)",
            backends[b][0], backends[b][1] ? ":" : "", backends[b][1] ? backends[b][1] : "", c < 2 ? "w4a16" : "w4a4",
            c < 2 ? (double)values[c] : 0x1p-127, (double)out[0], (double)want, st ? fp4_last_error() : "ok");
    }
  }
}

int main(void) {
  for (int w = 0; w < 2; w++) {
    run_case(1, 64, 256, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_F32, w);
    run_case(7, 13, 16, FP4_FORMAT_NVFP4, FP4_DTYPE_F16, FP4_DTYPE_BF16, w);
    run_case(3, 5, 4096, FP4_FORMAT_NVFP4, FP4_DTYPE_F32, FP4_DTYPE_F32, w);
    run_case(2, 9, 32, FP4_FORMAT_MXFP4, FP4_DTYPE_BF16, FP4_DTYPE_F16, w);
    run_case(5, 40, 4096, FP4_FORMAT_MXFP4, FP4_DTYPE_F32, FP4_DTYPE_F32, w);
  }
  extreme_scales();
  return TEST_SUMMARY();
}
