/* Internal side of the tuning cache: what auto selection asks of it. */
#ifndef FP4_TUNE_TUNING_H
#define FP4_TUNE_TUNING_H

#include "dispatch/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The times a cache entry may hold, in microseconds: from one nanosecond to about three hours. A
 * time outside (zero, negative, infinite, NaN) is never stored, loaded or followed. */
#define FP4_TUNE_MIN_US 1e-3
#define FP4_TUNE_MAX_US 1e10
int fp4_tuning_time_plausible(double median_us);
/* A number that changes whenever the cache's entries change (set, load, parse), so decisions
 * remembered under one state of the cache are not reused under another (the selection cache in
 * dispatch/dispatch.c). */
uint64_t fp4_tuning_cache_generation(const fp4_tuning_cache *cache);

/* One entry as stored: names, time, and its index for fp4_tuning_cache_first_warning. */
typedef struct fp4_tuning_hit {
  char backend[32];
  char config[64];
  double median_us;
  int index;
} fp4_tuning_hit;

/* Why a key names no GEMM a call could make ("" when it does), starting with the field: an unknown
 * op or format, a_dtype other than e2m1x2 for W4A4 or other than bf16/f16/f32 for W4A16, out_dtype
 * not bf16/f16/f32, M, N or K outside [1, 2^31], K not a multiple of the block size. Every function
 * that takes a key (fp4_tune, fp4_tuning_cache_set / _lookup, a loaded file's entries) refuses such
 * a key, since no call would ever find its entry. */
void fp4_tune_key_problem(const fp4_tune_key *key, char *why, size_t why_size);

/* Whether a and b name one cache entry: the same op, format, dtypes, N, K and M bucket. */
int fp4_tune_same_entry(const fp4_tune_key *a, const fp4_tune_key *b);

/* The entry for key (its M bucketed): FP4_OK, FP4_ERR_NOT_FOUND or FP4_ERR_INVALID_ARGUMENT. */
fp4_status fp4_tuning_cache_find(const fp4_tuning_cache *cache, const fp4_tune_key *key, fp4_tuning_hit *hit);
/* 1 the first time it is asked about an entry, 0 afterwards (thread-safe): one warning per entry. */
int fp4_tuning_cache_first_warning(const fp4_tuning_cache *cache, int index);

/* fp4_tuning_cache_load on a file's text (len bytes; no NUL terminator needed); name is for messages.
 * The fuzz target's entry point. */
fp4_status fp4_tuning_cache_parse(fp4_tuning_cache *cache, const char *text, size_t len, const char *name);
/* The JSON text a save writes for cache (malloc'd; NULL when out of memory). */
char *fp4_tuning_cache_text(const fp4_tuning_cache *cache);

#ifdef __cplusplus
}
#endif

#endif
