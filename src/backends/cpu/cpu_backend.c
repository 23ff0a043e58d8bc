/*
 * The cpu backend: FP4 GEMM (W4A4, W4A16) and runtime-recipe quantization on the host with SIMD
 * kernels chosen at run time (generic C, AVX2, AVX-512 with BF16 dot products) and a thread pool.
 * This file holds the backend table, the operand preparation and the work split; the kernels live
 * in kernels_<level>.c (cpu_kernels.h describes the scheme).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_moe.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "format/codec.h"
#include "format/format.h"

/* ---- shared helpers of the kernels ------------------------------------------------------------ */

const float fp4_cpu_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static float e4m3_table[256], ue8m0_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
  for (int i = 0; i < 256; i++) {
    e4m3_table[i] = fp4_e4m3_decode_inline((uint8_t)i);
    ue8m0_table[i] = fp4_ue8m0_decode_inline((uint8_t)i);
  }
}

const float *fp4_cpu_e4m3_table(void) {
  pthread_once(&tables_once, tables_init);
  return e4m3_table;
}

const float *fp4_cpu_ue8m0_table(void) {
  pthread_once(&tables_once, tables_init);
  return ue8m0_table;
}

int64_t fp4_cpu_scale_base(const fp4_cpu_gemm *g, int64_t r) {
  int64_t cp = fp4_round_up(g->c, 4);
  switch (g->layout) {
  case FP4_LAYOUT_128X4: return (r / 128) * (cp / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4;
  case FP4_LAYOUT_8X4: return (r / 8) * cp * 8 + (r % 8) * 4;
  default: return r * g->c;
  }
}

float fp4_cpu_scale_value(const fp4_cpu_gemm *g, int64_t r, int64_t c) {
  uint8_t s = g->bs[fp4_cpu_scale_base(g, r) + (c >> 2) * g->gstride + (c & 3)];
  return g->mx ? fp4_cpu_ue8m0_table()[s] : fp4_cpu_e4m3_table()[s];
}

const void *fp4_cpu_dense_row(const fp4_matrix *x, int64_t r) {
  const int64_t ld = x->ld ? x->ld : x->cols;
  return (const unsigned char *)x->data + (size_t)(r * ld) * fp4_dtype_size(x->dtype);
}

float fp4_cpu_block_scale(fp4_qmatrix *out, const fp4_nvfp4_recipe *recipe, int64_t r, int64_t c, float vmax) {
  const int64_t C = fp4_scale_cols(out->format, out->cols);
  float os;
  uint8_t sb = out->format == FP4_FORMAT_MXFP4 ? fp4_mxfp4_block_scale(vmax, &os)
                                               : fp4_nvfp4_block_scale(vmax, *recipe, &os);
  ((uint8_t *)out->scales)[fp4_layout_offset((int)out->layout, C, r, c)] = sb;
  return os;
}

void fp4_cpu_store(const fp4_cpu_gemm *g, int64_t m, int64_t n, float sum) {
  fp4_matrix_set(g->out, m, n, sum * g->scale);
}

/* ---- backend table ----------------------------------------------------------------------------- */

static fp4_status cpu_available(fp4_context *ctx, char *reason, size_t reason_size) {
  (void)ctx;
  fp4_reason(reason, reason_size, "%s", "");
  return FP4_OK;
}

static fp4_status cpu_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  (void)ctx;
  if (p->memory != FP4_MEMORY_HOST) {
    fp4_reason(reason, reason_size, "the cpu backend runs on host memory only; operands are in %s memory",
               fp4_memory_name(p->memory));
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

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
  const int64_t K = j->g.k, lda = j->g.lda;
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
    for (int64_t k = K; k < lda; k++) row[k] = 0.0f;
    if (j->bf16) {
      /* Exact: bf16 activations round-trip, and dequantized E2M1 x E4M3/UE8M0 values need at most
       * 6 significant bits. */
      uint16_t *d = (uint16_t *)j->a_packed + r * lda;
      for (int64_t c = 0; c < lda; c += FP4_CPU_KALIGN)
        for (int q = 0; q < FP4_CPU_KALIGN; q++) d[c + q] = fp4_bf16_from_f32_inline(row[c + j->src[q]]);
    } else {
      float *d = (float *)j->a_packed + r * lda;
      for (int64_t c = 0; c < lda; c += FP4_CPU_KALIGN)
        for (int q = 0; q < FP4_CPU_KALIGN; q++) d[c + q] = row[c + j->src[q]];
    }
  }
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
  for (int64_t k0 = 0; k0 < j->g.lda; k0 += FP4_CPU_KC) {
    int64_t k1 = k0 + FP4_CPU_KC < j->g.lda ? k0 + FP4_CPU_KC : j->g.lda;
    for (int64_t pi = p0; pi < p1; pi++) {
      int64_t n0 = pi * FP4_CPU_NR, nr = j->g.n - n0 < FP4_CPU_NR ? j->g.n - n0 : FP4_CPU_NR;
      float *panel = panels + (size_t)(pi - p0) * panel_floats;
      float *acc = accs + (size_t)(pi - p0) * acc_floats;
      j->k->panel_f32(&j->g, n0, nr, k0, k1, panel);
      for (int64_t m = m0; m < m1; m += FP4_CPU_MR) {
        int64_t mr = m1 - m < FP4_CPU_MR ? m1 - m : FP4_CPU_MR;
        float *a = acc + (m - m0) * FP4_CPU_NR * FP4_CPU_ACC;
        j->k->micro_f32(&j->g, panel, m, mr, n0, nr, k0, k1, a, k0 == 0, k1 == j->g.lda);
      }
    }
  }
}

