/* Quantization recipes: known answers worked out by hand, and the quantize-dequantize error bound. */
#include <math.h>
#include <stdlib.h>

#include "fp4kit.h"
#include "harness.h"
#include "testing.h"

static fp4_status quantize_row(const float *x, int64_t k, fp4_format fmt, float gsf, uint8_t *data, uint8_t *scales) {
  fp4_matrix m = {(void *)x, 1, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {data, scales, 1, k, fmt, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  return fp4_quantize(NULL, &m, gsf, &q, NULL);
}

static void test_runtime_nvfp4_known(void) {
  /* Block 0, gsf = 1: vmax = 6, sf = 6 * f32(1/6) = 1.0000000298 -> float 1.0 -> E4M3 0x38;
   * out_scale = 1/(1*1) = 1; codes 6 -> 7, 3 -> 5, 1.5 -> 3, 0.5 -> 1, -2 -> 0xC, 0.25 -> 0 (tie to 0),
   * 0.75 -> 2 (tie to even), -5 -> 0xE (tie to 4).
   * Block 1: vmax = 3, sf = 0.5 -> 0x30, out_scale = 2: 3 -> 6 (7), -1 -> -2 (0xC), 0.2 -> 0.4 (1),
   * 0.125 -> 0.25 (0), 1.25 -> 2.5 (tie -> 2 = code 4).
   * Block 2: all zero -> scale 0, codes 0. Block 3: vmax 1e-4 -> sf 1.7e-5 underflows to E4M3 0 ->
   * out_scale = FLT_MAX: codes saturate to +-6 with the sign (dequantized value 0). */
  float x[64] = {6, 3, 1.5f, 0.5f, -2, 0.25f, 0.75f, -5, 0, 0, 0, 0, 0, 0, 0, 0,
                 3, -1, 0.2f, 0.125f, 1.25f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                 1e-4f, -1e-4f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  uint8_t data[32], scales[4];
  CHECK(quantize_row(x, 64, FP4_FORMAT_NVFP4, 1.0f, data, scales) == FP4_OK, "quantize: %s", fp4_last_error());
  CHECK(scales[0] == 0x38 && scales[1] == 0x30 && scales[2] == 0 && scales[3] == 0, "scales %02x %02x %02x %02x",
        scales[0], scales[1], scales[2], scales[3]);
  static const uint8_t want0[8] = {0x57, 0x13, 0x0C, 0xE2, 0, 0, 0, 0};
  static const uint8_t want1[8] = {0xC7, 0x01, 0x04, 0, 0, 0, 0, 0};
  CHECK(!memcmp(data, want0, 8), "block 0 codes %02x %02x %02x %02x", data[0], data[1], data[2], data[3]);
  CHECK(!memcmp(data + 8, want1, 8), "block 1 codes %02x %02x %02x", data[8], data[9], data[10]);
  CHECK(data[16] == 0 && data[23] == 0, "zero block");
  CHECK(data[24] == 0xF7, "underflowed scale saturates codes with their sign: %02x", data[24]);
}

static void test_runtime_nvfp4_global_scale(void) {
  /* gsf = 2: sf_mul = 2 * f32(1/6) = 0.33333334; vmax 3 -> sf = 1.0000000 -> 0x38; 1/gsf = 0.5;
   * out_scale = 1/(1 * 0.5) = 2; x = 3 -> 6 (7); x = -0.5 -> -1 (0xA). multiplier = 0.5. */
  float x[16] = {3, -0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  uint8_t data[8], scales[1];
  fp4_matrix m = {x, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {data, scales, 1, 16, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  CHECK(fp4_quantize(NULL, &m, 2.0f, &q, NULL) == FP4_OK, "quantize");
  CHECK(scales[0] == 0x38 && data[0] == 0xA7 && q.multiplier == 0.5f, "gsf 2: scale %02x codes %02x mult %g", scales[0],
        data[0], (double)q.multiplier);
}

static void test_runtime_mxfp4_known(void) {
  /* Block 0: vmax 6 -> 6/6 = 1 -> e = 127, out_scale 1: 6 -> 7, -1 -> 0xA.
   * Block 1: vmax 7 -> 7/6 rounds up to 2 -> e = 128, out_scale 0.5: 7 -> 3.5 (tie -> 4, code 6),
   * 1 -> 0.5 (code 1). Block 2: zero -> e = 0 (2^-127), codes 0. */
  float x[96] = {0};
  x[0] = 6;
  x[1] = -1;
  x[32] = 7;
  x[33] = 1;
  uint8_t data[48], scales[3];
  CHECK(quantize_row(x, 96, FP4_FORMAT_MXFP4, 1.0f, data, scales) == FP4_OK, "quantize");
  CHECK(scales[0] == 127 && scales[1] == 128 && scales[2] == 0, "scales %d %d %d", scales[0], scales[1], scales[2]);
  CHECK(data[0] == 0xA7 && data[16] == 0x16 && data[32] == 0, "codes %02x %02x", data[0], data[16]);
}

static void test_modelopt_known(void) {
  /* amax(W) = 2688 -> weight_scale_2 = 1. Block 0: amax 2688 -> scale 448 (0x7E), 2688/448 = 6 -> 7,
   * 448 -> 1 (code 2). Block 1: amax 6 -> scale 1 (0x38): 6 -> 7, -1.5 -> 0xB. Block 2: zero ->
   * scale 1.0 (0x38), codes 0. Block 3: amax 1e-3 -> 1.7e-4, below half the smallest E4M3 subnormal:
   * scale byte 0 (Model Optimizer applies no lower clamp), so 1e-3 / 0 = inf -> 6 (code 7) and
   * 0 / 0 = NaN -> code 7, as Model Optimizer's cast gives. */
  float w[64] = {0};
  w[0] = 2688;
  w[1] = 448;
  w[16] = 6;
  w[17] = -1.5f;
  w[48] = 1e-3f;
  uint8_t data[32], scales[4];
  float ws2 = -1;
  fp4_matrix m = {w, 1, 64, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {data, scales, 1, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  CHECK(fp4_quantize_modelopt(&m, &q, &ws2) == FP4_OK, "modelopt: %s", fp4_last_error());
  CHECK(ws2 == 1.0f && q.multiplier == 1.0f, "weight_scale_2 %g", (double)ws2);
  CHECK(scales[0] == 0x7E && scales[1] == 0x38 && scales[2] == 0x38 && scales[3] == 0x00, "scales %02x %02x %02x %02x",
        scales[0], scales[1], scales[2], scales[3]);
  CHECK(data[0] == 0x27 && data[8] == 0xB7 && data[16] == 0 && data[24] == 0x77, "codes %02x %02x %02x %02x", data[0],
        data[8], data[16], data[24]);
  float zeros[16] = {0};
  fp4_matrix z = {zeros, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  q.cols = 16;
  CHECK(fp4_quantize_modelopt(&z, &q, &ws2) == FP4_OK && ws2 == 0.0f && data[0] == 0, "all-zero weights");
}

/* |x - dq(x)| <= half an E2M1 step at that block's scale (steps 0.5, 1, 2 on [0,2], [2,4], [4,6]); values
 * beyond 6 after scaling saturate and may exceed that by the E4M3 rounding of the scale (< 1/16). */
static void test_error_bound(fp4_format fmt, fp4_scale_layout layout) {
  const int64_t M = 33, K = 512;
  fp4h_rng g = {42 + (uint64_t)fmt * 7 + (uint64_t)layout};
  float *x = malloc(sizeof(float) * M * K), *dq = malloc(sizeof(float) * M * K);
  fp4h_fill(&g, x, M * K, FP4H_DATA_NORMAL, 32);
  size_t sb = 0;
  fp4_scales_size(fmt, layout, M, K, &sb);
  uint8_t *data = malloc(M * K / 2), *scales = malloc(sb);
  float amax = 0;
  for (int64_t i = 0; i < M * K; i++) amax = fmaxf(amax, fabsf(x[i]));
  float gsf = 448.0f * 6.0f / amax;
  fp4_matrix m = {x, M, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {data, scales, M, K, fmt, layout, 0.0f, FP4_MEMORY_HOST};
  CHECK(fp4_quantize(NULL, &m, gsf, &q, NULL) == FP4_OK, "quantize");
  fp4_matrix d = {dq, M, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  CHECK(fp4_dequantize(&q, &d) == FP4_OK, "dequantize");
  int bs = fp4_format_block_size(fmt), bad = 0;
  for (int64_t r = 0; r < M; r++)
    for (int64_t k = 0; k < K; k++) {
      uint8_t s = scales[fp4_scale_offset(fmt, layout, M, K, r, k / bs)];
      double scale = fmt == FP4_FORMAT_NVFP4 ? (double)fp4_e4m3_decode(s) * q.multiplier : (double)fp4_ue8m0_decode(s);
      if (scale == 0.0) continue; /* underflowed block: dequantizes to 0 by definition */
      double u = fabs((double)x[r * K + k]) / scale;
      double step = u <= 2 ? 0.5 : u <= 4 ? 1.0 : 2.0;
      double bound = u > 6 ? u - 6 + 1e-6 : 0.5 * step * (1 + 1e-6);
      double err = fabs((double)x[r * K + k] - (double)dq[r * K + k]) / scale;
      if (err > bound || (u > 6 && u > 6.0 * (1 + 1.0 / 16))) bad++;
    }
  CHECK(bad == 0, "%s %s: %d elements beyond half a step", fp4_format_name(fmt), fp4_layout_name(layout), bad);
  free(x);
  free(dq);
  free(data);
  free(scales);
}

int main(void) {
  test_runtime_nvfp4_known();
  test_runtime_nvfp4_global_scale();
  test_runtime_mxfp4_known();
  test_modelopt_known();
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR);
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4);
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4);
  test_error_bound(FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4);
  test_error_bound(FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR);
  return TEST_SUMMARY();
}
