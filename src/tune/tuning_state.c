/*
 * The context's tuning state: the tuning cache auto selection follows (loaded once per context from
 * the default file, or set by the caller) and the lookup that answers dispatch from it, with the
 * checks that keep auto from following an entry it must not. Below dispatch: it runs no GEMM (the
 * tuner, tuner.c, fills caches by timing the public calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
#include "dispatch/heuristic.h"
#include "tune/tuning.h"

struct fp4_tuning_state {
  fp4_tuning_cache *cache; /* NULL: none usable                          */
  int loaded;              /* the default file was tried (or one was set) */
  char note[512];
};

static void state_release(void *state) {
  struct fp4_tuning_state *t = state;
  fp4_tuning_cache_destroy(t->cache);
  free(t);
}

/* ctx's tuning state, created on first use (NULL for ctx NULL or out of memory). */
static struct fp4_tuning_state *state_of(fp4_context *ctx) {
  static const char owner = 0; /* the address that names this state among the context's slots */
  void **slot = fp4_context_slot(ctx, &owner, state_release);
  if (slot && !*slot) *slot = calloc(1, sizeof(struct fp4_tuning_state));
  return slot ? *slot : NULL;
}

fp4_status fp4_context_set_tuning_cache(fp4_context *ctx, fp4_tuning_cache *cache) {
  fp4_clear_error();
  if (!ctx) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_context_set_tuning_cache: ctx is NULL");
  struct fp4_tuning_state *t = state_of(ctx);
  if (!t) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_context_set_tuning_cache: out of host memory");
  if (t->cache != cache) fp4_tuning_cache_destroy(t->cache);
  t->cache = cache;
  t->loaded = 1;
  snprintf(t->note, sizeof t->note, cache ? "tuning cache set by the caller (%d entries)" : "tuning cache detached",
           fp4_tuning_cache_count(cache));
  return FP4_OK;
}

/* Loads the default cache file once per context; a file that cannot be used is ignored with one
 * warning per process (a missing default file is normal before the first tune: info only). */
static void load_default(fp4_context *ctx, struct fp4_tuning_state *t) {
  static int warned;
  t->loaded = 1;
  char path[4096];
  if (fp4_tuning_cache_default_path(path, sizeof path)) {
    snprintf(t->note, sizeof t->note, "no tuning cache: %s", fp4_last_error());
    fp4_clear_error();
    return;
  }
  fp4_tuning_cache *c = NULL;
  if (fp4_tuning_cache_create(ctx, &c)) {
    snprintf(t->note, sizeof t->note, "no tuning cache: %s", fp4_last_error());
    fp4_clear_error();
    return;
  }
  fp4_status st = fp4_tuning_cache_load(c, path);
  if (st) {
    snprintf(t->note, sizeof t->note, "tuning cache ignored: %s", fp4_last_error());
    int explicit_path = getenv("FP4KIT_TUNING_CACHE") && *getenv("FP4KIT_TUNING_CACHE");
    if (st != FP4_ERR_NOT_FOUND || explicit_path) {
      if (!warned) fp4_log(FP4_LOG_WARN, "%s (auto selection uses the heuristic)", t->note);
      warned = 1;
    } else {
      fp4_log(FP4_LOG_INFO, "%s (run fp4kit tune to create one)", t->note);
    }
    fp4_tuning_cache_destroy(c);
    fp4_clear_error();
    return;
  }
  t->cache = c;
  /* a usable file may have had invalid entries: load skipped them and says so */
  if (fp4_last_error()[0])
    fp4_reason(t->note, sizeof t->note, "tuning cache %s (%d entries; %s)", path, fp4_tuning_cache_count(c),
               fp4_last_error());
  else
    fp4_reason(t->note, sizeof t->note, "tuning cache %s (%d entries)", path, fp4_tuning_cache_count(c));
  fp4_clear_error();
}

const fp4_tuning_cache *fp4_context_tuning_cache(fp4_context *ctx) {
  struct fp4_tuning_state *t = state_of(ctx);
  if (!t) return NULL;
  if (!t->loaded) load_default(ctx, t);
  return t->cache;
}

const char *fp4_context_tuning_note(fp4_context *ctx) {
  struct fp4_tuning_state *t = state_of(ctx);
  if (!t) return "no context: auto selection uses the heuristic";
  if (!t->loaded) load_default(ctx, t);
  return t->note;
}

int fp4_tune_key_of_problem(const fp4_problem *p, fp4_tune_key *key) {
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
  if (fp4_heuristic_rank(b, cc, p->memory, p->op, fp4_problem_m(p)) >= FP4_RANK_CHECK_ONLY) {
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

fp4_status fp4_tuning_lookup(fp4_context *ctx, const fp4_problem *p, char *backend, size_t backend_size,
                             char *config, size_t config_size) {
  fp4_tune_key key;
  if (!ctx || !fp4_tune_key_of_problem(p, &key)) return FP4_ERR_NOT_FOUND;
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
