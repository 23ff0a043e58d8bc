#include "harness.h"
#include "harness_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random data ------------------------------------------------------------------------------- */

uint64_t fp4h_next(fp4h_rng *g) { /* splitmix64: small, fast, good enough for test data */
  uint64_t z = (g->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double fp4h_uniform(fp4h_rng *g) { return (double)(fp4h_next(g) >> 11) * 0x1.0p-53; }

double fp4h_gauss(fp4h_rng *g) {
  double u = fp4h_uniform(g), v = fp4h_uniform(g);
  return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

void fp4h_fill(fp4h_rng *g, float *x, int64_t n, fp4h_data data, int block) {
  static const float grid[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 3.0f};
  for (int64_t i = 0; i < n; i++) {
    switch (data) {
    case FP4H_DATA_UNIFORM: x[i] = (float)(2.0 * fp4h_uniform(g) - 1.0); break;
    case FP4H_DATA_NORMAL:
      x[i] = (float)fp4h_gauss(g);
      if ((fp4h_next(g) & 1023) == 0) x[i] *= 40.0f; /* activation outliers */
      break;
    case FP4H_DATA_EDGES: {
      int64_t b0 = i - i % block;
      fp4h_rng bg = {(uint64_t)b0 * 0x9E3779B97F4A7C15ull ^ g->s};
      switch (fp4h_next(&bg) % 6) {
      case 0: x[i] = 0.0f; break;                                            /* zero block */
      case 1: x[i] = (float)fp4h_gauss(g); break;
      case 2: x[i] = (float)(fp4h_gauss(g) * 1e-9); break;                  /* scale underflows */
      case 3: x[i] = grid[fp4h_next(g) % 10] * ((fp4h_next(g) & 1) ? -1.f : 1.f); break; /* ties */
      case 4: x[i] = -(float)(fp4h_uniform(g) * 1e-3); break;               /* -0 codes */
      default: x[i] = (float)(fp4h_gauss(g) * 300.0); break;                 /* large */
      }
      break;
    }
    }
  }
}

/* ---- cases ----------------------------------------------------------------------------------------- */

#define MM(name, fmt, la, lb, m, n, k, out, data) {name, FP4H_MM, fmt, la, lb, m, n, k, FP4_DTYPE_F32, out, data, .experts = 0}
#define W16(name, fmt, lb, m, n, k, adt, out, data) {name, FP4H_MM_W4A16, fmt, FP4_LAYOUT_LINEAR, lb, m, n, k, adt, out, data, .experts = 0}
#define GMM(name, op, fmt, la, lb, t, n, k, e, adt, out) {name, op, fmt, la, lb, t, n, k, adt, out, FP4H_DATA_NORMAL, e, .top_k = 0}
#define MOE(name, mode, fmt, lb, t, i, h, e, topk, shared, route, adt, out) \
  {name, FP4H_MOE, fmt, FP4_LAYOUT_LINEAR, lb, t, i, h, adt, out, FP4H_DATA_NORMAL, e, topk, mode, shared, route, .config = NULL}
#define QZ(name, fmt, la, m, k, adt, data) {name, FP4H_QUANTIZE, fmt, la, FP4_LAYOUT_LINEAR, m, 0, k, adt, FP4_DTYPE_F32, data, .experts = 0}

static const fp4h_case default_cases[] = {
    QZ("quantize nvfp4 128x4 f32", FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 37, 256, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    QZ("quantize nvfp4 edges bf16", FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 5, 512, FP4_DTYPE_BF16, FP4H_DATA_EDGES),
    QZ("quantize nvfp4 8x4 f16", FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4, 9, 128, FP4_DTYPE_F16, FP4H_DATA_EDGES),
    QZ("quantize mxfp4 128x4 bf16", FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4, 130, 256, FP4_DTYPE_BF16, FP4H_DATA_EDGES),
    MM("w4a4 nvfp4 M=1", FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_LAYOUT_128X4, 1, 256, 512, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    MM("w4a4 nvfp4 odd M, N%8", FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_LAYOUT_LINEAR, 7, 131, 256, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    MM("w4a4 nvfp4 K=16", FP4_FORMAT_NVFP4, FP4_LAYOUT_8X4, FP4_LAYOUT_128X4, 3, 40, 16, FP4_DTYPE_F32, FP4H_DATA_UNIFORM),
    MM("w4a4 nvfp4 edges", FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, 17, 64, 1024, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    MM("w4a4 mxfp4 M=65", FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4, FP4_LAYOUT_128X4, 65, 96, 384, FP4_DTYPE_F16, FP4H_DATA_NORMAL),
    MM("w4a4 mxfp4 K=32", FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_LINEAR, 2, 9, 32, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    W16("w4a16 nvfp4 bf16 M=1", FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1, 300, 512, FP4_DTYPE_BF16, FP4_DTYPE_BF16, FP4H_DATA_NORMAL),
    W16("w4a16 nvfp4 f32 M=5 K=128", FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 5, 64, 128, FP4_DTYPE_F32, FP4_DTYPE_F32, FP4H_DATA_NORMAL),
    W16("w4a16 mxfp4 f16", FP4_FORMAT_MXFP4, FP4_LAYOUT_128X4, 33, 48, 256, FP4_DTYPE_F16, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    W16("w4a16 nvfp4 edges", FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 64, 136, 1024, FP4_DTYPE_BF16, FP4_DTYPE_F32, FP4H_DATA_EDGES),
    GMM("grouped w4a4 nvfp4 E=8", FP4H_GROUPED_MM, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_LAYOUT_128X4, 37, 64, 256, 8,
        FP4_DTYPE_F32, FP4_DTYPE_BF16),
    GMM("grouped w4a16 mxfp4 E=5", FP4H_GROUPED_MM_W4A16, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, FP4_LAYOUT_128X4, 9, 48,
        128, 5, FP4_DTYPE_BF16, FP4_DTYPE_F32),
    MOE("moe w4a16 nvfp4 hot+shared", FP4_MOE_W4A16, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 16, 64, 128, 8, 2, 1,
        FP4H_ROUTE_SKEWED, FP4_DTYPE_BF16, FP4_DTYPE_BF16),
    MOE("moe w4a4 nvfp4 E=16 k=4", FP4_MOE_W4A4, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 12, 64, 256, 16, 4, 0,
        FP4H_ROUTE_UNIFORM, FP4_DTYPE_BF16, FP4_DTYPE_F32),
    MOE("moe w4a4 mxfp4 dup+shared", FP4_MOE_W4A4, FP4_FORMAT_MXFP4, FP4_LAYOUT_LINEAR, 7, 64, 128, 4, 3, 1,
        FP4H_ROUTE_DUPLICATES, FP4_DTYPE_F16, FP4_DTYPE_F16),
};

const fp4h_case *fp4h_default_cases(int *count) {
  *count = (int)(sizeof default_cases / sizeof *default_cases);
  return default_cases;
}

double fp4h_tolerance(fp4_dtype out_dtype) {
  switch (out_dtype) {
  case FP4_DTYPE_BF16: return 0x1.0p-8;
  case FP4_DTYPE_F16: return 0x1.0p-11 + 1e-5;
  default: return 1e-5;
  }
}

/* ---- running a case ------------------------------------------------------------------------------ */

/* Host buffers of one case, plus their copies in the backend's memory. */
typedef struct buffers {
  void *host[6];
  void *dev[6];   /* where the backend sees the operand: base + offset */
  void *base[6];  /* what fp4_alloc returned */
  size_t bytes[6];
} buffers;
enum { B_A_DENSE, B_A_DATA, B_A_SCALES, B_B_DATA, B_B_SCALES, B_OUT };

static float amax_of(const float *x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
  return m;
}

static float gsf_for(const float *x, int64_t n) {
  float a = amax_of(x, n);
  return a > 0.0f ? 448.0f * 6.0f / a : 1.0f;
}

static int fail(fp4h_result *r, fp4_status st, const char *what) {
  r->status = st;
  r->passed = 0;
  snprintf(r->message, sizeof r->message, "%s: %s", what, fp4_last_error());
  return 0;
}

void fp4h_fill_nan(void *p, fp4_dtype t, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t == FP4_DTYPE_F32) ((uint32_t *)p)[i] = 0x7FC00000u;
    else ((uint16_t *)p)[i] = t == FP4_DTYPE_BF16 ? 0x7FC0u : 0x7E00u;
  }
}

/* The reference value as the output dtype stores it (a sum beyond 65504 is inf in f16). */
static float in_dtype(float v, fp4_dtype t) {
  if (t == FP4_DTYPE_BF16) return fp4_bf16_to_f32(fp4_bf16_from_f32(v));
  if (t == FP4_DTYPE_F16) return fp4_f16_to_f32(fp4_f16_from_f32(v));
  return v;
}

/* A sum within 1e-3 of the output dtype's overflow threshold may land on either side of it: the
 * kernel sums in FP32 in another order than the double reference (relative differences up to about
 * K * 2^-24). Inf against the largest finite value, same sign, is then no error. */
static int at_overflow_edge(float ref, float got, fp4_dtype t) {
  const double edge = t == FP4_DTYPE_F16 ? 65520.0 : t == FP4_DTYPE_BF16 ? 3.3961775292e38 : INFINITY;
  const double r = fabs((double)ref);
  return isfinite(edge) && signbit(ref) == signbit(got) && r >= edge * (1.0 - 1e-3) && r <= edge * (1.0 + 1e-3) &&
         (isinf(got) || fabs((double)got) >= edge * (1.0 - 1e-3));
}

void fp4h_compare(const float *got, const float *ref, int64_t n, fp4_dtype out_dtype, fp4h_result *r) {
  double num = 0.0, den = 0.0;
  int64_t nonzero = 0, overflow_wrong = 0;
  r->nonfinite = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(got[i])) { /* NaN: an unwritten (NaN-prefilled) or invalid output */
      r->nonfinite++;
      continue;
    }
    const float want = in_dtype(ref[i], out_dtype);
    if (isinf(want) || isinf(got[i])) { /* overflow of the output dtype must match the reference's */
      overflow_wrong += got[i] != want && !at_overflow_edge(ref[i], got[i], out_dtype);
      continue;
    }
    nonzero += got[i] != 0.0f;
    double d = (double)got[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  r->nonfinite += overflow_wrong;
  r->rel_err = den > 0.0 ? sqrt(num / den) : sqrt(num);
  r->all_zero = nonzero == 0 && den > 0.0;
  r->passed = r->nonfinite == 0 && !r->all_zero && r->rel_err <= r->tolerance;
  if (r->nonfinite)
    snprintf(r->message, sizeof r->message, "%lld outputs are NaN (unwritten?) and %lld overflow differently from the reference",
             (long long)(r->nonfinite - overflow_wrong), (long long)overflow_wrong);
  else if (r->all_zero) snprintf(r->message, sizeof r->message, "all outputs are zero");
  else snprintf(r->message, sizeof r->message, "rel err %.3g (tolerance %.3g)", r->rel_err, r->tolerance);
}

void fp4h_run(fp4_context *ctx, const char *backend, fp4_memory memory, const fp4h_case *c, uint64_t seed,
              fp4h_result *r) {
  if (c->op == FP4H_GROUPED_MM || c->op == FP4H_GROUPED_MM_W4A16 || c->op == FP4H_MOE) {
    fp4h_run_moe(ctx, backend, memory, c, seed, r);
    return;
  }
  memset(r, 0, sizeof *r);
  r->tolerance = c->op == FP4H_QUANTIZE ? 0.0 : fp4h_tolerance(c->out_dtype);
  fp4h_rng g = {seed ^ 0xD1B54A32D192ED03ull};
  const int bs = fp4_format_block_size(c->format);
  const int64_t M = c->m, N = c->op == FP4H_QUANTIZE ? 1 : c->n, K = c->k;
  buffers buf = {0};
  float *a = malloc((size_t)(M * K) * sizeof *a), *b = malloc((size_t)(N * K) * sizeof *b);
  float *ref = malloc((size_t)(M * N) * sizeof *ref), *got = malloc((size_t)(M * N) * sizeof *got);
  size_t sa = 0, sb = 0;
  fp4_scales_size(c->format, c->layout_a, M, K, &sa);
  fp4_scales_size(c->format, c->layout_b, N, K, &sb);
  buf.bytes[B_A_DENSE] = (size_t)(M * K) * fp4_dtype_size(c->a_dtype);
  buf.bytes[B_A_DATA] = (size_t)(M * K / 2);
  buf.bytes[B_A_SCALES] = sa;
  buf.bytes[B_B_DATA] = (size_t)(N * K / 2);
  buf.bytes[B_B_SCALES] = sb;
  buf.bytes[B_OUT] = (size_t)(M * N) * fp4_dtype_size(c->out_dtype);
  if (!sa || !sb) {
    r->status = FP4_ERR_INVALID_ARGUMENT;
    snprintf(r->message, sizeof r->message, "case '%s' has no valid scale layout: %s", c->name, fp4_last_error());
    free(a);
    free(b);
    free(ref);
    free(got);
    return;
  }
  int ok = a && b && ref && got;
  for (int i = 0; ok && i < 6; i++) ok = (buf.host[i] = calloc(1, buf.bytes[i])) != NULL;
  if (!ok) {
    r->status = FP4_ERR_OUT_OF_MEMORY;
    snprintf(r->message, sizeof r->message, "host allocation failed");
    goto done;
  }
  fp4h_fill(&g, a, M * K, c->data, bs);
  fp4h_fill(&g, b, N * K, c->data == FP4H_DATA_EDGES ? FP4H_DATA_EDGES : FP4H_DATA_NORMAL, bs);
  fp4_convert(a, FP4_DTYPE_F32, buf.host[B_A_DENSE], c->a_dtype, (size_t)(M * K));

  /* Reference operands and result, all on the host with the ref backend. */
  fp4_options ref_opts = {.backend = "ref"};
  fp4_matrix a_dense = {buf.host[B_A_DENSE], M, K, 0, c->a_dtype, FP4_MEMORY_HOST};
  fp4_matrix b_dense = {b, N, K, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix aq = {buf.host[B_A_DATA], buf.host[B_A_SCALES], M, K, c->format, c->layout_a, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix bq = {buf.host[B_B_DATA], buf.host[B_B_SCALES], N, K, c->format, c->layout_b, 1.0f, FP4_MEMORY_HOST};
  float a_dense_f32_gsf = gsf_for(a, M * K);
  fp4_status st = fp4_quantize(NULL, &a_dense, a_dense_f32_gsf, &aq, &ref_opts);
  if (!st) st = fp4_quantize(NULL, &b_dense, gsf_for(b, N * K), &bq, &ref_opts);
  if (st) {
    fail(r, st, "reference quantize");
    goto done;
  }
  const float alpha = 0.75f;
  fp4_matrix ref_out = {ref, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  if (c->op == FP4H_MM) st = fp4_mm(NULL, &aq, &bq, alpha, &ref_out, &ref_opts);
  else if (c->op == FP4H_MM_W4A16) st = fp4_mm_w4a16(NULL, &a_dense, &bq, alpha, &ref_out, &ref_opts);
  if (st) {
    fail(r, st, "reference GEMM");
    goto done;
  }

  /* The same operands in the backend's memory; outputs poisoned. */
  uint8_t *ref_q = NULL;
  if (c->op == FP4H_QUANTIZE) { /* keep the reference bytes, poison what the backend writes */
    ref_q = malloc(buf.bytes[B_A_DATA] + sa);
    if (!ref_q) goto done;
    memcpy(ref_q, buf.host[B_A_DATA], buf.bytes[B_A_DATA]);
    memcpy(ref_q + buf.bytes[B_A_DATA], buf.host[B_A_SCALES], sa);
    memset(buf.host[B_A_DATA], 0xA5, buf.bytes[B_A_DATA]);
    memset(buf.host[B_A_SCALES], 0xA5, sa);
  }
  fp4h_fill_nan(buf.host[B_OUT], c->out_dtype, M * N);
  for (int i = 0; i < 6; i++) {
    if (memory == FP4_MEMORY_HOST) {
      buf.dev[i] = buf.host[i];
      continue;
    }
    /* offset_codes places the FP4 codes past an aligned address (kernels that load them in wide
     * words must check the pointer, not assume the allocator's alignment). */
    const size_t off = (i == B_A_DATA || i == B_B_DATA) ? (size_t)c->offset_codes : 0;
    st = fp4_alloc(ctx, memory, buf.bytes[i] + off, &buf.base[i]);
    if (!st) buf.dev[i] = (char *)buf.base[i] + off;
    if (st || (st = fp4_copy(ctx, buf.dev[i], memory, buf.host[i], FP4_MEMORY_HOST, buf.bytes[i]))) {
      fail(r, st, "staging operands");
      free(ref_q);
      goto done;
    }
  }
  fp4_options opts = {.backend = backend, .config = c->config};
  fp4_matrix xa = {buf.dev[B_A_DENSE], M, K, 0, c->a_dtype, memory};
  fp4_qmatrix xaq = aq, xbq = bq;
  xaq.data = buf.dev[B_A_DATA];
  xaq.scales = buf.dev[B_A_SCALES];
  xaq.memory = memory;
  xbq.data = buf.dev[B_B_DATA];
  xbq.scales = buf.dev[B_B_SCALES];
  xbq.memory = memory;
  fp4_matrix xout = {buf.dev[B_OUT], M, N, 0, c->out_dtype, memory};
  if (c->op == FP4H_QUANTIZE) st = fp4_quantize(ctx, &xa, a_dense_f32_gsf, &xaq, &opts);
  else if (c->op == FP4H_MM) st = fp4_mm(ctx, &xaq, &xbq, alpha, &xout, &opts);
  else st = fp4_mm_w4a16(ctx, &xa, &xbq, alpha, &xout, &opts);
  if (!st) st = fp4_synchronize(ctx);
  if (st) {
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", fp4_last_error());
    free(ref_q);
    goto done;
  }
  if (memory != FP4_MEMORY_HOST)
    for (int i = 0; i < 6; i++) fp4_copy(ctx, buf.host[i], FP4_MEMORY_HOST, buf.dev[i], memory, buf.bytes[i]);

  if (c->op == FP4H_QUANTIZE) {
    int64_t diff = 0;
    const uint8_t *qd = buf.host[B_A_DATA], *qs = buf.host[B_A_SCALES];
    for (size_t i = 0; i < buf.bytes[B_A_DATA]; i++) diff += qd[i] != ref_q[i];
    for (size_t i = 0; i < sa; i++) diff += qs[i] != ref_q[buf.bytes[B_A_DATA] + i];
    r->rel_err = (double)diff;
    r->passed = diff == 0 && xaq.multiplier == aq.multiplier;
    snprintf(r->message, sizeof r->message, "%lld of %zu bytes differ from the reference", (long long)diff,
             buf.bytes[B_A_DATA] + sa);
    free(ref_q);
    goto done;
  }
  fp4_convert(buf.host[B_OUT], c->out_dtype, got, FP4_DTYPE_F32, (size_t)(M * N));
  fp4h_compare(got, ref, M * N, c->out_dtype, r);

done:
  for (int i = 0; i < 6; i++) {
    if (memory != FP4_MEMORY_HOST) fp4_free(ctx, memory, buf.base[i]);
    free(buf.host[i]);
  }
  free(a);
  free(b);
  free(ref);
  free(got);
}
