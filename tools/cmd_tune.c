#define _POSIX_C_SOURCE 200809L
/* fp4kit tune: time every supported (backend, config) on each shape and store the winners in the
 * tuning cache that auto selection reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void tune_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit tune (--model NAME [--tp N] [--ep N] | --shapes FILE | --shape NxK)...\n"
          "                   [--m LIST] [--op w4a4|w4a16] [--format nvfp4|mxfp4] [--out bf16|f16|f32]\n"
          "                   [--runs N] [--cache FILE] [--device N]\n"
          "\n"
          "Times every supported (backend, config) on each GEMM shape at each M bucket, on random data,\n"
          "rejecting candidates that fail or return NaN or zeros, and writes the winners to the tuning\n"
          "cache (atomically: temporary file + rename), merged with the cache already there when it\n"
          "belongs to this library version and device. Auto selection (backend NULL or \"auto\") then\n"
          "runs the cached winner for each (M bucket, N, K, formats, output dtype).\n"
          "\n"
          "  --model NAME   the GEMMs of a model (fp4kit inspect lists the shape sets)\n"
          "  --shapes FILE  one GEMM per line: 'N K [name]'; '#' starts a comment\n"
          "  --shape NxK    one GEMM (repeatable)\n"
          "  --m LIST       comma-separated M values (default 1,16,128,1024,4096); each is tuned at its bucket\n"
          "  --op           w4a4 (default: FP4 activations) or w4a16 (bf16 activations)\n"
          "  --runs N       timed calls per candidate (default 20)\n"
          "  --cache FILE   default: $FP4KIT_TUNING_CACHE, $XDG_CACHE_HOME/fp4kit/tuning.json or\n"
          "                 ~/.cache/fp4kit/tuning.json\n");
}

typedef struct shape_list {
  int64_t *n, *k;
  int count, cap;
} shape_list;

static int add_shape(shape_list *s, int64_t n, int64_t k) {
  for (int i = 0; i < s->count; i++)
    if (s->n[i] == n && s->k[i] == k) return 1;
  if (s->count == s->cap) {
    int cap = s->cap ? 2 * s->cap : 16;
    int64_t *nn = realloc(s->n, sizeof *nn * (size_t)cap), *kk = nn ? realloc(s->k, sizeof *kk * (size_t)cap) : NULL;
    if (nn) s->n = nn;
    if (!nn || !kk) return 0;
    s->k = kk;
    s->cap = cap;
  }
  s->n[s->count] = n;
  s->k[s->count++] = k;
  return 1;
}

static int read_shapes(const char *path, shape_list *s) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fp4kit tune: cannot open %s\n", path);
    return 0;
  }
  char line[512];
  int lineno = 0, ok = 1;
  while (ok && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    long long n = 0, k = 0;
    char extra;
    int got = sscanf(line, "%lld %lld %c", &n, &k, &extra);
    if (got <= 0) continue; /* blank or comment */
    if (got < 2 || n < 1 || k < 1) {
      fprintf(stderr, "fp4kit tune: %s:%d: expected 'N K [name]'\n", path, lineno);
      ok = 0;
    } else {
      ok = add_shape(s, n, k);
    }
  }
  fclose(f);
  return ok;
}

static int add_model(const char *model, int tp, int ep, shape_list *s) {
  int total = 0;
  fp4_status st = fp4_shape_set(model, tp, ep, NULL, 0, &total);
  if (st) {
    fp4cli_report("reading the model's shapes", st);
    return 0;
  }
  fp4_gemm_shape *shapes = calloc((size_t)(total ? total : 1), sizeof *shapes);
  if (!shapes) return 0;
  int ok = fp4_shape_set(model, tp, ep, shapes, total, &total) == FP4_OK;
  for (int i = 0; ok && i < total; i++)
    if (!strcmp(shapes[i].storage, "nvfp4") || !shapes[i].storage[0]) ok = add_shape(s, shapes[i].n, shapes[i].k);
  free(shapes);
  return ok;
}

typedef struct progress_state {
  int tty;
  int last_done;
} progress_state;

static void progress(void *user, int done, int total, const char *what) {
  progress_state *ps = user;
  if (ps->tty) {
    const int width = 30;
    int fill = total ? done * width / total : width;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-60.60s", fill, "##############################", width - fill, "", done, total, what);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
  } else if (done != ps->last_done || done == total) {
    ps->last_done = done;
  }
}

static int parse_m_list(const char *s, int64_t *m, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 1) return -1;
    m[n++] = v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

