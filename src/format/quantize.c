/* Reference quantizers (runtime recipe, Model Optimizer recipe) and dequantization on the host.
 * The block arithmetic lives in codec.h so the CPU and CUDA backends execute the same operations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "format/codec.h"
#include "format/format.h"
#include "format/matrix_check.h"

static uint8_t *q_row(const fp4_qmatrix *q, int64_t r) { return (uint8_t *)q->data + r * (q->cols / 2); }

static void quantize_rows_order(const fp4_matrix *x, float global_scale, int order, fp4_qmatrix *out, int64_t r0,
                                int64_t nrows) {
  const int bs = fp4_format_block_size(out->format);
  const int64_t C = fp4_scale_cols(out->format, out->cols);
  const fp4_nvfp4_recipe recipe = fp4_nvfp4_recipe_make_order(global_scale, order);
  uint8_t *scales = out->scales;
  float v[FP4_MXFP4_BLOCK];
  for (int64_t r = r0; r < r0 + nrows; r++) {
    uint8_t *dst = q_row(out, r);
    for (int64_t c = 0; c < C; c++) {
      float vmax = 0.0f;
      for (int i = 0; i < bs; i++) {
        v[i] = fp4_matrix_get(x, r, c * bs + i);
        vmax = fp4_absmax_update(vmax, v[i]);
      }
      float out_scale;
      uint8_t sb = out->format == FP4_FORMAT_NVFP4 ? fp4_nvfp4_block_scale(vmax, recipe, &out_scale)
                                                   : fp4_mxfp4_block_scale(vmax, &out_scale);
      scales[fp4_layout_offset((int)out->layout, C, r, c)] = sb;
      for (int i = 0; i < bs; i += 2) dst[(c * bs + i) / 2] = fp4_e2m1_pack2(v[i], v[i + 1], out_scale);
    }
  }
}

void fp4_quantize_rows_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0, int64_t nrows) {
  quantize_rows_order(x, global_scale, FP4_ORDER_CODE_FLASHINFER, out, r0, nrows);
}

void fp4_scales_zero_padding(fp4_qmatrix *q) {
  const int64_t C = fp4_scale_cols(q->format, q->cols);
  int64_t total = fp4_layout_bytes((int)q->layout, q->rows, C);
  if (total == q->rows * C) return; /* no padding */
  uint8_t *s = q->scales;
  int64_t Rp = total / fp4_round_up(C, 4);
  for (int64_t r = 0; r < Rp; r++)
    for (int64_t c = 0; c < fp4_round_up(C, 4); c++)
      if (r >= q->rows || c >= C) s[fp4_layout_offset((int)q->layout, C, r, c)] = 0;
}

/* Rows [r0, r0 + nrows) of q as e2m1 x scale, into f (float) or, where f is NULL, d (double). The
 * product is exact in double; in float it overflows to inf for MXFP4 scales of 2^126 and up. */
static void dequantize_rows_to(const fp4_qmatrix *q, int64_t r0, int64_t nrows, float *f, double *d) {
  const int bs = fp4_format_block_size(q->format);
  const int64_t C = fp4_scale_cols(q->format, q->cols);
  const uint8_t *scales = q->scales;
  for (int64_t r = r0; r < r0 + nrows; r++) {
    const uint8_t *src = q_row(q, r);
    const int64_t row = (r - r0) * q->cols;
    for (int64_t c = 0; c < C; c++) {
      uint8_t sb = scales[fp4_layout_offset((int)q->layout, C, r, c)];
      float s = q->format == FP4_FORMAT_NVFP4 ? fp4_e4m3_decode_inline(sb) : fp4_ue8m0_decode_inline(sb);
      for (int i = 0; i < bs; i++) {
        const int64_t k = c * bs + i;
        const float e = fp4_e2m1_decode_inline((uint8_t)(src[k / 2] >> (4 * (k & 1))));
        if (f) f[row + k] = e * s;
        else d[row + k] = (double)e * (double)s;
      }
    }
  }
}

void fp4_dequantize_rows(const fp4_qmatrix *q, int64_t r0, int64_t nrows, float *dst) {
  dequantize_rows_to(q, r0, nrows, dst, NULL);
}

void fp4_dequantize_rows_f64(const fp4_qmatrix *q, int64_t r0, int64_t nrows, double *dst) {
  dequantize_rows_to(q, r0, nrows, NULL, dst);
}

