/* Public entry points that run on a backend: validate, build the problem, pick the backend, run.
 * Sections: the heuristic ranking auto falls back to without a tuning cache, the per-context memory
 * of decisions that spares repeated calls the choice, then the problems themselves. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "dispatch/dispatch.h"
#include "format/matrix_check.h"
#include "tune/tuning.h"

/* ---- Heuristic ranking ----------------------------------------------------------------------------
 * The heuristic ranking used by auto selection when no tuning cache answers. The regimes encode what
 * each GPU generation can do (arch.c); each backend's table ranks it in every regime. Where the
 * tensor cores have a block-scaled FP4 MMA (SM100, SM120) the native paths come first; below SM100
 * the own dequantizing kernels win at small M (memory-bound: they read 4-bit weights) and cuBLAS
 * BF16 on dequantized operands wins at large M (compute-bound: the O(N*K) dequantization is
 * amortised over M rows of BF16 tensor-core work). */

/* From this M on, a BF16 GEMM on dequantized weights (cublas-dequant) beats the own kernels on
 * SM80-SM89, measured on the H200 with the mma.sync tiles those GPUs run
 * (bench/results/h200/2026-11-30-cublas-dequant/, crossover-m16-128.csv and crossover-m64-256.csv:
 * up to M = 32 the small-M kernels win every shape, at M = 64 cublas-dequant wins every weight of
 * at least 2^25 elements, above 64 the mma.sync tiles lose everywhere). */
enum { DEQUANT_WINS_M = 64, NATIVE_SMALL_M = 64 };

/* SM90, where the cuda backend runs the register-A wgmma tiles at M = 17-256 and beyond: the last M
 * the own kernels keep, by the weight's elements (bench/results/h200/2026-12-02-current/, the
 * crossover table of its README: the cuda backend's default against cublas-dequant, 13 dense weights,
 * M = 32-8192; above 256 tokens bench/results/h200/2026-12-02-above-256-tokens/, 11 weights, M =
 * 384-2048, after the register-A tiles took over there):
 *   - under 2^25 elements: to M = 63; at M = 64 cublas-dequant wins all four such weights (by
 *     1.05-1.12x), at M = 128-256 five of eight points;
 *   - 2^25 to 2^27: to M = 256 (cuda 1.01-2.63x at M = 64-256 but 17408 x 4096 at M = 256, 0.87x);
 *     above, cublas-dequant wins 16 of the 20 W4A16 points at M = 384-2048 and ties three
 *     (0.98-1.01x); 8192 x 8192 at M = 512 (cuda 1.22x) is the exception;
 *   - 2^27 and more (8192 x 28672 and the three largest, 235M-1G elements): to M = 1024 (cuda
 *     1.32-1.35x at M = 512, 0.99-1.03x at M = 384 and 1024 in W4A16; W4A4 1.24-1.28x and
 *     0.97-1.04x); from M = 2048 cublas-dequant wins (1.06-1.15x; cuda keeps W4A4 on 8192 x 28672,
 *     1.05x);
 *   - weights not known (0): to M = 256.
 * This assumes the build has sm_90a code (the default architectures do); without it the cuda
 * backend runs the mma.sync tiles there, which lose to cublas-dequant from M = 64 as on SM80-SM89
 * (`fp4kit probe` says which code the build has; `fp4kit tune` corrects the choice per shape). */
static int64_t sm90_own_kernels_to_m(int64_t weights) {
  if (weights <= 0) return 256;
  if (weights < (int64_t)1 << 25) return DEQUANT_WINS_M - 1;
  return weights < (int64_t)1 << 27 ? 256 : 1024;
}

fp4_regime fp4_heuristic_regime(int cc, fp4_memory memory, fp4_op op, int64_t m, int64_t weights) {
  if (memory == FP4_MEMORY_HOST) return FP4_REGIME_HOST;
  if (op == FP4_OP_QUANTIZE) return FP4_REGIME_QUANTIZE; /* only own kernels quantize; order is moot */
  /* SM120 mma.sync kernels hold up to larger M */
  if (cc >= 120) return m <= 2 * NATIVE_SMALL_M ? FP4_REGIME_SM120_SMALL_M : FP4_REGIME_SM120_LARGE_M;
  if (cc >= 100) return m <= NATIVE_SMALL_M ? FP4_REGIME_SM100_SMALL_M : FP4_REGIME_SM100_LARGE_M;
  if (cc >= 90)
    return m <= sm90_own_kernels_to_m(weights) ? FP4_REGIME_SM80_SMALL_M : FP4_REGIME_SM80_LARGE_M;
  return m < DEQUANT_WINS_M ? FP4_REGIME_SM80_SMALL_M : FP4_REGIME_SM80_LARGE_M;
}

