/* fp4_time: the timer fp4_tune uses (src/tune/timer.c, compiled into this library too). */
#include "fp4kit_bench.h"
#include "tune/timer.h"

fp4_status fp4_time(fp4_context *ctx, void *stream, fp4_timed_fn fn, void *user, int warmup, int runs,
                    fp4_timing *timing) {
  fp4_set_error(FP4_OK, NULL);
  if (!fn) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time: fn is NULL");
  if (!timing) return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time: timing is NULL");
  if (runs < 1 || warmup < 0)
    return fp4_set_error(FP4_ERR_INVALID_ARGUMENT, "fp4_time: runs (%d) must be >= 1 and warmup (%d) >= 0", runs, warmup);
  fp4_call_timing t;
  char why[256];
  fp4_status st = fp4_timer_run(fp4_context_device(ctx), stream, fn, user, warmup, runs, &t, why, sizeof why);
  if (st) return why[0] ? fp4_set_error(st, "fp4_time: %s", why) : st;
  timing->median_us = t.median_us;
  timing->min_us = t.min_us;
  timing->max_us = t.max_us;
  timing->runs = t.runs;
  return FP4_OK;
}
