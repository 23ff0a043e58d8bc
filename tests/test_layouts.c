/* Scale layouts: sizes, the 128x4 / 8x4 offset formulas at known points, bijection on the valid region,
 * round trips between layouts, zeroed padding. Every layout holds either format: the 8x4 one too
 * for MXFP4 (UE8M0 scales per 32), as FlashInfer's fp4_quantize writes it with sf_use_ue8m0 and
 * is_sf_8x4_layout (its get_sf_out_offset_8x4 indexes scale columns whatever the block size). */
#include <stdlib.h>

#include "fp4kit.h"
#include "testing.h"

static const fp4_scale_layout layouts[] = {FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, FP4_LAYOUT_8X4};

static void test_sizes(void) {
  size_t b = 0;
  CHECK(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 3, 64, &b) == FP4_OK && b == 12, "linear 3x4 -> %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1, 16, &b) == FP4_OK && b == 512, "128x4 pads to 512: %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 129, 4096, &b) == FP4_OK && b == 256 * 256, "129 x 256 -> %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4, 128, 160, &b) == FP4_OK && b == 128 * 8, "mxfp4 C=5 -> Cp=8: %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4, 9, 48, &b) == FP4_OK && b == 16 * 4, "8x4 9 rows: %zu", b);
  /* MXFP4 8x4: roundup(M, 8) * roundup(K/32, 4), FlashInfer's _compute_swizzled_layout_sf_size(m, k/32, 8). */
  CHECK(fp4_scales_size(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 9, 160, &b) == FP4_OK && b == 16 * 8, "mxfp4 8x4 9x5: %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 1, 32, &b) == FP4_OK && b == 8 * 4, "mxfp4 8x4 1x1: %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 128, 4096, &b) == FP4_OK && b == 128 * 128, "mxfp4 8x4: %zu", b);
  CHECK(fp4_scales_size(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 4, 48, &b) == FP4_ERR_INVALID_ARGUMENT, "K = 48 is no MXFP4 shape");
}

static void test_known_offsets(void) {
  /* 128x4: off = (r/128)*(Cp/4)*512 + (c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4 */
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 256, 128, 33, 5) == 512 + 16 + 4 + 1, "128x4 (33,5)");
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 256, 128, 130, 0) == 2 * 512 + 2 * 16, "128x4 (130,0)");
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 256, 128, 127, 7) == 512 + 31 * 16 + 3 * 4 + 3, "128x4 (127,7)");
  /* 8x4: off = (r/8)*Cp*8 + (c/4)*32 + (r%8)*4 + c%4 */
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4, 16, 96, 9, 5) == 8 * 8 + 32 + 4 + 1, "8x4 (9,5)");
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 16, 96, 9, 5) == 9 * 6 + 5, "linear (9,5)");
  /* MXFP4 8x4, the same formula over scale columns of 32 elements: K = 320 -> C = 10, Cp = 12. */
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, 9, 5) == 1 * 12 * 8 + 32 + 4 + 1, "mxfp4 8x4 (9,5)");
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, 16, 9) == 2 * 12 * 8 + 2 * 32 + 0 + 1,
        "mxfp4 8x4 (16,9)");
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, 7, 3) == 7 * 4 + 3, "mxfp4 8x4 (7,3)");
  /* FlashInfer's 8x4 description: a [M tiles, K tiles, 8 rows, 4 columns] array, row-major. */
  int bad = 0;
  for (int64_t r = 0; r < 17; r++)
    for (int64_t c = 0; c < 10; c++)
      bad += fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, r, c) != (((r / 8) * 3 + c / 4) * 8 + r % 8) * 4 + c % 4;
  CHECK(bad == 0, "mxfp4 8x4: %d offsets differ from the tile array", bad);
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, 0, 10) == -1, "mxfp4 8x4 column out of range");
  CHECK(fp4_scale_offset(FP4_FORMAT_MXFP4, FP4_LAYOUT_8X4, 17, 320, 17, 0) == -1, "mxfp4 8x4 row out of range");
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 16, 96, 16, 0) == -1, "row out of range");
  CHECK(fp4_scale_offset(FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 16, 96, 0, 6) == -1, "column out of range");
}

