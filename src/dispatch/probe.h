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

/* The answers derived from available() and supports() on representative problems (what a backend
 * without a probe callback gets); a callback may use it for a real device (ctx not NULL). */
void fp4_probe_generic(fp4_context *ctx, const fp4_backend *b, const fp4_arch_info *arch, fp4_backend_probe *out);
/* PDL "no" from the table for an architecture without it ("PDL needs SM90+ ..."). */
void fp4_probe_no_pdl(fp4_backend_probe *out, const fp4_arch_info *arch);
/* 1 when this build holds device code that runs natively on arch; why says which targets it was
 * built for and whether fp4kit's GPU tests ran on that architecture. */
int fp4_probe_arch_code(const fp4_arch_info *arch, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
