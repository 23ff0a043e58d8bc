#define _GNU_SOURCE
/*
 * `fp4kit bench --moe`: the whole routed-expert MoE layer (fp4_moe_forward on the device) for the
 * expert shapes of Qwen3.5-397B and DeepSeek-R1 at several batch sizes with uniform random top-k
 * routing. Reports the layer time, the expert bytes the routing actually touches, the effective
 * bandwidth, and two same-run peers: the device copy bandwidth (fp4_time_peer COPY) and a loop over
 * the active experts calling cuBLAS BF16 (each active expert's gate_up and down GEMM at its row
 * count; experts with the same row count take the same time, so each distinct row count is timed
 * once with fp4_time_peer CUBLAS_BF16 and counted for every expert that has it).
 *
 * Weights: one random expert (codes and valid E4M3/UE8M0 scales) replicated to all E slots on the
 * device (one host copy, then device-to-device), once per model for all its points; timing depends
 * on bytes and routing, not values.
 *
 * Bounded run time: every point reports its progress on stderr (flushed) as it goes; a point's
 * runs shrink so its timed loop takes about --budget seconds (one untimed call first measures it;
 * at least 5 runs, the count is reported), and cuBLAS timings are shared by every point and mode
 * of a model (they depend only on the row count and shape), with at most 20 runs each.
 */
#include <getopt.h>
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "harness.h"
#include "harness_moe.h"

typedef struct moe_model {
  const char *name;
  int64_t experts, top_k, inter, hidden; /* w13 [2I, H], w2 [H, I] */
} moe_model;

static const moe_model kModels[] = {
    {"qwen3.5-397b", 512, 10, 1024, 4096},
    {"deepseek-r1", 256, 8, 2048, 7168},
};
static const int64_t kBatches[] = {1, 8, 64, 256, 1024, 4096};
enum { MOE_MAX_BATCHES = 16, MOE_MAX_BATCH = 65536, MOE_MIN_RUNS = 10, MOE_MAX_RUNS = 1000000 };
#define MOE_CMD "bench --moe" /* how messages name the command */

typedef struct moe_point {
  const char *model;
  int64_t batch, active;
  const char *mode;
  const char *status;
  char reason[200];
  int runs;
  double layer_us, touched_bytes, gbps, floor_ratio, flops, tflops;
  double cublas_us, cublas_tflops, speedup;
  int cublas_ok;
  double rows_per_slot; /* routed rows over the expert slots, min(experts, rows): what the chooser reads */
  char variants[160];   /* the run info's note: each GEMM's kernel variant under moe.default */
} moe_point;

static void bench_moe_usage(FILE *f) {
  fprintf(f, "usage: fp4kit bench --moe [--mode w4a16|w4a4] [--format nvfp4|mxfp4] [--m 1,8,...] [--runs N]\n"
             "                          [--budget SECONDS] [--no-peers] [--device N] [--config NAME]\n"
             "                          [--json FILE|-] [--csv FILE|-]\n"
             "\n"
             "Times fp4_moe_forward (the cuda backend) on Qwen3.5-397B's experts (512, top-10, w13 2048x4096,\n"
             "w2 4096x1024) and DeepSeek-R1's (256, top-8, w13 4096x7168, w2 7168x2048) at B in\n"
             "{1, 8, 64, 256, 1024, 4096} tokens (--m: at most %d values, each 1 to %d), uniform random\n"
             "routing, bf16 hidden states.\n"
             "Per point: layer time (median), touched expert bytes of the actual routing, effective bandwidth,\n"
             "the time over the same-run copy floor (touched bytes / copy bandwidth) and the same-run loop\n"
             "over active experts calling cuBLAS BF16 (its time and our speedup over it); under moe.default\n"
             "the kernel variant each GEMM ran (the table's last column; \"variants\" in JSON and CSV), and in\n"
             "JSON and CSV the routed rows per expert slot, B x top-k / min(experts, B x top-k), which the\n"
             "default choice reads.\n"
             "--runs (%d to %d, default 50) is an upper bound: a slow point takes fewer runs (at least 5) so its\n"
             "timed loop lasts about --budget seconds (default 2); the runs used are reported. Progress goes to\n"
             "stderr. --device: the CUDA ordinal (default FP4KIT_DEVICE, else 0). --json and --csv write the\n"
             "records to a file, or with '-' to stdout (then the table goes to stderr; at most one of them);\n"
             "a file is replaced only once its records are whole, as fp4kit bench --help says.\n"
             "--config: the cuda backend's MoE config (default moe.default: the library's choice per GEMM;\n"
             "moe.streaming, moe.prefill, or one kernel variant for every GEMM, e.g. moe.lean.r32.k2.s1,\n"
             "moe.mma.w1, moe.prefill.wgra128: src/backends/cuda/config/moe_config.h lists them).\n"
             "\n"
             "Exit status: 0 every point ran, 1 a point failed, 2 a usage error, 3 nothing could be timed (no\n"
             "usable CUDA device, no cuda backend) or a report could not be written.\n",
          MOE_MAX_BATCHES, MOE_MAX_BATCH, MOE_MIN_RUNS, MOE_MAX_RUNS);
}

