/*
 * Per-context memory of dispatch decisions. Choosing a backend asks every registered backend
 * whether it supports the problem (vendor heuristics, plan lookups) and consults the tuning cache;
 * an engine makes the same call with the same shapes hundreds of times per decode step, so the
 * answer is remembered per (op, shapes, formats, layouts, dtypes, strides, pointer alignment
 * classes, memory, PDL, device scalars, named backend and config, tuning-cache generation) and
 * looked up in a small table. Dense ops only (quantize, W4A4, W4A16); MoE and grouped calls decide
 * per call.
 */
#ifndef FP4_DISPATCH_SELECTION_CACHE_H
#define FP4_DISPATCH_SELECTION_CACHE_H

#include <stdint.h>

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FP4_SELECTION_KEY_WORDS = 20 };

typedef struct fp4_selection_key {
  uint64_t w[FP4_SELECTION_KEY_WORDS];
  char config[64]; /* the named config the options asked for ("" for none) */
} fp4_selection_key;

/* Forms the key of p under options (backend index, -1 for auto; config as named) and the tuning
 * generation; 0 when p's op is not remembered (or the config name does not fit). */
int fp4_selection_key_of(const fp4_problem *p, int backend_index, const char *config, uint64_t tuning_generation,
                         fp4_selection_key *key);
/* The remembered backend and config ("" = backend default) for key; NULL when none. */
const fp4_backend *fp4_selection_find(fp4_context *ctx, const fp4_selection_key *key, const char **config);
/* Remembers a decision (no-op for ctx NULL or when memory runs out). */
void fp4_selection_store(fp4_context *ctx, const fp4_selection_key *key, const fp4_backend *backend,
                         const char *config);

#ifdef __cplusplus
}
#endif

#endif
