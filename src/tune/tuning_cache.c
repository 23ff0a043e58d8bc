#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* flock */
/*
 * The persistent tuning cache: winners per (M bucket, N, K, formats, output dtype), stamped with the
 * library version, the device (name, compute capability) and the vendor-library versions. A file
 * that is missing, truncated, malformed or from another version or device is never trusted: load
 * leaves the cache empty and says why. Inside a usable file, each invalid entry is skipped on its
 * own with a warning and the others load.
 *
 * Saves follow a link at path to the file it leads to (the target), take an advisory lock on
 * <target>.lock, merge with the entries the target holds by then (refusing a file that is not
 * recognisably a cache: a mistyped path must not destroy it), write a temporary file created
 * exclusively (never through a link) under an unpredictable name beside the target, with the
 * target's permissions, and rename it over the target: concurrent tuners keep every entry and
 * concurrent readers see one whole file.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "dispatch/backend.h"
#include "format/matrix_check.h"
#include "tune/tuning.h"

#define CACHE_FORMAT "fp4kit-tuning-cache"
#define CACHE_FORMAT_VERSION 1
/* Invalid entries named one by one in warnings; the rest are counted. */
#define CACHE_WARN_ENTRIES 20

typedef struct cache_entry {
  fp4_tune_key key; /* m holds the bucket */
  char backend[32];
  char config[64];
  double median_us;
  int dirty;  /* set by this process (fp4_tuning_cache_set), not read from a file: wins a merge */
  int warned; /* auto has warned that it does not follow this entry (atomic flag) */
} cache_entry;

struct fp4_tuning_cache {
  char library_version[16];
  char device_name[128];
  int cc;
  int cublaslt_version;
  int cudnn_version;
  cache_entry *entries;
  int count, capacity;
  uint64_t generation; /* process-unique, renewed by every change of the entries */
};

/* Generations come from one process-wide counter, so two caches (or a cache freed and another
 * allocated at its address) never share one. */
static uint64_t next_generation(void) {
  static uint64_t counter;
  return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}


int64_t fp4_tune_m_bucket(int64_t m) {
  if (m <= 1) return 1;
  if (m <= 256) {
    int64_t b = 1;
    while (b < m) b <<= 1;
    return b;
  }
  if (m <= 2048) return (m + 255) / 256 * 256;
  if (m <= 4096) return (m + 511) / 512 * 512;
  if (m > ((int64_t)1 << 62)) return -1; /* no power of two in int64 rounds it up */
  int64_t b = 4096;
  while (b < m) b <<= 1;
  return b;
}

int fp4_tuning_time_plausible(double median_us) {
  return isfinite(median_us) && median_us >= FP4_TUNE_MIN_US && median_us <= FP4_TUNE_MAX_US;
}

fp4_status fp4_tuning_cache_create(fp4_context *ctx, fp4_tuning_cache **cache) {
  fp4_clear_error();
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_create: cache is NULL");
  *cache = NULL;
  fp4_tuning_cache *c = calloc(1, sizeof *c);
  if (!c) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_tuning_cache_create: out of host memory");
  c->generation = next_generation();
  fp4_reason(c->library_version, sizeof c->library_version, "%s", fp4_version());
  int device = fp4_context_device(ctx);
  if (device < 0) {
    snprintf(c->device_name, sizeof c->device_name, "host");
  } else {
    fp4_device_probe d;
    fp4_status st = fp4_probe_device(device, &d);
    if (st) {
      free(c);
      return st;
    }
    fp4_reason(c->device_name, sizeof c->device_name, "%s", d.name);
    c->cc = d.cc;
    c->cublaslt_version = d.cublaslt_version;
    c->cudnn_version = d.cudnn_version;
  }
  *cache = c;
  return FP4_OK;
}

void fp4_tuning_cache_destroy(fp4_tuning_cache *cache) {
  if (!cache) return;
  free(cache->entries);
  free(cache);
}

int fp4_tuning_cache_count(const fp4_tuning_cache *cache) { return cache ? cache->count : 0; }

static int same_key(const fp4_tune_key *a, const fp4_tune_key *b) {
  return a->op == b->op && a->format == b->format && a->a_dtype == b->a_dtype && a->out_dtype == b->out_dtype &&
         a->m == b->m && a->n == b->n && a->k == b->k;
}

int fp4_tune_same_entry(const fp4_tune_key *a, const fp4_tune_key *b) {
  fp4_tune_key x = *a, y = *b;
  x.m = fp4_tune_m_bucket(x.m);
  y.m = fp4_tune_m_bucket(y.m);
  return same_key(&x, &y);
}

/* Index of the entry with key k (k.m already a bucket), or -1. */
static int find_entry(const fp4_tuning_cache *c, const fp4_tune_key *k) {
  for (int i = 0; i < c->count; i++)
    if (same_key(&c->entries[i].key, k)) return i;
  return -1;
}