typedef struct layer_call {
  fp4_context *ctx;
  fp4_moe_layer *layer;
  fp4_matrix *hidden, *out;
  fp4_moe_routing *rt;
  void *ws;
  size_t bytes;
  const fp4_options *opts;
} layer_call;

static fp4_status call_layer(void *user, int it) {
  (void)it;
  layer_call *c = user;
  return fp4_moe_forward(c->ctx, c->layer, c->hidden, c->rt, c->ws, c->bytes, c->out, c->opts);
}

/* E copies of one random expert [N, K] on the device. */
static fp4_status make_experts(fp4_context *ctx, fp4h_rng *g, fp4_grouped_qmatrix *w, int64_t E, int64_t N, int64_t K,
                               fp4_format fmt) {
  size_t sb = 0, cb = (size_t)(N * K / 2);
  fp4_scales_size(fmt, FP4_LAYOUT_128X4, N, K, &sb);
  memset(w, 0, sizeof *w);
  *w = (fp4_grouped_qmatrix){NULL, NULL, NULL, E, N, K, fmt, FP4_LAYOUT_128X4, FP4_MEMORY_DEVICE};
  uint8_t *codes = malloc(cb), *scales = malloc(sb);
  fp4_status st = FP4_ERR_OUT_OF_MEMORY;
  if (codes && scales) {
    for (size_t i = 0; i < cb; i++) codes[i] = (uint8_t)fp4h_next(g);
    /* E4M3 0.0625 .. 1 or UE8M0 2^-8 .. 2^-1: finite, no NaN encodings */
    for (size_t i = 0; i < sb; i++) scales[i] = (uint8_t)(fmt == FP4_FORMAT_NVFP4 ? 0x20 + fp4h_next(g) % 0x18 : 119 + fp4h_next(g) % 8);
    st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, cb * (size_t)E, &w->data);
    if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, sb * (size_t)E, &w->scales);
    if (!st) st = fp4_copy(ctx, w->data, FP4_MEMORY_DEVICE, codes, FP4_MEMORY_HOST, cb);
    if (!st) st = fp4_copy(ctx, w->scales, FP4_MEMORY_DEVICE, scales, FP4_MEMORY_HOST, sb);
    /* The other slots from slot 0 on the device: a host copy of 3-6 GB would dominate the run. */
    for (int64_t e = 1; e < E && !st; e++) {
      st = fp4_copy(ctx, (uint8_t *)w->data + (size_t)e * cb, FP4_MEMORY_DEVICE, w->data, FP4_MEMORY_DEVICE, cb);
      if (!st) st = fp4_copy(ctx, (uint8_t *)w->scales + (size_t)e * sb, FP4_MEMORY_DEVICE, w->scales, FP4_MEMORY_DEVICE, sb);
    }
  }
  free(codes);
  free(scales);
  return st;
}

static void free_experts(fp4_context *ctx, fp4_grouped_qmatrix *w) {
  if (w->data) fp4_free(ctx, FP4_MEMORY_DEVICE, w->data);
  if (w->scales) fp4_free(ctx, FP4_MEMORY_DEVICE, w->scales);
  w->data = w->scales = NULL;
}

