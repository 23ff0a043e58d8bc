/*
 * The expert-parallel all-to-all of the multi-GPU decode step (`fp4kit bench --step MODEL --ep N
 * --gpus N --moe-comm all-to-all`, bench_step.c): which rows each rank sends where, and how it sums
 * what comes back. Host arithmetic only, so the whole exchange is checked without a GPU
 * (tests/test_bench_step.c simulates every rank on the host).
 *
 * Every rank holds `tokens` tokens of its own (data-parallel attention: rank r's token t is the
 * model's token r * stride + t, stride >= tokens, so that the pairs of a smaller batch are among
 * those of a larger one). Each token picks top_k distinct experts of all ranks * local_experts
 * (step_routing over every rank's tokens with the same seed, so all ranks agree without talking);
 * expert e lives on rank e / local_experts as its local expert e % local_experts.
 *
 * Dispatch: a rank sends one row per (token, chosen expert) pair, its token's hidden vector, grouped
 * by destination rank in rank order and, within a destination, in token order then choice order. It
 * receives the rows other ranks send it (its own included), grouped by source rank in rank order,
 * each with the local expert it goes to and its routing weight: the MoE runs on them with top_k 1.
 * Combine: each rank sends the expert outputs back in the order it received them, so a rank gets its
 * rows back in the order it sent them; token t's output is the sum of rows sum_rows[t * top_k ..
 * (t + 1) * top_k) of that buffer (plus the shared expert's output of the token).
 */
#ifndef FP4_TOOLS_STEP_EXCHANGE_H
#define FP4_TOOLS_STEP_EXCHANGE_H

#include <stdint.h>

#include "fp4kit.h"

typedef struct step_exchange {
  int ranks, rank;
  int64_t tokens;        /* this rank's tokens                                                    */
  int64_t top_k;         /* experts each token picks over every rank                              */
  int64_t local_experts; /* experts per rank                                                      */
  int64_t *send_count;   /* [ranks]: rows sent to each rank                                       */
  int64_t *recv_count;   /* [ranks]: rows received from each rank                                 */
  int64_t sent;          /* tokens * top_k                                                        */
  int64_t received;      /* sum of recv_count                                                     */
  int32_t *send_token;   /* [sent]: the token whose hidden vector each sent row carries           */
  int32_t *recv_expert;  /* [received]: the local expert each received row goes to                */
  float *recv_weight;    /* [received]: its routing weight                                        */
  int32_t *sum_rows;     /* [tokens, top_k]: the returned rows of each token's pairs              */
} step_exchange;

/* The exchange of one MoE layer for rank `rank` of `ranks` (routing seeded by seed and layer, as
 * step_routing). Needs 1 <= top_k <= ranks * local_experts and 0 <= tokens <= stride.
 * FP4_ERR_INVALID_ARGUMENT or FP4_ERR_OUT_OF_MEMORY with the reason; on failure *x holds nothing to
 * free. */
fp4_status step_exchange_make(uint64_t seed, int64_t layer, int ranks, int rank, int64_t tokens, int64_t stride,
                              int64_t top_k, int64_t local_experts, step_exchange *x);
void step_exchange_free(step_exchange *x);

/* Rows a rank moves to other ranks in one layer (its own rows stay): dispatch, and combine. */
int64_t step_exchange_rows_out(const step_exchange *x);
int64_t step_exchange_rows_back(const step_exchange *x);

/* What one rank does in a layer's exchange, as step_exchange_make's would say. */
typedef struct step_exchange_count {
  int64_t received;  /* rows it receives, its own included                                          */
  int64_t touched;   /* distinct local experts those rows name                                      */
  int64_t rows_out;  /* rows it sends to other ranks in the dispatch (step_exchange_rows_out)        */
  int64_t rows_back; /* rows it returns to other ranks in the combine (step_exchange_rows_back)      */
} step_exchange_count;

/* Every rank's counts at `tokens` per rank in one pass, from the routing ids of all ranks' stride
 * tokens (step_routing of ranks * stride tokens over ranks * local_experts experts, as
 * step_exchange_make draws them): what the plan prints without building an exchange per rank.
 * seen: ranks * local_experts bytes of scratch; per_rank: ranks entries. */
void step_exchange_counts(const int32_t *ids, int ranks, int64_t tokens, int64_t stride, int64_t top_k,
                          int64_t local_experts, unsigned char *seen, step_exchange_count *per_rank);

#endif
