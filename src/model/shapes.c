/* Embedded GEMM shape sets of real NVFP4 models (from the models' published config.json files) and the TP/EP sharding
 * rule shared with the checkpoint GEMM list. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/shard.h"

fp4_status fp4_parallel_check(const char *fn, int tp, int ep) {
  if (tp < 1) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: tp is %d; tensor parallelism must be >= 1", fn, tp);
  if (ep < 1) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: ep is %d; expert parallelism must be >= 1", fn, ep);
  if (ep < tp && tp % ep != 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                    "%s: ep %d does not divide tp %d; the MoE tensor-parallel degree tp/ep must be whole", fn, ep,
                    tp);
  /* Wider expert parallelism spans whole tensor-parallel groups: ep 4 over tp 3 would give the
   * dense layers and the experts rank sets that do not line up. */
  if (ep > tp && ep % tp != 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT,
                    "%s: ep %d is not a multiple of tp %d; expert parallelism must divide tp or be a multiple of it",
                    fn, ep, tp);
  return FP4_OK;
}

static fp4_status split(const char *fn, const fp4_linear_desc *d, const char *what, int64_t value, int parts,
                        int64_t *out) {
  if (value % parts != 0)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: sharding %s: %s %lld does not split evenly over %d ranks", fn,
                    d->name, what, (long long)value, parts);
  *out = value / parts;
  return FP4_OK;
}

fp4_status fp4_linear_shard(const char *fn, const fp4_linear_desc *d, int tp, int ep, fp4_gemm_shape *out) {
  fp4_status st;
  memset(out, 0, sizeof *out);
  if ((st = fp4_parallel_check(fn, tp, ep))) return st;
  /* Counts come from a model's config: refuse what the arithmetic below cannot hold. */
  if (d->n < 0 || d->k < 0 || d->layers < 0 || d->experts < 0 || d->active < 0 || d->q_out < 0 || d->kv_heads < 0 ||
      d->head_dim < 0 || d->n > ((int64_t)1 << 53) || d->k > ((int64_t)1 << 53) || d->q_out > ((int64_t)1 << 53) ||
      d->layers > ((int64_t)1 << 32) || d->head_dim > ((int64_t)1 << 24))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: sharding %s: a negative or implausibly large count (N %lld, K %lld, "
                    "layers %lld, experts %d, active %d)", fn, d->name, (long long)d->n, (long long)d->k,
                    (long long)d->layers, d->experts, d->active);
  snprintf(out->name, sizeof out->name, "%s", d->name);
  snprintf(out->storage, sizeof out->storage, "%s", d->storage);
  out->n = d->n;
  out->k = d->k;
  out->count = d->layers;
  const int moe_tp = ep >= tp ? 1 : tp / ep;
  switch (d->kind) {
    case FP4_SHARD_REPLICATED: break;
    case FP4_SHARD_COLUMN:
      if ((st = split(fn, d, "N", d->n, tp, &out->n))) return st;
      break;
    case FP4_SHARD_ROW:
      if ((st = split(fn, d, "K", d->k, tp, &out->k))) return st;
      break;
    case FP4_SHARD_QKV: {
      int64_t q = 0;
      if ((st = split(fn, d, "q features", d->q_out, tp, &q))) return st;
      int64_t kv_heads = d->kv_heads >= tp ? 0 : 1;
      if (d->kv_heads >= tp && (st = split(fn, d, "KV heads", d->kv_heads, tp, &kv_heads))) return st;
      out->n = q + 2 * kv_heads * d->head_dim; /* < 2^53 + 2^32 * 2^24: no overflow */
      break;
    }
    case FP4_SHARD_EXPERT_COLUMN:
    case FP4_SHARD_EXPERT_ROW: {
      int64_t experts = 0;
      if ((st = split(fn, d, "experts", d->experts, ep, &experts))) return st;
      if (d->kind == FP4_SHARD_EXPERT_COLUMN) {
        if ((st = split(fn, d, "N", d->n, moe_tp, &out->n))) return st;
      } else if ((st = split(fn, d, "K", d->k, moe_tp, &out->k))) {
        return st;
      }
      /* Experts a token touches on one rank; in 64 bits, since active may be as large as INT_MAX. */
      int64_t touched = ((int64_t)d->active + ep - 1) / ep;
      if (touched > experts) touched = experts;
      out->experts = (int)experts;
      out->active = d->active;
      out->count = d->layers * touched;
      break;
    }
  }
  return FP4_OK;
}

/* ---- the embedded sets ------------------------------------------------------------------------- */