static double expert_bytes(const fp4_grouped_qmatrix *w) {
  size_t sb = 0;
  fp4_scales_size(w->format, w->layout, w->rows, w->cols, &sb);
  return (double)(w->rows * w->cols / 2) + (double)sb;
}

/* Progress on stderr, flushed at once: a slow point shows where it is while it runs. */
typedef struct progress {
  double t0;
  int index, total;
} progress;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void say(const progress *pr, const moe_point *pt, const char *what) {
  fprintf(stderr, "[moe %d/%d %7.1f s] %s %s B=%lld: %s\n", pr->index, pr->total, now_s() - pr->t0, pt->model, pt->mode,
          (long long)pt->batch, what);
  fflush(stderr);
}

/* cuBLAS BF16 timings of one model by row count (gate_up + down, median us; 0: not yet timed):
 * they depend only on the row count, so every point and mode of the model shares them. */
typedef struct cublas_cache {
  double *us;
  int64_t size;
} cublas_cache;

enum { CUBLAS_MAX_RUNS = 20 };

/* The cuBLAS BF16 expert loop: sum over active experts of gate_up and down at their row counts. */
static fp4_status cublas_loop(fp4_context *ctx, const int64_t *counts, int64_t E, const moe_model *m, int runs,
                              cublas_cache *cache, double *us) {
  *us = 0.0;
  int64_t most = 0;
  for (int64_t e = 0; e < E; e++) most = counts[e] > most ? counts[e] : most;
  if (most >= cache->size) {
    double *grown = realloc(cache->us, (size_t)(most + 1) * sizeof *grown);
    if (!grown) return FP4_ERR_OUT_OF_MEMORY;
    for (int64_t r = cache->size; r <= most; r++) grown[r] = 0.0;
    cache->us = grown;
    cache->size = most + 1;
  }
  int64_t *hist = calloc((size_t)most + 1, sizeof *hist);
  if (!hist) return FP4_ERR_OUT_OF_MEMORY;
  for (int64_t e = 0; e < E; e++) hist[counts[e]]++;
  fp4_status st = FP4_OK;
  const int r_runs = runs < CUBLAS_MAX_RUNS ? runs : CUBLAS_MAX_RUNS;
  for (int64_t r = 1; r <= most && !st; r++) {
    if (!hist[r]) continue;
    if (cache->us[r] <= 0.0) {
      fp4_timing t1, t2;
      st = fp4_time_peer(ctx, FP4_PEER_CUBLAS_BF16, r, 2 * m->inter, m->hidden, r_runs, &t1, NULL);
      if (!st) st = fp4_time_peer(ctx, FP4_PEER_CUBLAS_BF16, r, m->hidden, m->inter, r_runs, &t2, NULL);
      if (!st) cache->us[r] = t1.median_us + t2.median_us;
    }
    if (!st) *us += (double)hist[r] * cache->us[r];
  }
  free(hist);
  return st;
}

typedef struct bench_setup {
  const char *config;
  int runs, peers;
  double budget_s, copy_bps;
  fp4_format fmt;
  const fp4_grouped_qmatrix *w1, *w2; /* the model's experts on the device */
  cublas_cache *cache;
  progress *pr;
} bench_setup;

