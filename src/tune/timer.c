#define _POSIX_C_SOURCE 200809L
/* The median-of-single-calls timer (timer.h). */
#include "tune/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
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
static fp4_status time_device(void *stream, fp4_call_fn fn, void *user, int warmup, int runs, double *samples,
                              char *why, size_t why_size) {
  cudaStream_t s = (cudaStream_t)stream;
  cudaEvent_t *ev = malloc(sizeof *ev * (size_t)(2 * runs));
  if (!ev) {
    snprintf(why, why_size, "out of host memory");
    return FP4_ERR_OUT_OF_MEMORY;
  }
  int created = 0;
  fp4_status st = FP4_OK;
  cudaError_t e = cudaSuccess;
  for (; created < 2 * runs && e == cudaSuccess; created++) e = cudaEventCreate(&ev[created]);
  if (e != cudaSuccess) {
    created--;
    snprintf(why, why_size, "cudaEventCreate: %s", cudaGetErrorString(e));
    st = FP4_ERR_CUDA;
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
    snprintf(why, why_size, "the timed work failed: %s", cudaGetErrorString(e));
    st = FP4_ERR_CUDA;
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

fp4_status fp4_timer_run(int device, void *stream, fp4_call_fn fn, void *user, int warmup, int runs,
                         fp4_call_timing *timing, char *why, size_t why_size) {
  if (why_size) why[0] = '\0';
  double *samples = malloc(sizeof *samples * (size_t)runs);
  if (!samples) {
    snprintf(why, why_size, "out of host memory");
    return FP4_ERR_OUT_OF_MEMORY;
  }
  fp4_status st = FP4_OK;
  if (device >= 0) {
#if FP4KIT_HAVE_CUDA
    cudaSetDevice(device);
    st = time_device(stream, fn, user, warmup, runs, samples, why, why_size);
#else
    (void)stream;
    snprintf(why, why_size, "device timing needs a build with CUDA");
    st = FP4_ERR_UNSUPPORTED;
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
