/* Auto selection without timing: a pure ranking of backends per compute capability and M regime. */
#ifndef FP4_DISPATCH_HEURISTIC_H
#define FP4_DISPATCH_HEURISTIC_H

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rank of a backend for a problem of op/M on a device of compute capability cc (0: host); lower is
 * preferred. Pure: the same inputs always give the same rank, and nothing is queried. */
int fp4_heuristic_rank(const char *backend, int cc, fp4_memory memory, fp4_op op, int64_t m);
/* The rank of a build that runs only to verify a kernel (the emulated SM120 kernel on SM90): auto
 * takes it only when nothing else can run, and the tuner does not time it. */
#define FP4_RANK_VERIFICATION_ONLY 99

/* Compute capability of a CUDA device (major*10+minor), remembered per process; 0 when unknown. */
int fp4_device_cc(int device);

#ifdef __cplusplus
}
#endif

#endif
