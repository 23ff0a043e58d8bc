#include "core/context.h"

#include <stdlib.h>

#include "core/error.h"

fp4_status fp4_context_create(fp4_context **ctx, int device) {
  fp4_clear_error();
  if (!ctx) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_create: ctx is NULL");
  *ctx = NULL;
  if (device < -1) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_create: device %d is not -1 or a CUDA ordinal", device);
#if !FP4KIT_HAVE_CUDA
  if (device >= 0)
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "fp4_context_create: device %d asked for, but this fp4kit was built without CUDA (host backends "
                    "only): create the context with device -1",
                    device);
#endif
  fp4_context *c = calloc(1, sizeof *c);
  if (!c) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_context_create: out of host memory");
  c->device = device;
  *ctx = c;
  return FP4_OK;
}

void fp4_context_destroy(fp4_context *ctx) {
  if (!ctx) return;
  for (int i = FP4_CONTEXT_SLOTS - 1; i >= 0; i--) {
    fp4_context_part *s = &ctx->slots[i];
    if (s->owner && s->state && s->release) s->release(s->state);
  }
  fp4_context_workspace_release(ctx);
  free(ctx);
}

int fp4_context_device(const fp4_context *ctx) { return ctx ? ctx->device : -1; }

void **fp4_context_slot(fp4_context *ctx, const void *owner, fp4_context_release_fn release) {
  if (!ctx || !owner) return NULL;
  for (int i = 0; i < FP4_CONTEXT_SLOTS; i++) {
    fp4_context_part *s = &ctx->slots[i];
    if (s->owner == owner) return &s->state;
    if (!s->owner) {
      s->owner = owner;
      s->release = release;
      return &s->state;
    }
  }
  return NULL;
}
