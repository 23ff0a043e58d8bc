/*
 * Timing of repeated calls: the median of single-call times, with CUDA events on the caller's stream
 * for device work and a monotonic clock for host work. One source (timer.c) compiled into libfp4kit
 * for the tuner and into libfp4kit_bench for fp4_time, so both measure the same way; it uses nothing
 * of either library beyond the public header.
 */
#ifndef FP4_TUNE_TIMER_H
#define FP4_TUNE_TIMER_H

#include <stddef.h>

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp4_call_timing {
  double median_us, min_us, max_us;
  int runs;
} fp4_call_timing;

/* One timed call; iteration counts from 0 (callers rotate inputs past the L2 with it). */
typedef fp4_status (*fp4_call_fn)(void *user, int iteration);

/* Calls fn warmup times, then times runs calls one by one on device (CUDA events on stream) or on
 * the host (device < 0). A failing fn stops the measurement with its status (its detail is its
 * own); the timer's own failures leave a reason in why. */
fp4_status fp4_timer_run(int device, void *stream, fp4_call_fn fn, void *user, int warmup, int runs,
                         fp4_call_timing *timing, char *why, size_t why_size);

/* The tuner's form (tune_timer.c, libfp4kit only): ctx's device, the timer's own failures reported
 * through fp4_last_error(). */
fp4_status fp4_tune_time(fp4_context *ctx, void *stream, fp4_call_fn fn, void *user, int warmup, int runs,
                         fp4_call_timing *timing);

#ifdef __cplusplus
}
#endif

#endif
