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
  struct fp4_selection_table *selection;     /* remembered dispatch decisions (dispatch/selection_cache.c) */
  void *workspace;                           /* device workspace (src/core/workspace.c)          */
  size_t workspace_bytes;
};

/* Frees the context's remembered dispatch decisions (src/dispatch/selection_cache.c). */
void fp4_selection_release(struct fp4_selection_table *table);
/* Frees the context's tuning state (src/tune/tuner.c). */
void fp4_tuning_state_release(struct fp4_tuning_state *tuning);

/* The slot where a backend keeps its per-context state (handles, workspaces); NULL for ctx NULL. */
void **fp4_context_state(fp4_context *ctx, const char *backend_name);

/* At least bytes of the context's device workspace for work on stream (cudaStream_t) in *ptr (NULL
 * for bytes = 0). Grows it in stream order when it is smaller, unless stream is capturing a CUDA
 * graph: then FP4_ERR_UNSUPPORTED naming the bytes to reserve with fp4_context_reserve_workspace.
 * who names the caller in messages ("cuda large-m W4A4 prologue"). */
fp4_status fp4_context_workspace(fp4_context *ctx, size_t bytes, void *stream, const char *who, void **ptr);
/* FP4_OK when ptr is NULL or one f32 in device memory of ctx's device; otherwise
 * FP4_ERR_INVALID_ARGUMENT saying what it is ("pinned host", "device 1"). what names the argument. */
fp4_status fp4_check_device_scalar(fp4_context *ctx, const float *ptr, const char *fn, const char *what);
/* Frees the workspace (fp4_context_destroy). */
void fp4_context_workspace_release(fp4_context *ctx);

#ifdef __cplusplus
}
#endif

#endif
