/*
 * The dense GEMM configs of the cuda backend, their rules, their workspace and the default chooser
 * (dense_config.h). Pure host code: every fact about the device comes in fp4_dense_arch.
 */
#include "backends/cuda/config/dense_config.h"

#include <stdio.h>
#include <string.h>

#include "backends/cuda/config/dense_sm120.h" /* every table: each includes the one before it */
#include "backends/cuda/cuda_kernels.h"
#include "fp4kit.h"

const fp4_dense_rules *fp4_dense_rules_for(int major, int minor) {
  if (major >= 12) return &fp4_dense_rules_sm120;
  if (major >= 10) return &fp4_dense_rules_sm100;
  if (major == 9) return &fp4_dense_rules_sm90;
  if (major == 8 && minor >= 6) return &fp4_dense_rules_sm89;
  return &fp4_dense_rules_sm80;
}

/* ---- the table --------------------------------------------------------------------------------- */

#define SMALL(nm, r, w, mm, mb, pro) {nm, FP4_DENSE_SMALL_M, r, w, mm, mb, pro, 0, 0, 0, 0, 0, 0}
#define SMALL_K(nm, w, ks, pro) {nm, FP4_DENSE_SMALL_M, 16, w, 16, 0, pro, 0, 0, 0, 0, 0, ks}
#define MMA(nm, bm, bn, s) {nm, FP4_DENSE_LARGE_M_MMA, 0, 0, 0, 0, 0, bm, bn, s, 0, 0, 0}
#define RD(nm, bm, bn, s, wm, wn, pro) {nm, FP4_DENSE_LARGE_M_RD, 0, 0, 0, 0, pro, bm, bn, s, wm, wn, 0}
#define WGRA(nm, bt, s, pro) {nm, FP4_DENSE_LARGE_M_WGRA, 0, 0, 0, 0, pro, bt, 128, s, 0, 0, 0}

/* Small-M: more rows per CTA let each activation fragment (and, for W4A4, each decoded one) serve
 * several weight tiles, at the price of fewer CTAs; the lean kernel is compiled for 6 or 8 resident
 * 4-warp CTAs per SM (register cap; gemm_small_m_kernels.cuh says which variants fit) instead of the classic
 * kernel's 4 or 2. Order matters: the chooser's fallback takes the first 16-row classic config of a
 * warp count, the tuner lists them in this order. */
static const fp4_dense_config configs[] = {
    SMALL("small-m.w8", 16, 8, 64, 0, 0),
    SMALL("small-m.w4", 16, 4, 64, 0, 0),
    SMALL("small-m.w2", 16, 2, 64, 0, 0),
    SMALL("small-m.w1", 16, 1, 64, 0, 0),
    SMALL("small-m.r32.w8", 32, 8, 32, 0, 0),
    SMALL("small-m.r32.w4", 32, 4, 32, 0, 0),
    SMALL("small-m.r64.w8", 64, 8, 16, 0, 0),
    SMALL("small-m.r64.w4", 64, 4, 16, 0, 0),
    SMALL("small-m.w4.b8", 16, 4, 16, 8, 0),
    SMALL("small-m.w4.b6", 16, 4, 16, 6, 0),
    SMALL("small-m.r32.w4.b6", 32, 4, 8, 6, 0),
    SMALL("small-m.sa.r64.w8", 64, 8, 32, FP4_CUDA_SMALL_M_SHARED_ACT, 0),
    SMALL_K("small-m.w8.k2", 8, 2, 0),
    SMALL_K("small-m.w8.k4", 8, 4, 0),
    SMALL_K("small-m.w4.k2", 4, 2, 0),
    SMALL_K("small-m.w4.k4", 4, 4, 0),
    SMALL("small-m.pro.w8", 16, 8, 64, 0, 1),
    SMALL("small-m.pro.w4", 16, 4, 64, 0, 1),
    SMALL("small-m.pro.w2", 16, 2, 64, 0, 1),
    SMALL("small-m.pro.w1", 16, 1, 64, 0, 1),
    SMALL("small-m.pro.r32.w8", 32, 8, 32, 0, 1),
    SMALL("small-m.pro.r32.w4", 32, 4, 32, 0, 1),
    SMALL("small-m.pro.r64.w8", 64, 8, 16, 0, 1),
    SMALL("small-m.pro.r64.w4", 64, 4, 16, 0, 1),
    SMALL("small-m.pro.w4.b8", 16, 4, 16, 8, 1),
    SMALL("small-m.pro.w4.b6", 16, 4, 16, 6, 1),
    SMALL("small-m.pro.r32.w4.b6", 32, 4, 8, 6, 1),
    SMALL("small-m.pro.sa.r64.w8", 64, 8, 32, FP4_CUDA_SMALL_M_SHARED_ACT, 1),
    SMALL_K("small-m.pro.w8.k2", 8, 2, 1),
    SMALL_K("small-m.pro.w8.k4", 8, 4, 1),
    SMALL_K("small-m.pro.w4.k2", 4, 2, 1),
    SMALL_K("small-m.pro.w4.k4", 4, 4, 1),
    /* mma.sync tiles: the order is the index the heuristic ranks (mma_order) */
    MMA("large-m.128x128.s4", 128, 128, 4),
    MMA("large-m.128x128.s3", 128, 128, 3),
    MMA("large-m.128x256.s3", 128, 256, 3),
    MMA("large-m.64x128.s4", 64, 128, 4),
    /* register-decode tiles: 128 x 128 on 2 x 2 warps (two CTAs per SM where shared memory allows),
     * 128 x 256 on 2 x 4, 256 x 128 on 4 x 2; the prologue ones take W4A4 only */
    RD("large-m.rd.128x128", 128, 128, 4, 2, 2, 0),
    RD("large-m.rd.128x256", 128, 256, 3, 2, 4, 0),
    RD("large-m.rd.256x128", 256, 128, 3, 4, 2, 0),
    RD("large-m.rd.pro.128x128", 128, 128, 4, 2, 2, 1),
    RD("large-m.rd.pro.128x256", 128, 256, 3, 2, 4, 1),
    /* register-A wgmma: 128 weight rows x BT tokens; the 32- and 64-token tiles (batched decode) run
     * two CTAs per SM, the 128- and 256-token tiles one (5 x 38 KiB stages at 256) */
    WGRA("large-m.wgra.128x32", 32, 8, 0),
    WGRA("large-m.wgra.128x64", 64, 6, 0),
    WGRA("large-m.wgra.128x128", 128, 8, 0),
    WGRA("large-m.wgra.128x256", 256, 5, 0),
    WGRA("large-m.wgra.pro.128x32", 32, 8, 1),
    WGRA("large-m.wgra.pro.128x64", 64, 6, 1),
    WGRA("large-m.wgra.pro.128x128", 128, 8, 1),
    WGRA("large-m.wgra.pro.128x256", 256, 5, 1),
};
enum { N_CONFIGS = (int)(sizeof configs / sizeof *configs) };

/* Index of the first config of each family in the table, and their count. */
static int family_first(int family) {
  for (int i = 0; i < N_CONFIGS; i++)
    if (configs[i].family == family) return i;
  return N_CONFIGS;
}
static int family_count(int family) {
  int n = 0;
  for (int i = 0; i < N_CONFIGS; i++) n += configs[i].family == family;
  return n;
}
/* Config i (0-based) of a family. */
static const fp4_dense_config *fam(int family, int i) { return &configs[family_first(family) + i]; }

const fp4_dense_config *fp4_dense_configs_all(int *n) {
  *n = N_CONFIGS;
  return configs;
}

const fp4_dense_config *fp4_dense_config_find(const char *name) {
  for (int i = 0; name && i < N_CONFIGS; i++)
    if (!strcmp(configs[i].name, name)) return &configs[i];
  return NULL;
}

int fp4_dense_family_of(const char *name) {
  if (!strncmp(name, "large-m.wgra.", 13)) return FP4_DENSE_LARGE_M_WGRA;
  if (!strncmp(name, "large-m.rd.", 11)) return FP4_DENSE_LARGE_M_RD;
  if (!strncmp(name, "large-m.", 8)) return FP4_DENSE_LARGE_M_MMA;
  return FP4_DENSE_SMALL_M;
}

/* The index within its family of the config called name, or -1. */
static int family_index(int family, const char *name) {
  const fp4_dense_config *c = fp4_dense_config_find(name);
  return c && c->family == family ? (int)(c - fam(family, 0)) : -1;
}

int fp4_dense_smem(const fp4_dense_config *c, int act) {
  const int fp4 = act == FP4_CUDA_ACT_FP4;
  switch (c->family) {
  case FP4_DENSE_LARGE_M_MMA: return FP4_DENSE_MMA_SMEM(c->bm, c->bn, c->stages, fp4);
  case FP4_DENSE_LARGE_M_RD: return FP4_DENSE_RD_SMEM(c->bm, c->bn, c->stages);
  case FP4_DENSE_LARGE_M_WGRA: return FP4_DENSE_WGRA_SMEM(c->bm, c->stages);
  default: return 0; /* small-M: a few KB, under every device's default limit or opted in at launch */
  }
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The sm_90a families run here: the architecture's table has them and the device runs the code. */
static int sm90a_here(const fp4_dense_arch *a) {
  return fp4_dense_rules_for(a->major, a->minor)->sm90a_families && a->sm90a;
}
static int act16(int act) { return act == FP4_CUDA_ACT_BF16 || act == FP4_CUDA_ACT_F16; }

/* ---- small-M ----------------------------------------------------------------------------------- */

const char *fp4_dense_small_m_rule(const fp4_dense_shape *s, char *why, size_t why_size) {
  if (s->m > FP4_DENSE_SMALL_M_MAX_M)
    snprintf(why, why_size, "M = %lld: the small-M kernels take M <= %d", (long long)s->m, FP4_DENSE_SMALL_M_MAX_M);
  else if (s->k % FP4_DENSE_K_SLAB)
    snprintf(why, why_size, "K = %lld: the small-M kernels need K to be a multiple of %d (they stream K in %d-element slabs)",
             (long long)s->k, FP4_DENSE_K_SLAB, FP4_DENSE_K_SLAB);
  else return NULL;
  return why;
}

/* The cluster K split (small-m.w<W>.k<S>): thread block clusters (SM90+), and every warp of every
 * CTA at least one 128-K slab. 0 with the rule in why. */
static int ksplit_ok(const fp4_dense_config *c, const fp4_dense_shape *s, const fp4_dense_arch *a, char *why,
                     size_t why_size) {
  if (!a || a->major < 9) {
    if (a)
      snprintf(why, why_size, "config %s splits K over a thread block cluster, which needs SM90 or newer; the device is SM%d%d",
               c->name, a->major, a->minor);
    else
      snprintf(why, why_size, "config %s splits K over a thread block cluster, which needs SM90 or newer; the device is unknown",
               c->name);
    return 0;
  }
  if (s->k / FP4_DENSE_K_SLAB < (int64_t)c->ksplit * c->warps) {
    snprintf(why, why_size, "config %s gives each of its %d x %d warps of a row group at least one %d-K slab: K >= %d (K = %lld)",
             c->name, c->ksplit, c->warps, FP4_DENSE_K_SLAB, c->ksplit * c->warps * FP4_DENSE_K_SLAB, (long long)s->k);
    return 0;
  }
  if (!act16(s->act) && !c->prologue) {
    snprintf(why, why_size, "config %s takes bf16/f16 activations; %s activations take another small-m config%s", c->name,
             s->act == FP4_CUDA_ACT_F32 ? "f32" : "FP4",
             s->act == FP4_CUDA_ACT_FP4 ? " (or its small-m.pro. twin, which dequantizes them to bf16 first)" : "");
    return 0;
  }
  return 1;
}

static int small_m_check(const fp4_dense_shape *s, const fp4_dense_arch *a, const char *name, char *why,
                         size_t why_size) {
  const int c = name ? family_index(FP4_DENSE_SMALL_M, name) : 0;
  if (c < 0) {
    char list[320] = "";
    for (int i = 0; i < family_count(FP4_DENSE_SMALL_M); i++)
      if (!fam(FP4_DENSE_SMALL_M, i)->prologue)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", fam(FP4_DENSE_SMALL_M, i)->name);
    snprintf(why, why_size,
             "unknown GEMM config '%s' (%sthe same with small-m.pro.* for W4A4, or a large-m.* name listed by the tuner)",
             name, list);
    return -1;
  }
  char rule[200];
  if (fp4_dense_small_m_rule(s, rule, sizeof rule)) {
    if (name) snprintf(why, why_size, "config %s: %s", name, rule);
    else snprintf(why, why_size, "%s", rule);
    return 0;
  }
  if (!name) return 1;
  const fp4_dense_config *cfg = fam(FP4_DENSE_SMALL_M, c);
  if (s->m > cfg->max_m) {
    snprintf(why, why_size, "config %s takes M <= %d (M = %lld); use a 16- or 32-row classic config", cfg->name,
             cfg->max_m, (long long)s->m);
    return 0;
  }
  if (cfg->prologue && s->act != FP4_CUDA_ACT_FP4) {
    snprintf(why, why_size,
             "config %s is the W4A4 prologue variant (FP4 activations dequantized to bf16 once per GEMM); this W4A16 "
             "problem takes the config of the same name without '.pro'",
             cfg->name);
    return 0;
  }
  if (cfg->min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT && !cfg->prologue && !act16(s->act)) {
    snprintf(why, why_size,
             "config %s stages bf16/f16 activation rows in shared memory; %s activations take another small-m config%s",
             cfg->name, s->act == FP4_CUDA_ACT_F32 ? "f32" : "FP4",
             s->act == FP4_CUDA_ACT_FP4 ? " (or small-m.pro.sa.r64.w8, which dequantizes them to bf16 first)" : "");
    return 0;
  }
  if (cfg->ksplit && !ksplit_ok(cfg, s, a, why, why_size)) return 0;
  return 1;
}

/* Warps of the 16-row classic default: enough warps per SM to keep HBM busy, but at least two
 * 128-K slabs per warp. */
static int default_warps(int64_t k) {
  const int64_t slabs = k / FP4_DENSE_K_SLAB;
  int w = 8;
  while (w > 1 && slabs < 2 * w) w /= 2;
  return w;
}

/* Default W4A16 small-M config, from the H200 timings of every config on the model shapes
 * (bench/results/h200/2026-11-30-small-m-decode/): up to 32 tokens, 32-row CTAs win wherever they
 * still give every SM a CTA (an activation fragment serves two weight tiles), with 4 warps when
 * there are two CTAs per SM and 8 when there is one; below one CTA per SM, and above 32 tokens,
 * 16-row CTAs. Each warp keeps at least two 128-K slabs (r32.w4: K >= 1024, r32.w8: K >= 2048). */
static const fp4_dense_config *small_m_w4a16_default(const fp4_dense_rules *r, int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t slabs = k / FP4_DENSE_K_SLAB, ctas32 = cdiv(n, 32), ctas16 = cdiv(n, 16);
  const int64_t lean_ctas = (int64_t)r->lean_ctas_per_sm * sms;
  if (m <= r->lean_max_m && ctas32 >= lean_ctas && slabs >= 8) return fp4_dense_config_find("small-m.r32.w4.b6");
  if (m <= r->lean_max_m && ctas16 >= lean_ctas && slabs >= 8) return fp4_dense_config_find("small-m.w4.b6");
  if (m <= 32 && ctas32 >= 2 * (int64_t)sms && slabs >= 8) return fp4_dense_config_find("small-m.r32.w4");
  if (m <= 32 && ctas32 >= sms && slabs >= 16) return fp4_dense_config_find("small-m.r32.w8");
  const int warps = default_warps(k);
  for (int i = 0; i < family_count(FP4_DENSE_SMALL_M); i++) {
    const fp4_dense_config *c = fam(FP4_DENSE_SMALL_M, i);
    if (c->rows == 16 && c->warps == warps && !c->min_blocks && !c->prologue && !c->ksplit) return c;
  }
  return fam(FP4_DENSE_SMALL_M, 0);
}

/* The cluster K split for bf16/f16 activations: small-m.w4.k4 where the 16-row CTAs fill at most
 * three quarters of the SMs, K leaves each warp two slabs (K >= 4096) and the weight has at least
 * 2^ksplit_min_log2_weights elements. On the H200 (bench/results/h200/2026-12-02-cluster-k-split/)
 * it was the fastest config of the sweep on 1280 x 8192 at M = 1, 8 and 16 (10.0 against 11.1 us
 * for small-m.w8 at M = 1), and inside the decode step it took the 768 x 4096 and 1280 x 8192
 * projections from 135.0 to 120.8 and from 620 to 537 us per step; on 256 x 4096 (16 CTAs) it was
 * slower than small-m.w8 (8.0 against 6.9 us) and on 2048 x 4096 (128 CTAs) no split won. */
static const fp4_dense_config *ksplit_default(const fp4_dense_rules *r, const fp4_dense_shape *s, int sms) {
  if (!r->ksplit_max_m || s->m > r->ksplit_max_m || !act16(s->act) || 4 * cdiv(s->n, 16) > 3 * (int64_t)sms ||
      s->k < 4096 || s->n * s->k < ((int64_t)1 << r->ksplit_min_log2_weights))
    return NULL;
  return fp4_dense_config_find("small-m.w4.k4");
}

/* Short K (4 to short_k_r32_max_slabs slabs) with one to two 32-row CTAs per SM: small-m.r32.w8,
 * although its warps keep fewer than two slabs each. Inside the decode step (graph with PDL, the
 * per-type graphs of bench/results/h200/2026-12-03-step-config-sweep/) it was the fastest or within
 * 4% of the fastest config on 4096 x 512, 8192 x 1024 and 4096 x 1792 at batch 1 and 8, where the
 * warp-halving rule below took 1.10-1.24x its time (4096 x 1792 at batch 1: 4.74 against 3.83 us
 * per call). */
static int short_k_r32(const fp4_dense_rules *r, const fp4_dense_shape *s, int sms) {
  const int64_t slabs = s->k / FP4_DENSE_K_SLAB, ctas32 = cdiv(s->n, 32);
  return r->short_k_r32_max_slabs && s->m <= 16 && act16(s->act) && slabs >= 4 && slabs <= r->short_k_r32_max_slabs &&
         16 * ctas32 >= 15 * (int64_t)sms && ctas32 <= 2 * (int64_t)sms;
}

/* W4A4 runs the W4A16 choice through the bf16 prologue (its ".pro" twin) once the weight is large
 * enough to hide the extra decode launch; bf16/f16 activations of sa_min_m .. sa_max_m tokens take
 * the shared-activation kernel where it gets 1.2 CTAs per SM (dense_sm80.h). */
static const fp4_dense_config *small_m_default(const fp4_dense_rules *r, const fp4_dense_shape *s, int sms) {
  if (s->m >= r->sa_min_m && s->m <= r->sa_max_m && act16(s->act) && cdiv(s->n, 64) * 5 >= (int64_t)sms * 6 &&
      s->k >= 8 * FP4_DENSE_K_SLAB)
    return fp4_dense_config_find("small-m.sa.r64.w8");
  const fp4_dense_config *ks = ksplit_default(r, s, sms);
  if (ks) return ks;
  if (short_k_r32(r, s, sms)) return fp4_dense_config_find("small-m.r32.w8");
  const fp4_dense_config *c = small_m_w4a16_default(r, s->m, s->n, s->k, sms);
  if (s->act != FP4_CUDA_ACT_FP4 || s->n * s->k < ((int64_t)1 << r->prologue_min_log2_weights)) return c;
  static const char in_loop[] = "small-m.", pro[] = "small-m.pro."; /* twin: same suffix */
  for (int i = 0; i < family_count(FP4_DENSE_SMALL_M); i++) {
    const fp4_dense_config *t = fam(FP4_DENSE_SMALL_M, i);
    if (t->prologue && !strcmp(t->name + strlen(pro), c->name + strlen(in_loop))) return t;
  }
  return c;
}

/* ---- large-M: the operand rules of every family, then each family's ------------------------------ */

static int mma_check(const fp4_dense_shape *s, const fp4_dense_arch *a, const char *name, char *why, size_t why_size) {
  if (s->act == FP4_CUDA_ACT_F32) {
    snprintf(why, why_size,
             "the large-M kernels take bf16 or f16 activations (or FP4 for W4A4), not f32: convert the activations "
             "to bf16");
    return 0;
  }
  if (s->format == FP4_FORMAT_MXFP4 && s->act == FP4_CUDA_ACT_F16) {
    snprintf(why, why_size,
             "large-M MXFP4 needs bf16 activations: the weights are dequantized to the activations' type and "
             "2^(e-127) * e2m1 does not fit f16");
    return 0;
  }
  if (s->k % 32) {
    snprintf(why, why_size, "K = %lld: the large-M kernels need K to be a multiple of 32 (16-byte copies of FP4 rows)",
             (long long)s->k);
    return 0;
  }
  const int n = family_count(FP4_DENSE_LARGE_M_MMA);
  if (name) {
    const int c = family_index(FP4_DENSE_LARGE_M_MMA, name);
    if (c < 0) {
      /* every large-m. name that is not rd. or wgra. lands here: point at those families too */
      snprintf(why, why_size,
               "unknown large-M config '%s' (%s, %s, %s, %s; or a large-m.rd.* / large-m.wgra.* name, as the tuner "
               "lists them)",
               name, fam(FP4_DENSE_LARGE_M_MMA, 0)->name, fam(FP4_DENSE_LARGE_M_MMA, 1)->name,
               fam(FP4_DENSE_LARGE_M_MMA, 2)->name, fam(FP4_DENSE_LARGE_M_MMA, 3)->name);
      return -1;
    }
    const int smem = fp4_dense_smem(fam(FP4_DENSE_LARGE_M_MMA, c), s->act);
    if (smem > a->smem_optin) {
      snprintf(why, why_size, "config %s needs %d bytes of shared memory per block; the device allows %d", name, smem,
               a->smem_optin);
      return 0;
    }
    return 1;
  }
  for (int c = 0; c < n; c++)
    if (fp4_dense_smem(fam(FP4_DENSE_LARGE_M_MMA, c), s->act) <= a->smem_optin) return 1;
  snprintf(why, why_size, "no large-M tile fits the %d bytes of shared memory per block of the device", a->smem_optin);
  return 0;
}

/* The mma.sync tiles that fit, heuristic best first (not tuned on hardware, docs/cuda-large-m.md):
 * the biggest tile that still gives every SM a CTA, then the others by decreasing tile area. */
static int mma_configs(const fp4_dense_shape *s, const fp4_dense_arch *a, const char **names, int max) {
  const int optin = a->smem_optin, sms = a->sms;
  const int64_t ctas128 = cdiv(s->m, 128) * cdiv(s->n, 128), ctas256 = cdiv(s->m, 128) * cdiv(s->n, 256);
#define MMA_SMEM(i) fp4_dense_smem(fam(FP4_DENSE_LARGE_M_MMA, i), s->act)
  int first;
  if (ctas256 >= 2 * sms && optin >= MMA_SMEM(2)) first = 2;
  else if (ctas128 >= sms) first = optin >= MMA_SMEM(0) ? 0 : 1;
  else first = 3;
  static const int rank[] = {2, 0, 1, 3};
  int order[4], count = 0, out = 0;
  order[count++] = first;
  for (int i = 0; i < 4; i++)
    if (rank[i] != first) order[count++] = rank[i];
  for (int i = 0; i < count && out < max; i++)
    if (MMA_SMEM(order[i]) <= optin) names[out++] = fam(FP4_DENSE_LARGE_M_MMA, order[i])->name;
#undef MMA_SMEM
  return out;
}

/* NULL when config c of a prologue-split family takes act, else the rule: a prologue config takes
 * W4A4 only, the others W4A16 only; the message names the config of the same tile on the other side
 * (the family's first one of that side where the tile has no twin). */
static const char *prologue_act_rule(int family, int c, int act, char *why, size_t why_size) {
  const fp4_dense_config *cfg = fam(family, c);
  if (cfg->prologue == (act == FP4_CUDA_ACT_FP4)) return NULL;
  const fp4_dense_config *twin = NULL;
  for (int i = 0; i < family_count(family); i++) {
    const fp4_dense_config *t = fam(family, i);
    if (t->prologue == cfg->prologue) continue;
    if (!twin || (t->bm == cfg->bm && t->bn == cfg->bn && (twin->bm != cfg->bm || twin->bn != cfg->bn))) twin = t;
  }
  if (cfg->prologue)
    snprintf(why, why_size,
             "config %s is the W4A4 prologue variant (FP4 activations dequantized to bf16 once per GEMM); W4A16 runs "
             "on %s",
             cfg->name, twin->name);
  else
    snprintf(why, why_size, "config %s takes W4A16; W4A4 runs on %s (activations dequantized to bf16 once per GEMM)",
             cfg->name, twin->name);
  return why;
}

/* The shared checks of the register-decode and register-A families: the mma.sync operand rules,
 * the config's activation rule, the sm_90a code (needs_sm90a), then shared memory. */
static int split_family_check(int family, const char *label, int needs_sm90a, const fp4_dense_shape *s,
                              const fp4_dense_arch *a, const char *name, char *why, size_t why_size) {
  const int n = family_count(family);
  const int c = name ? family_index(family, name) : -1;
  if (name && c < 0) {
    int len = snprintf(why, why_size, "unknown %s large-M config '%s' (", label, name);
    for (int i = 0; i < n && len > 0 && (size_t)len < why_size; i++)
      len += snprintf(why + len, why_size - (size_t)len, "%s%s", i ? ", " : "", fam(family, i)->name);
    if (len > 0 && (size_t)len < why_size) snprintf(why + len, why_size - (size_t)len, ")");
    return -1;
  }
  if (mma_check(s, a, NULL, why, why_size) != 1) return 0;
  if (name && prologue_act_rule(family, c, s->act, why, why_size)) return 0;
  if (needs_sm90a && !sm90a_here(a)) {
    if (a->major != 9 || a->minor != 0)
      snprintf(why, why_size, "the wgra configs run on SM90 only (sm_90a code); the device is SM%d%d", a->major,
               a->minor);
    else snprintf(why, why_size, "%s", a->sm90a_why);
    return 0;
  }
  char rule[320];
  for (int i = 0; i < n; i++) {
    if ((name && i != c) || prologue_act_rule(family, i, s->act, rule, sizeof rule)) continue;
    const int smem = fp4_dense_smem(fam(family, i), s->act);
    if (smem <= a->smem_optin) return 1;
    if (name) {
      snprintf(why, why_size, "config %s needs %d bytes of shared memory per block; the device allows %d", name, smem,
               a->smem_optin);
      return 0;
    }
  }
  snprintf(why, why_size, "no %s large-M tile fits the %d bytes of shared memory per block of the device", label,
           a->smem_optin);
  return 0;
}

/* Register-decode tiles (not yet measured against each other): the 8-warp tiles first when they
 * still give every SM a CTA, the wider one along the longer side, else the 4-warp 128 x 128 tile
 * first; W4A4: the prologue configs, 128 x 256 first on the same condition. */
static int rd_configs(const fp4_dense_shape *s, const fp4_dense_arch *a, const char **names, int max) {
  char why[320];
  if (max < 1 || split_family_check(FP4_DENSE_LARGE_M_RD, "register-decode", 0, s, a, NULL, why, sizeof why) != 1)
    return 0;
  const int64_t tm = cdiv(s->m, 128), tn = cdiv(s->n, 128);
  const int big = tm * ((tn + 1) / 2) >= a->sms;
  const int wide = s->n >= s->m ? 1 : 2;
  int order[5], n = 0, out = 0;
  if (s->act == FP4_CUDA_ACT_FP4) {
    order[n++] = big ? 4 : 3, order[n++] = big ? 3 : 4;
  } else if (big) {
    order[n++] = wide, order[n++] = 3 - wide, order[n++] = 0;
  } else {
    order[n++] = 0, order[n++] = 1, order[n++] = 2;
  }
  for (int i = 0; i < n && out < max; i++)
    if (!prologue_act_rule(FP4_DENSE_LARGE_M_RD, order[i], s->act, why, sizeof why) &&
        fp4_dense_smem(fam(FP4_DENSE_LARGE_M_RD, order[i]), s->act) <= a->smem_optin)
      names[out++] = fam(FP4_DENSE_LARGE_M_RD, order[i])->name;
  return out;
}

/* Time of one register-A CTA's 64-K tile, relative, with its SM holding as many such CTAs as fit
 * (two of the 32- and 64-token tiles, one of the others), fitted on the H200 (57344 x 8192 at M =
 * 32, 64, 128 and 256, one tile per CTA's M range; bench/results/h200/2026-12-02-batched-decode/):
 * the narrow tiles are bound by their weight decode, which does not shrink with the tokens, so two
 * of them per SM take longer per tile than one 128-token tile. */
static double wgra_cta_cost(int bt) { return bt <= 32 ? 0.9 : bt <= 64 ? 1.1 : bt <= 128 ? 0.73 : 1.0; }

typedef struct wgra_grid {
  int64_t ctas; /* CTAs of the launch */
  int split;    /* CTAs per output tile (1: one tile per CTA), 0: stream-K over the CTA slots */
} wgra_grid;
static wgra_grid wgra_grid_of(int64_t tiles, int64_t kall, int sms, int bt);

/* Estimated time of the register-A tile c on s, in K-tile times of one CTA of c: the waves of the
 * grid over the SMs' CTA slots times the K tiles each CTA walks plus its fixed cost (4 for the
 * pipeline fill and the epilogue, 16 for a split's partial tile: wgra_grid_of), or with stream-K the
 * K tiles of one CTA + 30; times the CTA cost. A two-CTA tile whose grid leaves each CTA an SM of its
 * own decodes about 1.7x as fast (0.6 of the cost: the small weights of the same results at M =
 * 48-256). The stream-K constant: with every SM busy a CTA's K tile takes longer than in a sparse
 * last wave, so the 128-token tile's stream-K grids took what 30 more K tiles per CTA would
 * (17408 x 4096 at M = 128: 59.8 us against 82.6 for two waves; 6144 x 4096 at M = 64: 31.2 us,
 * behind the 64-token tile's split at 25.3; bench/results/h200/2026-12-03-wgra-stream-k/). */
static double wgra_estimate(const fp4_dense_shape *s, const fp4_dense_config *c, int sms) {
  const int64_t tiles = cdiv(s->m, c->bm) * cdiv(s->n, 128), kall = cdiv(s->k, 64);
  const int64_t slots = (int64_t)sms * FP4_DENSE_WGRA_CTAS_PER_SM(c->bm);
  const wgra_grid g = wgra_grid_of(tiles, kall, sms, c->bm);
  if (!g.split) return ((double)cdiv(tiles * kall, g.ctas) + 30.0) * wgra_cta_cost(c->bm);
  const double alone = FP4_DENSE_WGRA_CTAS_PER_SM(c->bm) == 2 && g.ctas <= sms ? 0.6 : 1.0;
  return (double)cdiv(g.ctas, slots) * ((double)kall / g.split + (g.split > 1 ? 16.0 : 4.0)) *
         wgra_cta_cost(c->bm) * alone;
}

/* Within the family, the tiles that take s's activations and fit (W4A4: the prologue configs), by
 * estimated time (wgra_estimate; the wider tile first on a tie). Above 256 tokens on grids that fill
 * the SMs this puts the 256-token tile first except where M lies just above a multiple of 256 and
 * the 128-token tile wastes fewer rows: on the 22 such points of
 * bench/results/h200/2026-12-02-above-256-tokens/ (M = 384-2048) it picks the fastest register-A
 * tile at each, the 128-token one at M = 384 on 10240 x 8192, 17408 x 4096 and 20480 x 4096
 * (1.07-1.44x faster than the 256-token tile, which a fixed rank put first there before). */
static int wgra_configs(const fp4_dense_shape *s, const fp4_dense_arch *a, const char **names, int max) {
  char why[320];
  if (max < 1 || split_family_check(FP4_DENSE_LARGE_M_WGRA, "register-A wgmma", 1, s, a, NULL, why, sizeof why) != 1)
    return 0;
  const fp4_dense_config *ok[8];
  double t[8];
  int n = 0;
  for (int i = 0; i < family_count(FP4_DENSE_LARGE_M_WGRA) && n < 8; i++) {
    const fp4_dense_config *c = fam(FP4_DENSE_LARGE_M_WGRA, i);
    if (prologue_act_rule(FP4_DENSE_LARGE_M_WGRA, i, s->act, why, sizeof why) || fp4_dense_smem(c, s->act) > a->smem_optin)
      continue;
    const double e = wgra_estimate(s, c, a->sms);
    int j = n++;
    for (; j > 0 && (t[j - 1] > e || (t[j - 1] == e && ok[j - 1]->bm < c->bm)); j--) ok[j] = ok[j - 1], t[j] = t[j - 1];
    ok[j] = c, t[j] = e;
  }
  int out = 0;
  for (int i = 0; i < n && out < max; i++) names[out++] = ok[i]->name;
  return out;
}

/* The register-A tiles lead the batched-decode range of the architecture's table (wgra_from_m ..
 * wgra_lead_to_m tokens, dense_sm90.h) where they run; up to wgra_narrow_to_m tokens only from
 * wgra_narrow_min_n weight rows or on 2^wgra_narrow_min_log2_weights weights. */
static int wgra_batch_leads(const fp4_dense_rules *r, const fp4_dense_shape *s, const fp4_dense_arch *a) {
  const char *first[1];
  if (!r->wgra_from_m || s->m < r->wgra_from_m || s->m > r->wgra_lead_to_m) return 0;
  if (s->m <= r->wgra_narrow_to_m && s->n < r->wgra_narrow_min_n &&
      s->n * s->k < ((int64_t)1 << r->wgra_narrow_min_log2_weights))
    return 0;
  return wgra_configs(s, a, first, 1) == 1;
}

/* The large-M configs that can run s on arch, the default first (0 when no large-M kernel takes
 * it): the mma.sync tiles (heuristic order), the register-decode tiles, and the register-A wgmma
 * tiles, which lead over the batched-decode range and on every grid above it (dense_sm90.h). */
static int large_m_candidates(const fp4_dense_shape *s, const fp4_dense_arch *a, const char *large[16]) {
  char why[320];
  if (mma_check(s, a, NULL, why, sizeof why) != 1) return 0;
  const char *others[16], *wgra[8];
  int n = mma_configs(s, a, others, 8);
  if (n < 1) return 0;
  n += rd_configs(s, a, others + n, 16 - n);
  const int nw = wgra_configs(s, a, wgra, 8);
  const fp4_dense_rules *r = fp4_dense_rules_for(a->major, a->minor);
  const int lead = cdiv(s->m, 256) * cdiv(s->n, 128) >= a->sms || wgra_batch_leads(r, s, a) ||
                   (r->wgra_from_m && s->m > r->wgra_lead_to_m);
  int count = 0;
  for (int i = 0; lead && i < nw; i++) large[count++] = wgra[i];
  for (int i = 0; i < n && count < 16; i++) large[count++] = others[i];
  for (int i = 0; !lead && i < nw && count < 16; i++) large[count++] = wgra[i];
  return count;
}

/* ---- the public face: check, default, candidates, workspace ------------------------------------ */

int fp4_dense_check(int family, const fp4_dense_shape *s, const fp4_dense_arch *a, const char *name, char *why,
                    size_t why_size) {
  switch (family) {
  case FP4_DENSE_SMALL_M: return small_m_check(s, a, name, why, why_size);
  case FP4_DENSE_LARGE_M_MMA: return mma_check(s, a, name, why, why_size);
  case FP4_DENSE_LARGE_M_RD: return split_family_check(family, "register-decode", 0, s, a, name, why, why_size);
  case FP4_DENSE_LARGE_M_WGRA: return split_family_check(family, "register-A wgmma", 1, s, a, name, why, why_size);
  default: snprintf(why, why_size, "no dense config family %d", family); return -1;
  }
}

const char *fp4_dense_default(const fp4_dense_shape *s, const fp4_dense_arch *a) {
  const fp4_dense_rules *r = fp4_dense_rules_for(a->major, a->minor);
  char why[320];
  if (fp4_dense_small_m_rule(s, why, sizeof why) || s->m > r->large_m_from || wgra_batch_leads(r, s, a)) {
    const char *large[16];
    /* when the large-M kernels refuse the problem, their first tile's check names the rule at run time */
    if (large_m_candidates(s, a, large) < 1 && mma_configs(s, a, large, 8) < 1) return NULL;
    return large[0];
  }
  return small_m_default(r, s, a->sms)->name;
}

int fp4_dense_candidates(const fp4_dense_shape *s, const fp4_dense_arch *a, const char **names, int max) {
  const fp4_dense_rules *r = fp4_dense_rules_for(a ? a->major : 8, a ? a->minor : 0);
  char why[320];
  const char *large[16];
  int nlarge = 0, count = 0;
  const int small_ok = !fp4_dense_small_m_rule(s, why, sizeof why);
  if (a) nlarge = large_m_candidates(s, a, large);
  const int large_first = !small_ok || s->m > r->large_m_from || (a && wgra_batch_leads(r, s, a));
  for (int i = 0; large_first && i < nlarge && count < max; i++) names[count++] = large[i];
  if (small_ok) {
    const fp4_dense_config *first = small_m_default(r, s, a ? a->sms : 1);
    if (count < max) names[count++] = first->name;
    for (int i = 0; i < family_count(FP4_DENSE_SMALL_M) && count < max; i++) {
      const fp4_dense_config *c = fam(FP4_DENSE_SMALL_M, i);
      if (c != first && s->m <= c->max_m && (!c->prologue || s->act == FP4_CUDA_ACT_FP4) &&
          !(c->min_blocks == FP4_CUDA_SMALL_M_SHARED_ACT && !c->prologue && !act16(s->act)) &&
          (!c->ksplit || ksplit_ok(c, s, a, why, sizeof why)))
        names[count++] = c->name;
    }
  }
  for (int i = 0; !large_first && i < nlarge && count < max; i++) names[count++] = large[i];
  return count;
}

/* CTAs per output tile for a grid of `tiles` output tiles walking `kall` K tiles each on `slots`
 * resident CTAs:
 * the split that minimizes the estimated time, waves x (K tiles per CTA + a fixed cost per CTA in
 * K-tile times: 4 for the pipeline fill and the epilogue, 16 with a split, whose partial tile makes
 * a round trip through memory and whose counters are cleared per call), taking a split (the best
 * one) only for a 20% gain over none, keeping at least 8 K tiles per CTA. Large grids keep 1.
 * The constants come from the H200 (11 dense shapes at M = 256 and 512, bench/results/h200/
 * 2026-11-30-large-m-prefill/wgra-128x256.json and wgra-128x256-split-k.json):
 * with a cost of 8 and a 10% margin three points came out 6-31% slower than unsplit
 * (4096 x 1024, 10240 x 8192 and 20480 x 4096 at M = 256); with these, the choice is the faster of
 * the two measured on 20 of the 22 points and 6-7% behind on two. */
static int wgra_split(int64_t tiles, int64_t kall, int64_t slots) {
#define WAVES(ctas) ((double)(((ctas) + slots - 1) / slots))
  int best = 1;
  double best_t = 0.0;
  for (int s = 2; s <= 8 && kall / s >= 8; s++) {
    const double t = WAVES(tiles * s) * ((double)kall / s + 16.0);
    if (best == 1 || t < best_t) best = s, best_t = t;
  }
  const int split = best > 1 && best_t < 0.8 * WAVES(tiles) * ((double)kall + 4.0) ? best : 1;
#undef WAVES
  return split;
}

/* The grid: the split of wgra_split, or stream-K over the CTA slots where that grid's last wave
 * leaves more than 12% of the slots idle (the 32-, 64- and 128-token tiles; the 256-token tile was
 * slower with stream-K at every measured point, its partially filled last wave running faster per
 * CTA). On the H200 (bench/results/h200/2026-12-03-wgra-stream-k/) stream-K won at slot use 0.52-0.85
 * and lost at 0.91 and more. */
static wgra_grid wgra_grid_of(int64_t tiles, int64_t kall, int sms, int bt) {
  const int64_t slots = (int64_t)(sms < 1 ? 1 : sms) * FP4_DENSE_WGRA_CTAS_PER_SM(bt);
  const int split = wgra_split(tiles, kall, slots);
  const int64_t ctas = tiles * split, iters = tiles * kall;
  const double use = (double)ctas / (double)(((ctas + slots - 1) / slots) * slots);
  if (iters > slots && bt <= 128 && use < 0.88) return (wgra_grid){slots, 0};
  return (wgra_grid){ctas, split};
}

int64_t fp4_dense_wgra_ctas(int64_t tiles, int64_t kall, int sms, int bt) { return wgra_grid_of(tiles, kall, sms, bt).ctas; }

size_t fp4_dense_wgra_sched_bytes(int64_t m, int64_t n, int64_t k, int bt, int sms, size_t *part_bytes) {
  const int64_t tiles = cdiv(m, bt) * cdiv(n, 128);
  const wgra_grid g = wgra_grid_of(tiles, cdiv(k, 64), sms, bt);
  /* a partial tile per CTA of a split, two per stream-K CTA (the end of one tile, the start of another) */
  const int64_t ctas = g.ctas, slots = g.split ? ctas : 2 * ctas;
  const size_t part = ctas != tiles ? (size_t)slots * (size_t)bt * 128 * sizeof(float) : 0;
  if (part_bytes) *part_bytes = part;
  return ctas != tiles ? part + (size_t)tiles * sizeof(unsigned) : 0;
}

size_t fp4_dense_workspace(const fp4_dense_shape *s, const fp4_dense_arch *a, const fp4_dense_config *c) {
  if (!c) return 0;
  const size_t bf16 = c->prologue ? fp4_cuda_bf16_a_bytes(s->m, s->k) : 0;
  if (c->family == FP4_DENSE_LARGE_M_WGRA) return bf16 + fp4_dense_wgra_sched_bytes(s->m, s->n, s->k, c->bm, a->sms, NULL);
  return bf16;
}
