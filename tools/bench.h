/* `fp4kit bench`: the measured points and the writers of its reports (table, JSON, CSV, HTML). */
#ifndef FP4_TOOLS_BENCH_H
#define FP4_TOOLS_BENCH_H

#include <stdio.h>

#include "fp4kit.h"

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
  char peer_note[200];
} bench_point;

/* Once-per-run facts and peers. */
typedef struct bench_run {
  fp4_device_info dev;     /* the device, or the host when the run is host-only */
  fp4_device_info host;
  char date[32];           /* ISO 8601 UTC                                      */
  char commit[64];
  char command[1024];
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

/* Writers; each returns 0 or -1 after printing why on stderr. */
void bench_print_table(FILE *f, const bench_run *run);
int bench_write_json(FILE *f, const bench_run *run);
int bench_write_csv(FILE *f, const bench_run *run);
int bench_write_html(FILE *f, const bench_run *run);

/* `fp4kit bench --moe` (bench_moe.c): the MoE layer on the device; argv as fp4cli_bench got it. */
int bench_moe_main(int argc, char **argv);

#endif
