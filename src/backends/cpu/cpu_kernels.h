/*
 * Internal interface of the cpu backend: instruction-set levels, the kernel table each level fills,
 * and the operand descriptions the kernels share.
 *
 * How a GEMM runs (cpu_backend.c): A is converted once per call into a "packed" row format whose
 * element order matches the order in which a level's kernels decode FP4 nibbles (so the hot loops
 * never interleave nibbles); then either
 *   - small M (<= FP4_CPU_GEMV_MAX_M): the gemv kernel streams each weight row once, decodes
 *     nibbles in registers and applies the block scales to per-block partial sums, or
 *   - larger M: a panel of FP4_CPU_NR weight rows is decoded once to f32 (scales applied, exact)
 *     and a register-blocked micro-kernel multiplies it with FP4_CPU_MR rows of A at a time, K
 *     block by K block.
 * Every output element is computed by one thread with a fixed summation order, so results do not
 * depend on the thread count.
 */
#ifndef FP4_BACKENDS_CPU_KERNELS_H
#define FP4_BACKENDS_CPU_KERNELS_H

#include <stdint.h>

#include "fp4kit.h"
#include "format/codec.h"

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#define FP4_CPU_X86 1
#else
#define FP4_CPU_X86 0
#endif

/* Levels, lowest first: a level is usable when the CPU (and OS) support it. */
typedef enum fp4_cpu_level_id {
  FP4_CPU_LEVEL_GENERIC = 0,
  FP4_CPU_LEVEL_AVX2 = 1,   /* AVX2 + FMA + F16C                                   */
  FP4_CPU_LEVEL_AVX512 = 2, /* AVX-512 F/BW/VL/DQ; BF16 dot products when present   */
  FP4_CPU_LEVEL_NEON = 3,   /* aarch64 Advanced SIMD: the slot exists, no kernels yet */
  FP4_CPU_LEVEL_COUNT = 4
} fp4_cpu_level_id;

#define FP4_CPU_GEMV_MAX_M 4 /* up to this M the fused streaming kernel runs             */
#define FP4_CPU_MR 4         /* rows of A per micro-kernel call                          */
#define FP4_CPU_NR 6         /* weight rows per decoded panel                            */
#define FP4_CPU_MTILE 64     /* rows of A per work unit of the panel path (fits L2)      */
#define FP4_CPU_KALIGN 128   /* packed rows are padded with zeros to a multiple of this  */
#define FP4_CPU_ROWPAD 32    /* elements from the end of one packed (or panel) row of the
                              * panel path to the start of the next: K of 4096, 8192 or 14336
                              * f32 is a multiple of 4 KiB, so unpadded rows all fall into the
                              * same L1 sets and the 4 x 3 micro-kernel's 7 row streams thrash
                              * them (M = 16 in cache: 31 Gprod/s at K = 4096 against 38 at
                              * K = 4224, bench/results/cpu/2026-12-04-avx2-m4-m16); 32 keeps
                              * rows 64-byte aligned in bf16 and f32                        */
#define FP4_CPU_KC 512       /* K block of the micro-kernels: A and panel slices stay in L1/L2 */
#define FP4_CPU_ACC 16       /* floats of accumulator state per output in a micro-kernel  */
#define FP4_CPU_PANELS 8     /* panels per work unit of the panel path: each K block of the
                              * tile's A slice is reused from L2 by this many panels        */

/* Element orders of packed A rows (and decoded panels), chunk by chunk along K. */
typedef enum fp4_cpu_order {
  FP4_CPU_ORDER_NATURAL = 0, /* k                                                          */
  FP4_CPU_ORDER_PAIR16 = 1,  /* per 16: the 8 even elements, then the 8 odd ones           */
  FP4_CPU_ORDER_PAIR32 = 2,  /* per 32: the 16 even elements, then the 16 odd ones         */
  FP4_CPU_ORDER_NIB128 = 3,  /* per 128: four vectors j = 0..3, word w holding element 4w+j */
  FP4_CPU_ORDER_LUT128 = 4   /* per 128: the sixteen 8-float vectors of the AVX2 byte-table decode,
                              * position 8v+q holding byte b = 32(v/8) + 16(q/4) + 8((v/4)&1) +
                              * 2(q&3) + (v&1), element 2b + ((v/2)&1): every 4-lane half of a vector
                              * lies in one NVFP4 block (kernels_avx2.c)                         */
} fp4_cpu_order;

/* Source index (within the chunk) of packed position p (within the chunk) for an order. */
static inline int64_t fp4_cpu_order_source(fp4_cpu_order order, int64_t k) {
  int64_t base, p;
  switch (order) {
  case FP4_CPU_ORDER_PAIR16: base = k & ~(int64_t)15; p = k & 15; return base + (p < 8 ? 2 * p : 2 * (p - 8) + 1);
  case FP4_CPU_ORDER_PAIR32: base = k & ~(int64_t)31; p = k & 31; return base + (p < 16 ? 2 * p : 2 * (p - 16) + 1);
  case FP4_CPU_ORDER_NIB128: base = k & ~(int64_t)127; p = k & 127; return base + 4 * (p & 31) + (p >> 5);
  case FP4_CPU_ORDER_LUT128: {
    base = k & ~(int64_t)127;
    p = k & 127;
    const int64_t v = p >> 3, q = p & 7;
    const int64_t b = 32 * (v >> 3) + 16 * (q >> 2) + 8 * ((v >> 2) & 1) + 2 * (q & 3) + (v & 1);
    return base + 2 * b + ((v >> 1) & 1);
  }
  default: return k;
  }
}

