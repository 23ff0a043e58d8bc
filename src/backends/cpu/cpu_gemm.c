/* The cpu backend's GEMM (W4A4, W4A16) and quantization of one problem: operand packing and the
 * split of the work over the thread pool; the kernels live in kernels_<level>.c (cpu_kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"
#include "core/error.h"
#include "format/codec.h"
#include "format/format.h"

/* ---- quantization ------------------------------------------------------------------------------ */

typedef struct quant_job {
  const fp4_cpu_kernels *k;
  const fp4_matrix *x;
  float gsf;
  fp4_qmatrix *out;
  int64_t rows_per_unit;
} quant_job;

static void quant_unit(void *arg, int64_t unit, int thread) {
  (void)thread;
  quant_job *j = arg;
  int64_t r0 = unit * j->rows_per_unit, nr = j->x->rows - r0 < j->rows_per_unit ? j->x->rows - r0 : j->rows_per_unit;
  j->k->quantize_rows(j->x, j->gsf, j->out, r0, nr);
}

void fp4_cpu_quantize_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p) {
  /* About 64 KiB of input per unit: enough to amortize the hand-out, small enough to balance. */
  int64_t rpu = (65536 / 4) / p->a->cols;
  if (rpu < 1) rpu = 1;
  quant_job j = {k, p->a, p->global_scale, p->q_out, rpu};
  fp4_cpu_parallel(threads, (p->a->rows + rpu - 1) / rpu, quant_unit, &j);
  fp4_scales_zero_padding(p->q_out);
  p->q_out->multiplier = p->q_out->format == FP4_FORMAT_NVFP4 ? 1.0f / p->global_scale : 1.0f;
}

/* ---- GEMM ---------------------------------------------------------------------------------------- */

typedef struct gemm_job {
  const fp4_cpu_kernels *k;
  const fp4_problem *p;
  fp4_cpu_gemm g;
  int bf16;             /* packed A and kernels in bf16 (exact) rather than f32            */
  int small;            /* the streaming (gemv) path                                       */
  fp4_cpu_order order;
  void *a_packed;
  unsigned char *scratch; /* per thread: one decoded panel, then the tile's accumulators     */
  size_t scratch_stride, panel_bytes;
  int64_t rows_per_pack_unit;
  uint8_t src[FP4_CPU_KALIGN]; /* the packed order's source index within each 128-element chunk */
  int64_t n_per_unit;   /* gemv: weight rows per unit                                      */
  int64_t npanels, mtiles;
} gemm_job;

/* Converts rows of A (dense W4A16 operand, or W4A4 codes dequantized exactly) to the packed order. */
static void pack_unit(void *arg, int64_t unit, int thread) {
  (void)thread;
  gemm_job *j = arg;
  const fp4_problem *p = j->p;
  const int64_t K = j->g.k, kp = j->g.kp, lda = j->g.lda;
  float *row = (float *)(j->scratch + (size_t)thread * j->scratch_stride);
  int64_t r0 = unit * j->rows_per_pack_unit;
  int64_t r1 = r0 + j->rows_per_pack_unit < j->g.m ? r0 + j->rows_per_pack_unit : j->g.m;
  for (int64_t r = r0; r < r1; r++) {
    if (p->op == FP4_OP_MM) {
      fp4_dequantize_rows(p->a_q, r, 1, row);
    } else {
      const fp4_matrix *a = p->a;
      const int64_t ld = a->ld ? a->ld : a->cols;
      if (a->dtype == FP4_DTYPE_F32) {
        memcpy(row, (const float *)a->data + r * ld, (size_t)K * sizeof *row);
      } else if (a->dtype == FP4_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)a->data + r * ld;
        for (int64_t k = 0; k < K; k++) row[k] = fp4_bf16_to_f32_inline(s[k]);
      } else {
        const uint16_t *s = (const uint16_t *)a->data + r * ld;
        for (int64_t k = 0; k < K; k++) row[k] = fp4_f16_to_f32_inline(s[k]);
      }
    }
    for (int64_t k = K; k < kp; k++) row[k] = 0.0f;
    if (j->bf16) {
      /* Exact: bf16 activations round-trip, and dequantized E2M1 x E4M3/UE8M0 values need at most
       * 6 significant bits. */
      uint16_t *d = (uint16_t *)j->a_packed + r * lda;
      for (int64_t c = 0; c < kp; c += FP4_CPU_KALIGN)
        for (int q = 0; q < FP4_CPU_KALIGN; q++) d[c + q] = fp4_bf16_from_f32_inline(row[c + j->src[q]]);
    } else {
      float *d = (float *)j->a_packed + r * lda;
      for (int64_t c = 0; c < kp; c += FP4_CPU_KALIGN)
        for (int q = 0; q < FP4_CPU_KALIGN; q++) d[c + q] = row[c + j->src[q]];
    }
  }
}

