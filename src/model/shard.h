/* Tensor/expert-parallel sharding of one linear layer: shared by the embedded shape sets and by the
 * GEMM list `fp4kit inspect` derives from a checkpoint, so both shard the same way. */
#ifndef FP4_MODEL_SHARD_H
#define FP4_MODEL_SHARD_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp4_shard_kind {
  FP4_SHARD_REPLICATED = 0, /* every rank holds the whole weight (routers, small projections) */
  FP4_SHARD_COLUMN = 1,     /* TP splits N (q/k/v, gate/up, in_proj, lm_head)                   */
  FP4_SHARD_ROW = 2,        /* TP splits K (o_proj, down_proj, out_proj)                        */
  FP4_SHARD_QKV = 3,        /* fused q+k+v: q split over TP, KV heads split or replicated      */
  FP4_SHARD_EXPERT_COLUMN = 4, /* routed expert gate/up: EP splits experts, MoE-TP splits N      */
  FP4_SHARD_EXPERT_ROW = 5     /* routed expert down: EP splits experts, MoE-TP splits K         */
} fp4_shard_kind;

/* One linear layer of a model before sharding. */
typedef struct fp4_linear_desc {
  const char *name;
  int64_t n, k;        /* whole weight [N, K]; for FP4_SHARD_QKV n = q_out + 2*kv_heads*head_dim */
  int64_t layers;      /* layers (or MTP blocks) holding this GEMM                                 */
  fp4_shard_kind kind;
  const char *storage; /* "nvfp4", "bf16", "fp8", ...                                              */
  int experts;         /* routed experts per layer (MoE kinds), else 0                             */
  int active;          /* experts per token (MoE kinds), else 0                                    */
  int64_t q_out;       /* FP4_SHARD_QKV only: output features of q (gate included)                 */
  int kv_heads;        /* FP4_SHARD_QKV only                                                       */
  int64_t head_dim;    /* FP4_SHARD_QKV only                                                       */
} fp4_linear_desc;

/* Shards d for tp x ep into *out. Rules: TP splits N of column-parallel and K of row-parallel
 * layers; fused QKV splits q over TP and the KV heads too while there are at least tp of them
 * (otherwise each rank keeps one replicated KV head); EP splits the routed experts of a layer and
 * the remaining tp/ep ranks of the tensor-parallel group split each expert (MoE-TP); ep >= tp means
 * whole experts. count = layers for dense GEMMs and layers x experts a token touches on one rank
 * (ceil(active/ep), at most the local experts) for routed experts. An uneven split is
 * FP4_ERR_INVALID_ARGUMENT naming fn (the public entry asking) and the layer. */
fp4_status fp4_linear_shard(const char *fn, const fp4_linear_desc *d, int tp, int ep, fp4_gemm_shape *out);

/* Checks tp and ep (>= 1; ep divides tp or is a multiple of it) for error messages of fn. */
fp4_status fp4_parallel_check(const char *fn, int tp, int ep);

#ifdef __cplusplus
}
#endif

#endif