int fp4_heuristic_rank(const fp4_backend *b, int cc, fp4_memory memory, fp4_op op, int64_t m, int64_t weights) {
  const fp4_backend_ranks *r = b ? b->ranks : NULL;
  if (!r) return FP4_RANK_UNKNOWN;
  if (memory != FP4_MEMORY_HOST && r->device_ops && !(r->device_ops & FP4_OP_BIT(op))) return r->other_device_ops;
  return r->in[fp4_heuristic_regime(cc, memory, op, m, weights)];
}

int fp4_heuristic_host_backend(const fp4_backend *b) { return b && b->host; }

/* ---- Selection cache ------------------------------------------------------------------------------
 * Per-context memory of dispatch decisions (the section of the same name in dispatch.h says what a
 * key holds and why). */

enum { TABLE_SLOTS = 512 }; /* direct-mapped: a decode step of a large model has a few hundred shapes */

typedef struct selection_slot {
  int used;
  fp4_selection_key key;
  const fp4_backend *backend;
  char config[64];
} selection_slot;

struct fp4_selection_table {
  selection_slot slots[TABLE_SLOTS];
};

/* 0..15: the low address bits that decide alignment rules (16-byte loads, 2-byte scale reads). */
static uint64_t align_class(const void *p) { return (uint64_t)((uintptr_t)p & 15u); }

static void put_qmatrix(uint64_t *w, int *n, const fp4_qmatrix *q) {
  w[(*n)++] = q ? (uint64_t)q->rows : UINT64_MAX;
  w[(*n)++] = q ? (uint64_t)q->cols : 0;
  w[(*n)++] = q ? ((uint64_t)q->format | (uint64_t)q->layout << 8 | (uint64_t)q->memory << 16 |
                   align_class(q->data) << 24 | align_class(q->scales) << 32)
                : 0;
}

static void put_matrix(uint64_t *w, int *n, const fp4_matrix *m) {
  w[(*n)++] = m ? (uint64_t)m->rows : UINT64_MAX;
  w[(*n)++] = m ? (uint64_t)m->cols : 0;
  w[(*n)++] = m ? ((uint64_t)m->ld | (uint64_t)m->dtype << 40 | (uint64_t)m->memory << 48 | align_class(m->data) << 56)
                : 0;
}

int fp4_selection_key_of(const fp4_problem *p, int backend_index, const char *config, uint64_t tuning_generation,
                         fp4_selection_key *key) {
  if (p->op != FP4_OP_QUANTIZE && p->op != FP4_OP_MM && p->op != FP4_OP_MM_W4A16) return 0;
  memset(key, 0, sizeof *key);
  if (config) {
    size_t len = strlen(config);
    if (len >= sizeof key->config) return 0;
    memcpy(key->config, config, len);
  }
  uint64_t *w = key->w;
  int n = 0;
  w[n++] = (uint64_t)p->op | (uint64_t)p->memory << 8 | (uint64_t)(p->enable_pdl != 0) << 16 |
           (uint64_t)(p->alpha_device != NULL) << 17 | (uint64_t)(p->global_scale_device != NULL) << 18 |
           (uint64_t)(p->exact_order != 0) << 19 |
           (uint64_t)(uint32_t)(backend_index + 1) << 32;
  w[n++] = tuning_generation;
  put_qmatrix(w, &n, p->a_q);
  put_matrix(w, &n, p->a);
  put_qmatrix(w, &n, p->b);
  put_matrix(w, &n, p->out);
  put_qmatrix(w, &n, p->q_out);
  return n <= FP4_SELECTION_KEY_WORDS;
}