static void run_point(fp4_context *ctx, const moe_model *m, int64_t B, fp4_moe_mode mode, const bench_setup *bs,
                      moe_point *pt) {
  memset(pt, 0, sizeof *pt);
  pt->model = m->name;
  pt->batch = B;
  pt->mode = mode == FP4_MOE_W4A4 ? "w4a4" : "w4a16";
  pt->status = "error";
  say(bs->pr, pt, "setting up");
  fp4h_rng g = {(uint64_t)B * 7919u + (uint64_t)m->experts};
  const int64_t E = m->experts, k = m->top_k, H = m->hidden, I = m->inter;
  int32_t *ids = malloc((size_t)(B * k) * sizeof *ids);
  float *tw = malloc((size_t)(B * k) * sizeof *tw);
  uint16_t *hid = malloc((size_t)(B * H) * sizeof *hid);
  int64_t *counts = calloc((size_t)E, sizeof *counts);
  void *d_ids = NULL, *d_tw = NULL, *d_hid = NULL, *d_out = NULL, *ws = NULL;
  fp4_status st = FP4_ERR_OUT_OF_MEMORY;
  char msg[160];
  if (!ids || !tw || !hid || !counts) goto done;
  fp4h_routing_fill(&g, ids, tw, B, k, E, FP4H_ROUTE_UNIFORM);
  for (int64_t i = 0; i < B * H; i++) hid[i] = (uint16_t)(0x3C00u + (fp4h_next(&g) & 0x7Fu)) ^ (uint16_t)((i & 1) << 15);
  for (int64_t i = 0; i < B * k; i++) counts[ids[i]]++;
  for (int64_t e = 0; e < E; e++) pt->active += counts[e] > 0;
  pt->touched_bytes = (double)pt->active * (expert_bytes(bs->w1) + expert_bytes(bs->w2));
  pt->rows_per_slot = (double)(B * k) / (double)(B * k < E ? B * k : E);
  pt->flops = 2.0 * (double)(B * k) * (double)(2 * I * H + H * I);
  if ((st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(B * k) * sizeof *ids, &d_ids)) ||
      (st = fp4_copy(ctx, d_ids, FP4_MEMORY_DEVICE, ids, FP4_MEMORY_HOST, (size_t)(B * k) * sizeof *ids)) ||
      (st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(B * k) * sizeof *tw, &d_tw)) ||
      (st = fp4_copy(ctx, d_tw, FP4_MEMORY_DEVICE, tw, FP4_MEMORY_HOST, (size_t)(B * k) * sizeof *tw)) ||
      (st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(B * H) * 2, &d_hid)) ||
      (st = fp4_copy(ctx, d_hid, FP4_MEMORY_DEVICE, hid, FP4_MEMORY_HOST, (size_t)(B * H) * 2)) ||
      (st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, (size_t)(B * H) * 2, &d_out)))
    goto done;
  fp4_moe_layer layer = {mode, {*bs->w1, *bs->w2, 448.0f * 6.0f / 4.0f, 448.0f * 6.0f / 8.0f}, NULL};
  fp4_moe_routing rt = {d_ids, B, k, {d_tw, B, k, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, NULL};
  fp4_matrix xm = {d_hid, B, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE}, om = {d_out, B, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  const fp4_options opts = {.backend = "cuda", .config = bs->config, .enable_pdl = 1};
  size_t bytes = 0;
  if ((st = fp4_moe_workspace_size(&layer, B, k, &opts, &bytes)) || (st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, bytes, &ws)))
    goto done;
  layer_call call = {ctx, &layer, &xm, &om, &rt, ws, bytes, &opts};
  fp4_timing t;
  /* One call first (it also warms up): its time sets the runs that fit the budget, and its run
   * info names the kernel variant of each GEMM. */
  fp4_run_info info;
  memset(&info, 0, sizeof info);
  fp4_options first_opts = opts;
  first_opts.info = &info;
  layer_call first = call;
  first.opts = &first_opts;
  if ((st = fp4_time(ctx, NULL, call_layer, &first, 1, 1, &t))) goto done;
  snprintf(pt->variants, sizeof pt->variants, "%s", info.note);
  pt->runs = bs->runs;
  if (t.median_us * 1e-6 * bs->runs > bs->budget_s) {
    const double fit = bs->budget_s / (t.median_us * 1e-6);
    pt->runs = fit < 5.0 ? 5 : (int)fit;
  }
  snprintf(msg, sizeof msg, "one layer call %.1f us, timing %d runs", t.median_us, pt->runs);
  say(bs->pr, pt, msg);
  if ((st = fp4_time(ctx, NULL, call_layer, &call, pt->runs < 10 ? 2 : 10, pt->runs, &t))) goto done;
  pt->layer_us = t.median_us;
  pt->gbps = pt->touched_bytes / (t.median_us * 1e-6) / 1e9;
  pt->tflops = pt->flops / (t.median_us * 1e-6) / 1e12;
  if (bs->copy_bps > 0) pt->floor_ratio = t.median_us / (pt->touched_bytes / bs->copy_bps * 1e6);
  if (bs->peers) {
    snprintf(msg, sizeof msg, "layer %.1f us; cuBLAS BF16 expert loop", t.median_us);
    say(bs->pr, pt, msg);
    double us = 0;
    fp4_status ps = cublas_loop(ctx, counts, E, m, bs->runs, bs->cache, &us);
    if (ps == FP4_OK && us > 0) {
      pt->cublas_ok = 1;
      pt->cublas_us = us;
      pt->cublas_tflops = pt->flops / (us * 1e-6) / 1e12;
      pt->speedup = us / t.median_us;
    } else {
      snprintf(pt->reason, sizeof pt->reason, "cuBLAS BF16 peer: %s", fp4_last_error());
    }
  }
  pt->status = "ok";
done:
  if (st) {
    snprintf(pt->reason, sizeof pt->reason, "%s", fp4_last_error());
    pt->status = st == FP4_ERR_UNSUPPORTED ? "unsupported" : "error";
  }
  say(bs->pr, pt, pt->status);
  void *bufs[] = {d_ids, d_tw, d_hid, d_out, ws};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) fp4_free(ctx, FP4_MEMORY_DEVICE, bufs[i]);
  free(ids);
  free(tw);
  free(hid);
  free(counts);
}

