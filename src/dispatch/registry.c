/* The backend registry: one line per backend. Backends that were not built in still register a
 * table whose available() says why, so probes and tables list every backend. */
#include <string.h>

#include "core/context.h"
#include "dispatch/backend.h"

extern const fp4_backend fp4_backend_ref;
extern const fp4_backend fp4_backend_cpu;
extern const fp4_backend fp4_backend_cuda;
extern const fp4_backend fp4_backend_cuda_sm120;
extern const fp4_backend fp4_backend_cublaslt;
extern const fp4_backend fp4_backend_cublas_dequant;
extern const fp4_backend fp4_backend_cudnn;

static const fp4_backend *const registry[] = {
    &fp4_backend_ref,
    &fp4_backend_cpu,
    &fp4_backend_cuda,
    &fp4_backend_cuda_sm120,
    &fp4_backend_cublaslt,
    &fp4_backend_cublas_dequant,
    &fp4_backend_cudnn,
};

int fp4_registry_count(void) { return (int)(sizeof registry / sizeof *registry); }

const fp4_backend *fp4_registry_get(int index) {
  return (index >= 0 && index < fp4_registry_count()) ? registry[index] : NULL;
}

const fp4_backend *fp4_registry_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < fp4_registry_count(); i++)
    if (!strcmp(registry[i]->name, name)) return registry[i];
  return NULL;
}

int fp4_registry_index(const fp4_backend *backend) {
  for (int i = 0; i < fp4_registry_count(); i++)
    if (registry[i] == backend) return i;
  return -1;
}

void **fp4_context_state(fp4_context *ctx, const char *backend_name) {
  const fp4_backend *b = fp4_registry_find(backend_name);
  return b ? fp4_context_slot(ctx, b, b->release_state) : NULL;
}