static size_t slot_of(const fp4_selection_key *key) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < FP4_SELECTION_KEY_WORDS; i++) {
    h ^= key->w[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (const char *c = key->config; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
  return (size_t)(h % TABLE_SLOTS);
}

/* The context's table, created on first use when create is set (NULL without one). */
static struct fp4_selection_table *table_of(fp4_context *ctx, int create) {
  static const char owner = 0; /* the address that names this state among the context's slots */
  void **slot = fp4_context_slot(ctx, &owner, free);
  if (slot && !*slot && create) *slot = calloc(1, sizeof(struct fp4_selection_table));
  return slot ? *slot : NULL;
}

const fp4_backend *fp4_selection_find(fp4_context *ctx, const fp4_selection_key *key, const char **config) {
  const struct fp4_selection_table *t = table_of(ctx, 0);
  if (!t) return NULL;
  const selection_slot *s = &t->slots[slot_of(key)];
  if (!s->used || memcmp(&s->key, key, sizeof *key) != 0) return NULL;
  *config = s->config[0] ? s->config : NULL;
  return s->backend;
}

void fp4_selection_store(fp4_context *ctx, const fp4_selection_key *key, const fp4_backend *backend,
                         const char *config) {
  struct fp4_selection_table *t = table_of(ctx, 1);
  if (!t) return;
  if (fp4_registry_index(backend) < 0 || (config && strlen(config) >= sizeof t->slots[0].config)) return;
  selection_slot *s = &t->slots[slot_of(key)];
  s->used = 1;
  s->key = *key;
  s->backend = backend;
  strcpy(s->config, config ? config : "");
}

/* ---- Tuning cache: when auto follows an entry ------------------------------------------------------ */

/* The tuning key of a dense GEMM problem; 0 for problems that are not tuned. */
static int tune_key_of_problem(const fp4_problem *p, fp4_tune_key *key) {
  /* Only the dense GEMMs are tuned; quantize, the grouped GEMMs and the MoE layer have no p->b. */
  if (p->op != FP4_OP_MM && p->op != FP4_OP_MM_W4A16) return 0;
  memset(key, 0, sizeof *key);
  key->op = p->op == FP4_OP_MM ? FP4_TUNE_MM : FP4_TUNE_MM_W4A16;
  key->format = p->b->format;
  key->a_dtype = p->op == FP4_OP_MM ? FP4_DTYPE_E2M1X2 : p->a->dtype;
  key->out_dtype = p->out->dtype;
  key->m = fp4_problem_m(p);
  key->n = fp4_problem_n(p);
  key->k = fp4_problem_k(p);
  return 1;
}

/* Why auto must not follow a cache entry for p ("" when it may): the rules of tuning.h. */
static void distrust(fp4_context *ctx, const fp4_problem *p, const fp4_tuning_hit *hit, char *why, size_t why_size) {
  why[0] = 0;
  const fp4_backend *b = fp4_registry_find(hit->backend);
  if (!b) {
    fp4_reason(why, why_size, "this build has no backend '%s'", hit->backend);
    return;
  }
  if (!fp4_tuning_time_plausible(hit->median_us)) {
    fp4_reason(why, why_size, "implausible time %g us", hit->median_us);
    return;
  }
  if (p->memory == FP4_MEMORY_DEVICE && fp4_heuristic_host_backend(b)) {
    fp4_reason(why, why_size, "'%s' is a host backend and the operands are in device memory", b->name);
    return;
  }
  const int device = fp4_context_device(ctx);
  const int cc = p->memory == FP4_MEMORY_DEVICE && device >= 0 ? fp4_device_cc(device) : 0;
  if (fp4_heuristic_rank(b, cc, p->memory, p->op, fp4_problem_m(p), fp4_problem_weights(p)) >= FP4_RANK_CHECK_ONLY) {
    fp4_reason(why, why_size, "'%s' runs here only to check other backends, never as a fast path", b->name);
    return;
  }
  if (!hit->config[0]) return; /* the backend's own choice */
  const char *names[64];
  const int n = b->configs ? b->configs(ctx, p, names, 64) : 0;
  for (int i = 0; i < n; i++)
    if (names[i] && !strcmp(names[i], hit->config)) return;
  fp4_reason(why, why_size, "backend '%s' offers no config '%s' for this problem", b->name, hit->config);
}

/* The cached winner for p on ctx (the default cache file is loaded on first use): FP4_OK with the
 * backend and config names, else FP4_ERR_NOT_FOUND. Never fails otherwise. An entry that auto must
 * not follow (a backend this build lacks, a config the backend does not offer for p, an implausible
 * time, a checking build such as the reference oracle, a host backend for device operands) is
 * FP4_ERR_NOT_FOUND, with one warning per entry. */
static fp4_status tuning_lookup(fp4_context *ctx, const fp4_problem *p, char *backend, size_t backend_size,
                                char *config, size_t config_size) {
  fp4_tune_key key;
  if (!ctx || !tune_key_of_problem(p, &key)) return FP4_ERR_NOT_FOUND;
  const fp4_tuning_cache *c = fp4_context_tuning_cache(ctx);
  if (!c) return FP4_ERR_NOT_FOUND;
  fp4_tuning_hit hit;
  fp4_status st = fp4_tuning_cache_find(c, &key, &hit);
  fp4_clear_error(); /* a miss is not an error of the caller's call */
  if (st) return FP4_ERR_NOT_FOUND;
  char why[256];
  distrust(ctx, p, &hit, why, sizeof why);
  fp4_clear_error();
  if (why[0]) {
    if (fp4_tuning_cache_first_warning(c, hit.index))
      fp4_log(FP4_LOG_WARN, "auto: tuning cache entry %s%s%s (%s %s M bucket %lld, N %lld, K %lld) not followed: %s; "
              "using the heuristic", hit.backend, hit.config[0] ? ":" : "", hit.config,
              key.op == FP4_TUNE_MM ? "w4a4" : "w4a16", fp4_format_name(key.format),
              (long long)fp4_tune_m_bucket(key.m), (long long)key.n, (long long)key.k, why);
    return FP4_ERR_NOT_FOUND;
  }
  fp4_reason(backend, backend_size, "%s", hit.backend);
  fp4_reason(config, config_size, "%s", hit.config);
  return FP4_OK;
}

/* ---- Problems: support, backend choice, running ---------------------------------------------------- */

static const fp4_options default_options = {0};

fp4_status fp4_backend_available(fp4_context *ctx, const char *name, char *reason, size_t reason_size) {
  fp4_clear_error();
  fp4_reason(reason, reason_size, "%s", "");
  if (!name) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_backend_available: name is NULL");
  const fp4_backend *b = fp4_registry_find(name);
  if (!b) return fp4_fail(FP4_ERR_NOT_FOUND, "fp4_backend_available: no backend named '%s'", name);
  char why[256] = "";
  const fp4_status st = b->available(ctx, why, sizeof why);
  fp4_reason(reason, reason_size, "%s", why);
  if (!st) {
    fp4_clear_error(); /* what the backend asked on the way is an answer, not a failure */
    return FP4_OK;
  }
  return fp4_fail(st, "fp4_backend_available: backend '%s' cannot run on %s: %s", b->name,
                  fp4_context_device(ctx) >= 0 ? "this device" : "the host", why);
}

static fp4_status fp4_problem_supported_plain(fp4_context *ctx, const fp4_backend *b, const fp4_problem *p,
                                              char *reason, size_t reason_size) {
  fp4_status st = b->available(ctx, reason, reason_size);
  if (st) return st;
  if (p->op > FP4_OP_MM_W4A16 && !(b->extra_ops & FP4_OP_BIT(p->op))) {
    static const char *const names[] = {"quantize", "GEMM", "W4A16 GEMM", "grouped GEMM", "grouped W4A16 GEMM", "MoE layer"};
    const char *what = (size_t)p->op < sizeof names / sizeof *names ? names[p->op] : "this operation";
    fp4_reason(reason, reason_size, "backend '%s' does not implement the %s", b->name, what);
    return FP4_ERR_UNSUPPORTED;
  }
  return b->supports(ctx, p, reason, reason_size);
}

/* The device scalars of p (fp4_options.alpha_device / global_scale_device, the MoE layer's
 * act_scales_device): each must be device memory of ctx's device, and the operands too. */
static fp4_status check_device_scalars(fp4_context *ctx, const fp4_problem *p, const char *fn) {
  const float *scalars[4] = {p->alpha_device, p->global_scale_device, NULL, NULL};
  static const char *const names[4] = {"options->alpha_device", "options->global_scale_device",
                                       "layer->routed.act_scales_device", "layer->shared->act_scales_device"};
  if (p->op == FP4_OP_MOE) {
    scalars[2] = p->moe->routed.act_scales_device;
    scalars[3] = p->moe->shared ? p->moe->shared->act_scales_device : NULL;
  }
  for (int i = 0; i < 4; i++) {
    if (!scalars[i]) continue;
    if (p->memory != FP4_MEMORY_DEVICE)
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is a device scalar but the operands are in host memory", fn,
                      names[i]);
    fp4_status st = fp4_check_device_scalar(ctx, scalars[i], fn, names[i]);
    if (st) return st;
  }
  return FP4_OK;
}

static int has_device_scalars(const fp4_problem *p) {
  return p->alpha_device || p->global_scale_device ||
         (p->op == FP4_OP_MOE && (p->moe->routed.act_scales_device || (p->moe->shared && p->moe->shared->act_scales_device)));
}

fp4_status fp4_problem_supported(fp4_context *ctx, const fp4_backend *b, const fp4_problem *p, char *reason,
                                 size_t reason_size) {
  if (has_device_scalars(p) && !b->device_scalars) {
    fp4_reason(reason, reason_size, "backend '%s' does not read device scalars (alpha_device, global_scale_device, act_scales_device)",
               b->name);
    return FP4_ERR_UNSUPPORTED;
  }
  if (p->exact_order && !b->exact_order) {
    const char *exact = "no";
    for (int i = 0; i < fp4_registry_count(); i++)
      if (fp4_registry_get(i)->exact_order) exact = fp4_registry_get(i)->name;
    fp4_reason(reason, reason_size, "FP4_ORDER_EXACT runs on the %s backend only; '%s' quantizes in FlashInfer's order",
               exact, b->name);
    return FP4_ERR_UNSUPPORTED;
  }
  return fp4_problem_supported_plain(ctx, b, p, reason, reason_size);
}

/* The backend and config the options select for p (auto: the tuning cache's or the heuristic's). */
/* What the tuning cache attached to ctx looks like now, for remembered decisions of auto: a new
 * cache or a changed one must not be answered from decisions made under the old. */
static uint64_t tuning_generation(fp4_context *ctx) {
  const fp4_tuning_cache *c = fp4_context_tuning_cache(ctx);
  fp4_clear_error();
  return fp4_tuning_cache_generation(c); /* 0 without a cache */
}

/* The config the options name, as the named backend checks it (its check_config; without one it has
 * a single config, "default"): what the call and its size query both refuse. */
static fp4_status check_named_config(fp4_context *ctx, const fp4_backend *b, const fp4_problem *p, const char *config,
                                     const char *fn) {
  char reason[384] = "";
  fp4_status st = FP4_OK;
  if (b->check_config) {
    st = b->check_config(ctx, p, config, reason, sizeof reason);
  } else if (strcmp(config, "default") != 0) {
    fp4_reason(reason, sizeof reason, "unknown config '%s' (it has one, 'default')", config);
    st = FP4_ERR_NOT_FOUND;
  }
  return st ? fp4_fail(st, "%s: options->config of backend '%s': %s", fn, b->name, reason) : FP4_OK;
}

static fp4_status resolve(fp4_context *ctx, const fp4_problem *p, const fp4_options *o, const char *fn,
                          const fp4_backend **backend, const char **config, char *config_buf, size_t config_size) {
  char reason[256];
  const int named = o->backend && strcmp(o->backend, "auto") != 0;
  const fp4_backend *b = named ? fp4_registry_find(o->backend) : NULL;
  if (named && !b) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no backend named '%s'", fn, o->backend);
  if (!named && o->config)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: options->config ('%s') needs a named options->backend, not auto", fn, o->config);
  /* A decision made before for the same key is the same decision: skip asking every backend. */
  fp4_selection_key key;
  const int keyed = ctx && fp4_selection_key_of(p, named ? fp4_registry_index(b) : -1, o->config,
                                                named ? 0 : tuning_generation(ctx), &key);
  if (keyed) {
    const char *remembered = NULL;
    const fp4_backend *hit = fp4_selection_find(ctx, &key, &remembered);
    if (hit) {
      *backend = hit;
      *config = remembered;
      return FP4_OK;
    }
  }
  if (named) {
    fp4_status st = fp4_problem_supported(ctx, b, p, reason, sizeof reason);
    if (st) return fp4_fail(st, "%s: backend '%s' cannot run this problem: %s", fn, b->name, reason);
    if (o->config && (st = check_named_config(ctx, b, p, o->config, fn))) return st;
    *config = o->config;
  } else {
    b = fp4_select_backend_config(ctx, p, config_buf, config_size, reason, sizeof reason);
    if (!b) return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: no backend can run this problem (%s)", fn, reason);
    *config = config_buf[0] ? config_buf : NULL;
  }
  *backend = b;
  if (keyed) fp4_selection_store(ctx, &key, b, *config);
  return FP4_OK;
}

static void problem_take_options(fp4_problem *p, const fp4_options *o) {
  p->enable_pdl = o->enable_pdl;
  p->stream = o->stream;
  p->alpha_device = o->alpha_device;
  p->global_scale_device = p->op == FP4_OP_QUANTIZE ? o->global_scale_device : NULL;
}

/* What a call, its size query and its no-op form (T = 0) check of the options, in one order: the
 * device scalars, then the backend and config they select for p. */
static fp4_status problem_resolve(fp4_context *ctx, fp4_problem *p, const fp4_options *o, const char *fn,
                                  const fp4_backend **backend, const char **config, char *config_buf,
                                  size_t config_size) {
  problem_take_options(p, o);
  fp4_status st = check_device_scalars(ctx, p, fn);
  return st ? st : resolve(ctx, p, o, fn, backend, config, config_buf, config_size);
}

fp4_status fp4_problem_run(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn) {
  const fp4_options *o = options ? options : &default_options;
  if (o->info) memset(o->info, 0, sizeof *o->info);
  const fp4_backend *b = NULL;
  const char *config = NULL;
  char config_buf[64];
  fp4_status st = problem_resolve(ctx, p, o, fn, &b, &config, config_buf, sizeof config_buf);
  return st ? st : b->run(ctx, p, config, o->info);
}

fp4_status fp4_problem_check(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn) {
  const fp4_options *o = options ? options : &default_options;
  if (o->info) memset(o->info, 0, sizeof *o->info); /* nothing runs */
  const fp4_backend *b = NULL;
  const char *config = NULL;
  char config_buf[64];
  return problem_resolve(ctx, p, o, fn, &b, &config, config_buf, sizeof config_buf);
}

fp4_status fp4_problem_workspace_size(fp4_context *ctx, fp4_problem *p, const fp4_options *options, const char *fn,
                                      size_t *bytes) {
  if (!bytes) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
  *bytes = 0;
  const fp4_options *o = options ? options : &default_options;
  const fp4_backend *b = NULL;
  const char *config = NULL;
  char config_buf[64];
  fp4_status st = problem_resolve(ctx, p, o, fn, &b, &config, config_buf, sizeof config_buf);
  if (st) return st;
  *bytes = b->workspace_size ? b->workspace_size(ctx, p, config) : 0;
  return FP4_OK;
}

/* Auto selection: the tuning cache's winner for p's (M bucket, N, K, formats, out dtype) when the
 * context has one and that backend still supports p; otherwise the supported backend the heuristic
 * ranks first (registry order breaks ties). */
const fp4_backend *fp4_select_backend_config(fp4_context *ctx, const fp4_problem *p, char *config, size_t config_size,
                                             char *reason, size_t reason_size) {
  char why[256], tuned[32], tuned_config[64];
  fp4_reason(config, config_size, "%s", "");
  if (tuning_lookup(ctx, p, tuned, sizeof tuned, tuned_config, sizeof tuned_config) == FP4_OK) {
    const fp4_backend *b = fp4_registry_find(tuned);
    if (b && p->memory == FP4_MEMORY_DEVICE && fp4_heuristic_host_backend(b)) {
      snprintf(why, sizeof why, "a host backend never runs device operands");
      b = NULL;
    }
    if (b && fp4_problem_supported(ctx, b, p, why, sizeof why) == FP4_OK) {
      fp4_reason(config, config_size, "%s", tuned_config);
      fp4_reason(reason, reason_size, "tuning cache winner");
      return b;
    }
    fp4_log(FP4_LOG_WARN, "auto: cached winner '%s' cannot run this problem (%s); using the heuristic", tuned,
            b || fp4_registry_find(tuned) ? why : "not registered");
  }
  const int device = fp4_context_device(ctx);
  const int cc = (p->memory == FP4_MEMORY_DEVICE && device >= 0) ? fp4_device_cc(device) : 0;
  const int64_t m = p->op == FP4_OP_QUANTIZE ? p->a->rows : fp4_problem_m(p);
  const fp4_backend *best = NULL;
  int best_rank = 0;
  fp4_reason(reason, reason_size, "no backend is registered for %s memory", fp4_memory_name(p->memory));
  for (int i = 0; i < fp4_registry_count(); i++) {
    const fp4_backend *b = fp4_registry_get(i);
    if (p->memory == FP4_MEMORY_DEVICE && fp4_heuristic_host_backend(b)) continue;
    if (fp4_problem_supported(ctx, b, p, why, sizeof why) != FP4_OK) {
      if (!best) fp4_reason(reason, reason_size, "last tried '%s': %s", b->name, why);
      continue;
    }
    int rank = fp4_heuristic_rank(b, cc, p->memory, p->op, m, fp4_problem_weights(p));
    if (!best || rank < best_rank) {
      best = b;
      best_rank = rank;
    }
  }
  if (best) fp4_reason(reason, reason_size, "heuristic rank %d", best_rank);
  return best;
}

const fp4_backend *fp4_select_backend(fp4_context *ctx, const fp4_problem *p, char *reason, size_t reason_size) {
  return fp4_select_backend_config(ctx, p, NULL, 0, reason, reason_size);
}

static fp4_status check_memory(const char *fn, fp4_context *ctx, fp4_memory memory) {
  if (memory == FP4_MEMORY_DEVICE && fp4_context_device(ctx) < 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: operands are in device memory but the context is %s", fn,
                    ctx ? "host-only (device -1)" : "NULL; create one with fp4_context_create(&ctx, device)");
  return FP4_OK;
}

/* fp4_quantize for the entry fn the caller called (its messages name it). */
static fp4_status quantize_default_order(const char *fn, fp4_context *ctx, const fp4_matrix *x, float global_scale,
                                         fp4_qmatrix *out, const fp4_options *options) {
  fp4_status st = fp4_check_quantize_io(fn, x, out);
  if (st) return st;
  const int device_scale = options && options->global_scale_device && out->format == FP4_FORMAT_NVFP4;
  if (out->format == FP4_FORMAT_NVFP4 && !device_scale && (st = fp4_check_global_scale(fn, NULL, "global_scale", global_scale)))
    return st;
  if (device_scale) global_scale = 1.0f; /* unused: the kernel reads the device value; multiplier stays 1 */
  if (out->format == FP4_FORMAT_MXFP4) global_scale = 1.0f;
  if ((st = check_memory(fn, ctx, x->memory))) return st;
  fp4_problem p = {.op = FP4_OP_QUANTIZE, .a = x, .global_scale = global_scale, .q_out = out, .memory = x->memory};
  return fp4_problem_run(ctx, &p, options, fn);
}

fp4_status fp4_quantize(fp4_context *ctx, const fp4_matrix *x, float global_scale, fp4_qmatrix *out,
                        const fp4_options *options) {
  fp4_clear_error();
  return quantize_default_order("fp4_quantize", ctx, x, global_scale, out, options);
}

fp4_status fp4_quantize_ordered(fp4_context *ctx, const fp4_matrix *x, float global_scale, fp4_quantize_order order,
                                fp4_qmatrix *out, const fp4_options *options) {
  static const char fn[] = "fp4_quantize_ordered";
  fp4_clear_error();
  if (order == FP4_ORDER_FLASHINFER || (order == FP4_ORDER_EXACT && out && out->format == FP4_FORMAT_MXFP4))
    return quantize_default_order(fn, ctx, x, global_scale, out, options); /* MXFP4 scales have one order only */
  if (order != FP4_ORDER_EXACT)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: order %d is neither FP4_ORDER_FLASHINFER (0) nor FP4_ORDER_EXACT (1)",
                    fn, (int)order);
  fp4_status st = fp4_check_quantize_io(fn, x, out);
  if (st) return st;
  /* The exact order is the reference quantizer's on the host; the backends' quantizers (SIMD, CUDA)
   * implement the default order only, so their tables do not offer it and the dispatcher refuses
   * rather than run in the other order. */
  if (x->memory != FP4_MEMORY_HOST)
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "%s: FP4_ORDER_EXACT runs on host memory only (the reference quantizer); device data is "
                    "quantized in FlashInfer's order by fp4_quantize", fn);
  if (options && options->global_scale_device)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "%s: FP4_ORDER_EXACT takes the global_scale argument, not a device scale", fn);
  if ((st = fp4_check_global_scale(fn, NULL, "global_scale", global_scale))) return st;
  fp4_problem p = {.op = FP4_OP_QUANTIZE, .a = x, .global_scale = global_scale, .q_out = out, .memory = x->memory,
                   .exact_order = 1};
  return fp4_problem_run(ctx, &p, options, fn);
}

static fp4_status check_mm_common(const char *fn, const fp4_qmatrix *b, int64_t m, int64_t k, fp4_memory a_mem,
                                  float alpha, const fp4_matrix *out) {
  fp4_status st = fp4_check_qmatrix(fn, "b", b);
  if (st) return st;
  if ((st = fp4_check_matrix(fn, "out", out))) return st;
  if (b->cols != k)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: a has K = %lld columns but b has K = %lld", fn, (long long)k,
                    (long long)b->cols);
  if (out->rows != m || out->cols != b->rows)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: out is [%lld, %lld] but must be [M, N] = [%lld, %lld]", fn,
                    (long long)out->rows, (long long)out->cols, (long long)m, (long long)b->rows);
  if (b->memory != a_mem || out->memory != a_mem)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: a, b and out must share one memory (a %s, b %s, out %s)", fn,
                    fp4_memory_name(a_mem), fp4_memory_name(b->memory), fp4_memory_name(out->memory));
  if (!isfinite(alpha)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: alpha (%g) is not finite", fn, (double)alpha);
  return FP4_OK;
}

/* Everything fp4_mm checks of its operands, shared with fp4_mm_workspace_size so that the query
 * refuses what the call refuses (operands of two formats among them). */
static fp4_status check_mm_w4a4(const char *fn, fp4_context *ctx, const fp4_qmatrix *a, const fp4_qmatrix *b,
                                float alpha, const fp4_matrix *out) {
  fp4_status st = fp4_check_qmatrix(fn, "a", a);
  if (st) return st;
  if ((st = check_mm_common(fn, b, a->rows, a->cols, a->memory, alpha, out))) return st;
  if (a->format != b->format)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: a is %s but b is %s; both operands must share a format", fn,
                    fp4_format_name(a->format), fp4_format_name(b->format));
  return check_memory(fn, ctx, a->memory);
}

