/* Host-side format helpers shared by the reference and CPU backends (not public). */
#ifndef FP4_FORMAT_FORMAT_H
#define FP4_FORMAT_FORMAT_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element (r, c) of a host dense matrix as float (exact for f32, bf16 and f16). */
float fp4_matrix_get(const fp4_matrix *m, int64_t r, int64_t c);
/* Stores v into element (r, c), rounding to the matrix dtype (round to nearest even). */
void fp4_matrix_set(fp4_matrix *m, int64_t r, int64_t c, float v);

/* Dequantizes rows [r0, r0+nrows) of host q into dst (nrows x q->cols floats, row-major) as
 * e2m1 * block scale, WITHOUT the per-tensor multiplier. Exact, except that e2m1 x an MXFP4 scale
 * of 2^126 or more (up to 6 x 2^127) exceeds a float and becomes inf: fp4_dequantize_rows_f64 holds
 * every value. */
void fp4_dequantize_rows(const fp4_qmatrix *q, int64_t r0, int64_t nrows, float *dst);
void fp4_dequantize_rows_f64(const fp4_qmatrix *q, int64_t r0, int64_t nrows, double *dst);

/* The reference runtime-recipe quantizer on host data (validated arguments). */
void fp4_quantize_rows_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0,
                           int64_t nrows);

/* The whole runtime-recipe quantization of validated host arguments: rows, zeroed scale padding
 * and out->multiplier. */
void fp4_quantize_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out);
/* The same in FP4_ORDER_EXACT (NVFP4 block scales from the encode scale times the block maximum). */
void fp4_quantize_exact_ref(const fp4_matrix *x, float global_scale, fp4_qmatrix *out);
/* Writes zero to every padding byte of q's scale buffer (swizzled layouts). */
void fp4_scales_zero_padding(fp4_qmatrix *q);

/* Scale columns of a matrix: cols / block size. */
int64_t fp4_scale_cols(fp4_format format, int64_t cols);

#ifdef __cplusplus
}
#endif

#endif
