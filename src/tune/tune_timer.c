/* fp4_tune_time: the shared timer (timer.c) with its failures in fp4_last_error(). */
#include "core/error.h"
#include "tune/timer.h"

fp4_status fp4_tune_time(fp4_context *ctx, void *stream, fp4_call_fn fn, void *user, int warmup, int runs,
                         fp4_call_timing *timing) {
  char why[256];
  fp4_status st = fp4_timer_run(fp4_context_device(ctx), stream, fn, user, warmup, runs, timing, why, sizeof why);
  if (st && why[0]) return fp4_fail(st, "fp4_tune: timing: %s", why);
  return st;
}