static int dense_dtype(fp4_dtype t) { return t == FP4_DTYPE_F32 || t == FP4_DTYPE_BF16 || t == FP4_DTYPE_F16; }

void fp4_tune_key_problem(const fp4_tune_key *key, char *why, size_t why_size) {
  why[0] = 0;
  const char *a = fp4_dtype_name(key->a_dtype), *o = fp4_dtype_name(key->out_dtype);
  if (key->op != FP4_TUNE_MM && key->op != FP4_TUNE_MM_W4A16)
    fp4_reason(why, why_size, "op (%d) is neither FP4_TUNE_MM nor FP4_TUNE_MM_W4A16", (int)key->op);
  else if (!fp4_format_name(key->format))
    fp4_reason(why, why_size, "format (%d) is neither NVFP4 nor MXFP4", (int)key->format);
  else if (key->op == FP4_TUNE_MM && key->a_dtype != FP4_DTYPE_E2M1X2) /* the activations are FP4 */
    fp4_reason(why, why_size, "a_dtype (%s) must be FP4_DTYPE_E2M1X2 for W4A4 (FP4_TUNE_MM)", a ? a : "unknown");
  else if (key->op == FP4_TUNE_MM_W4A16 && !dense_dtype(key->a_dtype))
    fp4_reason(why, why_size, "a_dtype (%s) must be bf16, f16 or f32 for W4A16", a ? a : "unknown");
  else if (!dense_dtype(key->out_dtype))
    fp4_reason(why, why_size, "out_dtype (%s) must be bf16, f16 or f32", o ? o : "unknown");
  else if (key->m < 1 || key->m > FP4_MAX_DIM)
    fp4_reason(why, why_size, "m (%lld) is outside [1, 2^31]", (long long)key->m);
  else if (key->n < 1 || key->n > FP4_MAX_DIM)
    fp4_reason(why, why_size, "n (%lld) is outside [1, 2^31]", (long long)key->n);
  else if (key->k < 1 || key->k > FP4_MAX_DIM || key->k % fp4_format_block_size(key->format))
    fp4_reason(why, why_size, "k (%lld) is not a positive multiple of the %s block size %d up to 2^31", (long long)key->k,
               fp4_format_name(key->format), fp4_format_block_size(key->format));
}

static fp4_status check_key(const char *fn, const fp4_tune_key *key) {
  if (!key) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key is NULL", fn);
  char why[128];
  fp4_tune_key_problem(key, why, sizeof why);
  return why[0] ? fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key->%s", fn, why) : FP4_OK;
}

/* Stores e (its key's m a bucket) over the entry with the same key, or appends it. */
static fp4_status put_entry(fp4_tuning_cache *c, const cache_entry *e, const char *fn) {
  int i = find_entry(c, &e->key);
  if (i < 0) {
    if (c->count == c->capacity) {
      int cap = c->capacity ? 2 * c->capacity : 16;
      cache_entry *grown = realloc(c->entries, sizeof *grown * (size_t)cap);
      if (!grown) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
      c->entries = grown;
      c->capacity = cap;
    }
    i = c->count++;
  }
  c->entries[i] = *e;
  c->entries[i].warned = 0;
  c->generation = next_generation();
  return FP4_OK;
}

uint64_t fp4_tuning_cache_generation(const fp4_tuning_cache *cache) { return cache ? cache->generation : 0; }

/* Why an entry's names and time cannot be stored ("" when they can). */
static void value_problem(const char *backend, const char *config, double median_us, char *why, size_t why_size) {
  why[0] = 0;
  if (!backend || !*backend || strlen(backend) >= sizeof ((cache_entry *)0)->backend)
    fp4_reason(why, why_size, "backend name is missing, empty or longer than %zu bytes",
               sizeof ((cache_entry *)0)->backend - 1);
  else if (config && strlen(config) >= sizeof ((cache_entry *)0)->config)
    fp4_reason(why, why_size, "config name is longer than %zu bytes", sizeof ((cache_entry *)0)->config - 1);
  else if (!fp4_tuning_time_plausible(median_us))
    fp4_reason(why, why_size, "median_us (%g) is not a time between %g and %g us", median_us, FP4_TUNE_MIN_US,
               FP4_TUNE_MAX_US);
}

fp4_status fp4_tuning_cache_set(fp4_tuning_cache *cache, const fp4_tune_key *key, const char *backend,
                                const char *config, double median_us) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_set";
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  fp4_status st = check_key(fn, key);
  if (st) return st;
  char why[160];
  value_problem(backend, config, median_us, why, sizeof why);
  if (why[0]) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s", fn, why);
  cache_entry e;
  memset(&e, 0, sizeof e);
  e.key = *key;
  e.key.m = fp4_tune_m_bucket(key->m);
  fp4_reason(e.backend, sizeof e.backend, "%s", backend);
  fp4_reason(e.config, sizeof e.config, "%s", config ? config : "");
  e.median_us = median_us;
  e.dirty = 1;
  return put_entry(cache, &e, fn);
}

