/* Public wrappers of the inline codecs, names of enums and bulk conversion. */
#include <stdbool.h>

#include "core/error.h"
#include "format/codec.h"
#include "format/format.h"
#include "format/matrix_check.h"

uint8_t fp4_e2m1_encode(float x) { return fp4_e2m1_encode_inline(x); }
float fp4_e2m1_decode(uint8_t code) { return fp4_e2m1_decode_inline(code); }
uint8_t fp4_e4m3_encode(float x) { return fp4_e4m3_encode_inline(x); }
float fp4_e4m3_decode(uint8_t code) { return fp4_e4m3_decode_inline(code); }
uint8_t fp4_ue8m0_encode(float x) { return fp4_ue8m0_encode_inline(x); }
float fp4_ue8m0_decode(uint8_t code) { return fp4_ue8m0_decode_inline(code); }
uint16_t fp4_bf16_from_f32(float x) { return fp4_bf16_from_f32_inline(x); }
float fp4_bf16_to_f32(uint16_t bits) { return fp4_bf16_to_f32_inline(bits); }
uint16_t fp4_f16_from_f32(float x) { return fp4_f16_from_f32_inline(x); }
float fp4_f16_to_f32(uint16_t bits) { return fp4_f16_to_f32_inline(bits); }

int fp4_format_block_size(fp4_format format) {
  switch (format) {
  case FP4_FORMAT_NVFP4: return FP4_NVFP4_BLOCK;
  case FP4_FORMAT_MXFP4: return FP4_MXFP4_BLOCK;
  }
  return 0;
}

const char *fp4_format_name(fp4_format format) {
  switch (format) {
  case FP4_FORMAT_NVFP4: return "nvfp4";
  case FP4_FORMAT_MXFP4: return "mxfp4";
  }
  return NULL;
}

const char *fp4_layout_name(fp4_scale_layout layout) {
  switch (layout) {
  case FP4_LAYOUT_LINEAR: return "linear";
  case FP4_LAYOUT_128X4: return "128x4";
  case FP4_LAYOUT_8X4: return "8x4";
  }
  return NULL;
}

const char *fp4_dtype_name(fp4_dtype dtype) {
  switch (dtype) {
  case FP4_DTYPE_F32: return "f32";
  case FP4_DTYPE_BF16: return "bf16";
  case FP4_DTYPE_F16: return "f16";
  case FP4_DTYPE_E2M1X2: return "e2m1x2";
  case FP4_DTYPE_E4M3: return "e4m3";
  case FP4_DTYPE_UE8M0: return "ue8m0";
  }
  return NULL;
}

const char *fp4_memory_name(fp4_memory memory) {
  switch (memory) {
  case FP4_MEMORY_HOST: return "host";
  case FP4_MEMORY_DEVICE: return "device";
  }
  return NULL;
}

size_t fp4_dtype_size(fp4_dtype dtype) {
  switch (dtype) {
  case FP4_DTYPE_F32: return 4;
  case FP4_DTYPE_BF16:
  case FP4_DTYPE_F16: return 2;
  case FP4_DTYPE_E2M1X2:
  case FP4_DTYPE_E4M3:
  case FP4_DTYPE_UE8M0: return 1;
  }
  return 0;
}

static float load_scalar(const void *src, fp4_dtype t, size_t i) {
  switch (t) {
  case FP4_DTYPE_F32: return ((const float *)src)[i];
  case FP4_DTYPE_BF16: return fp4_bf16_to_f32_inline(((const uint16_t *)src)[i]);
  case FP4_DTYPE_F16: return fp4_f16_to_f32_inline(((const uint16_t *)src)[i]);
  case FP4_DTYPE_E4M3: return fp4_e4m3_decode_inline(((const uint8_t *)src)[i]);
  case FP4_DTYPE_UE8M0: return fp4_ue8m0_decode_inline(((const uint8_t *)src)[i]);
  case FP4_DTYPE_E2M1X2: return fp4_e2m1_decode_inline((uint8_t)(((const uint8_t *)src)[i / 2] >> (4 * (i & 1))));
  }
  return 0.0f;
}

static void store_scalar(void *dst, fp4_dtype t, size_t i, float v) {
  switch (t) {
  case FP4_DTYPE_F32: ((float *)dst)[i] = v; break;
  case FP4_DTYPE_BF16: ((uint16_t *)dst)[i] = fp4_bf16_from_f32_inline(v); break;
  case FP4_DTYPE_F16: ((uint16_t *)dst)[i] = fp4_f16_from_f32_inline(v); break;
  case FP4_DTYPE_E4M3: ((uint8_t *)dst)[i] = fp4_e4m3_encode_inline(v); break;
  case FP4_DTYPE_UE8M0: ((uint8_t *)dst)[i] = fp4_ue8m0_encode_inline(v); break;
  case FP4_DTYPE_E2M1X2: {
    uint8_t *p = (uint8_t *)dst + i / 2;
    uint8_t code = fp4_e2m1_encode_inline(v);
    *p = (i & 1) ? (uint8_t)((*p & 0x0F) | (code << 4)) : (uint8_t)((*p & 0xF0) | code);
    break;
  }
  }
}

fp4_status fp4_convert(const void *src, fp4_dtype src_dtype, void *dst, fp4_dtype dst_dtype, size_t n) {
  fp4_clear_error();
  if (!src) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_convert: src is NULL");
  if (!dst) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_convert: dst is NULL");
  if (!fp4_dtype_name(src_dtype)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_convert: src_dtype %d is not an fp4_dtype", (int)src_dtype);
  if (!fp4_dtype_name(dst_dtype)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_convert: dst_dtype %d is not an fp4_dtype", (int)dst_dtype);
  bool e2m1_in = src_dtype == FP4_DTYPE_E2M1X2, e2m1_out = dst_dtype == FP4_DTYPE_E2M1X2;
  if ((e2m1_in && dst_dtype != FP4_DTYPE_F32) || (e2m1_out && src_dtype != FP4_DTYPE_F32))
    return fp4_fail(FP4_ERR_UNSUPPORTED, "fp4_convert: e2m1x2 converts only to or from f32 (asked %s -> %s)",
                    fp4_dtype_name(src_dtype), fp4_dtype_name(dst_dtype));
  if (e2m1_out && (n & 1))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_convert: n (%zu) must be even to pack e2m1x2", n);
  /* The elements are read and written as typed values (f32, 16-bit): each array aligned to its own. */
  fp4_status st = fp4_check_aligned("fp4_convert", "src", src, fp4_dtype_size(src_dtype), "src_dtype elements");
  if (st || (st = fp4_check_aligned("fp4_convert", "dst", dst, fp4_dtype_size(dst_dtype), "dst_dtype elements")))
    return st;
  for (size_t i = 0; i < n; i++) store_scalar(dst, dst_dtype, i, load_scalar(src, src_dtype, i));
  return FP4_OK;
}

float fp4_matrix_get(const fp4_matrix *m, int64_t r, int64_t c) {
  int64_t ld = m->ld ? m->ld : m->cols;
  return load_scalar(m->data, m->dtype, (size_t)(r * ld + c));
}

void fp4_matrix_set(fp4_matrix *m, int64_t r, int64_t c, float v) {
  int64_t ld = m->ld ? m->ld : m->cols;
  store_scalar(m->data, m->dtype, (size_t)(r * ld + c), v);
}
