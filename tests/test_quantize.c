/* Quantization recipes: known answers worked out by hand, and the quantize-dequantize error bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
   * out_scale = 1/0 = +inf: codes saturate to +-6 with the sign and zeros (0 * inf = NaN) give 7, as
   * FlashInfer's kernel does (dequantized values 0). */
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
  CHECK(data[25] == 0x77, "zeros of an underflowed block are NaN -> code 7: %02x", data[25]);
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

/* An infinite element in an MXFP4 block: vmax / 6 = inf encodes to the largest scale, byte 254
 * (2^127), whose encode multiplier is 2^-127, so +-inf keep their sign as codes 0x7 / 0xF and the
 * finite values of the block become (signed) zeros. A multiplier of 0 instead would turn both
 * infinities into NaN and then into +6. Checked on the reference and at every cpu level. */
static void test_runtime_mxfp4_infinities(void) {
  static const char *const backends[][2] = {{"ref", NULL}, {"cpu", "generic"}, {"cpu", "avx2"}, {"cpu", "avx512"}};
  float x[64] = {0};
  x[0] = INFINITY;
  x[1] = -INFINITY;
  x[2] = 3.0f;
  x[3] = -3.0f;
  x[32] = 6.0f; /* a finite block after it keeps its own scale */
  for (size_t b = 0; b < sizeof backends / sizeof *backends; b++) {
    if (backends[b][1] && !fp4h_cpu_level_runs(backends[b][1])) continue;
    uint8_t data[32], scales[2];
    memset(data, 0x5A, sizeof data);
    fp4_matrix m = {x, 1, 64, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix q = {data, scales, 1, 64, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
    fp4_options o = {.backend = backends[b][0], .config = backends[b][1]};
    const char *name = backends[b][1] ? backends[b][1] : backends[b][0];
    CHECK(fp4_quantize(NULL, &m, 1.0f, &q, &o) == FP4_OK, "[%s] quantize: %s", name, fp4_last_error());
    CHECK(scales[0] == 254 && scales[1] == 127, "[%s] scales %d %d, want 254 127", name, scales[0], scales[1]);
    CHECK(data[0] == 0xF7 && data[1] == 0x80 && data[2] == 0 && data[15] == 0,
          "[%s] codes %02x %02x %02x, want f7 80 00", name, data[0], data[1], data[2]);
    CHECK(data[16] == 0x07, "[%s] finite block codes %02x", name, data[16]);
  }
}

static fp4_status quantize_ordered_row(const float *x, int64_t k, float gsf, fp4_quantize_order order, uint8_t *data,
                                       uint8_t *scales, const fp4_options *opt) {
  fp4_matrix m = {(void *)x, 1, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {data, scales, 1, k, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  return fp4_quantize_ordered(NULL, &m, gsf, order, &q, opt);
}

static void test_runtime_orders(void) {
  /* gsf = 896 (= 2688 / 3, an amax of 3). Block 0: vmax = 0.0703125 (9/128, a bf16 value).
   *   FLASHINFER: vmax * f32(1/6) = 0.01171875 rounded, times 896 = 10.5 exactly: an E4M3 tie -> 10
   *   (0x52); out_scale = 1/(10/896) = 89.6: 0.0703125 -> 6.3 (code 7), -0.03125 -> -2.8 (0xD).
   *   EXACT: 896 * f32(1/6) = 149.33334, times vmax = 10.500001 -> 11 (0x53); out_scale = 81.45:
   *   -> 5.73 (code 7), -2.55 (0xD).
   * Block 1: vmax 5e-6: sf 7.5e-4 rounds to E4M3 0 in both orders. FLASHINFER: out_scale = +inf,
   *   codes +-6 and zeros NaN -> 7 (FlashInfer's rcp.approx(0) = inf); EXACT: FLT_MAX, zeros 0. */
  float x[32] = {0.0703125f, -0.03125f};
  x[16] = 5e-6f;
  x[17] = -5e-6f;
  uint8_t data[3][16], scales[3][2];
  CHECK(quantize_row(x, 32, FP4_FORMAT_NVFP4, 896.0f, data[0], scales[0]) == FP4_OK, "default: %s", fp4_last_error());
  CHECK(quantize_ordered_row(x, 32, 896.0f, FP4_ORDER_FLASHINFER, data[1], scales[1], NULL) == FP4_OK, "flashinfer");
  CHECK(quantize_ordered_row(x, 32, 896.0f, FP4_ORDER_EXACT, data[2], scales[2], NULL) == FP4_OK, "exact: %s",
        fp4_last_error());
  CHECK(!memcmp(data[0], data[1], 16) && !memcmp(scales[0], scales[1], 2), "fp4_quantize runs FP4_ORDER_FLASHINFER");
  CHECK(scales[0][0] == 0x52 && scales[2][0] == 0x53, "the tie: flashinfer %02x exact %02x", scales[0][0], scales[2][0]);
  CHECK(data[0][0] == 0xD7 && data[2][0] == 0xD7, "block 0 codes %02x %02x", data[0][0], data[2][0]);
  CHECK(scales[0][1] == 0 && scales[2][1] == 0, "underflowed scales %02x %02x", scales[0][1], scales[2][1]);
  CHECK(data[0][8] == 0xF7 && data[0][9] == 0x77 && data[2][8] == 0xF7 && data[2][9] == 0x00,
        "underflowed block: flashinfer %02x %02x, exact %02x %02x", data[0][8], data[0][9], data[2][8], data[2][9]);
  /* Every backend quantizes in the default order: the cpu backend's SIMD kernel gives the same bits. */
  fp4_options cpu = {0};
  cpu.backend = "cpu";
  CHECK(quantize_ordered_row(x, 32, 896.0f, FP4_ORDER_FLASHINFER, data[1], scales[1], &cpu) == FP4_OK &&
            !memcmp(data[0], data[1], 16) && !memcmp(scales[0], scales[1], 2),
        "cpu backend, flashinfer order");
  /* The exact order is the reference quantizer's only: other backends and device data are refused. */
  CHECK_ERROR(quantize_ordered_row(x, 32, 896.0f, FP4_ORDER_EXACT, data[1], scales[1], &cpu), FP4_ERR_UNSUPPORTED,
              "ref backend only");
  fp4_run_info info;
  fp4_options ref = {0};
  ref.backend = "ref";
  ref.info = &info;
  CHECK(quantize_ordered_row(x, 32, 896.0f, FP4_ORDER_EXACT, data[1], scales[1], &ref) == FP4_OK &&
            !memcmp(data[1], data[2], 16) && !strcmp(info.backend, "ref") && strstr(info.note, "exact"),
        "exact on ref, reported: %s / %s", info.backend, info.note);
  /* On a context, a remembered decision for the default order is not reused for the exact one. */
  fp4_context *hctx = NULL;
  CHECK(fp4_context_create(&hctx, -1) == FP4_OK, "host context");
  fp4_matrix hm = {x, 1, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix hq = {data[1], scales[1], 1, 32, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  fp4_options with_info = {.info = &info};
  CHECK(fp4_quantize(hctx, &hm, 896.0f, &hq, &with_info) == FP4_OK && !strcmp(info.backend, "cpu"), "auto: %s",
        info.backend);
  CHECK(fp4_quantize_ordered(hctx, &hm, 896.0f, FP4_ORDER_EXACT, &hq, &with_info) == FP4_OK &&
            !strcmp(info.backend, "ref") && !memcmp(data[1], data[2], 16) && !memcmp(scales[1], scales[2], 2),
        "auto, exact order on a context: %s", info.backend);
  CHECK(fp4_quantize(hctx, &hm, 896.0f, &hq, &with_info) == FP4_OK && !strcmp(info.backend, "cpu") &&
            !memcmp(data[1], data[0], 16),
        "auto, default order again: %s", info.backend);
  fp4_context_destroy(hctx);
  fp4_matrix dm = {x, 1, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE};
  fp4_qmatrix dq = {data[1], scales[1], 1, 32, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_DEVICE};
  CHECK_ERROR(fp4_quantize_ordered(NULL, &dm, 896.0f, FP4_ORDER_EXACT, &dq, NULL), FP4_ERR_UNSUPPORTED, "host memory only");
  CHECK_ERROR(quantize_ordered_row(x, 32, 896.0f, (fp4_quantize_order)2, data[1], scales[1], NULL),
              FP4_ERR_INVALID_ARGUMENT, "order 2");
  CHECK_ERROR(quantize_ordered_row(x, 32, 0.0f, FP4_ORDER_EXACT, data[1], scales[1], NULL), FP4_ERR_INVALID_ARGUMENT,
              "finite and positive");
  /* A scale whose reciprocal (the multiplier) is not a float would lose every value; 3e-39 keeps one. */
  CHECK_ERROR(quantize_ordered_row(x, 32, 1e-45f, FP4_ORDER_EXACT, data[1], scales[1], NULL), FP4_ERR_INVALID_ARGUMENT,
              "finite float reciprocal");
  CHECK_ERROR(quantize_ordered_row(x, 32, 1e-45f, FP4_ORDER_FLASHINFER, data[1], scales[1], NULL),
              FP4_ERR_INVALID_ARGUMENT, "global_scale (1.4013e-45) must be finite and positive, with a finite float");
  CHECK(quantize_ordered_row(x, 32, 3e-39f, FP4_ORDER_FLASHINFER, data[1], scales[1], NULL) == FP4_OK,
        "global_scale 3e-39: %s", fp4_last_error());
  /* MXFP4 has one order: both names give fp4_quantize's bits. */
  float y[32] = {7.0f, 1.0f};
  fp4_matrix my = {y, 1, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix mq = {data[1], scales[1], 1, 32, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  CHECK(fp4_quantize_ordered(NULL, &my, 1.0f, FP4_ORDER_EXACT, &mq, NULL) == FP4_OK && scales[1][0] == 128 &&
            data[1][0] == 0x16,
        "mxfp4 exact: scale %d codes %02x", scales[1][0], data[1][0]);
}

static void test_modelopt_known(void) {
  /* amax(W) = 2688 -> weight_scale_2 = 1. Block 0: amax 2688 -> scale 448 (0x7E), 2688/448 = 6 -> 7,
   * 448 -> 1 (code 2). Block 1: amax 6 -> scale 1 (0x38): 6 -> 7, -1.5 -> 0xB. Block 2: zero ->
   * scale 1.0 (0x38), codes 0. Block 3: amax 1e-3 -> 1.7e-4, below half the smallest E4M3 subnormal:
   * clamped to 2^-9 (byte 0x01) by nvidia-modelopt 0.45 and later, so 1e-3 * 512 = 0.512 -> code 1. */
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
  CHECK(scales[0] == 0x7E && scales[1] == 0x38 && scales[2] == 0x38 && scales[3] == 0x01, "scales %02x %02x %02x %02x",
        scales[0], scales[1], scales[2], scales[3]);
  CHECK(data[0] == 0x27 && data[8] == 0xB7 && data[16] == 0 && data[24] == 0x01, "codes %02x %02x %02x %02x", data[0],
        data[8], data[16], data[24]);
  float zeros[16] = {0};
  fp4_matrix z = {zeros, 1, 16, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  q.cols = 16;
  CHECK(fp4_quantize_modelopt(&z, &q, &ws2) == FP4_OK && ws2 == 0.0f && data[0] == 0, "all-zero weights");
  CHECK(fp4_quantize_modelopt_version(&z, FP4_MODELOPT_0_44, &q, &ws2) == FP4_OK && ws2 == 0.0f && data[0] == 0 &&
            scales[0] == 0x38,
        "all-zero weights, 0.44");
  CHECK_ERROR(fp4_quantize_modelopt_version(&z, (fp4_modelopt_version)5, &q, &ws2), FP4_ERR_INVALID_ARGUMENT, "version 5");
}

/* Model Optimizer's recipe takes finite weights only: a NaN or an infinity anywhere is refused with
 * its position, under both releases' rules, and nothing is written. */
static void test_modelopt_nonfinite(void) {
  float w[48];
  for (int i = 0; i < 48; i++) w[i] = 0.125f * (float)(i - 20);
  const float bad[3] = {INFINITY, -INFINITY, NAN};
  for (int b = 0; b < 3; b++)
    for (int v = 0; v < 2; v++) {
      float x[48];
      memcpy(x, w, sizeof x);
      x[37] = bad[b];
      uint8_t data[24], scales[3];
      float ws2 = -1.0f;
      fp4_matrix m = {x, 1, 48, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
      fp4_qmatrix q = {data, scales, 1, 48, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
      CHECK_ERROR(fp4_quantize_modelopt_version(&m, (fp4_modelopt_version)v, &q, &ws2), FP4_ERR_INVALID_ARGUMENT,
                  "w[0, 37]");
      CHECK(ws2 == -1.0f, "weight_scale_2 written for a refused weight (%g, version %d)", (double)bad[b], v);
    }
}

/* Scales in a padded layout: the padding bytes (rows up to 128, columns up to 4 in the 128x4 layout;
 * rows up to 8 in 8x4) are zero whatever the buffer held, and every real scale byte is the one the
 * linear layout gets. */
static void test_modelopt_padding(void) {
  enum { R = 5, K = 32, C = K / 16 };
  float w[R * K];
  fp4h_rng g = {2024};
  fp4h_fill(&g, w, R * K, FP4H_DATA_NORMAL, 16);
  fp4_matrix m = {w, R, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  uint8_t lin_data[R * K / 2], lin_scales[R * C];
  float ws2 = 0.0f;
  fp4_qmatrix lin = {lin_data, lin_scales, R, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
  CHECK(fp4_quantize_modelopt(&m, &lin, &ws2) == FP4_OK, "linear: %s", fp4_last_error());
  const fp4_scale_layout layouts[2] = {FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};
  for (int l = 0; l < 2; l++) {
    size_t sb = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, layouts[l], R, K, &sb);
    uint8_t data[R * K / 2], scales[512];
    memset(scales, 0x5A, sizeof scales);
    fp4_qmatrix q = {data, scales, R, K, FP4_FORMAT_NVFP4, layouts[l], 0.0f, FP4_MEMORY_HOST};
    CHECK(sb <= sizeof scales && fp4_quantize_modelopt(&m, &q, &ws2) == FP4_OK, "%s: %s", fp4_layout_name(layouts[l]),
          fp4_last_error());
    uint8_t real[512] = {0};
    int wrong = 0;
    for (int64_t r = 0; r < R; r++)
      for (int64_t c = 0; c < C; c++) {
        const int64_t off = fp4_scale_offset(FP4_FORMAT_NVFP4, layouts[l], R, K, r, c);
        real[off] = 1;
        wrong += scales[off] != lin_scales[r * C + c];
      }
    int dirty = 0;
    for (size_t i = 0; i < sb; i++) dirty += !real[i] && scales[i] != 0;
    CHECK(wrong == 0 && dirty == 0 && !memcmp(data, lin_data, sizeof data),
          "%s: %d scale bytes differ from the linear layout, %d padding bytes are not zero",
          fp4_layout_name(layouts[l]), wrong, dirty);
  }
}

/* Both Model Optimizer rules at the edges of the lower clamp, weight_scale_2 = 1 (amax 2688), so a
 * block's scale is its amax / 6. */
static void test_modelopt_versions(void) {
  const float sixth_tie = 6.0f * 0.0009765625f; /* scale exactly 2^-10: the E4M3 tie between 0 and 2^-9 */
  const float bmax[8] = {2688.0f,           sixth_tie, 0.0f, 1e-3f, 6.0f * 0.001953125f, 9.0f * 0.001953125f,
                         6.0f * 0.00048828125f, nextafterf(sixth_tie, 1.0f)};
  /* scale:             448        2^-10      zero  1.7e-4 2^-9   1.5*2^-9 (tie -> 2) 2^-11  just above 2^-10 */
  static const uint8_t want_scale[2][8] = {{0x7E, 0x01, 0x38, 0x01, 0x01, 0x02, 0x01, 0x01},
                                           {0x7E, 0x00, 0x38, 0x00, 0x01, 0x02, 0x00, 0x01}};
  /* First code byte of each block (its element 1 is 0 except in block 0, where it is 448): under the
   * clamp, codes of amax/2^-9: 3 -> 5, 0.512 -> 1, 6 -> 7, 4.5 -> 4 (6), 1.5 -> 3; under the 0.44
   * rule a zero scale byte gives +-inf -> 7 and 0/0 = NaN -> 7 for the zeros. */
  static const uint8_t want_code[2][8] = {{0x27, 0x05, 0x00, 0x01, 0x07, 0x06, 0x03, 0x05},
                                          {0x27, 0x77, 0x00, 0x77, 0x07, 0x06, 0x77, 0x05}};
  float w[128] = {0};
  for (int b = 0; b < 8; b++) w[16 * b] = bmax[b];
  w[1] = 448.0f;
  for (int v = 0; v < 2; v++) {
    uint8_t data[64], scales[8];
    float ws2 = -1;
    fp4_matrix m = {w, 1, 128, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix q = {data, scales, 1, 128, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 0.0f, FP4_MEMORY_HOST};
    CHECK(fp4_quantize_modelopt_version(&m, (fp4_modelopt_version)v, &q, &ws2) == FP4_OK && ws2 == 1.0f, "version %d", v);
    for (int b = 0; b < 8; b++) {
      CHECK(scales[b] == want_scale[v][b], "version %d block %d: scale %02x, want %02x", v, b, scales[b], want_scale[v][b]);
      CHECK(data[8 * b] == want_code[v][b], "version %d block %d: codes %02x, want %02x", v, b, data[8 * b],
            want_code[v][b]);
      const uint8_t rest = v == 1 && want_scale[1][b] == 0 ? 0x77 : 0x00;
      CHECK(data[8 * b + 7] == rest, "version %d block %d: zeros %02x", v, b, data[8 * b + 7]);
    }
  }
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
  test_runtime_mxfp4_infinities();
  test_runtime_orders();
  test_modelopt_known();
  test_modelopt_nonfinite();
  test_modelopt_padding();
  test_modelopt_versions();
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR);
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4);
  test_error_bound(FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4);
  test_error_bound(FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4);
  test_error_bound(FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR);
  test_error_bound(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4);
  return TEST_SUMMARY();
}