fp4_status fp4_tuning_cache_find(const fp4_tuning_cache *cache, const fp4_tune_key *key, fp4_tuning_hit *hit) {
  static const char fn[] = "fp4_tuning_cache_lookup";
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  fp4_status st = check_key(fn, key);
  if (st) return st;
  fp4_tune_key k = *key;
  k.m = fp4_tune_m_bucket(key->m);
  const int i = find_entry(cache, &k);
  if (i < 0)
    return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no entry for M bucket %lld, N %lld, K %lld", fn, (long long)k.m,
                    (long long)k.n, (long long)k.k);
  const cache_entry *e = &cache->entries[i];
  memcpy(hit->backend, e->backend, sizeof hit->backend);
  memcpy(hit->config, e->config, sizeof hit->config);
  hit->median_us = e->median_us;
  hit->index = i;
  return FP4_OK;
}

int fp4_tuning_cache_first_warning(const fp4_tuning_cache *cache, int index) {
  if (!cache || index < 0 || index >= cache->count) return 0;
  /* The flag is the entry's own; lookups through a const cache may race on it, hence atomic. */
  int *flag = (int *)&cache->entries[index].warned;
  return __atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0;
}

fp4_status fp4_tuning_cache_lookup(const fp4_tuning_cache *cache, const fp4_tune_key *key, char *backend,
                                   size_t backend_size, char *config, size_t config_size) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_lookup";
  fp4_reason(backend, backend_size, "%s", "");
  fp4_reason(config, config_size, "%s", "");
  fp4_tuning_hit hit;
  fp4_status st = fp4_tuning_cache_find(cache, key, &hit);
  if (st) return st;
  /* A name that does not fit is an error, never a truncated name that looks like another. */
  if (backend && strlen(hit.backend) >= backend_size)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: backend name '%s' needs %zu bytes, the buffer has %zu", fn,
                    hit.backend, strlen(hit.backend) + 1, backend_size);
  if (config && strlen(hit.config) >= config_size)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: config name '%s' needs %zu bytes, the buffer has %zu", fn,
                    hit.config, strlen(hit.config) + 1, config_size);
  fp4_reason(backend, backend_size, "%s", hit.backend);
  fp4_reason(config, config_size, "%s", hit.config);
  return FP4_OK;
}

/* ---- JSON ------------------------------------------------------------------------------------------ */

static const char *op_name(fp4_tune_op op) { return op == FP4_TUNE_MM ? "mm" : "mm_w4a16"; }

static int parse_op(const char *s, fp4_tune_op *op) {
  if (!strcmp(s, "mm")) *op = FP4_TUNE_MM;
  else if (!strcmp(s, "mm_w4a16")) *op = FP4_TUNE_MM_W4A16;
  else return 0;
  return 1;
}

static int parse_format(const char *s, fp4_format *f) {
  for (int i = 0; i < 2; i++)
    if (!strcmp(s, fp4_format_name((fp4_format)i))) return *f = (fp4_format)i, 1;
  return 0;
}

static int parse_dtype(const char *s, fp4_dtype *d) {
  for (int i = 0; fp4_dtype_name((fp4_dtype)i); i++)
    if (!strcmp(s, fp4_dtype_name((fp4_dtype)i))) return *d = (fp4_dtype)i, 1;
  return 0;
}

static cJSON *to_json(const fp4_tuning_cache *c) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddStringToObject(root, "format", CACHE_FORMAT);
  cJSON_AddNumberToObject(root, "format_version", CACHE_FORMAT_VERSION);
  cJSON_AddStringToObject(root, "library_version", c->library_version);
  cJSON *dev = cJSON_AddObjectToObject(root, "device");
  cJSON_AddStringToObject(dev, "name", c->device_name);
  cJSON_AddNumberToObject(dev, "cc", c->cc);
  cJSON *ver = cJSON_AddObjectToObject(root, "versions");
  cJSON_AddNumberToObject(ver, "cublaslt", c->cublaslt_version);
  cJSON_AddNumberToObject(ver, "cudnn", c->cudnn_version);
  cJSON *arr = cJSON_AddArrayToObject(root, "entries");
  for (int i = 0; i < c->count; i++) {
    const cache_entry *e = &c->entries[i];
    /* set and load admit plausible times only; a number JSON cannot hold is never written */
    if (!fp4_tuning_time_plausible(e->median_us)) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "op", op_name(e->key.op));
    cJSON_AddStringToObject(o, "format", fp4_format_name(e->key.format));
    cJSON_AddStringToObject(o, "a_dtype", fp4_dtype_name(e->key.a_dtype));
    cJSON_AddStringToObject(o, "out_dtype", fp4_dtype_name(e->key.out_dtype));
    cJSON_AddNumberToObject(o, "m_bucket", (double)e->key.m);
    cJSON_AddNumberToObject(o, "n", (double)e->key.n);
    cJSON_AddNumberToObject(o, "k", (double)e->key.k);
    cJSON_AddStringToObject(o, "backend", e->backend);
    cJSON_AddStringToObject(o, "config", e->config);
    cJSON_AddNumberToObject(o, "median_us", e->median_us);
    cJSON_AddItemToArray(arr, o);
  }
  return root;
}