static void num(FILE *f, const char *key, double v, int ok, const char *sep) {
  if (ok && isfinite(v)) fprintf(f, "\"%s\": %.6g%s", key, v, sep);
  else fprintf(f, "\"%s\": null%s", key, sep);
}

/* "key": "text", with the text escaped as a JSON string */
static void str(FILE *f, const char *key, const char *text) {
  fprintf(f, "\"%s\": \"", key);
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputs("\", ", f);
}

static void write_json(FILE *f, const bench_origin *origin, const fp4_device_info *dev, const char *config,
                       double copy_bps, const moe_point *p, int n) {
  fprintf(f, "[\n");
  for (int i = 0; i < n; i++) {
    const moe_point *x = &p[i];
    fprintf(f, "  {\"bench\": \"moe\", ");
    str(f, "commit", origin->commit);
    str(f, "date", origin->date);
    str(f, "command", origin->command);
    str(f, "device", dev->name);
    fprintf(f, "\"config\": \"%s\", \"model\": \"%s\", \"mode\": \"%s\", "
               "\"batch\": %lld, \"active_experts\": %lld, \"runs\": %d, \"status\": \"%s\", ",
            config, x->model, x->mode, (long long)x->batch, (long long)x->active, x->runs, x->status);
    str(f, "reason", x->reason);
    const int ok = !strcmp(x->status, "ok");
    num(f, "rows_per_slot", x->rows_per_slot, 1, ", ");
    str(f, "variants", x->variants);
    num(f, "layer_us", x->layer_us, ok, ", ");
    num(f, "touched_bytes", x->touched_bytes, 1, ", ");
    num(f, "effective_gbps", x->gbps, ok, ", ");
    num(f, "copy_gbps", copy_bps / 1e9, copy_bps > 0, ", ");
    num(f, "time_over_copy_floor", x->floor_ratio, ok && copy_bps > 0, ", ");
    num(f, "flops", x->flops, 1, ", ");
    num(f, "tflops", x->tflops, ok, ", ");
    num(f, "cublas_bf16_loop_us", x->cublas_us, x->cublas_ok, ", ");
    num(f, "cublas_bf16_loop_tflops", x->cublas_tflops, x->cublas_ok, ", ");
    num(f, "speedup_vs_cublas_bf16_loop", x->speedup, x->cublas_ok && ok, "}");
    fprintf(f, "%s\n", i + 1 < n ? "," : "");
  }
  fprintf(f, "]\n");
}

static void write_csv(FILE *f, double copy_bps, const moe_point *p, int n) {
  fprintf(f, "model,mode,batch,active_experts,status,layer_us,touched_bytes,effective_gbps,copy_gbps,"
             "time_over_copy_floor,tflops,cublas_bf16_loop_us,cublas_bf16_loop_tflops,speedup_vs_cublas_bf16_loop,runs,"
             "rows_per_slot,variants\n");
  for (int i = 0; i < n; i++) {
    const moe_point *x = &p[i];
    fprintf(f, "%s,%s,%lld,%lld,%s,%.3f,%.0f,%.1f,%.1f,%.3f,%.2f,", x->model, x->mode, (long long)x->batch,
            (long long)x->active, x->status, x->layer_us, x->touched_bytes, x->gbps, copy_bps / 1e9, x->floor_ratio,
            x->tflops);
    if (x->cublas_ok) fprintf(f, "%.3f,%.2f,%.2f,%d,", x->cublas_us, x->cublas_tflops, x->speedup, x->runs);
    else fprintf(f, ",,,%d,", x->runs);
    fprintf(f, "%.3f,\"%s\"\n", x->rows_per_slot, x->variants); /* the note has commas, never quotes */
  }
}

