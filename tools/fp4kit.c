/* fp4kit: probe, check, bench, tune, quantize and inspect FP4 GEMMs. Calls only the public API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int cmd_version(int argc, char **argv);

static const fp4cli_command commands[] = {
    {"check", "run every available backend against the reference on embedded cases", fp4cli_check},
    {"bench", "time FP4 GEMMs per shape, M and backend against same-run peers", fp4cli_bench},
    {"inspect", "what a checkpoint holds: quantization, MTP heads, GEMM list (headers only)", fp4cli_inspect},
    {"quantize", "quantize a BF16 safetensors checkpoint to NVFP4 (Model Optimizer layout) or MXFP4", fp4cli_quantize},
    {"probe", "devices, architectures and what every backend can do here, with reasons", fp4cli_probe},
    {"tune", "time every backend/config on model shapes and write the tuning cache", fp4cli_tune},
    {"version", "print the library version", cmd_version},
};
static const int command_count = (int)(sizeof commands / sizeof *commands);

static void usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit <command> [options]\n"
          "\n"
          "FP4 (NVFP4, MXFP4) matrix multiplication: which backends run here, are they right, how fast.\n"
          "\n"
          "commands:\n");
  for (int i = 0; i < command_count; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\n"
          "Run 'fp4kit <command> --help' for a command's options.\n"
          "Environment: FP4KIT_DEVICE (CUDA ordinal, -1 = host only), FP4KIT_LOG (error|warn|info|debug).\n");
}

static int cmd_version(int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "usage: fp4kit version\n");
    return FP4CLI_USAGE;
  }
  printf("fp4kit %s (header %s)\n", fp4_version(), FP4KIT_VERSION_STRING);
  return FP4CLI_OK;
}

int fp4cli_report(const char *what, fp4_status st) {
  fprintf(stderr, "fp4kit: %s: %s (%s)\n", what, fp4_status_str(st), fp4_last_error());
  return FP4CLI_ERROR;
}

int fp4cli_default_device(void) {
  const char *env = getenv("FP4KIT_DEVICE");
  if (env && *env) return atoi(env);
  return fp4_probe_device_count() > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return argc < 2 ? FP4CLI_USAGE : FP4CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) return cmd_version(1, argv + 1);
  for (int i = 0; i < command_count; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "fp4kit: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return FP4CLI_USAGE;
}
