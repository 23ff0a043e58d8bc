/* The context's device workspace: the one place GPU paths get temporary device memory, so no call
 * allocates behind the caller's back and every call can be captured in a CUDA graph once the
 * workspace has been reserved (include/fp4kit.h, fp4_context_reserve_workspace). */
#include <stddef.h>

#include "core/context.h"
#include "core/error.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

static fp4_status workspace_device(const fp4_context *ctx, const char *fn) {
  if (!ctx) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: ctx is NULL (the workspace belongs to a device context)", fn);
  if (ctx->device < 0) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the context is host-only (device -1)", fn);
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == ctx->device) return FP4_OK;
  cudaError_t e = cudaSetDevice(ctx->device);
  if (e != cudaSuccess) return fp4_fail(FP4_ERR_CUDA, "%s: cudaSetDevice(%d): %s", fn, ctx->device, cudaGetErrorString(e));
  return FP4_OK;
}

fp4_status fp4_context_reserve_workspace(fp4_context *ctx, size_t bytes) {
  fp4_clear_error();
  fp4_status st = workspace_device(ctx, "fp4_context_reserve_workspace");
  if (st) return st;
  if (bytes <= ctx->workspace_bytes) return FP4_OK;
  /* Reserving happens before the hot path (engine start, before capture): a blocking allocation is
   * the right tool here, and cudaFree waits for work still using the old buffer. */
  if (ctx->workspace) {
    cudaError_t e = cudaFree(ctx->workspace);
    ctx->workspace = NULL;
    ctx->workspace_bytes = 0;
    if (e != cudaSuccess)
      return fp4_fail(FP4_ERR_CUDA, "fp4_context_reserve_workspace: cudaFree: %s", cudaGetErrorString(e));
  }
  cudaError_t e = cudaMalloc(&ctx->workspace, bytes);
  if (e != cudaSuccess) {
    ctx->workspace = NULL;
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_context_reserve_workspace: cudaMalloc(%zu): %s", bytes,
                    cudaGetErrorString(e));
  }
  ctx->workspace_bytes = bytes;
  return FP4_OK;
}

fp4_status fp4_context_workspace(fp4_context *ctx, size_t bytes, void *stream, const char *who, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return FP4_OK;
  fp4_status st = workspace_device(ctx, who);
  if (st) return st;
  if (bytes <= ctx->workspace_bytes) {
    *ptr = ctx->workspace;
    return FP4_OK;
  }
  cudaStream_t s = (cudaStream_t)stream;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(s, &capture);
  if (e != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    if (e != cudaSuccess) (void)cudaGetLastError(); /* the query's own error must not stick */
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "%s: needs %zu bytes of device workspace, the context holds %zu, and the stream is being "
                    "captured into a CUDA graph (no allocation is allowed there): call "
                    "fp4_context_reserve_workspace(ctx, %zu) before the capture",
                    who, bytes, ctx->workspace_bytes, bytes);
  }
  /* Outside capture, grow in stream order: no device-wide synchronization on the hot path. */
  if (ctx->workspace && (e = cudaFreeAsync(ctx->workspace, s)) != cudaSuccess) {
    ctx->workspace = NULL;
    ctx->workspace_bytes = 0;
    return fp4_fail(FP4_ERR_CUDA, "%s: cudaFreeAsync of the old workspace: %s", who, cudaGetErrorString(e));
  }
  ctx->workspace = NULL;
  ctx->workspace_bytes = 0;
  if ((e = cudaMallocAsync(&ctx->workspace, bytes, s)) != cudaSuccess) {
    ctx->workspace = NULL;
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: cudaMallocAsync(%zu) for the context workspace: %s", who, bytes,
                    cudaGetErrorString(e));
  }
  ctx->workspace_bytes = bytes;
  *ptr = ctx->workspace;
  return FP4_OK;
}

void fp4_context_workspace_release(fp4_context *ctx) {
  if (!ctx || !ctx->workspace) return;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != ctx->device) (void)cudaSetDevice(ctx->device);
  (void)cudaFree(ctx->workspace);
  ctx->workspace = NULL;
  ctx->workspace_bytes = 0;
}

#else

fp4_status fp4_context_reserve_workspace(fp4_context *ctx, size_t bytes) {
  fp4_clear_error();
  (void)bytes;
  if (!ctx) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_reserve_workspace: ctx is NULL");
  if (ctx->device < 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_reserve_workspace: the context is host-only (device -1)");
  return fp4_fail(FP4_ERR_UNSUPPORTED, "fp4_context_reserve_workspace: this build has no CUDA support");
}

fp4_status fp4_context_workspace(fp4_context *ctx, size_t bytes, void *stream, const char *who, void **ptr) {
  (void)ctx;
  (void)stream;
  *ptr = NULL;
  if (bytes == 0) return FP4_OK;
  return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: device workspace needs a build with CUDA support", who);
}

void fp4_context_workspace_release(fp4_context *ctx) { (void)ctx; }

#endif

size_t fp4_context_workspace_bytes(const fp4_context *ctx) { return ctx ? ctx->workspace_bytes : 0; }
