#define _GNU_SOURCE
/*
 * `fp4kit bench --step MODEL`: the FP4 part of one rank's decode step, as an engine runs it.
 *
 * Every FP4 layer of the rank's shard (the library's shape set of the model, sharded for --tp/--ep)
 * is built with weights of its own (nothing a layer reads stays in L2 for the next), and the step
 * chains them on the device: each call reads the previous call's output (the first K columns of it,
 * through the row stride, as o_proj reads the q part of the fused qkv output and down_proj a half of
 * gate_up's). Attention, normalization, SiLU of the dense MLP and the residual adds are not FP4 work
 * and are left out; for the MoE layer fp4_moe_forward does routing, SiLU and combine itself. The
 * calls are the public ones an engine makes on the cuda backend's default configs: fp4_mm_w4a16
 * (or fp4_quantize + fp4_mm for --mode w4a4) and fp4_moe_forward, with every scalar a device
 * pointer (alpha_device, global_scale_device, act_scales_device), the context workspace reserved
 * ahead (fp4_context_reserve_workspace) and the MoE workspace allocated ahead.
 *
 * The step is timed three ways in the same process: separate launches on a stream, one CUDA graph
 * captured on a non-blocking stream and replayed, and that graph captured with enable_pdl = 1 on
 * every call; each layer type's share comes from a graph (with PDL) of that type's calls alone. The
 * three outputs of the step must be equal bit for bit. Peers of the same run: the device read
 * bandwidth over 1 GiB (the read ceiling) and the copy bandwidth (fp4_time_peer), and the same step
 * with BF16 weights through cuBLAS in a CUDA graph where those weights fit in device memory.
 *
 * Weights: FP4 codes and E4M3 scales are windows of a random pool (64 MiB of codes, 8 MiB of
 * scales) generated on the host, copied once to the device and copied device-to-device at a
 * different offset into every tensor, so every layer holds distinct bytes in its own memory. Routing
 * (MoE): each token picks min(ceil(top_k / ep), E / ep) distinct experts of the rank's E / ep
 * uniformly, seeded per layer (the shape sets' per-rank count of touched experts); the bytes of a
 * MoE layer are the shared expert's plus those of the distinct routed experts its routing touches.
 *
 * --gpus N runs every rank of the shard at once, one thread and one GPU each (run_ranks), with an
 * NCCL all-reduce (step_comm.c) after every call whose output each rank holds a partial sum of:
 * the row-parallel linears of tensor parallelism and the MoE layer with its experts split (expert
 * parallelism with the all-reduce combine, as engines run it without an all-to-all dispatch); the
 * shard's ranks are --tp, expert parallelism lying within them, or --ep with --tp 1. With --moe-comm all-to-all, expert parallelism runs as engines with data-parallel
 * attention run it: every rank holds --batch tokens of its own, each token picks top-k experts of
 * the whole model, and the MoE layer is the shared expert on the rank's tokens, a dispatch (rows
 * gathered by destination, one NCCL all-to-all), the routed experts on the rows received (top-1
 * each, weighted), the all-to-all back and a sum per token (step_exchange.c plans the rows; the
 * gather and sum kernels are fp4kit_bench's). The ranks agree at fixed points (layers built, set-up,
 * each timed way) so that all of them issue the same collectives or none; the record keeps the
 * slowest rank's times.
 */
#include "bench_step.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4kit_bench.h"
#include "cli.h"
#include "provenance.h"
#include "step_comm.h"
#include "step_exchange.h"
#include "step_report.h"
#include "step_trace.h"

#if FP4KIT_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_ERROR = 3 };

/* ---------------------------------------------------------------------------------------------- */
/* Options                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void step_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit bench --step MODEL [--tp N] [--ep N] [--batch 1,8,64] [--layers N] [--mode w4a16|w4a4]\n"
          "                    [--device N] [--gpus N [--moe-comm all-reduce|all-to-all]] [--rounds N] [--seed N]\n"
          "                    [--no-peers] [--plan] [--trace]\n"
          "                    [--sweep CONFIG[,CONFIG...]] [--json PATH] [--csv PATH] [--html PATH]\n"
          "\n"
          "Times the FP4 part of one rank's decode step of MODEL on the device: every NVFP4 linear of every\n"
          "layer of the rank's shard, with weights of its own per layer, chained on the device (each call\n"
          "reads the previous call's output). Dense linears run fp4_mm_w4a16 (--mode w4a4: fp4_quantize +\n"
          "fp4_mm); routed experts and the shared expert run fp4_moe_forward, with seeded random top-k\n"
          "routing fresh per layer (each token picks ceil(top_k / ep) distinct experts of the rank). All on\n"
          "the cuda backend's default configs, scalars as device pointers, workspace reserved ahead.\n"
          "The step is timed as separate launches, as one CUDA graph, and as one CUDA graph with PDL\n"
          "(enable_pdl on every call); per layer type from a graph of that type's calls alone. Reported per\n"
          "batch: step time (median of --rounds), FP4 bytes read (weights + block scales; for MoE only the\n"
          "experts the routing touches), the fraction of the same-run read ceiling (device read bandwidth\n"
          "over 1 GiB), the time over the copy floor, the PDL gain (graph / graph with PDL), an upper bound\n"
          "on tokens/s from the FP4 part (batch / step time, scaled to every layer), and the same step with\n"
          "BF16 weights through cuBLAS in a CUDA graph where those weights fit. Also timed: the read-only\n"
          "chain, every call replaced by one kernel that only reads the call's weight bytes (for a MoE layer\n"
          "the codes and scales of the experts its routing touches and the shared expert's), in a CUDA\n"
          "graph: what one kernel per layer costs with no math.\n"
          "\n"
          "With --gpus N every rank of the shard runs on a GPU of its own (one thread each): --tp ranks, with\n"
          "--ep splitting the experts within them, or --ep ranks with --tp 1. The output of every layer that\n"
          "each rank holds a partial sum of (row-parallel linears under --tp, the MoE layer when its experts\n"
          "are split) is summed over the ranks by an NCCL all-reduce in place, in the same stream and the same\n"
          "CUDA graph as the layers. Reported besides: the collectives per step, the bytes a rank sends in\n"
          "them (ring: 2 (N - 1) / N of each), their time alone (a graph of only them), and every rank's\n"
          "step time (the record's times are the slowest rank's). --gpus 1 runs the collectives over one\n"
          "rank. NCCL (libnccl.so.2) is loaded when --gpus is given.\n"
          "\n"
          "With --moe-comm all-to-all (--tp 1, --gpus N = --ep N), expert parallelism runs with data-parallel\n"
          "attention instead: every rank holds --batch tokens of its own (the step serves N x batch), each\n"
          "token picks top_k distinct experts of the whole model, and the MoE layer is the shared expert on\n"
          "the rank's tokens, a dispatch (the token's row to the rank of each expert it picked, one NCCL\n"
          "all-to-all), fp4_moe_forward on the rows received, the all-to-all back and a sum per token. The\n"
          "dense layers run on the rank's own tokens with no collective. Reported besides: the all-to-alls\n"
          "per step, the bytes a rank sends to the others in them, and their time alone.\n"
          "\n"
          "  --step MODEL   qwen3.5-397b-a17b, llama-3.3-70b, llama-3.1-8b (the library's shape sets;\n"
          "                 qwen3-30b-a3b too)\n"
          "  --tp N, --ep N tensor / expert parallelism: one rank's shard (default 1, 1)\n"
          "  --batch LIST   tokens per step (with --moe-comm all-to-all: per rank), comma-separated, each in\n"
          "                 [1, %d] (default 1,8,64)\n"
          "  --layers N     build N of the model's layers (default: all; fewer are built when the rank's\n"
          "                 weights do not fit in free device memory, and the record says how many)\n"
          "  --mode M       w4a16 (default) or w4a4 (activations quantized by fp4_quantize / the MoE layer)\n"
          "  --rounds N     timed steps per way, N in [3, 10000] (default 20)\n"
          "  --seed N       routing and activation seed (default 1)\n"
          "  --no-peers     skip the BF16 cuBLAS step (the read and copy peers always run)\n"
          "  --plan         print the rank's layer types, shapes and bytes and exit (no GPU needed); for a\n"
          "                 MoE model also per --batch, from the routing: experts a layer touches, FP4\n"
          "                 bytes of the step, and with --moe-comm all-to-all the rows a rank receives\n"
          "                 and the bytes it sends (rank means and the largest rank's). It takes --tp, --ep,\n"
          "                 --gpus, --moe-comm, --batch, --seed and --layers, and refuses the options that\n"
          "                 only set how the step is timed (--mode, --device, --rounds, --no-peers, --sweep,\n"
          "                 --trace, --json, --csv, --html)\n"
          "  --device N     CUDA device (default: FP4KIT_DEVICE, else 0); with --gpus, the first of them\n"
          "  --gpus N       one rank per GPU: N is 1 or the shard's ranks, --tp or --ep with --tp 1 (at most %d)\n"
          "  --moe-comm C   with --gpus: all-reduce (default; every rank sees every token, the MoE output is\n"
          "                 summed over the ranks) or all-to-all (above)\n"
          "  --sweep LIST   also time every layer type with each named config of the cuda backend\n"
          "                 (comma-separated, at most %d: small-m.* / large-m.* names for the dense GEMMs,\n"
          "                 as fp4kit bench --config takes them; moe.* names for the MoE layer, as fp4kit\n"
          "                 bench --moe --config takes them), as the per-type graph with PDL: which config\n"
          "                 is fastest inside the step, beside the default. A config that cannot run a\n"
          "                 type is reported refused with the reason (text and JSON; one rank only, not\n"
          "                 with --gpus 2 or more)\n"
          "  --trace        after the timings, replay the step's graph with PDL under CUPTI (libcupti,\n"
          "                 loaded when run) and report its kernel timeline: the replay's span, the time\n"
          "                 some kernel runs, and per position in a layer (route, gate_up, ...) the mean\n"
          "                 kernel time and how long after the end of the kernels before it each starts\n"
          "                 (negative: it overlaps them, as PDL lets it); text and JSON, one rank only\n"
          "  --json/--csv/--html PATH   write the record ('-' for stdout); the HTML draws the step as one\n"
          "                 bar per layer type against its read floor. JSON and CSV give each batch's\n"
          "                 tokens_per_step (the CSV as its last column). A file is replaced only once\n"
          "                 the record is whole, as fp4kit bench --help says\n"
          "\n"
          "Exit status: 0 every batch ran, its three ways' outputs alike and finite; 1 a batch failed (its\n"
          "status: error, mismatch where the ways' outputs differ, not finite); 2 a usage error; 3 nothing\n"
          "could run (no GPU, NCCL or the plan's batches unavailable) or a report could not be written.\n",
          STEP_MAX_BATCH, STEP_MAX_GPUS, STEP_MAX_SWEEP);
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, long long *out) {
  return fp4cli_parse_int("bench --step", opt, s, lo, hi, out) == FP4CLI_OK;
}

static int parse_batches(const char *s, step_opts *o) {
  long long b[STEP_MAX_BATCHES];
  const int n = fp4cli_parse_int_list("bench --step", "--batch", s, 1, STEP_MAX_BATCH, STEP_MAX_BATCHES, b);
  for (int i = 0; i < n; i++) o->batches[i] = b[i];
  o->nbatches = n > 0 ? n : 0;
  return n > 0;
}

static int parse_sweep(const char *s, step_opts *o) {
  o->nsweep = 0;
  for (const char *p = s; *p;) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (!len || len >= sizeof o->sweep[0]) {
      fprintf(stderr, "fp4kit bench --step: --sweep '%s': %s\n", s, len ? "a config name over 63 characters" : "an empty config name");
      return 0;
    }
    if (o->nsweep == STEP_MAX_SWEEP) {
      fprintf(stderr, "fp4kit bench --step: --sweep takes at most %d configs\n", STEP_MAX_SWEEP);
      return 0;
    }
    memcpy(o->sweep[o->nsweep], p, len);
    o->sweep[o->nsweep++][len] = '\0';
    p += len + (end ? 1 : 0);
    if (end && !*p) {
      fprintf(stderr, "fp4kit bench --step: --sweep '%s' ends with a comma\n", s);
      return 0;
    }
  }
  if (!o->nsweep) fprintf(stderr, "fp4kit bench --step: --sweep names no config\n");
  return o->nsweep > 0;
}

/* EXIT_OK with o filled, or EXIT_USAGE after saying why (*hinted set when that already named --help);
 * *help set for --help. */
