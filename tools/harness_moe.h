/*
 * Grouped GEMM and MoE pieces of the correctness harness: random grouped weights and routing (shared
 * by the MoE cases of `fp4kit check` and tests/test_moe.c), and the runner of FP4H_GROUPED_MM and
 * FP4H_MOE cases. Uses only the public API.
 */
#ifndef FP4_TOOLS_HARNESS_MOE_H
#define FP4_TOOLS_HARNESS_MOE_H

#include "harness_common.h"

typedef enum fp4h_routing {
  FP4H_ROUTE_UNIFORM = 0,    /* k distinct experts per token, uniformly at random               */
  FP4H_ROUTE_SKEWED = 1,     /* as uniform, but expert 0 is in every other token's row (50%)    */
  FP4H_ROUTE_DUPLICATES = 2  /* as uniform, but every third token names its slot-0 expert twice */
} fp4h_routing;

/* Host grouped weights [E, N, K] from random normal values: NVFP4 through the Model Optimizer
 * recipe (each expert its own weight_scale_2 in multipliers), MXFP4 through the runtime recipe
 * (multipliers NULL). Free with fp4h_grouped_free. */
fp4_status fp4h_grouped_make(fp4h_rng *g, fp4_grouped_qmatrix *w, int64_t E, int64_t N, int64_t K, fp4_format format,
                             fp4_scale_layout layout);
void fp4h_grouped_free(fp4_grouped_qmatrix *w);

/* ids [T, k] and weights [T, k] (positive, each row summing to 1, like renormalized top-k softmax
 * probabilities). Needs k <= E (k <= E-1 for SKEWED). */
void fp4h_routing_fill(fp4h_rng *g, int32_t *ids, float *weights, int64_t T, int64_t k, int64_t E, fp4h_routing kind);

/* An FP4H_MOE case: T tokens, intermediate size I, hidden size H, E experts, top-k, hidden and output
 * in dtype, normal data; 128x4 routed weight scales, linear ones with a shared expert (both layouts
 * covered). */
fp4h_case fp4h_moe_case(int64_t T, int64_t I, int64_t H, int64_t E, int64_t k, int w4a4, fp4_format f, int shared,
                        int routing, fp4_dtype dtype);

/* Runs an FP4H_GROUPED_MM / FP4H_GROUPED_MM_W4A16 / FP4H_MOE case (fp4h_run calls it). */
void fp4h_run_moe(fp4_context *ctx, const char *backend, fp4_memory memory, const fp4h_case *c, uint64_t seed,
                  fp4h_result *r);

#endif
