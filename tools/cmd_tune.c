#define _GNU_SOURCE
/* fp4kit tune: time every supported (backend, config) on each shape and store the winners in the
 * tuning cache that auto selection reads. The shapes of a model are bench's (bench_shapes.c), so
 * `fp4kit tune --model X` then `fp4kit bench --backend auto --model X` meet in the cache. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

enum { TUNE_MAX_M = 32, TUNE_MAX_MODELS = 16 };

static void tune_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit tune (--model NAME [--tp N] | --shapes FILE|NxK[,NxK...] | --shape NxK)...\n"
          "                   [--m LIST] [--op w4a16,w4a4] [--format nvfp4,mxfp4] [--act bf16|f16|f32]\n"
          "                   [--out bf16|f16|f32] [--runs N] [--cache FILE] [--device N] [--list-shapes]\n"
          "\n"
          "Times every supported (backend, config) on each GEMM shape at each M bucket, for each op and\n"
          "format asked for, on random data in the device's memory (host memory with --device -1; a\n"
          "device run never times host backends), rejecting candidates that fail or return NaN or\n"
          "zeros, and writes the winners to the tuning cache (atomically: temporary file + rename),\n"
          "merged under a lock with the cache already there when it belongs to this library version\n"
          "and device, so concurrent tune runs keep every entry. The cache path is checked by writing\n"
          "it before any tuning.\n"
          "Auto selection (backend NULL or \"auto\") then runs the cached winner for each key: op,\n"
          "format, activation dtype, output dtype, M bucket, N, K.\n"
          "Candidates run in heuristic order; one slower than 20x the best median so far after its\n"
          "warm-up is cut (not timed further). Progress goes to stderr, one line per key.\n"
          "\n"
          "Shapes, M values, ops and formats that name one cache key are tuned once.\n"
          "\n"
          "  --model NAME  a shape set (fp4kit bench --model list); the shapes are bench's:\n"
          "              " BENCH_MODEL_SHAPES_HELP "\n"
          "              Repeatable (at most %d): the sets' shapes are merged, each shape once.\n"
          "  --tp N         tensor-parallel degree the shapes of the --model before it are sharded for\n"
          "                 (default 1); a --tp before any --model is that of every --model without its own\n"
          "  --shapes       a file with one GEMM per line ('N K [name]'; '#' starts a comment), or a\n"
          "                 list NxK[,NxK...] as fp4kit bench takes it\n"
          "  --shape NxK    one GEMM (repeatable)\n"
          "  --m LIST       comma-separated M values from 1 to 2^31 (default 1,16,128,1024,4096; at most\n"
          "                 %d). Each is tuned at its M bucket, the M the cache keeps one winner for; values\n"
          "                 that share a bucket (100 and 128 are both 128) are tuned once\n"
          "  --op LIST      w4a16 (16-bit activations) and/or w4a4 (FP4 activations); default w4a16,w4a4\n"
          "  --format LIST  nvfp4 and/or mxfp4; default nvfp4\n"
          "  --act          W4A16 activation dtype (default bf16, as fp4kit bench)\n"
          "  --out          output dtype (default bf16)\n"
          "  --runs N       timed calls per candidate (default 20)\n"
          "  --device N     CUDA ordinal, or -1 for the host (default: FP4KIT_DEVICE, else 0 when a\n"
          "                 CUDA device is present, else -1)\n"
          "  --cache FILE   default: $FP4KIT_TUNING_CACHE, $XDG_CACHE_HOME/fp4kit/tuning.json or\n"
          "                 ~/.cache/fp4kit/tuning.json. An existing FILE must be a tuning cache: any\n"
          "                 other file is refused (exit 2) and left as it is. A cache of another version\n"
          "                 or device, a damaged one (a JSON object that still names its format) or an\n"
          "                 empty file is replaced, with a warning. A link is written through to the\n"
          "                 file it leads to, which must exist. The file keeps its permissions; a new\n"
          "                 one gets 0666 less the umask\n"
          "  --list-shapes  print the shapes (N K name) and exit\n"
          "\n"
          "Exit status: 0 every key has a winner, 1 a key had no candidate that ran, 2 a usage error (an\n"
          "unknown option, a bad value or shape file, a --cache FILE that is not a tuning cache), 3 the\n"
          "device asked for cannot be used, the cache cannot be written, or tuning stopped on an error.\n",
          TUNE_MAX_MODELS, TUNE_MAX_M);
}

static int read_shapes(const char *path, bench_shape *shapes, int *count) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fp4kit tune: cannot open %s: %s\n", path, strerror(errno));
    return 0;
  }
  char line[512];
  int lineno = 0, ok = 1, found = 0;
  while (ok && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char ns[32] = "", ks[32] = "", name[64] = "", where_n[600], where_k[600];
    long long n = 0, k = 0;
    int got = sscanf(line, "%31s %31s %63s", ns, ks, name);
    if (got <= 0) continue; /* blank or comment */
    /* Positive integers; the largest N and K are fp4_tune's to say (the keys are checked before the
     * cache is touched). */
    snprintf(where_n, sizeof where_n, "%s:%d: N", path, lineno);
    snprintf(where_k, sizeof where_k, "%s:%d: K", path, lineno);
    if (got < 2) {
      fprintf(stderr, "fp4kit tune: %s:%d: expected 'N K [name]'\n", path, lineno);
      ok = 0;
    } else if (fp4cli_parse_int("tune", where_n, ns, 1, INT64_MAX, &n) ||
               fp4cli_parse_int("tune", where_k, ks, 1, INT64_MAX, &k)) {
      ok = 0;
    } else {
      if (!name[0]) snprintf(name, sizeof name, "%lldx%lld", (long long)n, (long long)k);
      if (bench_add_shape(shapes, count, n, k, name)) {
        fprintf(stderr, "fp4kit tune: %s:%d: more than %d shapes\n", path, lineno, BENCH_MAX_SHAPES);
        ok = 0;
      }
      found = 1;
    }
  }
  /* A directory opens, and reads as an error, not as an empty file; a file of comments names no
   * shape: neither is the list of shapes asked for. */
  if (ok && ferror(f)) {
    fprintf(stderr, "fp4kit tune: cannot read %s: %s\n", path, strerror(errno));
    ok = 0;
  } else if (ok && !found) {
    fprintf(stderr, "fp4kit tune: %s holds no shape ('N K [name]' lines)\n", path);
    ok = 0;
  }
  fclose(f);
  return ok;
}

