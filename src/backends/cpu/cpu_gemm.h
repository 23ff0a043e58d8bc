/* The cpu backend's dense problems (cpu_gemm.c), used by its table (cpu_backend.c) and by its
 * grouped GEMM and MoE layer (cpu_moe.c). */
#ifndef FP4_BACKENDS_CPU_GEMM_H
#define FP4_BACKENDS_CPU_GEMM_H

#include <stddef.h>

#include "backends/cpu/cpu_kernels.h"
#include "dispatch/backend.h"

/* One FP4_OP_MM / FP4_OP_MM_W4A16 problem on `threads` threads; writes the kernel used to config. */
fp4_status fp4_cpu_gemm_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, char *config,
                                size_t config_size);
/* One FP4_OP_QUANTIZE problem (runtime recipe, bit-identical to the reference). */
void fp4_cpu_quantize_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p);

#endif
