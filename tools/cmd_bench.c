#define _GNU_SOURCE
/*
 * fp4kit bench: times FP4 GEMMs and quantization per (shape, M, backend) and states every speed as
 * a ratio to peers measured in the same run (copy/read bandwidth, cuBLAS BF16, cuBLASLt FP8, or the
 * host's read bandwidth and FMA peak). Benchmarks are not tests: correctness is `fp4kit check`'s
 * job; the bench only refuses to report a time for a call that left NaN in its output.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench_step.h"
#include "cli.h"
#include "harness.h"

enum {
  BENCH_MAX_MS = 64,
  BENCH_MAX_BACKENDS = 32,
  BENCH_MAX_SETS = 1024,
  BENCH_POOL_BLOCKS = 4, /* distinct random 128-row weight blocks, repeated along N */
  BENCH_ROW_BLOCK = 128
};
#define BENCH_REF_MAX_MNK (1LL << 24) /* the reference is the slow oracle: small problems only */
#define BENCH_MAX_M (1LL << 24)
#define BENCH_DEFAULT_CACHE (64LL << 20)

static const char *const default_models[] = {"qwen3.5-397b", "llama-3.3-70b"};

typedef struct bench_opts {
  const char *backends, *model, *shapes, *ms, *ops, *formats, *json, *csv, *html, *cache;
  const char *config; /* --config: one named configuration of the one named backend (GEMM ops) */
  int runs, warmup, device, tp, peers, list_shapes;
  int stdout_report; /* one of --json, --csv and --html is '-': the table goes to stderr */
  fp4_dtype act_dtype, out_dtype;
  fp4_scale_layout layout;
} bench_opts;

/* Where a backend runs each operation (probed with a tiny problem), or why it cannot. */
typedef struct bench_backend {
  const char *name;
  int usable[3];
  fp4_memory memory[3];
  char reason[3][200];
} bench_backend;

/* Weight sets of one (shape, format, memory), rotated through so the timed loop streams past the
 * cache; every set holds the same random values at a different address. */
typedef struct bench_weights {
  int sets;
  void *data[BENCH_MAX_SETS], *scales[BENCH_MAX_SETS];
  size_t data_bytes, scale_bytes;
  float multiplier;
} bench_weights;

typedef struct bench_acts {
  int sets;
  void *dense[BENCH_MAX_SETS], *qdata[BENCH_MAX_SETS], *qscales[BENCH_MAX_SETS];
  size_t dense_bytes, qdata_bytes, qscale_bytes;
  float gsf, multiplier;
  void *out;
  size_t out_bytes;
} bench_acts;

typedef struct bench_env {
  bench_opts o;
  fp4_context *hctx, *dctx;
  bench_run run;
  int cap;
  int64_t cache[2]; /* host, device */
} bench_env;

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit bench [--backend NAME[,NAME]|auto|all] [--model NAME|--shapes NxK[,NxK...]] [--tp N]\n"
          "                    [--m 1,2,4,...] [--op w4a16,w4a4,quantize] [--format nvfp4,mxfp4]\n"
          "                    [--act bf16|f16|f32] [--out bf16|f16|f32] [--layout 128x4|linear|8x4]\n"
          "                    [--runs N] [--warmup N] [--no-peers] [--device N] [--cache FILE]\n"
          "                    [--config NAME]\n"
          "                    [--json FILE|-] [--csv FILE|-] [--html FILE|-] [--list-shapes]\n"
          "\n"
          "Times FP4 GEMMs (W4A16: FP4 weights x 16-bit activations; W4A4: both FP4) and activation\n"
          "quantization for every (shape, M, backend), and measures peers in the same run so every\n"
          "number is also a ratio: the copy bandwidth, cuBLAS BF16 and cuBLASLt FP8 GEMMs on the same\n"
          "shape and a read-only pass over the same weight bytes, timed like the GEMM (device), or the\n"
          "host read bandwidth and FP32 FMA peak (host backends).\n"
          "\n"
          "  --backend   'all' (default): every available backend that runs on the chosen device's memory,\n"
          "              except 'ref' (the slow oracle; name it to include it: it is limited to\n"
          "              M*N*K <= %lld). 'auto' lets the library choose per call: with a device\n"
          "              it runs on device memory only (never a host backend, no host peers); each\n"
          "              auto row shows what ran (fp4_run_info) and the tuning cache's verdict for\n"
          "              its key: cache=hit (ran the cached winner), miss (the cache names another\n"
          "              winner), none (no entry: the heuristic chose).\n"
          "  --cache     the tuning cache auto reads (default as fp4kit tune: $FP4KIT_TUNING_CACHE,\n"
          "              $XDG_CACHE_HOME/fp4kit/tuning.json or ~/.cache/fp4kit/tuning.json).\n"
          "  --model     a shape set (fp4kit bench --model list). Default: %s and %s.\n"
          "              " BENCH_MODEL_SHAPES_HELP "\n"
          "  --list-shapes  print the shapes (N K name) the options select, and exit.\n"
          "  --shapes    explicit weight shapes N x K (N outputs, K inputs), e.g. 8192x28672,57344x8192.\n"
          "  --tp        tensor-parallel degree the model shapes are sharded for (default 1).\n"
          "  --m         token counts, at most %d, each 1 to %lld (default 1,2,4,8,16,32,64).\n"
          "  --op        default w4a16,w4a4. W4A4 points also time the activation quantize alone and\n"
          "              quantize followed by the GEMM (the total a layer pays).\n"
          "  --format    default nvfp4. --act: W4A16 activations and quantize input (default bf16).\n"
          "  --out       output dtype (default bf16). --layout: scale layout of both operands (128x4).\n"
          "  --runs      timed calls per point, 50 to 1000000 (default 100 on a device, 50 on the host);\n"
          "              the median is reported. --warmup: untimed calls first, 0 to 100000 (default 10).\n"
          "  --moe       time the MoE layer instead (fp4kit bench --moe --help).\n"
          "  --step      time one rank's decode step of a model instead (fp4kit bench --step MODEL --help).\n"
          "  --no-peers  skip the same-run peers (ratios are then left empty).\n"
          "  --config    time one named configuration of the one --backend (GEMM ops; the tuner's\n"
          "              candidate names, e.g. small-m.r32.w4 or large-m.wgra.128x64).\n"
          "  --device    CUDA ordinal, or -1 for host backends only (default: FP4KIT_DEVICE, else 0\n"
          "              when a CUDA device is present, else -1).\n"
          "  --json      one record per point (with device, driver, runtime, commit, date, command).\n"
          "  --csv       the same records as CSV.\n"
          "  --html      one self-contained page: roofline chart (SVG) against the same-run copy\n"
          "              bandwidth and BF16 tensor-core ceilings, and the table.\n"
          "              For each of --json, --csv and --html, '-' writes to stdout and moves the table\n"
          "              to stderr; at most one of them can be '-'.\n"
          "\n"
          "Operands are random (never zero), quantized with the runtime recipe, and rotated through\n"
          "enough copies to exceed 3x the last-level cache (GPU L2 or CPU LLC). The commit recorded is\n"
          "FP4KIT_COMMIT from the environment when set, else 'git rev-parse HEAD' of the source tree this\n"
          "command was built from (with -dirty when its tracked files differ from that commit), else\n"
          "unknown. The --json, --csv and --html files are checked for writing before anything is timed;\n"
          "each is written to a temporary file beside it and renamed over it once whole, so a failed write\n"
          "leaves the file there as it was. A link is written through to the file it leads to. A file\n"
          "already there keeps its permissions; a new one gets 0666 less the umask.\n"
          "\n"
          "Exit status: 0 every point ran, 1 a point failed (see the table), 2 a usage error (an unknown\n"
          "option, a bad value, an option that takes one value given twice), 3 the device asked for\n"
          "cannot be used, nothing could be timed, or a report file could not be written.\n",
          (long long)BENCH_REF_MAX_MNK, default_models[0], default_models[1], BENCH_MAX_MS, BENCH_MAX_M);
}

