/* Helpers for backends' probe callbacks (src/dispatch/probe.c). */
#ifndef FP4_DISPATCH_PROBE_H
#define FP4_DISPATCH_PROBE_H

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void fp4_probe_set(fp4_backend_probe *out, fp4_cap cap, fp4_support support, fp4_evidence evidence, const char *reason);
/* Marks the backend unavailable and every capability "no" with the same reason. */
void fp4_probe_unavailable(fp4_backend_probe *out, fp4_evidence evidence, const char *reason);
/* Answers capabilities first..last (of NVFP4 W4A4, MXFP4 W4A4, W4A16) with supports() on a
 * representative problem in memory (pointers are never read), evidence QUERIED. */
void fp4_probe_ask_supports(fp4_context *ctx, const fp4_backend *b, fp4_memory memory, fp4_cap first, fp4_cap last,
                            fp4_backend_probe *out);

#ifdef __cplusplus
}
#endif

#endif
