/*
 * CPU time of `fp4_model_inspect` on a header-only checkpoint shaped like Qwen3.5-397B-A17B's NVFP4
 * experts (120 shards, 368,640 tensors; tests/inspect_shard_set.h). The goal is under 1 s of CPU
 * (clock(): unlike wall time it does not grow when other processes share the machine). This is a
 * measurement, not a test: it reports the median of several inspections and exits 0 whatever it
 * finds, unless the inspection itself fails.
 * Build (from the repository root, after a host build into build-host):
 *   cc -O2 -Iinclude -Itests scripts/inspect_timing.c build-host/libfp4kit.a -lcjson -lpthread -lm -o /tmp/inspect_timing
 * Run: /tmp/inspect_timing [repeats, default 5]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4kit_model.h"
#include "inspect_shard_set.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int repeats = argc > 1 ? atoi(argv[1]) : 5;
  if (repeats < 1 || repeats > 100) {
    fprintf(stderr, "usage: %s [repeats 1-100]\n", argv[0]);
    return 2;
  }
  char dir[] = "/tmp/fp4kit_inspect_timing_XXXXXX";
  if (!mkdtemp(dir) || !inspect_shard_set_write(dir)) {
    fprintf(stderr, "could not write the shard set under /tmp\n");
    return 1;
  }
  double cpu[100], wall[100];
  int ok = 1;
  for (int r = 0; r < repeats && ok; r++) {
    struct timespec t0, t1;
    const clock_t c0 = clock();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *report = NULL;
    fp4_inspect_options o = {8, 8, 1};
    ok = fp4_model_inspect(dir, &o, &report) == FP4_OK;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const clock_t c1 = clock();
    if (!ok) fprintf(stderr, "inspect failed: %s\n", fp4_last_error());
    fp4_model_free(report);
    wall[r] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cpu[r] = (double)(c1 - c0) / CLOCKS_PER_SEC;
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (!ok) return 1;
  qsort(cpu, (size_t)repeats, sizeof *cpu, cmp_double);
  qsort(wall, (size_t)repeats, sizeof *wall, cmp_double);
  printf("inspect of %d shards, %d tensors, %d repeats: median %.3f s CPU (min %.3f, max %.3f), %.3f s wall; goal < 1 s CPU\n",
         INSPECT_SHARD_SET_SHARDS, INSPECT_SHARD_SET_TENSORS, repeats, cpu[repeats / 2], cpu[0], cpu[repeats - 1],
         wall[repeats / 2]);
  return 0;
}