/* --budget: a number of seconds > 0, the whole value. */
static int parse_budget(const char *v, double *out) {
  char *end = NULL;
  const double x = strtod(v, &end);
  if (end == v || *end || !isfinite(x) || x <= 0) {
    fprintf(stderr, "fp4kit " MOE_CMD ": --budget needs a number of seconds > 0, not '%s'\n", v);
    return FP4CLI_USAGE;
  }
  *out = x;
  return FP4CLI_OK;
}

typedef struct moe_opts {
  const char *json, *csv, *config;
  int runs, peers, device, nmodes, nb, stdout_report;
  double budget_s;
  fp4_moe_mode modes[2];
  fp4_format fmt;
  int64_t batches[MOE_MAX_BATCHES];
} moe_opts;

/* FP4CLI_OK with o filled (help set for --help), or FP4CLI_USAGE after saying why. */
static int parse_moe_opts(int argc, char **argv, moe_opts *o, int *help) {
  enum { OPT_MOE = 256, OPT_NO_PEERS, OPT_JSON, OPT_CSV, OPT_M, OPT_CONFIG, OPT_RUNS, OPT_DEVICE, OPT_BUDGET, OPT_MODE,
         OPT_FORMAT };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"moe", no_argument, NULL, OPT_MOE},
                                        {"no-peers", no_argument, NULL, OPT_NO_PEERS},
                                        {"json", required_argument, NULL, OPT_JSON},
                                        {"csv", required_argument, NULL, OPT_CSV},
                                        {"m", required_argument, NULL, OPT_M},
                                        {"config", required_argument, NULL, OPT_CONFIG},
                                        {"runs", required_argument, NULL, OPT_RUNS},
                                        {"device", required_argument, NULL, OPT_DEVICE},
                                        {"budget", required_argument, NULL, OPT_BUDGET},
                                        {"mode", required_argument, NULL, OPT_MODE},
                                        {"format", required_argument, NULL, OPT_FORMAT},
                                        {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->runs = 50;
  o->peers = 1;
  o->device = FP4CLI_DEVICE_UNSET;
  o->budget_s = 2.0;
  o->modes[0] = FP4_MOE_W4A16;
  o->modes[1] = FP4_MOE_W4A4;
  o->nmodes = 2;
  o->fmt = FP4_FORMAT_NVFP4;
  for (size_t i = 0; i < sizeof kBatches / sizeof *kBatches; i++) o->batches[o->nb++] = kBatches[i];
  *help = 0;
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    const char *v = optarg;
    long long x = 0, ms[MOE_MAX_BATCHES];
    int rc = FP4CLI_OK;
    switch (c) {
      case 'h': *help = 1; return FP4CLI_OK;
      case OPT_MOE: break;
      case OPT_NO_PEERS: o->peers = 0; break;
      case OPT_JSON: o->json = v; break;
      case OPT_CSV: o->csv = v; break;
      case OPT_CONFIG: o->config = v; break;
      case OPT_M:
        if ((o->nb = fp4cli_parse_int_list(MOE_CMD, "--m", v, 1, MOE_MAX_BATCH, MOE_MAX_BATCHES, ms)) < 0) return FP4CLI_USAGE;
        for (int i = 0; i < o->nb; i++) o->batches[i] = ms[i];
        break;
      case OPT_RUNS:
        if (!(rc = fp4cli_parse_int(MOE_CMD, "--runs", v, MOE_MIN_RUNS, MOE_MAX_RUNS, &x))) o->runs = (int)x;
        break;
      case OPT_DEVICE: /* the cuda backend's layer: a device, not the host */
        if (!(rc = fp4cli_parse_int(MOE_CMD, "--device", v, 0, FP4CLI_MAX_DEVICE, &x))) o->device = (int)x;
        break;
      case OPT_BUDGET: rc = parse_budget(v, &o->budget_s); break;
      case OPT_MODE:
        if (strcmp(v, "w4a16") && strcmp(v, "w4a4")) {
          fprintf(stderr, "fp4kit " MOE_CMD ": --mode is w4a16 or w4a4, not '%s'\n", v);
          return FP4CLI_USAGE;
        }
        o->modes[0] = !strcmp(v, "w4a4") ? FP4_MOE_W4A4 : FP4_MOE_W4A16;
        o->nmodes = 1;
        break;
      case OPT_FORMAT:
        if (strcmp(v, "nvfp4") && strcmp(v, "mxfp4")) {
          fprintf(stderr, "fp4kit " MOE_CMD ": --format is nvfp4 or mxfp4, not '%s'\n", v);
          return FP4CLI_USAGE;
        }
        o->fmt = !strcmp(v, "mxfp4") ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
        break;
      default: return fp4cli_bad_option(MOE_CMD, c, argv);
    }
    if (rc) return rc;
  }
  if (fp4cli_no_operands(MOE_CMD, argc, argv)) return FP4CLI_USAGE;
  const char *const paths[] = {o->json, o->csv};
  if ((o->stdout_report = fp4cli_stdout_report(MOE_CMD, 2, fp4cli_report_options, paths)) < 0) return FP4CLI_USAGE;
  return FP4CLI_OK;
}