/* Whether the M rows of p's activations (W4A4 codes, or bf16) may hold a nonzero value below 2^e
 * in magnitude (e > -127). W4A4 values are e2m1 (0.5 and up) x scale: only UE8M0 scales reach that
 * low, and a scale byte below 128 + e is counted whatever its codes. A bf16 value is below 2^e where
 * its exponent field is below 127 + e; the loop has no exit so that it vectorizes. */
static int activations_below(const fp4_problem *p, int64_t M, int64_t K, int e) {
  if (p->op == FP4_OP_MM) {
    const fp4_qmatrix *q = p->a_q;
    if (q->format != FP4_FORMAT_MXFP4) return 0; /* E4M3 scales: 0.5 x 2^-9 at the least */
    const int64_t C = fp4_scale_cols(q->format, K);
    const uint8_t *s = q->scales;
    for (int64_t r = 0; r < M; r++)
      for (int64_t c = 0; c < C; c++)
        if (s[fp4_layout_offset((int)q->layout, C, r, c)] < 128 + e) return 1;
    return 0;
  }
  const uint16_t below = (uint16_t)((127 + e) << 7);
  unsigned tiny = 0;
  for (int64_t r = 0; r < M; r++) {
    const uint16_t *s = fp4_cpu_dense_row(p->a, r);
    for (int64_t k = 0; k < K; k++) tiny |= (uint16_t)((s[k] & 0x7FFF) - 1) < (uint16_t)(below - 1);
  }
  return tiny != 0;
}

static void gemv_unit(void *arg, int64_t unit, int thread) {
  (void)thread;
  gemm_job *j = arg;
  int64_t n0 = unit * j->n_per_unit, n1 = n0 + j->n_per_unit < j->g.n ? n0 + j->n_per_unit : j->g.n;
  for (int64_t m0 = 0; m0 < j->g.m; m0 += FP4_CPU_GEMV_MAX_M) {
    int64_t mr = j->g.m - m0 < FP4_CPU_GEMV_MAX_M ? j->g.m - m0 : FP4_CPU_GEMV_MAX_M;
    if (j->bf16) j->k->gemv_bf16(&j->g, m0, mr, n0, n1);
    else j->k->gemv_f32(&j->g, m0, mr, n0, n1);
  }
}

/* Asks for the weight bytes of elements [k0, k1) of panel pi's rows ahead of their decode. The
 * panel path's weight reads hop between rows (a K block of six rows, then the next panel's), which
 * the hardware prefetchers did not follow: one thread at M = 16 on 28672 x 4096 ran 30 Gprod/s
 * against 37 with the weights in cache (bench/results/cpu/2026-12-04-avx2-m4-m16). */
static void prefetch_panel(const fp4_cpu_gemm *g, int64_t pi, int64_t k0, int64_t k1) {
#if defined(__GNUC__)
  const int64_t row_bytes = g->k / 2, b0 = k0 / 2, b1 = (k1 < g->k ? k1 : g->k) / 2;
  const int64_t n0 = pi * FP4_CPU_NR, n1 = n0 + FP4_CPU_NR < g->n ? n0 + FP4_CPU_NR : g->n;
  for (int64_t n = n0; n < n1; n++)
    for (int64_t o = b0; o < b1; o += 64) __builtin_prefetch(g->b + n * row_bytes + o, 0, 3);
#else
  (void)g, (void)pi, (void)k0, (void)k1;
#endif
}

