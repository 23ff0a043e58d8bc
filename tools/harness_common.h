/*
 * What every runner of the correctness harness shares (harness.c: dense cases, harness_moe.c: grouped
 * GEMM and MoE cases): the case and result descriptions, random test data, the NaN pre-fill and the
 * comparison with the reference. Uses only the public API.
 */
#ifndef FP4_TOOLS_HARNESS_COMMON_H
#define FP4_TOOLS_HARNESS_COMMON_H

#include <stdint.h>

#include "fp4kit.h"

typedef enum fp4h_op {
  FP4H_MM = 0,
  FP4H_MM_W4A16 = 1,
  FP4H_QUANTIZE = 2,
  FP4H_GROUPED_MM = 3,       /* m = T, n = N, k = K, experts; rows grouped by random offsets   */
  FP4H_GROUPED_MM_W4A16 = 4, /* same, dense activations                                        */
  FP4H_MOE = 5               /* m = T, n = I, k = H, experts, top_k, moe_mode, shared, routing */
} fp4h_op;

/* Value distributions; every one is random and fresh per seed, none is all zeros. */
typedef enum fp4h_data {
  FP4H_DATA_NORMAL = 0,   /* gaussian with a few outliers (activation-like)                   */
  FP4H_DATA_EDGES = 1,    /* zero blocks, ties, saturating and tiny values, subnormal scales  */
  FP4H_DATA_UNIFORM = 2   /* uniform in [-1, 1]                                               */
} fp4h_data;

typedef struct fp4h_case {
  const char *name;
  fp4h_op op;
  fp4_format format;
  fp4_scale_layout layout_a;   /* activation scales (W4A4, quantize output)          */
  fp4_scale_layout layout_b;   /* weight scales                                        */
  int64_t m, n, k;             /* quantize uses m x k                                  */
  fp4_dtype a_dtype;           /* W4A16 activations / quantize input                   */
  fp4_dtype out_dtype;
  fp4h_data data;
  /* Grouped GEMM and MoE cases (harness_moe.h); zero for the others. */
  int64_t experts;
  int64_t top_k;
  int moe_mode;                /* fp4_moe_mode                                          */
  int shared;                  /* 1: with a shared expert (intermediate size n)         */
  int routing;                 /* fp4h_routing                                          */
  const char *config;          /* backend configuration to run; NULL: the backend's choice */
  int offset_codes;            /* device runs: FP4 codes placed this many bytes past an aligned address */
  int offset_dense;            /* device runs: the dense activations and the output placed this many
                                * elements past an aligned address (views into larger buffers) */
} fp4h_case;

typedef struct fp4h_result {
  fp4_status status;     /* FP4_OK, FP4_ERR_UNSUPPORTED (skip) or the failure           */
  int passed;            /* 1 when within tolerance (bit-exact for quantize)             */
  double rel_err;        /* ||out - ref|| / ||ref|| (Frobenius); quantize: bytes differing */
  double tolerance;
  int64_t nonfinite;     /* NaN/inf outputs, unwritten elements included                 */
  int all_zero;          /* the backend wrote only zeros where the reference is nonzero  */
  char message[320];
} fp4h_result;

/* Relative tolerance against the double reference for an output dtype: 1e-5 for f32, the output
 * rounding for bf16/f16. */
double fp4h_tolerance(fp4_dtype out_dtype);

/* Fills r's error fields from n outputs against the f32 reference: relative Frobenius error over the
 * finite outputs, NaN count (unwritten outputs) plus outputs whose overflow to inf in out_dtype differs
 * from the reference's, all-zero detection, passed against r->tolerance, and the message. */
void fp4h_compare(const float *got, const float *ref, int64_t n, fp4_dtype out_dtype, fp4h_result *r);
/* n NaNs of an output dtype (f32, bf16, f16): what every output is pre-filled with. */
void fp4h_fill_nan(void *p, fp4_dtype t, int64_t n);

/* Deterministic random generator (xoshiro-style) for test data. */
typedef struct fp4h_rng { uint64_t s; } fp4h_rng;
uint64_t fp4h_next(fp4h_rng *g);
double fp4h_uniform(fp4h_rng *g);   /* [0, 1) */
double fp4h_gauss(fp4h_rng *g);
/* Fills n floats with the distribution (block = format block size for EDGES). */
void fp4h_fill(fp4h_rng *g, float *x, int64_t n, fp4h_data data, int block);

/* The NVFP4 global scale of the runtime recipe for data x (448 * 6 / amax; 1 for all zeros). */
float fp4h_global_scale(const float *x, int64_t n);
/* Marks r failed with st, the message "what: " and the library's last error. */
void fp4h_fail(fp4h_result *r, fp4_status st, const char *what);

#endif