/* fp4_quantize_modelopt_version for the public entry fn (its messages name it). */
static fp4_status quantize_modelopt(const char *fn, const fp4_matrix *w, fp4_modelopt_version version, fp4_qmatrix *out,
                                    float *weight_scale_2) {
  fp4_clear_error();
  if (version != FP4_MODELOPT_CURRENT && version != FP4_MODELOPT_0_44)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                    "%s: version %d is neither FP4_MODELOPT_CURRENT (0) nor FP4_MODELOPT_0_44 (1)", fn, (int)version);
  fp4_status st = fp4_check_quantize_io(fn, w, out);
  if (st) return st;
  if (!weight_scale_2) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: weight_scale_2 is NULL", fn);
  if (out->format != FP4_FORMAT_NVFP4)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: out format is %s; the Model Optimizer recipe is NVFP4 only", fn,
                    fp4_format_name(out->format));
  if (w->memory != FP4_MEMORY_HOST)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: runs on host memory only; w is in device memory", fn);

  float amax = 0.0f;
  for (int64_t r = 0; r < w->rows; r++)
    for (int64_t c = 0; c < w->cols; c++) {
      float v = fp4_matrix_get(w, r, c);
      if (!isfinite(v))
        return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: w[%lld, %lld] is %g; weights must be finite", fn, (long long)r,
                        (long long)c, (double)v);
      amax = fp4_absmax_update(amax, v);
    }
  /* The operations and their order are those of Model Optimizer's NVFP4QTensor (nvfp4_tensor.py,
   * get_weights_scaling_factor and quantize): float32 throughout, block scale = amax_block /
   * (6 * weight_scale_2), 0 -> 1, then (0.45 and later) the clamp to [2^-9, 448] of
   * _cast_per_block_scale_to_fp8, then the E4M3 cast (fp4_modelopt_scale_byte); codes of
   * w / (float(scale) * weight_scale_2) with the sign taken from "scaled < 0": -0.0 encodes as +0.
   * Under the 0.44 rule a scale up to 2^-10 is byte 0, so the block gets +-inf -> +-6 for nonzero
   * values and NaN -> 0x7 for zeros, exactly as its searchsorted-based cast does; the clamp makes
   * that impossible. The one deliberate difference: an all-zero tensor (weight_scale_2 = 0), where
   * Model Optimizer divides 0 by 0 and writes NaN scales, gets scale bytes of 1.0 and zero codes. */
  const float ws2 = amax / (6.0f * 448.0f);
  const float ws2_times_6 = 6.0f * ws2;
  const int mo = version == FP4_MODELOPT_0_44 ? FP4_MODELOPT_CODE_0_44 : FP4_MODELOPT_CODE_CURRENT;
  const int64_t C = fp4_scale_cols(FP4_FORMAT_NVFP4, w->cols);
  uint8_t *scales = out->scales;
  for (int64_t r = 0; r < w->rows; r++) {
    uint8_t *dst = q_row(out, r);
    for (int64_t c = 0; c < C; c++) {
      float v[FP4_NVFP4_BLOCK], bmax = 0.0f;
      for (int i = 0; i < FP4_NVFP4_BLOCK; i++) {
        v[i] = fp4_matrix_get(w, r, c * FP4_NVFP4_BLOCK + i);
        bmax = fp4_absmax_update(bmax, v[i]);
      }
      uint8_t sb = fp4_modelopt_scale_byte(ws2 == 0.0f ? 0.0f : bmax / ws2_times_6, mo);
      scales[fp4_layout_offset((int)out->layout, C, r, c)] = sb;
      float denom = fp4_e4m3_decode_inline(sb) * ws2;
      uint8_t codes[FP4_NVFP4_BLOCK];
      for (int i = 0; i < FP4_NVFP4_BLOCK; i++) {
        float scaled = v[i] / denom;
        codes[i] = ws2 == 0.0f || scaled == 0.0f ? 0 : fp4_e2m1_encode_inline(scaled);
      }
      for (int i = 0; i < FP4_NVFP4_BLOCK; i += 2)
        dst[(c * FP4_NVFP4_BLOCK + i) / 2] = (uint8_t)(codes[i] | (codes[i + 1] << 4));
    }
  }
  fp4_scales_zero_padding(out);
  out->multiplier = ws2;
  *weight_scale_2 = ws2;
  return FP4_OK;
}

fp4_status fp4_quantize_modelopt_version(const fp4_matrix *w, fp4_modelopt_version version, fp4_qmatrix *out,
                                         float *weight_scale_2) {
  return quantize_modelopt("fp4_quantize_modelopt_version", w, version, out, weight_scale_2);
}

fp4_status fp4_quantize_modelopt(const fp4_matrix *w, fp4_qmatrix *out, float *weight_scale_2) {
  return quantize_modelopt("fp4_quantize_modelopt", w, FP4_MODELOPT_CURRENT, out, weight_scale_2);
}

fp4_status fp4_dequantize(const fp4_qmatrix *q, fp4_matrix *out) {
  fp4_clear_error();
  static const char fn[] = "fp4_dequantize";
  fp4_status st = fp4_check_qmatrix(fn, "q", q);
  if (st) return st;
  if ((st = fp4_check_matrix(fn, "out", out))) return st;
  if (out->rows != q->rows || out->cols != q->cols)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: out shape [%lld, %lld] differs from q [%lld, %lld]", fn,
                    (long long)out->rows, (long long)out->cols, (long long)q->rows, (long long)q->cols);
  if (q->memory != FP4_MEMORY_HOST || out->memory != FP4_MEMORY_HOST)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: runs on host memory only", fn);
  double *row = malloc((size_t)q->cols * sizeof *row);
  if (!row) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  for (int64_t r = 0; r < q->rows; r++) {
    fp4_dequantize_rows_f64(q, r, 1, row);
    /* exact product, rounded to f32, then to the output dtype (as the reference GEMM rounds) */
    for (int64_t c = 0; c < q->cols; c++) fp4_matrix_set(out, r, c, (float)(row[c] * (double)q->multiplier));
  }
  free(row);
  return FP4_OK;
}

static void quantize_all(const fp4_matrix *x, float global_scale, int order, fp4_qmatrix *out) {
  quantize_rows_order(x, global_scale, order, out, 0, x->rows);
  fp4_scales_zero_padding(out);
  out->multiplier = out->format == FP4_FORMAT_NVFP4 ? 1.0f / global_scale : 1.0f;
}

void fp4_quantize_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out) {
  quantize_all(x, global_scale, FP4_ORDER_CODE_FLASHINFER, out);
}

void fp4_quantize_exact_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out) {
  quantize_all(x, global_scale, FP4_ORDER_CODE_EXACT, out);
}
