#define _POSIX_C_SOURCE 200809L
/* `fp4kit tune` and `fp4kit bench --backend auto` agree: the same shapes for a model, a cache key
 * that separates op, format, activation and output dtype, and auto rows that say whether they ran
 * the cache's winner. Host path end to end here; with a CUDA device, auto on device operands never
 * runs a host backend, even when the cache names one. No timing is asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "dispatch/dispatch.h"
#include "fp4kit.h"
#include "fp4kit_bench.h"
#include "testing.h"

#ifndef FP4KIT_CLI
int main(void) {
  printf("skip: the fp4kit command is not built (FP4KIT_BUILD_TOOLS=OFF)\n");
  return 77;
}
#else

#include "cli_testing.h"

/* `fp4kit ARGS` with the test's tuning cache, output to DIR/NAME. */
static int run(const char *args, const char *name) {
  char env[160];
  snprintf(env, sizeof env, "FP4KIT_TUNING_CACHE='%s/tuning.json'", dir);
  return cli_run(env, args, name);
}

static void same_shapes_for_every_model(void) {
  for (int i = 0; fp4_shape_set_name(i); i++) {
    for (int tp = 1; tp <= 2; tp++) {
      char args[256];
      snprintf(args, sizeof args, "tune --model %s --tp %d --list-shapes", fp4_shape_set_name(i), tp);
      int rt = run(args, "tune_shapes");
      snprintf(args, sizeof args, "bench --model %s --tp %d --list-shapes", fp4_shape_set_name(i), tp);
      int rb = run(args, "bench_shapes");
      char *t = cli_slurp("tune_shapes"), *b = cli_slurp("bench_shapes");
      CHECK(rt == 0 && rb == 0, "%s tp %d: --list-shapes exit %d (tune) %d (bench)", fp4_shape_set_name(i), tp, rt, rb);
      CHECK(t && b && *t && !strcmp(t, b), "%s tp %d: tune shapes differ from bench shapes:\n%s---\n%s",
            fp4_shape_set_name(i), tp, t ? t : "(none)", b ? b : "(none)");
      free(t);
      free(b);
    }
  }
  /* The Qwen3.5 dense GEMMs include lm_head and attention, not only the two expert shapes. */
  run("tune --model qwen3.5-397b-a17b --list-shapes", "q");
  char *q = cli_slurp("q");
  CHECK(cli_count(q, "\n") == 8 && strstr(q, "248320 4096") && strstr(q, "17408 4096"), "qwen3.5 shapes:\n%s", q ? q : "");
  free(q);
}

static void key_separates_every_field(void) {
  fp4_tuning_cache *c = NULL;
  CHECK(fp4_tuning_cache_create(NULL, &c) == FP4_OK, "create: %s", fp4_last_error());
  const fp4_tune_key base = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, 100, 256, 512};
  CHECK(fp4_tuning_cache_set(c, &base, "cpu", "x", 1.0) == FP4_OK, "set: %s", fp4_last_error());
  char b[32], cfg[64];
  fp4_tune_key k = base;
  k.m = 128; /* same bucket */
  CHECK(fp4_tuning_cache_lookup(c, &k, b, sizeof b, cfg, sizeof cfg) == FP4_OK && !strcmp(b, "cpu") && !strcmp(cfg, "x"),
        "same bucket must hit");
  fp4_tune_key other[6];
  for (int i = 0; i < 6; i++) other[i] = base;
  other[0].op = FP4_TUNE_MM, other[0].a_dtype = FP4_DTYPE_E2M1X2;
  other[1].format = FP4_FORMAT_MXFP4;
  other[2].a_dtype = FP4_DTYPE_F16;
  other[3].out_dtype = FP4_DTYPE_F32;
  other[4].n = 512;
  other[5].m = 129; /* next bucket */
  static const char *const what[] = {"op", "format", "activation dtype", "output dtype", "N", "M bucket"};
  for (int i = 0; i < 6; i++)
    CHECK(fp4_tuning_cache_lookup(c, &other[i], b, sizeof b, cfg, sizeof cfg) == FP4_ERR_NOT_FOUND,
          "a key differing only in %s must miss", what[i]);
  fp4_tuning_cache_destroy(c);
}

static void host_backends_are_host_only(void) {
  CHECK(fp4_heuristic_host_backend(fp4_registry_find("cpu")) && fp4_heuristic_host_backend(fp4_registry_find("ref")),
        "cpu and ref compute on the host");
  for (int i = 0; fp4_backend_name(i); i++) {
    const char *n = fp4_backend_name(i);
    if (strcmp(n, "cpu") && strcmp(n, "ref"))
      CHECK(!fp4_heuristic_host_backend(fp4_registry_find(n)), "%s is not a host backend", n);
  }
}

