/* Internal side of the tuning cache: what auto selection asks of it. */
#ifndef FP4_TUNE_TUNING_H
#define FP4_TUNE_TUNING_H

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tuning key of a GEMM problem; 0 for problems that are not tuned (quantize). */
int fp4_tune_key_of_problem(const fp4_problem *p, fp4_tune_key *key);

/* The cached winner for p on ctx (loading the default cache file on first use): FP4_OK with the
 * backend and config names, else FP4_ERR_NOT_FOUND. Never fails otherwise. */
fp4_status fp4_tuning_lookup(fp4_context *ctx, const fp4_problem *p, char *backend, size_t backend_size,
                             char *config, size_t config_size);

#ifdef __cplusplus
}
#endif

#endif