#define DENSE(nm, N, K, L, kind, sto) {nm, N, K, L, kind, sto, 0, 0, 0, 0, 0}
#define QKV(nm, QOUT, KVH, HD, K, L, sto) {nm, (QOUT) + 2 * (KVH) * (HD), K, L, FP4_SHARD_QKV, sto, 0, 0, QOUT, KVH, HD}
#define EXPERT(nm, N, K, L, kind, E, A) {nm, N, K, L, kind, "nvfp4", E, A, 0, 0, 0}

/* Qwen3.5-397B-A17B (nvidia/Qwen3.5-397B-A17B-NVFP4): 60 layers = 45 Gated DeltaNet + 15 full
 * attention, MoE (512 experts, 10 active, one shared expert) in every layer, one BF16 MTP block. */
static const fp4_linear_desc qwen35_397b[] = {
    DENSE("linear_attn.in_proj_qkvz", 20480, 4096, 45, FP4_SHARD_COLUMN, "bf16"),
    DENSE("linear_attn.in_proj_ba", 128, 4096, 45, FP4_SHARD_COLUMN, "bf16"),
    DENSE("linear_attn.out_proj", 4096, 8192, 45, FP4_SHARD_ROW, "bf16"),
    QKV("self_attn.qkv_proj", 16384, 2, 256, 4096, 15, "bf16"),
    DENSE("self_attn.o_proj", 4096, 8192, 15, FP4_SHARD_ROW, "bf16"),
    DENSE("mlp.gate", 512, 4096, 60, FP4_SHARD_REPLICATED, "bf16"),
    DENSE("mlp.shared_expert.gate_up_proj", 2048, 4096, 60, FP4_SHARD_COLUMN, "nvfp4"),
    DENSE("mlp.shared_expert.down_proj", 4096, 1024, 60, FP4_SHARD_ROW, "nvfp4"),
    EXPERT("mlp.experts.gate_up_proj", 2048, 4096, 60, FP4_SHARD_EXPERT_COLUMN, 512, 10),
    EXPERT("mlp.experts.down_proj", 4096, 1024, 60, FP4_SHARD_EXPERT_ROW, 512, 10),
    DENSE("lm_head", 248320, 4096, 1, FP4_SHARD_COLUMN, "bf16"),
    DENSE("mtp.fc", 4096, 8192, 1, FP4_SHARD_REPLICATED, "bf16"),
};

/* Llama-3.1-8B (NVFP4, every linear; lm_head BF16). */
static const fp4_linear_desc llama31_8b[] = {
    QKV("self_attn.qkv_proj", 4096, 8, 128, 4096, 32, "nvfp4"),
    DENSE("self_attn.o_proj", 4096, 4096, 32, FP4_SHARD_ROW, "nvfp4"),
    DENSE("mlp.gate_up_proj", 28672, 4096, 32, FP4_SHARD_COLUMN, "nvfp4"),
    DENSE("mlp.down_proj", 4096, 14336, 32, FP4_SHARD_ROW, "nvfp4"),
    DENSE("lm_head", 128256, 4096, 1, FP4_SHARD_COLUMN, "bf16"),
};

/* Llama-3.3-70B (NVFP4, every linear; lm_head BF16). */
static const fp4_linear_desc llama33_70b[] = {
    QKV("self_attn.qkv_proj", 8192, 8, 128, 8192, 80, "nvfp4"),
    DENSE("self_attn.o_proj", 8192, 8192, 80, FP4_SHARD_ROW, "nvfp4"),
    DENSE("mlp.gate_up_proj", 57344, 8192, 80, FP4_SHARD_COLUMN, "nvfp4"),
    DENSE("mlp.down_proj", 8192, 28672, 80, FP4_SHARD_ROW, "nvfp4"),
    DENSE("lm_head", 128256, 8192, 1, FP4_SHARD_COLUMN, "bf16"),
};

/* Qwen3-30B-A3B: 48 layers, 128 experts, 8 active, no shared expert. */
static const fp4_linear_desc qwen3_30b_a3b[] = {
    QKV("self_attn.qkv_proj", 4096, 4, 128, 2048, 48, "nvfp4"),
    DENSE("self_attn.o_proj", 2048, 4096, 48, FP4_SHARD_ROW, "nvfp4"),
    DENSE("mlp.gate", 128, 2048, 48, FP4_SHARD_REPLICATED, "bf16"),
    EXPERT("mlp.experts.gate_up_proj", 1536, 2048, 48, FP4_SHARD_EXPERT_COLUMN, 128, 8),
    EXPERT("mlp.experts.down_proj", 2048, 768, 48, FP4_SHARD_EXPERT_ROW, 128, 8),
    DENSE("lm_head", 151936, 2048, 1, FP4_SHARD_COLUMN, "bf16"),
};

