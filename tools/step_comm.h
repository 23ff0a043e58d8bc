/*
 * The collectives of the multi-GPU decode step (`fp4kit bench --step MODEL --gpus N`, bench_step.c):
 * one NCCL communicator per GPU of one process, in-place bf16 sum all-reduces and all-to-alls of
 * bf16 rows (grouped sends and receives) on each rank's stream, and a host-side agreement between the ranks' threads (every rank must issue the same collectives
 * in the same order, so decisions such as how many layers fit are taken as the minimum over ranks).
 *
 * NCCL is loaded at run time (libnccl.so.2, dlopen), so the command starts on machines without it;
 * the build needs only nccl.h (CMake looks beside the CUDA toolkit). Without either, every function
 * says which is missing.
 */
#ifndef FP4_TOOLS_STEP_COMM_H
#define FP4_TOOLS_STEP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "fp4kit.h"

typedef struct step_comms step_comms; /* the communicators of all ranks, and their agreement */

/* NCCL's version as major * 10000 + minor * 100 + patch, or 0 with the reason NCCL cannot be used
 * (not built with nccl.h, libnccl.so.2 not found, ...). */
int step_comm_version(char *why, size_t why_size);

/* Communicators over `n` GPUs (devices[0..n-1], distinct), rank i on devices[i]. */
fp4_status step_comms_create(int n, const int *devices, step_comms **out);
void step_comms_destroy(step_comms *c);

/* buf[0..elems) (bf16, device memory of the rank's GPU) <- its sum over every rank, queued on
 * stream (a cudaStream_t; capturable into a CUDA graph). */
fp4_status step_comm_allreduce_bf16(step_comms *c, int rank, void *buf, size_t elems, void *stream);

/* The all-to-all of bf16 rows of `width` elements: this rank sends send_count[p] rows to each rank p
 * (consecutive in send, ranks in order) and receives recv_count[p] rows from each into recv (the
 * same way); zero counts move nothing, its own rows included. One NCCL group of sends and receives
 * queued on stream (capturable into a CUDA graph); every rank must call it with matching counts. */
fp4_status step_comm_alltoallv_bf16(step_comms *c, int rank, const void *send, const int64_t *send_count, void *recv,
                                    const int64_t *recv_count, int64_t width, void *stream);

/* Every rank's thread calls this with its value; each gets the minimum over the ranks (a barrier). */
int64_t step_comm_agree_min(step_comms *c, int64_t value);

/* The agreement alone (plain threads, no NCCL): n threads each call step_agree_min once per round
 * and all get the round's minimum. NULL when out of memory. */
typedef struct step_agree step_agree;
step_agree *step_agree_create(int n);
void step_agree_destroy(step_agree *a);
int64_t step_agree_min(step_agree *a, int64_t value);

/* Bytes one rank sends (and receives) in a ring all-reduce of `bytes` over n ranks: 2 (n - 1) / n of it. */
double step_comm_ring_bytes(double bytes, int n);

#endif
