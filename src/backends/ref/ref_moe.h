/* The reference grouped GEMM and MoE layer (ref_moe.c) and the GEMM core they share with the
 * reference backend (ref_backend.c). */
#ifndef FP4_BACKENDS_REF_MOE_H
#define FP4_BACKENDS_REF_MOE_H

#include "dispatch/backend.h"

/* out[out_row0 + m, n] = dtype(float(scale * sum_k a[m, k] * dq(w)[n, k])) for m < M, n < w->rows:
 * a is M x w->cols floats, w a host quantized matrix (its multiplier NOT applied: fold it into scale),
 * products and sums in double. */
fp4_status fp4_ref_rows_times_weights(const float *a, int64_t M, const fp4_qmatrix *w, double scale, fp4_matrix *out,
                                      int64_t out_row0);

fp4_status fp4_ref_grouped_mm(const fp4_problem *p);
fp4_status fp4_ref_moe(const fp4_problem *p);

#endif
