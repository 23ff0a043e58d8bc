/* fp4kit: probe, check, bench, tune, quantize and inspect FP4 GEMMs. Calls only the public API. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
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
          "usage: fp4kit [--help|--version] <command> [options]\n"
          "\n"
          "FP4 (NVFP4, MXFP4) matrix multiplication: which backends run here, are they right, how fast.\n"
          "\n"
          "commands:\n");
  for (int i = 0; i < command_count; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\n"
          "Run 'fp4kit <command> --help' for a command's options ('fp4kit help' prints this).\n"
          "Environment: FP4KIT_DEVICE (CUDA ordinal, -1 = host only), FP4KIT_LOG (error|warn|info|debug).\n");
}

static int cmd_version(int argc, char **argv) {
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    if (c != 'h') return fp4cli_bad_option("version", c, argv);
    printf("usage: fp4kit version\n\nPrints the library version and the version of the header the command was built with.\n");
    return FP4CLI_OK;
  }
  if (optind < argc) return fp4cli_no_operands("version", argc, argv);
  printf("fp4kit %s (header %s)\n", fp4_version(), FP4KIT_VERSION_STRING);
  return FP4CLI_OK;
}

int fp4cli_report(const char *what, fp4_status st) {
  fprintf(stderr, "fp4kit: %s: %s (%s)\n", what, fp4_status_str(st), fp4_last_error());
  return FP4CLI_ERROR;
}

int fp4cli_device_usable(int device, char *why, size_t size) {
  fp4_context *ctx = NULL;
  void *p = NULL;
  fp4_status st = fp4_context_create(&ctx, device);
  if (!st) st = fp4_alloc(ctx, FP4_MEMORY_DEVICE, 256, &p);
  if (!st) fp4_free(ctx, FP4_MEMORY_DEVICE, p);
  if (st) {
    /* The runtime's words without the name of the probe call. */
    const char *msg = fp4_last_error();
    if (!strncmp(msg, "fp4_alloc: ", 11)) msg += 11;
    snprintf(why, size, "%s", msg[0] ? msg : fp4_status_str(st));
  }
  fp4_context_destroy(ctx);
  return st == FP4_OK;
}

int fp4cli_backend_known(const char *cmd, const char *name) {
  for (int i = 0; i < fp4_backend_count(); i++)
    if (!strcmp(fp4_backend_name(i), name)) return 1;
  fprintf(stderr, "fp4kit %s: no backend named '%s'; registered:", cmd, name);
  for (int i = 0; i < fp4_backend_count(); i++) fprintf(stderr, " %s", fp4_backend_name(i));
  fprintf(stderr, "\n");
  return 0;
}

int fp4cli_parse_dtype(const char *s, fp4_dtype *t) {
  if (!strcmp(s, "bf16")) *t = FP4_DTYPE_BF16;
  else if (!strcmp(s, "f16") || !strcmp(s, "fp16")) *t = FP4_DTYPE_F16;
  else if (!strcmp(s, "f32") || !strcmp(s, "fp32")) *t = FP4_DTYPE_F32;
  else return -1;
  return 0;
}

int fp4cli_no_operands(const char *cmd, int argc, char **argv) {
  if (optind >= argc) return FP4CLI_OK;
  fprintf(stderr, "fp4kit %s: unexpected argument '%s'\nRun 'fp4kit %s --help' for the options.\n", cmd, argv[optind], cmd);
  return FP4CLI_USAGE;
}

/* What a command printed is its result: output that could not be written (a full disk, /dev/full)
 * fails the run instead of exiting 0 with the result lost. */
static int stdout_written(int rc) {
  const int flushed = fflush(stdout) == 0, err = errno;
  if (flushed && !ferror(stdout)) return rc;
  fprintf(stderr, "fp4kit: writing to standard output failed%s%s\n", flushed ? "" : ": ", flushed ? "" : strerror(err));
  return rc == FP4CLI_OK || rc == FP4CLI_FAILED ? FP4CLI_ERROR : rc;
}

/* getopt keeps the ordering of its first scan ('+': stop at the command) until a scan starts with
 * optind 0; an empty scan from 0 leaves the command's own scan (optind 1) permuting arguments, so
 * its options may follow its operands. */
static void getopt_restart(void) {
  static char name[] = "fp4kit";
  char *none[] = {name, NULL};
  optind = 0;
  (void)getopt(1, none, "");
}

int main(int argc, char **argv) {
  /* Options before the command; '+' stops at the command, whose options are its own. */
  enum { OPT_VERSION = 256 };
  static const struct option longs[] = {
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, OPT_VERSION}, {NULL, 0, NULL, 0}};
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, "+:h", longs, NULL)) != -1;) {
    switch (c) {
      case 'h':
        usage(stdout);
        return stdout_written(FP4CLI_OK);
      case OPT_VERSION:
        printf("fp4kit %s (header %s)\n", fp4_version(), FP4KIT_VERSION_STRING);
        return stdout_written(FP4CLI_OK);
      default:
        fprintf(stderr, "fp4kit: unknown option '%s'\n\n", argv[optind - 1]);
        usage(stderr);
        return FP4CLI_USAGE;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return FP4CLI_USAGE;
  }
  const char *name = argv[optind];
  if (!strcmp(name, "help")) {
    usage(stdout);
    return stdout_written(FP4CLI_OK);
  }
  const int at = optind;
  getopt_restart();
  for (int i = 0; i < command_count; i++)
    if (!strcmp(name, commands[i].name)) return stdout_written(commands[i].run(argc - at, argv + at));
  fprintf(stderr, "fp4kit: unknown command '%s'\n\n", name);
  usage(stderr);
  return FP4CLI_USAGE;
}