/* Opens the report, writes it and closes it: FP4CLI_OK, or FP4CLI_ERROR after saying what failed. */
static int write_report(int which, const char *path, const bench_origin *origin, const fp4_device_info *dev,
                        const char *config, double copy_bps, const moe_point *pts, int np) {
  fp4cli_report_file r;
  if (fp4cli_report_open(MOE_CMD, fp4cli_report_options[which], path, &r)) return FP4CLI_ERROR;
  if (which == 0) write_json(r.f, origin, dev, config, copy_bps, pts, np);
  else write_csv(r.f, copy_bps, pts, np);
  return fp4cli_report_close(MOE_CMD, fp4cli_report_options[which], path, &r, 0);
}

int bench_moe_main(int argc, char **argv) {
  bench_origin origin;
  bench_provenance(argc, argv, &origin); /* every record names the command, commit and date */
  moe_opts o;
  int help = 0, rc = parse_moe_opts(argc, argv, &o, &help);
  if (rc || help) {
    if (help) bench_moe_usage(stdout);
    return rc;
  }
  const char *const config = o.config;
  const int nmodes = o.nmodes, nb = o.nb;
  int device = o.device;
  if (fp4cli_resolve_device(MOE_CMD, &device)) return FP4CLI_USAGE;
  const char *const paths[] = {o.json, o.csv};
  if ((rc = fp4cli_reports_writable(MOE_CMD, 2, fp4cli_report_options, paths))) return rc;
  char reason[320];
  if (device < 0) {
    fprintf(stderr, "fp4kit " MOE_CMD ": the MoE layer runs on a CUDA device, not the host (device -1: FP4KIT_DEVICE=-1, "
                    "or no CUDA device is present); nothing was timed\n");
    return FP4CLI_ERROR;
  }
  if (!fp4cli_device_usable(device, reason, sizeof reason)) {
    fprintf(stderr, "fp4kit " MOE_CMD ": no usable CUDA device %d (%s); nothing was timed\n", device, reason);
    return FP4CLI_ERROR;
  }
  fp4_context *ctx = NULL;
  fp4_status cst = fp4_context_create(&ctx, device);
  if (cst) return fp4cli_report("opening the device", cst);
  if (fp4_backend_available(ctx, "cuda", reason, sizeof reason) != FP4_OK) {
    fprintf(stderr, "fp4kit " MOE_CMD ": the cuda backend cannot run here: %s; nothing was timed\n", reason);
    fp4_context_destroy(ctx);
    return FP4CLI_ERROR;
  }
  fp4_device_info dev;
  memset(&dev, 0, sizeof dev);
  fp4_device_info_get(ctx, &dev);
  double copy_bps = 0;
  if (o.peers) {
    fp4_timing t;
    if (fp4_time_peer(ctx, FP4_PEER_COPY, 1, 1024, 1024 * 1024, o.runs, &t, &copy_bps) != FP4_OK) {
      fprintf(stderr, "fp4kit " MOE_CMD ": copy peer unavailable: %s\n", fp4_last_error());
      copy_bps = 0;
    }
  }
  /* Copy bandwidth counts bytes read + written; the floor of a read-mostly layer is its reads at the
   * copy's rate: touched bytes / (copy bytes per second). */
  moe_point *pts = calloc((size_t)(2 * nb * nmodes), sizeof *pts);
  if (!pts) {
    fp4_context_destroy(ctx);
    return fp4cli_report("recording the points", FP4_ERR_OUT_OF_MEMORY);
  }
  int np = 0;
  FILE *tab = o.stdout_report ? stderr : stdout;
  fprintf(tab, "device %s, copy %.0f GB/s (read+write), config %s\n", dev.name, copy_bps / 1e9,
          config ? config : "moe.default");
  fprintf(tab, "%-13s %-5s %5s %6s %10s %10s %8s %6s %8s %10s %7s %5s  %s\n", "model", "mode", "B", "active", "layer_us",
          "touched_MB", "GB/s", "/floor", "TFLOP/s", "cublas_us", "speedup", "runs", "status");
  fflush(tab);
  const int nmodels = (int)(sizeof kModels / sizeof *kModels);
  progress pr = {now_s(), 0, nmodels * nmodes * nb};
  for (int mi = 0; mi < nmodels; mi++) {
    const moe_model *m = &kModels[mi];
    fp4_grouped_qmatrix w1 = {0}, w2 = {0};
    cublas_cache cache = {NULL, 0};
    fp4h_rng g = {0x5EEDull + (uint64_t)m->experts};
    fprintf(stderr, "[moe %7.1f s] %s: placing %lld experts on the device\n", now_s() - pr.t0, m->name,
            (long long)m->experts);
    fflush(stderr);
    fp4_status ws = make_experts(ctx, &g, &w1, m->experts, 2 * m->inter, m->hidden, o.fmt);
    if (!ws) ws = make_experts(ctx, &g, &w2, m->experts, m->hidden, m->inter, o.fmt);
    const bench_setup bs = {config, o.runs, o.peers, o.budget_s, copy_bps, o.fmt, &w1, &w2, &cache, &pr};
    for (int md = 0; md < nmodes; md++)
      for (int b = 0; b < nb; b++) {
        moe_point *p = &pts[np++];
        pr.index = np;
        if (ws) { /* the experts could not be placed: every point of the model says why */
          memset(p, 0, sizeof *p);
          p->model = m->name;
          p->batch = o.batches[b];
          p->mode = o.modes[md] == FP4_MOE_W4A4 ? "w4a4" : "w4a16";
          p->status = "error";
          snprintf(p->reason, sizeof p->reason, "placing the experts: %s", fp4_last_error());
        } else {
          run_point(ctx, m, o.batches[b], o.modes[md], &bs, p);
        }
        fprintf(tab, "%-13s %-5s %5lld %6lld %10.1f %10.1f %8.0f %6.2f %8.2f %10.1f %7.2f %5d  %s %s\n", p->model,
                p->mode, (long long)p->batch, (long long)p->active, p->layer_us, p->touched_bytes / 1e6, p->gbps,
                p->floor_ratio, p->tflops, p->cublas_us, p->speedup, p->runs, p->status,
                p->reason[0] ? p->reason : p->variants);
        fflush(tab);
      }
    free_experts(ctx, &w1);
    free_experts(ctx, &w2);
    free(cache.us);
  }
  /* A point that failed is a failed run (1); a report that cannot be written is an error (3). */
  rc = FP4CLI_OK;
  for (int i = 0; i < np; i++)
    if (strcmp(pts[i].status, "ok")) rc = FP4CLI_FAILED;
  for (int i = 0; i < 2; i++)
    if (paths[i] && write_report(i, paths[i], &origin, &dev, config ? config : "moe.default", copy_bps, pts, np))
      rc = FP4CLI_ERROR;
  free(pts);
  fp4_context_destroy(ctx);
  return rc;
}