static int parse_opts(int argc, char **argv, step_opts *o, int *help, int *hinted) {
  enum { O_STEP = 256, O_TP, O_EP, O_BATCH, O_LAYERS, O_DEVICE, O_ROUNDS, O_SEED, O_MODE, O_NO_PEERS, O_PLAN, O_JSON,
         O_CSV, O_HTML, O_GPUS, O_SWEEP, O_TRACE, O_MOE_COMM };
  static const struct option longs[] = {
      {"step", required_argument, NULL, O_STEP},     {"tp", required_argument, NULL, O_TP},
      {"ep", required_argument, NULL, O_EP},         {"batch", required_argument, NULL, O_BATCH},
      {"layers", required_argument, NULL, O_LAYERS}, {"device", required_argument, NULL, O_DEVICE},
      {"rounds", required_argument, NULL, O_ROUNDS}, {"seed", required_argument, NULL, O_SEED},
      {"mode", required_argument, NULL, O_MODE},     {"no-peers", no_argument, NULL, O_NO_PEERS},
      {"plan", no_argument, NULL, O_PLAN},           {"json", required_argument, NULL, O_JSON},
      {"csv", required_argument, NULL, O_CSV},       {"html", required_argument, NULL, O_HTML},
      {"gpus", required_argument, NULL, O_GPUS},     {"help", no_argument, NULL, 'h'},
      {"sweep", required_argument, NULL, O_SWEEP},     {"trace", no_argument, NULL, O_TRACE},
      {"moe-comm", required_argument, NULL, O_MOE_COMM},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->tp = o->ep = 1;
  o->rounds = 20;
  o->peers = 1;
  o->seed = 1;
  o->batches[0] = 1;
  o->batches[1] = 8;
  o->batches[2] = 64;
  o->nbatches = 3;
  o->device = 0;
  *help = *hinted = 0;
  int device_given = 0;
  unsigned given = 0; /* bit c - O_STEP: option c was given */
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  long long v = 0;
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    int ok = 1;
    if (c >= O_STEP) given |= 1u << (c - O_STEP);
    switch (c) {
      case 'h': *help = 1; return EXIT_OK;
      case O_STEP:
        if (!strcmp(optarg, "--help") || !strcmp(optarg, "-h")) { /* `bench --step --help`: the options */
          *help = 1;
          return EXIT_OK;
        }
        o->model = optarg;
        break;
      case O_TP: ok = parse_int("--tp", optarg, 1, 4096, &v) && (o->tp = (int)v); break;
      case O_EP: ok = parse_int("--ep", optarg, 1, 4096, &v) && (o->ep = (int)v); break;
      case O_BATCH: ok = parse_batches(optarg, o) && (o->routing_given = 1); break;
      case O_SWEEP: ok = parse_sweep(optarg, o); break;
      case O_LAYERS: ok = parse_int("--layers", optarg, 1, 1 << 20, &v) && (o->layers = v); break;
      case O_DEVICE: ok = device_given = parse_int("--device", optarg, 0, 1024, &v) && ((o->device = (int)v) || 1); break;
      case O_ROUNDS: ok = parse_int("--rounds", optarg, 3, 10000, &v) && (o->rounds = (int)v); break;
      case O_GPUS: ok = parse_int("--gpus", optarg, 1, STEP_MAX_GPUS, &v) && (o->gpus = (int)v); break;
      case O_SEED: ok = parse_int("--seed", optarg, 0, INT64_MAX, &v) && ((o->seed = (uint64_t)v) || 1) && (o->routing_given = 1); break;
      case O_MODE:
        if (!strcmp(optarg, "w4a16") || !strcmp(optarg, "w4a4")) {
          o->w4a4 = !strcmp(optarg, "w4a4");
        } else {
          fprintf(stderr, "fp4kit bench --step: --mode is w4a16 or w4a4, not '%s'\n", optarg);
          ok = 0;
        }
        break;
      case O_MOE_COMM:
        if (!strcmp(optarg, "all-reduce") || !strcmp(optarg, "all-to-all")) {
          o->a2a = !strcmp(optarg, "all-to-all");
        } else {
          fprintf(stderr, "fp4kit bench --step: --moe-comm is all-reduce or all-to-all, not '%s'\n", optarg);
          ok = 0;
        }
        break;
      case O_NO_PEERS: o->peers = 0; break;
      case O_TRACE: o->trace = 1; break;
      case O_PLAN: o->plan_only = 1; break;
      case O_JSON: o->json = optarg; break;
      case O_CSV: o->csv = optarg; break;
      case O_HTML: o->html = optarg; break;
      default:
        *hinted = 1;
        return fp4cli_bad_option("bench --step", c, argv);
    }
    if (!ok) return EXIT_USAGE;
  }
  if (optind < argc) {
    fprintf(stderr, "fp4kit bench --step: unexpected argument '%s'\n", argv[optind]);
    return EXIT_USAGE;
  }
  if (!o->model) {
    fprintf(stderr, "fp4kit bench --step: --step names the model (");
    for (int i = 0; fp4_shape_set_name(i); i++) fprintf(stderr, "%s%s", i ? ", " : "", fp4_shape_set_name(i));
    fprintf(stderr, ")\n");
    return EXIT_USAGE;
  }
  if (o->a2a && (o->tp != 1 || o->gpus != o->ep)) {
    fprintf(stderr, "fp4kit bench --step: --moe-comm all-to-all runs expert parallelism with data-parallel attention, one "
                    "rank per GPU: --tp 1 and --gpus N with N = --ep (here --tp %d, --ep %d, --gpus %d)\n",
            o->tp, o->ep, o->gpus);
    return EXIT_USAGE;
  }
  if (o->gpus > 1 && !step_ranks(o->tp, o->ep)) {
    fprintf(stderr, "fp4kit bench --step: --tp %d and --ep %d: --gpus runs --tp 1 or --ep at most --tp; wider expert "
                    "parallelism over tensor-parallel groups would need collectives over each group\n", o->tp, o->ep);
    return EXIT_USAGE;
  }
  if (o->gpus > 1 && o->gpus != step_ranks(o->tp, o->ep)) {
    fprintf(stderr, "fp4kit bench --step: --gpus %d runs one rank of the shard per GPU, but --tp %d and --ep %d make %d "
                    "ranks (expert parallelism splits the experts within the tensor-parallel group)\n",
            o->gpus, o->tp, o->ep, step_ranks(o->tp, o->ep));
    return EXIT_USAGE;
  }
  if (o->nsweep && o->gpus > 1) {
    fprintf(stderr, "fp4kit bench --step: --sweep times one rank; run it without --gpus %d\n", o->gpus);
    return EXIT_USAGE;
  }
  if (o->trace && o->gpus > 1) {
    fprintf(stderr, "fp4kit bench --step: --trace records one rank; run it without --gpus %d\n", o->gpus);
    return EXIT_USAGE;
  }
  if (o->plan_only && (o->json || o->csv || o->html)) {
    fprintf(stderr, "fp4kit bench --step: --plan prints the plan as text; --json, --csv and --html record a timed step\n");
    return EXIT_USAGE;
  }
  /* The plan is host arithmetic on the shape set and the routing (step_plan.c): these options only
   * set how the step is timed on a device, so with --plan they would do nothing unseen. */
  static const struct {
    int code;
    const char *name;
  } timed_only[] = {{O_MODE, "--mode"},         {O_DEVICE, "--device"}, {O_ROUNDS, "--rounds"},
                    {O_NO_PEERS, "--no-peers"}, {O_SWEEP, "--sweep"},   {O_TRACE, "--trace"}};
  enum { TIMED_ONLY = sizeof timed_only / sizeof *timed_only };
  int unused = 0;
  for (int i = 0; o->plan_only && i < TIMED_ONLY; i++) unused += given >> (timed_only[i].code - O_STEP) & 1;
  if (unused) {
    fprintf(stderr, "fp4kit bench --step: --plan times nothing, and it ignores ");
    for (int i = 0, k = 0; i < TIMED_ONLY; i++)
      if (given >> (timed_only[i].code - O_STEP) & 1) {
        k++;
        fprintf(stderr, "%s%s", k == 1 ? "" : k == unused ? " and " : ", ", timed_only[i].name);
      }
    fprintf(stderr, ", which set%s how the step is timed: drop %s or --plan\n", unused == 1 ? "s" : "",
            unused == 1 ? "it" : "them");
    return EXIT_USAGE;
  }
  const char *const paths[3] = {o->json, o->csv, o->html};
  if ((o->stdout_report = fp4cli_stdout_report("bench --step", 3, fp4cli_report_options, paths)) < 0) return EXIT_USAGE;
  /* FP4KIT_DEVICE where --device is not given (a value that is not a device is a usage error) */
  if (device_given || o->plan_only) return EXIT_OK;
  const int rc = fp4cli_env_device("bench --step", &o->device);
  if (!rc && o->device < 0) {
    fprintf(stderr, "fp4kit bench --step: the step runs on a GPU, and FP4KIT_DEVICE=-1 asks for the host only\n");
    return EXIT_USAGE;
  }
  return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* The device step                                                                                */
/* ---------------------------------------------------------------------------------------------- */

#if FP4KIT_HAVE_CUDA

enum { POOL_CODES = 64 << 20, POOL_SCALES = 8 << 20, POOL_BF16 = 32 << 20 };
#define HEADROOM ((size_t)3 << 30) /* left free for activations, workspaces, cuBLAS and the graphs */

static fp4_status cu(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return FP4_OK;
  cudaGetLastError();
  return fp4_set_error(e == cudaErrorMemoryAllocation ? FP4_ERR_OUT_OF_MEMORY : FP4_ERR_CUDA, "%s: %s", what,
                       cudaGetErrorString(e));
}

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

/* One layer's exchange on the device: the index arrays of its step_exchange. */
typedef struct exchange_dev {
  int32_t *send_token, *sum_rows, *recv_expert;
  float *recv_weight;
} exchange_dev;

/* One layer's FP4 tensors, carved from one allocation. */
typedef struct gpu_layer {
  void *slab;
  fp4_qmatrix w[STEP_MAX_TYPES];
  fp4_grouped_qmatrix gu, dn, sgu, sdn;
  int32_t *ids; /* device routing for the largest batch */
  float *tw;
  int32_t *h_ids; /* the same on the host */
} gpu_layer;

typedef struct gpu_step {
  const step_plan *plan;
  const step_opts *o;
  fp4_context *ctx;
  cudaStream_t s;
  int64_t layers, bmax;
  gpu_layer *L;
  uint8_t *pool_codes, *pool_scales;
  uint16_t *pool_bf16;
  float *scalars; /* [0] 1, [1] [2] activation encode scale, [4+t] W4A16 alpha, [4+MAX+t] W4A4 alpha, then multipliers */
  float *mult_gu, *mult_dn, *mult_sgu, *mult_sdn;
  void *x0, *act[2], *xq, *xq_scales;
  void *moe_ws;
  size_t moe_ws_bytes;
  double code_ms, scale_ms; /* E[code^2], E[scale^2] of the pools */
  step_comms *comm;         /* --gpus: this rank's communicator set, else NULL */
  int rank, nranks;
  void *sink; /* the read-only chain's kernels write here (4096 words) */
  int config_type;        /* --sweep: the type whose calls run config_name (-1: none) */
  const char *config_name;
  /* --moe-comm all-to-all: the exchange of every MoE layer at the current batch (host plans, and
   * their index arrays in one device allocation), the rows it moves and the shared expert's routing */
  step_exchange *X;
  exchange_dev *xd;
  void *xd_slab;
  int64_t x_batch;        /* the batch X and xd hold (0: none) */
  void *send_rows, *recv_rows, *expert_rows, *back_rows, *shared_rows;
  int32_t *shared_ids; /* [bmax] zeros: the shared expert as the one routed expert of its own layer */
  float *shared_w;     /* [bmax] ones */
} gpu_step;

/* Whether every rank is still fine: each rank's thread calls this at the same points in the same
 * order (a rank that failed must not leave the others waiting in a collective); 1 rank: ok. */
static int ranks_ok(const gpu_step *g, int ok) { return g->comm ? step_comm_agree_min(g->comm, ok ? 1 : 0) != 0 : ok; }

/* Whether a call's output is summed over the ranks: each holds a partial sum of it. */
static int reduced(const gpu_step *g, const step_type *ty) {
  return g->comm && !g->o->a2a && step_type_reduced(g->plan, ty);
}

typedef struct step_call {
  int type;
  int64_t layer;
  const void *in;
  int64_t in_ld;
  void *out;
} step_call;

static const int64_t kTypeSeed = 0x9E37;

/* dst <- `bytes` of the pool starting at a position of its own, wrapping. */
static fp4_status fill(void *dst, size_t bytes, const void *pool, size_t pool_bytes, uint64_t tag, cudaStream_t s) {
  size_t off = (size_t)(step_mix64(tag) % (pool_bytes / 256)) * 256;
  uint8_t *d = dst;
  while (bytes) {
    size_t chunk = pool_bytes - off < bytes ? pool_bytes - off : bytes;
    fp4_status st = cu(cudaMemcpyAsync(d, (const uint8_t *)pool + off, chunk, cudaMemcpyDeviceToDevice, s), "filling weights");
    if (st) return st;
    d += chunk;
    bytes -= chunk;
    off = 0;
  }
  return FP4_OK;
}

static fp4_status make_pools(gpu_step *g) {
  uint8_t *h = malloc(POOL_CODES);
  if (!h) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the weight pool");
  uint64_t z = g->o->seed * 0x2545F4914F6CDD1Dull + 17;
  for (size_t i = 0; i < POOL_CODES; i += 8) {
    z = step_mix64(z);
    memcpy(h + i, &z, 8);
  }
  static const float code_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  double cs = 0;
  for (int c = 0; c < 8; c++) cs += (double)code_values[c] * code_values[c];
  g->code_ms = cs / 8.0; /* codes: uniform random nibbles */
  fp4_status st = cu(cudaMalloc((void **)&g->pool_codes, POOL_CODES), "the code pool");
  if (!st) st = cu(cudaMemcpy(g->pool_codes, h, POOL_CODES, cudaMemcpyHostToDevice), "copying the code pool");
  /* E4M3 scales 0x20..0x37: 0.125 .. 0.9375, finite and nonzero. */
  double ss = 0;
  for (size_t i = 0; i < POOL_SCALES; i++) {
    if (i % 8 == 0) z = step_mix64(z);
    h[i] = (uint8_t)(0x20 + (uint8_t)(z >> (8 * (i % 8))) % 0x18);
    const double v = fp4_e4m3_decode(h[i]);
    ss += v * v;
  }
  g->scale_ms = ss / POOL_SCALES;
  if (!st) st = cu(cudaMalloc((void **)&g->pool_scales, POOL_SCALES), "the scale pool");
  if (!st) st = cu(cudaMemcpy(g->pool_scales, h, POOL_SCALES, cudaMemcpyHostToDevice), "copying the scale pool");
  free(h);
  return st;
}

/* Alpha making a [N, K] weight of the pools' statistics keep unit-scale activations unit-scale. */
static float unit_alpha(const gpu_step *g, int64_t k) { return (float)(1.0 / sqrt(g->code_ms * g->scale_ms * (double)k)); }

static size_t layer_bytes_alloc(const step_plan *p, int64_t bmax) {
  size_t b = 0;
  for (int t = 0; t < p->ntypes; t++) {
    const step_type *ty = &p->types[t];
    size_t sb = 0;
    if (ty->kind == STEP_DENSE) {
      fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, ty->n, ty->k, &sb);
      b += al256((size_t)(ty->n * ty->k / 2)) + al256(sb);
      continue;
    }
    const int64_t E = ty->experts, H = ty->hidden, I = ty->inter, S = ty->shared_inter;
    size_t s1 = 0, s2 = 0;
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 2 * I, H, &s1);
    fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, H, I, &s2);
    b += al256((size_t)(E * 2 * I * H / 2)) + al256((size_t)E * s1) + al256((size_t)(E * H * I / 2)) + al256((size_t)E * s2);
    if (S) {
      fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 2 * S, H, &s1);
      fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, H, S, &s2);
      b += al256((size_t)(2 * S * H / 2)) + al256(s1) + al256((size_t)(H * S / 2)) + al256(s2);
    }
    b += 2 * al256((size_t)(bmax * ty->top_k) * 4);
  }
  return b;
}