char *fp4_tuning_cache_text(const fp4_tuning_cache *cache) {
  cJSON *root = to_json(cache);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  return text;
}

static const char *str_field(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An integer field in [lo, hi]; 0 when absent, not a number or not an integer in range. */
static int int_field(const cJSON *o, const char *name, double lo, double hi, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= lo && d <= hi) || d != (double)(int64_t)d) return 0;
  *out = (int64_t)d;
  return 1;
}

/* One entry of the file into e; "" in why when it is valid, else the first thing wrong. */
static void entry_from_json(const cJSON *o, cache_entry *e, char *why, size_t why_size) {
  memset(e, 0, sizeof *e);
  why[0] = 0;
  if (!cJSON_IsObject(o)) {
    fp4_reason(why, why_size, "not a JSON object");
    return;
  }
  static const char *const strings[] = {"op", "format", "a_dtype", "out_dtype", "backend", "config"};
  const char *s[6];
  for (int i = 0; i < 6; i++)
    if (!(s[i] = str_field(o, strings[i]))) {
      fp4_reason(why, why_size, "'%s' is missing or not a string", strings[i]);
      return;
    }
  static const char *const ints[] = {"m_bucket", "n", "k"};
  int64_t *dims[3] = {&e->key.m, &e->key.n, &e->key.k};
  for (int i = 0; i < 3; i++)
    if (!int_field(o, ints[i], 1, 9e15, dims[i])) {
      fp4_reason(why, why_size, "'%s' is missing or not an integer from 1 to 9e15", ints[i]);
      return;
    }
  const cJSON *us = cJSON_GetObjectItemCaseSensitive(o, "median_us");
  if (!parse_op(s[0], &e->key.op)) fp4_reason(why, why_size, "unknown op '%.40s'", s[0]);
  else if (!parse_format(s[1], &e->key.format)) fp4_reason(why, why_size, "unknown format '%.40s'", s[1]);
  else if (!parse_dtype(s[2], &e->key.a_dtype)) fp4_reason(why, why_size, "unknown a_dtype '%.40s'", s[2]);
  else if (!parse_dtype(s[3], &e->key.out_dtype)) fp4_reason(why, why_size, "unknown out_dtype '%.40s'", s[3]);
  else if (fp4_tune_m_bucket(e->key.m) != e->key.m)
    fp4_reason(why, why_size, "m_bucket %lld is not an M bucket", (long long)e->key.m);
  else if (!cJSON_IsNumber(us)) fp4_reason(why, why_size, "'median_us' is missing or not a number");
  else value_problem(s[4], s[5], us->valuedouble, why, why_size);
  if (!why[0]) fp4_tune_key_problem(&e->key, why, why_size);
  if (why[0]) return;
  fp4_reason(e->backend, sizeof e->backend, "%s", s[4]);
  fp4_reason(e->config, sizeof e->config, "%s", s[5]);
  e->median_us = us->valuedouble;
}

/* Loads each valid entry; each invalid one is skipped with a warning naming it (index and text).
 * *skipped receives how many were skipped and first_why the first one's reason. */
static fp4_status entries_from_json(fp4_tuning_cache *c, const cJSON *arr, const char *path, int *skipped,
                                    char *first_why, size_t first_why_size) {
  if (!cJSON_IsArray(arr)) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: 'entries' is not an array", path);
  int i = 0;
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    cache_entry e;
    char why[200];
    entry_from_json(o, &e, why, sizeof why);
    if (why[0]) {
      if (!*skipped) fp4_reason(first_why, first_why_size, "entry %d: %s", i, why);
      if (++*skipped <= CACHE_WARN_ENTRIES) {
        char *text = cJSON_PrintUnformatted(o);
        fp4_log(FP4_LOG_WARN, "tuning cache %s: entry %d skipped (%s): %.200s%s", path, i, why, text ? text : "?",
                text && strlen(text) > 200 ? "..." : "");
        free(text);
      }
    } else {
      fp4_status st = put_entry(c, &e, "fp4_tuning_cache_load");
      if (st) return st;
    }
    i++;
  }
  if (*skipped > CACHE_WARN_ENTRIES)
    fp4_log(FP4_LOG_WARN, "tuning cache %s: %d more invalid entries skipped", path, *skipped - CACHE_WARN_ENTRIES);
  return FP4_OK;
}

