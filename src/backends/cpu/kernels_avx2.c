/*
 * AVX2 + FMA + F16C kernels of the cpu backend (f32 arithmetic; bf16 activations are converted to
 * f32 exactly). Compiled with per-function target attributes; called only when the CPU has them.
 *
 * Decoding 8 weight bytes (16 elements, one NVFP4 block or half an MXFP4 block): zero-extend to
 * eight 32-bit lanes, look the magnitude up with vpermps (3 index bits) and move the nibble's sign
 * bit into the float sign; low nibbles give the even elements, high nibbles the odd ones (A is
 * packed in that order, FP4_CPU_ORDER_PAIR16), so each vector holds one block and the scale is one
 * broadcast.
 */
#include "backends/cpu/cpu_kernels.h"

#if FP4_CPU_X86
#include <immintrin.h>
#include <string.h>

#include "format/codec.h"
#include "format/format.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Even (lo) and odd (hi) elements of 8 weight bytes as f32, unscaled. */
T2 INLINE void decode8(const uint8_t *w, __m256 *lo, __m256 *hi) {
  const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
  long long bytes;
  memcpy(&bytes, w, 8);
  __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
  *lo = _mm256_xor_ps(_mm256_permutevar8x32_ps(mag, idx),
                      _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(idx, 28), sign)));
  *hi = _mm256_xor_ps(_mm256_permutevar8x32_ps(mag, _mm256_srli_epi32(idx, 4)),
                      _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(idx, 24), sign)));
}

T2 INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

T2 static void gemv_f32(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1) {
  const int64_t row_bytes = g->k / 2, groups = g->k / 16;
  const float *a = (const float *)g->a + m0 * g->lda;
  const float *stab = g->mx ? fp4_cpu_ue8m0_table() : fp4_cpu_e4m3_table();
  for (int64_t n = n0; n < n1; n++) {
    const uint8_t *w = g->b + n * row_bytes;
    const int64_t base = fp4_cpu_scale_base(g, n);
    __m256 acc[FP4_CPU_GEMV_MAX_M];
    for (int i = 0; i < FP4_CPU_GEMV_MAX_M; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t q = 0; q < groups; q++) {
      int64_t c = g->mx ? q >> 1 : q;
      __m256 s = _mm256_set1_ps(stab[g->bs[base + (c >> 2) * g->gstride + (c & 3)]]);
      __m256 lo, hi;
      if ((q & 7) == 0) _mm_prefetch((const char *)(w + q * 8 + 4096), _MM_HINT_T0); /* streamed once */
      decode8(w + q * 8, &lo, &hi);
      for (int64_t i = 0; i < mr; i++) {
        const float *ap = a + i * g->lda + q * 16;
        __m256 p = _mm256_mul_ps(lo, _mm256_loadu_ps(ap));
        p = _mm256_fmadd_ps(hi, _mm256_loadu_ps(ap + 8), p);
        acc[i] = _mm256_fmadd_ps(p, s, acc[i]);
      }
    }
    for (int64_t i = 0; i < mr; i++) fp4_cpu_store(g, m0 + i, n, hsum8(acc[i]));
  }
}

T2 static void panel_f32(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel) {
  const int64_t row_bytes = g->k / 2, kend = k1 < g->k ? k1 : g->k;
  const float *stab = g->mx ? fp4_cpu_ue8m0_table() : fp4_cpu_e4m3_table();
  for (int64_t r = 0; r < FP4_CPU_NR; r++) {
    float *d = panel + r * g->lda;
    if (r >= nr) {
      memset(d + k0, 0, sizeof(float) * (size_t)(k1 - k0));
      continue;
    }
    const uint8_t *w = g->b + (n0 + r) * row_bytes;
    const int64_t base = fp4_cpu_scale_base(g, n0 + r);
    for (int64_t q = k0 / 16; q < kend / 16; q++) {
      int64_t c = g->mx ? q >> 1 : q;
      __m256 s = _mm256_set1_ps(stab[g->bs[base + (c >> 2) * g->gstride + (c & 3)]]);
      __m256 lo, hi;
      decode8(w + q * 8, &lo, &hi);
      _mm256_storeu_ps(d + q * 16, _mm256_mul_ps(lo, s)); /* exact */
      _mm256_storeu_ps(d + q * 16 + 8, _mm256_mul_ps(hi, s));
    }
    if (kend < k1) memset(d + kend, 0, sizeof(float) * (size_t)(k1 - kend));
  }
}

/* MR x 2 register block (16 ymm registers: 8 accumulators, MR A vectors, 2 B vectors), run for
 * columns 0-1 and 2-3 of the panel; accumulators persist in acc between K blocks. */
