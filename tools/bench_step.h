/*
 * `fp4kit bench --step MODEL`: every FP4 layer of one rank's decode step on the device, timed as
 * separate launches, as one CUDA graph and as one CUDA graph with programmatic dependent launch
 * (bench_step.c). The plan below (layer types, shards, bytes, routing) is host arithmetic on the
 * library's shape sets, so it is checked without a GPU (tests/test_bench_step.c).
 */
#ifndef FP4_TOOLS_BENCH_STEP_H
#define FP4_TOOLS_BENCH_STEP_H

#include <stdint.h>
#include <stdio.h>

#include "fp4kit.h"

enum { STEP_MAX_TYPES = 8 };

typedef enum step_kind {
  STEP_DENSE = 0, /* one fp4_mm_w4a16 (or fp4_quantize + fp4_mm) per layer                      */
  STEP_MOE = 1    /* one fp4_moe_forward per layer: the rank's routed experts + the shared expert */
} step_kind;

/* One FP4 layer type of a rank's decode step; every layer of the model holds one of each. */
typedef struct step_type {
  char name[48];
  step_kind kind;
  int64_t n, k;          /* the weight [N, K]; MoE: routed gate_up [2I, H]                       */
  int64_t experts;       /* MoE: routed experts on the rank (E / ep)                             */
  int64_t active;        /* MoE: experts per token in the whole model                            */
  int64_t top_k;         /* MoE: experts a token touches on the rank, min(ceil(active / ep), E)  */
  int64_t hidden, inter; /* MoE: H and the routed experts' I on the rank                          */
  int64_t shared_inter;  /* MoE: the shared expert's I on the rank; 0 without a shared expert    */
  int64_t weight_bytes;  /* FP4 codes + block scales (128x4) of the weight; MoE: of one routed    */
                         /* expert, gate_up + down                                                */
  int64_t shared_bytes;  /* MoE: FP4 codes + block scales of the shared expert, gate_up + down    */
} step_type;

typedef struct step_plan {
  char model[48];
  int tp, ep;
  int64_t layers;        /* layers of the model (each holds every type)                          */
  int64_t hidden;        /* width of the step's input and output                                 */
  int ntypes;
  step_type types[STEP_MAX_TYPES]; /* in dataflow order within a layer                         */
} step_plan;

/* The FP4 part of one rank's decode step of an embedded shape set (fp4_shape_set) for tp x ep:
 * the NVFP4-stored linears, dense ones as their own types, routed experts and the shared expert as
 * one MoE type. Refuses (FP4_ERR_UNSUPPORTED, with the reason in fp4_last_error()) models whose FP4
 * linears do not all occur once in every layer, or whose chain does not carry (a type's K larger
 * than the previous type's N). */
fp4_status step_plan_make(const char *model, int tp, int ep, step_plan *plan);

/* FP4 bytes one layer of the plan reads: every dense weight, plus for the MoE type the shared
 * expert and `touched` distinct routed experts. */
int64_t step_layer_bytes(const step_plan *plan, int64_t touched);

/* Seeded rank-local routing of one layer: each of `tokens` tokens picks top_k distinct experts of
 * [0, experts) uniformly, with positive weights summing to 1. Token t's choice depends only on
 * (seed, layer, t), so the routing of T tokens is the first T rows of that of more. */
void step_routing(uint64_t seed, int64_t layer, int64_t tokens, int64_t top_k, int64_t experts, int32_t *ids,
                  float *weights);
/* Distinct experts among n ids of [0, experts). */
int64_t step_touched(const int32_t *ids, int64_t n, int64_t experts);

/* Ranks of a tp x ep shard: tp, expert parallelism splitting the experts within the tensor-parallel
 * group (ep <= tp, fp4_shape_set's rule), or ep with tp 1 (whole experts, attention replicated); 0
 * for 1 < tp < ep, whose dense layers would need collectives over groups of tp ranks. */
int step_ranks(int tp, int ep);
/* Whether every rank holds a partial sum of a type's output, which the multi-GPU step all-reduces:
 * a row-parallel dense linear (output of the hidden width) under tp > 1, and the MoE layer when its
 * experts are split (tp or ep > 1). A replicated linear's output is whole on every rank. */
int step_type_reduced(const step_plan *plan, const step_type *t);
/* The plan's MoE type, or NULL for a dense model. */
const step_type *step_moe_type(const step_plan *plan);
/* bf16 values among n that are inf or NaN: the step's output holds none unless something went
 * wrong (it is NaN-filled before each way, and the weights keep every layer's values finite). */
int64_t step_bf16_nonfinite(const void *values, int64_t n);
/* Width of a type's output: N, or the hidden size for the MoE type. */
int64_t step_out_width(const step_type *t);
/* The mixer behind the routing and the step's random weights (splitmix64's finalizer). */
uint64_t step_mix64(uint64_t z);
/* The rank's layer types, shapes and bytes, as --plan prints them. */
void step_print_plan(FILE *f, const step_plan *plan);

/* The command; argv as `fp4kit bench` got it (argv[0] "bench", --step among the options). */
int bench_step_main(int argc, char **argv);

#endif