static void *carve(uint8_t **p, size_t bytes) {
  void *r = *p;
  *p += al256(bytes);
  return r;
}

/* Codes and scales of one FP4 tensor set from the pools. */
static fp4_status fill_fp4(gpu_step *g, void *codes, size_t cb, void *scales, size_t sb, uint64_t tag) {
  fp4_status st = fill(codes, cb, g->pool_codes, POOL_CODES, tag, g->s);
  return st ? st : fill(scales, sb, g->pool_scales, POOL_SCALES, tag ^ 0xABCDEFull, g->s);
}

static fp4_status grouped(gpu_step *g, uint8_t **p, fp4_grouped_qmatrix *w, int64_t E, int64_t N, int64_t K,
                          const float *mult, uint64_t tag) {
  size_t sb = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, N, K, &sb);
  *w = (fp4_grouped_qmatrix){NULL, NULL, mult, E, N, K, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, FP4_MEMORY_DEVICE};
  w->data = carve(p, (size_t)(E * N * K / 2));
  w->scales = carve(p, (size_t)E * sb);
  return fill_fp4(g, w->data, (size_t)(E * N * K / 2), w->scales, (size_t)E * sb, tag);
}

static fp4_status build_layer(gpu_step *g, int64_t l, size_t bytes) {
  gpu_layer *L = &g->L[l];
  const step_plan *p = g->plan;
  fp4_status st = cu(cudaMalloc(&L->slab, bytes), "a layer's weights");
  if (st) return st;
  uint8_t *c = L->slab;
  for (int t = 0; t < p->ntypes && !st; t++) {
    const step_type *ty = &p->types[t];
    const uint64_t tag = (uint64_t)l * 1000003ull + (uint64_t)t * (uint64_t)kTypeSeed;
    if (ty->kind == STEP_DENSE) {
      size_t sb = 0;
      fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, ty->n, ty->k, &sb);
      L->w[t] = (fp4_qmatrix){NULL, NULL, ty->n, ty->k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
      L->w[t].data = carve(&c, (size_t)(ty->n * ty->k / 2));
      L->w[t].scales = carve(&c, sb);
      st = fill_fp4(g, L->w[t].data, (size_t)(ty->n * ty->k / 2), L->w[t].scales, sb, tag);
      continue;
    }
    const int64_t E = ty->experts, H = ty->hidden, I = ty->inter, S = ty->shared_inter;
    st = grouped(g, &c, &L->gu, E, 2 * I, H, g->mult_gu, tag + 1);
    if (!st) st = grouped(g, &c, &L->dn, E, H, I, g->mult_dn, tag + 2);
    if (!st && S) st = grouped(g, &c, &L->sgu, 1, 2 * S, H, g->mult_sgu, tag + 3);
    if (!st && S) st = grouped(g, &c, &L->sdn, 1, H, S, g->mult_sdn, tag + 4);
    const size_t n = (size_t)(g->bmax * ty->top_k);
    L->ids = carve(&c, n * 4);
    L->tw = carve(&c, n * 4);
    L->h_ids = malloc(n * sizeof *L->h_ids);
    float *h_tw = malloc(n * sizeof *h_tw);
    if (!st && (!L->h_ids || !h_tw)) st = fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for routing");
    if (!st) {
      step_routing(g->o->seed, l, g->bmax, ty->top_k, E, L->h_ids, h_tw);
      st = cu(cudaMemcpy(L->ids, L->h_ids, n * 4, cudaMemcpyHostToDevice), "copying the routing");
      if (!st) st = cu(cudaMemcpy(L->tw, h_tw, n * 4, cudaMemcpyHostToDevice), "copying the routing weights");
    }
    free(h_tw);
  }
  return st;
}

static void free_layers(gpu_step *g) {
  for (int64_t l = 0; g->L && l < g->layers; l++) {
    if (g->L[l].slab) cudaFree(g->L[l].slab);
    free(g->L[l].h_ids);
    memset(&g->L[l], 0, sizeof g->L[l]);
  }
}

/* Scalars, multipliers, activations and the W4A4 scratch. */
static fp4_status make_buffers(gpu_step *g) {
  const step_plan *p = g->plan;
  const step_type *moe = step_moe_type(p);
  const int64_t E = moe ? moe->experts : 1;
  enum { BASE = 4 + 2 * STEP_MAX_TYPES };
  const size_t nscal = BASE + 2 * (size_t)E + 2;
  float *h = calloc(nscal, sizeof *h);
  if (!h) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  const float gs = 448.0f * 6.0f / 8.0f; /* activation encode scale: amax 8 maps to the top of NVFP4 */
  h[0] = 1.0f;
  h[1] = h[2] = gs;
  for (int t = 0; t < p->ntypes; t++) {
    h[4 + t] = unit_alpha(g, p->types[t].k);
    h[4 + STEP_MAX_TYPES + t] = unit_alpha(g, p->types[t].k) / gs; /* 1/global_scale folded into alpha */
  }
  for (int64_t e = 0; e < E && moe; e++) {
    h[BASE + e] = unit_alpha(g, moe->hidden);
    h[BASE + E + e] = unit_alpha(g, moe->inter);
  }
  if (moe && moe->shared_inter) {
    h[BASE + 2 * E] = unit_alpha(g, moe->hidden);
    h[BASE + 2 * E + 1] = unit_alpha(g, moe->shared_inter);
  }
  fp4_status st = cu(cudaMalloc((void **)&g->scalars, nscal * sizeof *h), "device scalars");
  if (!st) st = cu(cudaMemcpy(g->scalars, h, nscal * sizeof *h, cudaMemcpyHostToDevice), "copying device scalars");
  free(h);
  if (st) return st;
  g->mult_gu = g->scalars + BASE;
  g->mult_dn = g->scalars + BASE + E;
  g->mult_sgu = g->scalars + BASE + 2 * E;
  g->mult_sdn = g->scalars + BASE + 2 * E + 1;
  int64_t width = p->hidden, maxk = 0;
  for (int t = 0; t < p->ntypes; t++) {
    if (step_out_width(&p->types[t]) > width) width = step_out_width(&p->types[t]);
    if (p->types[t].k > maxk) maxk = p->types[t].k;
  }
  const size_t act = (size_t)(g->bmax * width) * 2;
  size_t xs = 0;
  fp4_scales_size(FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, g->bmax, maxk, &xs);
  if ((st = cu(cudaMalloc(&g->x0, (size_t)(g->bmax * p->hidden) * 2), "activations")) ||
      (st = cu(cudaMalloc(&g->act[0], act), "activations")) || (st = cu(cudaMalloc(&g->act[1], act), "activations")) ||
      (st = cu(cudaMalloc(&g->xq, (size_t)(g->bmax * maxk / 2)), "quantized activations")) ||
      (st = cu(cudaMalloc(&g->xq_scales, xs), "quantized activation scales")))
    return st;
  /* The step's input: bf16 of unit scale. */
  const size_t n = (size_t)(g->bmax * p->hidden);
  uint16_t *x = malloc(n * 2);
  if (!x) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  uint64_t z = g->o->seed ^ 0x78307830ull;
  for (size_t i = 0; i < n; i++) {
    z = step_mix64(z);
    x[i] = fp4_bf16_from_f32((float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 3.4 - 1.7));
  }
  st = cu(cudaMemcpy(g->x0, x, n * 2, cudaMemcpyHostToDevice), "copying the input");
  free(x);
  return st;
}

/* The calls of one step of B tokens: each reads the previous output. Returns the count; *last is
 * the buffer the step's output ends in. */
static int make_calls(const gpu_step *g, step_call *calls, void **last) {
  const step_plan *p = g->plan;
  const void *cur = g->x0;
  int64_t ld = p->hidden;
  int n = 0, ping = 0;
  for (int64_t l = 0; l < g->layers; l++)
    for (int t = 0; t < p->ntypes; t++) {
      step_call *c = &calls[n++];
      c->type = t;
      c->layer = l;
      c->in = cur;
      c->in_ld = ld;
      c->out = g->act[ping];
      cur = c->out;
      ld = step_out_width(&p->types[t]);
      ping ^= 1;
    }
  *last = (void *)cur;
  return n;
}

