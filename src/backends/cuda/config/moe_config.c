/*
 * The MoE kernel variants by name and the default choice (moe_config.h). Pure functions of the
 * problem's shape, formats and the device facts: no CUDA call, no environment.
 */
#include "backends/cuda/config/moe_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/config/moe_sm90.h"
#include "backends/cuda/cuda_kernels.h"

static const struct {
  const char *name;
  fp4_moe_variant v;
} kVariants[] = {
    {"moe.lean.r32.k1.s1", {FP4_MOE_KERNEL_LEAN, 32, 1, 1, 1, 0, 0, 0}},
    {"moe.lean.r32.k1.s2", {FP4_MOE_KERNEL_LEAN, 32, 1, 2, 1, 0, 0, 0}},
    {"moe.lean.r32.k1.s3", {FP4_MOE_KERNEL_LEAN, 32, 1, 3, 1, 0, 0, 0}},
    {"moe.lean.r32.k1.s4", {FP4_MOE_KERNEL_LEAN, 32, 1, 4, 1, 0, 0, 0}},
    {"moe.lean.r32.k2.s1", {FP4_MOE_KERNEL_LEAN, 32, 2, 1, 1, 0, 0, 0}},
    {"moe.lean.r32.k2.s2", {FP4_MOE_KERNEL_LEAN, 32, 2, 2, 1, 0, 0, 0}},
    {"moe.lean.r32.k2.s3", {FP4_MOE_KERNEL_LEAN, 32, 2, 3, 1, 0, 0, 0}},
    {"moe.lean.r32.k2.s4", {FP4_MOE_KERNEL_LEAN, 32, 2, 4, 1, 0, 0, 0}},
    {"moe.lean.r32.k4.s1", {FP4_MOE_KERNEL_LEAN, 32, 4, 1, 1, 0, 0, 0}},
    {"moe.lean.r32.k4.s2", {FP4_MOE_KERNEL_LEAN, 32, 4, 2, 1, 0, 0, 0}},
    {"moe.lean.r32.k4.s3", {FP4_MOE_KERNEL_LEAN, 32, 4, 3, 1, 0, 0, 0}},
    {"moe.lean.r32.k4.s4", {FP4_MOE_KERNEL_LEAN, 32, 4, 4, 1, 0, 0, 0}},
    {"moe.lean.r32.k4.s1.c2", {FP4_MOE_KERNEL_LEAN, 32, 4, 1, 1, 0, 0, 0, 2}},
    {"moe.lean.r32.k4.s1.c4", {FP4_MOE_KERNEL_LEAN, 32, 4, 1, 1, 0, 0, 0, 4}},
    {"moe.lean.generic-k.r32.k1.s1", {FP4_MOE_KERNEL_LEAN, 32, 1, 1, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k1.s2", {FP4_MOE_KERNEL_LEAN, 32, 1, 2, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k1.s3", {FP4_MOE_KERNEL_LEAN, 32, 1, 3, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k1.s4", {FP4_MOE_KERNEL_LEAN, 32, 1, 4, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k2.s1", {FP4_MOE_KERNEL_LEAN, 32, 2, 1, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k2.s2", {FP4_MOE_KERNEL_LEAN, 32, 2, 2, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k2.s3", {FP4_MOE_KERNEL_LEAN, 32, 2, 3, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k2.s4", {FP4_MOE_KERNEL_LEAN, 32, 2, 4, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k4.s1", {FP4_MOE_KERNEL_LEAN, 32, 4, 1, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k4.s2", {FP4_MOE_KERNEL_LEAN, 32, 4, 2, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k4.s3", {FP4_MOE_KERNEL_LEAN, 32, 4, 3, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r32.k4.s4", {FP4_MOE_KERNEL_LEAN, 32, 4, 4, 0, 0, 0, 0}},
    {"moe.lean.generic-k.r16.k4.s1", {FP4_MOE_KERNEL_LEAN, 16, 4, 1, 0, 0, 0, 0}},
    {"moe.mma.w1", {FP4_MOE_KERNEL_MMA, 0, 0, 0, 0, 1, 0, 0}},
    {"moe.mma.w2", {FP4_MOE_KERNEL_MMA, 0, 0, 0, 0, 2, 0, 0}},
    {"moe.mma.w4", {FP4_MOE_KERNEL_MMA, 0, 0, 0, 0, 4, 0, 0}},
    {"moe.mma.w8", {FP4_MOE_KERNEL_MMA, 0, 0, 0, 0, 8, 0, 0}},
    {"moe.fma", {FP4_MOE_KERNEL_FMA, 0, 0, 0, 0, 0, 0, 0}},
    {"moe.prefill.mma64", {FP4_MOE_KERNEL_PREFILL_MMA, 0, 0, 0, 0, 0, 64, 0}},
    {"moe.prefill.mma128", {FP4_MOE_KERNEL_PREFILL_MMA, 0, 0, 0, 0, 0, 128, 0}},
    {"moe.prefill.wgra32", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 32, 0}},
    {"moe.prefill.wgra64", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 64, 0}},
    {"moe.prefill.wgra128", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 128, 0}},
    {"moe.prefill.wgra160", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 160, 0}},
    {"moe.prefill.wgra192", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 192, 0}},
    {"moe.prefill.wgra256", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 256, 0}},
    {"moe.prefill.wgra32.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 32, 1}},
    {"moe.prefill.wgra64.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 64, 1}},
    {"moe.prefill.wgra128.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 128, 1}},
    {"moe.prefill.wgra160.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 160, 1}},
    {"moe.prefill.wgra192.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 192, 1}},
    {"moe.prefill.wgra256.bound-tiles", {FP4_MOE_KERNEL_PREFILL_WGRA, 0, 0, 0, 0, 0, 256, 1}},
};
enum { VARIANTS = (int)(sizeof kVariants / sizeof *kVariants) };

const char *const *fp4_moe_variant_names(int *count) {
  static const char *names[VARIANTS];
  if (!names[0]) /* benign race: every writer stores the same pointers */
    for (int i = VARIANTS - 1; i >= 0; i--) names[i] = kVariants[i].name;
  *count = VARIANTS;
  return names;
}

int fp4_moe_variant_parse(const char *name, fp4_moe_variant *v) {
  for (int i = 0; name && i < VARIANTS; i++)
    if (!strcmp(name, kVariants[i].name)) {
      *v = kVariants[i].v;
      return 0;
    }
  return -1;
}

const char *fp4_moe_variant_name(const fp4_moe_variant *v) {
  for (int i = 0; i < VARIANTS; i++)
    if (!memcmp(v, &kVariants[i].v, sizeof *v)) return kVariants[i].name;
  return "?";
}

static const fp4_moe_rules *rules_of(const fp4_moe_arch *arch) {
  return arch->major >= 9 ? &fp4_moe_rules_sm90 : &fp4_moe_rules_sm80;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t slots_of(int64_t rows, int64_t experts) { return min64(experts, rows) > 0 ? min64(experts, rows) : 1; }
static int act16(int act) { return act == FP4_CUDA_ACT_BF16 || act == FP4_CUDA_ACT_F16; }

int fp4_moe_prefill_wanted(int64_t rows, int64_t experts, const fp4_moe_arch *arch) {
  const int64_t slots = min64(experts, rows);
  return slots > 0 && cdiv(rows, slots) >= rules_of(arch)->prefill_min_rows;
}

int fp4_moe_path_parse(const char *name) {
  static const char *const paths[] = {"moe.default", "moe.streaming", "moe.prefill"};
  for (int i = 0; name && i < 3; i++)
    if (!strcmp(name, paths[i])) return i;
  return -1;
}

int fp4_moe_path_prefill(int path, int64_t rows, int64_t experts, const fp4_moe_arch *arch) {
  return path == FP4_MOE_PATH_DEFAULT ? fp4_moe_prefill_wanted(rows, experts, arch) : path == FP4_MOE_PATH_PREFILL;
}

int fp4_moe_bf16_rows_possible(int64_t cols, int aligned) { return cols % 128 == 0 && aligned; }

/* ---- streaming kernels ------------------------------------------------------------------------- */

/* Token tiles per chunk of the tensor-core kernel and the CTAs sharing an expert's row chunks, as
 * moe_grouped.cu derives them from the mean rows per expert slot. */
static int mma_token_tiles(int64_t mean) { return mean <= 8 ? 1 : mean <= 16 ? 2 : 8; }
static int64_t row_splits(int64_t rows, int64_t slots, int nt) {
  const int64_t mean = cdiv(rows, slots), chunks = cdiv(mean, 8);
  const int64_t splits = chunks < 1 ? 1 : chunks > 16 ? 16 : chunks, cap = 2 * cdiv(mean, 8 * (int64_t)nt);
  return splits < cap ? splits : cap < 1 ? 1 : cap;
}

#define K_IS(v) || k == (v)
#define K_TEXT(v) " " #v
static int fixed_k(int64_t k) { return 0 FP4_MOE_FIXED_K_LIST(K_IS); }
static int silu_k(int64_t k) { return 0 FP4_MOE_SILU_K_LIST(K_IS); }
static int extra_down_k(int64_t k) { return 0 FP4_MOE_EXTRA_DOWN_K_LIST(K_IS); }
#undef K_IS

static int lean_fixed_k_possible(const fp4_moe_gemm_shape *s) {
  return s->format == FP4_FORMAT_NVFP4 && s->act == FP4_CUDA_ACT_BF16 && s->w_layout == (int)FP4_LAYOUT_128X4 &&
         s->n % 128 == 0 && fixed_k(s->k);
}

static fp4_moe_variant choose_streaming(const fp4_moe_gemm_shape *s, const fp4_moe_arch *arch) {
  const fp4_moe_rules *r = rules_of(arch);
  fp4_moe_variant v;
  memset(&v, 0, sizeof v);
  const int rows_aligned = s->act == FP4_CUDA_ACT_FP4 || s->aligned;
  if (s->k % 128 || !rows_aligned) {
    v.kernel = FP4_MOE_KERNEL_FMA;
    return v;
  }
  const int64_t slots = slots_of(s->rows, s->experts), tiles16 = cdiv(s->n, 16), nslabs = s->k / 128;
  const int64_t mean = cdiv(s->rows, slots);
  const int nt = mma_token_tiles(mean);
  const int64_t splits = row_splits(s->rows, slots, nt);
  /* The lean kernel up to 8 rows per slot; NVFP4 up to lean_max_rows (moe_sm90.h), where it beat the
   * tensor-core kernel's two token tiles. Above 8 rows its splits are those of the launch (nt = 2).
   * Its grid takes FP4_MOE_LEAN_MAX_SLOTS active experts; more run on the tensor-core kernel. */
  if (act16(s->act) && slots <= FP4_MOE_LEAN_MAX_SLOTS &&
      (nt == 1 || (s->format == FP4_FORMAT_NVFP4 && mean <= r->lean_max_rows))) {
    /* The lean decode kernel: K split over 2 warps, over 4 when 2 would fill less than half a wave;
     * two spans per CTA when a span holds under 64 KiB of codes and the grid still has 8 waves of
     * row groups (docs/moe.md). NVFP4 only: MXFP4's per-slab scale factoring spills with KW < 4. */
    const int nv = s->format == FP4_FORMAT_NVFP4;
    const int64_t groups = cdiv(tiles16, 2), wave = (int64_t)r->lean_wave_ctas * arch->sms;
    v.kernel = FP4_MOE_KERNEL_LEAN;
    v.rows = 32;
    v.ksplit = 4;
    if (nv) v.ksplit = 2 * (cdiv(groups * 2, 4) * slots * splits) < wave ? 4 : 2;
    const int64_t span_bytes = (int64_t)(4 / v.ksplit) * 32 * (s->k / 2);
    v.span = (!nv || span_bytes < r->lean_span_max_bytes) && groups * slots * splits >= r->lean_span_waves * wave ? 2 : 1;
    v.fixed_k = lean_fixed_k_possible(s);
    /* The cluster K split (moe_sm90.h, measured on SM90 only) where the four-warp CTAs of one group
     * each fill at most half a wave: the most CTAs per cluster (4, 2) that still fit one wave and
     * leave every warp lean_cluster_slabs slabs of its CTA's part. */
    if (r->lean_cluster_slabs && arch->major == 9 && v.ksplit == 4 && v.span == 1 && v.fixed_k) {
      const int64_t ctas = groups * slots * splits;
      for (int c = 4; c >= 2 && !v.kparts; c /= 2)
        if (ctas * c <= wave && nslabs >= 4 * c * (int64_t)r->lean_cluster_slabs) v.kparts = c;
    }
    return v;
  }
  /* One warp per 16-row tile unless that leaves fewer than mma_min_ctas_per_sm CTAs per SM. */
  int wpt = 1;
  while (wpt < 8 && 2 * wpt <= nslabs &&
         cdiv(tiles16, 8 / wpt) * slots * splits < (int64_t)r->mma_min_ctas_per_sm * arch->sms)
    wpt *= 2;
  v.kernel = FP4_MOE_KERNEL_MMA;
  v.warps_per_tile = wpt;
  return v;
}

/* ---- prefill tiles ----------------------------------------------------------------------------- */

int fp4_moe_prefill_mma_smem(int tile_m, int act) {
  return FP4_MOE_PREFILL_MMA_SMEM(tile_m, act == FP4_CUDA_ACT_FP4);
}

enum { PREFILL_N_TILE = 128 /* both families: 128 weight rows per CTA */ };

static int prefill_common(const fp4_moe_gemm_shape *s, const fp4_moe_arch *arch, char *why, size_t why_size) {
  if (s->act == FP4_CUDA_ACT_F32)
    return snprintf(why, why_size, "the prefill tiles take bf16, f16 (NVFP4) or FP4 activations, not f32"), -1;
  if (s->act == FP4_CUDA_ACT_F16 && s->format != FP4_FORMAT_NVFP4)
    return snprintf(why, why_size, "the prefill tiles take f16 activations with NVFP4 only (MXFP4 values overflow f16)"), -1;
  if (s->act != FP4_CUDA_ACT_FP4 && !s->aligned)
    return snprintf(why, why_size, "the prefill tiles copy 16-byte pieces of activation rows: rows must start 16-byte aligned"), -1;
  if (fp4_moe_prefill_mma_smem(64, s->act) > arch->smem_optin)
    return snprintf(why, why_size, "the prefill tiles need %d bytes of shared memory per block; the device allows %d",
                    fp4_moe_prefill_mma_smem(64, s->act), arch->smem_optin), -1;
  if (s->rows > 0x7FFFFFFF || (s->rows / 32 + s->experts) * cdiv(s->n, PREFILL_N_TILE) > 0x7FFFFFFF)
    return snprintf(why, why_size, "the prefill tiles' grid would exceed 2^31 CTAs"), -1;
  return 0;
}

/* Expected tiles of width bt per expert when its rows are a Poisson count of mean m (routing counts
 * spread about like one): sum over r of P(r) * ceil(r / bt), summed to m + 12 sqrt(m) + 12. */
static double expected_tiles(double m, int bt) {
  const double limit = m + 12.0 * sqrt(m) + 12.0;
  double pr = exp(-m), sum = 0.0; /* P(0); large m underflows to 0 */
  if (pr == 0.0) return ceil(m / bt) + 0.5; /* m > ~700: the tile count is about fixed */
  for (int r = 1; r <= (int)limit; r++) {
    pr *= m / r;
    sum += pr * (double)((r + bt - 1) / bt);
  }
  return sum;
}

/* The register-A width with the least expected cost: an expert's rows are padded to whole tiles. */
static int wgra_width(int64_t rows, int64_t slots, const fp4_moe_rules *r) {
  const double mean = (double)rows / (double)slots;
  int best = 0;
  double best_cost = 0.0;
  for (int i = 0; i < r->widths; i++) {
    const double c = expected_tiles(mean, r->width_cost[i].tokens) * r->width_cost[i].cost;
    if (!best || c < best_cost) best = r->width_cost[i].tokens, best_cost = c;
  }
  return best;
}

/* The mma.sync tile from the mean rows per expert slot: tiles are padded per expert, so the one that
 * pads a typical expert (m + sqrt(m) rows, a Poisson count) least: 128 rows unless they pad over 1/8
 * more than 64-row tiles. */
static int mma_tile_m(int64_t rows, int64_t slots, int act, const fp4_moe_arch *arch) {
  const int64_t mean = cdiv(rows, slots);
  int64_t root = 0;
  while ((root + 1) * (root + 1) <= mean) root++;
  const int64_t typical = mean + root, pad128 = cdiv(typical, 128) * 128, pad64 = cdiv(typical, 64) * 64;
  return pad128 * 8 <= pad64 * 9 && fp4_moe_prefill_mma_smem(128, act) <= arch->smem_optin ? 128 : 64;
}

static int wgra_act_ok(const fp4_moe_gemm_shape *s) {
  return s->act == FP4_CUDA_ACT_BF16 || s->act == FP4_CUDA_ACT_FP4 ||
         (s->act == FP4_CUDA_ACT_F16 && s->format == FP4_FORMAT_NVFP4);
}

fp4_moe_variant fp4_moe_choose_gemm(const fp4_moe_gemm_shape *s, int prefill, const fp4_moe_arch *arch) {
  char why[200];
  if (!prefill || prefill_common(s, arch, why, sizeof why)) return choose_streaming(s, arch);
  const fp4_moe_rules *r = rules_of(arch);
  const int64_t slots = slots_of(s->rows, s->experts);
  fp4_moe_variant v;
  memset(&v, 0, sizeof v);
  if (r->prefill_wgra && arch->wgra && wgra_act_ok(s)) {
    v.kernel = FP4_MOE_KERNEL_PREFILL_WGRA;
    v.tile_m = wgra_width(s->rows, slots, r);
  } else {
    v.kernel = FP4_MOE_KERNEL_PREFILL_MMA;
    v.tile_m = mma_tile_m(s->rows, slots, s->act, arch);
  }
  return v;
}

int fp4_moe_variant_check(const fp4_moe_variant *v, const fp4_moe_gemm_shape *s, const fp4_moe_arch *arch, char *why,
                          size_t why_size) {
  const char *name = fp4_moe_variant_name(v);
  const int rows_aligned = s->act == FP4_CUDA_ACT_FP4 || s->aligned;
  char rule[200];
  switch (v->kernel) {
  case FP4_MOE_KERNEL_FMA: return 0;
  case FP4_MOE_KERNEL_MMA:
  case FP4_MOE_KERNEL_LEAN:
    if (s->k % 128)
      return snprintf(why, why_size, "%s needs K %% 128 == 0 (K = %lld; moe.fma takes K %% 32 == 0)", name, (long long)s->k), -1;
    if (!rows_aligned)
      return snprintf(why, why_size, "%s reads activation rows with 16-byte loads: they must start 16-byte aligned", name), -1;
    if (v->kernel == FP4_MOE_KERNEL_MMA) {
      if (v->warps_per_tile > s->k / 128)
        return snprintf(why, why_size, "%s splits K over %d warps but K = %lld has %lld 128-element slabs", name,
                        v->warps_per_tile, (long long)s->k, (long long)(s->k / 128)), -1;
      return 0;
    }
    if (!act16(s->act))
      return snprintf(why, why_size, "%s takes bf16/f16 activation rows (this GEMM's are %s)", name,
                      s->act == FP4_CUDA_ACT_F32 ? "f32" : "FP4"), -1;
    if (slots_of(s->rows, s->experts) > FP4_MOE_LEAN_MAX_SLOTS)
      return snprintf(why, why_size,
                      "%s takes at most %d active experts (min(E, rows) = %lld; a grid slice each and one for a "
                      "shared expert); moe.mma.w<W> and moe.fma take 65535",
                      name, FP4_MOE_LEAN_MAX_SLOTS, (long long)slots_of(s->rows, s->experts)), -1;
    if (v->ksplit < 4 && s->format != FP4_FORMAT_NVFP4)
      return snprintf(why, why_size, "%s: a K split below 4 warps is compiled for NVFP4 only (MXFP4 spills)", name), -1;
    if (v->fixed_k && !lean_fixed_k_possible(s))
      return snprintf(why, why_size,
                      "%s walks a compile-time K: NVFP4 weights in the 128x4 layout, bf16 rows, N %% 128 == 0 and K "
                      "one of" FP4_MOE_FIXED_K_LIST(K_TEXT) " (here N = %lld, K = %lld); the moe.lean.generic-k forms "
                      "take any K",
                      name, (long long)s->n, (long long)s->k), -1;
    if (v->kparts > 1) {
      if (arch->major < 9)
        return snprintf(why, why_size, "%s splits K over a thread block cluster, which needs SM90 or newer; the device is SM%d%d",
                        name, arch->major, arch->minor), -1;
      if (s->k / 128 < 4 * (int64_t)v->kparts)
        return snprintf(why, why_size, "%s gives each of its %d CTAs' 4 warps a 128-element slab of K: K >= %d (K = %lld)",
                        name, v->kparts, 512 * v->kparts, (long long)s->k), -1;
    }
    return 0;
  case FP4_MOE_KERNEL_PREFILL_MMA:
    if (prefill_common(s, arch, rule, sizeof rule)) return snprintf(why, why_size, "%s: %s", name, rule), -1;
    if (fp4_moe_prefill_mma_smem(v->tile_m, s->act) > arch->smem_optin)
      return snprintf(why, why_size, "%s needs %d bytes of shared memory per block; the device allows %d", name,
                      fp4_moe_prefill_mma_smem(v->tile_m, s->act), arch->smem_optin), -1;
    return 0;
  case FP4_MOE_KERNEL_PREFILL_WGRA:
    if (!arch->wgra)
      return snprintf(why, why_size, "%s runs on SM90 with this binary's sm_90a code only (device is SM%d%d)", name,
                      arch->major, arch->minor), -1;
    if (prefill_common(s, arch, rule, sizeof rule)) return snprintf(why, why_size, "%s: %s", name, rule), -1;
    if (!wgra_act_ok(s)) return snprintf(why, why_size, "%s takes bf16, FP4 or (NVFP4) f16 activations", name), -1;
    return 0;
  default: return snprintf(why, why_size, "unknown MoE kernel %d", v->kernel), -1;
  }
}

/* ---- the layer --------------------------------------------------------------------------------- */

static int act_of(fp4_dtype dtype) {
  return dtype == FP4_DTYPE_BF16 ? FP4_CUDA_ACT_BF16 : dtype == FP4_DTYPE_F16 ? FP4_CUDA_ACT_F16 : FP4_CUDA_ACT_F32;
}

/* The most rows of a set whose gate_up GEMM takes SiLU*up in its epilogue (fp4_moe_silu_fusable). */
enum { kSiluFusedMaxRows = 128 };

/* Two grouped GEMMs over the same weight and activation shapes and types (rows and experts aside). */
static int same_operands(const fp4_moe_gemm_shape *a, const fp4_moe_gemm_shape *b) {
  return a->n == b->n && a->k == b->k && a->act == b->act && a->format == b->format && a->w_layout == b->w_layout &&
         a->aligned == b->aligned;
}

int fp4_moe_plan_layer(const fp4_moe_layer_shape *L, const fp4_moe_variant *forced, int path,
                       const fp4_moe_arch *arch, fp4_moe_layer_plan *plan, char *why, size_t why_size) {
  static const char *const what[FP4_MOE_GEMMS] = {"gate_up", "down", "the shared expert's gate_up",
                                                  "the shared expert's down"};
  memset(plan, 0, sizeof *plan);
  plan->sets = L->shared_inter > 0 ? 2 : 1;
  const int w4a4 = L->mode == FP4_MOE_W4A4;
  for (int set = 0; set < plan->sets; set++) {
    const int64_t rows = set ? L->tokens : L->tokens * L->top_k, experts = set ? 1 : L->experts;
    const int64_t inter = set ? L->shared_inter : L->inter;
    const int prefill =
        forced ? forced->kernel >= FP4_MOE_KERNEL_PREFILL_MMA : fp4_moe_path_prefill(path, rows, experts, arch);
    plan->prefill[set] = prefill;
    fp4_moe_gemm_shape *gu = &plan->gemm[2 * set], *dn = &plan->gemm[2 * set + 1];
    const int format = set ? L->shared_format : L->format, layout = set ? L->shared_layout : L->layout;
    *gu = (fp4_moe_gemm_shape){2 * inter, L->hidden, rows, experts, 0, format, layout, 0};
    *dn = (fp4_moe_gemm_shape){L->hidden, inter, rows, experts, 0, format, layout, L->workspace_aligned};
    if (w4a4) { /* bf16 rows of the quantized values in the workspace, or FP4 rows */
      gu->act = !prefill && fp4_moe_bf16_rows_possible(L->hidden, L->workspace_aligned) ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_FP4;
      gu->aligned = L->workspace_aligned;
      dn->act = !prefill && fp4_moe_bf16_rows_possible(inter, L->workspace_aligned) ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_FP4;
    } else { /* the hidden states as given; SiLU*up in bf16 where the kernels read it (always on prefill) */
      gu->act = act_of(L->hidden_dtype);
      gu->aligned = L->hidden_aligned;
      dn->act = fp4_moe_bf16_rows_possible(inter, L->workspace_aligned) || prefill ? FP4_CUDA_ACT_BF16 : FP4_CUDA_ACT_F32;
    }
    for (int g = 2 * set; g < 2 * set + 2; g++) {
      if (!forced) {
        plan->variant[g] = fp4_moe_choose_gemm(&plan->gemm[g], prefill, arch);
        continue;
      }
      char rule[320];
      if (fp4_moe_variant_check(forced, &plan->gemm[g], arch, rule, sizeof rule)) {
        snprintf(why, why_size, "%s: %s", what[g], rule);
        return -1;
      }
      plan->variant[g] = *forced;
    }
    /* SiLU*up in the gate_up epilogue saves its launch and the f32 gate_up round trip. */
    plan->silu_fused[set] = fp4_moe_silu_fusable(&plan->variant[2 * set], gu, dn, w4a4);
  }
  /* The shared expert as one more slot of the routed launches saves its two GEMM launches: where
   * both sets' GEMMs have the same shapes, the routed ones run the two-tile lean kernel on the
   * compile-time K walk (its fused forms are built for the model sets' hidden sizes and expert widths,
   * 1024 and 2048) with SiLU*up fused in both sets (W4A16 decode, up to 128 rows each) and the shared
   * set is not on the prefill tiles, so its act rows follow the routed ones and its outputs are its
   * own. */
  const fp4_moe_variant *vg = &plan->variant[FP4_MOE_GATE_UP], *vd = &plan->variant[FP4_MOE_DOWN];
  const int64_t down_k = plan->gemm[FP4_MOE_DOWN].k;
  if (plan->sets == 2 && !plan->prefill[1] && plan->silu_fused[0] && vg->fixed_k && vd->kernel == FP4_MOE_KERNEL_LEAN &&
      vd->rows == 32 && vd->fixed_k && extra_down_k(down_k) &&
      fp4_moe_silu_fusable(vg, &plan->gemm[FP4_MOE_SHARED_GATE_UP], &plan->gemm[FP4_MOE_SHARED_DOWN], w4a4) &&
      same_operands(&plan->gemm[FP4_MOE_GATE_UP], &plan->gemm[FP4_MOE_SHARED_GATE_UP]) &&
      same_operands(&plan->gemm[FP4_MOE_DOWN], &plan->gemm[FP4_MOE_SHARED_DOWN]) &&
      !fp4_moe_variant_check(&plan->variant[FP4_MOE_GATE_UP], &plan->gemm[FP4_MOE_SHARED_GATE_UP], arch, NULL, 0) &&
      !fp4_moe_variant_check(&plan->variant[FP4_MOE_DOWN], &plan->gemm[FP4_MOE_SHARED_DOWN], arch, NULL, 0)) {
    plan->shared_fused = 1;
    plan->variant[FP4_MOE_SHARED_GATE_UP] = plan->variant[FP4_MOE_GATE_UP];
    plan->variant[FP4_MOE_SHARED_DOWN] = plan->variant[FP4_MOE_DOWN];
    plan->silu_fused[1] = 1;
  }
  plan->shared_dense = fp4_moe_shared_dense(plan, L, forced, path);
  plan->route_fused = fp4_moe_route_fusable(plan, L, forced, path);
  plan->combine_fused = fp4_moe_combine_fusable(plan, L);
  return 0;
}

int fp4_moe_combine_fusable(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L) {
  const fp4_moe_variant *vd = &plan->variant[FP4_MOE_DOWN];
  return plan->route_fused && L->tokens * L->top_k <= FP4_MOE_COMBINE_FUSED_PAIRS && !plan->prefill[0] &&
         vd->kernel == FP4_MOE_KERNEL_LEAN && vd->rows == 32 && vd->fixed_k && (plan->sets == 1 || plan->shared_fused);
}

int fp4_moe_route_fusable(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L, const fp4_moe_variant *forced,
                          int path) {
  return !forced && path == FP4_MOE_PATH_DEFAULT && L->mode == FP4_MOE_W4A16 && !plan->prefill[0] &&
         plan->silu_fused[0] && plan->variant[FP4_MOE_GATE_UP].kernel == FP4_MOE_KERNEL_LEAN &&
         plan->variant[FP4_MOE_GATE_UP].fixed_k && L->tokens * L->top_k <= FP4_MOE_ROUTE_FUSED_PAIRS;
}

int fp4_moe_shared_dense(const fp4_moe_layer_plan *plan, const fp4_moe_layer_shape *L, const fp4_moe_variant *forced,
                         int path) {
  return plan->sets == 2 && !plan->shared_fused && plan->prefill[1] && !forced && path == FP4_MOE_PATH_DEFAULT &&
         L->mode == FP4_MOE_W4A16;
}

int fp4_moe_silu_fusable(const fp4_moe_variant *v, const fp4_moe_gemm_shape *gate_up, const fp4_moe_gemm_shape *down,
                         int w4a4) {
  /* Up to 128 rows: the Qwen3.5 layer ran 2-3% faster with it at B = 1 (10 rows) and as fast at
   * B = 8 (80), its EP8 decode step 7% and 3% faster; at B = 64 (640 rows) the layer ran 6% slower
   * in both rounds of the first run (bench/results/h200/2026-12-02-moe-decode-fusion/). */
  if (w4a4 || v->kernel != FP4_MOE_KERNEL_LEAN || v->rows != 32 || gate_up->format != FP4_FORMAT_NVFP4 ||
      gate_up->act != FP4_CUDA_ACT_BF16 || down->act != FP4_CUDA_ACT_BF16 || gate_up->n % 32 ||
      gate_up->rows > kSiluFusedMaxRows)
    return 0;
  /* the compile-time K walk: its fused forms are built for the model sets' hidden sizes, and the up
   * rows' scales lie a whole number of 128-row groups on */
  return !v->fixed_k || (silu_k(gate_up->k) && gate_up->n % 256 == 0);
}
