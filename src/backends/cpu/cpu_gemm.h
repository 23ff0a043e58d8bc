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
/* The same with the output scale (alpha times the multipliers, in double) times a_scale: the
 * multiplier of activations passed in a dequantized copy, kept out of the float alpha, where its
 * product with alpha could overflow or underflow before the weights' multiplier brings it back. */
fp4_status fp4_cpu_gemm_problem_scaled(const fp4_cpu_kernels *k, int threads, const fp4_problem *p, double a_scale,
                                       char *config, size_t config_size);
/* One FP4_OP_QUANTIZE problem (runtime recipe, bit-identical to the reference). */
void fp4_cpu_quantize_problem(const fp4_cpu_kernels *k, int threads, const fp4_problem *p);

#endif
