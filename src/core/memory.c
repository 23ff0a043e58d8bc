/* Allocation and copies for callers without their own CUDA runtime (the fp4kit command, tests). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static fp4_status need_device(const char *fn, fp4_context *ctx) {
#if FP4KIT_HAVE_CUDA
  if (fp4_context_device(ctx) < 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: device memory needs a context created for a CUDA device", fn);
  cudaError_t e = cudaSetDevice(fp4_context_device(ctx));
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "%s: cudaSetDevice(%d): %s", fn, fp4_context_device(ctx), cudaGetErrorString(e));
  return FP4_OK;
#else
  (void)ctx;
  return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: this fp4kit was built without CUDA", fn);
#endif
}

fp4_status fp4_alloc(fp4_context *ctx, fp4_memory memory, size_t bytes, void **ptr) {
  fp4_clear_error();
  if (!ptr) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_alloc: ptr is NULL");
  *ptr = NULL;
  if (bytes == 0) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_alloc: bytes is 0");
  if (memory == FP4_MEMORY_HOST) {
    *ptr = malloc(bytes);
    return *ptr ? FP4_OK : fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_alloc: %zu bytes of host memory", bytes);
  }
  if (memory != FP4_MEMORY_DEVICE) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_alloc: memory %d is neither host nor device", (int)memory);
  fp4_status st = need_device("fp4_alloc", ctx);
  if (st) return st;
#if FP4KIT_HAVE_CUDA
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e != cudaSuccess) {
    *ptr = NULL;
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_alloc: cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
  }
#endif
  return FP4_OK;
}

void fp4_free(fp4_context *ctx, fp4_memory memory, void *ptr) {
  if (!ptr) return;
  if (memory == FP4_MEMORY_HOST) {
    free(ptr);
    return;
  }
#if FP4KIT_HAVE_CUDA
  if (fp4_context_device(ctx) >= 0) cudaSetDevice(fp4_context_device(ctx));
  cudaFree(ptr);
#else
  (void)ctx;
#endif
}

fp4_status fp4_copy(fp4_context *ctx, void *dst, fp4_memory dst_memory, const void *src, fp4_memory src_memory,
                    size_t bytes) {
  fp4_clear_error();
  if (!dst || !src) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_copy: %s is NULL", dst ? "src" : "dst");
  /* Checked before anything else: a value that is neither would otherwise reach the device branch
   * (and, in a CUDA build, cudaMemcpyDefault, which would copy whatever the pointers are). */
  if (!fp4_memory_name(dst_memory))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_copy: dst_memory %d is neither host nor device", (int)dst_memory);
  if (!fp4_memory_name(src_memory))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_copy: src_memory %d is neither host nor device", (int)src_memory);
  if (dst_memory == FP4_MEMORY_HOST && src_memory == FP4_MEMORY_HOST) {
    memmove(dst, src, bytes);
    return FP4_OK;
  }
  fp4_status st = need_device("fp4_copy", ctx);
  if (st) return st;
#if FP4KIT_HAVE_CUDA
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "fp4_copy: cudaMemcpy(%zu bytes): %s", bytes, cudaGetErrorString(e));
#endif
  return FP4_OK;
}

fp4_status fp4_synchronize(fp4_context *ctx) {
  fp4_clear_error();
  if (fp4_context_device(ctx) < 0) return FP4_OK;
  fp4_status st = need_device("fp4_synchronize", ctx);
  if (st) return st;
#if FP4KIT_HAVE_CUDA
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "fp4_synchronize: %s", cudaGetErrorString(e));
#endif
  return FP4_OK;
}

#if FP4KIT_HAVE_CUDA
/* Device scalars this context has found valid. An engine passes the same per-layer alpha and scale
 * tensors on every call of a decode step (a few hundred of them), and asking the driver about each
 * pointer on every call is a driver query on the hot path; an address found in device memory of the
 * context's device is remembered (direct-mapped, one pointer per slot) and not asked about again.
 * A pointer freed and reallocated elsewhere at the same address keeps its verdict: the check guards
 * against host pointers and other devices' pointers passed by mistake, not against reuse. */
enum { SCALAR_SLOT_BITS = 10, SCALAR_SLOTS = 1 << SCALAR_SLOT_BITS };
typedef struct scalar_table {
  const void *ok[SCALAR_SLOTS];
} scalar_table;
static const char scalar_table_owner = 0;

static const void **scalar_slot(fp4_context *ctx, const void *ptr) {
  void **state = fp4_context_slot(ctx, &scalar_table_owner, free);
  if (!state) return NULL;
  if (!*state) *state = calloc(1, sizeof(scalar_table));
  if (!*state) return NULL;
  const uint64_t h = ((uint64_t)(uintptr_t)ptr >> 2) * 0x9E3779B97F4A7C15ull;
  return &((scalar_table *)*state)->ok[h >> (64 - SCALAR_SLOT_BITS)];
}
#endif

fp4_status fp4_check_device_scalar(fp4_context *ctx, const float *ptr, const char *fn, const char *what) {
  if (!ptr) return FP4_OK;
  if ((uintptr_t)ptr % sizeof(float))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s (%p) is not 4-byte aligned (an f32)", fn, what, (const void *)ptr);
  const int device = fp4_context_device(ctx);
  if (device < 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is a device scalar but the context is %s", fn, what,
                    ctx ? "host-only (device -1)" : "NULL");
#if FP4KIT_HAVE_CUDA
  const void **known = scalar_slot(ctx, ptr);
  if (known && *known == (const void *)ptr) return FP4_OK;
  struct cudaPointerAttributes attr;
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s (%p) is not a pointer the CUDA runtime knows: %s", fn, what,
                    (const void *)ptr, cudaGetErrorString(e));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                    "%s: %s (%p) is %s memory; a device scalar must live in device memory of device %d", fn, what,
                    (const void *)ptr, attr.type == cudaMemoryTypeHost ? "pinned host" : "host", device);
  if (attr.device != device)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s lives on device %d but the context is on device %d", fn, what,
                    attr.device, device);
  if (known) *known = ptr;
  return FP4_OK;
#else
  return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: %s is a device scalar but this fp4kit was built without CUDA", fn, what);
#endif
}