/* How many M buckets the M values fall in, for the summary line. fp4_tune times each bucket once
 * itself: the keys of the other values are answered with the first's result. */
static int count_m_buckets(const long long *ms, int nm) {
  int nb = 0;
  for (int i = 0; i < nm; i++) {
    int j = 0;
    while (j < i && fp4_tune_m_bucket(ms[j]) != fp4_tune_m_bucket(ms[i])) j++;
    nb += j == i;
  }
  return nb;
}

/* Comma list of names into flags; 0 on an unknown name. */
static int parse_flags(const char *s, const char *const *names, int count, int *flags) {
  memset(flags, 0, sizeof *flags * (size_t)count);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  int any = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int i = 0; i < count; i++)
      if (!strcmp(tok, names[i])) found = flags[i] = 1;
    if (!found) return 0;
    any = 1;
  }
  return any;
}

static const char *op_name(fp4_tune_op op) { return op == FP4_TUNE_MM ? "w4a4" : "w4a16"; }

/* The keys fp4_tune is not allowed to take, said the way it says them (a lookup in an empty cache
 * checks a key by the rule fp4_tune follows), each with the shape it came from: FP4CLI_USAGE at the
 * first, else FP4CLI_OK. per_shape: the keys of one shape, which come together. */
static int check_keys(const fp4_tune_key *keys, int count, const bench_shape *shapes, int per_shape) {
  fp4_tuning_cache *empty = NULL;
  fp4_status st = fp4_tuning_cache_create(NULL, &empty);
  if (st) return fp4cli_report("starting", st);
  int rc = FP4CLI_OK;
  for (int i = 0; i < count && !rc; i++) {
    const fp4_tune_key *key = &keys[i];
    if (fp4_tuning_cache_lookup(empty, key, NULL, 0, NULL, 0) != FP4_ERR_INVALID_ARGUMENT) continue;
    const bench_shape *sh = &shapes[i / per_shape];
    const char *why = fp4_last_error(), *field = strstr(why, "key->");
    fprintf(stderr, "fp4kit tune: shape %s (N %lld, K %lld), %s %s, M %lld: %s\n", sh->name, (long long)sh->n,
            (long long)sh->k, op_name(key->op), fp4_format_name(key->format), (long long)key->m,
            field ? field + strlen("key->") : why);
    rc = FP4CLI_USAGE;
  }
  fp4_tuning_cache_destroy(empty);
  return rc;
}

