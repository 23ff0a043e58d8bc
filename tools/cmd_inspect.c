/* fp4kit inspect: what is inside a checkpoint, from its config files and tensor headers only. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fp4kit_model.h"

static void inspect_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit inspect PATH [--json] [--tp N] [--ep N]\n"
          "\n"
          "PATH is a model directory, one .safetensors file or a model.safetensors.index.json. Reads the\n"
          "config.json and hf_quant_config.json beside it (when present) and the safetensors headers (no\n"
          "weights) and prints the architecture, the quantization scheme, linear modules by storage type\n"
          "(nvfp4, mxfp4, fp8, int4, bf16, ...), excluded modules, every tensor by kind (GEMM weights, their\n"
          "scales and biases, embeddings, vectors, and the unclassified ones by name), multi-token-prediction\n"
          "(MTP) heads with how much of them the exclude list names, and the GEMM list (name, N, K, count,\n"
          "dtype) per rank for tensor parallelism N (--tp) and expert parallelism N (--ep; MoE experts are\n"
          "split over EP and each expert over the remaining tp/ep ranks). A row stands for every module whose\n"
          "name differs only in numeric indices (layers.N, experts.N, blocks.N, h.N); count is the number of\n"
          "such GEMMs, for routed experts layers x experts a token touches; MTP layers are rows of their own.\n"
          "\n"
          "  --json    one JSON document instead of text\n"
          "  --tp N    tensor-parallel ranks (default 1)\n"
          "  --ep N    expert-parallel ranks (default 1)\n");
}

static int parse_positive(const char *opt, const char *s, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 1 || v > 4096) {
    fprintf(stderr, "fp4kit inspect: %s needs a positive integer, got '%s'\n", opt, s);
    return 0;
  }
  *out = (int)v;
  return 1;
}

int fp4cli_inspect(int argc, char **argv) {
  fp4_inspect_options o = {1, 1, 0};
  enum { OPT_TP = 256, OPT_EP };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"json", no_argument, NULL, 'j'},
                                        {"tp", required_argument, NULL, OPT_TP},
                                        {"ep", required_argument, NULL, OPT_EP},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    switch (c) {
      case 'h':
        inspect_usage(stdout);
        return FP4CLI_OK;
      case 'j':
        o.json = 1;
        break;
      case OPT_TP:
      case OPT_EP:
        if (!parse_positive(c == OPT_TP ? "--tp" : "--ep", optarg, c == OPT_TP ? &o.tp : &o.ep)) return FP4CLI_USAGE;
        break;
      default:
        fprintf(stderr, "fp4kit inspect: unknown option or missing value: '%s'\n", argv[optind - 1]);
        inspect_usage(stderr);
        return FP4CLI_USAGE;
    }
  }
  if (optind != argc - 1) {
    if (optind < argc - 1) fprintf(stderr, "fp4kit inspect: unexpected argument '%s'\n", argv[optind + 1]);
    inspect_usage(stderr);
    return FP4CLI_USAGE;
  }
  const char *path = argv[optind];
  char *report = NULL;
  fp4_status st = fp4_model_inspect(path, &o, &report);
  if (st) return fp4cli_report("inspect", st);
  fputs(report, stdout);
  if (o.json) fputc('\n', stdout);
  fp4_model_free(report);
  return FP4CLI_OK;
}
