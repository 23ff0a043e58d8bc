/* The tuning cache: M buckets, round trip, atomic saves under concurrent readers, and every way a
 * file can be unusable (missing, empty, truncated, garbage, another version or device) is refused
 * whole with a reason, never fatal; an invalid entry in a usable file is skipped alone, with a
 * warning naming it; auto never follows an entry it cannot trust; the tuner fills the cache on the
 * host. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4kit.h"

static int failures;
#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      failures++;                                           \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                  \
      printf("\n");                                         \
    }                                                       \
  } while (0)

static char dir[256];

static int cli_count_in(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; s && (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static void path_of(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", dir, name); }

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *t = malloc(1 << 20);
  *len = fread(t, 1, (1 << 20) - 1, f);
  t[*len] = 0;
  fclose(f);
  return t;
}

static void write_text(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  fwrite(text, 1, len, f);
  fclose(f);
}

static void test_buckets(void) {
  static const int64_t in[] = {0, 1, 2, 3, 5, 255, 256, 257, 300, 513, 2048, 2049, 2560, 2561, 4096, 4097, 8192, 10000};
  static const int64_t out[] = {1, 1, 2, 4, 8, 256, 256, 512, 512, 768, 2048, 2560, 2560, 3072, 4096, 8192, 8192, 16384};
  for (size_t i = 0; i < sizeof in / sizeof *in; i++)
    CHECK(fp4_tune_m_bucket(in[i]) == out[i], "bucket(%lld) = %lld, expected %lld", (long long)in[i],
          (long long)fp4_tune_m_bucket(in[i]), (long long)out[i]);
  for (int64_t m = 1; m < 20000; m += 7) {
    int64_t b = fp4_tune_m_bucket(m);
    CHECK(b >= m && fp4_tune_m_bucket(b) == b, "bucket(%lld) = %lld", (long long)m, (long long)b);
  }
  /* M is rounded up as far as int64 holds a power of two; beyond 2^62 there is no bucket (-1), never
   * one below M. */
  const int64_t p31 = (int64_t)1 << 31, p62 = (int64_t)1 << 62;
  CHECK(fp4_tune_m_bucket(p31) == p31 && fp4_tune_m_bucket(p31 + 1) == 2 * p31, "bucket(2^31 + 1) = %lld",
        (long long)fp4_tune_m_bucket(p31 + 1));
  CHECK(fp4_tune_m_bucket(p62) == p62, "bucket(2^62) = %lld", (long long)fp4_tune_m_bucket(p62));
  CHECK(fp4_tune_m_bucket(p62 + 1) == -1 && fp4_tune_m_bucket(INT64_MAX) == -1, "bucket(2^62 + 1) = %lld, (max) = %lld",
        (long long)fp4_tune_m_bucket(p62 + 1), (long long)fp4_tune_m_bucket(INT64_MAX));
}

/* A key names a GEMM a call can make, or every function that takes one refuses it: an entry no call
 * would ever find (a W4A4 key with 16-bit activations, M beyond any GEMM) is never stored, looked up,
 * tuned or loaded. */