static void panel_unit(void *arg, int64_t unit, int thread) {
  gemm_job *j = arg;
  const int64_t ngroups = (j->npanels + FP4_CPU_PANELS - 1) / FP4_CPU_PANELS;
  const int64_t mt = unit / ngroups, p0 = (unit % ngroups) * FP4_CPU_PANELS;
  const int64_t p1 = p0 + FP4_CPU_PANELS < j->npanels ? p0 + FP4_CPU_PANELS : j->npanels;
  const int64_t m0 = mt * FP4_CPU_MTILE, m1 = m0 + FP4_CPU_MTILE < j->g.m ? m0 + FP4_CPU_MTILE : j->g.m;
  const size_t panel_floats = j->panel_bytes / FP4_CPU_PANELS / sizeof(float);
  const size_t acc_floats = (size_t)FP4_CPU_MTILE * FP4_CPU_NR * FP4_CPU_ACC;
  unsigned char *mine = j->scratch + (size_t)thread * j->scratch_stride;
  float *panels = (float *)mine;
  float *accs = (float *)(mine + j->panel_bytes);
  /* K blocks outermost: each K block of the group's panels is decoded, then the tile's A slice
   * (in L2) passes over every panel slice (in L1) in turn, so A is read from memory once per
   * group rather than once per panel. */
  for (int64_t k0 = 0; k0 < j->g.kp; k0 += FP4_CPU_KC) {
    int64_t k1 = k0 + FP4_CPU_KC < j->g.kp ? k0 + FP4_CPU_KC : j->g.kp;
    for (int64_t pi = p0; pi < p1; pi++) {
      int64_t n0 = pi * FP4_CPU_NR, nr = j->g.n - n0 < FP4_CPU_NR ? j->g.n - n0 : FP4_CPU_NR;
      float *panel = panels + (size_t)(pi - p0) * panel_floats;
      float *acc = accs + (size_t)(pi - p0) * acc_floats;
      /* the weights decoded next: the next panel's K block, or the group's first at the next one */
      if (pi + 1 < p1) prefetch_panel(&j->g, pi + 1, k0, k1);
      else if (k1 < j->g.kp) prefetch_panel(&j->g, p0, k1, k1 + FP4_CPU_KC < j->g.kp ? k1 + FP4_CPU_KC : j->g.kp);
      j->k->panel_f32(&j->g, n0, nr, k0, k1, panel);
      for (int64_t m = m0; m < m1; m += FP4_CPU_MR) {
        int64_t mr = m1 - m < FP4_CPU_MR ? m1 - m : FP4_CPU_MR;
        float *a = acc + (m - m0) * FP4_CPU_NR * FP4_CPU_ACC;
        j->k->micro_f32(&j->g, panel, m, mr, n0, nr, k0, k1, a, k0 == 0, k1 == j->g.kp);
      }
    }
  }
}

fp4_status fp4_cpu_gemm_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config,
                                size_t config_size) {
  return fp4_cpu_gemm_problem_scaled(k, threads, p, 1.0, config, config_size);
}