fp4_status fp4_mm(fp4_context *ctx, const fp4_qmatrix *a, const fp4_qmatrix *b, float alpha, fp4_matrix *out,
                  const fp4_options *options) {
  fp4_clear_error();
  static const char fn[] = "fp4_mm";
  fp4_status st = check_mm_w4a4(fn, ctx, a, b, alpha, out);
  if (st) return st;
  fp4_problem p = {.op = FP4_OP_MM, .a_q = a, .b = b, .alpha = alpha, .out = out, .memory = a->memory};
  return fp4_problem_run(ctx, &p, options, fn);
}

fp4_status fp4_mm_w4a16(fp4_context *ctx, const fp4_matrix *a, const fp4_qmatrix *b, float alpha, fp4_matrix *out,
                        const fp4_options *options) {
  fp4_clear_error();
  static const char fn[] = "fp4_mm_w4a16";
  fp4_status st = fp4_check_matrix(fn, "a", a);
  if (st) return st;
  if ((st = check_mm_common(fn, b, a->rows, a->cols, a->memory, alpha, out))) return st;
  if ((st = check_memory(fn, ctx, a->memory))) return st;
  fp4_problem p = {.op = FP4_OP_MM_W4A16, .a = a, .b = b, .alpha = alpha, .out = out, .memory = a->memory};
  return fp4_problem_run(ctx, &p, options, fn);
}

