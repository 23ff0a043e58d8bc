#ifndef FP4_CORE_CONTEXT_H
#define FP4_CORE_CONTEXT_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a part of the library keeps per context (a backend's handles, the tuning state, remembered
 * dispatch decisions): its state and how to free it, found by the owner's address. */
typedef void (*fp4_context_release_fn)(void *state);
enum { FP4_CONTEXT_SLOTS = 32 };
typedef struct fp4_context_part {
  const void *owner; /* NULL: a free slot */
  void *state;
  fp4_context_release_fn release;
} fp4_context_part;

struct fp4_context {
  int device;                                /* CUDA ordinal, -1 host-only                       */
  fp4_context_part slots[FP4_CONTEXT_SLOTS]; /* taken in order of first use                      */
  void *workspace;                           /* device workspace (src/core/workspace.c)          */
  size_t workspace_bytes;
};

/* Where owner keeps its state on ctx (the state NULL until it stores one), taken on first use:
 * fp4_context_destroy frees a non-NULL state with release (NULL: nothing to free), the slots taken
 * last first. NULL for ctx NULL or when all FP4_CONTEXT_SLOTS are taken. */
void **fp4_context_slot(fp4_context *ctx, const void *owner, fp4_context_release_fn release);

/* At least bytes of the context's device workspace for work on stream (cudaStream_t) in *ptr (NULL
 * for bytes = 0). Grows it in stream order when it is smaller, unless stream is capturing a CUDA
 * graph: then FP4_ERR_UNSUPPORTED naming the bytes to reserve with fp4_context_reserve_workspace.
 * who names the caller in messages ("cuda large-m W4A4 prologue"). */
fp4_status fp4_context_workspace(fp4_context *ctx, size_t bytes, void *stream, const char *who, void **ptr);
/* FP4_OK when ptr is NULL or one f32 (4-byte aligned) in device memory of ctx's device; otherwise
 * FP4_ERR_INVALID_ARGUMENT saying what it is ("pinned host", "device 1"). what names the argument. */
fp4_status fp4_check_device_scalar(fp4_context *ctx, const float *ptr, const char *fn, const char *what);
/* Frees the workspace (fp4_context_destroy). */
void fp4_context_workspace_release(fp4_context *ctx);

#ifdef __cplusplus
}
#endif

#endif
