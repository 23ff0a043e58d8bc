/* A header-only checkpoint shaped like Qwen3.5-397B-A17B's NVFP4 experts: 120 shards, 60 layers x
 * 512 experts x 3 projections x 4 tensors = 368,640 tensors. The shards are sparse files: real
 * headers, full sizes, no data blocks. Shared by test_model_inspect_shards (correctness) and
 * scripts/inspect_timing.c (CPU time of the inspection). */
#ifndef FP4KIT_TESTS_INSPECT_SHARD_SET_H
#define FP4KIT_TESTS_INSPECT_SHARD_SET_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { INSPECT_SHARD_SET_SHARDS = 120, INSPECT_SHARD_SET_TENSORS = 368640 };

/* Writes the shard set and its config.json into the existing directory `dir`; 1 on success. */
static int inspect_shard_set_write(const char *dir) {
  const int shards = INSPECT_SHARD_SET_SHARDS, experts = 512;
  static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
  static const long long nk[3][2] = {{1024, 4096}, {1024, 4096}, {4096, 1024}};
  size_t cap = 8 << 20;
  char *hdr = malloc(cap);
  if (!hdr) return 0;
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
    char path[4096];
    snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
    FILE *f = fopen(path, "wb");
    if (!f) {
      free(hdr);
      return 0;
    }
    unsigned char l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((unsigned long long)len >> (8 * i));
    fwrite(l8, 1, 8, f);
    fwrite(hdr, 1, len, f);
    if (fclose(f) != 0 || truncate(path, (off_t)(8 + len + off)) != 0) { /* sparse: no data blocks */
      free(hdr);
      return 0;
    }
  }
  free(hdr);
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fprintf(f, "{\"text_config\": {\"num_hidden_layers\": 60, \"num_experts\": 512, \"num_experts_per_tok\": 10}}\n");
  return fclose(f) == 0;
}

#endif
