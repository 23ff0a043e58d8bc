#ifndef FP4_DISPATCH_DISPATCH_H
#define FP4_DISPATCH_DISPATCH_H

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
/* The device workspace that fp4_problem_run would take for p with these options (0: none). */
fp4_status fp4_problem_workspace_size(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn,
                                      size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif
