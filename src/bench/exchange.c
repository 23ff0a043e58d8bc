/* The row moves around an expert-parallel all-to-all (fp4kit_bench.h): arguments checked here, the
 * kernels in exchange_kernels.cu. */
#include <stdint.h>

#include "fp4kit_bench.h"

#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "bench/exchange_kernels.h"
#endif

#if FP4KIT_HAVE_CUDA
/* Whether rows of `width` bf16 at these addresses, ld elements apart, move as 16-byte vectors. */
static int whole_vectors(const void *a, const void *b, const void *c, int64_t width, int64_t ld) {
  return width % 8 == 0 && ld % 8 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}
#endif

fp4_status fp4_exchange_gather_bf16_queue(void *dst, const void *src, int64_t ld, const int32_t *rows, int64_t n,
                                          int64_t width, void *stream) {
  if (n < 0 || n > INT32_MAX || width < 1 || ld < width || (n && (!dst || !src || !rows)))
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT,
                         "fp4_exchange_gather_bf16_queue: %lld rows of width %lld from rows %lld apart (dst %p, src %p, "
                         "rows %p)", (long long)n, (long long)width, (long long)ld, dst, src, (const void *)rows);
  if (!n) return FP4_OK;
#if FP4KIT_HAVE_CUDA
  const int e = fp4_exchange_launch_gather(dst, src, ld, rows, n, width, whole_vectors(dst, src, NULL, width, ld), stream);
  return e ? fp4_set_error(FP4_ERR_CUDA, "fp4_exchange_gather_bf16_queue: %s", cudaGetErrorString((cudaError_t)e)) : FP4_OK;
#else
  (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_exchange_gather_bf16_queue: this build has no CUDA");
#endif
}

fp4_status fp4_exchange_sum_bf16_queue(void *out, const void *base, const void *src, const int32_t *index, int64_t tokens,
                                       int64_t k, int64_t width, void *stream) {
  if (tokens < 0 || tokens > INT32_MAX || k < 0 || width < 1 || (tokens && (!out || (k && (!src || !index)))))
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT,
                         "fp4_exchange_sum_bf16_queue: %lld tokens of %lld rows of width %lld (out %p, src %p, index %p)",
                         (long long)tokens, (long long)k, (long long)width, out, src, (const void *)index);
  if (!tokens) return FP4_OK;
#if FP4KIT_HAVE_CUDA
  const int e = fp4_exchange_launch_sum(out, base, src, index, tokens, k, width, whole_vectors(out, base, src, width, width),
                                        stream);
  return e ? fp4_set_error(FP4_ERR_CUDA, "fp4_exchange_sum_bf16_queue: %s", cudaGetErrorString((cudaError_t)e)) : FP4_OK;
#else
  (void)base, (void)stream;
  return fp4_set_error(FP4_ERR_UNSUPPORTED, "fp4_exchange_sum_bf16_queue: this build has no CUDA");
#endif
}
