#include "harness.h"
#include "harness_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- running a case ------------------------------------------------------------------------------ */

/* Host buffers of one case, plus their copies in the backend's memory. */
typedef struct buffers {
  void *host[6];
  void *dev[6];   /* where the backend sees the operand: base + offset */
  void *base[6];  /* what fp4_alloc returned */
  size_t bytes[6];
} buffers;
enum { B_A_DENSE, B_A_DATA, B_A_SCALES, B_B_DATA, B_B_SCALES, B_OUT };

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
  float a_dense_f32_gsf = fp4h_global_scale(a, M * K);
  fp4_status st = fp4_quantize(NULL, &a_dense, a_dense_f32_gsf, &aq, &ref_opts);
  if (!st) st = fp4_quantize(NULL, &b_dense, fp4h_global_scale(b, N * K), &bq, &ref_opts);
  if (st) {
    fp4h_fail(r, st, "reference quantize");
    goto done;
  }
  const float alpha = 0.75f;
  fp4_matrix ref_out = {ref, M, N, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  if (c->op == FP4H_MM) st = fp4_mm(NULL, &aq, &bq, alpha, &ref_out, &ref_opts);
  else if (c->op == FP4H_MM_W4A16) st = fp4_mm_w4a16(NULL, &a_dense, &bq, alpha, &ref_out, &ref_opts);
  if (st) {
    fp4h_fail(r, st, "reference GEMM");
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
     * words must check the pointer, not assume the allocator's alignment); offset_dense does so for
     * the dense activations and the output, in elements. */
    const size_t off = (i == B_A_DATA || i == B_B_DATA) ? (size_t)c->offset_codes
                       : i == B_A_DENSE                 ? (size_t)c->offset_dense * fp4_dtype_size(c->a_dtype)
                       : i == B_OUT                     ? (size_t)c->offset_dense * fp4_dtype_size(c->out_dtype)
                                                        : 0;
    st = fp4_alloc(ctx, memory, buf.bytes[i] + off, &buf.base[i]);
    if (!st) buf.dev[i] = (char *)buf.base[i] + off;
    if (st || (st = fp4_copy(ctx, buf.dev[i], memory, buf.host[i], FP4_MEMORY_HOST, buf.bytes[i]))) {
      fp4h_fail(r, st, "staging operands");
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

fp4_status fp4h_cpu_quantize_block(const char *config, fp4_run_info *info) {
  float x[32];
  for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.25f;
  uint8_t codes[16], scales[512]; /* any layout's scales of one 32-element row fit */
  fp4_matrix xm = {x, 1, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix q = {codes, scales, 1, 32, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  const fp4_options o = {.backend = "cpu", .config = config, .info = info};
  return fp4_quantize(NULL, &xm, 1.0f, &q, &o);
}

int fp4h_cpu_level_runs(const char *level) {
  const fp4_status st = fp4h_cpu_quantize_block(level, NULL);
  fp4_set_error(FP4_OK, NULL); /* a refused level is an answer here, not an error of the caller's */
  return st == FP4_OK;
}