/* What fp4_tune does, one stderr line per key as it goes: the key, its candidates named as they start
 * (a slow one is visible while it runs, and the last name printed is the culprit if the run is
 * killed), the winner. A key whose cache entry an earlier key has (its M in the same bucket) is
 * answered by fp4_tune with that key's result, never timed again: that is said instead. */
typedef struct progress_state {
  const fp4_tune_key *keys;
  const fp4_tune_result *results;
  int *copy_of;   /* per key: the earlier key whose result it was given, or -1 */
  int next;       /* the first key not said yet */
  int open;       /* the key whose line is open, or -1 */
  int candidates; /* named on the open line */
  int said, distinct;
} progress_state;

static int same_result_key(const fp4_tune_key *a, const fp4_tune_key *b) {
  return a->op == b->op && a->format == b->format && a->a_dtype == b->a_dtype && a->out_dtype == b->out_dtype &&
         a->m == b->m && a->n == b->n && a->k == b->k;
}

static void open_line(progress_state *ps, int i) {
  const fp4_tune_key *key = &ps->keys[i];
  fprintf(stderr, "fp4kit tune: [%d/%d] %s %s M=%lld N=%lld K=%lld: ", ++ps->said, ps->distinct, op_name(key->op),
          fp4_format_name(key->format), (long long)fp4_tune_m_bucket(key->m), (long long)key->n, (long long)key->k);
  fflush(stderr);
  ps->open = i;
  ps->candidates = 0;
  ps->next = i + 1;
}

static void close_line(progress_state *ps) {
  if (ps->open < 0) return;
  const fp4_tune_result *r = &ps->results[ps->open];
  if (r->backend[0])
    fprintf(stderr, " -> %s%s%s %.2f us (%d candidates, %d rejected, %d cut)\n", r->backend, r->config[0] ? ":" : "",
            r->config, r->median_us, r->candidates, r->rejected, r->cut);
  else
    fprintf(stderr, " -> no candidate ran (%d candidates, %d rejected)\n", r->candidates, r->rejected);
  fflush(stderr);
  ps->open = -1;
}

/* Closes the open line and says the keys before end that fp4_tune finished without naming a
 * candidate: answered with an earlier key's result (the result's key, whose M is the bucket, is that
 * key's), or with none to time. */
static void say_until(progress_state *ps, int end) {
  close_line(ps);
  for (int i = ps->next; i < end; i++) {
    const fp4_tune_key *got = &ps->results[i].key;
    int j = 0;
    while (j < i && !same_result_key(&ps->results[j].key, got)) j++;
    if (j < i) {
      ps->copy_of[i] = j;
      fprintf(stderr, "fp4kit tune: M=%lld shares M bucket %lld with M=%lld: the bucket is tuned once\n",
              (long long)ps->keys[i].m, (long long)got->m, (long long)ps->keys[j].m);
    } else {
      open_line(ps, i);
      close_line(ps);
    }
  }
  if (ps->next < end) ps->next = end;
}

static void progress(void *user, int index, int total, const char *what) {
  progress_state *ps = user;
  if (!strcmp(what, "done")) {
    say_until(ps, total);
    return;
  }
  if (index != ps->open) {
    say_until(ps, index);
    open_line(ps, index);
  }
  fprintf(stderr, "%s%s", ps->candidates++ ? " " : "", what);
  fflush(stderr);
}

/* After fp4_tune failed: the key it stopped at (the last whose result names it) ends its line. */
static void say_stopped(progress_state *ps, int count) {
  int last = count - 1;
  while (last >= 0 && !ps->results[last].key.n) last--;
  if (last < 0) return;
  if (ps->open != last) {
    say_until(ps, last);
    open_line(ps, last);
  }
  ps->open = -1;
  fprintf(stderr, "\n");
}