int fp4_backend_count(void) { return fp4_registry_count(); }

const char *fp4_backend_name(int index) {
  const fp4_backend *b = fp4_registry_get(index);
  return b ? b->name : NULL;
}

const char *fp4_backend_summary(int index) {
  const fp4_backend *b = fp4_registry_get(index);
  return b ? b->summary : NULL;
}

fp4_status fp4_mm_workspace_size(fp4_context *ctx, const fp4_qmatrix *a, const fp4_qmatrix *b, const fp4_matrix *out,
                                 const fp4_options *options, size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_mm_workspace_size";
  if (bytes) *bytes = 0;
  fp4_status st = check_mm_w4a4(fn, ctx, a, b, 1.0f, out);
  if (st) return st;
  fp4_problem p = {.op = FP4_OP_MM, .a_q = a, .b = b, .alpha = 1.0f,
                   .out = (fp4_matrix *)out /* not written: a size query */, .memory = a->memory};
  return fp4_problem_workspace_size(ctx, &p, options, fn, bytes);
}

fp4_status fp4_mm_w4a16_workspace_size(fp4_context *ctx, const fp4_matrix *a, const fp4_qmatrix *b,
                                       const fp4_matrix *out, const fp4_options *options, size_t *bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_mm_w4a16_workspace_size";
  if (bytes) *bytes = 0;
  fp4_status st = fp4_check_matrix(fn, "a", a);
  if (st) return st;
  if ((st = check_mm_common(fn, b, a->rows, a->cols, a->memory, 1.0f, out))) return st;
  if ((st = check_memory(fn, ctx, a->memory))) return st;
  fp4_problem p = {.op = FP4_OP_MM_W4A16, .a = a, .b = b, .alpha = 1.0f,
                   .out = (fp4_matrix *)out /* not written: a size query */, .memory = a->memory};
  return fp4_problem_workspace_size(ctx, &p, options, fn, bytes);
}