fp4_status fp4_cpu_gemm_problem_scaled(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, double a_scale,
                                       char *config, size_t config_size) {
  gemm_job j;
  memset(&j, 0, sizeof j);
  j.k = k;
  j.p = p;
  const fp4_qmatrix *b = p->b;
  fp4_cpu_gemm *g = &j.g;
  g->m = fp4_problem_m(p);
  g->n = b->rows;
  g->k = b->cols;
  g->kp = fp4_round_up(g->k, FP4_CPU_KALIGN);
  g->b = b->data;
  g->bs = b->scales;
  g->mx = b->format == FP4_FORMAT_MXFP4;
  g->c = fp4_scale_cols(b->format, b->cols);
  g->layout = (int)b->layout;
  g->gstride = b->layout == FP4_LAYOUT_128X4 ? 512 : b->layout == FP4_LAYOUT_8X4 ? 32 : 4;
  double scale = (double)p->alpha * (double)b->multiplier;
  if (p->op == FP4_OP_MM) scale *= (double)p->a_q->multiplier;
  g->scale = scale * a_scale;
  g->out = p->out;

  j.small = g->m <= FP4_CPU_GEMV_MAX_M;
  /* The streaming kernels read at most 4 rows of A at once and ran 0.80-0.97x as fast with
   * padded rows (bench/results/cpu/2026-12-04-avx2-m4-m16): only the panel path pads. */
  g->lda = j.small ? g->kp : g->kp + FP4_CPU_ROWPAD;
  int bf16_input = p->op == FP4_OP_MM || p->a->dtype == FP4_DTYPE_BF16;
  j.bf16 = bf16_input && j.small && k->gemv_bf16 != NULL;
  if (j.bf16 && k->gemv_bf16_min_exp) j.bf16 = !activations_below(p, g->m, g->k, k->gemv_bf16_min_exp);
  j.order = j.bf16 ? k->order_gemv_bf16 : k->order_f32;

  /* Scratch per thread: one f32 row of A while packing; for the panel path, FP4_CPU_PANELS decoded
   * panels (FP4_CPU_NR rows lda apart; only the current K block of each is touched) and their
   * accumulators for a tile. */
  const size_t one_panel = ((size_t)FP4_CPU_NR * (size_t)g->lda * sizeof(float) + 63) & ~(size_t)63;
  j.panel_bytes = j.small ? one_panel : FP4_CPU_PANELS * one_panel;
  j.scratch_stride = j.panel_bytes;
  if (!j.small) j.scratch_stride += (size_t)FP4_CPU_PANELS * FP4_CPU_MTILE * FP4_CPU_NR * FP4_CPU_ACC * sizeof(float);
  size_t a_bytes = (size_t)g->m * (size_t)g->lda * (j.bf16 ? 2 : 4);
  a_bytes = (a_bytes + 63) & ~(size_t)63;
  unsigned char *mem = aligned_alloc(64, a_bytes + j.scratch_stride * (size_t)threads);
  if (!mem)
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "cpu: out of host memory for %zu bytes of packed operands",
                    a_bytes + j.scratch_stride * (size_t)threads);
  j.a_packed = mem;
  j.scratch = mem + a_bytes;
  g->a = j.a_packed;

  j.rows_per_pack_unit = 8;
  for (int q = 0; q < FP4_CPU_KALIGN; q++) j.src[q] = (uint8_t)fp4_cpu_order_source(j.order, q);
  fp4_cpu_parallel(threads, (g->m + 7) / 8, pack_unit, &j);

  const char *kname;
  if (j.small) {
    /* A few long contiguous ranges per thread: each thread streams its weights (and the prefetches
     * run ahead within them) instead of hopping between small pieces; 8 per thread still balance a
     * machine where other work steals time. */
    int64_t per = (g->n + 8 * threads - 1) / (8 * threads);
    j.n_per_unit = per;
    fp4_cpu_parallel(threads, (g->n + per - 1) / per, gemv_unit, &j);
    kname = j.bf16 ? "gemv_bf16" : "gemv_f32";
  } else {
    j.npanels = (g->n + FP4_CPU_NR - 1) / FP4_CPU_NR;
    j.mtiles = (g->m + FP4_CPU_MTILE - 1) / FP4_CPU_MTILE;
    fp4_cpu_parallel(threads, (j.npanels + FP4_CPU_PANELS - 1) / FP4_CPU_PANELS * j.mtiles, panel_unit, &j);
    kname = bf16_input ? "gemm_bf16" : "gemm_f32";
  }
  free(mem);
  snprintf(config, config_size, "%s:%s,%dt", kname, j.bf16 ? k->name_bf16 : k->name, threads);
  return FP4_OK;
}
