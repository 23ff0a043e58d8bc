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
          "  --tp N    tensor-parallel ranks, 1 to 4096 (default 1)\n"
          "  --ep N    expert-parallel ranks, 1 to 4096 (default 1)\n"
          "\n"
          "Exit status: 0 the report was printed, 2 a usage error (an unknown option, a value out of range,\n"
          "no PATH), 3 the checkpoint cannot be read (missing, not a checkpoint, malformed; the message\n"
          "names the file and what is wrong).\n");
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
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    long long v = 0;
    switch (c) {
      case 'h':
        inspect_usage(stdout);
        return FP4CLI_OK;
      case 'j':
        o.json = 1;
        break;
      case OPT_TP:
      case OPT_EP:
        if (fp4cli_parse_int("inspect", c == OPT_TP ? "--tp" : "--ep", optarg, 1, 4096, &v)) return FP4CLI_USAGE;
        *(c == OPT_TP ? &o.tp : &o.ep) = (int)v;
        break;
      default:
        return fp4cli_bad_option("inspect", c, argv);
    }
  }
  if (optind == argc) {
    fprintf(stderr, "fp4kit inspect: give PATH: a model directory, a .safetensors file or a model.safetensors.index.json\n"
                    "Run 'fp4kit inspect --help' for the options.\n");
    return FP4CLI_USAGE;
  }
  const char *path = argv[optind++];
  if (fp4cli_no_operands("inspect", argc, argv)) return FP4CLI_USAGE;
  char *report = NULL;
  fp4_status st = fp4_model_inspect(path, &o, &report);
  if (st) return fp4cli_report("inspect", st);
  fputs(report, stdout);
  if (o.json) fputc('\n', stdout);
  fp4_model_free(report);
  return FP4CLI_OK;
}