/* A GEMM as the kernels see it: packed A, raw FP4 weights and scale bytes, the output. */
typedef struct fp4_cpu_gemm {
  const void *a;        /* packed A: M rows, lda elements apart (float or bf16 bits)         */
  int64_t kp;           /* packed elements per row: K rounded up to FP4_CPU_KALIGN (zeros
                         * past K)                                                           */
  int64_t lda;          /* elements from one packed row (and one decoded panel row) to the
                         * next: kp on the streaming path, kp + FP4_CPU_ROWPAD on the
                         * panel path                                                        */
  const uint8_t *b;     /* weights [N, K/2]                                                 */
  const uint8_t *bs;    /* weight scale bytes in their layout                               */
  int64_t m, n, k;
  int64_t c;            /* scale columns: K/16 (NVFP4) or K/32 (MXFP4)                       */
  int64_t gstride;      /* bytes between groups of 4 consecutive scale columns in a row      */
  int layout;           /* fp4_scale_layout of the weight scales                            */
  int mx;               /* 1 for MXFP4 (UE8M0 per 32), 0 for NVFP4 (E4M3 per 16)            */
  double scale;         /* alpha times the per-tensor multipliers, unrounded (as a float it
                           under- or overflows where the factors are extreme)                */
  fp4_matrix *out;
} fp4_cpu_gemm;

/* ---- the blocked streaming kernels' reading order ---- */

/* With 2-4 rows of A the AVX2 and AVX-512 streaming kernels walk FP4_CPU_GEMV_ROWS weight rows
 * together, a K block of each in turn (an "item": one K block of one weight row), and prefetch
 * the weights of the item FP4_CPU_GEMV_PF_ITEMS items ahead in that order. */
#define FP4_CPU_GEMV_ROWS 8     /* weight rows walked together                              */
#define FP4_CPU_GEMV_PF_ITEMS 8 /* items ahead whose weights are prefetched                 */

/* A position in that order: K block c0 (in chunks) of row r of the group of nr rows from r0;
 * groups follow each other up to row n1, K blocks are kchunks chunks, a row has nfull full ones. */
typedef struct fp4_cpu_gemv_cursor {
  int64_t r0, nr, r, c0;
} fp4_cpu_gemv_cursor;

static inline fp4_cpu_gemv_cursor fp4_cpu_gemv_cursor_make(int64_t n0, int64_t n1) {
  const fp4_cpu_gemv_cursor p = {n0, n1 - n0 < FP4_CPU_GEMV_ROWS ? n1 - n0 : FP4_CPU_GEMV_ROWS, 0, 0};
  return p;
}

static inline void fp4_cpu_gemv_cursor_next(fp4_cpu_gemv_cursor *p, int64_t n1, int64_t nfull, int64_t kchunks) {
  if (p->r0 >= n1 || ++p->r < p->nr) return;
  p->r = 0;
  p->c0 += kchunks;
  if (p->c0 < nfull) return;
  p->c0 = 0;
  p->r0 += p->nr;
  p->nr = n1 - p->r0 < FP4_CPU_GEMV_ROWS ? n1 - p->r0 : FP4_CPU_GEMV_ROWS;
}

/* The weights to prefetch along with item [c0, c1) of a row at w: those of the cursor's item
 * (which it then passes), or the item's own when the cursor has run past the rows [., n1). */
static inline const uint8_t *fp4_cpu_gemv_prefetch_next(fp4_cpu_gemv_cursor *p, const uint8_t *b, int64_t row_bytes,
                                                        int64_t n1, int64_t nfull, int64_t kchunks, const uint8_t *w,
                                                        int64_t c0, int64_t c1) {
  const uint8_t *pf = b + (p->r0 + p->r) * row_bytes + 64 * p->c0;
  if (p->r0 >= n1 || pf + 64 * (c1 - c0) > b + n1 * row_bytes) pf = w + 64 * c0;
  fp4_cpu_gemv_cursor_next(p, n1, nfull, kchunks);
  return pf;
}

/* ---- shared helpers (cpu_common.c) ---- */

/* Offset of scale (row r, group of 4 columns 0) in the weight scale buffer; scale column c of row
 * r lives at base + (c/4)*gstride + c%4 in every layout. */
int64_t fp4_cpu_scale_base(const fp4_cpu_gemm *g, int64_t r);
/* Decoded scale (block scale only, no multiplier) of weight row r, scale column c. */
float fp4_cpu_scale_value(const fp4_cpu_gemm *g, int64_t r, int64_t c);
/* Writes alpha-scaled sums to out[m, n] in the output dtype. */
void fp4_cpu_store(const fp4_cpu_gemm *g, int64_t m, int64_t n, float sum);
/* Row r of a dense host matrix (ld honoured). */
const void *fp4_cpu_dense_row(const fp4_matrix *x, int64_t r);
/* Quantization of block (r, c) of out with max |x| = vmax (runtime recipe, codec.h): stores the
 * scale byte at its place in out's layout and returns the encode multiplier for the codes. */
