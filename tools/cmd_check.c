/* fp4kit check: every available backend against the reference on the embedded cases. */
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
          "backend: GEMMs by relative Frobenius error, quantization bit for bit. Exit status 1 if any\n"
          "case fails.\n");
}

int fp4cli_check(int argc, char **argv) {
  const char *only = NULL;
  uint64_t seed = 1;
  int device = -2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      check_usage(stdout);
      return FP4CLI_OK;
    } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 0);
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device = atoi(argv[++i]);
    } else {
      fprintf(stderr, "fp4kit check: unknown option '%s'\n", argv[i]);
      check_usage(stderr);
      return FP4CLI_USAGE;
    }
  }
  if (device == -2) device = fp4cli_default_device();
  fp4_context *ctx = NULL;
  fp4_status st = fp4_context_create(&ctx, device);
  if (st) return fp4cli_report("creating a context", st);

  int ncases = 0;
  const fp4h_case *cases = fp4h_default_cases(&ncases);
  int passed = 0, failed = 0, skipped = 0, matched = 0;
  printf("fp4kit %s check, seed %llu, device %d\n\n", fp4_version(), (unsigned long long)seed, device);
  printf("%-16s %-30s %-6s %s\n", "backend", "case", "result", "detail");
  for (int bi = 0; bi < fp4_backend_count(); bi++) {
    const char *name = fp4_backend_name(bi);
    if (only && strcmp(only, name)) continue;
    matched++;
    char reason[256];
    if (fp4_backend_available(ctx, name, reason, sizeof reason) != FP4_OK) {
      printf("%-16s %-30s %-6s %s\n", name, "(all)", "skip", reason);
      skipped++;
      continue;
    }
    /* Host backends get host operands; device backends device operands. Try host first: a backend
     * answers UNSUPPORTED for the memory it does not run on. */
    for (int ci = 0; ci < ncases; ci++) {
      fp4h_result r;
      fp4h_run(ctx, name, FP4_MEMORY_HOST, &cases[ci], seed + (uint64_t)ci, &r);
      if (r.status == FP4_ERR_UNSUPPORTED && device >= 0)
        fp4h_run(ctx, name, FP4_MEMORY_DEVICE, &cases[ci], seed + (uint64_t)ci, &r);
      const char *verdict = r.status == FP4_ERR_UNSUPPORTED ? "skip" : (r.status == FP4_OK && r.passed) ? "pass" : "FAIL";
      if (verdict[0] == 's') skipped++;
      else if (verdict[0] == 'p') passed++;
      else failed++;
      printf("%-16s %-30s %-6s %s\n", name, cases[ci].name, verdict, r.message);
    }
  }
  fp4_context_destroy(ctx);
  if (only && !matched) {
    fprintf(stderr, "fp4kit check: no backend named '%s'\n", only);
    return FP4CLI_USAGE;
  }
  printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? FP4CLI_FAILED : FP4CLI_OK;
}
