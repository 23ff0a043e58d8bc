/* Auto selection without timing: a pure ranking of backends per compute capability and M regime. */
#ifndef FP4_DISPATCH_HEURISTIC_H
#define FP4_DISPATCH_HEURISTIC_H

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The regime of a problem of op/M on a device of compute capability cc (0: unknown), or on the host. */
fp4_regime fp4_heuristic_regime(int cc, fp4_memory memory, fp4_op op, int64_t m);

/* Rank of backend b for that problem (its table's ranks in the regime; FP4_RANK_* in backend.h):
 * lower is preferred. Pure: the same inputs always give the same rank, and nothing is queried. */
int fp4_heuristic_rank(const fp4_backend *b, int cc, fp4_memory memory, fp4_op op, int64_t m);

/* 1 for the backends that compute on the host (their table says so): auto and the tuner never run
 * them on device operands, whatever their supports() says. */
int fp4_heuristic_host_backend(const fp4_backend *b);

/* Compute capability of a CUDA device (major*10+minor), remembered per process; 0 when unknown. */
int fp4_device_cc(int device);

#ifdef __cplusplus
}
#endif

#endif
