/* Argument checks of the grouped GEMM and MoE entry points (src/dispatch/dispatch_moe.c). Shapes,
 * formats and memories are always checked; the contents of routing arrays (expert ids, offsets,
 * weights) are checked when they live in host memory (see docs/moe.md for device memory). */
#ifndef FP4_DISPATCH_VALIDATE_MOE_H
#define FP4_DISPATCH_VALIDATE_MOE_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest E accepted; keeps E * per-expert bytes and E+1 offsets comfortably inside int64. */
#define FP4_MAX_EXPERTS ((int64_t)1 << 20)
/* Largest T * top_k accepted: permuted rows are indexed with int32. */
#define FP4_MAX_MOE_PAIRS ((int64_t)INT32_MAX)

/* A dense matrix that may have zero rows (T = 0): then data may be NULL. */
fp4_status fp4_check_matrix_rows0(const char *fn, const char *name, const fp4_matrix *m);
/* A quantized matrix that may have zero rows (T = 0): then data and scales may be NULL. */
fp4_status fp4_check_qmatrix_rows0(const char *fn, const char *name, const fp4_qmatrix *q);
/* Grouped weights: pointers, format, layout, experts, shape, K alignment, memory, byte counts,
 * multipliers aligned to f32 and (host memory) finite. */
fp4_status fp4_check_grouped_qmatrix(const char *fn, const char *name, const fp4_grouped_qmatrix *g);
/* offsets [experts+1]: non-NULL, aligned to int64; in host memory also 0 first, non-decreasing, rows
 * last. */
fp4_status fp4_check_offsets(const char *fn, const int64_t *offsets, int64_t experts, int64_t rows, fp4_memory memory);
/* The layer: both expert sets, their shapes agreeing (gate_up [E, 2I, H], down [E, H, I]), one
 * memory, the mode, the W4A4 activation scales. */
fp4_status fp4_check_moe_layer(const char *fn, const fp4_moe_layer *layer);
/* Routing for tokens rows of hidden and a layer in memory (ids, weights and shared weights aligned to
 * their 4-byte elements): its description, no element read. */
fp4_status fp4_check_moe_routing(const char *fn, const fp4_moe_routing *r, int64_t tokens, fp4_memory memory);
/* The elements of routing that fp4_check_moe_routing accepted, when they live in host memory: ids in
 * [0, experts), finite weights and shared weights. Apart from the routing check because the layer's
 * size queries read no data (the router may not have run yet when an engine sizes the layer). */
fp4_status fp4_check_moe_routing_values(const char *fn, const fp4_moe_routing *r, int64_t experts, fp4_memory memory);

#ifdef __cplusplus
}
#endif

#endif
