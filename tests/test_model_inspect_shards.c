/* fp4_model_inspect on a 120-shard header set shaped like Qwen3.5-397B-A17B's NVFP4 experts
 * (60 layers x 512 experts x 3 projections x 4 tensors = 368,640 tensors). The shards are sparse
 * files: real headers, full sizes, no data blocks. Correctness is asserted, and so is a generous
 * bound on the CPU time (clock(): unlike wall time it does not grow when other processes share the
 * machine): under 1 s, where about 0.4 s is measured on a 2-core build machine. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fp4kit_model.h"

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
  const int shards = 120, experts = 512;
  static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
  static const long long nk[3][2] = {{1024, 4096}, {1024, 4096}, {4096, 1024}};
  size_t cap = 8 << 20;
  char *hdr = malloc(cap);
  for (int s = 0; s < shards; s++) {
    int layer = s / 2, e0 = (s % 2) * experts / 2;
    size_t len = 0;
    unsigned long long off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int e = e0; e < e0 + experts / 2; e++)
      for (int p = 0; p < 3; p++) {
        const char *pre = "model.language_model.layers";
        long long n = nk[p][0], k = nk[p][1];
        len += (size_t)snprintf(hdr + len, cap - len,
                                "%s\"%s.%d.mlp.experts.%d.%s.weight\":{\"dtype\":\"U8\",\"shape\":[%lld,%lld],"
                                "\"data_offsets\":[%llu,%llu]}",
                                len > 1 ? "," : "", pre, layer, e, proj[p], n, k / 2, off, off + (unsigned long long)(n * k / 2));
        off += (unsigned long long)(n * k / 2);
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"%s.%d.mlp.experts.%d.%s.weight_scale\":{\"dtype\":\"F8_E4M3\",\"shape\":[%lld,%lld],"
                                "\"data_offsets\":[%llu,%llu]}",
                                pre, layer, e, proj[p], n, k / 16, off, off + (unsigned long long)(n * k / 16));
        off += (unsigned long long)(n * k / 16);
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"%s.%d.mlp.experts.%d.%s.weight_scale_2\":{\"dtype\":\"F32\",\"shape\":[],"
                                "\"data_offsets\":[%llu,%llu]},\"%s.%d.mlp.experts.%d.%s.input_scale\":{\"dtype\":"
                                "\"F32\",\"shape\":[],\"data_offsets\":[%llu,%llu]}",
                                pre, layer, e, proj[p], off, off + 4, pre, layer, e, proj[p], off + 4, off + 8);
        off += 8;
      }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    char path[256];
    snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
    FILE *f = fopen(path, "wb");
    unsigned char l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((unsigned long long)len >> (8 * i));
    fwrite(l8, 1, 8, f);
    fwrite(hdr, 1, len, f);
    fclose(f);
    if (truncate(path, (off_t)(8 + len + off)) != 0) return 1; /* sparse: no data blocks */
  }
  free(hdr);
  char path[256];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"text_config\": {\"num_hidden_layers\": 60, \"num_experts\": 512, \"num_experts_per_tok\": 10}}\n");
  fclose(f);

  struct timespec t0, t1;
  const clock_t c0 = clock();
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *report = NULL;
  fp4_inspect_options o = {8, 8, 1};
  fp4_status st = fp4_model_inspect(dir, &o, &report);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const clock_t c1 = clock();
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  double cpu = c0 == (clock_t)-1 || c1 == (clock_t)-1 ? -1.0 : (double)(c1 - c0) / CLOCKS_PER_SEC;
  int ok = st == FP4_OK && report && strstr(report, "\"tensors\":\t368640") &&
           strstr(report, "model.language_model.layers.*.mlp.experts.*.down_proj") && strstr(report, "\"experts\":\t64");
  printf("inspect of %d shards, 368640 tensors: %.3f s wall, %.3f s CPU (CPU must be < 1 s)\n", shards, secs, cpu);
  if (!ok) fprintf(stderr, "FAILED: %s\n%s\n", fp4_last_error(), report ? report : "");
  if (ok && !(cpu >= 0.0 && cpu < 1.0)) {
    fprintf(stderr, "FAILED: the inspection took %.3f s of CPU time (clock()), the bound is 1 s\n", cpu);
    ok = 0;
  }
  fp4_model_free(report);
  char cmd[300];
  if (getenv("KEEP")) return ok ? 0 : 1;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return ok ? 0 : 1;
}
