/* Scale-factor layouts (linear, 128x4, 8x4): sizes, offsets and conversion between them. */
#include <string.h>

#include "core/error.h"
#include "format/codec.h"
#include "format/format.h"
#include "format/matrix_check.h"

int64_t fp4_scale_cols(fp4_format format, int64_t cols) { return cols / fp4_format_block_size(format); }

static fp4_status check_scales(const char *fn, fp4_format format, fp4_scale_layout layout, int64_t rows, int64_t cols) {
  fp4_status st = fp4_check_format_layout(fn, "scales", format, layout);
  if (st) return st;
  if ((st = fp4_check_shape(fn, "matrix", rows, cols))) return st;
  int bs = fp4_format_block_size(format);
  if (cols % bs)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: cols (K = %lld) is not a multiple of the %s block size %d", fn,
                    (long long)cols, fp4_format_name(format), bs);
  return FP4_OK;
}

fp4_status fp4_scales_size(fp4_format format, fp4_scale_layout layout, int64_t rows, int64_t cols, size_t *bytes) {
  fp4_clear_error();
  if (!bytes) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_scales_size: bytes is NULL");
  *bytes = 0;
  fp4_status st = check_scales("fp4_scales_size", format, layout, rows, cols);
  if (st) return st;
  *bytes = (size_t)fp4_layout_bytes((int)layout, rows, fp4_scale_cols(format, cols));
  return FP4_OK;
}

int64_t fp4_scale_offset(fp4_format format, fp4_scale_layout layout, int64_t rows, int64_t cols, int64_t r, int64_t c) {
  fp4_clear_error(); /* as every entry: "" after a call that answers */
  static const char fn[] = "fp4_scale_offset";
  if (check_scales(fn, format, layout, rows, cols)) return -1;
  int64_t C = fp4_scale_cols(format, cols);
  if (r < 0 || r >= rows || c < 0 || c >= C) {
    fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: scale (r, c) = (%lld, %lld) is outside [0, %lld) x [0, %lld)", fn, (long long)r,
             (long long)c, (long long)rows, (long long)C);
    return -1;
  }
  return fp4_layout_offset((int)layout, C, r, c);
}

fp4_status fp4_scales_convert(fp4_format format, int64_t rows, int64_t cols, const void *src, fp4_scale_layout src_layout,
                              void *dst, fp4_scale_layout dst_layout) {
  fp4_clear_error();
  static const char fn[] = "fp4_scales_convert";
  if (!src) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: src is NULL", fn);
  if (!dst) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: dst is NULL", fn);
  /* Two layout arguments: the message says which one is wrong. */
  if (!fp4_layout_name(src_layout))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: src_layout %d is not linear, 128x4 or 8x4", fn, (int)src_layout);
  if (!fp4_layout_name(dst_layout))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: dst_layout %d is not linear, 128x4 or 8x4", fn, (int)dst_layout);
  fp4_status st = check_scales(fn, format, src_layout, rows, cols);
  if (st) return st;
  int64_t C = fp4_scale_cols(format, cols);
  const uint8_t *s = src;
  uint8_t *d = dst;
  size_t dst_bytes = (size_t)fp4_layout_bytes((int)dst_layout, rows, C);
  size_t src_bytes = (size_t)fp4_layout_bytes((int)src_layout, rows, C);
  if ((d < s + src_bytes) && (s < d + dst_bytes))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: src and dst overlap", fn);
  memset(d, 0, dst_bytes);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < C; c++)
      d[fp4_layout_offset((int)dst_layout, C, r, c)] = s[fp4_layout_offset((int)src_layout, C, r, c)];
  return FP4_OK;
}