static fp4_status from_json(fp4_tuning_cache *c, const cJSON *root, const char *path, int *skipped, char *first_why,
                            size_t first_why_size) {
  if (!cJSON_IsObject(root)) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: not a JSON object", path);
  const char *fmt = str_field(root, "format");
  int64_t fv = 0;
  if (!fmt || strcmp(fmt, CACHE_FORMAT) || !int_field(root, "format_version", 0, 1e9, &fv))
    return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: not an fp4kit tuning cache", path);
  if (fv != CACHE_FORMAT_VERSION)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "tuning cache %s: format version %lld, this library reads %d", path,
                    (long long)fv, CACHE_FORMAT_VERSION);
  const char *lib = str_field(root, "library_version");
  if (!lib) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: no library_version", path);
  if (strcmp(lib, c->library_version))
    return fp4_fail(FP4_ERR_UNSUPPORTED, "tuning cache %s: written by fp4kit %.40s, this is %s; re-run fp4kit tune",
                    path, lib, c->library_version);
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "versions");
  const char *name = str_field(dev, "name");
  int64_t cc = 0, lt = 0, dnn = 0;
  if (!name || !int_field(dev, "cc", 0, 1e4, &cc) || !int_field(ver, "cublaslt", 0, 1e9, &lt) ||
      !int_field(ver, "cudnn", 0, 1e9, &dnn))
    return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: device or versions missing", path);
  if (strcmp(name, c->device_name) || cc != c->cc)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "tuning cache %s: tuned on '%.128s' (cc %lld), this is '%s' (cc %d)", path,
                    name, (long long)cc, c->device_name, c->cc);
  if (lt != c->cublaslt_version || dnn != c->cudnn_version)
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "tuning cache %s: tuned with cuBLASLt %lld / cuDNN %lld, this process has %d / %d", path,
                    (long long)lt, (long long)dnn, c->cublaslt_version, c->cudnn_version);
  return entries_from_json(c, cJSON_GetObjectItemCaseSensitive(root, "entries"), path, skipped, first_why,
                           first_why_size);
}

fp4_status fp4_tuning_cache_parse(fp4_tuning_cache *cache, const char *text, size_t len, const char *name) {
  cache->count = 0;
  cache->generation = next_generation();
  if (len == 0) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: empty file", name);
  if (memchr(text, 0, len)) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: binary data (NUL bytes), not JSON", name);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (root && end && (size_t)(end - text) < len) {
    /* what follows the value may only be white space */
    for (const char *p = end; p < text + len && root; p++)
      if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
        cJSON_Delete(root);
        root = NULL;
        end = p;
      }
  }
  if (!root) {
    long off = end ? (long)(end - text) : -1;
    return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: not valid JSON (truncated or garbage) near byte %ld", name, off);
  }
  int skipped = 0;
  char first_why[256] = "";
  fp4_status st = from_json(cache, root, name, &skipped, first_why, sizeof first_why);
  cJSON_Delete(root);
  if (st) {
    cache->count = 0; /* a file that is not a usable cache is never half-trusted */
    cache->generation = next_generation();
    return st;
  }
  fp4_clear_error();
  /* Success; the detail says what was skipped, for callers that report it. */
  if (skipped)
    fp4_fail(FP4_OK, "tuning cache %s: %d invalid %s skipped (first: %s)", name, skipped,
             skipped == 1 ? "entry" : "entries", first_why);
  return FP4_OK;
}

/* A cache is small; anything past 64 MiB is not one. */
enum { CACHE_MAX_BYTES = 64 << 20 };

/* Up to size bytes of the file at path into buf: *n of them, *whole set when that was all of it. A
 * file that cannot be opened is FP4_ERR_NOT_FOUND, a read error FP4_ERR_IO. */
static fp4_status read_head(const char *path, char *buf, size_t size, size_t *n, int *whole) {
  *n = 0;
  *whole = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return fp4_fail(FP4_ERR_NOT_FOUND, "tuning cache %s: %s", path, strerror(errno));
  *n = fread(buf, 1, size, f);
  const int err = ferror(f);
  *whole = feof(f) != 0;
  fclose(f);
  return err ? fp4_fail(FP4_ERR_IO, "tuning cache %s: read error", path) : FP4_OK;
}

/* The bytes of the file at path into *text (malloc'ed, *len of them; the caller frees it). A file that
 * cannot be opened is FP4_ERR_NOT_FOUND, one past CACHE_MAX_BYTES FP4_ERR_FORMAT. */