/* Tune on the host, then bench auto: tuned keys hit, an untuned M bucket says none. */
static void host_tune_then_auto(void) {
  int rc = run("tune --device -1 --shapes 256x512,128x1024 --m 1,16 --op w4a16,w4a4 --runs 3", "tune");
  char *out = cli_slurp("tune"), *err = cli_slurp("tune.err");
  CHECK(rc == 0, "tune exit %d:\n%s\n%s", rc, out ? out : "", err ? err : "");
  CHECK(out && strstr(out, "on the host (") && strstr(out, "w4a16,w4a4") && cli_count(out, "\nw4a16 ") == 4 &&
            cli_count(out, "\nw4a4 ") == 4 && strstr(out, "wrote 8 entries"),
        "tune output:\n%s", out ? out : "");
  CHECK(err && cli_count(err, "fp4kit tune: [") == 8 && strstr(err, " cut)"), "one progress line per key:\n%s", err ? err : "");
  free(out);
  free(err);
  char *cache = cli_slurp("tuning.json");
  CHECK(cache && cli_count(cache, "\"op\"") == 8 && strstr(cache, "\"a_dtype\"") && strstr(cache, "\"out_dtype\"") &&
            strstr(cache, "\"format\""),
        "cache file:\n%s", cache ? cache : "");
  free(cache);

  char args[512];
  snprintf(args, sizeof args, "bench --backend auto --device -1 --shapes 256x512,128x1024 --m 1,16,3 --no-peers --runs 50 "
                              "--warmup 1 --json %s/auto.json --csv %s/auto.csv", dir, dir);
  rc = run(args, "auto");
  char *json = cli_slurp("auto.json"), *csv = cli_slurp("auto.csv"), *table = cli_slurp("auto"), *perr = cli_slurp("auto.err");
  CHECK(rc == 0, "bench exit %d:\n%s", rc, perr ? perr : "");
  /* 2 shapes x 3 M x 2 ops: M=1 and 16 were tuned (hit), M=3 (bucket 4) was not (none). */
  CHECK(cli_count(json, "\"cache\":\"hit\"") == 8 && cli_count(json, "\"cache\":\"none\"") == 4 && !cli_count(json, "\"miss\""),
        "cache verdicts in JSON:\n%s", json ? json : "");
  CHECK(cli_count(json, "\"auto_ran\":\"cpu") == 12, "auto_ran names what ran");
  CHECK(csv && strstr(csv, ",auto_ran,cache,cache_winner,") && cli_count(csv, ",hit,") == 8, "CSV has the cache columns");
  CHECK(table && strstr(table, " cache ") && cli_count(table, " hit   ") == 8, "table has the cache column:\n%s", table ? table : "");
  CHECK(perr && cli_count(perr, "fp4kit bench: [") == 12 && strstr(perr, "auto on the host follows: tuning cache"),
        "bench progress lines:\n%s", perr ? perr : "");
  CHECK(perr && !strstr(perr, "device peers"), "a host run has no device peers");
  free(json);
  free(csv);
  free(table);
  free(perr);
}

/* With a device: a cache that names the cpu backend for a device key is not followed on device
 * operands, and bench auto with a device times device memory only, without host peers. */
static void device_auto_never_host(void) {
  fp4_context *ctx = NULL;
  fp4_device_info dev;
  if (fp4_context_create(&ctx, 0) != FP4_OK || fp4_device_info_get(ctx, &dev) != FP4_OK) {
    printf("note: no CUDA device (%s); the device-operand checks did not run\n", fp4_last_error());
    fp4_context_destroy(ctx);
    return;
  }
  const int64_t M = 16, N = 256, K = 512;
  fp4_tuning_cache *c = NULL;
  CHECK(fp4_tuning_cache_create(ctx, &c) == FP4_OK, "create: %s", fp4_last_error());
  const fp4_tune_key key = {FP4_TUNE_MM_W4A16, FP4_FORMAT_NVFP4, FP4_DTYPE_BF16, FP4_DTYPE_BF16, M, N, K};
  CHECK(fp4_tuning_cache_set(c, &key, "cpu", NULL, 1.0) == FP4_OK, "set");
  CHECK(fp4_context_set_tuning_cache(ctx, c) == FP4_OK, "attach");
  size_t sb = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, N, K, &sb);
  void *a = NULL, *bd = NULL, *bs = NULL, *o = NULL;
  fp4_status st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(M * K) * 2, &a);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(N * K) / 2, &bd);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, sb, &bs);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(M * N) * 2, &o);
  CHECK(st == FP4_OK, "device buffers: %s", fp4_last_error());
  if (!st) {
    fp4_matrix x = {a, M, K, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE}, y = {o, M, N, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_qmatrix w = {bd, bs, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
    fp4_run_info info;
    fp4_options opt = {.backend = "auto", .info = &info};
    st = fp4_mm_w4a16(ctx, &x, &w, 1.0f, &y, &opt);
    CHECK(st == FP4_OK && !fp4_heuristic_host_backend(fp4_registry_find(info.backend)) && info.backend[0],
          "auto on device operands ran '%s' (%s)", info.backend, fp4_last_error());
  }
  void *bufs[] = {a, bd, bs, o};
  for (int i = 0; i < 4; i++) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
  fp4_context_destroy(ctx);

  char args[512];
  snprintf(args, sizeof args, "bench --backend auto --device 0 --shapes 256x512 --m 1 --no-peers --runs 50 --warmup 1 "
                              "--json %s/dev.json", dir);
  int rc = run(args, "dev");
  char *json = cli_slurp("dev.json"), *err = cli_slurp("dev.err");
  CHECK(rc == 0 && cli_count(json, "\"memory\":\"device\"") == 2 && !cli_count(json, "\"memory\":\"host\""),
        "bench auto on a device times device memory only (exit %d):\n%s\n%s", rc, json ? json : "", err ? err : "");
  CHECK(err && !strstr(err, "host peers"), "no host peers with a device selected:\n%s", err ? err : "");
  free(json);
  free(err);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/fp4kit_tune_auto_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  same_shapes_for_every_model();
  key_separates_every_field();
  host_backends_are_host_only();
  host_tune_then_auto();
  device_auto_never_host();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_SUMMARY();
}
#endif
