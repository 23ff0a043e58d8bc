/*
 * The cpu backend: FP4 GEMM (W4A4, W4A16) and runtime-recipe quantization on the host with SIMD
 * kernels chosen at run time (generic C, AVX2, AVX-512 with BF16 dot products) and a thread pool.
 * Its configs are the kernels' instruction-set levels (generic, avx2, avx512, neon); the default is
 * the highest this CPU and build support.
 * This file holds the backend table; the operand preparation and the work split are in cpu_gemm.c
 * and cpu_moe.c, the kernels in kernels_<level>.c (cpu_kernels.h describes the scheme).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The level used to be set by an environment variable; a program that still sets it is told once
 * where the choice went rather than silently running another level. */
static void warn_level_variable(void) {
  static atomic_int warned;
  const char *env = getenv("FP4KIT_CPU_LEVEL");
  if (env && *env && !atomic_exchange(&warned, 1))
    fp4_log(FP4_LOG_WARN, "cpu: FP4KIT_CPU_LEVEL=%s is not read: the kernels' level is the cpu backend's config "
            "(fp4_options.config, fp4kit --config: generic, avx2, avx512, neon)", env);
}

static int cpu_configs(fp4_context *ctx, const fp4_problem *p, const char **names, int max) {
  (void)ctx;
  (void)p;
  return fp4_cpu_level_configs(names, max);
}

/* A config is an instruction-set level this CPU and build run (fp4_cpu_config_level). */
static fp4_status cpu_check_config(fp4_context *ctx, const fp4_problem *p, const char *config, char *reason,
                                   size_t reason_size) {
  (void)ctx;
  (void)p;
  fp4_cpu_level_id level;
  return fp4_cpu_config_level(config, &level, reason, reason_size);
}

static fp4_status cpu_run(fp4_context *ctx, const fp4_problem *p, const char *config, fp4_run_info *info) {
  (void)ctx;
  warn_level_variable();
  fp4_cpu_level_id level;
  char why[200];
  const fp4_status cst = fp4_cpu_config_level(config, &level, why, sizeof why);
  if (cst) return fp4_fail(cst, "cpu: %s", why);
  const fp4_cpu_kernels *k = fp4_cpu_level_kernels(level);
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
  if (info && !st) { /* the config that ran (the level, as the tuner names it); the kernels and threads */
    snprintf(info->backend, sizeof info->backend, "cpu");
    snprintf(info->config, sizeof info->config, "%s", fp4_cpu_level_name(level));
    snprintf(info->note, sizeof info->note, "%s%s", used, p->enable_pdl ? "; PDL does not apply to host backends" : "");
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
    .configs = cpu_configs,
    .check_config = cpu_check_config,
    .run = cpu_run,
    .release_state = NULL,
    .extra_ops = FP4_OP_BIT(FP4_OP_GROUPED_MM) | FP4_OP_BIT(FP4_OP_GROUPED_MM_W4A16) | FP4_OP_BIT(FP4_OP_MOE),
    .host = 1,
    .ranks = &cpu_ranks,
};
