/* Generic C kernels of the cpu backend: run on any CPU, natural element order. They are also the
 * baseline the SIMD levels are tested against. */
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "format/format.h"

/* Sum over one block: e2m1 codes of weight bytes times activations, in element order. */
static float block_dot(const uint8_t *w, const float *a, int bs) {
  float s = 0.0f;
  for (int i = 0; i < bs; i += 2) {
    s += a[i] * fp4_cpu_e2m1_values[w[i / 2] & 15];
    s += a[i + 1] * fp4_cpu_e2m1_values[w[i / 2] >> 4];
  }
  return s;
}

static void gemv_f32(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1) {
  const int bs = g->mx ? 32 : 16;
  const float *a = g->a;
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t *w = g->b + n * (g->k / 2);
    for (int64_t m = m0; m < m0 + mr; m++) {
      const float *ar = a + m * g->lda;
      float acc = 0.0f;
      for (int64_t c = 0; c < g->c; c++) acc += block_dot(w + c * bs / 2, ar + c * bs, bs) * fp4_cpu_scale_value(g, n, c);
      fp4_cpu_store(g, m, n, acc);
    }
  }
}

static void panel_f32(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel) {
  const int bs = g->mx ? 32 : 16;
  const int64_t kend = k1 < g->k ? k1 : g->k;
  for (int64_t r = 0; r < FP4_CPU_NR; r++) {
    float *d = panel + r * g->lda;
    memset(d + k0, 0, sizeof(float) * (size_t)(k1 - k0));
    if (r >= nr) continue;
    const uint8_t *w = g->b + (n0 + r) * (g->k / 2);
    for (int64_t c = k0 / bs; c < kend / bs; c++) {
      float s = fp4_cpu_scale_value(g, n0 + r, c);
      for (int i = 0; i < bs; i += 2) {
        uint8_t byte = w[(c * bs + i) / 2];
        d[c * bs + i] = fp4_cpu_e2m1_values[byte & 15] * s; /* exact */
        d[c * bs + i + 1] = fp4_cpu_e2m1_values[byte >> 4] * s;
      }
    }
  }
}

static void micro_f32(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                      int64_t k0, int64_t k1, float *acc, int first, int last) {
  const float *a = g->a;
  for (int64_t m = m0; m < m0 + mr; m++) {
    const float *ar = a + m * g->lda;
    for (int64_t r = 0; r < FP4_CPU_NR; r++) {
      const float *br = panel + r * g->lda;
      /* four partial sums: a fixed order the compiler may vectorize */
      float *s = acc + ((m - m0) * FP4_CPU_NR + r) * FP4_CPU_ACC;
      if (first) s[0] = s[1] = s[2] = s[3] = 0.0f;
      for (int64_t k = k0; k < k1; k += 4)
        for (int i = 0; i < 4; i++) s[i] += ar[k + i] * br[k + i];
      if (last && r < nr) fp4_cpu_store(g, m, n0 + r, (s[0] + s[1]) + (s[2] + s[3]));
    }
  }
}

static const fp4_cpu_kernels generic = {
    .name = "generic",
    .name_bf16 = "generic",
    .order_f32 = FP4_CPU_ORDER_NATURAL,
    .order_gemv_bf16 = FP4_CPU_ORDER_NATURAL,
    .gemv_f32 = gemv_f32,
    .gemv_bf16 = NULL,
    .panel_f32 = panel_f32,
    .micro_f32 = micro_f32,
    .quantize_rows = fp4_quantize_rows_ref,
};

const fp4_cpu_kernels *fp4_cpu_kernels_generic(void) { return &generic; }

#if !defined(__aarch64__)
/* The NEON level has no kernels yet (kernels_neon.c is compiled on aarch64 only). */
const fp4_cpu_kernels *fp4_cpu_kernels_neon(void) { return NULL; }
#endif
#if !FP4_CPU_X86
const fp4_cpu_kernels *fp4_cpu_kernels_avx2(void) { return NULL; }
const fp4_cpu_kernels *fp4_cpu_kernels_avx512(void) { return NULL; }
#endif