fp4_status fp4_cpu_gemm_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config,
                                size_t config_size) {
  gemm_job j;
  memset(&j, 0, sizeof j);
  j.k = k;
  j.p = p;
  const fp4_qmatrix *b = p->b;
  fp4_cpu_gemm *g = &j.g;
  g->m = fp4_problem_m(p);
  g->n = b->rows;
  g->k = b->cols;
  g->lda = fp4_round_up(g->k, FP4_CPU_KALIGN);
  g->b = b->data;
  g->bs = b->scales;
  g->mx = b->format == FP4_FORMAT_MXFP4;
  g->c = fp4_scale_cols(b->format, b->cols);
  g->layout = (int)b->layout;
  g->gstride = b->layout == FP4_LAYOUT_128X4 ? 512 : b->layout == FP4_LAYOUT_8X4 ? 32 : 4;
  double scale = (double)p->alpha * (double)b->multiplier;
  if (p->op == FP4_OP_MM) scale *= (double)p->a_q->multiplier;
  g->scale = (float)scale;
  g->out = p->out;

  j.small = g->m <= FP4_CPU_GEMV_MAX_M;
  int bf16_input = p->op == FP4_OP_MM || p->a->dtype == FP4_DTYPE_BF16;
  j.bf16 = bf16_input && j.small && k->gemv_bf16 != NULL;
  j.order = j.bf16 ? k->order_gemv_bf16 : k->order_f32;

  /* Scratch per thread: one f32 row of A while packing; for the panel path, FP4_CPU_PANELS decoded
   * panels (FP4_CPU_NR rows of lda each; only the current K block of each is touched) and their
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

static fp4_status cpu_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  (void)ctx;
  if (config && strcmp(config, "default") != 0)
    return fp4_fail(FP4_ERR_NOT_FOUND, "cpu: unknown config '%s' (the cpu backend has one, 'default'; "
                    "FP4KIT_CPU_LEVEL and FP4KIT_NUM_THREADS select the level and threads)", config);
  const fp4_cpu_kernels *k = fp4_cpu_current_kernels();
  int threads = fp4_cpu_current_threads();
  char used[64] = "";
  fp4_status st = FP4_OK;
  if (p->op == FP4_OP_QUANTIZE) {
    fp4_cpu_quantize_problem(k, threads, p);
    snprintf(used, sizeof used, "quantize:%s,%dt", k->name, threads);
  } else if (p->op == FP4_OP_MOE) {
    st = fp4_cpu_moe(k, threads, p, used, sizeof used);
  } else if (p->op == FP4_OP_GROUPED_MM || p->op == FP4_OP_GROUPED_MM_W4A16) {
    st = fp4_cpu_grouped_mm(k, threads, p, used, sizeof used);
  } else {
    st = fp4_cpu_gemm_problem(k, threads, p, used, sizeof used);
  }
  if (info && !st) {
    snprintf(info->backend, sizeof info->backend, "cpu");
    snprintf(info->config, sizeof info->config, "%s", used);
    if (p->enable_pdl) snprintf(info->note, sizeof info->note, "PDL does not apply to host backends");
  }
  return st;
}

const fp4_backend fp4_backend_cpu = {
    .name = "cpu",
    .summary = "host SIMD (generic C, AVX2, AVX-512 + BF16 chosen at run time) and threads",
    .available = cpu_available,
    .supports = cpu_supports,
    .configs = NULL,
    .run = cpu_run,
    .release_state = NULL,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
};
