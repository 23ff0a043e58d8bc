/* Embedded shape sets: the models' GEMM figures at TP1, TP8, EP8 and MoE-TP8, and the errors. */
#include <stdio.h>
#include <string.h>

#include "fp4kit.h"
#include "model/shard.h" /* fp4_parallel_check */

#include "model_test_check.h"

static fp4_gemm_shape shapes[64];
static int count;

static const fp4_gemm_shape *get(const char *model, int tp, int ep, const char *name) {
  fp4_status st = fp4_shape_set(model, tp, ep, shapes, 64, &count);
  CHECK(st == FP4_OK, "%s tp%d ep%d: %s", model, tp, ep, fp4_last_error());
  for (int i = 0; i < count && i < 64; i++)
    if (!strcmp(shapes[i].name, name)) return &shapes[i];
  CHECK(0, "%s has no GEMM named %s", model, name);
  return NULL;
}

static void expect(const char *model, int tp, int ep, const char *name, int64_t n, int64_t k, int64_t cnt,
                   int experts, const char *storage) {
  const fp4_gemm_shape *g = get(model, tp, ep, name);
  if (!g) return;
  CHECK(g->n == n && g->k == k, "%s tp%d ep%d %s: %lld x %lld, expected %lld x %lld", model, tp, ep, name,
        (long long)g->n, (long long)g->k, (long long)n, (long long)k);
  if (cnt >= 0)
    CHECK(g->count == cnt, "%s tp%d ep%d %s: count %lld, expected %lld", model, tp, ep, name, (long long)g->count,
          (long long)cnt);
  CHECK(g->experts == experts, "%s %s: experts %d, expected %d", model, name, g->experts, experts);
  CHECK(!strcmp(g->storage, storage), "%s %s: storage %s, expected %s", model, name, g->storage, storage);
}

