#define _POSIX_C_SOURCE 200809L
/* Timing of repeated calls: CUDA events on the caller's stream for device work, a monotonic clock
 * for host work; the median of single-call times is what every report and the tuner use. */
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#if FP4KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

#if FP4KIT_HAVE_CUDA
/* Device timing: one event pair per call so each sample is a single call's time. */
static fp4_status time_device(void *stream, fp4_timed_fn fn, void *user, int warmup, int runs, double *samples) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaEvent_t *ev = malloc(sizeof *ev * (size_t)(2 * runs));
  if (!ev) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_time: out of host memory");
  int created = 0;
  fp4_status st = FP4_OK;
  cudaError_t e = cudaSuccess;
  for (; created < 2 * runs && e == cudaSuccess; created++) e = cudaEventCreate(&ev[created]);
  if (e != cudaSuccess) {
    created--;
    st = fp4_fail(FP4_ERR_CUDA, "fp4_time: cudaEventCreate: %s", cudaGetErrorString(e));
    goto out;
  }
  for (int i = 0; i < warmup && !st; i++) st = fn(user, i);
  for (int i = 0; i < runs && !st; i++) {
    cudaEventRecord(ev[2 * i], s);
    st = fn(user, warmup + i);
    cudaEventRecord(ev[2 * i + 1], s);
  }
  if (st) goto out;
  if ((e = cudaEventSynchronize(ev[2 * runs - 1])) != cudaSuccess) {
    st = fp4_fail(FP4_ERR_CUDA, "fp4_time: the timed work failed: %s", cudaGetErrorString(e));
    goto out;
  }
  for (int i = 0; i < runs; i++) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    samples[i] = (double)ms * 1e3;
  }
out:
  for (int i = 0; i < created; i++) cudaEventDestroy(ev[i]);
  free(ev);
  return st;
}
#endif

fp4_status fp4_time(fp4_context *ctx, void *stream, fp4_timed_fn fn, void *user, int warmup, int runs,
                    fp4_timing *timing) {
  fp4_clear_error();
  if (!fn) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_time: fn is NULL");
  if (!timing) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_time: timing is NULL");
  if (runs < 1 || warmup < 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_time: runs (%d) must be >= 1 and warmup (%d) >= 0", runs, warmup);
  double *samples = malloc(sizeof *samples * (size_t)runs);
  if (!samples) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_time: out of host memory");
  fp4_status st = FP4_OK;
  if (fp4_context_device(ctx) >= 0) {
#if FP4KIT_HAVE_CUDA
    cudaSetDevice(fp4_context_device(ctx));
    st = time_device(stream, fn, user, warmup, runs, samples);
#else
    (void)stream;
    st = fp4_fail(FP4_ERR_UNSUPPORTED, "fp4_time: device timing needs a build with CUDA");
#endif
  } else {
    for (int i = 0; i < warmup && !st; i++) st = fn(user, i);
    for (int i = 0; i < runs && !st; i++) {
      double t0 = now_us();
      st = fn(user, warmup + i);
      samples[i] = now_us() - t0;
    }
  }
  if (!st) {
    qsort(samples, (size_t)runs, sizeof *samples, cmp_double);
    timing->runs = runs;
    timing->min_us = samples[0];
    timing->max_us = samples[runs - 1];
    timing->median_us = runs % 2 ? samples[runs / 2] : 0.5 * (samples[runs / 2 - 1] + samples[runs / 2]);
  }
  free(samples);
  return st;
}
