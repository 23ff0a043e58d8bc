/* The reference GEMM: operands dequantized exactly to double, products exact in double, double sums;
 * alpha and the multipliers applied once to each sum, rounded to float, then to the output dtype. */
#include <stdlib.h>

#include "backends/ref/ref_gemm.h"
#include "core/error.h"
#include "format/format.h"

enum { REF_B_CHUNK = 64 }; /* rows of B dequantized at a time: bounded memory for any N */

/* The activations as double: dequantized FP4 (W4A4) or converted dense (W4A16). */
static void load_a_rows(const fp4_problem *p, double *dst) {
  if (p->op == FP4_OP_MM) {
    fp4_dequantize_rows_f64(p->a_q, 0, p->a_q->rows, dst);
    return;
  }
  for (int64_t m = 0; m < p->a->rows; m++)
    for (int64_t k = 0; k < p->a->cols; k++) dst[m * p->a->cols + k] = fp4_matrix_get(p->a, m, k);
}

fp4_status fp4_ref_rows_times_weights(const double *a, int64_t M, const fp4_qmatrix *w, double scale, fp4_matrix *out,
                                      int64_t out_row0) {
  const int64_t N = w->rows, K = w->cols;
  double *b = malloc((size_t)REF_B_CHUNK * (size_t)K * sizeof *b);
  if (!b)
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "ref: out of host memory for a %lld x %lld x %lld GEMM", (long long)M,
                    (long long)N, (long long)K);
  for (int64_t n0 = 0; n0 < N; n0 += REF_B_CHUNK) {
    int64_t nb = N - n0 < REF_B_CHUNK ? N - n0 : REF_B_CHUNK;
    fp4_dequantize_rows_f64(w, n0, nb, b);
    for (int64_t m = 0; m < M; m++) {
      const double *ar = a + m * K;
      for (int64_t j = 0; j < nb; j++) {
        const double *br = b + j * K;
        double acc = 0.0;
        for (int64_t k = 0; k < K; k++) acc += ar[k] * br[k];
        fp4_matrix_set(out, out_row0 + m, n0 + j, (float)(acc * scale));
      }
    }
  }
  free(b);
  return FP4_OK;
}

fp4_status fp4_ref_gemm(const fp4_problem *p) {
  const int64_t M = fp4_problem_m(p), N = fp4_problem_n(p), K = fp4_problem_k(p);
  double scale = (double)p->alpha * (double)p->b->multiplier;
  if (p->op == FP4_OP_MM) scale *= (double)p->a_q->multiplier;
  double *a = malloc((size_t)M * (size_t)K * sizeof *a);
  if (!a)
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "ref: out of host memory for a %lld x %lld x %lld GEMM", (long long)M,
                    (long long)N, (long long)K);
  load_a_rows(p, a);
  fp4_status st = fp4_ref_rows_times_weights(a, M, p->b, scale, p->out, 0);
  free(a);
  return st;
}
