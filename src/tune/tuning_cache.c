#define _POSIX_C_SOURCE 200809L
/*
 * The persistent tuning cache: winners per (M bucket, N, K, formats, output dtype), stamped with the
 * library version, the device (name, compute capability) and the vendor-library versions. A file
 * that is missing, truncated, malformed or from another version or device is never trusted: load
 * leaves the cache empty and says why. Saves go to a temporary file renamed over the target, so a
 * concurrent reader sees one whole file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "dispatch/backend.h"

#define CACHE_FORMAT "fp4kit-tuning-cache"
#define CACHE_FORMAT_VERSION 1

typedef struct cache_entry {
  fp4_tune_key key; /* m holds the bucket */
  char backend[32];
  char config[64];
  double median_us;
} cache_entry;

struct fp4_tuning_cache {
  char library_version[16];
  char device_name[128];
  int cc;
  int cublaslt_version;
  int cudnn_version;
  cache_entry *entries;
  int count, capacity;
};

int64_t fp4_tune_m_bucket(int64_t m) {
  if (m <= 1) return 1;
  if (m <= 256) {
    int64_t b = 1;
    while (b < m) b <<= 1;
    return b;
  }
  if (m <= 2048) return (m + 255) / 256 * 256;
  if (m <= 4096) return (m + 511) / 512 * 512;
  int64_t b = 4096;
  while (b < m && b < ((int64_t)1 << 62)) b <<= 1;
  return b;
}

fp4_status fp4_tuning_cache_create(fp4_context *ctx, fp4_tuning_cache **cache) {
  fp4_clear_error();
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_tuning_cache_create: cache is NULL");
  *cache = NULL;
  fp4_tuning_cache *c = calloc(1, sizeof *c);
  if (!c) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_tuning_cache_create: out of host memory");
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

static fp4_status check_key(const char *fn, const fp4_tune_key *key) {
  if (!key) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key is NULL", fn);
  if (key->op != FP4_TUNE_MM && key->op != FP4_TUNE_MM_W4A16)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key->op (%d) is not a tuned operation", fn, (int)key->op);
  if (!fp4_format_name(key->format) || !fp4_dtype_name(key->a_dtype) || !fp4_dtype_name(key->out_dtype))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key has an unknown format or dtype", fn);
  if (key->m < 1 || key->n < 1 || key->k < 1)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: key shape [%lld, %lld, %lld] must be positive", fn,
                    (long long)key->m, (long long)key->n, (long long)key->k);
  return FP4_OK;
}

fp4_status fp4_tuning_cache_set(fp4_tuning_cache *cache, const fp4_tune_key *key, const char *backend,
                                const char *config, double median_us) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_set";
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  fp4_status st = check_key(fn, key);
  if (st) return st;
  if (!backend || !*backend || strlen(backend) >= sizeof cache->entries->backend)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: backend name is NULL, empty or too long", fn);
  if (config && strlen(config) >= sizeof cache->entries->config)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: config name '%s' is too long", fn, config);
  fp4_tune_key k = *key;
  k.m = fp4_tune_m_bucket(key->m);
  cache_entry *e = NULL;
  for (int i = 0; i < cache->count && !e; i++)
    if (same_key(&cache->entries[i].key, &k)) e = &cache->entries[i];
  if (!e) {
    if (cache->count == cache->capacity) {
      int cap = cache->capacity ? 2 * cache->capacity : 16;
      cache_entry *grown = realloc(cache->entries, sizeof *grown * (size_t)cap);
      if (!grown) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
      cache->entries = grown;
      cache->capacity = cap;
    }
    e = &cache->entries[cache->count++];
  }
  memset(e, 0, sizeof *e);
  e->key = k;
  fp4_reason(e->backend, sizeof e->backend, "%s", backend);
  fp4_reason(e->config, sizeof e->config, "%s", config ? config : "");
  e->median_us = median_us;
  return FP4_OK;
}

fp4_status fp4_tuning_cache_lookup(const fp4_tuning_cache *cache, const fp4_tune_key *key, char *backend,
                                   size_t backend_size, char *config, size_t config_size) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_lookup";
  if (!cache) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  fp4_status st = check_key(fn, key);
  if (st) return st;
  fp4_tune_key k = *key;
  k.m = fp4_tune_m_bucket(key->m);
  for (int i = 0; i < cache->count; i++) {
    const cache_entry *e = &cache->entries[i];
    if (!same_key(&e->key, &k)) continue;
    fp4_reason(backend, backend_size, "%s", e->backend);
    fp4_reason(config, config_size, "%s", e->config);
    return FP4_OK;
  }
  return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no entry for M bucket %lld, N %lld, K %lld", fn, (long long)k.m,
                  (long long)k.n, (long long)k.k);
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

