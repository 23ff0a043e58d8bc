/* The cuda-sm120 backend's probe callback (sm120_probe.c). */
#ifndef FP4_BACKENDS_SM120_SM120_PROBE_H
#define FP4_BACKENDS_SM120_SM120_PROBE_H

#include "dispatch/backend.h"

/* Device context: available() and supports(); ctx NULL: the architecture table and the build's targets. */
fp4_status fp4_sm120_probe(fp4_context *ctx, const fp4_arch_info *arch, fp4_backend_probe *out);

#endif