static void test_bijection_and_round_trip(void) {
  static const int64_t shapes[][2] = {{1, 16}, {7, 48}, {128, 64}, {129, 272}, {300, 1024}, {8, 16}};
  for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
    for (int f = 0; f < 2; f++) {
      fp4_format fmt = (fp4_format)f;
      int64_t R = shapes[si][0], K = shapes[si][1] * (f ? 2 : 1), C = K / fp4_format_block_size(fmt);
      for (size_t li = 0; li < 3; li++) {
        fp4_scale_layout lay = layouts[li];
        size_t bytes = 0;
        CHECK(fp4_scales_size(fmt, lay, R, K, &bytes) == FP4_OK, "size");
        unsigned char *seen = calloc(bytes, 1);
        int dup = 0, oob = 0;
        for (int64_t r = 0; r < R; r++)
          for (int64_t c = 0; c < C; c++) {
            int64_t off = fp4_scale_offset(fmt, lay, R, K, r, c);
            if (off < 0 || (size_t)off >= bytes) oob++;
            else dup += seen[off]++ != 0;
          }
        CHECK(dup == 0 && oob == 0, "layout %s %lldx%lld: %d duplicates, %d out of range", fp4_layout_name(lay),
              (long long)R, (long long)C, dup, oob);
        free(seen);
      }
      /* linear -> 128x4 -> 8x4 -> linear restores every scale; padding is written as zero. */
      size_t lin_b, sw_b, e8_b;
      fp4_scales_size(fmt, FP4_LAYOUT_LINEAR, R, K, &lin_b);
      fp4_scales_size(fmt, FP4_LAYOUT_128X4, R, K, &sw_b);
      fp4_scales_size(fmt, FP4_LAYOUT_8X4, R, K, &e8_b);
      unsigned char *lin = malloc(lin_b), *sw = malloc(sw_b), *e8 = malloc(e8_b), *back = malloc(lin_b);
      for (size_t i = 0; i < lin_b; i++) lin[i] = (unsigned char)(1 + (i * 37) % 251); /* never zero */
      memset(sw, 0xAB, sw_b);
      CHECK(fp4_scales_convert(fmt, R, K, lin, FP4_LAYOUT_LINEAR, sw, FP4_LAYOUT_128X4) == FP4_OK, "to 128x4");
      size_t zeros = 0;
      for (size_t i = 0; i < sw_b; i++) zeros += sw[i] == 0;
      CHECK(zeros == sw_b - lin_b, "128x4 padding: %zu zero bytes, expected %zu", zeros, sw_b - lin_b);
      memset(e8, 0xAB, e8_b);
      CHECK(fp4_scales_convert(fmt, R, K, sw, FP4_LAYOUT_128X4, e8, FP4_LAYOUT_8X4) == FP4_OK, "to 8x4");
      zeros = 0;
      for (size_t i = 0; i < e8_b; i++) zeros += e8[i] == 0;
      CHECK(zeros == e8_b - lin_b, "%s 8x4 padding zeroed", fp4_format_name(fmt));
      CHECK(fp4_scales_convert(fmt, R, K, e8, FP4_LAYOUT_8X4, back, FP4_LAYOUT_LINEAR) == FP4_OK, "to linear");
      CHECK(!memcmp(lin, back, lin_b), "round trip restores the scales");
      free(lin);
      free(sw);
      free(e8);
      free(back);
    }
  }
}

int main(void) {
  test_sizes();
  test_known_offsets();
  test_bijection_and_round_trip();
  unsigned char buf[1024];
  CHECK_ERROR(fp4_scales_convert(FP4_FORMAT_NVFP4, 4, 64, buf, FP4_LAYOUT_LINEAR, buf + 8, FP4_LAYOUT_128X4),
              FP4_ERR_INVALID_ARGUMENT, "overlap");
  /* The other way round: dst starts first and its 512 bytes run into src. The conversion zeroes dst
   * before copying, so src would be destroyed before it is read. */
  CHECK_ERROR(fp4_scales_convert(FP4_FORMAT_NVFP4, 4, 64, buf + 8, FP4_LAYOUT_LINEAR, buf, FP4_LAYOUT_128X4),
              FP4_ERR_INVALID_ARGUMENT, "overlap");
  /* Adjacent buffers do not overlap: linear [4 x 4] scales end where the 128x4 ones begin. */
  memset(buf, 0x11, 16);
  CHECK(fp4_scales_convert(FP4_FORMAT_NVFP4, 4, 64, buf, FP4_LAYOUT_LINEAR, buf + 16, FP4_LAYOUT_128X4) == FP4_OK,
        "adjacent buffers: %s", fp4_last_error());
  return TEST_SUMMARY();
}
