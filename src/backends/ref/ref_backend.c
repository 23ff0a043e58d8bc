/*
 * The reference backend: plain C, host memory, the oracle every other backend is compared with.
 * Operands are dequantized exactly to double (e2m1 * an MXFP4 scale can exceed a float), products
 * are exact in double, sums are double; the multipliers and alpha are applied once to the double sum, which is
 * rounded to float and then to the output dtype.
 */
#include <stdio.h>
#include <string.h>

#include "backends/ref/ref_gemm.h"
#include "backends/ref/ref_moe.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "format/format.h"

static fp4_status ref_available(fp4_context *ctx, char *reason, size_t reason_size) {
  (void)ctx;
  fp4_reason(reason, reason_size, "%s", "");
  return FP4_OK;
}

static fp4_status ref_supports(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  (void)ctx;
  if (p->memory != FP4_MEMORY_HOST) {
    fp4_reason(reason, reason_size, "the reference backend runs on host memory only");
    return FP4_ERR_UNSUPPORTED;
  }
  return FP4_OK;
}

static fp4_status ref_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  (void)ctx;
  if (config && strcmp(config, "default") != 0)
    return fp4_fail(FP4_ERR_NOT_FOUND, "ref: unknown config '%s' (the reference has one, 'default')", config);
  if (info) {
    snprintf(info->backend, sizeof info->backend, "ref");
    if (p->enable_pdl) snprintf(info->note, sizeof info->note, "PDL does not apply to host backends");
  }
  if (p->op == FP4_OP_QUANTIZE) {
    if (p->exact_order) {
      fp4_quantize_exact_ref(p->a, p->global_scale, p->q_out);
      if (info) snprintf(info->note, sizeof info->note, "NVFP4 scales in the exact order (FP4_ORDER_EXACT)");
    } else {
      fp4_quantize_ref(p->a, p->global_scale, p->q_out);
    }
    return FP4_OK;
  }
  if (p->op == FP4_OP_GROUPED_MM || p->op == FP4_OP_GROUPED_MM_W4A16) return fp4_ref_grouped_mm(p);
  if (p->op == FP4_OP_MOE) return fp4_ref_moe(p);
  return fp4_ref_gemm(p);
}

/* Host memory only; the oracle, correct everywhere and fast nowhere: auto takes it only when nothing
 * else runs. */
static const fp4_backend_ranks ref_ranks = FP4_HOST_RANKS(FP4_RANK_CHECK_ONLY);

const fp4_backend fp4_backend_ref = {
    .name = "ref",
    .summary = "plain C reference: exact dequantization, double accumulation (the oracle)",
    .available = ref_available,
    .supports = ref_supports,
    .configs = NULL,
    .run = ref_run,
    .release_state = NULL,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
    .exact_order = 1,
    .host = 1,
    .ranks = &ref_ranks,
};
