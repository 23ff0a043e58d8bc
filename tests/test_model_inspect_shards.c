/* fp4_model_inspect on a 120-shard header set shaped like Qwen3.5-397B-A17B's NVFP4 experts
 * (tests/inspect_shard_set.h): the census, the GEMM groups and the EP shard must come out right.
 * Correctness only; the CPU time of this inspection is measured by scripts/inspect_timing.c. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4kit_model.h"
#include "inspect_shard_set.h"

/* 40 GEMM roles in one small shard: more groups than the first hash table holds, so the groups are
 * rehashed while counted. Every role must come out once, with its own shape. */
static int many_roles(void) {
  char dir[] = "/tmp/fp4kit_roles_XXXXXX";
  if (!mkdtemp(dir)) return 0;
  char hdr[16384];
  size_t len = 0;
  unsigned long long off = 0;
  len += (size_t)snprintf(hdr + len, sizeof hdr - len, "{");
  for (int r = 0; r < 40; r++)
    for (int l = 0; l < 2; l++) {
      len += (size_t)snprintf(hdr + len, sizeof hdr - len,
                              "%s\"model.layers.%d.p%d.weight\":{\"dtype\":\"BF16\",\"shape\":[%d,16],"
                              "\"data_offsets\":[%llu,%llu]}", len > 1 ? "," : "", l, r, r + 1, off,
                              off + (unsigned long long)(r + 1) * 32);
      off += (unsigned long long)(r + 1) * 32;
    }
  len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
  char path[300];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  unsigned char l8[8];
  for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((unsigned long long)len >> (8 * i));
  fwrite(l8, 1, 8, f);
  fwrite(hdr, 1, len, f);
  fclose(f);
  if (truncate(path, (off_t)(8 + len + off)) != 0) return 0;
  char *report = NULL;
  fp4_inspect_options o = {1, 1, 0};
  int ok = fp4_model_inspect(dir, &o, &report) == FP4_OK && report;
  for (int r = 0; ok && r < 40; r++) {
    char row[200], *at;
    snprintf(row, sizeof row, "model.layers.*.p%d ", r);
    at = strstr(report, row);
    /* name, N = r+1, K = 16, count = 2 layers */
    long long n = 0, k = 0, count = 0;
    if (!at || strstr(at + 1, row) || sscanf(at + strlen(row), "%lld %lld %lld", &n, &k, &count) != 3 || n != r + 1 ||
        k != 16 || count != 2) {
      fprintf(stderr, "FAILED: role p%d is missing, repeated or wrong (N %lld, K %lld, count %lld)\n%s\n", r, n, k,
              count, report);
      ok = 0;
    }
  }
  if (ok && !strstr(report, "bf16: 80 modules")) {
    fprintf(stderr, "FAILED: census is not 80 bf16 modules\n%s\n", report);
    ok = 0;
  }
  fp4_model_free(report);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return ok;
}

int main(void) {
  if (!many_roles()) return 1;
  char dir[] = "/tmp/fp4kit_shards_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  if (!inspect_shard_set_write(dir)) return 1;

  char *report = NULL;
  fp4_inspect_options o = {8, 8, 1};
  fp4_status st = fp4_model_inspect(dir, &o, &report);
  int ok = st == FP4_OK && report && strstr(report, "\"tensors\":\t368640") &&
           strstr(report, "model.language_model.layers.*.mlp.experts.*.down_proj") && strstr(report, "\"experts\":\t64");
  if (!ok) fprintf(stderr, "FAILED: %s\n%s\n", fp4_last_error(), report ? report : "");
  fp4_model_free(report);
  char cmd[300];
  if (getenv("KEEP")) return ok ? 0 : 1;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return ok ? 0 : 1;
}
