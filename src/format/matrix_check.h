/* Checks of the public matrix descriptions (format, scale layout, shape, dtype, memory) shared by
 * every public entry point: each failure names the function and the argument in fp4_last_error(). */
#ifndef FP4_FORMAT_MATRIX_CHECK_H
#define FP4_FORMAT_MATRIX_CHECK_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest rows or cols accepted: keeps every byte count of a matrix inside int64 and size_t. */
#define FP4_MAX_DIM ((int64_t)1 << 31)

fp4_status fp4_check_format_layout(const char *fn, const char *name, fp4_format format,
                                   fp4_scale_layout layout);
fp4_status fp4_check_shape(const char *fn, const char *name, int64_t rows, int64_t cols);
/* FP4_OK when p (the pointer the argument name holds) is a multiple of align bytes (a power of two);
 * otherwise FP4_ERR_INVALID_ARGUMENT naming fn, name and what the alignment is for ("its f32
 * elements"). Every backend reads typed elements through such pointers, so the rule is checked once
 * here rather than left to each backend (a host backend would read misaligned memory). */
fp4_status fp4_check_aligned(const char *fn, const char *name, const void *p, size_t align, const char *what);
/* A dense matrix: data not NULL and aligned to its element size, shape, dtype, ld, memory. */
fp4_status fp4_check_matrix(const char *fn, const char *name, const fp4_matrix *m);
/* Checks a quantized matrix; data is checked for read (scales may be written by quantize). */
fp4_status fp4_check_qmatrix(const char *fn, const char *name, const fp4_qmatrix *q);

/* Checks an NVFP4 global (activation) scale: finite, positive, and with a finite float reciprocal
 * (the quantized matrix's multiplier), which excludes scales below about 2.9e-39. The argument is
 * named owner.name (owner NULL: name), the text made only on failure. */
fp4_status fp4_check_global_scale(const char *fn, const char *owner, const char *name, float scale);

/* Checks a quantize call: x dense, out quantized (its multiplier, an output, is not checked), same
 * shape and memory. */
fp4_status fp4_check_quantize_io(const char *fn, const fp4_matrix *x, const fp4_qmatrix *out);

#ifdef __cplusplus
}
#endif

#endif
