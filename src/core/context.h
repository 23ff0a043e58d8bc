#ifndef FP4_CORE_CONTEXT_H
#define FP4_CORE_CONTEXT_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP4_MAX_BACKENDS 32

struct fp4_context {
  int device;                                /* CUDA ordinal, -1 host-only                       */
  void *backend_state[FP4_MAX_BACKENDS];     /* per backend, indexed by registry position        */
  struct fp4_tuning_state *tuning;           /* auto selection's cache (src/tune/tuner.c)        */
};

/* Frees the context's tuning state (src/tune/tuner.c). */
void fp4_tuning_state_release(struct fp4_tuning_state *tuning);

/* The slot where a backend keeps its per-context state (handles, workspaces); NULL for ctx NULL. */
void **fp4_context_state(fp4_context *ctx, const char *backend_name);

#ifdef __cplusplus
}
#endif

#endif
