/*
 * The cpu backend: FP4 GEMM (W4A4, W4A16) and runtime-recipe quantization on the host with SIMD
 * kernels chosen at run time (generic C, AVX2, AVX-512 with BF16 dot products) and a thread pool.
 * This file holds the backend table; the operand preparation and the work split are in cpu_gemm.c
 * and cpu_moe.c, the kernels in kernels_<level>.c (cpu_kernels.h describes the scheme).
 */
#include <stdio.h>
#include <string.h>

#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_moe.h"
#include "core/error.h"
#include "dispatch/backend.h"

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

/* Host memory only, where it is the fast path. */
static const fp4_backend_ranks cpu_ranks = FP4_HOST_RANKS(0);

const fp4_backend fp4_backend_cpu = {
    .name = "cpu",
    .summary = "host SIMD (generic C, AVX2, AVX-512 + BF16 chosen at run time) and threads",
    .available = cpu_available,
    .supports = cpu_supports,
    .configs = NULL,
    .run = cpu_run,
    .release_state = NULL,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
    .host = 1,
    .ranks = &cpu_ranks,
};
