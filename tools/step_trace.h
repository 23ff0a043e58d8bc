/*
 * The kernel timeline of one replay of a CUDA graph (`fp4kit bench --step --trace`): every kernel's
 * start and end on the device, recorded by CUPTI's activity API (libcupti, loaded at run time,
 * step_trace.c), and its summary: how long the replay spans, how much of that some kernel runs, and
 * per position in the repeating layer pattern the mean kernel time and the mean gap between a
 * kernel's start and the end of everything before it (negative: it overlaps them, as PDL allows).
 * The summary is host arithmetic, checked without a GPU (tests/test_bench_step.c).
 */
#ifndef FP4_TOOLS_STEP_TRACE_H
#define FP4_TOOLS_STEP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "fp4kit.h"

enum { STEP_TRACE_NAME = 48, STEP_TRACE_MAX_PERIOD = 16 };

/* One kernel of a replay: its short name (the function's identifier, without namespaces or
 * template arguments) and its device timestamps in nanoseconds. */
typedef struct step_trace_kernel {
  char name[STEP_TRACE_NAME];
  uint64_t start_ns, end_ns;
} step_trace_kernel;

/* One position of the repeating pattern: the k-th kernel of every layer. */
typedef struct step_trace_slot {
  char name[STEP_TRACE_NAME];
  int count;
  double mean_us; /* mean end - start                                                          */
  double gap_us;  /* mean start - (the latest end of the kernels started before it); the first */
                  /* kernel of the replay has no gap and is left out of its slot's mean         */
} step_trace_slot;

typedef struct step_trace_summary {
  int kernels;
  double span_us;   /* last end - first start                                                    */
  double busy_us;   /* time some kernel runs (the union of the kernels' intervals)             */
  double sum_us;    /* the kernels' times added up (busy_us less than this: kernels overlapped) */
  int period;       /* kernels per layer (kernels / layers when that divides, else 0: no slots) */
  step_trace_slot slots[STEP_TRACE_MAX_PERIOD];
} step_trace_summary;

/* The identifier of a kernel from CUPTI's (mangled or plain) name into out: "_ZN12_GLOBAL__N_112route_
 * kernelILi1EEEv..." gives "route_kernel", "void ns::k<1>(args)" gives "k". */
void step_trace_short_name(const char *name, char *out, size_t size);

/* Sorts k (n kernels of one replay) by start and summarizes them; layers is the number of layers
 * the replay ran (the pattern's repeats). */
void step_trace_summarize(step_trace_kernel *k, int n, int64_t layers, step_trace_summary *out);

/* Records the kernels of one launch of exec on stream (a cudaGraphExec_t and a cudaStream_t, as
 * void pointers so that callers need no CUDA header): the exec is launched warm (untraced) once, then
 * three times under CUPTI; the last launch's kernels are kept. FP4_OK with *k (malloc'd, the caller
 * frees) and *n; else FP4_ERR_UNSUPPORTED with why (no libcupti, a version whose records this build
 * cannot read, a build without CUDA or cupti.h) or another status with the CUDA or CUPTI error. */
fp4_status step_trace_graph(void *exec, void *stream, step_trace_kernel **k, int *n, char *why, size_t why_size);

#endif
