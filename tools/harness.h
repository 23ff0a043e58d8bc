/*
 * The correctness harness shared by `fp4kit check`, `fp4kit probe --check` and the C tests: one
 * table of cases, run on any backend against the reference, on fresh random data, with outputs
 * pre-filled with NaN. Uses only the public API.
 */
#ifndef FP4_TOOLS_HARNESS_H
#define FP4_TOOLS_HARNESS_H

#include "harness_common.h"

/* The embedded case table of `fp4kit check`: small shapes and edge cases. */
const fp4h_case *fp4h_default_cases(int *count);

/* Runs one case on a backend (on ctx's device when the backend runs on device memory) and compares
 * with the reference backend. memory: where the operands live for this backend. */
void fp4h_run(fp4_context *ctx, const char *backend, fp4_memory memory, const fp4h_case *c, uint64_t seed,
              fp4h_result *r);

/* A one-block quantize on the cpu backend with config (one of its levels: generic, avx2, avx512,
 * neon; NULL the default), info receiving what ran: its status. */
fp4_status fp4h_cpu_quantize_block(const char *config, fp4_run_info *info);
/* 1 when the cpu backend runs its kernels at `level` on this machine: fp4h_cpu_quantize_block with
 * that config is accepted (the refusal's detail is cleared). */
int fp4h_cpu_level_runs(const char *level);

#endif