T2 INLINE void micro_half(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t n0, int64_t j0, int64_t nr,
                          int64_t k0, int64_t k1, float *acc, int first, int last, const int MR) {
  const float *a = (const float *)g->a + m0 * g->lda;
  const int64_t lda = g->lda;
  __m256 c[FP4_CPU_MR][2];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < 2; j++)
      c[i][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + (i * FP4_CPU_NR + j0 + j) * FP4_CPU_ACC);
  const float *b0 = panel + j0 * lda, *b1 = b0 + lda;
  for (int64_t k = k0; k < k1; k += 8) {
    __m256 x0 = _mm256_loadu_ps(b0 + k), x1 = _mm256_loadu_ps(b1 + k);
    for (int i = 0; i < MR; i++) {
      __m256 av = _mm256_loadu_ps(a + i * lda + k);
      c[i][0] = _mm256_fmadd_ps(av, x0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(av, x1, c[i][1]);
    }
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < 2; j++) {
      if (!last) _mm256_storeu_ps(acc + (i * FP4_CPU_NR + j0 + j) * FP4_CPU_ACC, c[i][j]);
      else if (j0 + j < nr) fp4_cpu_store(g, m0 + i, n0 + j0 + j, hsum8(c[i][j]));
    }
}

T2 static void micro_f32(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                         int64_t k0, int64_t k1, float *acc, int first, int last) {
  for (int64_t j0 = 0; j0 < FP4_CPU_NR; j0 += 2) {
    switch (mr) {
    case 1: micro_half(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 1); break;
    case 2: micro_half(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 2); break;
    case 3: micro_half(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 3); break;
    default: micro_half(g, panel, m0, n0, j0, nr, k0, k1, acc, first, last, 4); break;
    }
  }
}

/* ---- quantization ---------------------------------------------------------------------------------- */

T2 INLINE __m256 load8(const fp4_matrix *x, const void *row, int64_t k) {
  switch (x->dtype) {
  case FP4_DTYPE_BF16:
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k))), 16));
  case FP4_DTYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
  default: return _mm256_loadu_ps((const float *)row + k);
  }
}

T2 INLINE __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* max |x| ignoring NaN lanes (the reference's fmaxf does). */
T2 INLINE __m256 absmax_acc(__m256 m, __m256 v) {
  return _mm256_max_ps(m, _mm256_and_ps(abs8(v), _mm256_cmp_ps(v, v, _CMP_ORD_Q)));
}

/* E2M1 codes of 8 floats (codec.h's decision table), as 32-bit lanes. */
T2 INLINE __m256i encode8(__m256 y) {
  __m256 a = abs8(y);
  __m256i c = _mm256_setzero_si256();
#define FP4_STEP(t, op) c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), op)))
  FP4_STEP(0.25f, _CMP_GT_OQ);
  FP4_STEP(0.75f, _CMP_GE_OQ);
  FP4_STEP(1.25f, _CMP_GT_OQ);
  FP4_STEP(1.75f, _CMP_GE_OQ);
  FP4_STEP(2.5f, _CMP_GT_OQ);
  FP4_STEP(3.5f, _CMP_GE_OQ);
  FP4_STEP(5.0f, _CMP_GT_OQ);
#undef FP4_STEP
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_UNORD_Q));
  __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(y), 31), 3);
  c = _mm256_or_si256(c, _mm256_andnot_si256(nan, sign));
  return _mm256_blendv_epi8(c, _mm256_set1_epi32(7), nan); /* NaN -> +6 */
}

T2 static void quantize_rows(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0, int64_t nrows) {
  const int bs = fp4_format_block_size(out->format);
  const fp4_nvfp4_recipe recipe = fp4_nvfp4_recipe_make(global_scale);
  for (int64_t r = r0; r < r0 + nrows; r++) {
    const void *row = fp4_cpu_dense_row(x, r);
    uint8_t *dst = (uint8_t *)out->data + r * (out->cols / 2);
    for (int64_t c = 0; c < out->cols / bs; c++) {
      __m256 v[4];
      __m256 m = _mm256_setzero_ps();
      for (int i = 0; i < bs / 8; i++) m = absmax_acc(m, v[i] = load8(x, row, c * bs + 8 * i));
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const __m256 vs = _mm256_set1_ps(fp4_cpu_block_scale(out, &recipe, r, c, _mm_cvtss_f32(h)));
      for (int i = 0; i < bs / 8; i++) {
        int32_t codes[8];
        _mm256_storeu_si256((__m256i *)codes, encode8(_mm256_mul_ps(v[i], vs)));
        for (int e = 0; e < 8; e += 2) dst[(c * bs + 8 * i + e) / 2] = (uint8_t)(codes[e] | (codes[e + 1] << 4));
      }
    }
  }
}

static const fp4_cpu_kernels avx2 = {
    .name = "avx2",
    .name_bf16 = "avx2",
    .order_f32 = FP4_CPU_ORDER_PAIR16,
    .order_gemv_bf16 = FP4_CPU_ORDER_PAIR16,
    .gemv_f32 = gemv_f32,
    .gemv_bf16 = NULL,
    .panel_f32 = panel_f32,
    .micro_f32 = micro_f32,
    .quantize_rows = quantize_rows,
};

const fp4_cpu_kernels *fp4_cpu_kernels_avx2(void) { return &avx2; }

#endif