static void test_keys_name_calls(fp4_context *ctx) {
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(ctx, &c);
  const fp4_tune_key good = {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 4, 64, 64};
  static const struct {
    fp4_tune_op op;
    fp4_dtype a_dtype, out_dtype;
    int64_t m, k;
    const char *named;
  } bad[] = {{FP4_TUNE_MM, FP4_DTYPE_F32, FP4_DTYPE_BF16, 4, 64, "key->a_dtype (f32) must be FP4_DTYPE_E2M1X2"},
             {FP4_TUNE_MM, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 4, 64, "a_dtype (bf16)"},
             {FP4_TUNE_MM_W4A16, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 4, 64, "a_dtype (e2m1x2) must be bf16, f16 or f32"},
             {FP4_TUNE_MM_W4A16, FP4_DTYPE_E4M3, FP4_DTYPE_BF16, 4, 64, "a_dtype (e4m3)"},
             {FP4_TUNE_MM, FP4_DTYPE_E2M1X2, FP4_DTYPE_E2M1X2, 4, 64, "out_dtype (e2m1x2)"},
             {FP4_TUNE_MM, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, ((int64_t)1 << 62) + 1, 64, "key->m (4611686018427387905)"},
             {FP4_TUNE_MM, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, ((int64_t)1 << 31) + 1, 64, "outside [1, 2^31]"},
             {FP4_TUNE_MM, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 4, 40, "key->k (40) is not a positive multiple"}};
  char be[32], cfg[64];
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    fp4_tune_key k = good;
    k.op = bad[i].op, k.a_dtype = bad[i].a_dtype, k.out_dtype = bad[i].out_dtype, k.m = bad[i].m, k.k = bad[i].k;
    const char *field = strstr(bad[i].named, "->") ? strstr(bad[i].named, "->") + 2 : bad[i].named;
    CHECK(fp4_tuning_cache_set(c, &k, "cpu", NULL, 5.0) == FP4_ERR_INVALID_ARGUMENT &&
              strstr(fp4_last_error(), "fp4_tuning_cache_set: ") && strstr(fp4_last_error(), bad[i].named),
          "set, key %zu: %s", i, fp4_last_error());
    CHECK(fp4_tuning_cache_lookup(c, &k, be, sizeof be, cfg, sizeof cfg) == FP4_ERR_INVALID_ARGUMENT &&
              strstr(fp4_last_error(), bad[i].named),
          "lookup, key %zu: %s", i, fp4_last_error());
    CHECK(fp4_tune(ctx, &k, 1, 1, c, NULL, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT &&
              strstr(fp4_last_error(), "fp4_tune: keys[0].") && strstr(fp4_last_error(), field),
          "tune, key %zu: %s", i, fp4_last_error());
  }
  CHECK(fp4_tuning_cache_count(c) == 0, "nothing stored: %d", fp4_tuning_cache_count(c));
  /* the W4A4 key an fp4_mm call looks up is the one a set with e2m1x2 stores */
  CHECK(fp4_tuning_cache_set(c, &good, "cpu", "generic", 5.0) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_context_set_tuning_cache(ctx, c) == FP4_OK, "%s", fp4_last_error()); /* ctx owns c now */
  static uint8_t codes[64 * 32], scales[4096];
  static float o[4 * 64];
  fp4_qmatrix a = {codes, scales, 4, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix b = {codes, scales, 64, 64, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix out = {o, 4, 64, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
  fp4_run_info info;
  CHECK(fp4_mm(ctx, &a, &b, 1.0f, &out, &(fp4_options){.info = &info}) == FP4_OK && !strcmp(info.backend, "cpu") &&
            !strcmp(info.config, "generic"),
        "auto follows the W4A4 entry: %s:%s (%s)", info.backend, info.config, fp4_last_error());
  fp4_context_set_tuning_cache(ctx, NULL);
}

static fp4_tuning_cache *filled_cache(fp4_context *ctx) {
  fp4_tuning_cache *c = NULL;
  CHECK(fp4_tuning_cache_create(ctx, &c) == FP4_OK, "create: %s", fp4_last_error());
  fp4_tune_key k1 = {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 1, 4096, 4096};
  fp4_tune_key k2 = {FP4_TUNE_MM, FP4_FORMAT_MXFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_F16, 3000, 4096, 4096};
  fp4_tune_key k3 = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 16, 28672, 8192};
  CHECK(fp4_tuning_cache_set(c, &k1, "ref", NULL, 12.5) == FP4_OK, "set");
  CHECK(fp4_tuning_cache_set(c, &k2, "cublas-dequant", "heur1", 100.0) == FP4_OK, "set");
  CHECK(fp4_tuning_cache_set(c, &k3, "cublaslt", "heur0", 7.0) == FP4_OK, "set");
  CHECK(fp4_tuning_cache_set(c, &k3, "cudnn", NULL, 6.0) == FP4_OK, "replace");
  CHECK(fp4_tuning_cache_count(c) == 3, "3 entries, got %d", fp4_tuning_cache_count(c));
  return c;
}

static void test_round_trip(fp4_context *ctx) {
  char path[512], be[32], cfg[64];
  path_of(path, sizeof path, "sub/dir/cache.json"); /* folders are created */
  fp4_tuning_cache *c = filled_cache(ctx);
  CHECK(fp4_tuning_cache_save(c, path) == FP4_OK, "save: %s", fp4_last_error());
  fp4_tuning_cache *d = NULL;
  fp4_tuning_cache_create(ctx, &d);
  CHECK(fp4_tuning_cache_load(d, path) == FP4_OK, "load: %s", fp4_last_error());
  CHECK(fp4_tuning_cache_count(d) == 3, "count %d", fp4_tuning_cache_count(d));
  fp4_tune_key k2 = {FP4_TUNE_MM, FP4_FORMAT_MXFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_F16, 2600, 4096, 4096}; /* bucket 3072 */
  CHECK(fp4_tuning_cache_lookup(d, &k2, be, sizeof be, cfg, sizeof cfg) == FP4_OK && !strcmp(be, "cublas-dequant") &&
            !strcmp(cfg, "heur1"),
        "lookup k2: %s/%s", be, cfg);
  fp4_tune_key k3 = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 9, 28672, 8192};
  CHECK(fp4_tuning_cache_lookup(d, &k3, be, sizeof be, cfg, sizeof cfg) == FP4_OK && !strcmp(be, "cudnn") && !cfg[0],
        "lookup k3: %s/%s", be, cfg);
  fp4_tune_key other = k3;
  other.out_dtype = FP4_DTYPE_F32;
  CHECK(fp4_tuning_cache_lookup(d, &other, be, sizeof be, cfg, sizeof cfg) == FP4_ERR_NOT_FOUND, "out dtype is in the key");
  other = k3;
  other.m = 17;
  CHECK(fp4_tuning_cache_lookup(d, &other, be, sizeof be, cfg, sizeof cfg) == FP4_ERR_NOT_FOUND, "M bucket is in the key");
  /* No temporary file is left behind: the cache and its lock file only. */
  char sub[512];
  path_of(sub, sizeof sub, "sub/dir");
  DIR *dd = opendir(sub);
  int files = 0, lock = 0;
  for (struct dirent *e; dd && (e = readdir(dd));) {
    files += e->d_name[0] != '.';
    lock += !strcmp(e->d_name, "cache.json.lock");
  }
  if (dd) closedir(dd);
  CHECK(files == 2 && lock == 1, "%d files in the cache folder", files);
  fp4_tuning_cache_destroy(c);
  fp4_tuning_cache_destroy(d);
}

/* Loads path into a cache that has entries; expects the status and an emptied cache. */
static void expect_refused(fp4_context *ctx, const char *path, fp4_status expected, const char *what) {
  fp4_tuning_cache *c = filled_cache(ctx);
  fp4_status st = fp4_tuning_cache_load(c, path);
  CHECK(st == expected, "%s: %s, expected %s (%s)", what, fp4_status_str(st), fp4_status_str(expected), fp4_last_error());
  CHECK(fp4_tuning_cache_count(c) == 0, "%s: a refused file leaves the cache empty", what);
  CHECK(strlen(fp4_last_error()) > 10, "%s: a reason", what);
  printf("  %-22s %s\n", what, fp4_last_error());
  fp4_tuning_cache_destroy(c);
}

static void replace_in(const char *src, const char *dst, const char *from, const char *to) {
  size_t len = 0;
  char *t = read_text(src, &len);
  char *hit = t ? strstr(t, from) : NULL;
  CHECK(hit != NULL, "'%s' in the saved cache", from);
  if (!hit) {
    free(t);
    return;
  }
  FILE *f = fopen(dst, "wb");
  fwrite(t, 1, (size_t)(hit - t), f);
  fputs(to, f);
  fputs(hit + strlen(from), f);
  fclose(f);
  free(t);
}

static void test_refused_files(fp4_context *ctx) {
  char good[512], bad[512];
  path_of(good, sizeof good, "good.json");
  path_of(bad, sizeof bad, "bad.json");
  fp4_tuning_cache *c = filled_cache(ctx);
  CHECK(fp4_tuning_cache_save(c, good) == FP4_OK, "save");
  fp4_tuning_cache_destroy(c);
  size_t len = 0;
  char *text = read_text(good, &len);
  CHECK(text && len > 100, "saved text");

  path_of(bad, sizeof bad, "missing.json");
  expect_refused(ctx, bad, FP4_ERR_NOT_FOUND, "missing");
  path_of(bad, sizeof bad, "bad.json");
  write_text(bad, "", 0);
  expect_refused(ctx, bad, FP4_ERR_FORMAT, "empty");
  for (size_t cut = 1; cut < len - 2; cut += len / 7 + 1) {
    write_text(bad, text, cut);
    expect_refused(ctx, bad, FP4_ERR_FORMAT, "truncated");
  }
  char garbage[300];
  srand(7);
  for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (char)(rand() & 0xFF);
  write_text(bad, garbage, sizeof garbage);
  expect_refused(ctx, bad, FP4_ERR_FORMAT, "garbage");
  write_text(bad, "[1, 2, 3]", 9);
  expect_refused(ctx, bad, FP4_ERR_FORMAT, "not an object");
  write_text(bad, "{\"format\": \"something-else\"}", 28);
  expect_refused(ctx, bad, FP4_ERR_FORMAT, "another format");
  replace_in(good, bad, "\"library_version\":\t\"" FP4KIT_VERSION_STRING "\"", "\"library_version\":\t\"0.0.1\"");
  expect_refused(ctx, bad, FP4_ERR_UNSUPPORTED, "other library version");
  replace_in(good, bad, "\"name\":\t\"host\"", "\"name\":\t\"NVIDIA H200\"");
  expect_refused(ctx, bad, FP4_ERR_UNSUPPORTED, "other device");
  replace_in(good, bad, "\"cc\":\t0", "\"cc\":\t90");
  expect_refused(ctx, bad, FP4_ERR_UNSUPPORTED, "other cc");
  replace_in(good, bad, "\"cudnn\":\t0", "\"cudnn\":\t91900");
  expect_refused(ctx, bad, FP4_ERR_UNSUPPORTED, "other cuDNN");
  replace_in(good, bad, "\"format_version\":\t1", "\"format_version\":\t2");
  expect_refused(ctx, bad, FP4_ERR_UNSUPPORTED, "other format version");
  write_text(bad, "{\"format\": \"fp4kit-tuning-cache\"} x", 35);
  expect_refused(ctx, bad, FP4_ERR_FORMAT, "trailing garbage");
  free(text);
}

/* Everything fp4_log writes to stderr while a function runs (FP4KIT_LOG=warn is set in main). */
static char *logged(void (*fn)(void *), void *arg) {
  char log[512];
  path_of(log, sizeof log, "stderr.log");
  fflush(stdout);
  fflush(stderr);
  int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  size_t len = 0;
  return read_text(log, &len);
}

typedef struct load_call {
  fp4_tuning_cache *cache;
  const char *path;
  fp4_status st;
  char detail[512];
} load_call;

static void do_load(void *arg) {
  load_call *l = arg;
  l->st = fp4_tuning_cache_load(l->cache, l->path);
  snprintf(l->detail, sizeof l->detail, "%s", fp4_last_error());
}

/* One invalid entry costs only itself: each is skipped with a warning naming it, the valid ones load,
 * and a save writes only what loads again (never inf or NaN as null). */
static void test_invalid_entries_skipped(fp4_context *ctx) {
  char good[512], bad[512];
  path_of(good, sizeof good, "good.json");
  path_of(bad, sizeof bad, "bad.json");
  static const struct {
    const char *from, *to, *what, *named;
  } cases[] = {
      {"\"median_us\":\t12.5", "\"median_us\":\t1e999", "infinite time", "median_us"},
      {"\"median_us\":\t12.5", "\"median_us\":\t-12.5", "negative time", "median_us"},
      {"\"median_us\":\t12.5", "\"median_us\":\t0", "zero time", "median_us"},
      {"\"median_us\":\t12.5", "\"median_us\":\t\"fast\"", "time of the wrong type", "median_us"},
      {"\"median_us\":\t12.5", "\"nothing\":\t12.5", "time missing", "median_us"},
      {"\"m_bucket\":\t1,", "\"m_bucket\":\t3,", "not a bucket", "m_bucket"},
      {"\"m_bucket\":\t1,", "\"m_bucket\":\t4294967296,", "M past any GEMM's", "m (4294967296)"},
      {"\"a_dtype\":\t\"e2m1x2\"", "\"a_dtype\":\t\"f32\"", "W4A4 f32 activations", "a_dtype (f32)"},
      {"\"k\":\t4096", "\"k\":\t4100", "K off the block size", "k (4100)"},
      {"\"n\":\t4096", "\"n\":\t-4096", "negative N", "'n'"},
      {"\"n\":\t4096", "\"n\":\t\"4096\"", "N of the wrong type", "'n'"},
      {"\"out_dtype\":\t\"bf16\"", "\"out_dtype\":\t\"bf17\"", "unknown dtype", "bf17"},
      {"\"backend\":\t\"ref\"", "\"backend\":\t7", "backend of the wrong type", "backend"},
      {"\"op\":\t\"mm\",", "", "op missing", "'op'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fp4_tuning_cache *c = filled_cache(ctx); /* k1 (ref, 12.5 us, M bucket 1, N 4096) is the one spoiled */
    CHECK(fp4_tuning_cache_save(c, good) == FP4_OK, "save: %s", fp4_last_error());
    replace_in(good, bad, cases[i].from, cases[i].to);
    load_call l = {c, bad, FP4_OK, ""};
    char *log = logged(do_load, &l);
    CHECK(l.st == FP4_OK, "%s: the file loads (%s)", cases[i].what, l.detail);
    CHECK(fp4_tuning_cache_count(c) == 2, "%s: the 2 valid entries load, got %d", cases[i].what, fp4_tuning_cache_count(c));
    CHECK(strstr(l.detail, "1 invalid entry skipped") && strstr(l.detail, cases[i].named), "%s: detail '%s'",
          cases[i].what, l.detail);
    CHECK(log && strstr(log, "entry 0 skipped") && strstr(log, cases[i].named) && strstr(log, "bad.json"),
          "%s: a warning names the entry:\n%s", cases[i].what, log ? log : "");
    printf("  %-26s %s", cases[i].what, log ? log : "(no warning)\n");
    free(log);
    /* saved again and reloaded: still the 2 entries, no null, inf or nan in the file */
    CHECK(fp4_tuning_cache_save(c, bad) == FP4_OK, "%s: save: %s", cases[i].what, fp4_last_error());
    size_t len = 0;
    char *text = read_text(bad, &len);
    CHECK(text && !strstr(text, "null") && !strstr(text, "inf") && !strstr(text, "nan"), "%s: saved:\n%s", cases[i].what,
          text ? text : "");
    free(text);
    fp4_tuning_cache *d = NULL;
    fp4_tuning_cache_create(ctx, &d);
    CHECK(fp4_tuning_cache_load(d, bad) == FP4_OK && fp4_tuning_cache_count(d) == 2 && !fp4_last_error()[0],
          "%s: the saved file reloads whole: %d entries, '%s'", cases[i].what, fp4_tuning_cache_count(d), fp4_last_error());
    fp4_tuning_cache_destroy(d);
    fp4_tuning_cache_destroy(c);
    remove(good);
    remove(bad);
  }
  /* An entry naming a backend this build lacks loads (another build may have it): auto decides. */
  fp4_tuning_cache *c = filled_cache(ctx);
  CHECK(fp4_tuning_cache_save(c, good) == FP4_OK, "save");
  replace_in(good, bad, "\"backend\":\t\"ref\"", "\"backend\":\t\"no-such-backend\"");
  CHECK(fp4_tuning_cache_load(c, bad) == FP4_OK && fp4_tuning_cache_count(c) == 3, "unknown backend loads: %s",
        fp4_last_error());
  fp4_tuning_cache_destroy(c);
}

/* The public setter refuses what the file must never hold. */
static void test_set_refuses_bad_values(fp4_context *ctx) {
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(ctx, &c);
  const fp4_tune_key k = {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 1, 64, 64};
  const double bad[] = {INFINITY, -INFINITY, NAN, -1.0, 0.0, 1e300};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK(fp4_tuning_cache_set(c, &k, "cpu", NULL, bad[i]) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "median_us"),
          "set with median %g: %s", bad[i], fp4_last_error());
  CHECK(fp4_tuning_cache_count(c) == 0, "nothing stored");
  fp4_tuning_cache_destroy(c);
}

/* A name that does not fit the caller's buffer is an error, never a truncated name. */
static void test_lookup_buffer_too_small(fp4_context *ctx) {
  fp4_tuning_cache *c = filled_cache(ctx);
  const fp4_tune_key k2 = {FP4_TUNE_MM, FP4_FORMAT_MXFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_F16, 3000, 4096, 4096};
  char be[32] = "x", cfg[64] = "x", small[2] = "x";
  CHECK(fp4_tuning_cache_lookup(c, &k2, small, sizeof small, cfg, sizeof cfg) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "cublas-dequant") && !small[0],
        "2-byte backend buffer: '%s' (%s)", small, fp4_last_error());
  CHECK(fp4_tuning_cache_lookup(c, &k2, be, sizeof be, small, sizeof small) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "heur1") && !small[0],
        "2-byte config buffer: '%s' (%s)", small, fp4_last_error());
  CHECK(fp4_tuning_cache_lookup(c, &k2, be, 14, cfg, 5) == FP4_ERR_INVALID_ARGUMENT, "one byte short for 'cublas-dequant'");
  CHECK(fp4_tuning_cache_lookup(c, &k2, be, 15, cfg, 6) == FP4_OK && !strcmp(be, "cublas-dequant") && !strcmp(cfg, "heur1"),
        "exact fit: %s/%s", be, cfg);
  CHECK(fp4_tuning_cache_lookup(c, &k2, NULL, 0, NULL, 0) == FP4_OK, "NULL buffers: only whether the key is there");
  fp4_tuning_cache_destroy(c);
}

