/*
 * The heuristic ranking used by auto selection when no tuning cache answers. The regimes encode what
 * each GPU generation can do (arch.c); each backend's table ranks it in every regime. Where the
 * tensor cores have a block-scaled FP4 MMA (SM100, SM120) the native paths come first; below SM100
 * the own dequantizing kernels win at small M (memory-bound: they read 4-bit weights) and cuBLAS
 * BF16 on dequantized operands wins at large M (compute-bound: the O(N*K) dequantization is
 * amortised over M rows of BF16 tensor-core work).
 */
#include "dispatch/heuristic.h"

/* From this M on, a BF16 GEMM on dequantized weights beats the own kernels on SM80-SM90. Measured
 * on the H200 (bench/results/h200/2026-11-30-cublas-dequant/, crossover-m16-128.csv and
 * crossover-m64-256.csv: cuda against cublas-dequant on 11 dense Qwen3.5 / Llama-3.3-70B shapes,
 * M = 16-256): up to M = 32 the small-M
 * kernels win every shape (0.22-0.71x cublas-dequant's time); at M = 48 the two are within
 * 0.63-1.17x; at M = 64 cublas-dequant wins every weight of at least 2^25 elements (by 1.05-1.34x),
 * the four smallest (13-19 us) going either way between runs; above 64 the large-M tiles lose
 * everywhere (1.08-5.3x). The tuning cache overrides this per shape. */
enum { DEQUANT_WINS_M = 64, NATIVE_SMALL_M = 64 };

fp4_regime fp4_heuristic_regime(int cc, fp4_memory memory, fp4_op op, int64_t m) {
  if (memory == FP4_MEMORY_HOST) return FP4_REGIME_HOST;
  if (op == FP4_OP_QUANTIZE) return FP4_REGIME_QUANTIZE; /* only own kernels quantize; order is moot */
  /* SM120 mma.sync kernels hold up to larger M */
  if (cc >= 120) return m <= 2 * NATIVE_SMALL_M ? FP4_REGIME_SM120_SMALL_M : FP4_REGIME_SM120_LARGE_M;
  if (cc >= 100) return m <= NATIVE_SMALL_M ? FP4_REGIME_SM100_SMALL_M : FP4_REGIME_SM100_LARGE_M;
  return m < DEQUANT_WINS_M ? FP4_REGIME_SM80_SMALL_M : FP4_REGIME_SM80_LARGE_M;
}

int fp4_heuristic_rank(const fp4_backend *b, int cc, fp4_memory memory, fp4_op op, int64_t m) {
  const fp4_backend_ranks *r = b ? b->ranks : NULL;
  if (!r) return FP4_RANK_UNKNOWN;
  if (memory != FP4_MEMORY_HOST && r->device_ops && !(r->device_ops & FP4_OP_BIT(op))) return r->other_device_ops;
  return r->in[fp4_heuristic_regime(cc, memory, op, m)];
}

int fp4_heuristic_host_backend(const fp4_backend *b) { return b && b->host; }
