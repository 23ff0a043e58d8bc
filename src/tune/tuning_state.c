/*
 * The context's tuning state: the tuning cache auto selection follows (loaded once per context from
 * the default file, or set by the caller). Below dispatch: it runs no GEMM and decides nothing;
 * dispatch.c asks it for the cache and decides whether an entry may be followed, and the tuner
 * (tuner.c) fills caches by timing the public calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/error.h"
#include "dispatch/backend.h"
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
