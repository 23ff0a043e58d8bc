/*
 * The heuristic ranking used by auto selection when no tuning cache answers. The order encodes what
 * each GPU generation can do (arch.c): where the tensor cores have a block-scaled FP4 MMA (SM100,
 * SM120) the native paths come first; below SM100 the own dequantizing kernels win at small M
 * (memory-bound: they read 4-bit weights) and cuBLAS BF16 on dequantized operands wins at large M
 * (compute-bound: the O(N*K) dequantization is amortised over M rows of BF16 tensor-core work).
 */
#include "dispatch/heuristic.h"

#include <string.h>

/* From this M on, a BF16 GEMM on dequantized weights beats the own kernels on SM80-SM90. Measured
 * on the H200 (bench/results/h200/2026-11-30-cublas-dequant/crossover-*.csv: cuda against
 * cublas-dequant on 11 dense Qwen3.5 / Llama-3.3-70B shapes, M = 16-256): up to M = 32 the small-M
 * kernels win every shape (0.22-0.71x cublas-dequant's time); at M = 48 the two are within
 * 0.63-1.17x; at M = 64 cublas-dequant wins every weight of at least 2^25 elements (by 1.05-1.34x),
 * the four smallest (13-19 us) going either way between runs; above 64 the large-M tiles lose
 * everywhere (1.08-5.3x). The tuning cache overrides this per shape. */
enum { DEQUANT_WINS_M = 64, NATIVE_SMALL_M = 64, UNKNOWN_RANK = FP4_RANK_UNKNOWN };

int fp4_heuristic_host_backend(const char *backend) {
  return backend && (!strcmp(backend, "cpu") || !strcmp(backend, "ref"));
}

int fp4_heuristic_rank(const char *backend, int cc, fp4_memory memory, fp4_op op, int64_t m) {
  if (!backend) return UNKNOWN_RANK;
  if (memory == FP4_MEMORY_HOST) {
    if (!strcmp(backend, "cpu")) return 0;
    if (!strcmp(backend, "ref")) return FP4_RANK_CHECK_ONLY; /* the oracle */
    return UNKNOWN_RANK;
  }
  /* cuda-sm120 is the native W4A4 path on SM120/121; elsewhere it can only run as the SM90
   * verification build (an exact emulation, slow by design), which auto must never prefer. */
  if (!strcmp(backend, "cuda-sm120")) return cc >= 120 && op == FP4_OP_MM ? -1 : FP4_RANK_VERIFICATION_ONLY;
  const int native_fp4 = cc >= 100; /* SM100/103 tcgen05, SM120/121 mma.sync block-scaled */
  static const struct {
    const char *name;
    int native_small, native_large, older_small, older_large;
  } ranks[] = {
      /* name            native: M small, M large   SM80-90: M small, M large */
      {"cuda", 0, 2, 0, 1},
      {"cublaslt", 1, 0, 2, 2},
      {"cudnn", 2, 1, 3, 3},
      {"cublas-dequant", 3, 3, 1, 0},
  };
  int small = native_fp4 ? m <= NATIVE_SMALL_M : m < DEQUANT_WINS_M;
  if (cc >= 120 && m <= 2 * NATIVE_SMALL_M) small = 1; /* SM120 mma.sync kernels hold up to larger M */
  for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++) {
    if (strcmp(backend, ranks[i].name)) continue;
    if (op == FP4_OP_QUANTIZE) return (int)i; /* only own kernels quantize; order is moot */
    if (native_fp4) return small ? ranks[i].native_small : ranks[i].native_large;
    return small ? ranks[i].older_small : ranks[i].older_large;
  }
  return UNKNOWN_RANK;
}