/* DeepSeek-R1: 61 layers (0-2 dense MLP, 3-60 MoE with 256 experts, 8 active, one shared expert),
 * MLA attention and router BF16, one MTP layer (num_nextn_predict_layers = 1). */
static const fp4_linear_desc deepseek_r1[] = {
    DENSE("self_attn.q_a_proj", 1536, 7168, 61, FP4_SHARD_REPLICATED, "bf16"),
    DENSE("self_attn.q_b_proj", 24576, 1536, 61, FP4_SHARD_COLUMN, "bf16"),
    DENSE("self_attn.kv_a_proj_with_mqa", 576, 7168, 61, FP4_SHARD_REPLICATED, "bf16"),
    DENSE("self_attn.kv_b_proj", 32768, 512, 61, FP4_SHARD_COLUMN, "bf16"),
    DENSE("self_attn.o_proj", 7168, 16384, 61, FP4_SHARD_ROW, "bf16"),
    DENSE("mlp.gate_up_proj (dense layers 0-2)", 36864, 7168, 3, FP4_SHARD_COLUMN, "nvfp4"),
    DENSE("mlp.down_proj (dense layers 0-2)", 7168, 18432, 3, FP4_SHARD_ROW, "nvfp4"),
    DENSE("mlp.gate", 256, 7168, 58, FP4_SHARD_REPLICATED, "bf16"),
    DENSE("mlp.shared_experts.gate_up_proj", 4096, 7168, 58, FP4_SHARD_COLUMN, "nvfp4"),
    DENSE("mlp.shared_experts.down_proj", 7168, 2048, 58, FP4_SHARD_ROW, "nvfp4"),
    EXPERT("mlp.experts.gate_up_proj", 4096, 7168, 58, FP4_SHARD_EXPERT_COLUMN, 256, 8),
    EXPERT("mlp.experts.down_proj", 7168, 2048, 58, FP4_SHARD_EXPERT_ROW, 256, 8),
    DENSE("lm_head", 129280, 7168, 1, FP4_SHARD_COLUMN, "bf16"),
    DENSE("mtp.eh_proj", 7168, 14336, 1, FP4_SHARD_REPLICATED, "bf16"),
};

#define SET(nm, arr) {nm, arr, (int)(sizeof arr / sizeof *arr)}
static const struct {
  const char *name;
  const fp4_linear_desc *linears;
  int count;
} shape_sets[] = {
    SET("qwen3.5-397b-a17b", qwen35_397b), SET("llama-3.1-8b", llama31_8b),   SET("llama-3.3-70b", llama33_70b),
    SET("qwen3-30b-a3b", qwen3_30b_a3b),  SET("deepseek-r1", deepseek_r1),
};
static const int shape_set_count = (int)(sizeof shape_sets / sizeof *shape_sets);

const char *fp4_shape_set_name(int index) {
  return index >= 0 && index < shape_set_count ? shape_sets[index].name : NULL;
}

fp4_status fp4_shape_set(const char *model, int tp, int ep, fp4_gemm_shape *shapes, int max, int *count) {
  fp4_clear_error();
  static const char fn[] = "fp4_shape_set";
  if (!model) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: model is NULL", fn);
  if (!count) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: count is NULL", fn);
  if (max < 0 || (max > 0 && !shapes))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: shapes is NULL or max (%d) is negative", fn, max);
  *count = 0;
  fp4_status st = fp4_parallel_check(fn, tp, ep);
  if (st) return st;
  for (int s = 0; s < shape_set_count; s++) {
    if (strcmp(shape_sets[s].name, model)) continue;
    for (int i = 0; i < shape_sets[s].count; i++) {
      fp4_gemm_shape g;
      if ((st = fp4_linear_shard(fn, &shape_sets[s].linears[i], tp, ep, &g))) return st;
      if (i < max) shapes[i] = g;
    }
    *count = shape_sets[s].count;
    return FP4_OK;
  }
  char names[256] = "";
  for (int s = 0; s < shape_set_count; s++) {
    size_t len = strlen(names);
    snprintf(names + len, sizeof names - len, "%s%s", s ? ", " : "", shape_sets[s].name);
  }
  return fp4_fail(FP4_ERR_NOT_FOUND, "%s: no embedded shape set named '%s' (known: %s)", fn, model, names);
}