/* ---------------------------------------------------------------------------------------------- */
/* Option parsing                                                                                 */
/* ---------------------------------------------------------------------------------------------- */

/* Splits a comma list into a scratch copy; returns the count or -1 when there are too many. */
static int split_list(const char *s, char *buf, size_t size, char **items, int max) {
  snprintf(buf, size, "%s", s);
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (n == max) return -1;
    items[n++] = tok;
  }
  return n;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "fp4kit bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nRun 'fp4kit bench --help' for the options.\n");
  return FP4CLI_USAGE;
}

/* An option whose second value would silently drop the first: a shape set or a report file asked for
 * and never produced. */
static int set_once(const char **slot, const char *opt, const char *v) {
  if (!*slot) {
    *slot = v;
    return FP4CLI_OK;
  }
  fprintf(stderr, "fp4kit bench: %s given twice ('%s' and '%s'); it takes one value\n"
                  "Run 'fp4kit bench --help' for the options.\n", opt, *slot, v);
  return FP4CLI_USAGE;
}

static int parse_opts(int argc, char **argv, bench_opts *o, int *help) {
  memset(o, 0, sizeof *o);
  o->backends = "all";
  o->ms = "1,2,4,8,16,32,64";
  o->ops = "w4a16,w4a4";
  o->formats = "nvfp4";
  o->warmup = 10;
  o->device = FP4CLI_DEVICE_UNSET;
  o->tp = 1;
  o->peers = 1;
  o->act_dtype = FP4_DTYPE_BF16;
  o->out_dtype = FP4_DTYPE_BF16;
  o->layout = FP4_LAYOUT_128X4;
  *help = 0;
  enum { OPT_BACKEND = 256, OPT_MODEL, OPT_SHAPES, OPT_M, OPT_OP, OPT_FORMAT, OPT_RUNS, OPT_WARMUP, OPT_JSON, OPT_CSV,
         OPT_HTML, OPT_DEVICE, OPT_TP, OPT_ACT, OPT_OUT, OPT_LAYOUT, OPT_CACHE, OPT_CONFIG, OPT_NO_PEERS, OPT_LIST };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"backend", required_argument, NULL, OPT_BACKEND},
                                        {"model", required_argument, NULL, OPT_MODEL},
                                        {"shapes", required_argument, NULL, OPT_SHAPES},
                                        {"m", required_argument, NULL, OPT_M},
                                        {"op", required_argument, NULL, OPT_OP},
                                        {"format", required_argument, NULL, OPT_FORMAT},
                                        {"runs", required_argument, NULL, OPT_RUNS},
                                        {"warmup", required_argument, NULL, OPT_WARMUP},
                                        {"json", required_argument, NULL, OPT_JSON},
                                        {"csv", required_argument, NULL, OPT_CSV},
                                        {"html", required_argument, NULL, OPT_HTML},
                                        {"device", required_argument, NULL, OPT_DEVICE},
                                        {"tp", required_argument, NULL, OPT_TP},
                                        {"act", required_argument, NULL, OPT_ACT},
                                        {"out", required_argument, NULL, OPT_OUT},
                                        {"layout", required_argument, NULL, OPT_LAYOUT},
                                        {"cache", required_argument, NULL, OPT_CACHE},
                                        {"config", required_argument, NULL, OPT_CONFIG},
                                        {"no-peers", no_argument, NULL, OPT_NO_PEERS},
                                        {"list-shapes", no_argument, NULL, OPT_LIST},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    const char *v = optarg;
    long long x = 0;
    switch (c) {
      case 'h':
        *help = 1;
        return FP4CLI_OK;
      case OPT_NO_PEERS: o->peers = 0; break;
      case OPT_LIST: o->list_shapes = 1; break;
      case OPT_BACKEND: o->backends = v; break;
      case OPT_MODEL:
        if (set_once(&o->model, "--model", v)) return FP4CLI_USAGE;
        break;
      case OPT_SHAPES:
        if (set_once(&o->shapes, "--shapes", v)) return FP4CLI_USAGE;
        break;
      case OPT_M: o->ms = v; break;
      case OPT_OP: o->ops = v; break;
      case OPT_FORMAT: o->formats = v; break;
      case OPT_JSON:
        if (set_once(&o->json, "--json", v)) return FP4CLI_USAGE;
        break;
      case OPT_CSV:
        if (set_once(&o->csv, "--csv", v)) return FP4CLI_USAGE;
        break;
      case OPT_HTML:
        if (set_once(&o->html, "--html", v)) return FP4CLI_USAGE;
        break;
      case OPT_CACHE: o->cache = v; break;
      case OPT_CONFIG: o->config = v; break;
      case OPT_RUNS: /* the median needs them */
        if (fp4cli_parse_int("bench", "--runs", v, 50, 1000000, &x)) return FP4CLI_USAGE;
        o->runs = (int)x;
        break;
      case OPT_WARMUP:
        if (fp4cli_parse_int("bench", "--warmup", v, 0, 100000, &x)) return FP4CLI_USAGE;
        o->warmup = (int)x;
        break;
      case OPT_DEVICE:
        if (fp4cli_parse_int("bench", "--device", v, -1, FP4CLI_MAX_DEVICE, &x)) return FP4CLI_USAGE;
        o->device = (int)x;
        break;
      case OPT_TP:
        if (fp4cli_parse_int("bench", "--tp", v, 1, 1024, &x)) return FP4CLI_USAGE;
        o->tp = (int)x;
        break;
      case OPT_ACT:
        if (fp4cli_parse_dtype(v, &o->act_dtype)) return usage_error("--act '%s': use bf16, f16 or f32", v);
        break;
      case OPT_OUT:
        if (fp4cli_parse_dtype(v, &o->out_dtype)) return usage_error("--out '%s': use bf16, f16 or f32", v);
        break;
      case OPT_LAYOUT:
        if (!strcmp(v, "128x4")) o->layout = FP4_LAYOUT_128X4;
        else if (!strcmp(v, "linear")) o->layout = FP4_LAYOUT_LINEAR;
        else if (!strcmp(v, "8x4")) o->layout = FP4_LAYOUT_8X4;
        else return usage_error("--layout '%s': use 128x4, linear or 8x4", v);
        break;
      default:
        return fp4cli_bad_option("bench", c, argv);
    }
  }
  if (fp4cli_no_operands("bench", argc, argv)) return FP4CLI_USAGE;
  if (o->model && o->shapes) return usage_error("%s", "--model and --shapes exclude each other");
  if (o->config && (!strcmp(o->backends, "all") || !strcmp(o->backends, "auto") || strchr(o->backends, ',')))
    return usage_error("%s", "--config names a configuration of one backend: give --backend NAME too");
  const char *const paths[] = {o->json, o->csv, o->html};
  if ((o->stdout_report = fp4cli_stdout_report("bench", 3, fp4cli_report_options, paths)) < 0) return FP4CLI_USAGE;
  return FP4CLI_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Shapes                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static int collect_shapes(const bench_opts *o, bench_shape *shapes, int *count) {
  *count = 0;
  if (o->shapes) {
    char why[160];
    if (bench_parse_shapes(o->shapes, shapes, count, why, sizeof why) < 0) return usage_error("--shapes: %s", why);
    return FP4CLI_OK;
  }
  if (o->model) return bench_model_shapes("bench", o->model, o->tp, shapes, count);
  for (size_t i = 0; i < sizeof default_models / sizeof *default_models; i++) {
    int rc = bench_model_shapes("bench", default_models[i], o->tp, shapes, count);
    if (rc) return rc;
  }
  return FP4CLI_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Operands                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static fp4_context *ctx_for(bench_env *e, fp4_memory mem) { return mem == FP4_MEMORY_DEVICE ? e->dctx : e->hctx; }

static int sets_for(int64_t cache, double set_bytes) {
  double want = 3.0 * (double)cache;
  if (set_bytes >= want) return 1;
  double s = ceil(want / set_bytes);
  return s > BENCH_MAX_SETS ? BENCH_MAX_SETS : (int)s;
}

static float amax_of(const float *x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
  return m;
}

/* Copies one host image into `sets` buffers of the memory. */
static fp4_status replicate(fp4_context *ctx, fp4_memory mem, const void *img, size_t bytes, void **dst, int sets) {
  for (int i = 0; i < sets; i++) {
    fp4_status st = fp4_alloc(ctx, mem, bytes, &dst[i]);
    if (!st) st = fp4_copy(ctx, dst[i], mem, img, FP4_MEMORY_HOST, bytes);
    if (st) return st;
  }
  return FP4_OK;
}

static void weights_free(fp4_context *ctx, fp4_memory mem, bench_weights *w) {
  for (int i = 0; i < w->sets; i++) {
    fp4_free(ctx, mem, w->data[i]);
    fp4_free(ctx, mem, w->scales[i]);
  }
  memset(w, 0, sizeof *w);
}

static void acts_free(fp4_context *ctx, fp4_memory mem, bench_acts *a) {
  for (int i = 0; i < a->sets; i++) {
    fp4_free(ctx, mem, a->dense[i]);
    fp4_free(ctx, mem, a->qdata[i]);
    fp4_free(ctx, mem, a->qscales[i]);
  }
  fp4_free(ctx, mem, a->out);
  memset(a, 0, sizeof *a);
}

/* Random weights [n, k], quantized on the host with the runtime recipe: a pool of distinct 128-row
 * blocks (a block's data and scales are contiguous in every layout) repeated along N; a last partial
 * block is quantized on its own so its scale padding is zero as the layout requires. */
static fp4_status weights_make(bench_env *e, fp4_memory mem, fp4_format fmt, int64_t n, int64_t k, bench_weights *w) {
  memset(w, 0, sizeof *w);
  const int bs = fp4_format_block_size(fmt);
  size_t blk_scales = 0, all_scales = 0;
  fp4_status st = fp4_scales_size(fmt, e->o.layout, BENCH_ROW_BLOCK, k, &blk_scales);
  if (!st) st = fp4_scales_size(fmt, e->o.layout, n, k, &all_scales);
  if (st) return st;
  const int64_t pool_rows = BENCH_POOL_BLOCKS * BENCH_ROW_BLOCK;
  const size_t blk_data = (size_t)BENCH_ROW_BLOCK * (size_t)k / 2;
  w->data_bytes = (size_t)n * (size_t)k / 2;
  w->scale_bytes = all_scales;
  float *f = malloc((size_t)pool_rows * (size_t)k * sizeof *f);
  uint8_t *pool_d = malloc((size_t)BENCH_POOL_BLOCKS * blk_data), *pool_s = malloc(BENCH_POOL_BLOCKS * blk_scales);
  uint8_t *img_d = malloc(w->data_bytes), *img_s = malloc(all_scales);
  if (!f || !pool_d || !pool_s || !img_d || !img_s) {
    st = FP4_ERR_OUT_OF_MEMORY;
    fprintf(stderr, "fp4kit bench: out of host memory for %lld x %lld weights\n", (long long)n, (long long)k);
    goto out;
  }
  fp4h_rng g = {0x5EED0000ull + (uint64_t)n * 31u + (uint64_t)k};
  fp4h_fill(&g, f, pool_rows * k, FP4H_DATA_NORMAL, bs);
  const float gsf = 448.0f * 6.0f / amax_of(f, (size_t)(pool_rows * k));
  for (int b = 0; b < BENCH_POOL_BLOCKS && !st; b++) {
    fp4_matrix x = {f + (size_t)b * BENCH_ROW_BLOCK * (size_t)k, BENCH_ROW_BLOCK, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix q = {pool_d + b * blk_data, pool_s + b * blk_scales, BENCH_ROW_BLOCK, k, fmt, e->o.layout, 1.0f,
                     FP4_MEMORY_HOST};
    st = fp4_quantize(e->hctx, &x, gsf, &q, NULL);
    w->multiplier = q.multiplier;
  }
  const int64_t full = n / BENCH_ROW_BLOCK, rem = n % BENCH_ROW_BLOCK;
  for (int64_t b = 0; b < full && !st; b++) {
    memcpy(img_d + (size_t)b * blk_data, pool_d + (size_t)(b % BENCH_POOL_BLOCKS) * blk_data, blk_data);
    memcpy(img_s + (size_t)b * blk_scales, pool_s + (size_t)(b % BENCH_POOL_BLOCKS) * blk_scales, blk_scales);
  }
  if (rem && !st) {
    fp4_matrix x = {f, rem, k, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_qmatrix q = {img_d + (size_t)full * blk_data, img_s + (size_t)full * blk_scales, rem, k, fmt, e->o.layout, 1.0f,
                     FP4_MEMORY_HOST};
    st = fp4_quantize(e->hctx, &x, gsf, &q, NULL);
  }
  if (st) goto out;
  w->sets = sets_for(e->cache[mem], (double)(w->data_bytes + w->scale_bytes));
  fp4_context *ctx = ctx_for(e, mem);
  if (!(st = replicate(ctx, mem, img_d, w->data_bytes, w->data, w->sets)))
    st = replicate(ctx, mem, img_s, w->scale_bytes, w->scales, w->sets);
out:
  if (st) weights_free(ctx_for(e, mem), mem, w);
  free(f);
  free(pool_d);
  free(pool_s);
  free(img_d);
  free(img_s);
  return st;
}

static void fill_nan(void *p, fp4_dtype t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == FP4_DTYPE_F32) ((uint32_t *)p)[i] = 0x7FC00000u;
    else ((uint16_t *)p)[i] = t == FP4_DTYPE_BF16 ? 0x7FC0u : 0x7E00u;
  }
}

/* Random activations [m, k] in the activation dtype and their FP4 quantization (W4A4 operands), and
 * one output [m, n] (n = 0: none). */
static fp4_status acts_make(bench_env *e, fp4_memory mem, fp4_format fmt, int64_t m, int64_t n, int64_t k,
                            int weight_sets, bench_acts *a) {
  memset(a, 0, sizeof *a);
  size_t qs = 0;
  fp4_status st = fp4_scales_size(fmt, e->o.layout, m, k, &qs);
  if (st) return st;
  a->dense_bytes = (size_t)(m * k) * fp4_dtype_size(e->o.act_dtype);
  a->qdata_bytes = (size_t)(m * k) / 2;
  a->qscale_bytes = qs;
  a->out_bytes = (size_t)(m * n) * fp4_dtype_size(e->o.out_dtype);
  float *f = malloc((size_t)(m * k) * sizeof *f);
  void *dense = malloc(a->dense_bytes), *qd = malloc(a->qdata_bytes), *qsc = malloc(qs);
  if (!f || !dense || !qd || !qsc) {
    st = FP4_ERR_OUT_OF_MEMORY;
    fprintf(stderr, "fp4kit bench: out of host memory for %lld x %lld activations\n", (long long)m, (long long)k);
    goto out;
  }
  fp4h_rng g = {0xAC7ull + (uint64_t)m * 131u + (uint64_t)k};
  fp4h_fill(&g, f, m * k, FP4H_DATA_NORMAL, fp4_format_block_size(fmt));
  fp4_convert(f, FP4_DTYPE_F32, dense, e->o.act_dtype, (size_t)(m * k));
  /* The global scale from the values as the activation dtype holds them. */
  fp4_convert(dense, e->o.act_dtype, f, FP4_DTYPE_F32, (size_t)(m * k));
  a->gsf = 448.0f * 6.0f / amax_of(f, (size_t)(m * k));
  fp4_matrix x = {dense, m, k, 0, e->o.act_dtype, FP4_MEMORY_HOST};
  fp4_qmatrix q = {qd, qsc, m, k, fmt, e->o.layout, 1.0f, FP4_MEMORY_HOST};
  if ((st = fp4_quantize(e->hctx, &x, a->gsf, &q, NULL))) goto out;
  a->multiplier = q.multiplier;
  fp4_context *ctx = ctx_for(e, mem);
  a->sets = n ? weight_sets : sets_for(e->cache[mem], (double)(a->dense_bytes + a->qdata_bytes + qs));
  if ((st = replicate(ctx, mem, dense, a->dense_bytes, a->dense, a->sets)) ||
      (st = replicate(ctx, mem, qd, a->qdata_bytes, a->qdata, a->sets)) ||
      (st = replicate(ctx, mem, qsc, qs, a->qscales, a->sets)))
    goto out;
  if (n) {
    void *img = malloc(a->out_bytes);
    if (!img) {
      st = FP4_ERR_OUT_OF_MEMORY;
      goto out;
    }
    fill_nan(img, e->o.out_dtype, (size_t)(m * n));
    st = fp4_alloc(ctx, mem, a->out_bytes, &a->out);
    if (!st) st = fp4_copy(ctx, a->out, mem, img, FP4_MEMORY_HOST, a->out_bytes);
    free(img);
  }
out:
  if (st) acts_free(ctx_for(e, mem), mem, a);
  free(f);
  free(dense);
  free(qd);
  free(qsc);
  return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Timed calls                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

typedef enum call_mode { CALL_GEMM, CALL_QUANTIZE, CALL_TOTAL } call_mode;

typedef struct bench_call {
  fp4_context *ctx;
  bench_op op;
  call_mode mode;
  fp4_format fmt;
  fp4_memory mem;
  int64_t m, n, k;
  fp4_scale_layout layout;
  fp4_dtype act, out;
  const bench_weights *w;
  const bench_acts *a;
  fp4_options gemm, quant;
  fp4_run_info info, qinfo;
} bench_call;

static fp4_status do_call(void *user, int it) {
  bench_call *c = user;
  const bench_acts *a = c->a;
  int j = it % a->sets;
  fp4_matrix x = {a->dense[j], c->m, c->k, 0, c->act, c->mem};
  fp4_qmatrix xq = {a->qdata[j], a->qscales[j], c->m, c->k, c->fmt, c->layout, a->multiplier, c->mem};
  if (c->mode != CALL_GEMM) {
    fp4_status st = fp4_quantize(c->ctx, &x, a->gsf, &xq, &c->quant);
    if (st || c->mode == CALL_QUANTIZE) return st;
  }
  int i = it % c->w->sets;
  fp4_qmatrix w = {c->w->data[i], c->w->scales[i], c->n, c->k, c->fmt, c->layout, c->w->multiplier, c->mem};
  fp4_matrix y = {a->out, c->m, c->n, 0, c->out, c->mem};
  if (c->op == BENCH_W4A16) return fp4_mm_w4a16(c->ctx, &x, &w, 1.0f, &y, &c->gemm);
  return fp4_mm(c->ctx, &xq, &w, 1.0f, &y, &c->gemm);
}

/* One untimed call, so a backend that cannot run the point says why before anything is timed. */
static fp4_status try_call(bench_call *c) {
  fp4_status st = do_call(c, 0);
  if (!st) st = fp4_synchronize(c->ctx);
  return st;
}

/* Outputs were NaN before the first call: any NaN/inf left means elements were never written. */
static int64_t nonfinite_outputs(bench_call *c) {
  size_t n = (size_t)(c->m * c->n);
  void *h = malloc(c->a->out_bytes);
  float *f = malloc(n * sizeof *f);
  int64_t bad = -1;
  if (h && f && fp4_copy(c->ctx, h, FP4_MEMORY_HOST, c->a->out, c->mem, c->a->out_bytes) == FP4_OK &&
      fp4_convert(h, c->out, f, FP4_DTYPE_F32, n) == FP4_OK) {
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(f[i]);
  }
  free(h);
  free(f);
  return bad;
}

/* ---------------------------------------------------------------------------------------------- */
/* Backends                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

/* Finds where a backend runs an operation by timing nothing: one tiny call with host operands, then
 * (with a device) with device operands. */
static void probe_backend(bench_env *e, bench_backend *b, bench_op op, fp4_format fmt) {
  const int64_t m = 1, n = 128, k = 256;
  char why[2][200] = {"", ""}; /* [memory] */
  /* The run's memory first: with a device selected, a backend that runs there is timed there even
   * when it could also run on the host. auto with a device selected is timed on device memory only:
   * on host operands it would pick a host backend (and drag in the host peers), which is not what
   * auto on this device does. */
  const int run_dev = e->dctx != NULL;
  for (int mi = 0; mi < 2; mi++) {
    const fp4_memory mem = (mi == 0) == run_dev ? FP4_MEMORY_DEVICE : FP4_MEMORY_HOST;
    const int wi = mem == FP4_MEMORY_DEVICE;
    if (mem == FP4_MEMORY_DEVICE && !e->dctx) {
      snprintf(why[wi], sizeof why[wi], "no device in this run");
      continue;
    }
    if (mem == FP4_MEMORY_HOST && run_dev && !strcmp(b->name, "auto")) {
      snprintf(why[wi], sizeof why[wi], "auto is timed on device memory when a device is selected (--device -1 for the host)");
      continue;
    }
    bench_weights *w = calloc(1, sizeof *w);
    bench_acts *a = calloc(1, sizeof *a);
    int64_t saved = e->cache[mem];
    e->cache[mem] = 1; /* one set is enough for a probe */
    fp4_status st = (w && a) ? weights_make(e, mem, fmt, n, k, w) : FP4_ERR_OUT_OF_MEMORY;
    if (!st) st = acts_make(e, mem, fmt, m, op == BENCH_QUANTIZE ? 0 : n, k, w->sets, a);
    e->cache[mem] = saved;
    if (!st) {
      bench_call c = {.ctx = ctx_for(e, mem), .op = op, .mode = op == BENCH_QUANTIZE ? CALL_QUANTIZE : CALL_GEMM,
                      .fmt = fmt, .mem = mem, .m = m, .n = n, .k = k, .layout = e->o.layout, .act = e->o.act_dtype,
                      .out = e->o.out_dtype, .w = w, .a = a};
      c.gemm.backend = c.quant.backend = b->name;
      st = try_call(&c);
      if (!st) {
        b->usable[op] = 1;
        b->memory[op] = mem;
      }
    }
    if (st) snprintf(why[wi], sizeof why[wi], "%s", fp4_last_error()[0] ? fp4_last_error() : fp4_status_str(st));
    if (w) weights_free(ctx_for(e, mem), mem, w);
    if (a) acts_free(ctx_for(e, mem), mem, a);
    free(w);
    free(a);
    if (b->usable[op]) return;
  }
  snprintf(b->reason[op], sizeof b->reason[op], "host: %.90s; device: %.90s", why[0], why[1]);
}

static int collect_backends(bench_env *e, bench_backend *list, int *count, const int *ops, fp4_format fmt) {
  *count = 0;
  const char *sel = e->o.backends;
  const int all = !strcmp(sel, "all");
  char buf[512], *items[BENCH_MAX_BACKENDS];
  int nitems = 0;
  if (!all) {
    nitems = split_list(sel, buf, sizeof buf, items, BENCH_MAX_BACKENDS);
    if (nitems <= 0) return usage_error("--backend '%s': give a name, a list, auto or all", sel);
  }
  for (int i = 0; !all && i < nitems; i++)
    if (strcmp(items[i], "auto") && !fp4cli_backend_known("bench", items[i])) return FP4CLI_USAGE;
  const int run_mem = e->dctx ? FP4_MEMORY_DEVICE : FP4_MEMORY_HOST;
  int names = all ? fp4_backend_count() : nitems;
  for (int i = 0; i < names && *count < BENCH_MAX_BACKENDS; i++) {
    const char *name = all ? fp4_backend_name(i) : items[i];
    if (all && !strcmp(name, "ref")) continue; /* the oracle is slow: only when named */
    bench_backend *b = &list[*count];
    memset(b, 0, sizeof *b);
    b->name = !strcmp(name, "auto") ? "auto" : NULL;
    for (int j = 0; !b->name && j < fp4_backend_count(); j++)
      if (!strcmp(fp4_backend_name(j), name)) b->name = fp4_backend_name(j);
    char reason[256] = "";
    if (strcmp(b->name, "auto") &&
        fp4_backend_available(e->dctx ? e->dctx : e->hctx, b->name, reason, sizeof reason) != FP4_OK) {
      fprintf(stderr, "fp4kit bench: backend '%s' is not available: %s\n", b->name, reason);
      continue;
    }
    int any = 0;
    for (int op = 0; op < 3; op++) {
      if (!ops[op]) continue;
      probe_backend(e, b, (bench_op)op, fmt);
      if (all && b->usable[op] && (int)b->memory[op] != run_mem) {
        b->usable[op] = 0; /* 'all' means the backends of the chosen device */
        snprintf(b->reason[op], sizeof b->reason[op], "runs on %s memory; this run uses %s (name it to include it)",
                 fp4_memory_name(b->memory[op]), fp4_memory_name((fp4_memory)run_mem));
      }
      any |= b->usable[op];
      if (!b->usable[op]) fprintf(stderr, "fp4kit bench: %s cannot run %s: %s\n", b->name, bench_op_name((bench_op)op), b->reason[op]);
    }
    if (any || !all) (*count)++;
  }
  return FP4CLI_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Peers                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

static void note_peer(bench_run *r, const char *what) {
  size_t len = strlen(r->peer_notes);
  snprintf(r->peer_notes + len, sizeof r->peer_notes - len, "%s%s: %s", len ? "; " : "", what, fp4_last_error());
}

static bench_value peer_rate(fp4_context *ctx, fp4_peer p, int64_t m, int64_t n, int64_t k, int runs, double scale,
                             bench_run *r, fp4_timing *t_out) {
  fp4_timing t;
  double rate = 0.0;
  bench_value v = {0, 0.0};
  if (fp4_time_peer(ctx, p, m, n, k, runs, &t, &rate) == FP4_OK) {
    v.ok = 1;
    v.v = rate * scale;
    if (t_out) *t_out = t;
  } else if (r) {
    note_peer(r, fp4_peer_name(p));
  }
  return v;
}

static void run_global_peers(bench_env *e, int host, int device) {
  bench_run *r = &e->run;
  if (device) {
    /* 1 GiB per buffer (less on small devices): far past any L2, so this is HBM/GDDR bandwidth. */
    int64_t bytes = 1LL << 30;
    if (r->dev.memory_bytes && bytes > r->dev.memory_bytes / 16) bytes = r->dev.memory_bytes / 16;
    fprintf(stderr, "fp4kit bench: same-run device peers (copy, read, cuBLAS BF16 and cuBLASLt FP8 at 8192^3)\n");
    r->copy_gbps = peer_rate(e->dctx, FP4_PEER_COPY, 1, bytes >> 20, 1 << 20, 50, 1e-9, r, NULL);
    r->read_gbps = peer_rate(e->dctx, FP4_PEER_READ, 1, bytes >> 20, 1 << 20, 50, 1e-9, r, NULL);
    r->bf16_peak_tflops = peer_rate(e->dctx, FP4_PEER_CUBLAS_BF16, 8192, 8192, 8192, 50, 1e-12, r, NULL);
    r->fp8_peak_tflops = peer_rate(e->dctx, FP4_PEER_CUBLASLT_FP8, 8192, 8192, 8192, 50, 1e-12, r, NULL);
  }
  if (host) {
    /* 4x the last-level cache, within [256 MiB, 1 GiB]: DRAM bandwidth, not cache bandwidth. */
    int64_t bytes = 4 * e->cache[FP4_MEMORY_HOST];
    if (bytes < (256LL << 20)) bytes = 256LL << 20;
    if (bytes > (1LL << 30)) bytes = 1LL << 30;
    if (r->host.memory_bytes && bytes > r->host.memory_bytes / 8) bytes = r->host.memory_bytes / 8;
    fprintf(stderr, "fp4kit bench: same-run host peers (read over %lld MiB, FP32 FMA peak, %d threads)\n",
            (long long)(bytes >> 20), r->host.processors);
    r->host_read_gbps = peer_rate(NULL, FP4_PEER_HOST_READ, 1, bytes >> 10, 1 << 10, 20, 1e-9, r, NULL);
    r->host_fma_gflops = peer_rate(NULL, FP4_PEER_HOST_FMA, 1, 1 << 10, 1 << 20, 20, 1e-9, r, NULL);
  }
}

/* cuBLAS BF16 and cuBLASLt FP8 on the point's shape; shared by every point of that (M, N, K). */
static void shape_peers(bench_env *e, bench_point *pt) {
  for (int i = 0; i < e->run.npoints; i++) {
    bench_point *q = &e->run.points[i];
    if (q == pt || q->memory != FP4_MEMORY_DEVICE || q->m != pt->m || q->n != pt->n || q->k != pt->k) continue;
    if (!q->bf16_us.ok && !q->fp8_us.ok && !q->peer_note[0]) continue;
    pt->bf16_us = q->bf16_us;
    pt->bf16_tflops = q->bf16_tflops;
    pt->fp8_us = q->fp8_us;
    pt->fp8_tflops = q->fp8_tflops;
    snprintf(pt->peer_note, sizeof pt->peer_note, "%s", q->peer_note);
    return;
  }
  const int runs = e->run.runs_device;
  fp4_timing t;
  bench_value v = peer_rate(e->dctx, FP4_PEER_CUBLAS_BF16, pt->m, pt->n, pt->k, runs, 1e-12, NULL, &t);
  if (v.ok) {
    pt->bf16_tflops = v;
    pt->bf16_us = (bench_value){1, t.median_us};
  } else {
    snprintf(pt->peer_note, sizeof pt->peer_note, "cublas-bf16: %.90s", fp4_last_error());
  }
  v = peer_rate(e->dctx, FP4_PEER_CUBLASLT_FP8, pt->m, pt->n, pt->k, runs, 1e-12, NULL, &t);
  if (v.ok) {
    pt->fp8_tflops = v;
    pt->fp8_us = (bench_value){1, t.median_us};
  } else {
    size_t len = strlen(pt->peer_note);
    snprintf(pt->peer_note + len, sizeof pt->peer_note - len, "%scublaslt-fp8: %.90s", len ? "; " : "", fp4_last_error());
  }
}

/* The read peer over the point's weight + scale bytes; shared by every point of that (N, K, format). */
static void read_floor_peer(bench_env *e, bench_point *pt) {
  for (int i = 0; i < e->run.npoints; i++) {
    const bench_point *q = &e->run.points[i];
    if (q != pt && q->memory == FP4_MEMORY_DEVICE && q->read_floor_us.ok && q->n == pt->n && q->k == pt->k &&
        q->format == pt->format) {
      pt->read_floor_us = q->read_floor_us;
      return;
    }
  }
  fp4_timing t;
  if (peer_rate(e->dctx, FP4_PEER_READ, 1, (int64_t)pt->weight_bytes, 1, e->run.runs_device, 1e-9, NULL, &t).ok)
    pt->read_floor_us = (bench_value){1, t.median_us};
  else {
    size_t len = strlen(pt->peer_note);
    snprintf(pt->peer_note + len, sizeof pt->peer_note - len, "%sread floor: %.90s", len ? "; " : "", fp4_last_error());
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* One point                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static bench_point *new_point(bench_env *e) {
  if (e->run.npoints == e->cap) {
    int cap = e->cap ? 2 * e->cap : 64;
    bench_point *p = realloc(e->run.points, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    e->run.points = p;
    e->cap = cap;
  }
  bench_point *pt = &e->run.points[e->run.npoints++];
  memset(pt, 0, sizeof *pt);
  return pt;
}

static void set_metrics(bench_env *e, bench_point *pt) {
  const double us = pt->t.median_us, s = us * 1e-6;
  const double bs = fp4_format_block_size(pt->format);
  if (pt->op == BENCH_QUANTIZE) {
    pt->act_bytes = (double)(pt->m * pt->k) * (double)fp4_dtype_size(e->o.act_dtype);
    pt->out_bytes = (double)(pt->m * pt->k) / 2 + (double)(pt->m * pt->k) / bs;
    pt->weight_gbps = (bench_value){1, (pt->act_bytes + pt->out_bytes) / s * 1e-9};
    return;
  }
  pt->flops = 2.0 * (double)pt->m * (double)pt->n * (double)pt->k;
  pt->weight_bytes = (double)(pt->n * pt->k) / 2 + (double)(pt->n * pt->k) / bs;
  pt->act_bytes = pt->op == BENCH_W4A16 ? (double)(pt->m * pt->k) * (double)fp4_dtype_size(e->o.act_dtype)
                                        : (double)(pt->m * pt->k) / 2 + (double)(pt->m * pt->k) / bs;
  pt->out_bytes = (double)(pt->m * pt->n) * (double)fp4_dtype_size(e->o.out_dtype);
  pt->tflops = (bench_value){1, pt->flops / s * 1e-12};
  pt->weight_gbps = (bench_value){1, pt->weight_bytes / s * 1e-9};
  pt->intensity = (bench_value){1, pt->flops / (pt->weight_bytes + pt->act_bytes + pt->out_bytes)};
  bench_value bw = pt->memory == FP4_MEMORY_DEVICE ? e->run.copy_gbps : e->run.host_read_gbps;
  if (bw.ok) pt->frac_bw = (bench_value){1, pt->weight_gbps.v / bw.v};
}

/* What auto ran for an auto point, and whether that is the tuning cache's winner for the point's
 * key (op, format, activation and output dtype, M bucket, N, K). */
static void auto_verdict(bench_env *e, fp4_context *ctx, bench_point *pt, const fp4_run_info *info) {
  snprintf(pt->ran, sizeof pt->ran, "%.31s%s%.63s", info->backend, info->config[0] ? ":" : "", info->config);
  if (pt->op == BENCH_QUANTIZE) return; /* quantize is not tuned */
  const fp4_tune_key key = {pt->op == BENCH_W4A4 ? FP4_TUNE_MM : FP4_TUNE_MM_W4A16, pt->format,
                            pt->op == BENCH_W4A4 ? FP4_DTYPE_E2M1X2 : e->o.act_dtype, e->o.out_dtype, pt->m, pt->n, pt->k};
  const fp4_tuning_cache *cache = fp4_context_tuning_cache(ctx);
  char backend[32] = "", config[64] = "";
  if (!cache || fp4_tuning_cache_lookup(cache, &key, backend, sizeof backend, config, sizeof config) != FP4_OK) {
    snprintf(pt->cache, sizeof pt->cache, "none");
    return;
  }
  snprintf(pt->cache_winner, sizeof pt->cache_winner, "%s%s%s", backend, config[0] ? ":" : "", config);
  /* A winner stored without a config ("the backend's default") matches whatever config it ran. */
  const int hit = !strcmp(backend, info->backend) && (!config[0] || !strcmp(config, info->config));
  snprintf(pt->cache, sizeof pt->cache, "%s", hit ? "hit" : "miss");
}

static void measure_point(bench_env *e, bench_point *pt, const bench_backend *b, const bench_weights *w,
                          const bench_acts *a) {
  fp4_context *ctx = ctx_for(e, pt->memory);
  const int runs = pt->memory == FP4_MEMORY_DEVICE ? e->run.runs_device : e->run.runs_host;
  bench_call c = {.ctx = ctx, .op = pt->op, .fmt = pt->format, .mem = pt->memory, .m = pt->m, .n = pt->n, .k = pt->k,
                  .layout = e->o.layout, .act = e->o.act_dtype, .out = e->o.out_dtype, .w = w, .a = a};
  c.gemm.backend = b->name;
  c.gemm.config = e->o.config; /* NULL: the backend's own choice */
  c.gemm.info = &c.info;
  /* The activation quantize runs on the GEMM's backend when it can, else wherever auto picks. */
  c.quant.backend = b->usable[BENCH_QUANTIZE] && b->memory[BENCH_QUANTIZE] == pt->memory ? b->name : "auto";
  c.quant.info = &c.qinfo;
  c.mode = pt->op == BENCH_QUANTIZE ? CALL_QUANTIZE : CALL_GEMM;
  pt->sets = pt->op == BENCH_QUANTIZE ? a->sets : w->sets;
  fp4_status st = try_call(&c);
  if (!st) st = fp4_time(ctx, NULL, do_call, &c, e->o.warmup, runs, &pt->t);
  if (!st) st = fp4_synchronize(ctx);
  if (st) {
    pt->status = st == FP4_ERR_UNSUPPORTED ? "unsupported" : "error";
    snprintf(pt->reason, sizeof pt->reason, "%s", fp4_last_error());
    return;
  }
  fp4_run_info *info = pt->op == BENCH_QUANTIZE ? &c.qinfo : &c.info;
  if (!strcmp(b->name, "auto") && info->backend[0]) snprintf(pt->backend, sizeof pt->backend, "auto:%.26s", info->backend);
  if (!strcmp(b->name, "auto")) auto_verdict(e, ctx, pt, info);
  snprintf(pt->config, sizeof pt->config, "%s", info->config);
  pt->pdl = info->pdl;
  pt->status = "ok";
  if (pt->op != BENCH_QUANTIZE) {
    int64_t bad = nonfinite_outputs(&c);
    if (bad != 0) {
      pt->status = "error";
      snprintf(pt->reason, sizeof pt->reason,
               bad < 0 ? "could not read the output back" : "%lld of %lld outputs are NaN/inf after the timed calls "
                                                            "(elements left unwritten?); run fp4kit check",
               (long long)bad, (long long)(pt->m * pt->n));
      return;
    }
  }
  set_metrics(e, pt);
  if (pt->op == BENCH_W4A4) {
    fp4_timing tq, tt;
    c.mode = CALL_QUANTIZE;
    st = fp4_time(ctx, NULL, do_call, &c, e->o.warmup, runs, &tq);
    c.mode = CALL_TOTAL;
    if (!st) st = fp4_time(ctx, NULL, do_call, &c, e->o.warmup, runs, &tt);
    if (!st) st = fp4_synchronize(ctx);
    if (st) {
      snprintf(pt->quant_reason, sizeof pt->quant_reason, "%s", fp4_last_error());
    } else {
      pt->quant_us = (bench_value){1, tq.median_us};
      pt->total_us = (bench_value){1, tt.median_us};
      snprintf(pt->quant_backend, sizeof pt->quant_backend, "%s", c.qinfo.backend);
    }
  }
  if (pt->memory == FP4_MEMORY_DEVICE && pt->op != BENCH_QUANTIZE && e->o.peers) {
    shape_peers(e, pt);
    /* Speedups compare what a layer pays: for W4A4 the quantize is part of it when it was timed. */
    double ours = pt->op == BENCH_W4A4 && pt->total_us.ok ? pt->total_us.v : pt->t.median_us;
    if (pt->bf16_us.ok) pt->bf16_speedup = (bench_value){1, pt->bf16_us.v / ours};
    if (pt->fp8_us.ok) pt->fp8_speedup = (bench_value){1, pt->fp8_us.v / ours};
    read_floor_peer(e, pt);
    if (pt->read_floor_us.ok) pt->frac_read_floor = (bench_value){1, pt->read_floor_us.v / ours};
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* The run                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static int write_reports(bench_env *e) {
  const bench_opts *o = &e->o;
  bench_print_table(o->stdout_report ? stderr : stdout, &e->run);
  const char *const paths[] = {o->json, o->csv, o->html};
  int (*const writers[])(FILE *, const bench_run *) = {bench_write_json, bench_write_csv, bench_write_html};
  int rc = FP4CLI_OK;
  for (int i = 0; i < 3; i++) {
    if (!paths[i]) continue;
    fp4cli_report_file r;
    if (fp4cli_report_open("bench", fp4cli_report_options[i], paths[i], &r) ||
        fp4cli_report_close("bench", fp4cli_report_options[i], paths[i], &r, writers[i](r.f, &e->run) != 0))
      rc = FP4CLI_ERROR;
  }
  return rc;
}

/* auto reads the tuning cache of the run's context: the --cache file when given (a file that cannot
 * be used is an error here, since it was asked for), else the default file on first use. Says once
 * which cache auto follows, so the cache column of the report can be read. */
static int attach_tuning_cache(bench_env *e) {
  if (!strstr(e->o.backends, "auto")) return FP4CLI_OK;
  fp4_context *ctx = e->dctx ? e->dctx : e->hctx;
  if (e->o.cache) {
    fp4_tuning_cache *c = NULL;
    fp4_status st = fp4_tuning_cache_create(ctx, &c);
    if (!st) st = fp4_tuning_cache_load(c, e->o.cache);
    if (!st) st = fp4_context_set_tuning_cache(ctx, c);
    if (st) {
      fp4_tuning_cache_destroy(c);
      return fp4cli_report("reading the --cache file", st);
    }
  }
  fprintf(stderr, "fp4kit bench: auto on %s follows: %s\n", e->dctx ? "the device" : "the host",
          fp4_context_tuning_note(ctx));
  return FP4CLI_OK;
}

/* One line per point on stderr, started before the point is measured and finished after, so a
 * slow point is visible while it runs (and names itself if the run is killed). */
static void progress_start(int done, int total, const bench_point *pt) {
  fprintf(stderr, "fp4kit bench: [%d/%d] %s %s %s M=%lld N=%lld K=%lld ... ", done, total, pt->backend,
          bench_op_name(pt->op), fp4_format_name(pt->format), (long long)pt->m, (long long)pt->n, (long long)pt->k);
  fflush(stderr);
}

static void progress_end(const bench_point *pt) {
  if (!strcmp(pt->status, "ok"))
    fprintf(stderr, "%.2f us%s%s%s%s%s%s\n", pt->t.median_us, pt->ran[0] ? " ran " : "", pt->ran,
            pt->cache[0] ? " cache=" : "", pt->cache, pt->cache_winner[0] ? " winner " : !strcmp(pt->cache, "none") ? " (no entry: heuristic)" : "", pt->cache_winner);
  else
    fprintf(stderr, "%s: %.160s\n", pt->status, pt->reason);
  fflush(stderr);
}

static int parse_selection(const bench_opts *o, int64_t *ms, int *nms, int *ops, int *fmts) {
  long long m[BENCH_MAX_MS];
  int n = fp4cli_parse_int_list("bench", "--m", o->ms, 1, BENCH_MAX_M, BENCH_MAX_MS, m);
  if (n < 0) return FP4CLI_USAGE;
  for (int i = 0; i < n; i++) ms[i] = m[i];
  *nms = n;
  char buf[1024], *items[8];
  memset(ops, 0, 3 * sizeof *ops);
  if ((n = split_list(o->ops, buf, sizeof buf, items, 8)) <= 0) return usage_error("--op '%s': use w4a16, w4a4 or quantize", o->ops);
  for (int i = 0; i < n; i++) {
    if (!strcmp(items[i], "w4a16")) ops[BENCH_W4A16] = 1;
    else if (!strcmp(items[i], "w4a4")) ops[BENCH_W4A4] = 1;
    else if (!strcmp(items[i], "quantize")) ops[BENCH_QUANTIZE] = 1;
    else return usage_error("--op: '%s' is not w4a16, w4a4 or quantize", items[i]);
  }
  memset(fmts, 0, 2 * sizeof *fmts);
  if ((n = split_list(o->formats, buf, sizeof buf, items, 4)) <= 0) return usage_error("--format '%s': use nvfp4 or mxfp4", o->formats);
  for (int i = 0; i < n; i++) {
    if (!strcmp(items[i], "nvfp4")) fmts[FP4_FORMAT_NVFP4] = 1;
    else if (!strcmp(items[i], "mxfp4")) fmts[FP4_FORMAT_MXFP4] = 1;
    else return usage_error("--format: '%s' is not nvfp4 or mxfp4", items[i]);
  }
  return FP4CLI_OK;
}

/* Every point of one format: shapes x M x ops x backends, operands built once per shape and M. */
static int run_format(bench_env *e, fp4_format fmt, const bench_shape *shapes, int nshapes, const int64_t *ms, int nms,
                      const int *ops, bench_backend *bl, int nb, int *done, int total) {
  bench_weights *w[2] = {calloc(1, sizeof(bench_weights)), calloc(1, sizeof(bench_weights))};
  bench_acts *a[2] = {calloc(1, sizeof(bench_acts)), calloc(1, sizeof(bench_acts))};
  int rc = FP4CLI_OK;
  if (!w[0] || !w[1] || !a[0] || !a[1]) {
    rc = fp4cli_report("allocating the operand tables", FP4_ERR_OUT_OF_MEMORY);
    goto out;
  }
  for (int si = 0; si < nshapes && !rc; si++) {
    const bench_shape *sh = &shapes[si];
    /* quantize points depend on K only: time them once per K, at the first shape with that K. */
    int first_k = 1;
    for (int j = 0; j < si; j++) first_k &= shapes[j].k != sh->k;
    int have_w[2] = {0, 0};
    fp4_status wst[2] = {FP4_OK, FP4_OK};
    char wwhy[2][256] = {"", ""};
    for (int mi = 0; mi < nms && !rc; mi++) {
      int have_a[2][2] = {{0, 0}, {0, 0}}; /* [memory][quantize-only] */
      for (int op = 0; op < 3; op++) {
        if (!ops[op] || (op == BENCH_QUANTIZE && !first_k)) continue;
        for (int bi = 0; bi < nb; bi++) {
          bench_backend *b = &bl[bi];
          bench_point *pt = new_point(e);
          if (!pt) {
            rc = fp4cli_report("recording a point", FP4_ERR_OUT_OF_MEMORY);
            goto out;
          }
          snprintf(pt->backend, sizeof pt->backend, "%s", b->name);
          pt->op = (bench_op)op;
          pt->format = fmt;
          pt->m = ms[mi];
          pt->n = op == BENCH_QUANTIZE ? 0 : sh->n;
          pt->k = sh->k;
          snprintf(pt->shape, sizeof pt->shape, "%s", op == BENCH_QUANTIZE ? "activations" : sh->name);
          (*done)++;
          if (!b->usable[op]) {
            pt->status = "unsupported";
            snprintf(pt->reason, sizeof pt->reason, "%s", b->reason[op]);
            continue;
          }
          const fp4_memory mem = b->memory[op];
          pt->memory = mem;
          if (!strcmp(b->name, "ref") && (double)pt->m * (double)(pt->n ? pt->n : 1) * (double)pt->k > (double)BENCH_REF_MAX_MNK) {
            pt->status = "skipped";
            snprintf(pt->reason, sizeof pt->reason, "ref is limited to M*N*K <= %lld (it is the slow oracle); time 'cpu' instead",
                     (long long)BENCH_REF_MAX_MNK);
            continue;
          }
          progress_start(*done, total, pt);
          fp4_context *ctx = ctx_for(e, mem);
          if (op != BENCH_QUANTIZE && !have_w[mem]) {
            wst[mem] = weights_make(e, mem, fmt, sh->n, sh->k, w[mem]);
            snprintf(wwhy[mem], sizeof wwhy[mem], "%s", fp4_last_error());
            have_w[mem] = 1;
          }
          if (op != BENCH_QUANTIZE && wst[mem]) {
            pt->status = "error";
            snprintf(pt->reason, sizeof pt->reason, "preparing the weights: %s", wwhy[mem]);
            progress_end(pt);
            continue;
          }
          const int qonly = op == BENCH_QUANTIZE;
          if (!have_a[mem][qonly]) {
            /* One activation table per memory at a time: free the other kind first. */
            acts_free(ctx, mem, a[mem]);
            have_a[mem][!qonly] = 0;
            fp4_status st = acts_make(e, mem, fmt, pt->m, qonly ? 0 : sh->n, sh->k, qonly ? 0 : w[mem]->sets, a[mem]);
            if (st) {
              pt->status = "error";
              snprintf(pt->reason, sizeof pt->reason, "preparing the activations: %s", fp4_last_error());
              progress_end(pt);
              continue;
            }
            have_a[mem][qonly] = 1;
          }
          measure_point(e, pt, b, w[mem], a[mem]);
          progress_end(pt);
        }
      }
      for (int mem = 0; mem < 2; mem++) acts_free(ctx_for(e, (fp4_memory)mem), (fp4_memory)mem, a[mem]);
    }
    for (int mem = 0; mem < 2; mem++) weights_free(ctx_for(e, (fp4_memory)mem), (fp4_memory)mem, w[mem]);
  }
out:
  for (int mem = 0; mem < 2; mem++) {
    if (w[mem]) weights_free(ctx_for(e, (fp4_memory)mem), (fp4_memory)mem, w[mem]);
    if (a[mem]) acts_free(ctx_for(e, (fp4_memory)mem), (fp4_memory)mem, a[mem]);
    free(w[mem]);
    free(a[mem]);
  }
  return rc;
}

int fp4cli_bench(int argc, char **argv) {
  /* The MoE layer and the decode step are benchmarks of their own, with their own options. */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--moe")) return bench_moe_main(argc, argv);                                 /* bench_moe.c */
    if (!strcmp(argv[i], "--step") || !strncmp(argv[i], "--step=", 7)) return bench_step_main(argc, argv); /* bench_step.c */
  }
  bench_env *e = calloc(1, sizeof *e);
  if (!e) return fp4cli_report("starting", FP4_ERR_OUT_OF_MEMORY);
  bench_provenance(argc, argv, &e->run.origin); /* as typed: getopt_long reorders argv */
  int help = 0, rc = parse_opts(argc, argv, &e->o, &help);
  bench_shape *shapes = NULL;
  bench_backend *bl = NULL;
  if (rc || help) {
    if (help) bench_usage(stdout);
    goto done;
  }
  if (e->o.model && !strcmp(e->o.model, "list")) {
    bench_list_models(stdout);
    goto done;
  }
  int64_t ms[BENCH_MAX_MS];
  int nms = 0, ops[3], fmts[2];
  if ((rc = parse_selection(&e->o, ms, &nms, ops, fmts))) goto done;
  shapes = calloc(BENCH_MAX_SHAPES, sizeof *shapes);
  bl = calloc(BENCH_MAX_BACKENDS, sizeof *bl);
  int nshapes = 0, nb = 0;
  if (!shapes || !bl) {
    rc = fp4cli_report("starting", FP4_ERR_OUT_OF_MEMORY);
    goto done;
  }
  if ((rc = collect_shapes(&e->o, shapes, &nshapes))) goto done;
  if (!nshapes) {
    fprintf(stderr, "fp4kit bench: no shapes to time\n");
    rc = FP4CLI_USAGE;
    goto done;
  }
  if (e->o.list_shapes) {
    bench_print_shapes(stdout, shapes, nshapes);
    goto done;
  }
  int device = e->o.device;
  if ((rc = fp4cli_resolve_device("bench", &device))) goto done;
  {
    const char *const paths[] = {e->o.json, e->o.csv, e->o.html};
    if ((rc = fp4cli_reports_writable("bench", 3, fp4cli_report_options, paths))) goto done;
  }

  bench_run *r = &e->run;
  char why[320];
  if (device >= 0 && !fp4cli_device_usable(device, why, sizeof why)) {
    fprintf(stderr, "fp4kit bench: no usable CUDA device %d (%s); nothing was timed (--device -1 times the host backends)\n",
            device, why);
    rc = FP4CLI_ERROR;
    goto done;
  }
  fp4_status st = fp4_context_create(&e->hctx, -1);
  if (!st && device >= 0) st = fp4_context_create(&e->dctx, device);
  if (!st) st = fp4_device_info_get(NULL, &r->host);
  if (!st) st = fp4_device_info_get(e->dctx, &r->dev);
  if (st) {
    rc = fp4cli_report(device >= 0 ? "opening the device" : "describing the host", st);
    goto done;
  }
  if ((rc = attach_tuning_cache(e))) goto done;
  e->cache[FP4_MEMORY_HOST] = r->host.cache_bytes > 0 ? r->host.cache_bytes : BENCH_DEFAULT_CACHE;
  e->cache[FP4_MEMORY_DEVICE] = r->dev.cache_bytes > 0 ? r->dev.cache_bytes : BENCH_DEFAULT_CACHE;
  r->runs_device = e->o.runs ? e->o.runs : 100;
  r->runs_host = e->o.runs ? e->o.runs : 50;
  r->warmup = e->o.warmup;

  int done_points = 0, total = 0;
  for (int f = 0; f < 2; f++) {
    if (!fmts[f]) continue;
    if ((rc = collect_backends(e, bl, &nb, ops, (fp4_format)f))) goto done;
    if (!nb) {
      fprintf(stderr, "fp4kit bench: no backend to time for %s on %s%s\n", fp4_format_name((fp4_format)f),
              device >= 0 ? "the device" : "the host",
              !strcmp(e->o.backends, "all") ? " ('all' leaves out ref, the slow oracle: name it with --backend ref)" : "");
      continue;
    }
    int host = 0, dev = 0;
    for (int i = 0; i < nb; i++)
      for (int op = 0; op < 3; op++)
        if (ops[op] && bl[i].usable[op]) {
          host |= bl[i].memory[op] == FP4_MEMORY_HOST;
          dev |= bl[i].memory[op] == FP4_MEMORY_DEVICE;
        }
    /* The device peers describe the device of the run even when only host backends are timed. */
    (void)dev;
    if (e->o.peers && !r->copy_gbps.ok && !r->host_read_gbps.ok && !r->peer_notes[0]) run_global_peers(e, host, e->dctx != NULL);
    total = done_points;
    for (int op = 0; op < 3; op++) total += ops[op] ? nb * nshapes * nms : 0;
    rc = run_format(e, (fp4_format)f, shapes, nshapes, ms, nms, ops, bl, nb, &done_points, total);
    if (rc) goto done;
  }
  if (!r->npoints) {
    rc = FP4CLI_ERROR;
    goto done;
  }
  rc = write_reports(e);
  int errors = 0;
  for (int i = 0; i < r->npoints; i++) errors += !strcmp(r->points[i].status, "error");
  if (errors) {
    fprintf(stderr, "fp4kit bench: %d point(s) failed (see the table)\n", errors);
    if (!rc) rc = FP4CLI_FAILED;
  }
done:
  fp4_context_destroy(e->dctx);
  fp4_context_destroy(e->hctx);
  free(e->run.points);
  free(e);
  free(shapes);
  free(bl);
  return rc;
}