int fp4cli_tune(int argc, char **argv) {
  shape_list shapes = {0};
  int64_t ms[32] = {1, 16, 128, 1024, 4096};
  int nm = 5, runs = 20, device = -2, tp = 1, ep = 1, rc = FP4CLI_OK;
  const char *cache_path = NULL, *model = NULL;
  fp4_tune_op op = FP4_TUNE_MM;
  fp4_format format = FP4_FORMAT_NVFP4;
  fp4_dtype out = FP4_DTYPE_BF16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      tune_usage(stdout);
      return FP4CLI_OK;
    }
    if (!v) goto usage;
    i++;
    long long n = 0, k = 0;
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--tp")) tp = atoi(v);
    else if (!strcmp(a, "--ep")) ep = atoi(v);
    else if (!strcmp(a, "--shapes")) {
      if (!read_shapes(v, &shapes)) return FP4CLI_USAGE;
    } else if (!strcmp(a, "--shape")) {
      if (sscanf(v, "%lldx%lld", &n, &k) != 2 || n < 1 || k < 1 || !add_shape(&shapes, n, k)) goto usage;
    } else if (!strcmp(a, "--m")) {
      if ((nm = parse_m_list(v, ms, 32)) < 1) goto usage;
    } else if (!strcmp(a, "--op")) {
      if (!strcmp(v, "w4a4")) op = FP4_TUNE_MM;
      else if (!strcmp(v, "w4a16")) op = FP4_TUNE_MM_W4A16;
      else goto usage;
    } else if (!strcmp(a, "--format")) {
      if (!strcmp(v, "nvfp4")) format = FP4_FORMAT_NVFP4;
      else if (!strcmp(v, "mxfp4")) format = FP4_FORMAT_MXFP4;
      else goto usage;
    } else if (!strcmp(a, "--out")) {
      if (!strcmp(v, "bf16")) out = FP4_DTYPE_BF16;
      else if (!strcmp(v, "f16")) out = FP4_DTYPE_F16;
      else if (!strcmp(v, "f32")) out = FP4_DTYPE_F32;
      else goto usage;
    } else if (!strcmp(a, "--runs")) {
      if ((runs = atoi(v)) < 1) goto usage;
    } else if (!strcmp(a, "--cache")) cache_path = v;
    else if (!strcmp(a, "--device")) device = atoi(v);
    else goto usage;
  }
  if (model && !add_model(model, tp, ep, &shapes)) return FP4CLI_USAGE;
  if (!shapes.count) {
    fprintf(stderr, "fp4kit tune: no shapes: give --model, --shapes or --shape\n");
    goto usage;
  }
  char path[4096];
  if (cache_path) snprintf(path, sizeof path, "%s", cache_path);
  else if (fp4_tuning_cache_default_path(path, sizeof path)) return fp4cli_report("finding the cache file", FP4_ERR_NOT_FOUND);
  if (device == -2) device = fp4cli_default_device();

  fp4_context *ctx = NULL;
  fp4_tuning_cache *cache = NULL;
  fp4_tune_key *keys = calloc((size_t)(shapes.count * nm), sizeof *keys);
  fp4_tune_result *results = calloc((size_t)(shapes.count * nm), sizeof *results);
  fp4_status st = keys && results ? FP4_OK : FP4_ERR_OUT_OF_MEMORY;
  if (!st) st = fp4_context_create(&ctx, device);
  if (!st) st = fp4_tuning_cache_create(ctx, &cache);
  if (st) {
    rc = fp4cli_report("preparing to tune", st);
    goto done;
  }
  /* Merge with the cache already there; one that cannot be used is replaced, with one warning. */
  if (access(path, F_OK) == 0 && fp4_tuning_cache_load(cache, path) != FP4_OK)
    fprintf(stderr, "fp4kit tune: warning: %s; it will be replaced\n", fp4_last_error());
  int nk = 0;
  for (int s = 0; s < shapes.count; s++)
    for (int i = 0; i < nm; i++) {
      keys[nk] = (fp4_tune_key){op, format, op == FP4_TUNE_MM ? FP4_DTYPE_E2M1X2 : FP4_DTYPE_BF16, out, ms[i], shapes.n[s], shapes.k[s]};
      nk++;
    }
  printf("fp4kit %s tune: %d shapes x %d M values on %s%s, %s %s, out %s, %d runs per candidate\n", fp4_version(),
         shapes.count, nm, device >= 0 ? "device " : "the host", device >= 0 ? "" : "", fp4_format_name(format),
         op == FP4_TUNE_MM ? "w4a4" : "w4a16", fp4_dtype_name(out), runs);
  if (device >= 0) printf("(device %d)\n", device);
  progress_state ps = {isatty(fileno(stderr)), -1};
  st = fp4_tune(ctx, keys, nk, runs, cache, results, progress, &ps);
  if (st) {
    rc = fp4cli_report("tuning", st);
    goto done;
  }
  printf("\n%8s %8s %8s  %-16s %-8s %12s %10s %s\n", "M bucket", "N", "K", "winner", "config", "median us", "TFLOP/s",
         "candidates (rejected)");
  for (int i = 0; i < nk; i++) {
    const fp4_tune_result *r = &results[i];
    double tflops = r->median_us > 0 ? 2.0 * (double)r->key.m * (double)r->key.n * (double)r->key.k / (r->median_us * 1e6) : 0;
    printf("%8lld %8lld %8lld  %-16s %-8s %12.2f %10.2f %d (%d)\n", (long long)r->key.m, (long long)r->key.n,
           (long long)r->key.k, r->backend[0] ? r->backend : "(none)", r->config[0] ? r->config : "-", r->median_us, tflops,
           r->candidates, r->rejected);
    if (!r->backend[0]) rc = FP4CLI_FAILED;
  }
  if ((st = fp4_tuning_cache_save(cache, path))) {
    rc = fp4cli_report("writing the cache", st);
    goto done;
  }
  printf("\nwrote %d entries to %s\n", fp4_tuning_cache_count(cache), path);
done:
  fp4_tuning_cache_destroy(cache);
  fp4_context_destroy(ctx);
  free(keys);
  free(results);
  free(shapes.n);
  free(shapes.k);
  return rc;
usage:
  tune_usage(stderr);
  free(shapes.n);
  free(shapes.k);
  return FP4CLI_USAGE;
}