int fp4cli_tune(int argc, char **argv) {
  bench_shape *shapes = calloc(BENCH_MAX_SHAPES, sizeof *shapes);
  int nshapes = 0;
  long long ms[TUNE_MAX_M] = {1, 16, 128, 1024, 4096};
  int nm = 5, runs = 20, device = FP4CLI_DEVICE_UNSET, list_only = 0, rc = FP4CLI_OK;
  int ops[2] = {1, 1}, fmts[2] = {1, 0}; /* [fp4_tune_op], [fp4_format] */
  static const char *const op_names[] = {"w4a4", "w4a16"}, *const fmt_names[] = {"nvfp4", "mxfp4"};
  const char *cache_path = NULL;
  /* Each --model with the --tp that follows it (0: none; then default_tp, a --tp before any --model). */
  struct {
    const char *name;
    int tp;
  } models[TUNE_MAX_MODELS];
  int nmodels = 0, default_tp = 1;
  fp4_dtype act = FP4_DTYPE_BF16, out = FP4_DTYPE_BF16;
  fp4_context *ctx = NULL;
  fp4_tuning_cache *cache = NULL;
  fp4_tune_key *keys = NULL;
  fp4_tune_result *results = NULL;
  int *copy_of = NULL;
  if (!shapes) return fp4cli_report("starting", FP4_ERR_OUT_OF_MEMORY);
  enum { OPT_MODEL = 256, OPT_TP, OPT_SHAPES, OPT_SHAPE, OPT_M, OPT_OP, OPT_FORMAT, OPT_ACT, OPT_OUT, OPT_RUNS, OPT_CACHE,
         OPT_DEVICE, OPT_LIST };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"model", required_argument, NULL, OPT_MODEL},
                                        {"tp", required_argument, NULL, OPT_TP},
                                        {"shapes", required_argument, NULL, OPT_SHAPES},
                                        {"shape", required_argument, NULL, OPT_SHAPE},
                                        {"m", required_argument, NULL, OPT_M},
                                        {"op", required_argument, NULL, OPT_OP},
                                        {"format", required_argument, NULL, OPT_FORMAT},
                                        {"act", required_argument, NULL, OPT_ACT},
                                        {"out", required_argument, NULL, OPT_OUT},
                                        {"runs", required_argument, NULL, OPT_RUNS},
                                        {"cache", required_argument, NULL, OPT_CACHE},
                                        {"device", required_argument, NULL, OPT_DEVICE},
                                        {"list-shapes", no_argument, NULL, OPT_LIST},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c, li = 0; (c = getopt_long(argc, argv, ":h", longs, &li)) != -1;) {
    const char *v = optarg, *bad = NULL; /* bad: what a refused value should have been */
    char why[160] = "";                  /* and what was wrong with it, where known */
    long long x = 0;
    switch (c) {
      case 'h':
        tune_usage(stdout);
        free(shapes);
        return FP4CLI_OK;
      case OPT_LIST:
        list_only = 1;
        break;
      case OPT_MODEL:
        if (nmodels == TUNE_MAX_MODELS) {
          fprintf(stderr, "fp4kit tune: --model '%s': at most %d shape sets can be tuned together\n", v, TUNE_MAX_MODELS);
          goto usage_quiet;
        }
        models[nmodels].name = v;
        models[nmodels++].tp = 0;
        break;
      case OPT_TP:
        if ((rc = fp4cli_parse_int("tune", "--tp", v, 1, 1024, &x))) goto usage_quiet;
        *(nmodels ? &models[nmodels - 1].tp : &default_tp) = (int)x;
        break;
      case OPT_SHAPES:
        if (access(v, F_OK) == 0 ? !read_shapes(v, shapes, &nshapes) : bench_parse_shapes(v, shapes, &nshapes, why, sizeof why) < 0)
          bad = "a readable shape file or NxK[,NxK...]";
        break;
      case OPT_SHAPE:
        if (strchr(v, ',') || bench_parse_shapes(v, shapes, &nshapes, why, sizeof why) < 0) bad = "one NxK";
        break;
      case OPT_M:
        /* Positive integers; the largest M is fp4_tune's to say (the keys are checked before the cache is
         * touched). */
        if ((nm = fp4cli_parse_int_list("tune", "--m", v, 1, INT64_MAX, TUNE_MAX_M, ms)) < 0) goto usage_quiet;
        break;
      case OPT_OP:
        if (!parse_flags(v, op_names, 2, ops)) bad = "w4a16 and/or w4a4";
        break;
      case OPT_FORMAT:
        if (!parse_flags(v, fmt_names, 2, fmts)) bad = "nvfp4 and/or mxfp4";
        break;
      case OPT_ACT:
        if (fp4cli_parse_dtype(v, &act)) bad = "bf16, f16 or f32";
        break;
      case OPT_OUT:
        if (fp4cli_parse_dtype(v, &out)) bad = "bf16, f16 or f32";
        break;
      case OPT_RUNS:
        if ((rc = fp4cli_parse_int("tune", "--runs", v, 1, 1000000, &x))) goto usage_quiet;
        runs = (int)x;
        break;
      case OPT_CACHE:
        cache_path = v;
        break;
      case OPT_DEVICE:
        if ((rc = fp4cli_parse_int("tune", "--device", v, -1, FP4CLI_MAX_DEVICE, &x))) goto usage_quiet;
        device = (int)x;
        break;
      default:
        rc = fp4cli_bad_option("tune", c, argv);
        goto usage_quiet;
    }
    if (bad) {
      fprintf(stderr, "fp4kit tune: --%s '%s': give %s%s%s%s\n", longs[li].name, v, bad, why[0] ? " (" : "", why,
              why[0] ? ")" : "");
      goto usage;
    }
  }
  if ((rc = fp4cli_no_operands("tune", argc, argv))) goto usage_quiet;
  for (int i = 0; i < nmodels; i++)
    if ((rc = bench_model_shapes("tune", models[i].name, models[i].tp ? models[i].tp : default_tp, shapes, &nshapes))) {
      free(shapes);
      return rc;
    }
  if (!nshapes) {
    fprintf(stderr, "fp4kit tune: no shapes: give --model, --shapes or --shape\n");
    goto usage;
  }
  if (list_only) {
    bench_print_shapes(stdout, shapes, nshapes);
    free(shapes);
    return FP4CLI_OK;
  }
  /* The keys, by shape, format, op and M as given; M values of one bucket name one cache entry, which
   * fp4_tune times once. */
  const int nops = ops[0] + ops[1], nfmts = fmts[0] + fmts[1], per_shape = nfmts * nops * nm;
  const int nkeys = nshapes * per_shape, nb = count_m_buckets(ms, nm), nk = nshapes * nfmts * nops * nb;
  keys = calloc((size_t)nkeys, sizeof *keys);
  results = calloc((size_t)nkeys, sizeof *results);
  copy_of = malloc(sizeof *copy_of * (size_t)nkeys);
  if (!keys || !results || !copy_of) {
    rc = fp4cli_report("starting", FP4_ERR_OUT_OF_MEMORY);
    goto done;
  }
  int k = 0;
  for (int s = 0; s < nshapes; s++)
    for (int f = 0; f < 2; f++)
      for (int o = 0; o < 2; o++)
        for (int i = 0; i < nm && fmts[f] && ops[o]; i++)
          keys[k++] = (fp4_tune_key){(fp4_tune_op)o, (fp4_format)f, o == FP4_TUNE_MM ? FP4_DTYPE_E2M1X2 : act, out, ms[i],
                                     shapes[s].n, shapes[s].k};
  for (int i = 0; i < nkeys; i++) copy_of[i] = -1;
  /* What fp4_tune would refuse is refused here, before the device or the cache is touched. */
  if ((rc = check_keys(keys, nkeys, shapes, per_shape))) goto done;
  char path[4096];
  if (cache_path) snprintf(path, sizeof path, "%s", cache_path);
  else if (fp4_tuning_cache_default_path(path, sizeof path)) {
    rc = fp4cli_report("finding the cache file", FP4_ERR_NOT_FOUND);
    goto done;
  }
  if ((rc = fp4cli_resolve_device("tune", &device))) goto done;
  char why[320];
  if (device >= 0 && !fp4cli_device_usable(device, why, sizeof why)) {
    fprintf(stderr, "fp4kit tune: no usable CUDA device %d (%s); nothing was tuned (--device -1 tunes the host backends)\n",
            device, why);
    rc = FP4CLI_ERROR;
    goto done;
  }

  fp4_device_info dev;
  fp4_status st = fp4_context_create(&ctx, device);
  if (!st) st = fp4_device_info_get(ctx, &dev);
  if (!st) st = fp4_tuning_cache_create(ctx, &cache);
  if (st) {
    rc = fp4cli_report(device >= 0 ? "opening the device to tune" : "preparing to tune", st);
    goto done;
  }
  /* Merge with the cache already there: invalid entries of a usable one are dropped, said here; one
   * that cannot be used is replaced by the first save, with one warning, when it is recognisably a
   * cache (the save refuses any other file). */
  char unusable[512] = "";
  if (access(path, F_OK) == 0) {
    if (fp4_tuning_cache_load(cache, path) != FP4_OK)
      snprintf(unusable, sizeof unusable, "%s", fp4_last_error());
    else if (fp4_last_error()[0])
      fprintf(stderr, "fp4kit tune: warning: %s\n", fp4_last_error());
  }
  /* The cache is written once before any tuning (the same locked merge as at the end, so nothing
   * changes in a usable file): a path that cannot be written, or names a file that is not a cache,
   * fails now, not after the work. */
  if ((st = fp4_tuning_cache_save(cache, path))) {
    const int refused = st == FP4_ERR_INVALID_ARGUMENT; /* the path names something other than a cache */
    fprintf(stderr, "fp4kit tune: cannot write the tuning cache %s; nothing was tuned (give a%s --cache FILE or set "
                    "FP4KIT_TUNING_CACHE)\n", path, refused ? "nother" : " writable");
    fp4cli_report("writing the cache", st);
    rc = refused ? FP4CLI_USAGE : FP4CLI_ERROR;
    goto done;
  }
  if (unusable[0]) fprintf(stderr, "fp4kit tune: warning: %s; replaced by an empty cache\n", unusable);
  char ops_s[16], fmts_s[16];
  snprintf(ops_s, sizeof ops_s, "%s%s%s", ops[1] ? "w4a16" : "", ops[0] && ops[1] ? "," : "", ops[0] ? "w4a4" : "");
  snprintf(fmts_s, sizeof fmts_s, "%s%s%s", fmts[0] ? "nvfp4" : "", nfmts == 2 ? "," : "", fmts[1] ? "mxfp4" : "");
  if (device >= 0)
    printf("fp4kit %s tune: %d shapes x %d M buckets x %s x %s on device %d (%s, SM%d%d), act %s, out %s, %d runs per "
           "candidate\n",
           fp4_version(), nshapes, nb, ops_s, fmts_s, device, dev.name, dev.cc_major, dev.cc_minor, fp4_dtype_name(act),
           fp4_dtype_name(out), runs);
  else
    printf("fp4kit %s tune: %d shapes x %d M buckets x %s x %s on the host (%s, %d threads), act %s, out %s, %d runs per "
           "candidate\n",
           fp4_version(), nshapes, nb, ops_s, fmts_s, dev.name, dev.processors, fp4_dtype_name(act), fp4_dtype_name(out),
           runs);
  printf("%d keys; cache %s\n", nk, path);
  fflush(stdout);
  progress_state ps = {.keys = keys, .results = results, .copy_of = copy_of, .open = -1, .distinct = nk};
  if ((st = fp4_tune(ctx, keys, nkeys, runs, cache, results, progress, &ps))) {
    say_stopped(&ps, nkeys);
    rc = fp4cli_report("tuning", st);
  }
  printf("\n%-5s %-5s %8s %8s %8s  %-16s %-14s %12s %10s %s\n", "op", "fmt", "M bucket", "N", "K", "winner", "config",
         "median us", "TFLOP/s", "candidates (rejected, cut)");
  for (int i = 0; i < nkeys; i++) {
    const fp4_tune_result *r = &results[i];
    if (!r->key.n || copy_of[i] >= 0) continue; /* not reached (an error stopped the run), or a copy */
    double tflops = r->median_us > 0 ? 2.0 * (double)r->key.m * (double)r->key.n * (double)r->key.k / (r->median_us * 1e6) : 0;
    printf("%-5s %-5s %8lld %8lld %8lld  %-16s %-14s %12.2f %10.2f %d (%d, %d)\n", op_name(r->key.op),
           fp4_format_name(r->key.format), (long long)r->key.m, (long long)r->key.n, (long long)r->key.k,
           r->backend[0] ? r->backend : "(none)", r->config[0] ? r->config : "-", r->median_us, tflops, r->candidates,
           r->rejected, r->cut);
    if (!r->backend[0] && !rc) rc = FP4CLI_FAILED;
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
  free(copy_of);
  free(shapes);
  return rc;
usage:
  tune_usage(stderr);
usage_quiet:
  free(shapes);
  return FP4CLI_USAGE;
}
