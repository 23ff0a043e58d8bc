#ifndef FP4_DISPATCH_DISPATCH_H
#define FP4_DISPATCH_DISPATCH_H

#include <stdint.h>

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* available() and supports() together. */
fp4_status fp4_problem_supported(fp4_context *ctx, const fp4_backend *b, const fp4_problem *p, char *reason,
                                 size_t reason_size);
/* The backend auto would pick for p (NULL with the reason when none can run it). */
const fp4_backend *fp4_select_backend(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size);
/* The same, with the configuration to run (the tuning cache's, or "" for the backend default). */
const fp4_backend *fp4_select_backend_config(fp4_context *ctx, const fp4_problem *p, char *config, size_t config_size,
                                             char *reason, size_t reason_size);
/* Runs a validated problem on the backend the options name (or auto). */
fp4_status fp4_problem_run(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn);
/* Everything fp4_problem_run checks of the options for p (device scalars, backend, availability,
 * support, config) without running: for a call that has nothing to do (T = 0), which still refuses
 * what the same call with rows would refuse. */
fp4_status fp4_problem_check(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn);
/* The device workspace that fp4_problem_run would take for p with these options (0: none), after
 * the same checks. */
fp4_status fp4_problem_workspace_size(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn,
                                      size_t *bytes);

/* ---- Heuristic ranking -------------------------------------------------------------------------------
 * Auto selection without timing: a pure ranking of backends per compute capability and M regime. */

/* The regime of a problem of op/M on a device of compute capability cc (0: unknown), or on the host;
 * weights: the elements (N x K) of a dense GEMM's weight (fp4_problem_weights; 0: not a dense GEMM,
 * or not known), on which the dequantize crossover depends on SM90. */
fp4_regime fp4_heuristic_regime(int cc, fp4_memory memory, fp4_op op, int64_t m, int64_t weights);

/* Rank of backend b for that problem (its table's ranks in the regime; FP4_RANK_* in backend.h):
 * lower is preferred. Pure: the same inputs always give the same rank, and nothing is queried. */
int fp4_heuristic_rank(const fp4_backend *b, int cc, fp4_memory memory, fp4_op op, int64_t m, int64_t weights);

/* 1 for the backends that compute on the host (their table says so): auto and the tuner never run
 * them on device operands, whatever their supports() says. */
int fp4_heuristic_host_backend(const fp4_backend *b);

/* Compute capability of a CUDA device (major*10+minor), remembered per process; 0 when unknown
 * (src/dispatch/probe.c). */
int fp4_device_cc(int device);

/* ---- Selection cache ---------------------------------------------------------------------------------
 * Per-context memory of dispatch decisions. Choosing a backend asks every registered backend
 * whether it supports the problem (vendor heuristics, plan lookups) and consults the tuning cache;
 * an engine makes the same call with the same shapes hundreds of times per decode step, so the
 * answer is remembered per (op, shapes, formats, layouts, dtypes, strides, pointer alignment
 * classes, memory, PDL, device scalars, named backend and config, tuning-cache generation) and
 * looked up in a small table. Dense ops only (quantize, W4A4, W4A16); MoE and grouped calls decide
 * per call. */

enum { FP4_SELECTION_KEY_WORDS = 20 };

typedef struct fp4_selection_key {
  uint64_t w[FP4_SELECTION_KEY_WORDS];
  char config[64]; /* the named config the options asked for ("" for none) */
} fp4_selection_key;

/* Forms the key of p under options (backend index, -1 for auto; config as named) and the tuning
 * generation; 0 when p's op is not remembered (or the config name does not fit). */
int fp4_selection_key_of(const fp4_problem *p, int backend_index, const char *config, uint64_t tuning_generation,
                         fp4_selection_key *key);
/* The remembered backend and config ("" = backend default) for key; NULL when none. */
const fp4_backend *fp4_selection_find(fp4_context *ctx, const fp4_selection_key *key, const char **config);
/* Remembers a decision (no-op for ctx NULL or when memory runs out). */
void fp4_selection_store(fp4_context *ctx, const fp4_selection_key *key, const fp4_backend *backend,
                         const char *config);

#ifdef __cplusplus
}
#endif

#endif
