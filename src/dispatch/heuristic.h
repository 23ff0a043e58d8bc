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
/* Ranks from here up belong to backends that exist to check others: the reference oracle (correct
 * everywhere, fast nowhere) and verification builds. Auto takes one only when nothing else can run
 * and never follows a tuning cache entry that names one. */
#define FP4_RANK_CHECK_ONLY 90
/* The rank of a backend the heuristic does not know for a memory: a host backend asked about device
 * memory, or a device backend asked about host memory. */
#define FP4_RANK_UNKNOWN 50

/* 1 for the backends that compute on the host (cpu, ref): auto and the tuner never run them on
 * device operands, whatever their supports() says. */
int fp4_heuristic_host_backend(const char *backend);

/* Compute capability of a CUDA device (major*10+minor), remembered per process; 0 when unknown. */
int fp4_device_cc(int device);

#ifdef __cplusplus
}
#endif

#endif
