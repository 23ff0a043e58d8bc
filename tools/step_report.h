/*
 * The decode step's options and record (bench_step.c fills them, step_report.c writes them as a
 * table, JSON, CSV or HTML), and --plan's per-batch table (step_plan.c).
 */
#ifndef FP4_TOOLS_STEP_REPORT_H
#define FP4_TOOLS_STEP_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "bench_step.h"
#include "fp4kit_bench.h"
#include "provenance.h"
#include "step_trace.h"

enum { STEP_MAX_BATCHES = 16, STEP_MAX_BATCH = 4096, STEP_MAX_GPUS = 64, STEP_MAX_SWEEP = 32 };

typedef struct step_opts {
  const char *model;
  int tp, ep, device, rounds, w4a4, peers, plan_only;
  int gpus; /* 0: one rank on --device, no collectives; N: ranks on devices --device .. --device + N - 1 */
  int a2a;  /* --moe-comm all-to-all: EP with data-parallel attention, tokens exchanged around the experts */
  int64_t layers; /* 0: all */
  int64_t batches[STEP_MAX_BATCHES];
  int nbatches;
  uint64_t seed;
  int routing_given; /* --batch or --seed given: a dense model's --plan says they change nothing */
  const char *json, *csv, *html;
  int stdout_report; /* one of them is '-': the table goes to stderr */
  char sweep[STEP_MAX_SWEEP][64]; /* --sweep: configs each dense layer type is timed with */
  int nsweep;
  int trace; /* --trace: the kernel timeline of one replay of the graph with PDL (CUPTI) */
} step_opts;

typedef struct bv {
  int ok;
  double v;
} bv;

typedef struct type_result {
  int calls;         /* calls of the type per step */
  double bytes;      /* FP4 bytes they read        */
  bv us;             /* a graph (PDL) of those calls alone */
  char ran[128];     /* backend:config of its first call, and whether PDL was honoured */
  char note[200];
  bv sweep_us[STEP_MAX_SWEEP];        /* --sweep: the same graph with each config */
  char sweep_note[STEP_MAX_SWEEP][160]; /* why a config did not run */
} type_result;

typedef struct step_point {
  int64_t batch;
  const char *status; /* "ok", "mismatch", "error", "unsupported" */
  char reason[320];
  int calls;
  double bytes;
  double touched_mean; /* MoE: distinct routed experts per layer */
  bv eager_us, graph_us, pdl_us, bf16_us;
  double graph_nodes;
  char bf16_note[200];
  type_result types[STEP_MAX_TYPES];
  /* --gpus: the collectives of one step (all-reduces, or with --moe-comm all-to-all two all-to-alls
   * per MoE layer), their payload (all-to-all: the rows that leave the rank), the bytes a rank sends
   * in them, their time alone (a graph of only them, no PDL) and each rank's graph + PDL time (the
   * fields above hold the slowest rank's; bytes and payload the largest rank's) */
  int coll_count;
  double coll_bytes, coll_sent_bytes;
  bv coll_us;
  bv rank_pdl_us[STEP_MAX_GPUS];
  /* The step's structure with no math: every call replaced by one read-only kernel over the same
   * weight bytes (a MoE layer: its touched experts'), in a CUDA graph; reads_note says why not */
  bv reads_us;
  char reads_note[160];
  /* --trace: the kernel timeline of one replay of the graph with PDL; trace_note says why not */
  int traced;
  step_trace_summary trace;
  char trace_note[320];
} step_point;

typedef struct step_report {
  step_plan plan;
  const step_opts *o;
  int64_t layers_built;
  char layers_note[200];
  fp4_device_info dev;
  bv read_bps, copy_bps;
  char peer_note[300];
  bench_origin origin; /* command, commit, date */
  step_point pts[STEP_MAX_BATCHES];
  int npts;
  int gpus, nccl_version; /* --gpus; NCCL's version code */
} step_report;

/* --plan for a MoE model: per batch, from the seeded routing, the experts a layer touches and the
 * FP4 bytes of a rank's step (with --moe-comm all-to-all also the rows a rank receives and the
 * bytes it sends; rank means and the largest rank's). FP4_OK, or the failure with its reason. */
int step_print_plan_batches(FILE *f, const step_plan *p, const step_opts *o);

/* The record as a table (one row per batch, the layer types and notes under it). */
void step_report_print(FILE *f, const step_report *r);
/* Writes the record to path ("-": stdout) as JSON (kind 0), CSV (1) or HTML (2); 0 after saying
 * why it failed. */
int step_report_write(const char *path, const step_report *r, int kind);

#endif
