/* The kernels of the expert-parallel row moves (exchange_kernels.cu), checked and called by
 * exchange.c. Each returns a cudaError_t as int (0 = success) so that this header needs no CUDA
 * headers; stream is a cudaStream_t. */
#ifndef FP4_BENCH_EXCHANGE_KERNELS_H
#define FP4_BENCH_EXCHANGE_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vec: whole 16-byte vectors (width and ld multiples of 8, pointers 16-byte aligned). */
int fp4_exchange_launch_gather(void *dst, const void *src, int64_t ld, const int32_t *rows, int64_t n, int64_t width,
                               int vec, void *stream);
int fp4_exchange_launch_sum(void *out, const void *base, const void *src, const int32_t *index, int64_t tokens,
                            int64_t k, int64_t width, int vec, void *stream);

#ifdef __cplusplus
}
#endif

#endif