static void moe_args(const gpu_step *g, const step_call *c, int64_t B, fp4_moe_layer *layer, fp4_moe_experts *shared,
                     fp4_moe_routing *rt) {
  const step_type *ty = &g->plan->types[c->type];
  const gpu_layer *L = &g->L[c->layer];
  const float gs = 448.0f * 6.0f / 8.0f;
  const float *act = g->o->w4a4 ? g->scalars + 1 : NULL;
  *shared = (fp4_moe_experts){L->sgu, L->sdn, gs, gs, act};
  *layer = (fp4_moe_layer){g->o->w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16, {L->gu, L->dn, gs, gs, act},
                           ty->shared_inter ? shared : NULL};
  *rt = (fp4_moe_routing){L->ids, B, ty->top_k, {L->tw, B, ty->top_k, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, NULL};
}

/* --moe-comm all-to-all: the most rows a rank receives in one layer at bmax tokens per rank. */
static int64_t a2a_max_rows(const gpu_step *g, const step_type *moe) {
  return (int64_t)g->nranks * g->bmax * (moe->active < moe->experts ? moe->active : moe->experts);
}

static void exchange_free(gpu_step *g) {
  for (int64_t l = 0; g->X && l < g->layers; l++) step_exchange_free(&g->X[l]);
  free(g->X);
  free(g->xd);
  if (g->xd_slab) {
    cudaStreamSynchronize(g->s); /* no queued work may still read the arrays */
    cudaFree(g->xd_slab);
  }
  g->X = NULL;
  g->xd = NULL;
  g->xd_slab = NULL;
  g->x_batch = 0;
}

/* The exchange of every MoE layer at B tokens per rank: the plans, and their index arrays copied to
 * the device (kept until another batch's replace them). */
static fp4_status exchange_prepare(gpu_step *g, int64_t B) {
  if (g->x_batch == B) return FP4_OK;
  exchange_free(g);
  const step_type *moe = step_moe_type(g->plan);
  if (!(g->X = calloc((size_t)g->layers, sizeof *g->X)) || !(g->xd = calloc((size_t)g->layers, sizeof *g->xd)))
    return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the exchange");
  size_t bytes = 0;
  for (int64_t l = 0; l < g->layers; l++) {
    fp4_status st = step_exchange_make(g->o->seed, l, g->nranks, g->rank, B, g->bmax, moe->active, moe->experts, &g->X[l]);
    if (st) return st;
    bytes += 2 * al256((size_t)g->X[l].sent * 4) + 2 * al256((size_t)g->X[l].received * 4);
  }
  fp4_status st = cu(cudaMalloc(&g->xd_slab, bytes), "the exchange's index arrays");
  uint8_t *c = g->xd_slab;
  for (int64_t l = 0; l < g->layers && !st; l++) {
    const step_exchange *x = &g->X[l];
    exchange_dev *d = &g->xd[l];
    d->send_token = carve(&c, (size_t)x->sent * 4);
    d->sum_rows = carve(&c, (size_t)x->sent * 4);
    d->recv_expert = carve(&c, (size_t)x->received * 4);
    d->recv_weight = carve(&c, (size_t)x->received * 4);
    st = cu(cudaMemcpy(d->send_token, x->send_token, (size_t)x->sent * 4, cudaMemcpyHostToDevice), "copying the exchange");
    if (!st) st = cu(cudaMemcpy(d->sum_rows, x->sum_rows, (size_t)x->sent * 4, cudaMemcpyHostToDevice), "copying the exchange");
    if (!st && x->received)
      st = cu(cudaMemcpy(d->recv_expert, x->recv_expert, (size_t)x->received * 4, cudaMemcpyHostToDevice), "copying the exchange");
    if (!st && x->received)
      st = cu(cudaMemcpy(d->recv_weight, x->recv_weight, (size_t)x->received * 4, cudaMemcpyHostToDevice), "copying the exchange");
  }
  if (!st) g->x_batch = B;
  return st;
}

/* Buffers of --moe-comm all-to-all: the rows the exchange moves, the shared expert's output and its
 * routing (expert 0 of its own layer, weight 1). */
static fp4_status exchange_buffers(gpu_step *g) {
  const step_type *moe = step_moe_type(g->plan);
  const size_t row = (size_t)moe->hidden * 2, sent = (size_t)(g->bmax * moe->active), most = (size_t)a2a_max_rows(g, moe);
  fp4_status st;
  if ((st = cu(cudaMalloc(&g->send_rows, sent * row), "the exchange's rows")) ||
      (st = cu(cudaMalloc(&g->back_rows, sent * row), "the exchange's rows")) ||
      (st = cu(cudaMalloc(&g->recv_rows, most * row), "the exchange's rows")) ||
      (st = cu(cudaMalloc(&g->expert_rows, most * row), "the exchange's rows")) ||
      (st = cu(cudaMalloc(&g->shared_rows, (size_t)g->bmax * row), "the shared expert's rows")) ||
      (st = cu(cudaMalloc((void **)&g->shared_ids, (size_t)g->bmax * 4), "the shared expert's routing")) ||
      (st = cu(cudaMalloc((void **)&g->shared_w, (size_t)g->bmax * 4), "the shared expert's routing")) ||
      (st = cu(cudaMemset(g->shared_ids, 0, (size_t)g->bmax * 4), "the shared expert's routing")))
    return st;
  float *ones = malloc((size_t)g->bmax * sizeof *ones);
  if (!ones) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  for (int64_t i = 0; i < g->bmax; i++) ones[i] = 1.0f;
  st = cu(cudaMemcpy(g->shared_w, ones, (size_t)g->bmax * 4, cudaMemcpyHostToDevice), "the shared expert's routing");
  free(ones);
  return st;
}

/* The layers of a --moe-comm all-to-all MoE call: the routed experts' (no shared expert) and the
 * shared expert's as a layer of its own with one routed expert. */
static void a2a_layers(const gpu_step *g, const gpu_layer *L, fp4_moe_layer *routed, fp4_moe_layer *shared) {
  const float gs = 448.0f * 6.0f / 8.0f;
  const float *act = g->o->w4a4 ? g->scalars + 1 : NULL;
  const fp4_moe_mode mode = g->o->w4a4 ? FP4_MOE_W4A4 : FP4_MOE_W4A16;
  *routed = (fp4_moe_layer){mode, {L->gu, L->dn, gs, gs, act}, NULL};
  *shared = (fp4_moe_layer){mode, {L->sgu, L->sdn, gs, gs, act}, NULL};
}

/* The MoE workspace a call of B tokens per rank needs under options op: the layer's, or with
 * --moe-comm all-to-all the larger of the routed experts' (on the most rows a rank receives, top-1)
 * and the shared expert's (on the B tokens). */
static fp4_status moe_workspace_size(const gpu_step *g, const step_type *moe, int64_t B, const fp4_options *op,
                                     size_t *bytes) {
  *bytes = 0;
  if (!g->o->a2a) {
    fp4_moe_layer layer;
    fp4_moe_experts shared;
    fp4_moe_routing rt;
    const step_call c = {(int)(moe - g->plan->types), 0, g->x0, g->plan->hidden, g->act[0]};
    moe_args(g, &c, B, &layer, &shared, &rt);
    return fp4_moe_workspace_size(&layer, B, moe->top_k, op, bytes);
  }
  fp4_moe_layer routed, shared;
  a2a_layers(g, &g->L[0], &routed, &shared);
  fp4_status st = fp4_moe_workspace_size(&routed, a2a_max_rows(g, moe), 1, op, bytes);
  size_t sb = 0;
  if (!st && moe->shared_inter) st = fp4_moe_workspace_size(&shared, B, 1, op, &sb);
  if (sb > *bytes) *bytes = sb;
  return st;
}

/* The dispatch of layer l: the rows of the rank's tokens (in, ld elements apart) gathered by
 * destination into send_rows (gather 0: left as they are), then the all-to-all into recv_rows. */
static fp4_status a2a_dispatch(const gpu_step *g, int64_t l, const void *in, int64_t ld, int gather) {
  const step_exchange *x = &g->X[l];
  const int64_t H = g->plan->hidden;
  fp4_status st = gather ? fp4_exchange_gather_bf16_queue(g->send_rows, in, ld, g->xd[l].send_token, x->sent, H, g->s) : FP4_OK;
  return st ? st : step_comm_alltoallv_bf16(g->comm, g->rank, g->send_rows, x->send_count, g->recv_rows, x->recv_count, H, g->s);
}

/* The combine of layer l: the experts' rows back to their tokens' ranks (into back_rows), then out =
 * base (NULL: 0) + the sum of each of the B tokens' returned rows (out NULL: the all-to-all only). */
static fp4_status a2a_combine(const gpu_step *g, int64_t l, void *out, const void *base, int64_t B) {
  const step_exchange *x = &g->X[l];
  const int64_t H = g->plan->hidden;
  fp4_status st = step_comm_alltoallv_bf16(g->comm, g->rank, g->expert_rows, x->recv_count, g->back_rows, x->send_count, H, g->s);
  if (st || !out) return st;
  return fp4_exchange_sum_bf16_queue(out, base, g->back_rows, g->xd[l].sum_rows, B, x->top_k, H, g->s);
}

/* A MoE call with --moe-comm all-to-all: the shared expert on the rank's B tokens; the dispatch
 * (gather by destination, all-to-all); the routed experts on the rows received, each row top-1 with
 * its routing weight; the all-to-all back; out = shared + the sum of each token's returned rows. */
static fp4_status issue_moe_a2a(const gpu_step *g, const step_call *c, int64_t B, fp4_options *o) {
  const step_type *ty = &g->plan->types[c->type];
  const step_exchange *x = &g->X[c->layer];
  const exchange_dev *d = &g->xd[c->layer];
  const int64_t H = ty->hidden;
  fp4_moe_layer routed, shared;
  a2a_layers(g, &g->L[c->layer], &routed, &shared);
  fp4_run_info *info = o->info; /* what ran: the routed experts' call, or the shared one's when no row came */
  fp4_status st = FP4_OK;
  if (ty->shared_inter) {
    fp4_moe_routing rt = {g->shared_ids, B, 1, {g->shared_w, B, 1, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, NULL};
    fp4_matrix hid = {(void *)c->in, B, H, c->in_ld == H ? 0 : c->in_ld, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_matrix out = {g->shared_rows, B, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    o->info = x->received ? NULL : info;
    st = fp4_moe_forward(g->ctx, &shared, &hid, &rt, g->moe_ws, g->moe_ws_bytes, &out, o);
  }
  if (!st) st = a2a_dispatch(g, c->layer, c->in, c->in_ld, 1);
  if (!st && x->received) {
    fp4_moe_routing rt = {d->recv_expert, x->received, 1,
                          {d->recv_weight, x->received, 1, 0, FP4_DTYPE_F32, FP4_MEMORY_DEVICE}, NULL};
    fp4_matrix hid = {g->recv_rows, x->received, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    fp4_matrix out = {g->expert_rows, x->received, H, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
    o->info = info;
    st = fp4_moe_forward(g->ctx, &routed, &hid, &rt, g->moe_ws, g->moe_ws_bytes, &out, o);
  }
  if (!st) st = a2a_combine(g, c->layer, c->out, ty->shared_inter ? g->shared_rows : NULL, B);
  o->info = info;
  return st;
}

/* One call of the step on stream s. */
static fp4_status issue_call(const gpu_step *g, const step_call *c, int64_t B, int pdl, fp4_run_info *info) {
  const step_type *ty = &g->plan->types[c->type];
  fp4_options o = {.backend = "cuda", .enable_pdl = pdl, .stream = g->s, .info = info};
  if (c->type == g->config_type) o.config = g->config_name; /* --sweep */
  fp4_matrix out = {c->out, B, step_out_width(ty), 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  if (ty->kind == STEP_MOE && g->o->a2a) {
    o.alpha_device = g->scalars;
    return issue_moe_a2a(g, c, B, &o);
  }
  if (ty->kind == STEP_MOE) {
    fp4_moe_layer layer;
    fp4_moe_experts shared;
    fp4_moe_routing rt;
    moe_args(g, c, B, &layer, &shared, &rt);
    fp4_matrix hid = {(void *)c->in, B, ty->hidden, c->in_ld == ty->hidden ? 0 : c->in_ld, FP4_DTYPE_BF16,
                      FP4_MEMORY_DEVICE};
    o.alpha_device = g->scalars;
    return fp4_moe_forward(g->ctx, &layer, &hid, &rt, g->moe_ws, g->moe_ws_bytes, &out, &o);
  }
  fp4_matrix a = {(void *)c->in, B, ty->k, c->in_ld == ty->k ? 0 : c->in_ld, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
  const fp4_qmatrix *w = &g->L[c->layer].w[c->type];
  if (!g->o->w4a4) {
    o.alpha_device = g->scalars + 4 + c->type;
    return fp4_mm_w4a16(g->ctx, &a, w, 1.0f, &out, &o);
  }
  fp4_qmatrix xq = {g->xq, g->xq_scales, B, ty->k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
  fp4_options q = o;
  q.global_scale_device = g->scalars + 1;
  q.info = NULL;
  q.config = NULL; /* a swept config names the GEMM's kernel, not the quantize's */
  fp4_status st = fp4_quantize(g->ctx, &a, 1.0f, &xq, &q);
  if (st) return st;
  o.alpha_device = g->scalars + 4 + STEP_MAX_TYPES + c->type;
  return fp4_mm(g->ctx, &xq, w, 1.0f, &out, &o);
}

/* One call and, where its output is summed over the ranks, the all-reduce after it. */
static fp4_status issue(const gpu_step *g, const step_call *c, int64_t B, int pdl, fp4_run_info *info) {
  fp4_status st = issue_call(g, c, B, pdl, info);
  const step_type *ty = &g->plan->types[c->type];
  if (!st && reduced(g, ty)) st = step_comm_allreduce_bf16(g->comm, g->rank, c->out, (size_t)(B * step_out_width(ty)), g->s);
  return st;
}

/* Workspace the dense calls of B tokens need (the context's), for both PDL settings. */
static fp4_status reserve(gpu_step *g, const step_call *calls, int ncalls, int64_t B) {
  size_t most = 0;
  for (int i = 0; i < ncalls && i < g->plan->ntypes; i++) {
    const step_call *c = &calls[i];
    const step_type *ty = &g->plan->types[c->type];
    if (ty->kind != STEP_DENSE) continue;
    /* the default config, then each --sweep config (one the problem refuses needs nothing: its
     * refusal is reported when it is timed) */
    for (int k = -1; k < g->o->nsweep; k++)
      for (int pdl = 0; pdl < 2; pdl++) {
        fp4_options o = {.backend = "cuda", .enable_pdl = pdl, .stream = g->s, .alpha_device = g->scalars + 4,
                         .config = k < 0 ? NULL : g->o->sweep[k]};
        fp4_matrix a = {(void *)c->in, B, ty->k, c->in_ld, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
        fp4_matrix out = {c->out, B, ty->n, 0, FP4_DTYPE_BF16, FP4_MEMORY_DEVICE};
        fp4_qmatrix xq = {g->xq, g->xq_scales, B, ty->k, FP4_FORMAT_NVFP4, FP4_LAYOUT_128X4, 1.0f, FP4_MEMORY_DEVICE};
        size_t bytes = 0;
        fp4_status st = g->o->w4a4 ? fp4_mm_workspace_size(g->ctx, &xq, &g->L[0].w[c->type], &out, &o, &bytes)
                                   : fp4_mm_w4a16_workspace_size(g->ctx, &a, &g->L[0].w[c->type], &out, &o, &bytes);
        if (st && k < 0) return st;
        if (!st && bytes > most) most = bytes;
      }
  }
  return most ? fp4_context_reserve_workspace(g->ctx, most) : FP4_OK;
}

enum { ONLY_ALL = -1, ONLY_COLLECTIVES = -2, ONLY_READS = -3 };

/* Appends [src, src + bytes) to a range list, joined to the last range where it continues it. */
static void add_range(const void **srcs, size_t *bytes, int *n, const void *src, size_t len) {
  if (*n > 0 && (const uint8_t *)srcs[*n - 1] + bytes[*n - 1] == (const uint8_t *)src) {
    bytes[*n - 1] += len;
    return;
  }
  srcs[*n] = src;
  bytes[(*n)++] = len;
}

/* Codes and scales of expert e of w, as ranges. */
static void add_expert(const void **srcs, size_t *bytes, int *n, const fp4_grouped_qmatrix *w, int64_t e, int scales) {
  size_t sb = 0;
  fp4_scales_size(w->format, w->layout, w->rows, w->cols, &sb);
  const size_t cb = (size_t)(w->rows * w->cols / 2);
  if (scales) add_range(srcs, bytes, n, (const uint8_t *)w->scales + (size_t)e * sb, sb);
  else add_range(srcs, bytes, n, (const uint8_t *)w->data + (size_t)e * cb, cb);
}

/* The routed expert ids a MoE layer's call at B tokens runs on the rank: the first B x top_k of its
 * routing, or with --moe-comm all-to-all the local experts of the rows the rank receives. */
static const int32_t *routed_ids(const gpu_step *g, int64_t layer, int64_t B, int64_t *n) {
  if (g->o->a2a) {
    *n = g->X[layer].received;
    return g->X[layer].recv_expert;
  }
  *n = B * step_moe_type(g->plan)->top_k;
  return g->L[layer].h_ids;
}

/* The read-only chain's form of a MoE call at B tokens: one kernel reading the bytes the layer
 * touches (codes and scales of every routed expert its routing names on the rank, and the shared
 * expert's), adjacent experts as one range; a list longer than one launch takes several. */
static fp4_status queue_moe_reads(const gpu_step *g, const step_type *ty, int64_t layer, int64_t B) {
  const gpu_layer *L = &g->L[layer];
  const void *srcs[FP4_PEER_READ_MAX_RANGES];
  size_t bytes[FP4_PEER_READ_MAX_RANGES];
  int n = 0;
  char *seen = calloc((size_t)ty->experts, 1);
  if (!seen) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory for the read chain's expert list");
  int64_t nids = 0;
  const int32_t *ids = routed_ids(g, layer, B, &nids);
  for (int64_t i = 0; i < nids; i++) seen[ids[i]] = 1;
  fp4_status st = FP4_OK;
  const fp4_grouped_qmatrix *sets[4] = {&L->gu, &L->dn, &L->sgu, &L->sdn};
  for (int part = 0; part < 8 && !st; part++) { /* codes then scales of gate_up, down, shared gate_up, shared down */
    const fp4_grouped_qmatrix *w = sets[part / 2];
    if (part >= 4 && !ty->shared_inter) break;
    for (int64_t e = 0; e < w->experts && !st; e++) {
      if (part < 4 && !seen[e]) continue;
      if (n + 1 > FP4_PEER_READ_MAX_RANGES) { /* full: this launch, then a new list */
        st = fp4_peer_read_ranges_queue(srcs, bytes, n, g->sink, g->s);
        n = 0;
      }
      add_expert(srcs, bytes, &n, w, e, part % 2);
    }
  }
  if (!st && n) st = fp4_peer_read_ranges_queue(srcs, bytes, n, g->sink, g->s);
  free(seen);
  return st;
}

typedef struct timed_step {
  gpu_step *g;
  const step_call *calls;
  int ncalls, only; /* only: one type's calls, ONLY_ALL, ONLY_COLLECTIVES (the all-reduces alone) or
                       ONLY_READS (each dense call as one read of its weight bytes) */
  int64_t B;
  int pdl;
  cudaGraphExec_t exec;
} timed_step;

static fp4_status run_eager(void *user, int iteration) {
  (void)iteration;
  timed_step *t = user;
  for (int i = 0; i < t->ncalls; i++) {
    const step_call *c = &t->calls[i];
    const step_type *ty = &t->g->plan->types[c->type];
    if (t->only == ONLY_COLLECTIVES && t->g->o->a2a) { /* the two all-to-alls of each MoE call */
      if (ty->kind != STEP_MOE) continue;
      fp4_status st = a2a_dispatch(t->g, c->layer, NULL, 0, 0);
      if (!st) st = a2a_combine(t->g, c->layer, NULL, NULL, t->B);
      if (st) return st;
      continue;
    }
    if (t->only == ONLY_COLLECTIVES) {
      if (!reduced(t->g, ty)) continue;
      fp4_status st = step_comm_allreduce_bf16(t->g->comm, t->g->rank, c->out, (size_t)(t->B * step_out_width(ty)), t->g->s);
      if (st) return st;
      continue;
    }
    if (t->only == ONLY_READS && ty->kind == STEP_MOE) {
      fp4_status st = queue_moe_reads(t->g, ty, c->layer, t->B);
      if (st) return st;
      continue;
    }
    if (t->only == ONLY_READS) { /* codes and their scales lie back to back in the layer's slab */
      const fp4_qmatrix *w = &t->g->L[c->layer].w[c->type];
      size_t sb = 0;
      fp4_scales_size(w->format, w->layout, w->rows, w->cols, &sb);
      const size_t span = (size_t)((const uint8_t *)w->scales - (const uint8_t *)w->data) + sb;
      fp4_status st = fp4_peer_read_queue(w->data, span, t->g->sink, t->g->s);
      if (st) return st;
      continue;
    }
    if (t->only >= 0 && c->type != t->only) continue;
    fp4_status st = issue(t->g, c, t->B, t->pdl, NULL);
    if (st) return st;
  }
  return FP4_OK;
}

static fp4_status run_graph(void *user, int iteration) {
  (void)iteration;
  timed_step *t = user;
  return cu(cudaGraphLaunch(t->exec, t->g->s), "cudaGraphLaunch");
}

/* Captures the calls of t on its stream into t->exec; nodes receives the graph's node count. */
static fp4_status capture(timed_step *t, double *nodes) {
  cudaGraph_t graph = NULL;
  fp4_status st = cu(cudaStreamBeginCapture(t->g->s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  if (st) return st;
  const fp4_status call = run_eager(t, 0);
  char why[320];
  snprintf(why, sizeof why, "%s", call ? fp4_last_error() : "");
  const cudaError_t end = cudaStreamEndCapture(t->g->s, &graph);
  if (call) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return fp4_set_error(call, "under capture: %s", why);
  }
  if ((st = cu(end, "cudaStreamEndCapture"))) return st;
  size_t n = 0;
  if (nodes && cudaGraphGetNodes(graph, NULL, &n) == cudaSuccess) *nodes = (double)n;
  st = cu(cudaGraphInstantiate(&t->exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  if (!st) st = cu(cudaGraphUpload(t->exec, t->g->s), "cudaGraphUpload");
  return st;
}

static fp4_status time_graph(timed_step *t, int rounds, double *nodes, bv *us) {
  t->exec = NULL;
  fp4_status st = capture(t, nodes);
  fp4_timing tm;
  if (!st) st = fp4_time(t->g->ctx, t->g->s, run_graph, t, 3, rounds, &tm);
  if (!st) *us = (bv){1, tm.median_us};
  if (t->exec) cudaGraphExecDestroy(t->exec);
  t->exec = NULL;
  return st;
}

/* The step's output NaN-filled (bf16 0xFFFF) before a way runs, so that a way whose kernels leave
 * it unwritten can neither pass for the way before it nor for finite. */
static fp4_status nan_fill(const gpu_step *g, const void *last, int64_t B) {
  return cu(cudaMemsetAsync((void *)last, 0xFF, (size_t)(B * g->plan->hidden) * 2, g->s), "NaN-filling the output");
}

/* The step's output into host (n bytes). */
static fp4_status fetch(const gpu_step *g, const void *last, int64_t B, uint8_t *host) {
  fp4_status st = cu(cudaStreamSynchronize(g->s), "cudaStreamSynchronize");
  return st ? st : cu(cudaMemcpy(host, last, (size_t)(B * g->plan->hidden) * 2, cudaMemcpyDeviceToHost), "reading the output");
}

static void note_reason(step_point *pt, const char *what) {
  size_t len = strlen(pt->reason);
  snprintf(pt->reason + len, sizeof pt->reason - len, "%s%s: %s", len ? "; " : "", what, fp4_last_error());
  if (!strcmp(pt->status, "ok")) pt->status = "error";
}

static void say(const char *model, int64_t B, const char *what) {
  fprintf(stderr, "[step %s B=%lld] %s\n", model, (long long)B, what);
  fflush(stderr);
}

/* A timing way of run_point: skipped (with the reason) once any rank has failed, so every rank
 * issues the same collectives; ok is this rank's state, and the agreed state is returned. */
static int way_ok(const gpu_step *g, step_point *pt, int ok) {
  const int all = ranks_ok(g, ok);
  if (ok && !all) {
    size_t len = strlen(pt->reason);
    snprintf(pt->reason + len, sizeof pt->reason - len, "%sanother rank failed", len ? "; " : "");
    if (!strcmp(pt->status, "ok")) pt->status = "error";
  }
  return all;
}

static void run_point(gpu_step *g, int64_t B, step_point *pt) {
  const step_plan *p = g->plan;
  memset(pt, 0, sizeof *pt);
  pt->batch = B;
  pt->status = "ok";
  const int ncalls = (int)(g->layers * p->ntypes);
  step_call *calls = calloc((size_t)ncalls, sizeof *calls);
  const size_t out_bytes = (size_t)(B * p->hidden) * 2;
  uint8_t *outs[3] = {malloc(out_bytes), malloc(out_bytes), malloc(out_bytes)};
  int ok = 1;
  if (!calls || !outs[0] || !outs[1] || !outs[2]) {
    fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
    note_reason(pt, "setting up");
    ok = 0;
  }
  void *last = NULL;
  if (ok && g->o->a2a && exchange_prepare(g, B)) {
    note_reason(pt, "planning the exchange");
    ok = 0;
  }
  if (ok) {
    pt->calls = make_calls(g, calls, &last);
    const step_type *moe = step_moe_type(p);
    int64_t touched_sum = 0;
    for (int64_t l = 0; l < g->layers; l++) {
      int64_t nids = 0;
      const int32_t *ids = moe ? routed_ids(g, l, B, &nids) : NULL;
      const int64_t touched = moe ? step_touched(ids, nids, moe->experts) : 0;
      touched_sum += touched;
      pt->bytes += (double)step_layer_bytes(p, touched);
      for (int t = 0; t < p->ntypes; t++) {
        const step_type *ty = &p->types[t];
        pt->types[t].calls++;
        pt->types[t].bytes += (double)(ty->kind == STEP_MOE ? ty->shared_bytes + touched * ty->weight_bytes : ty->weight_bytes);
        if (reduced(g, ty)) {
          pt->coll_count++;
          pt->coll_bytes += (double)(B * step_out_width(ty)) * 2.0;
        }
        if (g->o->a2a && ty->kind == STEP_MOE) { /* dispatch and combine: the rows that leave the rank */
          pt->coll_count += 2;
          pt->coll_bytes +=
              (double)(step_exchange_rows_out(&g->X[l]) + step_exchange_rows_back(&g->X[l])) * (double)ty->hidden * 2.0;
        }
      }
    }
    pt->coll_sent_bytes = g->o->a2a ? pt->coll_bytes : step_comm_ring_bytes(pt->coll_bytes, g->nranks);
    pt->touched_mean = moe ? (double)touched_sum / (double)g->layers : 0.0;
    if (reserve(g, calls, pt->calls, B)) {
      note_reason(pt, "reserving the workspace");
      ok = 0;
    }
  }
  /* What ran: the first call of every type, eagerly, with and without PDL. */
  if (way_ok(g, pt, ok))
    for (int pdl = 0; pdl < 2 && ok; pdl++)
      for (int t = 0; t < p->ntypes && ok; t++) {
        fp4_run_info info;
        memset(&info, 0, sizeof info);
        if (issue(g, &calls[t], B, pdl, &info)) {
          note_reason(pt, "a first call");
          ok = 0;
          break;
        }
        type_result *y = &pt->types[t];
        if (pdl) {
          size_t len = strlen(y->ran);
          snprintf(y->ran + len, sizeof y->ran - len, ", pdl %s", info.pdl ? "on" : "OFF");
          if (!info.pdl) snprintf(y->note, sizeof y->note, "PDL asked, not used: %s", info.note);
        } else {
          snprintf(y->ran, sizeof y->ran, "%s:%s", info.backend, info.config[0] ? info.config : "default");
        }
      }
  else ok = 0;
  timed_step ts = {g, calls, pt->calls, ONLY_ALL, B, 0, NULL};
  fp4_timing tm;
  int have[3] = {0, 0, 0};
  if (way_ok(g, pt, ok)) {
    say(p->model, B, "separate launches");
    if (nan_fill(g, last, B) || fp4_time(g->ctx, g->s, run_eager, &ts, 2, g->o->rounds, &tm))
      note_reason(pt, "separate launches");
    else pt->eager_us = (bv){1, tm.median_us};
    if (pt->eager_us.ok) have[0] = !fetch(g, last, B, outs[0]);
  } else ok = 0;
  if (way_ok(g, pt, ok)) {
    say(p->model, B, "CUDA graph");
    if (nan_fill(g, last, B) || time_graph(&ts, g->o->rounds, &pt->graph_nodes, &pt->graph_us))
      note_reason(pt, "CUDA graph");
    else have[1] = !fetch(g, last, B, outs[1]);
  } else ok = 0;
  if (way_ok(g, pt, ok)) {
    say(p->model, B, "CUDA graph with PDL");
    ts.pdl = 1;
    if (nan_fill(g, last, B) || time_graph(&ts, g->o->rounds, NULL, &pt->pdl_us))
      note_reason(pt, "CUDA graph with PDL");
    else have[2] = !fetch(g, last, B, outs[2]);
  } else ok = 0;
  /* The three ways compute the same step: their outputs must agree bit for bit. */
  for (int i = 1; i < 3; i++)
    if (have[0] && have[i] && memcmp(outs[0], outs[i], out_bytes)) {
      size_t len = strlen(pt->reason);
      snprintf(pt->reason + len, sizeof pt->reason - len, "%sthe %s output differs from the separate launches'",
               len ? "; " : "", i == 1 ? "CUDA graph" : "CUDA graph with PDL");
      pt->status = "mismatch";
    }
  if (have[0]) {
    const int64_t bad = step_bf16_nonfinite(outs[0], (int64_t)(out_bytes / 2));
    if (bad) {
      size_t len = strlen(pt->reason);
      snprintf(pt->reason + len, sizeof pt->reason - len, "%s%lld of %lld outputs not finite", len ? "; " : "",
               (long long)bad, (long long)(out_bytes / 2));
      if (!strcmp(pt->status, "ok")) pt->status = "not finite"; /* the times are of a step that computed garbage */
    }
  }
  /* Each type's share: a graph (PDL) of its calls alone (with their collectives). */
  for (int t = 0; t < p->ntypes; t++) {
    if (p->ntypes == 1) {
      pt->types[t].us = pt->pdl_us;
      continue;
    }
    if (!way_ok(g, pt, ok)) {
      ok = 0;
      continue;
    }
    timed_step one = {g, calls, pt->calls, t, B, 1, NULL};
    if (time_graph(&one, g->o->rounds, NULL, &pt->types[t].us))
      snprintf(pt->types[t].note, sizeof pt->types[t].note, "graph of this type alone: %s", fp4_last_error());
  }
  /* --sweep: each type's graph again with each named config (a refusal is that config's note). */
  for (int t = 0; t < p->ntypes && g->o->nsweep; t++) {
    if (!way_ok(g, pt, ok)) continue;
    for (int k = 0; k < g->o->nsweep; k++) {
      g->config_type = t;
      g->config_name = g->o->sweep[k];
      timed_step one = {g, calls, pt->calls, t, B, 1, NULL};
      if (time_graph(&one, g->o->rounds, NULL, &pt->types[t].sweep_us[k]))
        snprintf(pt->types[t].sweep_note[k], sizeof pt->types[t].sweep_note[k], "%s", fp4_last_error());
      g->config_type = -1;
      g->config_name = NULL;
    }
  }
  /* The bound of one kernel per layer: the same calls as plain reads of their weight bytes in a graph
   * (no PDL: the read kernel has nothing to wait for). */
  if (way_ok(g, pt, ok)) {
    timed_step reads = {g, calls, pt->calls, ONLY_READS, B, 0, NULL};
    fp4_status st = cu(cudaMalloc(&g->sink, 4096 * sizeof(uint64_t)), "the read chain's sink");
    if (!st) st = time_graph(&reads, g->o->rounds, NULL, &pt->reads_us);
    if (st) snprintf(pt->reads_note, sizeof pt->reads_note, "%s", fp4_last_error());
    cudaFree(g->sink);
    g->sink = NULL;
  }
  /* --trace: one replay of the graph with PDL under CUPTI, after every timing (the trace's own
   * overhead touches no number above). */
  if (g->o->trace && way_ok(g, pt, ok)) {
    timed_step tr = {g, calls, pt->calls, ONLY_ALL, B, 1, NULL};
    step_trace_kernel *k = NULL;
    int n = 0;
    fp4_status st = capture(&tr, NULL);
    if (st) snprintf(pt->trace_note, sizeof pt->trace_note, "%s", fp4_last_error());
    else if (step_trace_graph(tr.exec, g->s, &k, &n, pt->trace_note, sizeof pt->trace_note) == FP4_OK) {
      step_trace_summarize(k, n, g->layers, &pt->trace);
      pt->traced = 1;
    }
    free(k);
    if (tr.exec) cudaGraphExecDestroy(tr.exec);
  }
  /* --gpus: the collectives of the step alone, a graph of only them. */
  if (g->comm && way_ok(g, pt, ok) && pt->coll_count) {
    timed_step coll = {g, calls, pt->calls, ONLY_COLLECTIVES, B, 0, NULL};
    if (time_graph(&coll, g->o->rounds, NULL, &pt->coll_us)) note_reason(pt, "the collectives alone");
  }
  free(calls);
  for (int i = 0; i < 3; i++) free(outs[i]);
}

/* ---- the BF16 cuBLAS step --------------------------------------------------------------------- */

typedef struct bf16_layer {
  void *slab;
  void *w[STEP_MAX_TYPES];
  int64_t nexp;      /* routed experts held: those the largest batch touches */
  int32_t *exp_ids;  /* [nexp] */
  void **egu, **edn; /* [nexp] */
  void *sgu, *sdn;
} bf16_layer;

typedef struct bf16_step {
  gpu_step *g;
  cublasHandle_t h;
  bf16_layer *L;
  void *t1, *t2, *ws;
  int64_t B;
  cudaGraphExec_t exec;
} bf16_step;

static fp4_status blas(cublasStatus_t s, const char *what) {
  return s == CUBLAS_STATUS_SUCCESS ? FP4_OK
                                    : fp4_set_error(FP4_ERR_CUDA, "%s: %s", what, cublasGetStatusString(s));
}

/* Row-major y[m, n] (ld ldy) = x[m, k] (ld ldx) * w[n, k]^T + beta * y. */
static fp4_status gemm(bf16_step *b, int64_t m, int64_t n, int64_t k, const void *w, const void *x, int64_t ldx, void *y,
                       int64_t ldy, float beta) {
  const float one = 1.0f;
  return blas(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, w, CUDA_R_16BF, (int)k, x,
                           CUDA_R_16BF, (int)ldx, &beta, y, CUDA_R_16BF, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
}

/* The distinct experts of the largest batch's routing of a layer on the rank, ascending (with
 * --moe-comm all-to-all, the exchange held must be the largest batch's). */
static int64_t experts_of(const gpu_step *g, int64_t layer, int64_t E, int32_t *out) {
  unsigned char *seen = calloc((size_t)E, 1);
  if (!seen) return -1;
  int64_t n = 0;
  const int32_t *ids = routed_ids(g, layer, g->bmax, &n);
  for (int64_t i = 0; i < n; i++) seen[ids[i]] = 1;
  int64_t c = 0;
  for (int64_t e = 0; e < E; e++)
    if (seen[e]) out[c++] = (int32_t)e;
  free(seen);
  return c;
}

static size_t bf16_layer_bytes(const step_plan *p, int64_t nexp) {
  size_t b = 0;
  for (int t = 0; t < p->ntypes; t++) {
    const step_type *ty = &p->types[t];
    if (ty->kind == STEP_DENSE) b += al256((size_t)(ty->n * ty->k) * 2);
    else
      b += (size_t)nexp * (al256((size_t)(2 * ty->inter * ty->hidden) * 2) + al256((size_t)(ty->hidden * ty->inter) * 2)) +
           al256((size_t)(2 * ty->shared_inter * ty->hidden) * 2) + al256((size_t)(ty->hidden * ty->shared_inter) * 2);
  }
  return b;
}

static fp4_status bf16_fill(bf16_step *b, void *dst, size_t elems, uint64_t tag) {
  return fill(dst, elems * 2, b->g->pool_bf16, POOL_BF16, tag, b->g->s);
}

static fp4_status bf16_build(bf16_step *b, const step_type *moe) {
  gpu_step *g = b->g;
  const step_plan *p = g->plan;
  fp4_status st = FP4_OK;
  for (int64_t l = 0; l < g->layers && !st; l++) {
    bf16_layer *L = &b->L[l];
    if (moe) {
      L->exp_ids = malloc((size_t)moe->experts * sizeof *L->exp_ids);
      L->egu = calloc((size_t)moe->experts, sizeof *L->egu);
      L->edn = calloc((size_t)moe->experts, sizeof *L->edn);
      if (!L->exp_ids || !L->egu || !L->edn) return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
      L->nexp = experts_of(g, l, moe->experts, L->exp_ids);
    }
    if ((st = cu(cudaMalloc(&L->slab, bf16_layer_bytes(p, L->nexp)), "a layer's BF16 weights"))) return st;
    uint8_t *c = L->slab;
    for (int t = 0; t < p->ntypes && !st; t++) {
      const step_type *ty = &p->types[t];
      const uint64_t tag = (uint64_t)l * 7777777ull + (uint64_t)t;
      if (ty->kind == STEP_DENSE) {
        L->w[t] = carve(&c, (size_t)(ty->n * ty->k) * 2);
        st = bf16_fill(b, L->w[t], (size_t)(ty->n * ty->k), tag);
        continue;
      }
      const size_t gu = (size_t)(2 * ty->inter * ty->hidden), dn = (size_t)(ty->hidden * ty->inter);
      for (int64_t e = 0; e < L->nexp && !st; e++) {
        L->egu[e] = carve(&c, gu * 2);
        L->edn[e] = carve(&c, dn * 2);
        st = bf16_fill(b, L->egu[e], gu, tag + 100 * (uint64_t)e);
        if (!st) st = bf16_fill(b, L->edn[e], dn, tag + 100 * (uint64_t)e + 1);
      }
      if (ty->shared_inter && !st) {
        L->sgu = carve(&c, (size_t)(2 * ty->shared_inter * ty->hidden) * 2);
        L->sdn = carve(&c, (size_t)(ty->hidden * ty->shared_inter) * 2);
        st = bf16_fill(b, L->sgu, (size_t)(2 * ty->shared_inter * ty->hidden), tag + 7);
        if (!st) st = bf16_fill(b, L->sdn, (size_t)(ty->hidden * ty->shared_inter), tag + 8);
      }
    }
  }
  return st;
}

/* The BF16 MoE layer of --moe-comm all-to-all: the shared expert's two GEMMs on the rank's tokens,
 * the same dispatch as the FP4 step, each local expert's two GEMMs on as many received rows as
 * name it (rows in place, as if sorted by expert: no permute or SiLU, a lower bound as below), the
 * all-to-all back and the same sum per token. rows: scratch, a count per expert. */
static fp4_status bf16_moe_a2a(bf16_step *b, int64_t l, const step_type *ty, const void *cur, int64_t ld, void *out,
                               int64_t *rows) {
  gpu_step *g = b->g;
  const bf16_layer *L = &b->L[l];
  const step_exchange *x = &g->X[l];
  const int64_t H = ty->hidden, I = ty->inter, S = ty->shared_inter;
  const size_t row = (size_t)H * 2;
  fp4_status st = FP4_OK;
  if (S) {
    st = gemm(b, b->B, 2 * S, H, L->sgu, cur, ld, b->t1, 2 * S, 0.0f);
    if (!st) st = gemm(b, b->B, H, S, L->sdn, b->t1, 2 * S, g->shared_rows, H, 0.0f);
  }
  if (!st) st = a2a_dispatch(g, l, cur, ld, 1);
  memset(rows, 0, (size_t)ty->experts * sizeof *rows);
  for (int64_t i = 0; !st && i < x->received; i++) rows[x->recv_expert[i]]++;
  int64_t at = 0;
  for (int64_t e = 0; e < L->nexp && !st; e++) {
    const int64_t r = rows[L->exp_ids[e]];
    if (!r) continue;
    st = gemm(b, r, 2 * I, H, L->egu[e], (const uint8_t *)g->recv_rows + (size_t)at * row, H, b->t2, 2 * I, 0.0f);
    if (!st) st = gemm(b, r, H, I, L->edn[e], b->t2, 2 * I, (uint8_t *)g->expert_rows + (size_t)at * row, H, 0.0f);
    at += r;
  }
  if (!st) st = a2a_combine(g, l, out, S ? g->shared_rows : NULL, b->B);
  return st;
}

/* One BF16 step: dense linears chained as the FP4 step; a MoE layer as the shared expert's two GEMMs
 * writing the output, then each routed expert the first B tokens touch: gate_up on its row count of
 * the input and down accumulated into the output (no permute, SiLU or combine kernels: a lower bound
 * on a cuBLAS MoE layer). */
static fp4_status bf16_issue(void *user, int iteration) {
  (void)iteration;
  bf16_step *b = user;
  gpu_step *g = b->g;
  const step_plan *p = g->plan;
  const void *cur = g->x0;
  int64_t ld = p->hidden;
  int ping = 0;
  fp4_status st = FP4_OK;
  int64_t *rows = NULL;
  const step_type *moe = step_moe_type(p);
  if (moe && !(rows = calloc((size_t)moe->experts, sizeof *rows)))
    return fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  for (int64_t l = 0; l < g->layers && !st; l++) {
    const bf16_layer *L = &b->L[l];
    for (int t = 0; t < p->ntypes && !st; t++) {
      const step_type *ty = &p->types[t];
      void *out = g->act[ping];
      if (ty->kind == STEP_DENSE) {
        st = gemm(b, b->B, ty->n, ty->k, L->w[t], cur, ld, out, ty->n, 0.0f);
      } else if (g->o->a2a) {
        st = bf16_moe_a2a(b, l, ty, cur, ld, out, rows);
      } else {
        const int64_t H = ty->hidden, I = ty->inter, S = ty->shared_inter;
        float beta = 0.0f;
        if (S) {
          st = gemm(b, b->B, 2 * S, H, L->sgu, cur, ld, b->t1, 2 * S, 0.0f);
          if (!st) st = gemm(b, b->B, H, S, L->sdn, b->t1, 2 * S, out, H, 0.0f);
          beta = 1.0f;
        }
        memset(rows, 0, (size_t)ty->experts * sizeof *rows);
        for (int64_t i = 0; i < b->B * ty->top_k; i++) rows[g->L[l].h_ids[i]]++;
        for (int64_t e = 0; e < L->nexp && !st; e++) {
          const int64_t r = rows[L->exp_ids[e]];
          if (!r) continue;
          st = gemm(b, r, 2 * I, H, L->egu[e], cur, ld, b->t2, 2 * I, 0.0f);
          if (!st) st = gemm(b, r, H, I, L->edn[e], b->t2, 2 * I, out, H, beta);
          beta = 1.0f;
        }
      }
      if (!st && reduced(g, ty)) st = step_comm_allreduce_bf16(g->comm, g->rank, out, (size_t)(b->B * step_out_width(ty)), g->s);
      cur = out;
      ld = step_out_width(ty);
      ping ^= 1;
    }
  }
  free(rows);
  return st;
}

static fp4_status bf16_graph_launch(void *user, int iteration) {
  (void)iteration;
  bf16_step *b = user;
  return cu(cudaGraphLaunch(b->exec, b->g->s), "cudaGraphLaunch (BF16)");
}

static void bf16_free(bf16_step *b) {
  if (b->L)
    for (int64_t l = 0; l < b->g->layers; l++) {
      if (b->L[l].slab) cudaFree(b->L[l].slab);
      free(b->L[l].exp_ids);
      free(b->L[l].egu);
      free(b->L[l].edn);
    }
  free(b->L);
  if (b->h) cublasDestroy(b->h);
  cudaFree(b->t1);
  cudaFree(b->t2);
  cudaFree(b->ws);
  cudaFree(b->g->pool_bf16);
  b->g->pool_bf16 = NULL;
}

/* The BF16 peer for every batch (after the FP4 weights are freed); notes say why not where it did not run. */
static void bf16_peer(gpu_step *g, step_report *r) {
  const step_plan *p = g->plan;
  const step_type *moe = step_moe_type(p);
  bf16_step b;
  memset(&b, 0, sizeof b);
  b.g = g;
  char why[200] = "";
  size_t need = 0;
  fp4_status st = g->o->a2a ? exchange_prepare(g, g->bmax) : FP4_OK; /* which experts the largest batch touches */
  if (st) snprintf(why, sizeof why, "%s", fp4_last_error());
  int32_t *tmp = moe && !st ? malloc((size_t)moe->experts * sizeof *tmp) : NULL;
  for (int64_t l = 0; l < g->layers; l++)
    need += bf16_layer_bytes(p, moe && tmp ? experts_of(g, l, moe->experts, tmp) : 0);
  free(tmp);
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const int fits = need + HEADROOM <= free_b;
  if (!ranks_ok(g, fits && !st)) { /* every rank runs the peer, or none: its collectives pair up */
    if (!st && fits) snprintf(why, sizeof why, "the BF16 weights do not fit on another rank's GPU, or its exchange failed");
    else if (!st)
      snprintf(why, sizeof why, "BF16 weights of the %lld layers built need %.1f GB; %.1f GB free (%.1f GB kept for the rest)",
               (long long)g->layers, (double)need / 1e9, (double)free_b / 1e9, (double)HEADROOM / 1e9);
    goto out;
  }
  /* The BF16 pool: values uniform in +-1/32 (cuBLAS time does not depend on them). */
  uint16_t *h = malloc(POOL_BF16);
  if (!h) {
    snprintf(why, sizeof why, "no host memory");
    goto out;
  }
  uint64_t z = g->o->seed + 99;
  for (size_t i = 0; i < POOL_BF16 / 2; i++) {
    z = step_mix64(z);
    h[i] = fp4_bf16_from_f32((float)((double)(z >> 11) * (1.0 / 9007199254740992.0) - 0.5) / 16.0f);
  }
  st = cu(cudaMalloc((void **)&g->pool_bf16, POOL_BF16), "the BF16 pool");
  if (!st) st = cu(cudaMemcpy(g->pool_bf16, h, POOL_BF16, cudaMemcpyHostToDevice), "copying the BF16 pool");
  free(h);
  int64_t t1 = 1, t2 = 1;
  if (moe) {
    t1 = g->bmax * 2 * (moe->shared_inter ? moe->shared_inter : 1);
    t2 = (g->o->a2a ? a2a_max_rows(g, moe) : g->bmax) * 2 * moe->inter;
  }
  const size_t wsb = 32u << 20;
  if (!st) st = cu(cudaMalloc(&b.t1, (size_t)t1 * 2), "BF16 scratch");
  if (!st) st = cu(cudaMalloc(&b.t2, (size_t)t2 * 2), "BF16 scratch");
  if (!st) st = cu(cudaMalloc(&b.ws, wsb), "cuBLAS workspace");
  if (!st && !(b.L = calloc((size_t)g->layers, sizeof *b.L))) st = fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  if (!st) st = blas(cublasCreate(&b.h), "cublasCreate");
  if (!st) st = blas(cublasSetStream(b.h, g->s), "cublasSetStream");
  if (!st) st = blas(cublasSetWorkspace(b.h, b.ws, wsb), "cublasSetWorkspace"); /* nothing allocated under capture */
  if (!st) st = bf16_build(&b, moe);
  if (!st) st = cu(cudaStreamSynchronize(g->s), "building the BF16 weights");
  if (!ranks_ok(g, !st)) {
    snprintf(why, sizeof why, "%s", st ? fp4_last_error() : "building the BF16 step failed on another rank");
    goto out;
  }
  for (int i = 0; i < r->npts; i++) {
    step_point *pt = &r->pts[i];
    b.B = pt->batch;
    say(p->model, b.B, "BF16 cuBLAS graph");
    cudaGraph_t graph = NULL;
    b.exec = NULL;
    st = g->o->a2a ? exchange_prepare(g, b.B) : FP4_OK;
    if (!st) st = cu(cudaStreamBeginCapture(g->s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture (BF16)");
    if (!st) {
      const fp4_status call = bf16_issue(&b, 0);
      const cudaError_t end = cudaStreamEndCapture(g->s, &graph);
      st = call ? call : cu(end, "cudaStreamEndCapture (BF16)");
    }
    if (!st) st = cu(cudaGraphInstantiate(&b.exec, graph, 0), "cudaGraphInstantiate (BF16)");
    if (graph) cudaGraphDestroy(graph);
    fp4_timing tm;
    if (!ranks_ok(g, !st) && !st) st = fp4_set_error(FP4_ERR_CUDA, "the BF16 graph failed on another rank");
    if (!st) st = fp4_time(g->ctx, g->s, bf16_graph_launch, &b, 3, g->o->rounds, &tm);
    if (!st) pt->bf16_us = (bv){1, tm.median_us};
    else snprintf(pt->bf16_note, sizeof pt->bf16_note, "%s", fp4_last_error());
    if (b.exec) cudaGraphExecDestroy(b.exec);
    b.exec = NULL;
  }
out:
  if (why[0])
    for (int i = 0; i < r->npts; i++) snprintf(r->pts[i].bf16_note, sizeof r->pts[i].bf16_note, "not run: %s", why);
  cudaStreamSynchronize(g->s);
  bf16_free(&b);
}

/* One rank's step on its GPU (--device, or --device + rank with --gpus): comm NULL for the
 * single-rank step. With comm, every rank's thread runs this at once; the ranks agree on the layers
 * built and on having set up, so all of them issue the same collectives or none. */
static int run_device(const step_opts *o, step_report *r, step_comms *comm, int rank, int nranks) {
  const step_plan *p = &r->plan;
  gpu_step g;
  memset(&g, 0, sizeof g);
  g.plan = p;
  g.o = o;
  g.comm = comm;
  g.rank = rank;
  g.nranks = nranks;
  g.config_type = -1;
  const int device = o->device + rank;
  for (int i = 0; i < o->nbatches; i++)
    if (o->batches[i] > g.bmax) g.bmax = o->batches[i];
  int rc = EXIT_ERROR;
  char reason[256];
  fp4_status st = fp4_context_create(&g.ctx, device);
  if (st) {
    fprintf(stderr, "fp4kit bench --step: no GPU: %s\n", fp4_last_error());
    if (!comm) return EXIT_ERROR;
  } else if (fp4_backend_available(g.ctx, "cuda", reason, sizeof reason)) {
    fprintf(stderr, "fp4kit bench --step: no GPU for the cuda backend: %s\n", reason);
    st = fp4_set_error(FP4_ERR_UNSUPPORTED, "device %d: %s", device, reason);
    if (!comm) {
      fp4_context_destroy(g.ctx);
      return EXIT_ERROR;
    }
  }
  int64_t want = o->layers ? o->layers : p->layers, fit = 0;
  size_t per_layer = 0, free_b = 0, total_b = 0;
  if (!st) {
    fp4_device_info_get(g.ctx, &r->dev);
    /* Same-run peers first, while the memory is free. */
    fp4_timing tm;
    double bps = 0;
    if (fp4_time_peer(g.ctx, FP4_PEER_READ, 1, 1024, 1 << 20, o->rounds, &tm, &bps) == FP4_OK) r->read_bps = (bv){1, bps};
    else snprintf(r->peer_note, sizeof r->peer_note, "read peer: %s", fp4_last_error());
    if (fp4_time_peer(g.ctx, FP4_PEER_COPY, 1, 1024, 1 << 20, o->rounds, &tm, &bps) == FP4_OK) r->copy_bps = (bv){1, bps};
    else {
      size_t len = strlen(r->peer_note);
      snprintf(r->peer_note + len, sizeof r->peer_note - len, "%scopy peer: %s", len ? "; " : "", fp4_last_error());
    }
    st = cu(cudaSetDevice(device), "cudaSetDevice");
    if (!st) st = cu(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!st) st = make_pools(&g);
    if (!st) st = make_buffers(&g);
    if (!st && o->a2a) st = exchange_buffers(&g);
    /* As many layers as fit, at most the model's (or --layers). */
    per_layer = layer_bytes_alloc(p, g.bmax);
    if (!st) st = cu(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    fit = free_b > HEADROOM ? (int64_t)((free_b - HEADROOM) / per_layer) : 0;
    if (want > p->layers) want = p->layers;
    g.layers = want < fit ? want : fit;
  }
  const int64_t mine = st ? 0 : g.layers;
  if (comm) g.layers = step_comm_agree_min(comm, mine); /* every rank builds as many as the fullest GPU allows */
  if (!st) {
    if (g.layers < mine)
      snprintf(r->layers_note, sizeof r->layers_note, "%lld of the %lld layers asked fit on every rank's GPU",
               (long long)g.layers, (long long)want);
    else if (g.layers < want)
      snprintf(r->layers_note, sizeof r->layers_note, "%lld of the %lld layers asked fit: %.2f GB each, %.1f GB free, %.1f GB kept",
               (long long)g.layers, (long long)want, (double)per_layer / 1e9, (double)free_b / 1e9, (double)HEADROOM / 1e9);
    else if (want < p->layers)
      snprintf(r->layers_note, sizeof r->layers_note, "--layers %lld", (long long)want);
    r->layers_built = g.layers;
    if (g.layers < 1)
      st = mine < 1 ? fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "not one layer (%.2f GB) fits in %.1f GB free",
                                    (double)per_layer / 1e9, (double)free_b / 1e9)
                    : fp4_set_error(FP4_ERR_CUDA, "another rank could not set up");
  }
  if (!st && !(g.L = calloc((size_t)g.layers, sizeof *g.L))) st = fp4_set_error(FP4_ERR_OUT_OF_MEMORY, "no host memory");
  if (!st && rank == 0) {
    fprintf(stderr, "[step %s] building %lld layers, %.2f GB of FP4 weights%s\n", p->model, (long long)g.layers,
            (double)per_layer * (double)g.layers / 1e9, comm ? " per rank" : "");
    fflush(stderr);
  }
  for (int64_t l = 0; l < g.layers && !st; l++) st = build_layer(&g, l, per_layer);
  const step_type *moe = step_moe_type(p);
  if (!st && moe) { /* the MoE workspace, for the largest batch, allocated ahead */
    size_t most = 0;
    for (int i = 0; i < o->nbatches && !st; i++)
      for (int k = -1; k < o->nsweep && !st; k++) /* the default, then each --sweep config it takes */
        for (int pdl = 0; pdl < 2 && !st; pdl++) {
          fp4_options op = {.backend = "cuda", .enable_pdl = pdl, .stream = g.s, .alpha_device = g.scalars,
                            .config = k < 0 ? NULL : o->sweep[k]};
          size_t bytes = 0;
          const fp4_status ws = moe_workspace_size(&g, moe, o->batches[i], &op, &bytes);
          if (k < 0) st = ws;
          if (!ws && bytes > most) most = bytes;
        }
    g.moe_ws_bytes = most;
    if (!st && most) st = cu(cudaMalloc(&g.moe_ws, most), "the MoE workspace");
  }
  if (!st) st = cu(cudaStreamSynchronize(g.s), "building the weights");
  if (!ranks_ok(&g, !st) && !st) st = fp4_set_error(FP4_ERR_CUDA, "another rank could not set up");
  if (st) goto fail;
  rc = EXIT_OK;
  for (int i = 0; i < o->nbatches; i++) {
    run_point(&g, o->batches[i], &r->pts[r->npts]);
    if (strcmp(r->pts[r->npts].status, "ok")) rc = EXIT_FAILED;
    r->npts++;
  }
  cudaStreamSynchronize(g.s);
  /* The BF16 peer runs on the same layers after the FP4 weights are gone (routing kept). */
  for (int64_t l = 0; l < g.layers; l++)
    if (g.L[l].slab) {
      cudaFree(g.L[l].slab);
      g.L[l].slab = NULL;
    }
  if (o->peers) bf16_peer(&g, r);
  else
    for (int i = 0; i < r->npts; i++) snprintf(r->pts[i].bf16_note, sizeof r->pts[i].bf16_note, "not run: --no-peers");
  goto out;
fail:
  fprintf(stderr, "fp4kit bench --step: %s%s (%s)\n", comm ? "a rank: " : "", fp4_status_str(st), fp4_last_error());
out:
  if (g.s) cudaStreamSynchronize(g.s);
  free_layers(&g);
  free(g.L);
  exchange_free(&g);
  void *bufs[] = {g.pool_codes, g.pool_scales, g.scalars,   g.x0,        g.act[0],    g.act[1],
                  g.xq,         g.xq_scales,  g.moe_ws,    g.send_rows, g.recv_rows, g.expert_rows,
                  g.back_rows,  g.shared_rows, g.shared_ids, g.shared_w};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
  if (g.s) cudaStreamDestroy(g.s);
  if (g.ctx) fp4_context_destroy(g.ctx);
  return rc;
}

/* ---- --gpus: one thread per rank ------------------------------------------------------------- */

typedef struct rank_job {
  const step_opts *o;
  step_report *r;
  step_comms *comm;
  int rank, nranks, rc;
} rank_job;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  j->rc = run_device(j->o, j->r, j->comm, j->rank, j->nranks);
  return NULL;
}

static bv bv_max(bv a, bv b) { return !a.ok ? a : !b.ok ? b : (bv){1, a.v > b.v ? a.v : b.v}; }

/* Rank 0's report with every time the slowest rank's (a way missing on any rank is missing) and
 * each rank's graph + PDL time kept. */
static void merge_ranks(step_report *r0, step_report *const *rs, int n) {
  for (int i = 0; i < r0->npts; i++) {
    step_point *pt = &r0->pts[i];
    for (int k = 0; k < n; k++) {
      const step_point *q = &rs[k]->pts[i];
      if (i >= rs[k]->npts) continue;
      pt->rank_pdl_us[k] = q->pdl_us;
      if (k == 0) continue;
      pt->eager_us = bv_max(pt->eager_us, q->eager_us);
      pt->graph_us = bv_max(pt->graph_us, q->graph_us);
      pt->pdl_us = bv_max(pt->pdl_us, q->pdl_us);
      pt->bf16_us = bv_max(pt->bf16_us, q->bf16_us);
      pt->coll_us = bv_max(pt->coll_us, q->coll_us);
      /* with --moe-comm all-to-all each rank reads and sends its own amount: the largest rank's */
      if (q->bytes > pt->bytes) pt->bytes = q->bytes;
      if (q->touched_mean > pt->touched_mean) pt->touched_mean = q->touched_mean;
      if (q->coll_bytes > pt->coll_bytes) pt->coll_bytes = q->coll_bytes;
      if (q->coll_sent_bytes > pt->coll_sent_bytes) pt->coll_sent_bytes = q->coll_sent_bytes;
      for (int t = 0; t < r0->plan.ntypes; t++)
        if (q->types[t].bytes > pt->types[t].bytes) pt->types[t].bytes = q->types[t].bytes;
      for (int t = 0; t < r0->plan.ntypes; t++) pt->types[t].us = bv_max(pt->types[t].us, q->types[t].us);
      if (strcmp(q->status, "ok") && !strcmp(pt->status, "ok")) {
        pt->status = q->status;
        snprintf(pt->reason, sizeof pt->reason, "rank %d: %.280s", k, q->reason);
      }
    }
  }
  for (int k = 1; k < n; k++) { /* the read ceiling of the slowest GPU */
    if (rs[k]->read_bps.ok && (!r0->read_bps.ok || rs[k]->read_bps.v < r0->read_bps.v)) r0->read_bps = rs[k]->read_bps;
    if (rs[k]->copy_bps.ok && (!r0->copy_bps.ok || rs[k]->copy_bps.v < r0->copy_bps.v)) r0->copy_bps = rs[k]->copy_bps;
  }
}

/* --gpus N: N communicators, N threads, the reports merged into r. */
static int run_ranks(const step_opts *o, step_report *r) {
  const int n = o->gpus;
  char why[256];
  r->gpus = n;
  r->nccl_version = step_comm_version(why, sizeof why);
  if (!r->nccl_version) {
    fprintf(stderr, "fp4kit bench --step: --gpus needs NCCL: %s\n", why);
    return EXIT_ERROR;
  }
  if (fp4_probe_device_count() < o->device + n) {
    fprintf(stderr, "fp4kit bench --step: --gpus %d from device %d needs %d GPUs; %d visible\n", n, o->device,
            o->device + n, fp4_probe_device_count());
    return EXIT_ERROR;
  }
  int devices[STEP_MAX_GPUS];
  for (int k = 0; k < n; k++) devices[k] = o->device + k;
  step_comms *comm = NULL;
  if (step_comms_create(n, devices, &comm)) {
    fprintf(stderr, "fp4kit bench --step: %s\n", fp4_last_error());
    return EXIT_ERROR;
  }
  step_report *rs[STEP_MAX_GPUS] = {r};
  rank_job jobs[STEP_MAX_GPUS];
  pthread_t th[STEP_MAX_GPUS];
  int rc = EXIT_OK, started = 0;
  for (int k = 1; k < n; k++) {
    if (!(rs[k] = calloc(1, sizeof *rs[k]))) {
      fprintf(stderr, "fp4kit bench --step: out of host memory\n");
      rc = EXIT_ERROR;
      break;
    }
    rs[k]->plan = r->plan;
    rs[k]->o = o;
  }
  for (int k = 0; k < n && rc == EXIT_OK; k++) {
    jobs[k] = (rank_job){o, rs[k], comm, k, n, EXIT_ERROR};
    if (pthread_create(&th[k], NULL, rank_main, &jobs[k])) {
      fprintf(stderr, "fp4kit bench --step: cannot start the thread of rank %d\n", k);
      rc = EXIT_ERROR; /* the started ranks wait for it in their first agreement: nothing left but to stop */
      exit(EXIT_ERROR);
    }
    started++;
  }
  for (int k = 0; k < started; k++) {
    pthread_join(th[k], NULL);
    if (jobs[k].rc > rc) rc = jobs[k].rc;
  }
  if (started == n) merge_ranks(r, rs, n);
  for (int k = 1; k < n; k++) free(rs[k]);
  step_comms_destroy(comm);
  return rc;
}
#endif /* FP4KIT_HAVE_CUDA */

/* ---------------------------------------------------------------------------------------------- */
/* The command                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

int bench_step_main(int argc, char **argv) {
  step_opts o;
  int help = 0, hinted = 0;
  int rc = parse_opts(argc, argv, &o, &help, &hinted);
  if (rc || help) {
    if (help) step_usage(stdout);
    else if (!hinted) fprintf(stderr, "(fp4kit bench --step --help lists the options)\n");
    return rc;
  }
  step_report *r = calloc(1, sizeof *r);
  if (!r) {
    fprintf(stderr, "fp4kit bench --step: out of host memory\n");
    return EXIT_ERROR;
  }
  r->o = &o;
  if (step_plan_make(o.model, o.tp, o.ep, &r->plan)) {
    fprintf(stderr, "fp4kit bench --step: %s\n", fp4_last_error());
    free(r);
    return EXIT_USAGE;
  }
  if (o.layers > r->plan.layers) { /* more than the model holds is no step of it */
    fprintf(stderr, "fp4kit bench --step: --layers %lld: %s has %lld layers\n", (long long)o.layers, o.model,
            (long long)r->plan.layers);
    free(r);
    return EXIT_USAGE;
  }
  const step_type *moe = step_moe_type(&r->plan);
  if (o.a2a && !moe) {
    fprintf(stderr, "fp4kit bench --step: --moe-comm all-to-all exchanges tokens around the experts, and %s has no MoE "
                    "layer\n", o.model);
    free(r);
    return EXIT_USAGE;
  }
  if (o.plan_only) {
    step_print_plan(stdout, &r->plan);
    if (o.a2a)
      printf("  --moe-comm all-to-all: each rank's tokens pick top-%lld of all %lld experts; a token sends a row to the "
             "rank of each, %lld rows per token, and gets as many back\n",
             (long long)moe->active, (long long)moe->experts * o.ep, (long long)moe->active);
    /* A dense layer's bytes do not depend on the batch or the routing; said rather than refused, as
     * the same --batch suits a MoE model's plan and every model's timed step. */
    if (!moe && o.routing_given)
      printf("  --batch and --seed change nothing here: a dense layer reads the same FP4 bytes at every batch\n");
    const int bad = step_print_plan_batches(stdout, &r->plan, &o);
    if (bad) fprintf(stderr, "fp4kit bench --step: %s\n", fp4_last_error());
    free(r);
    return bad ? EXIT_ERROR : EXIT_OK;
  }
  const char *const paths[3] = {o.json, o.csv, o.html};
  if ((rc = fp4cli_reports_writable("bench --step", 3, fp4cli_report_options, paths))) { /* a wrong path costs no run */
    free(r);
    return rc;
  }
#if FP4KIT_HAVE_CUDA
  if (fp4_probe_device_count() <= o.device) {
    fprintf(stderr, "fp4kit bench --step: no GPU: %d CUDA device%s visible, device %d asked (--plan prints the step without one)\n",
            fp4_probe_device_count(), fp4_probe_device_count() == 1 ? "" : "s", o.device);
    free(r);
    return EXIT_ERROR;
  }
  bench_provenance(argc, argv, &r->origin);
  rc = o.gpus ? run_ranks(&o, r) : run_device(&o, r, NULL, 0, 1);
  if (rc == EXIT_OK || rc == EXIT_FAILED) {
    step_report_print(o.stdout_report ? stderr : stdout, r);
    for (int k = 0; k < 3; k++)
      if (paths[k] && !step_report_write(paths[k], r, k)) rc = EXIT_ERROR;
  }
#else
  fprintf(stderr, "fp4kit bench --step: no GPU: this fp4kit was built without CUDA (--plan prints the step without one)\n");
  rc = EXIT_ERROR;
#endif
  free(r);
  return rc;
}
