/*
 * The cuda backend's dense GEMM kernel variants (fp4_mm, fp4_mm_w4a16) as named configs, the rules
 * each needs, the workspace each takes, and the pure function that picks the default. Plain C
 * without CUDA: the host-only build tests the chooser (tests/test_dense_config.c).
 *
 * Names (fp4_options.config of fp4_mm and fp4_mm_w4a16; src/backends/cuda/README.md spells out the
 * abbreviations):
 *   small-m.[r<R>.]w<W>[.b<B>]   decode kernels (gemm_small_m_kernels.cuh), M <= 64: R weight rows per CTA (16
 *                                when absent, 32 or 64), W warps splitting K; ".b6"/".b8" the lean
 *                                4-warp kernel compiled for 6 or 8 resident CTAs per SM
 *   small-m.w<W>.k<S>            the 16-row classic kernel with each row group's K split over a
 *                                cluster of S CTAs (SM90+), M <= 16: every SM busy on weights of
 *                                few rows
 *   small-m.sa.r64.w8            the shared-activation kernel (gemm_small_m_sa.cu): bf16/f16 rows
 *                                staged in shared memory, M <= 32
 *   small-m.pro.<suffix>         W4A4 through a bf16 prologue: the FP4 activations dequantized once
 *                                per GEMM, then the W4A16 kernel of the same suffix
 *   large-m.<BM>x<BN>.s<S>       mma.sync tiles (gemm_large_m.cu): BM tokens x BN weight rows, S stages
 *   large-m.rd[.pro].<BM>x<BN>   register-decode tiles (gemm_large_m_rd.cu): weights decoded in
 *                                registers; ".pro": W4A4 through the bf16 prologue
 *   large-m.wgra[.pro].128x<BT>  sm_90a register-A wgmma tiles (gemm_large_m_wgra.cu): 128 weight rows
 *                                (the wgmma M side) x BT tokens (32, 64: batched decode, two CTAs per
 *                                SM; 128, 256: prefill), a split or stream-K grid where one tile
 *                                per CTA would leave SMs idle
 *
 * A named config runs or is refused with the rule it needs; it is never replaced by another.
 */
#ifndef FP4_BACKENDS_CUDA_CONFIG_DENSE_CONFIG_H
#define FP4_BACKENDS_CUDA_CONFIG_DENSE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fp4_dense_family {
  FP4_DENSE_SMALL_M = 0,     /* gemm_small_m.cu, gemm_small_m_sa.cu */
  FP4_DENSE_LARGE_M_MMA = 1, /* gemm_large_m.cu                     */
  FP4_DENSE_LARGE_M_RD = 2,  /* gemm_large_m_rd.cu                  */
  FP4_DENSE_LARGE_M_WGRA = 3, /* gemm_large_m_wgra.cu              */
  FP4_DENSE_FAMILIES = 4
} fp4_dense_family;

/* One dense kernel variant; the fields not of its family are 0. */
typedef struct fp4_dense_config {
  const char *name;
  int family;     /* fp4_dense_family                                                              */
  int rows;       /* small-M: weight rows per CTA (16, 32, 64)                                     */
  int warps;      /* small-M: warps per CTA splitting K                                            */
  int max_m;      /* small-M: the largest M it takes                                               */
  int min_blocks; /* small-M: 0 classic, 6 / 8 lean, FP4_CUDA_SMALL_M_SHARED_ACT (cuda_kernels.h)         */
  int prologue;   /* W4A4 only, through the bf16 prologue (small-m.pro.*, large-m.*.pro.*)         */
  int bm, bn;     /* large-M: tile tokens x weight rows (register-A wgmma: bm tokens = BT)         */
  int stages;     /* large-M: pipeline stages                                                      */
  int warps_m, warps_n; /* large-M register-decode: warp grid                                      */
  int ksplit;     /* small-M: 0, or the CTAs of a thread block cluster splitting each row group's K */
} fp4_dense_config;

/* Facts of the device the rules and the chooser need (gathered once per context). */
typedef struct fp4_dense_arch {
  int major, minor;
  int sms;        /* multiprocessors                                                                */
  int smem_optin; /* bytes of shared memory a block may opt in to                                   */
  int sm90a;      /* 1: SM 9.0 running this binary's sm_90a code (register-A wgmma tiles)           */
  char sm90a_why[200]; /* when sm90a is 0 on SM 9.0: why (no sm_90a code in the binary)             */
} fp4_dense_arch;

/* One dense GEMM as the chooser sees it. */
typedef struct fp4_dense_shape {
  int64_t m, n, k;
  int act;    /* FP4_CUDA_ACT_* (backends/cuda/cuda_kernels.h): bf16, f16, f32 or FP4 (W4A4) */
  int format; /* fp4_format of the weights (and of FP4 activations)                           */
} fp4_dense_shape;

/* The small-M kernels stream K in 128-element slabs and take M <= 64. */
enum { FP4_DENSE_SMALL_M_MAX_M = 64, FP4_DENSE_K_SLAB = 128 };

