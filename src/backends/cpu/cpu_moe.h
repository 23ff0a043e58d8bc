/*
 * The cpu backend's grouped GEMM and MoE layer (cpu_moe.c), built on the backend's GEMM and
 * quantization of one problem (cpu_gemm.h).
 */
#ifndef FP4_BACKENDS_CPU_MOE_H
#define FP4_BACKENDS_CPU_MOE_H

#include <stddef.h>

#include "backends/cpu/cpu_kernels.h"
#include "dispatch/backend.h"

/* FP4_OP_GROUPED_MM, FP4_OP_GROUPED_MM_W4A16 and FP4_OP_MOE on host memory; writes the kernels used
 * to config. Results do not depend on the thread count. */
fp4_status fp4_cpu_grouped_mm(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config,
                              size_t config_size);
fp4_status fp4_cpu_moe(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config, size_t config_size);

#endif
