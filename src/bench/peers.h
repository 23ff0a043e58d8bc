/* Internals of the same-run peers (src/bench/peers.c) and their CUDA kernels (peers_kernels.cu). */
#ifndef FP4_BENCH_PEERS_H
#define FP4_BENCH_PEERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels of the device peers. Each returns a cudaError_t as int (0 = success) so that this header
 * needs no CUDA headers; stream is a cudaStream_t. */
int fp4_peer_launch_copy(void *dst, const void *src, size_t bytes, void *stream);
/* Reads bytes from src and writes one 64-bit word per block into sink (at least 4096 words), so the
 * loads cannot be optimized away. */
int fp4_peer_launch_read(const void *src, size_t bytes, uint64_t *sink, void *stream);
/* The read over n (1 to FP4_PEER_READ_MAX_RANGES) ranges of whole 16-byte vectors in one kernel;
 * the arguments are checked by fp4_peer_read_ranges_queue. */
int fp4_peer_launch_read_ranges(const void *const *srcs, const size_t *bytes, int n, uint64_t *sink, void *stream);
/* Fills n elements with deterministic pseudo-random nonzero values in [-1, 1]: bf16 (2 bytes each)
 * or fp8 e4m3 (1 byte each). */
int fp4_peer_fill_bf16(void *dst, size_t n, uint64_t seed, void *stream);
int fp4_peer_fill_e4m3(void *dst, size_t n, uint64_t seed, void *stream);

enum { FP4_PEER_READ_SINK_WORDS = 4096 };

#ifdef __cplusplus
}
#endif

#endif