static fp4_status read_cache_text(const char *path, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  char *t = malloc((size_t)CACHE_MAX_BYTES + 1);
  if (!t) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "tuning cache %s: out of host memory", path);
  size_t n = 0;
  int whole = 0;
  fp4_status st = read_head(path, t, (size_t)CACHE_MAX_BYTES + 1, &n, &whole);
  if (!st && n > CACHE_MAX_BYTES) st = fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: larger than %d bytes", path, CACHE_MAX_BYTES);
  if (st) {
    free(t);
    return st;
  }
  *text = t;
  *len = n;
  return FP4_OK;
}

fp4_status fp4_tuning_cache_load(fp4_tuning_cache *cache, const char *path) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_load";
  if (!cache || !path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, cache ? "path" : "cache");
  cache->count = 0;
  cache->generation = next_generation();
  char *text = NULL;
  size_t n = 0;
  fp4_status st = read_cache_text(path, &text, &n);
  if (!st) st = fp4_tuning_cache_parse(cache, text, n, path);
  free(text);
  return st;
}

/* ---- saving ---------------------------------------------------------------------------------------- */

/* mkdir -p of the folder holding path. */
static fp4_status make_parent(const char *path) {
  char dir[4096];
  if (strlen(path) >= sizeof dir)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_save: path too long");
  memcpy(dir, path, strlen(path) + 1);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return FP4_OK;
  *slash = 0;
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(dir, 0755) && errno != EEXIST) return fp4_fail(FP4_ERR_IO, "fp4_tuning_cache_save: mkdir %s: %s", dir, strerror(errno));
    *p = '/';
  }
  if (mkdir(dir, 0755) && errno != EEXIST) return fp4_fail(FP4_ERR_IO, "fp4_tuning_cache_save: mkdir %s: %s", dir, strerror(errno));
  return FP4_OK;
}

/* Takes the advisory lock of path (<path>.lock beside it, created if missing, never through a
 * link); *fd receives the descriptor to close, which releases it. */
