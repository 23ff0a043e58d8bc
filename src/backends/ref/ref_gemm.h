/* The reference GEMM (ref_gemm.c): the oracle's dense problems, and the row-block product its grouped
 * GEMM and MoE layer (ref_moe.c) are built on. */
#ifndef FP4_BACKENDS_REF_GEMM_H
#define FP4_BACKENDS_REF_GEMM_H

#include "dispatch/backend.h"

/* out[out_row0 + m, n] = dtype(float(scale * sum_k a[m, k] * dq(w)[n, k])) for m < M, n < w->rows:
 * a is M x w->cols doubles, w a host quantized matrix (its multiplier NOT applied: fold it into scale),
 * products and sums in double. */
fp4_status fp4_ref_rows_times_weights(const double *a, int64_t M, const fp4_qmatrix *w, double scale, fp4_matrix *out,
                                      int64_t out_row0);

/* One FP4_OP_MM / FP4_OP_MM_W4A16 problem on host memory. */
fp4_status fp4_ref_gemm(const fp4_problem *p);

#endif
