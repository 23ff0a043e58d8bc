/* Host side of the cuda backend's grouped GEMM and MoE layer (moe_host.c), called from
 * cuda_backend.c for FP4_OP_GROUPED_MM, FP4_OP_GROUPED_MM_W4A16 and FP4_OP_MOE. */
#ifndef FP4_BACKENDS_CUDA_MOE_HOST_H
#define FP4_BACKENDS_CUDA_MOE_HOST_H

#include "dispatch/backend.h"

/* FP4_OK, or FP4_ERR_UNSUPPORTED with the rule the kernels need that p breaks. */
fp4_status fp4_cuda_moe_supports(const fp4_problem *p, char *reason, size_t reason_size);
/* The configuration a call runs: "grouped" / "moe" (streaming kernels) or "grouped.large-m" /
 * "moe.large-m" (the routed GEMMs on the large-M tiles, from MOE_LARGE_M_MIN_ROWS rows per expert). */
const char *fp4_cuda_moe_config(const fp4_problem *p);
/* Launches p on p->stream (pdl: with programmatic dependent launch); returns the cudaError_t. */
int fp4_cuda_moe_launch(const fp4_problem *p, int pdl);
/* The workspace fp4_moe_forward needs on this backend: the common layout plus the routing scratch. */
size_t fp4_cuda_moe_workspace_size(const fp4_moe_layer *layer, int64_t tokens, int64_t top_k);

#endif