static fp4_status lock_cache(const char *path, int *fd) {
  static const char fn[] = "fp4_tuning_cache_save";
  char lock[4200];
  snprintf(lock, sizeof lock, "%s.lock", path);
  *fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (*fd < 0) return fp4_fail(FP4_ERR_IO, "%s: cannot open the lock file %s: %s", fn, lock, strerror(errno));
  struct stat sb;
  if (fstat(*fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(*fd);
    *fd = -1;
    return fp4_fail(FP4_ERR_IO, "%s: the lock file %s is not a regular file", fn, lock);
  }
  int r;
  while ((r = flock(*fd, LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (r && (errno == ENOLCK || errno == EOPNOTSUPP)) {
    /* a file system without locks: the save still replaces the file atomically */
    fp4_log(FP4_LOG_WARN, "%s: %s cannot be locked here (%s): a concurrent save may lose entries", fn, lock,
            strerror(errno));
  } else if (r) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return fp4_fail(FP4_ERR_IO, "%s: cannot lock %s: %s", fn, lock, strerror(e));
  }
  return FP4_OK;
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Creates a new file beside path under an unpredictable name (<path>.tmp.XXXXXXXXXXXX), exclusively
 * and never through a link; mode 0666 less the umask, as any new file. */
static int create_temporary(const char *path, char *tmp, size_t tmp_size) {
  static const char digits[] = "abcdefghijklmnopqrstuvwxyz012345";
  static uint64_t counter;
  for (int attempt = 0; attempt < 100; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t r = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 40) ^
                       (uint64_t)(uintptr_t)&ts ^ mix64(__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)));
    char name[13];
    for (int i = 0; i < 12; i++, r >>= 5) name[i] = digits[r & 31];
    name[12] = 0;
    if (snprintf(tmp, tmp_size, "%s.tmp.%s", path, name) >= (int)tmp_size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

/* text into a temporary file beside path, then renamed over path. mode: the permissions the file
 * keeps (those of the file it replaces), or -1 for a new file's (0666 less the umask). */
static fp4_status replace_file(const char *path, const char *text, int mode) {
  static const char fn[] = "fp4_tuning_cache_save";
  char tmp[4200];
  int fd = create_temporary(path, tmp, sizeof tmp);
  if (fd < 0) return fp4_fail(FP4_ERR_IO, "%s: cannot create a temporary file beside %s: %s", fn, path, strerror(errno));
  /* set while the file is still empty: the text is never readable beyond what the old file allowed */
  int ok = (mode < 0 || fchmod(fd, (mode_t)mode) == 0) && write_all(fd, text, strlen(text)) && write_all(fd, "\n", 1) &&
           fsync(fd) == 0;
  int e = errno;
  if (close(fd) != 0 && ok) ok = 0, e = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, e = errno;
  if (!ok) {
    unlink(tmp);
    return fp4_fail(FP4_ERR_IO, "%s: writing %s: %s", fn, path, strerror(e));
  }
  return FP4_OK;
}

static const char *skip_blanks(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
  return p;
}

/* Whether text (len bytes) is recognisably a tuning cache, even a damaged one: blank, or a JSON object
 * whose text names the format ("format": "fp4kit-tuning-cache", the first member every save writes,
 * so a truncated cache keeps it). Anything else may be a file the path names by mistake. */

static int looks_like_cache(const char *text, size_t len) {
  static const char key[] = "\"format\"", value[] = "\"" CACHE_FORMAT "\"";
  const char *const end = text + len, *p = skip_blanks(text, end);
  if (p == end) return 1; /* nothing that could be lost */
  if (*p != '{') return 0;
  for (; (size_t)(end - p) >= sizeof key - 1; p++) {
    if (memcmp(p, key, sizeof key - 1)) continue;
    const char *q = skip_blanks(p + sizeof key - 1, end);
    if (q == end || *q != ':') continue;
    q = skip_blanks(q + 1, end);
    if ((size_t)(end - q) >= sizeof value - 1 && !memcmp(q, value, sizeof value - 1)) return 1;
  }
  return 0;
}

/* The refusals of a save that finds a file it may not replace: one that cannot be read (the read's
 * error in fp4_last_error()), and one that is not recognisably a tuning cache (why: what gave it away). */
static fp4_status refuse_unreadable(const char *path) {
  char why[512];
  fp4_reason(why, sizeof why, "%s", fp4_last_error());
  return fp4_fail(FP4_ERR_IO, "fp4_tuning_cache_save: %s exists but cannot be read (%s); it is left as it is", path, why);
}

static fp4_status refuse_not_cache(const char *path, const char *why) {
  return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                  "fp4_tuning_cache_save: %s exists and is not an fp4kit tuning cache (%s); it is left as it is: "
                  "remove it or give another path",
                  path, why);
}

static const char no_format_member[] = "no JSON object naming \"format\": \"" CACHE_FORMAT "\"";

/* What stat says of the file at path: *exists 0 when there is none; a folder or other non-regular
 * file, or one larger than any cache, is refused. */
static fp4_status stat_replaceable(const char *path, int *exists, struct stat *sb) {
  *exists = 0;
  if (stat(path, sb) != 0) return FP4_OK; /* no file yet (a folder that cannot be searched fails later, naming it) */
  *exists = 1;
  if (!S_ISREG(sb->st_mode))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_save: %s exists and is not a regular file; it is left as it is",
                    path);
  if (sb->st_size > CACHE_MAX_BYTES) return refuse_not_cache(path, "larger than any cache");
  return FP4_OK;
}

/* The check a save makes before it creates the lock file beside path, so that a refused file gets
 * no lock file beside it: stat, then the first bytes, which name the format in every cache a save
 * wrote; only a longer file that starts as a JSON object but names no format there (a cache edited
 * by hand, or another tool's JSON) is read whole. The read under the lock (read_replaceable) decides
 * again, for a file that changed in between. */
static fp4_status read_replaceable(const char *path, char **text, size_t *len, int *mode);

static fp4_status check_replaceable(const char *path) {
  int exists = 0;
  struct stat sb;
  fp4_status st = stat_replaceable(path, &exists, &sb);
  if (st || !exists) return st;
  char head[4096];
  size_t n = 0;
  int whole = 0;
  if (read_head(path, head, sizeof head, &n, &whole)) return refuse_unreadable(path);
  if (looks_like_cache(head, n)) return FP4_OK;
  const char *p = skip_blanks(head, head + n);
  if (whole || (p < head + n && *p != '{')) return refuse_not_cache(path, no_format_member);
  char *text = NULL;
  size_t len = 0;
  int mode = -1;
  st = read_replaceable(path, &text, &len, &mode);
  free(text);
  return st;
}

/* The file at path, when there is one, if a save may replace it: *text receives its bytes (malloc'ed,
 * *len of them) and *mode its permissions; NULL and -1 when there is no file. A folder or other
 * non-regular file, a file that cannot be read, or one that is not recognisably a tuning cache is
 * refused: a save never destroys what it cannot tell is a cache. */
static fp4_status read_replaceable(const char *path, char **text, size_t *len, int *mode) {
  *text = NULL;
  *len = 0;
  *mode = -1;
  int exists = 0;
  struct stat sb;
  fp4_status st = stat_replaceable(path, &exists, &sb);
  if (st || !exists) return st;
  st = read_cache_text(path, text, len);
  if (st == FP4_ERR_NOT_FOUND || st == FP4_ERR_IO) return refuse_unreadable(path);
  if (st == FP4_ERR_FORMAT) return refuse_not_cache(path, "larger than any cache"); /* grew since the stat */
  if (st) return st;
  if (!looks_like_cache(*text, *len)) {
    free(*text);
    *text = NULL;
    return refuse_not_cache(path, no_format_member);
  }
  *mode = (int)(sb.st_mode & 0777);
  return FP4_OK;
}

/* The cache to write: the entries of the file's text (when it is a usable cache of the same library,
 * device and versions; NULL when there is no file), overridden by cache's entries set in this
 * process, plus cache's other entries whose keys the file lacks. */
static fp4_status merged_with_file(const fp4_tuning_cache *cache, const char *path, const char *text, size_t len,
                                   fp4_tuning_cache **out) {
  static const char fn[] = "fp4_tuning_cache_save";
  *out = NULL;
  fp4_tuning_cache *m = calloc(1, sizeof *m);
  if (!m) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  *m = *cache;
  m->entries = NULL;
  m->count = m->capacity = 0;
  if (text && fp4_tuning_cache_parse(m, text, len, path) != FP4_OK)
    fp4_log(FP4_LOG_WARN, "%s: replacing %s, which is not a usable cache: %s", fn, path, fp4_last_error());
  fp4_status st = FP4_OK;
  for (int i = 0; i < cache->count && !st; i++) {
    const cache_entry *e = &cache->entries[i];
    if (e->dirty || find_entry(m, &e->key) < 0) st = put_entry(m, e, fn);
  }
  if (st) {
    fp4_tuning_cache_destroy(m);
    return st;
  }
  *out = m;
  return FP4_OK;
}

/* The file a save writes: path itself, or when path is a symbolic link, the file it leads to (through
 * every link), which must exist: a link is written through, never replaced by a file, and a dangling
 * one is refused rather than followed to create a file wherever it points. */
static fp4_status resolve_target(const char *path, char *target, size_t target_size) {
  static const char fn[] = "fp4_tuning_cache_save";
  struct stat sb;
  if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
    fp4_reason(target, target_size, "%s", path); /* missing (created) or not a link */
    return FP4_OK;
  }
  char *real = realpath(path, NULL);
  if (!real && errno == ENOENT)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                    "%s: %s is a symbolic link to a file that does not exist; no file is created through it: give "
                    "the target's path",
                    fn, path);
  if (!real) return fp4_fail(FP4_ERR_IO, "%s: cannot follow the symbolic link %s: %s", fn, path, strerror(errno));
  const size_t n = strlen(real);
  if (n >= target_size) {
    free(real);
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s leads to a path longer than %zu bytes", fn, path, target_size - 1);
  }
  memcpy(target, real, n + 1);
  free(real);
  return FP4_OK;
}

