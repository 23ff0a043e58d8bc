/* fp4kit inspect: what is inside a checkpoint, from its config files and tensor headers only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fp4kit_model.h"

static void inspect_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit inspect DIR [--json] [--tp N] [--ep N]\n"
          "\n"
          "Reads DIR's config.json, hf_quant_config.json and safetensors headers (no weights) and prints\n"
          "the architecture, the quantization scheme, linear modules by storage type, excluded modules,\n"
          "multi-token-prediction (MTP) heads and the GEMM list (name, N, K, count, dtype) per rank for\n"
          "tensor parallelism N (--tp) and expert parallelism N (--ep; MoE experts are split over EP and\n"
          "each expert over the remaining tp/ep ranks).\n"
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
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      inspect_usage(stdout);
      return FP4CLI_OK;
    } else if (!strcmp(argv[i], "--json")) {
      o.json = 1;
    } else if ((!strcmp(argv[i], "--tp") || !strcmp(argv[i], "--ep")) && i + 1 < argc) {
      if (!parse_positive(argv[i], argv[i + 1], argv[i][2] == 't' ? &o.tp : &o.ep)) return FP4CLI_USAGE;
      i++;
    } else if (argv[i][0] != '-' && !dir) {
      dir = argv[i];
    } else {
      fprintf(stderr, "fp4kit inspect: unexpected argument '%s'\n", argv[i]);
      inspect_usage(stderr);
      return FP4CLI_USAGE;
    }
  }
  if (!dir) {
    inspect_usage(stderr);
    return FP4CLI_USAGE;
  }
  char *report = NULL;
  fp4_status st = fp4_model_inspect(dir, &o, &report);
  if (st) return fp4cli_report("inspect", st);
  fputs(report, stdout);
  if (o.json) fputc('\n', stdout);
  fp4_model_free(report);
  return FP4CLI_OK;
}
