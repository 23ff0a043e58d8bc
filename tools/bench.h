/* `fp4kit bench`: the measured points and the writers of its reports (table, JSON, CSV, HTML). */
#ifndef FP4_TOOLS_BENCH_H
#define FP4_TOOLS_BENCH_H

#include <stdio.h>

#include "fp4kit.h"
#include "fp4kit_bench.h"
#include "provenance.h"

typedef enum bench_op { BENCH_W4A16 = 0, BENCH_W4A4 = 1, BENCH_QUANTIZE = 2 } bench_op;

/* A number that may be missing (peer not run, unsupported, not applicable): JSON null, CSV empty. */
typedef struct bench_value {
  int ok;
  double v;
} bench_value;

typedef struct bench_point {
  char backend[32];
  bench_op op;
  fp4_format format;
  fp4_memory memory;
  int64_t m, n, k;          /* quantize: n = 0                                         */
  char shape[64];           /* where the shape comes from ("llama-3.3-70b o_proj")    */
  const char *status;       /* "ok", "unsupported", "skipped", "error"                 */
  char reason[256];
  char config[64];          /* what the backend reported it ran                        */
  int pdl;
  int sets;                 /* operand sets rotated through                            */
  fp4_timing t;             /* the GEMM (or the quantize for BENCH_QUANTIZE)           */
  double flops, weight_bytes, act_bytes, out_bytes;
  bench_value tflops, weight_gbps, intensity, frac_bw;
  /* W4A4: activation quantize timed alone, and quantize followed by the GEMM. */
  char quant_backend[32];
  bench_value quant_us, total_us;
  char quant_reason[160];
  /* Per-shape peers (device): cuBLAS BF16 and cuBLASLt FP8 on [m, k] x [n, k]^T. */
  bench_value bf16_us, bf16_tflops, bf16_speedup, fp8_us, fp8_tflops, fp8_speedup;
  /* The read floor: the read peer over the point's weight + scale bytes, one launch per sample as
   * the GEMM is timed, and that time over ours (1 = the GEMM costs no more than reading its weights). */
  bench_value read_floor_us, frac_read_floor;
  char peer_note[200];
  /* Auto points: what the tuning cache says for this key and whether auto ran it.
   * cache: "hit" (auto ran the cached winner), "miss" (the cache has a winner but auto ran something
   * else), "none" (no entry: auto used the heuristic); "" for named backends. */
  char cache[8];
  char cache_winner[100];   /* "backend:config" of the cached winner, "" when none       */
  char ran[100];            /* "backend:config" that ran (fp4_run_info)                   */
} bench_point;

/* Once-per-run facts and peers. */
typedef struct bench_run {
  fp4_device_info dev;     /* the device, or the host when the run is host-only */
  fp4_device_info host;
  bench_origin origin;     /* command, commit, date                             */
  int runs_device, runs_host, warmup;
  /* Device peers */
  bench_value copy_gbps, read_gbps, bf16_peak_tflops, fp8_peak_tflops;
  /* Host peers */
  bench_value host_read_gbps, host_fma_gflops;
  char peer_notes[512];
  bench_point *points;
  int npoints;
} bench_run;

const char *bench_op_name(bench_op op);

/* The GEMM shapes a model contributes to `fp4kit bench` and `fp4kit tune` (bench_shapes.c), so the
 * two commands always agree: every dense (non-expert) GEMM of the shape set after TP sharding,
 * whatever its checkpoint storage; MoE expert GEMMs are grouped GEMMs, timed by `bench --moe`. */
enum { BENCH_MAX_SHAPES = 256 };
typedef struct bench_shape {
  int64_t n, k;
  char name[64];
} bench_shape;
/* For --help texts: the first line is unindented, the others indented by 14 spaces. */
#define BENCH_MODEL_SHAPES_HELP                                                                   \
  "a model contributes its dense GEMMs (attention projections, dense MLP,\n"                       \
  "              shared experts, router, lm_head; whatever the checkpoint stores them as) after\n" \
  "              --tp sharding, one per distinct N x K; MoE expert GEMMs are grouped GEMMs, timed\n" \
  "              by fp4kit bench --moe. --list-shapes prints them."
/* A model name matches a shape set exactly, or as the unique set whose name starts with it; matches
 * receives how many sets it matches (more than 1: ambiguous, and NULL is returned; 0: none). */
const char *bench_find_model(const char *want, int *matches);
/* Adds a shape unless the same N x K is there; -1 when the table is full. */
int bench_add_shape(bench_shape *shapes, int *count, int64_t n, int64_t k, const char *name);
/* Appends the shapes of a list "NxK[,NxK...]" (x or X, N and K in [1, 2^31], deduplicated).
 * Returns how many items the list names, or -1 with why[0..why_size) quoting the first bad item
 * (or saying the table is full); nothing is printed. */
int bench_parse_shapes(const char *list, bench_shape *shapes, int *count, char *why, size_t why_size);
/* Appends the model's shapes (deduplicated); returns an FP4CLI_* code after printing why. */
int bench_model_shapes(const char *tool, const char *want, int tp, bench_shape *shapes, int *count);
/* Prints the shape sets the --model option knows. */
void bench_list_models(FILE *f);
/* Prints "N K name" per shape (the --list-shapes output of bench and tune). */
void bench_print_shapes(FILE *f, const bench_shape *shapes, int count);

/* Writers; each returns 0 or -1 after printing why on stderr. */
void bench_print_table(FILE *f, const bench_run *run);
int bench_write_json(FILE *f, const bench_run *run);
int bench_write_csv(FILE *f, const bench_run *run);
int bench_write_html(FILE *f, const bench_run *run);

/* `fp4kit bench --moe` (bench_moe.c): the MoE layer on the device; argv as fp4cli_bench got it. */
int bench_moe_main(int argc, char **argv);

#endif