fp4_status fp4_tuning_cache_save(const fp4_tuning_cache *cache, const char *path) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_save";
  if (!cache || !path || !*path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL or empty", fn, cache ? "path" : "cache");
  if (strlen(path) >= 4096) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: path longer than 4095 bytes", fn);
  char target[4096], *text = NULL;
  size_t len = 0;
  int mode = -1;
  fp4_status st = make_parent(path);
  if (!st) st = resolve_target(path, target, sizeof target);
  /* A file that may not be replaced is refused before the lock file is created beside it: stat and its
   * first bytes tell, without reading it all twice. */
  if (!st) st = check_replaceable(target);
  if (st) return st;
  int lock = -1;
  if ((st = lock_cache(target, &lock))) return st;
  /* Under the lock, the file there now decides what is merged and the permissions kept. */
  st = read_replaceable(target, &text, &len, &mode);
  fp4_tuning_cache *merged = NULL;
  if (!st) st = merged_with_file(cache, target, text, len, &merged);
  free(text);
  text = NULL;
  if (!st && !(text = fp4_tuning_cache_text(merged))) st = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  if (!st) st = replace_file(target, text, mode);
  free(text);
  fp4_tuning_cache_destroy(merged);
  close(lock);
  if (!st) fp4_clear_error();
  return st;
}

fp4_status fp4_tuning_cache_default_path(char *path, size_t path_size) {
  fp4_clear_error();
  if (!path || !path_size) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_default_path: path is NULL or empty");
  path[0] = 0;
  const char *env = getenv("FP4KIT_TUNING_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(path, path_size, "%s", env);
  else if (xdg && *xdg) n = snprintf(path, path_size, "%s/fp4kit/tuning.json", xdg);
  else if (home && *home) n = snprintf(path, path_size, "%s/.cache/fp4kit/tuning.json", home);
  else return fp4_fail(FP4_ERR_NOT_FOUND, "fp4_tuning_cache_default_path: none of FP4KIT_TUNING_CACHE, XDG_CACHE_HOME, HOME is set");
  if (n < 0 || (size_t)n >= path_size) {
    path[0] = 0;
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_default_path: path longer than %zu bytes", path_size);
  }
  return FP4_OK;
}
