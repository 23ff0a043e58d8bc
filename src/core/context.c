#include "core/context.h"

#include <stdlib.h>

#include "core/error.h"
#include "dispatch/backend.h"

fp4_status fp4_context_create(fp4_context **ctx, int device) {
  fp4_clear_error();
  if (!ctx) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_create: ctx is NULL");
  *ctx = NULL;
  if (device < -1) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_create: device %d is not -1 or a CUDA ordinal", device);
  fp4_context *c = calloc(1, sizeof *c);
  if (!c) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_context_create: out of host memory");
  c->device = device;
  *ctx = c;
  return FP4_OK;
}

void fp4_context_destroy(fp4_context *ctx) {
  if (!ctx) return;
  for (int i = 0; i < fp4_registry_count() && i < FP4_MAX_BACKENDS; i++) {
    const fp4_backend *b = fp4_registry_get(i);
    if (ctx->backend_state[i] && b->release_state) b->release_state(ctx->backend_state[i]);
  }
  fp4_tuning_state_release(ctx->tuning);
  fp4_selection_release(ctx->selection);
  fp4_context_workspace_release(ctx);
  free(ctx);
}

int fp4_context_device(const fp4_context *ctx) { return ctx ? ctx->device : -1; }

void **fp4_context_state(fp4_context *ctx, const char *backend_name) {
  if (!ctx) return NULL;
  int i = fp4_registry_index(fp4_registry_find(backend_name));
  return (i >= 0 && i < FP4_MAX_BACKENDS) ? &ctx->backend_state[i] : NULL;
}