/* A host W4A4 GEMM (M 16, N 8, K 32, NVFP4, f32 out) through auto; info receives what ran. */
static const fp4_tune_key auto_key = {FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_F32, 16, 8, 32};

static fp4_status run_auto(fp4_context *ctx, fp4_run_info *info) {
  float x[16 * 32], out[16 * 8];
  uint8_t q[16 * 16], s[16 * 2], wq[8 * 16], ws[8 * 2];
  for (int i = 0; i < 16 * 32; i++) x[i] = (float)(i % 9) - 4.0f;
  for (int i = 0; i < 16 * 8; i++) out[i] = NAN;
  fp4_matrix xm = {x, 16, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST}, wm = {x, 8, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_qmatrix a = {q, s, 16, 32, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_qmatrix b = {wq, ws, 8, 32, FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f, FP4_MEMORY_HOST};
  fp4_matrix o = {out, 16, 8, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
  fp4_status st = fp4_quantize(ctx, &xm, 1.0f, &a, NULL);
  if (!st) st = fp4_quantize(ctx, &wm, 1.0f, &b, NULL);
  fp4_options opts = {.backend = "auto", .info = info};
  if (!st) st = fp4_mm(ctx, &a, &b, 1.0f, &o, &opts);
  for (int i = 0; i < 16 * 8 && !st; i++)
    if (!isfinite(out[i])) st = FP4_ERR_INTERNAL;
  return st;
}

/* Auto selection with a default cache that cannot be used still runs (one warning, no failure). */
static void test_default_cache_never_fatal(void) {
  char bad[512];
  path_of(bad, sizeof bad, "bad.json");
  write_text(bad, "{ \"format\": \"fp4kit-tuning-cache\", \"entr", 40);
  setenv("FP4KIT_TUNING_CACHE", bad, 1);
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  CHECK(fp4_context_tuning_cache(ctx) == NULL, "garbage default cache not used");
  CHECK(strstr(fp4_context_tuning_note(ctx), "ignored") != NULL, "note: %s", fp4_context_tuning_note(ctx));
  fp4_run_info info;
  CHECK(run_auto(ctx, &info) == FP4_OK, "auto runs despite the bad cache: %s", fp4_last_error());
  fp4_context_destroy(ctx);
  setenv("FP4KIT_TUNING_CACHE", "/nonexistent/fp4kit-test.json", 1);
}

typedef struct auto_call {
  fp4_context *ctx;
  fp4_status st[2];
  fp4_run_info info[2];
  char detail[512];
} auto_call;

static void do_auto_twice(void *arg) {
  auto_call *a = arg;
  for (int i = 0; i < 2; i++) {
    a->st[i] = run_auto(a->ctx, &a->info[i]);
    if (a->st[i]) snprintf(a->detail, sizeof a->detail, "%s", fp4_last_error());
  }
}

/* A cache entry auto cannot trust (a config the backend does not offer, a backend this build lacks,
 * the reference oracle) is not followed: auto warns once per entry and runs the heuristic's choice. */
static void test_auto_distrusts_entries(void) {
  static const struct {
    const char *backend, *config, *what, *named;
  } cases[] = {
      {"cpu", "bogus", "config the backend does not offer", "bogus"},
      {"no-such-backend", NULL, "backend this build lacks", "no-such-backend"},
      {"ref", NULL, "the oracle", "ref"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fp4_context *ctx = NULL;
    fp4_context_create(&ctx, -1);
    fp4_tuning_cache *c = NULL;
    fp4_tuning_cache_create(ctx, &c);
    CHECK(fp4_tuning_cache_set(c, &auto_key, cases[i].backend, cases[i].config, 12.5) == FP4_OK, "set");
    fp4_context_set_tuning_cache(ctx, c);
    auto_call a = {ctx, {FP4_OK, FP4_OK}, {{{0}}}, ""};
    char *log = logged(do_auto_twice, &a);
    CHECK(a.st[0] == FP4_OK && a.st[1] == FP4_OK, "%s: auto runs (%s)", cases[i].what, a.detail);
    CHECK(!strcmp(a.info[0].backend, "cpu") && !strcmp(a.info[1].backend, "cpu") &&
              !strstr(a.info[0].config, "bogus"),
          "%s: the heuristic's choice ran: %s/%s", cases[i].what, a.info[0].backend, a.info[0].config);
    CHECK(log && cli_count_in(log, "not followed") == 1 && strstr(log, cases[i].named),
          "%s: one warning naming the entry:\n%s", cases[i].what, log ? log : "");
    printf("  %-34s %s", cases[i].what, log ? log : "(no warning)\n");
    free(log);
    fp4_context_destroy(ctx);
  }
  /* A trusted entry is followed, config and all. */
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(ctx, &c);
  fp4_tuning_cache_set(c, &auto_key, "cpu", NULL, 12.5);
  fp4_context_set_tuning_cache(ctx, c);
  fp4_run_info info;
  CHECK(run_auto(ctx, &info) == FP4_OK && !strcmp(info.backend, "cpu"), "a valid entry is followed: %s", fp4_last_error());
  fp4_context_destroy(ctx);
}

/* Readers never see a half-written file while a writer saves over and over. */
typedef struct race {
  fp4_context *ctx;
  const char *path;
  int bad_loads, loads;
} race;

static void *writer(void *arg) {
  race *r = arg;
  fp4_tuning_cache *c = filled_cache(r->ctx);
  for (int i = 0; i < 60; i++) fp4_tuning_cache_save(c, r->path);
  fp4_tuning_cache_destroy(c);
  return NULL;
}

static void *reader(void *arg) {
  race *r = arg;
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(r->ctx, &c);
  for (int i = 0; i < 200; i++) {
    r->loads++;
    if (fp4_tuning_cache_load(c, r->path) != FP4_OK || fp4_tuning_cache_count(c) != 3) r->bad_loads++;
  }
  fp4_tuning_cache_destroy(c);
  return NULL;
}

static void test_concurrent_readers(fp4_context *ctx) {
  char path[512];
  path_of(path, sizeof path, "race.json");
  fp4_tuning_cache *c = filled_cache(ctx);
  fp4_tuning_cache_save(c, path);
  fp4_tuning_cache_destroy(c);
  race r = {ctx, path, 0, 0};
  pthread_t w, rd;
  pthread_create(&w, NULL, writer, &r);
  pthread_create(&rd, NULL, reader, &r);
  pthread_join(w, NULL);
  pthread_join(rd, NULL);
  CHECK(r.bad_loads == 0, "%d of %d loads saw a partial file", r.bad_loads, r.loads);
}

/* Candidates announced to the progress callback ("done" is not one). */
static void count_candidates(void *user, int done, int total, const char *what) {
  (void)done;
  (void)total;
  *(int *)user += strcmp(what, "done") != 0;
}

/* The tuner on the host: the winner is recorded and auto then uses it; M values that share a bucket
 * are timed once (one winner per cache entry, never the last of two timings); every key is checked
 * before any is timed. */
static void test_tuner_host(void) {
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  fp4_tuning_cache *c = NULL;
  fp4_tuning_cache_create(ctx, &c);
  fp4_tune_key keys[2] = {{FP4_TUNE_MM, FP4_FORMAT_NVFP4, FP4_DTYPE_E2M1X2, FP4_DTYPE_BF16, 3, 48, 64},
                          {FP4_TUNE_MM_W4A16, FP4_FORMAT_MXFP4, FP4_DTYPE_BF16, FP4_DTYPE_F32, 5, 40, 96}};
  fp4_tune_result res[2];
  CHECK(fp4_tune(ctx, keys, 2, 3, c, res, NULL, NULL) == FP4_OK, "tune: %s", fp4_last_error());
  for (int i = 0; i < 2; i++) {
    char be[32], cfg[64];
    CHECK(res[i].backend[0] && res[i].candidates >= 1 && res[i].median_us > 0, "result %d: '%s' %d candidates", i, res[i].backend,
          res[i].candidates);
    CHECK(res[i].key.m == fp4_tune_m_bucket(keys[i].m), "tuned at the bucket");
    CHECK(fp4_tuning_cache_lookup(c, &keys[i], be, sizeof be, cfg, sizeof cfg) == FP4_OK && !strcmp(be, res[i].backend),
          "cached winner %d", i);
  }
  fp4_tune_key same[2] = {keys[1], keys[1]};
  same[0].m = 100;
  same[1].m = 128; /* both in M bucket 128 */
  int announced = 0;
  CHECK(fp4_tune(ctx, same, 2, 3, c, res, count_candidates, &announced) == FP4_OK, "tune: %s", fp4_last_error());
  CHECK(announced == res[0].candidates, "one bucket timed once: %d candidates announced, %d in the result", announced,
        res[0].candidates);
  CHECK(!strcmp(res[1].backend, res[0].backend) && !strcmp(res[1].config, res[0].config) &&
            res[1].median_us == res[0].median_us && res[1].key.m == 128,
        "the second key's result is the first's: %s:%s %.3f us vs %s:%s %.3f us", res[1].backend, res[1].config,
        res[1].median_us, res[0].backend, res[0].config, res[0].median_us);
  fp4_tune_key bad[2] = {keys[0], keys[0]};
  bad[1].k = 40; /* not a multiple of 16 */
  announced = 0;
  CHECK(fp4_tune(ctx, bad, 2, 3, c, NULL, count_candidates, &announced) == FP4_ERR_INVALID_ARGUMENT &&
            strstr(fp4_last_error(), "keys[1].k"),
        "K must fit the block: %s", fp4_last_error());
  CHECK(announced == 0, "a refused key stops the call before any key is timed (%d candidates ran)", announced);
  CHECK(fp4_tune(ctx, keys, 1, 0, c, NULL, NULL, NULL) == FP4_ERR_INVALID_ARGUMENT, "runs >= 1");
  fp4_tuning_cache_destroy(c);
  fp4_context_destroy(ctx);
}

int main(void) {
  setenv("FP4KIT_LOG", "warn", 1); /* read once, at the first message: the warnings are checked */
  snprintf(dir, sizeof dir, "/tmp/fp4kit-test-tune-%ld", (long)getpid());
  setenv("FP4KIT_TUNING_CACHE", "/nonexistent/fp4kit-test.json", 1);
  fp4_context *ctx = NULL;
  fp4_context_create(&ctx, -1);
  test_buckets();
  test_round_trip(ctx);
  test_refused_files(ctx);
  test_invalid_entries_skipped(ctx);
  test_set_refuses_bad_values(ctx);
  test_keys_name_calls(ctx);
  test_lookup_buffer_too_small(ctx);
  test_concurrent_readers(ctx);
  test_default_cache_never_fatal();
  test_auto_distrusts_entries();
  test_tuner_host();
  fp4_context_destroy(ctx);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("test_tune_cache: all passed\n");
  return 0;
}
