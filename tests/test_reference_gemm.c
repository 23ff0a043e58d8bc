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

int main(void) {
  for (int w = 0; w < 2; w++) {
    run_case(1, 64, 256, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_F32, w);
    run_case(7, 13, 16, FP4_FORMAT_NVFP4, FP4_DTYPE_F16, FP4_DTYPE_BF16, w);
    run_case(3, 5, 4096, FP4_FORMAT_NVFP4, FP4_DTYPE_F32, FP4_DTYPE_F32, w);
    run_case(2, 9, 32, FP4_FORMAT_MXFP4, FP4_DTYPE_BF16, FP4_DTYPE_F16, w);
    run_case(5, 40, 4096, FP4_FORMAT_MXFP4, FP4_DTYPE_F32, FP4_DTYPE_F32, w);
  }
  return TEST_SUMMARY();
}
