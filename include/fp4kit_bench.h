/*
 * fp4kit_bench: timing, same-run peers and machine facts for benchmarks (src/bench/, the library
 * libfp4kit_bench that the fp4kit command and the tests link). It is a client of libfp4kit, not part
 * of it: libfp4kit links only what its backends need, while the peers here link cuBLAS to time the
 * competitor. Failures report through fp4kit's fp4_last_error().
 */
#ifndef FP4KIT_BENCH_H
#define FP4KIT_BENCH_H

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_timing {
  double median_us;
  double min_us;
  double max_us;
  int runs;
} fp4_timing;

/* One timed call; iteration counts from 0 so callers can rotate through input sets larger than the
 * L2 cache. Returns FP4_OK or the failure that stops the measurement. */
typedef fp4_status (*fp4_timed_fn)(void *user, int iteration);

/* Calls fn warmup times, then times runs calls one by one: with CUDA events on stream when ctx has a
 * device, with a monotonic host clock otherwise (the timer fp4_tune uses, src/tune/timer.c). */
fp4_status fp4_time(fp4_context *ctx, void *stream, fp4_timed_fn fn, void *user, int warmup, int runs,
                    fp4_timing *timing);

typedef enum fp4_peer {
  FP4_PEER_COPY = 0,          /* device-to-device copy of n*k bytes; bandwidth counts read + written */
  FP4_PEER_READ = 1,          /* device read-only reduction over n*k bytes                           */
  FP4_PEER_CUBLAS_BF16 = 2,   /* cuBLAS BF16 GEMM [m, k] x [n, k]^T, FP32 accumulation               */
  FP4_PEER_CUBLASLT_FP8 = 3,  /* cuBLASLt FP8 E4M3 GEMM of the same shape                             */
  FP4_PEER_HOST_READ = 4,     /* host memory read bandwidth over n*k bytes with the CPU threads        */
  FP4_PEER_HOST_FMA = 5       /* host FP32 FMA peak: 2*m*n*k FLOPs of register-only FMAs on the threads */
} fp4_peer;

/* Times a peer on the same machine in the same run. bytes_per_s (optional) receives the bandwidth
 * for the memory peers (COPY counts bytes read + written) and FLOP/s (2*m*n*k / median) for the
 * compute peers (CUBLAS_BF16, CUBLASLT_FP8, HOST_FMA). Device GEMM peers and READ rotate through
 * enough operand copies to exceed the L2 cache. Host peers use FP4KIT_NUM_THREADS threads (default: every online
 * CPU). FP4_ERR_UNSUPPORTED when the peer cannot run here, with the reason. */
fp4_status fp4_time_peer(fp4_context *ctx, fp4_peer peer, int64_t m, int64_t n, int64_t k, int runs,
                         fp4_timing *timing, double *bytes_per_s);
/* Name of a peer for tables ("cublas-bf16", "copy"); NULL for unknown values. */
const char *fp4_peer_name(fp4_peer peer);
/* Queues the READ peer's kernel once on stream over bytes of device memory at src (no timing, no
 * synchronization: a caller chains or captures such passes itself). sink: device memory of at
 * least 4096 64-bit words, which the kernel writes so that its loads are kept. FP4_ERR_UNSUPPORTED
 * in a build without CUDA. */
fp4_status fp4_peer_read_queue(const void *src, size_t bytes, void *sink, void *stream);
/* The same read over n ranges of device memory in one kernel (srcs[i], bytes[i]: 16-byte aligned
 * addresses and sizes, n <= FP4_PEER_READ_MAX_RANGES): the bound of a call that reads scattered
 * bytes, such as a MoE layer's touched experts, in one launch. */
enum { FP4_PEER_READ_MAX_RANGES = 96 };
fp4_status fp4_peer_read_ranges_queue(const void *const *srcs, const size_t *bytes, int n, void *sink, void *stream);

/* The row moves around an expert-parallel all-to-all (the multi-GPU decode step's dispatch and
 * combine, tools/step_exchange.h), on bf16 rows of `width` elements in device memory, queued on
 * stream (a cudaStream_t; capturable, nothing allocated). Gather: dst[i, :] = src[rows[i], :] for
 * i < n, dst dense [n, width], src rows ld elements apart. Sum: out[t, :] = base[t, :] +
 * sum_j src[index[t * k + j], :] for t < tokens and j < k, added in f32 and rounded to bf16 once;
 * base NULL adds nothing; out and base dense [tokens, width], src dense rows. rows and index are
 * int32 in device memory. FP4_ERR_UNSUPPORTED in a build without CUDA. */
fp4_status fp4_exchange_gather_bf16_queue(void *dst, const void *src, int64_t ld, const int32_t *rows, int64_t n,
                                          int64_t width, void *stream);
fp4_status fp4_exchange_sum_bf16_queue(void *out, const void *base, const void *src, const int32_t *index, int64_t tokens,
                                       int64_t k, int64_t width, void *stream);

/* What a measurement record needs to say about the machine it ran on. */
typedef struct fp4_device_info {
  int device;             /* CUDA ordinal, -1 for the host                                       */
  char name[128];         /* "NVIDIA H200", or the CPU model name                                */
  int cc_major, cc_minor; /* compute capability; 0 for the host                                  */
  int processors;         /* streaming multiprocessors, or the host threads fp4kit uses          */
  int64_t cache_bytes;    /* GPU L2, or the CPU's last-level cache (0 when unknown)              */
  int64_t memory_bytes;   /* device global memory, or host physical memory (0 when unknown)      */
  int driver_version;     /* cudaDriverGetVersion (13000 = 13.0); 0 on the host or without CUDA  */
  int runtime_version;    /* the CUDA runtime fp4kit runs with; 0 without CUDA                   */
} fp4_device_info;

/* Describes ctx's device, or the host for ctx NULL / device -1. */
fp4_status fp4_device_info_get(fp4_context *ctx, fp4_device_info *info);

#ifdef __cplusplus
}
#endif

#endif /* FP4KIT_BENCH_H */