int main(void) {
  const char *q = "qwen3.5-397b-a17b";
  /* TP1 shapes and TP8 per-rank shapes of the Qwen3.5 table. */
  expect(q, 1, 1, "linear_attn.in_proj_qkvz", 20480, 4096, 45, 0, "bf16");
  expect(q, 8, 8, "linear_attn.in_proj_qkvz", 2560, 4096, 45, 0, "bf16");
  expect(q, 8, 8, "linear_attn.in_proj_ba", 16, 4096, 45, 0, "bf16");
  expect(q, 8, 8, "linear_attn.out_proj", 4096, 1024, 45, 0, "bf16");
  expect(q, 1, 1, "self_attn.qkv_proj", 17408, 4096, 15, 0, "bf16");
  expect(q, 8, 8, "self_attn.qkv_proj", 2560, 4096, 15, 0, "bf16");
  expect(q, 8, 8, "self_attn.o_proj", 4096, 1024, 15, 0, "bf16");
  expect(q, 8, 8, "mlp.gate", 512, 4096, 60, 0, "bf16");
  expect(q, 8, 8, "mlp.shared_expert.gate_up_proj", 256, 4096, 60, 0, "nvfp4");
  expect(q, 8, 8, "mlp.shared_expert.down_proj", 4096, 128, 60, 0, "nvfp4");
  expect(q, 1, 1, "mlp.experts.gate_up_proj", 2048, 4096, 600, 512, "nvfp4");
  expect(q, 8, 8, "mlp.experts.gate_up_proj", 2048, 4096, 120, 64, "nvfp4");    /* EP8: full shape */
  expect(q, 8, 1, "mlp.experts.gate_up_proj", 256, 4096, 600, 512, "nvfp4");    /* MoE-TP8 */
  expect(q, 8, 8, "mlp.experts.down_proj", 4096, 1024, 120, 64, "nvfp4");
  expect(q, 8, 1, "mlp.experts.down_proj", 4096, 128, 600, 512, "nvfp4");
  expect(q, 8, 2, "mlp.experts.down_proj", 4096, 256, 300, 256, "nvfp4");       /* EP2 x MoE-TP4 */
  expect(q, 1, 8, "mlp.experts.down_proj", 4096, 1024, 120, 64, "nvfp4");       /* DP attention + EP8 */
  expect(q, 8, 8, "lm_head", 31040, 4096, 1, 0, "bf16");
  expect(q, 8, 8, "mtp.fc", 4096, 8192, 1, 0, "bf16");

  const char *l8 = "llama-3.1-8b";
  expect(l8, 1, 1, "self_attn.qkv_proj", 6144, 4096, 32, 0, "nvfp4");
  expect(l8, 8, 1, "self_attn.qkv_proj", 768, 4096, 32, 0, "nvfp4");
  expect(l8, 8, 1, "self_attn.o_proj", 4096, 512, 32, 0, "nvfp4");
  expect(l8, 8, 1, "mlp.gate_up_proj", 3584, 4096, 32, 0, "nvfp4");
  expect(l8, 8, 1, "mlp.down_proj", 4096, 1792, 32, 0, "nvfp4");
  expect(l8, 1, 1, "lm_head", 128256, 4096, 1, 0, "bf16");
  expect(l8, 2, 1, "self_attn.qkv_proj", 3072, 4096, 32, 0, "nvfp4"); /* 4 KV heads per rank */

  const char *l70 = "llama-3.3-70b";
  expect(l70, 1, 1, "self_attn.qkv_proj", 10240, 8192, 80, 0, "nvfp4");
  expect(l70, 8, 1, "self_attn.qkv_proj", 1280, 8192, 80, 0, "nvfp4");
  expect(l70, 8, 1, "self_attn.o_proj", 8192, 1024, 80, 0, "nvfp4");
  expect(l70, 8, 1, "mlp.gate_up_proj", 7168, 8192, 80, 0, "nvfp4");
  expect(l70, 8, 1, "mlp.down_proj", 8192, 3584, 80, 0, "nvfp4");

  const char *q3 = "qwen3-30b-a3b";
  expect(q3, 1, 1, "self_attn.qkv_proj", 5120, 2048, 48, 0, "nvfp4");
  expect(q3, 1, 1, "self_attn.o_proj", 2048, 4096, 48, 0, "nvfp4");
  expect(q3, 1, 1, "mlp.experts.gate_up_proj", 1536, 2048, 48 * 8, 128, "nvfp4");
  expect(q3, 8, 1, "mlp.experts.gate_up_proj", 192, 2048, -1, 128, "nvfp4");
  expect(q3, 8, 1, "mlp.experts.down_proj", 2048, 96, -1, 128, "nvfp4");

  const char *ds = "deepseek-r1";
  expect(ds, 1, 1, "mlp.experts.gate_up_proj", 4096, 7168, 58 * 8, 256, "nvfp4");
  expect(ds, 8, 1, "mlp.experts.gate_up_proj", 512, 7168, -1, 256, "nvfp4");
  expect(ds, 8, 1, "mlp.experts.down_proj", 7168, 256, -1, 256, "nvfp4");
  expect(ds, 1, 1, "mlp.gate_up_proj (dense layers 0-2)", 36864, 7168, 3, 0, "nvfp4");
  expect(ds, 1, 1, "mlp.down_proj (dense layers 0-2)", 7168, 18432, 3, 0, "nvfp4");
  expect(ds, 1, 1, "self_attn.o_proj", 7168, 16384, 61, 0, "bf16");

  /* Every name is served, the list ends with NULL, counting works with max 0. */
  int names = 0;
  for (; fp4_shape_set_name(names); names++) {
    int n = -1;
    CHECK(fp4_shape_set(fp4_shape_set_name(names), 1, 1, NULL, 0, &n) == FP4_OK && n > 0, "%s: count %d",
          fp4_shape_set_name(names), n);
    for (int i = 0; i < n && i < 64; i++) {
      fp4_shape_set(fp4_shape_set_name(names), 1, 1, shapes, 64, &count);
      CHECK(shapes[i].n > 0 && shapes[i].k > 0 && shapes[i].count > 0 && shapes[i].k % 16 == 0,
            "%s %s: bad shape", fp4_shape_set_name(names), shapes[i].name);
    }
  }
  CHECK(names == 5, "%d shape sets, expected 5", names);
  CHECK(fp4_shape_set_name(-1) == NULL, "negative index");

  /* Errors are values with a message. */
  int n = 0;
  CHECK(fp4_shape_set("gpt-2", 1, 1, shapes, 64, &n) == FP4_ERR_NOT_FOUND && strstr(fp4_last_error(), "llama-3.1-8b"),
        "unknown model: %s", fp4_last_error());
  CHECK(fp4_shape_set(q, 0, 1, shapes, 64, &n) == FP4_ERR_INVALID_ARGUMENT, "tp 0");
  CHECK(fp4_shape_set(q, 8, 3, shapes, 64, &n) == FP4_ERR_INVALID_ARGUMENT, "ep 3 with tp 8");
  /* ep above tp must be a multiple of it (shard.h's rule), checked before any dimension is split */
  CHECK(fp4_parallel_check("t", 3, 4) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "not a multiple of tp 3"),
        "ep 4 with tp 3: %s", fp4_last_error());
  CHECK(fp4_parallel_check("t", 2, 8) == FP4_OK && fp4_parallel_check("t", 8, 2) == FP4_OK &&
            fp4_parallel_check("t", 1, 7) == FP4_OK,
        "ep 8 with tp 2, ep 2 with tp 8, ep 7 with tp 1");
  CHECK(fp4_shape_set(q, 3, 1, shapes, 64, &n) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "evenly") &&
            !strncmp(fp4_last_error(), "fp4_shape_set: sharding ", 24),
        "tp 3 (the message names the function): %s", fp4_last_error());
  CHECK(fp4_shape_set(q, 1, 3, shapes, 64, &n) == FP4_ERR_INVALID_ARGUMENT &&
            !strncmp(fp4_last_error(), "fp4_shape_set: sharding ", 24) && strstr(fp4_last_error(), "experts"),
        "ep 3: %s", fp4_last_error());
  CHECK(fp4_shape_set(q, 1, 1, NULL, 4, &n) == FP4_ERR_INVALID_ARGUMENT, "NULL shapes with max 4");
  CHECK(fp4_shape_set(NULL, 1, 1, shapes, 64, &n) == FP4_ERR_INVALID_ARGUMENT, "NULL model");
  /* Truncation: max smaller than the set still reports the total. */
  CHECK(fp4_shape_set(q, 1, 1, shapes, 2, &n) == FP4_OK && n == 12, "total %d", n);

  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("shape sets: all checks passed\n");
  return 0;
}