static fp4_status entries_from_json(fp4_tuning_cache *c, const cJSON *arr, const char *path) {
  if (!cJSON_IsArray(arr)) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: 'entries' is not an array", path);
  int i = 0;
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    fp4_tune_key k = {0};
    const char *op = str_field(o, "op"), *fmt = str_field(o, "format"), *ad = str_field(o, "a_dtype"),
               *od = str_field(o, "out_dtype"), *be = str_field(o, "backend"), *cfg = str_field(o, "config");
    const cJSON *us = cJSON_GetObjectItemCaseSensitive(o, "median_us");
    int ok = op && fmt && ad && od && be && cfg && cJSON_IsNumber(us) && parse_op(op, &k.op) &&
             parse_format(fmt, &k.format) && parse_dtype(ad, &k.a_dtype) && parse_dtype(od, &k.out_dtype) &&
             int_field(o, "m_bucket", 1, 9e15, &k.m) && int_field(o, "n", 1, 9e15, &k.n) &&
             int_field(o, "k", 1, 9e15, &k.k) && fp4_tune_m_bucket(k.m) == k.m && *be &&
             strlen(be) < sizeof c->entries->backend && strlen(cfg) < sizeof c->entries->config &&
             fp4_registry_find(be) != NULL;
    if (!ok) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: entry %d is malformed or names an unknown backend", path, i);
    if (fp4_tuning_cache_set(c, &k, be, *cfg ? cfg : NULL, us->valuedouble))
      return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: entry %d: %s", path, i, fp4_last_error());
    i++;
  }
  return FP4_OK;
}

static fp4_status from_json(fp4_tuning_cache *c, const cJSON *root, const char *path) {
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
    return fp4_fail(FP4_ERR_UNSUPPORTED, "tuning cache %s: written by fp4kit %s, this is %s; re-run fp4kit tune", path,
                    lib, c->library_version);
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "versions");
  const char *name = str_field(dev, "name");
  int64_t cc = 0, lt = 0, dnn = 0;
  if (!name || !int_field(dev, "cc", 0, 1e4, &cc) || !int_field(ver, "cublaslt", 0, 1e9, &lt) ||
      !int_field(ver, "cudnn", 0, 1e9, &dnn))
    return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: device or versions missing", path);
  if (strcmp(name, c->device_name) || cc != c->cc)
    return fp4_fail(FP4_ERR_UNSUPPORTED, "tuning cache %s: tuned on '%s' (cc %lld), this is '%s' (cc %d)", path, name,
                    (long long)cc, c->device_name, c->cc);
  if (lt != c->cublaslt_version || dnn != c->cudnn_version)
    return fp4_fail(FP4_ERR_UNSUPPORTED,
                    "tuning cache %s: tuned with cuBLASLt %lld / cuDNN %lld, this process has %d / %d", path,
                    (long long)lt, (long long)dnn, c->cublaslt_version, c->cudnn_version);
  return entries_from_json(c, cJSON_GetObjectItemCaseSensitive(root, "entries"), path);
}

fp4_status fp4_tuning_cache_load(fp4_tuning_cache *cache, const char *path) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_load";
  if (!cache || !path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, cache ? "path" : "cache");
  cache->count = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return fp4_fail(FP4_ERR_NOT_FOUND, "tuning cache %s: %s", path, strerror(errno));
  /* A cache is small; anything past 64 MiB is not one. */
  enum { MAX_BYTES = 64 << 20 };
  char *text = malloc(MAX_BYTES + 1);
  if (!text) {
    fclose(f);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  size_t n = fread(text, 1, MAX_BYTES + 1, f);
  int err = ferror(f);
  fclose(f);
  fp4_status st = FP4_OK;
  if (err) st = fp4_fail(FP4_ERR_IO, "tuning cache %s: read error", path);
  else if (n > MAX_BYTES) st = fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: larger than %d bytes", path, MAX_BYTES);
  else if (n == 0) st = fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: empty file", path);
  if (st) {
    free(text);
    return st;
  }
  text[n] = 0;
  const char *end = NULL;
  cJSON *root = strlen(text) == n ? cJSON_ParseWithOpts(text, &end, 1) : NULL; /* a NUL byte: garbage */
  if (!root) {
    long off = end ? (long)(end - text) : -1;
    free(text);
    if (off < 0) return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: binary data (NUL bytes), not JSON", path);
    return fp4_fail(FP4_ERR_FORMAT, "tuning cache %s: not valid JSON (truncated or garbage) near byte %ld", path, off);
  }
  free(text);
  st = from_json(cache, root, path);
  cJSON_Delete(root);
  if (st) cache->count = 0; /* never half-trusted */
  return st;
}

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

fp4_status fp4_tuning_cache_save(const fp4_tuning_cache *cache, const char *path) {
  fp4_clear_error();
  static const char fn[] = "fp4_tuning_cache_save";
  if (!cache || !path || !*path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is NULL or empty", fn, cache ? "path" : "cache");
  fp4_status st = make_parent(path);
  if (st) return st;
  cJSON *root = to_json(cache);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(text);
    return fp4_fail(FP4_ERR_IO, "%s: cannot create %s: %s", fn, tmp, strerror(errno));
  }
  size_t len = strlen(text);
  int ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  free(text);
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return fp4_fail(FP4_ERR_IO, "%s: writing %s: %s", fn, path, strerror(e));
  }
  return FP4_OK;
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
