/* fp4kit check: every available backend against the reference on the embedded cases. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "harness.h"

static void check_usage(FILE *f) {
  fprintf(f,
          "usage: fp4kit check [--backend NAME] [--seed N] [--device N]\n"
          "\n"
          "Runs every available backend (or the one named) on the embedded set of shapes and edge cases,\n"
          "on fresh random data with NaN-filled outputs, and compares each result with the reference\n"
          "backend: GEMMs by relative Frobenius error, quantization bit for bit.\n"
          "\n"
          "  --backend NAME  check this backend only\n"
          "  --seed N        seed of the random data (default 1)\n"
          "  --device N      CUDA ordinal for the device backends, -1 for the host backends only (default:\n"
          "                  FP4KIT_DEVICE, else 0 when a CUDA device is present, else -1). A device that\n"
          "                  cannot be used (no driver, no GPU) is named once with the runtime's reason,\n"
          "                  and the host backends are checked without it.\n"
          "\n"
          "Exit status: 0 every case that ran passed, 1 a case failed, 2 a usage error (an unknown option,\n"
          "backend or FP4KIT_DEVICE value), 3 the device asked for cannot be used (after checking what runs\n"
          "on the host) or nothing could run (every case of the backends asked for was skipped; the last\n"
          "line says why).\n");
}

int fp4cli_check(int argc, char **argv) {
  const char *only = NULL;
  long long seed = 1, device = FP4CLI_DEVICE_UNSET;
  enum { OPT_BACKEND = 256, OPT_SEED, OPT_DEVICE };
  static const struct option longs[] = {{"help", no_argument, NULL, 'h'},
                                        {"backend", required_argument, NULL, OPT_BACKEND},
                                        {"seed", required_argument, NULL, OPT_SEED},
                                        {"device", required_argument, NULL, OPT_DEVICE},
                                        {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* our own messages, naming the command */
  for (int c; (c = getopt_long(argc, argv, ":h", longs, NULL)) != -1;) {
    int rc = FP4CLI_OK;
    switch (c) {
      case 'h':
        check_usage(stdout);
        return FP4CLI_OK;
      case OPT_BACKEND:
        only = optarg;
        break;
      case OPT_SEED:
        rc = fp4cli_parse_int("check", "--seed", optarg, 0, INT64_MAX, &seed);
        break;
      case OPT_DEVICE:
        rc = fp4cli_parse_int("check", "--device", optarg, -1, FP4CLI_MAX_DEVICE, &device);
        break;
      default:
        return fp4cli_bad_option("check", c, argv);
    }
    if (rc) return rc;
  }
  if (fp4cli_no_operands("check", argc, argv)) return FP4CLI_USAGE;
  if (only && !fp4cli_backend_known("check", only)) return FP4CLI_USAGE;
  int asked = (int)device;
  if (fp4cli_resolve_device("check", &asked)) return FP4CLI_USAGE;
  device = asked;
  /* A device that cannot be used says so once; the host backends are then checked on a host
   * context (on a device context without a driver every host case would fail on the device). */
  char why[320] = "";
  if (device >= 0 && !fp4cli_device_usable(asked, why, sizeof why)) {
    fprintf(stderr, "fp4kit check: no usable CUDA device %d (%s); checking the host backends only\n", asked, why);
    device = -1;
  }
  fp4_context *ctx = NULL;
  fp4_status st = fp4_context_create(&ctx, (int)device);
  if (st) return fp4cli_report("creating a context", st);

  int ncases = 0;
  const fp4h_case *cases = fp4h_default_cases(&ncases);
  int passed = 0, failed = 0, skipped = 0;
  char unavailable[320] = ""; /* the first backend that cannot run here, and why */
  if (why[0]) printf("fp4kit %s check, seed %lld, host only (device %d is not usable)\n\n", fp4_version(), seed, asked);
  else printf("fp4kit %s check, seed %lld, device %d\n\n", fp4_version(), seed, asked);
  printf("%-16s %-30s %-6s %s\n", "backend", "case", "result", "detail");
  for (int bi = 0; bi < fp4_backend_count(); bi++) {
    const char *name = fp4_backend_name(bi);
    if (only && strcmp(only, name)) continue;
    char reason[256];
    if (fp4_backend_available(ctx, name, reason, sizeof reason) != FP4_OK) {
      printf("%-16s %-30s %-6s %s%s\n", name, "(all)", "skip", why[0] ? "no usable CUDA device; on the host: " : "", reason);
      if (!unavailable[0]) snprintf(unavailable, sizeof unavailable, "%s cannot run here: %s", name, reason);
      skipped++;
      continue;
    }
    /* Host backends get host operands; device backends device operands. Try host first: a backend
     * answers UNSUPPORTED for the memory it does not run on. */
    for (int ci = 0; ci < ncases; ci++) {
      fp4h_result r;
      fp4h_run(ctx, name, FP4_MEMORY_HOST, &cases[ci], (uint64_t)seed + (uint64_t)ci, &r);
      if (r.status == FP4_ERR_UNSUPPORTED && device >= 0)
        fp4h_run(ctx, name, FP4_MEMORY_DEVICE, &cases[ci], (uint64_t)seed + (uint64_t)ci, &r);
      const char *verdict = r.status == FP4_ERR_UNSUPPORTED ? "skip" : (r.status == FP4_OK && r.passed) ? "pass" : "FAIL";
      if (verdict[0] == 's') skipped++;
      else if (verdict[0] == 'p') passed++;
      else failed++;
      printf("%-16s %-30s %-6s %s\n", name, cases[ci].name, verdict, r.message);
    }
  }
  fp4_context_destroy(ctx);
  printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed) return FP4CLI_FAILED;
  if (!passed) { /* nothing ran for the backend(s) asked for: that is no success, whatever the device */
    if (why[0] && only) printf("nothing could run: no usable CUDA device %d (%s), and %s does not run on the host\n", asked, why, only);
    else if (why[0]) printf("nothing could run: no usable CUDA device %d (%s), and no host backend is available\n", asked, why);
    else if (only && unavailable[0]) printf("nothing could run: %s\n", unavailable);
    else printf("nothing could run: every case was skipped (the detail column says why)\n");
    return FP4CLI_ERROR;
  }
  if (why[0]) {
    printf("device %d was not checked: no usable CUDA device (%s)\n", asked, why);
    return FP4CLI_ERROR;
  }
  return FP4CLI_OK;
}