float fp4_cpu_block_scale(fp4_qmatrix *out, const fp4_nvfp4_recipe *recipe, int64_t r, int64_t c, float vmax);
/* The 256 decoded E4M3 and UE8M0 values (NaN codes decode to NaN). */
extern const float *fp4_cpu_e4m3_table(void);
extern const float *fp4_cpu_ue8m0_table(void);
/* E2M1 codes as floats, 0..15. */
extern const float fp4_cpu_e2m1_values[16];

/* One level's kernels. gemv_bf16 may be NULL: bf16 inputs then take the f32 kernels. */
typedef struct fp4_cpu_kernels {
  const char *name;          /* reported level name for the f32 kernels                     */
  const char *name_bf16;     /* reported level name for the bf16 streaming kernel           */
  fp4_cpu_order order_f32;   /* packing of f32 A for gemv_f32 and the f32 panel path        */
  fp4_cpu_order order_gemv_bf16;
  /* Streaming kernel for mr <= FP4_CPU_GEMV_MAX_M rows of A starting at m0, weight rows [n0, n1). */
  void (*gemv_f32)(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1);
  void (*gemv_bf16)(const fp4_cpu_gemm *g, int64_t m0, int64_t mr, int64_t n0, int64_t n1);
  /* gemv_bf16 is exact where every nonzero |A| is at least 2^gemv_bf16_min_exp (0: every value).
   * vdpbf16ps takes subnormal inputs and sums as zero; calls with smaller activations take gemv_f32. */
  int gemv_bf16_min_exp;
  /* Decodes elements [k0, k1) (multiples of FP4_CPU_KALIGN, k1 <= kp) of weight rows [n0, n0+nr)
   * (nr <= FP4_CPU_NR), scales applied, into the same elements of FP4_CPU_NR rows lda elements apart
   * (rows past nr and elements past K are zero). The panel path is f32 at every level. */
  void (*panel_f32)(const fp4_cpu_gemm *g, int64_t n0, int64_t nr, int64_t k0, int64_t k1, float *panel);
  /* Elements [k0, k1) of out[m0..m0+mr, n0..n0+nr) from a decoded panel; mr <= FP4_CPU_MR. The
   * unreduced accumulators live in acc (FP4_CPU_MR * FP4_CPU_NR * FP4_CPU_ACC floats) between K
   * blocks: first starts them at zero, last reduces them and stores the outputs. The summation
   * order therefore does not depend on the blocking or the threads. */
  void (*micro_f32)(const fp4_cpu_gemm *g, const float *panel, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                    int64_t k0, int64_t k1, float *acc, int first, int last);
  /* Runtime-recipe quantization of rows [r0, r0+nrows), bit-identical to the reference. */
  void (*quantize_rows)(const fp4_matrix *x, float global_scale, fp4_qmatrix *out, int64_t r0, int64_t nrows);
} fp4_cpu_kernels;

/* Per-level tables; NULL when the level is not compiled for this architecture. */
const fp4_cpu_kernels *fp4_cpu_kernels_generic(void);
const fp4_cpu_kernels *fp4_cpu_kernels_avx2(void);
const fp4_cpu_kernels *fp4_cpu_kernels_avx512(void);
const fp4_cpu_kernels *fp4_cpu_kernels_neon(void);

/* ---- features and configuration (cpu_features.c) ---- */

/* Highest level this CPU and build support. */
fp4_cpu_level_id fp4_cpu_detected_level(void);
/* A level's name ("generic", "avx2", "avx512", "neon") and its kernel table. */
const char *fp4_cpu_level_name(fp4_cpu_level_id level);
const fp4_cpu_kernels *fp4_cpu_level_kernels(fp4_cpu_level_id level);
/* The level a cpu backend config names: NULL or "default" the detected one, else a level name;
 * FP4_ERR_UNSUPPORTED for a level above this CPU's (or another architecture's), FP4_ERR_NOT_FOUND
 * for an unknown name, with why. */
fp4_status fp4_cpu_config_level(const char *config, fp4_cpu_level_id *level, char *why, size_t why_size);
/* The level configs this CPU runs, the detected (default) one first, then the lower ones; count. */
int fp4_cpu_level_configs(const char **names, int max);
/* Threads in force: FP4KIT_NUM_THREADS if set and valid, else the online CPUs. */
int fp4_cpu_current_threads(void);

/* ---- threads (cpu_threads.c) ---- */

/* Calls fn(arg, unit, thread) for every unit in [0, units) on up to nthreads threads (the caller is
 * thread 0); returns when all are done. Units are handed out dynamically; callers must make each
 * unit's result independent of which thread runs it. */
void fp4_cpu_parallel(int nthreads, int64_t units, void (*fn)(void *arg, int64_t unit, int thread), void *arg);

#endif