/* Shared memory per block of each tile, bytes: the formulas of the kernels' tile structs (each
 * kernel file checks its own against these at compile time). fp4: W4A4 staging FP4 activations. */
#define FP4_DENSE_MMA_SMEM(bm, bn, stages, fp4) \
  ((stages) * (((fp4) ? (bm) * 32 : (bm) * 128) + (bn) * 32) + (bn) * 128 + ((fp4) ? (bm) * 128 : 0))
#define FP4_DENSE_RD_SMEM(bm, bn, stages) ((stages) * ((bm) * 128 + (bn) * 32) + 2 * (bn) * 16)
#define FP4_DENSE_WGRA_SMEM(bt, stages) (1024 + (stages) * ((bt) * 128 + 128 * 32 + 128 * 16 + 1024))
/* Resident CTAs per SM of the register-A tile of bt tokens (the grid choice counts CTA slots). */
#define FP4_DENSE_WGRA_CTAS_PER_SM(bt) ((bt) <= 64 ? 2 : 1)

/* The config of that name, or NULL. */
const fp4_dense_config *fp4_dense_config_find(const char *name);
/* The family a name belongs to by its prefix (small-m. for anything not large-m.). */
int fp4_dense_family_of(const char *name);
/* Every config of the table (count in *n). */
const fp4_dense_config *fp4_dense_configs_all(int *n);

/* NULL when the small-M kernels take (M, K); else the rule, written to why. */
const char *fp4_dense_small_m_rule(const fp4_dense_shape *s, char *why, size_t why_size);
/* 1 when the named config (NULL: any config of family) can run s on arch; 0 with the rule in why;
 * -1 when name is not a config of the family. */
int fp4_dense_check(int family, const fp4_dense_shape *s, const fp4_dense_arch *arch, const char *name, char *why,
                    size_t why_size);
/* The default config for s on arch (NULL when no kernel takes it): pure, no device query. */
const char *fp4_dense_default(const fp4_dense_shape *s, const fp4_dense_arch *arch);
/* The configs a tuner may time for s on arch (NULL: facts unknown, small-M only), the default first. */
int fp4_dense_candidates(const fp4_dense_shape *s, const fp4_dense_arch *arch, const char **names, int max);
/* Device workspace config c takes for s on arch: the prologue configs' bf16 activations (M x K x 2,
 * rounded up to 256), then the register-A tiles' stream-K partial tiles and counters. */
size_t fp4_dense_workspace(const fp4_dense_shape *s, const fp4_dense_arch *arch, const fp4_dense_config *c);
/* Bytes of shared memory a block of c takes for the activation kind act. */
int fp4_dense_smem(const fp4_dense_config *c, int act);

/* The register-A grid: CTAs for `tiles` output tiles of `kall` K tiles of 64 for the tile of bt
 * tokens on sms SMs: `tiles` (one output tile per CTA), `tiles` x a split (the CTAs of an output
 * tile walk equal parts of its K tiles) or the CTA slots (sms x FP4_DENSE_WGRA_CTAS_PER_SM(bt), each
 * walking an equal share of the (tile, K tile) pairs: stream-K); and the workspace that takes on
 * sms SMs (two partial tiles of bt x 128 FP32 per CTA and a counter per output tile where the grid
 * is not one tile per CTA; part_bytes: where the counters start). */
int64_t fp4_dense_wgra_ctas(int64_t tiles, int64_t kall, int sms, int bt);

/* The parts of a grid of `ctas` CTAs that is not one tile per CTA (the kernel's and the tests'
 * arithmetic, gemm_large_m_wgra.cu): CTA c walks iterations [begin(c), begin(c + 1)) of the
 * tiles x kall tile-major (tile, K tile) pairs; iteration x lies in CTA cta_of(x)'s range; a CTA's
 * first part goes to workspace slot c, a later one to ctas + c. */
#if defined(__CUDACC__)
#define FP4_DENSE_HD __host__ __device__ __forceinline__
#else
#define FP4_DENSE_HD static inline
#endif
FP4_DENSE_HD int64_t fp4_dense_wgra_begin(int64_t tiles, int64_t kall, int64_t ctas, int64_t c) {
  return c * (tiles * kall) / ctas;
}
FP4_DENSE_HD int64_t fp4_dense_wgra_cta_of(int64_t tiles, int64_t kall, int64_t ctas, int64_t x) {
  return ((x + 1) * ctas - 1) / (tiles * kall);
}
/* The slot holding the part of tile t that CTA c (c_first(t) <= c <= c_last(t)) walks: its first
 * part unless c is the tile's first CTA and began in an earlier tile. */
FP4_DENSE_HD int64_t fp4_dense_wgra_part_slot(int64_t tiles, int64_t kall, int64_t ctas, int64_t c, int64_t t) {
  return (fp4_dense_wgra_begin(tiles, kall, ctas, c) >= t * kall ? 0 : ctas) + c;
}
size_t fp4_dense_wgra_sched_bytes(int64_t m, int64_t n, int64_t k, int bt, int sms, size_t *part_bytes);

#ifdef __cplusplus
}
#endif

#endif
