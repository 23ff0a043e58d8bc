/* The expert-parallel all-to-all of the multi-GPU step: who sends which rows where (step_exchange.h). */
#include "step_exchange.h"

#include <stdlib.h>
#include <string.h>

#include "bench_step.h"

void step_exchange_free(step_exchange *x) {
  free(x->send_count);
  free(x->recv_count);
  free(x->send_token);
  free(x->recv_expert);
  free(x->recv_weight);
  free(x->sum_rows);
  memset(x, 0, sizeof *x);
}

fp4_status step_exchange_make(uint64_t seed, int64_t layer, int ranks, int rank, int64_t tokens, int64_t stride,
                              int64_t top_k, int64_t local_experts, step_exchange *x) {
  memset(x, 0, sizeof *x);
  if (ranks < 1 || rank < 0 || rank >= ranks || tokens < 0 || stride < tokens || local_experts < 1 || top_k < 1 ||
      top_k > (int64_t)ranks * local_experts || stride * top_k > INT32_MAX / ranks)
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT,
                         "exchange of rank %d of %d: %lld tokens (of %lld per rank), top-%lld of %lld experts per rank "
                         "is not an exchange", rank, ranks, (long long)tokens, (long long)stride, (long long)top_k,
                         (long long)local_experts);
  x->ranks = ranks;
  x->rank = rank;
  x->tokens = tokens;
  x->top_k = top_k;
  x->local_experts = local_experts;
  x->sent = tokens * top_k;
  const int64_t all = (int64_t)ranks * stride; /* every rank's token ids, in rank order */
  const size_t pairs = (size_t)(all * top_k) + 1, sent = (size_t)x->sent + 1; /* + 1: never malloc(0) */
  int32_t *ids = malloc(pairs * sizeof *ids);
  float *w = malloc(pairs * sizeof *w);
  int64_t *fill = calloc((size_t)ranks, sizeof *fill);
  x->send_count = calloc((size_t)ranks, sizeof *x->send_count);
  x->recv_count = calloc((size_t)ranks, sizeof *x->recv_count);
  x->send_token = malloc(sent * sizeof *x->send_token);
  x->sum_rows = malloc(sent * sizeof *x->sum_rows);
  if (!ids || !w || !fill || !x->send_count || !x->recv_count || !x->send_token || !x->sum_rows) goto oom;
  step_routing(seed, layer, all, top_k, (int64_t)ranks * local_experts, ids, w);
  /* What this rank receives: each source's rows for it, sources in rank order; a source sends
   * destination-major, so its rows for this rank are its pairs naming our experts, in pair order. */
  for (int s = 0; s < ranks; s++)
    for (int64_t i = (int64_t)s * stride * top_k; i < ((int64_t)s * stride + tokens) * top_k; i++)
      if (ids[i] / local_experts == rank) x->recv_count[s]++;
  for (int s = 0; s < ranks; s++) x->received += x->recv_count[s];
  x->recv_expert = malloc(((size_t)x->received + 1) * sizeof *x->recv_expert);
  x->recv_weight = malloc(((size_t)x->received + 1) * sizeof *x->recv_weight);
  if (!x->recv_expert || !x->recv_weight) goto oom;
  int64_t r = 0;
  for (int s = 0; s < ranks; s++)
    for (int64_t i = (int64_t)s * stride * top_k; i < ((int64_t)s * stride + tokens) * top_k; i++)
      if (ids[i] / local_experts == rank) {
        x->recv_expert[r] = (int32_t)(ids[i] % local_experts);
        x->recv_weight[r++] = w[i];
      }
  /* What this rank sends: its own pairs, destination-major. */
  const int32_t *mine = ids + (int64_t)rank * stride * top_k;
  for (int64_t i = 0; i < x->sent; i++) x->send_count[mine[i] / local_experts]++;
  for (int d = 1; d < ranks; d++) fill[d] = fill[d - 1] + x->send_count[d - 1];
  for (int64_t i = 0; i < x->sent; i++) {
    const int64_t at = fill[mine[i] / local_experts]++;
    x->send_token[at] = (int32_t)(i / top_k);
    x->sum_rows[i] = (int32_t)at; /* the rows come back where they left */
  }
  free(ids);
  free(w);
  free(fill);
  return FP4_OK;
oom:
  free(ids);
  free(w);
  free(fill);
  step_exchange_free(x);
  return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the exchange of %lld tokens per rank", (long long)tokens);
}

int64_t step_exchange_rows_out(const step_exchange *x) { return x->sent - x->send_count[x->rank]; }

int64_t step_exchange_rows_back(const step_exchange *x) { return x->received - x->recv_count[x->rank]; }

void step_exchange_counts(const int32_t *ids, int ranks, int64_t tokens, int64_t stride, int64_t top_k,
                          int64_t local_experts, unsigned char *seen, step_exchange_count *per_rank) {
  memset(seen, 0, (size_t)ranks * (size_t)local_experts);
  memset(per_rank, 0, (size_t)ranks * sizeof *per_rank);
  for (int s = 0; s < ranks; s++)
    for (int64_t i = (int64_t)s * stride * top_k; i < ((int64_t)s * stride + tokens) * top_k; i++) {
      const int d = (int)(ids[i] / local_experts);
      per_rank[d].received++;
      if (d != s) {
        per_rank[s].rows_out++;
        per_rank[d].rows_back++;
      }
      if (!seen[ids[i]]) {
        seen[ids[i]] = 1;
        per_rank[d].touched++;
      }
    }
}
