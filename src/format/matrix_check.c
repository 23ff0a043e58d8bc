#include "format/matrix_check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

fp4_status fp4_check_format_layout(const char *fn, const char *name, fp4_format format,
                                   fp4_scale_layout layout) {
  if (!fp4_format_name(format))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s format %d is neither NVFP4 nor MXFP4", fn, name, (int)format);
  if (!fp4_layout_name(layout))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s scale layout %d is not linear, 128x4 or 8x4", fn, name, (int)layout);
  return FP4_OK;
}

fp4_status fp4_check_shape(const char *fn, const char *name, int64_t rows, int64_t cols) {
  if (rows <= 0) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s rows (%lld) must be positive", fn, name, (long long)rows);
  if (cols <= 0) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s cols (%lld) must be positive", fn, name, (long long)cols);
  if (rows > FP4_MAX_DIM || cols > FP4_MAX_DIM)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s shape [%lld, %lld] exceeds the limit 2^31 per dimension", fn, name,
                    (long long)rows, (long long)cols);
  return FP4_OK;
}

fp4_status fp4_check_aligned(const char *fn, const char *name, const void *p, size_t align, const char *what) {
  if (((uintptr_t)p & (align - 1)) == 0) return FP4_OK;
  return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s (%p) is not %zu-byte aligned (%s)", fn, name, p, align, what);
}

fp4_status fp4_check_matrix(const char *fn, const char *name, const fp4_matrix *m) {
  if (!m) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  if (!m->data) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
  fp4_status st = fp4_check_shape(fn, name, m->rows, m->cols);
  if (st) return st;
  if (m->dtype != FP4_DTYPE_F32 && m->dtype != FP4_DTYPE_BF16 && m->dtype != FP4_DTYPE_F16) {
    /* a value cast from an integer has no name: the number is what the caller can find */
    char dtype[16];
    if (fp4_dtype_name(m->dtype)) snprintf(dtype, sizeof dtype, "%s", fp4_dtype_name(m->dtype));
    else snprintf(dtype, sizeof dtype, "%d", (int)m->dtype);
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s dtype %s is not f32, bf16 or f16", fn, name, dtype);
  }
  const size_t esize = fp4_dtype_size(m->dtype);
  if (((uintptr_t)m->data & (esize - 1)) != 0) {
    char what[48], arg[64];
    snprintf(what, sizeof what, "%s elements", fp4_dtype_name(m->dtype));
    snprintf(arg, sizeof arg, "%s->data", name);
    return fp4_check_aligned(fn, arg, m->data, esize, what);
  }
  if (m->ld != 0 && (m->ld < m->cols || m->ld > FP4_MAX_DIM))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s ld (%lld) must be 0 or in [cols (%lld), 2^31]", fn, name,
                    (long long)m->ld, (long long)m->cols);
  if (!fp4_memory_name(m->memory))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s memory %d is neither host nor device", fn, name, (int)m->memory);
  return FP4_OK;
}

fp4_status fp4_check_qmatrix(const char *fn, const char *name, const fp4_qmatrix *q) {
  if (!q) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  if (!q->data) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
  if (!q->scales) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s->scales is NULL", fn, name);
  fp4_status st = fp4_check_format_layout(fn, name, q->format, q->layout);
  if (st) return st;
  if ((st = fp4_check_shape(fn, name, q->rows, q->cols))) return st;
  int bs = fp4_format_block_size(q->format);
  if (q->cols % bs)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s cols (K = %lld) is not a multiple of the %s block size %d", fn, name,
                    (long long)q->cols, fp4_format_name(q->format), bs);
  if (!isfinite(q->multiplier))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s multiplier (%g) is not finite", fn, name, (double)q->multiplier);
  if (!fp4_memory_name(q->memory))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s memory %d is neither host nor device", fn, name, (int)q->memory);
  return FP4_OK;
}

fp4_status fp4_check_quantize_io(const char *fn, const fp4_matrix *x, const fp4_qmatrix *out) {
  fp4_status st = fp4_check_matrix(fn, "x", x);
  if (st) return st;
  /* out->multiplier is written by the call, not read: whatever the caller left there is no error
   * (checked on a copy, so that a call refused here leaves out as it was). */
  fp4_qmatrix produced;
  if (out) {
    produced = *out;
    produced.multiplier = 1.0f;
  }
  if ((st = fp4_check_qmatrix(fn, "out", out ? &produced : NULL))) return st;
  if (out->rows != x->rows || out->cols != x->cols)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: out shape [%lld, %lld] differs from x [%lld, %lld]", fn,
                    (long long)out->rows, (long long)out->cols, (long long)x->rows, (long long)x->cols);
  if (out->memory != x->memory)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: x is in %s memory but out is in %s memory", fn,
                    fp4_memory_name(x->memory), fp4_memory_name(out->memory));
  return FP4_OK;
}

fp4_status fp4_check_global_scale(const char *fn, const char *owner, const char *name, float scale) {
  if (isfinite(scale) && scale > 0.0f && isfinite(1.0f / scale)) return FP4_OK;
  return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                  "%s: %s%s%s (%g) must be finite and positive, with a finite float reciprocal (the multiplier): above %g",
                  fn, owner ? owner : "", owner ? "." : "", name, (double)scale, 1.0 / (double)FLT_MAX);
}
