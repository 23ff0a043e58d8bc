/* End to end: a small Qwen3.5-shaped BF16 checkpoint (real tensor names, small dims, two shards,
 * an MTP block) -> `fp4kit quantize` -> inspect -> load an expert weight -> W4A16 GEMM on the ref
 * backend, checked against an independent double computation on the dequantized weight, and the
 * weight checked against the BF16 original. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4kit_model.h"

#include "model_test_check.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct { char name[256]; int ndim; int64_t shape[3]; } spec;
static spec specs[256];
static int nspecs;
static void add(const char *name, int ndim, int64_t a, int64_t b, int64_t c) {
  spec *s = &specs[nspecs++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->ndim = ndim;
  s->shape[0] = a;
  s->shape[1] = b;
  s->shape[2] = c;
}

static void add_moe(const char *prefix, int experts) {
  char n[200];
  for (int e = 0; e < experts; e++) {
    snprintf(n, sizeof n, "%s.mlp.experts.%d.gate_proj.weight", prefix, e);
    add(n, 2, 32, 64, 0);
    snprintf(n, sizeof n, "%s.mlp.experts.%d.up_proj.weight", prefix, e);
    add(n, 2, 32, 64, 0);
    snprintf(n, sizeof n, "%s.mlp.experts.%d.down_proj.weight", prefix, e);
    add(n, 2, 64, 32, 0);
  }
  snprintf(n, sizeof n, "%s.mlp.gate.weight", prefix);
  add(n, 2, 4, 64, 0);
  snprintf(n, sizeof n, "%s.mlp.shared_expert.gate_proj.weight", prefix);
  add(n, 2, 32, 64, 0);
  snprintf(n, sizeof n, "%s.mlp.shared_expert.up_proj.weight", prefix);
  add(n, 2, 32, 64, 0);
  snprintf(n, sizeof n, "%s.mlp.shared_expert.down_proj.weight", prefix);
  add(n, 2, 64, 32, 0);
  snprintf(n, sizeof n, "%s.mlp.shared_expert_gate.weight", prefix);
  add(n, 2, 1, 64, 0);
}

static void add_attention(const char *p) {
  char n[200];
  snprintf(n, sizeof n, "%s.self_attn.q_proj.weight", p);
  add(n, 2, 128, 64, 0);
  snprintf(n, sizeof n, "%s.self_attn.k_proj.weight", p);
  add(n, 2, 32, 64, 0);
  snprintf(n, sizeof n, "%s.self_attn.v_proj.weight", p);
  add(n, 2, 32, 64, 0);
  snprintf(n, sizeof n, "%s.self_attn.o_proj.weight", p);
  add(n, 2, 64, 64, 0);
  snprintf(n, sizeof n, "%s.input_layernorm.weight", p);
  add(n, 1, 64, 0, 0);
}

/* Writes specs [from, to) into path with random BF16 data; returns the expert weight kept. */
static void write_shard(const char *path, int from, int to, const char *keep, uint16_t *kept) {
  fp4_st_writer *w = NULL;
  CHECK(fp4_st_writer_create(path, &w) == FP4_OK, "%s", fp4_last_error());
  for (int i = from; i < to; i++)
    CHECK(fp4_st_writer_declare(w, specs[i].name, FP4_ST_BF16, specs[i].ndim, specs[i].shape) == FP4_OK, "%s",
          fp4_last_error());
  for (int i = from; i < to; i++) {
    int64_t n = 1;
    for (int d = 0; d < specs[i].ndim; d++) n *= specs[i].shape[d];
    uint16_t *data = malloc((size_t)n * 2);
    for (int64_t j = 0; j < n; j++) {
      double g = (uniform() - 0.5) * 0.2 * (j % 97 == 0 ? 8.0 : 1.0); /* a few outliers */
      data[j] = fp4_bf16_from_f32((float)g);
    }
    if (!strcmp(specs[i].name, keep)) memcpy(kept, data, (size_t)n * 2);
    CHECK(fp4_st_writer_write(w, specs[i].name, data, (size_t)n * 2) == FP4_OK, "%s", fp4_last_error());
    free(data);
  }
  CHECK(fp4_st_writer_finish(w) == FP4_OK, "%s", fp4_last_error());
}

static const cJSON *gemm(const cJSON *doc, const char *name) {
  for (const cJSON *e = cJSON_GetObjectItem(doc, "gemms")->child; e; e = e->next)
    if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, name)) return e;
  return NULL;
}
static double num(const cJSON *o, const char *k) {
  const cJSON *v = o ? cJSON_GetObjectItem(o, k) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(void) {
  char exe[PATH_MAX] = "", tool[PATH_MAX + 32];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(tool, sizeof tool, "%s/../tools/fp4kit", exe);
  if (access(tool, X_OK) != 0) {
    printf("skip: the fp4kit command is not built next to the tests (%s)\n", tool);
    return 77;
  }
  char dir[] = "/tmp/fp4kit_e2e_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char in[600], out[600], path[700], cmd[16384];
  snprintf(in, sizeof in, "%s/bf16", dir);
  snprintf(out, sizeof out, "%s/nvfp4", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s", in);
  if (system(cmd) != 0) return 1;

  const char *L = "model.language_model";
  char p[200];
  add("model.language_model.embed_tokens.weight", 2, 128, 64, 0);
  snprintf(p, sizeof p, "%s.layers.0", L); /* Gated DeltaNet layer */
  add("model.language_model.layers.0.linear_attn.in_proj_qkv.weight", 2, 96, 64, 0);
  add("model.language_model.layers.0.linear_attn.in_proj_z.weight", 2, 64, 64, 0);
  add("model.language_model.layers.0.linear_attn.in_proj_b.weight", 2, 4, 64, 0);
  add("model.language_model.layers.0.linear_attn.in_proj_a.weight", 2, 4, 64, 0);
  add("model.language_model.layers.0.linear_attn.out_proj.weight", 2, 64, 64, 0);
  add("model.language_model.layers.0.linear_attn.conv1d.weight", 3, 96, 1, 4);
  add("model.language_model.layers.0.linear_attn.norm.weight", 1, 16, 0, 0);
  add("model.language_model.layers.0.input_layernorm.weight", 1, 64, 0, 0);
  add_moe(p, 4);
  const int shard1_end = nspecs;
  snprintf(p, sizeof p, "%s.layers.1", L); /* full attention layer */
  add_attention(p);
  add_moe(p, 4);
  add("model.language_model.norm.weight", 1, 64, 0, 0);
  add("lm_head.weight", 2, 128, 64, 0);
  add("mtp.fc.weight", 2, 64, 128, 0);
  add_attention("mtp.layers.0");
  add_moe("mtp.layers.0", 4);
  add("mtp.norm.weight", 1, 64, 0, 0);

  const char *expert = "model.language_model.layers.1.mlp.experts.2.down_proj";
  char expert_w[256];
  snprintf(expert_w, sizeof expert_w, "%s.weight", expert);
  uint16_t *orig = calloc(64 * 32, 2);
  snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", in);
  write_shard(path, 0, shard1_end, expert_w, orig);
  snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", in);
  write_shard(path, shard1_end, nspecs, expert_w, orig);
  FILE *f;
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", in);
  f = fopen(path, "w");
  fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
  for (int i = 0; i < nspecs; i++)
    fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", specs[i].name, i < shard1_end ? 1 : 2);
  fprintf(f, "}}\n");
  fclose(f);
  snprintf(path, sizeof path, "%s/config.json", in);
  f = fopen(path, "w");
  fprintf(f, "{\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], \"model_type\": \"qwen3_5_moe\",\n"
             " \"text_config\": {\"model_type\": \"qwen3_5_moe_text\", \"hidden_size\": 64, \"num_hidden_layers\": 2,\n"
             "  \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 32, \"moe_intermediate_size\": 32,\n"
             "  \"num_experts\": 4, \"num_experts_per_tok\": 2, \"vocab_size\": 128, \"mtp_num_hidden_layers\": 1}}\n");
  fclose(f);
  snprintf(path, sizeof path, "%s/tokenizer.json", in);
  f = fopen(path, "w");
  fprintf(f, "{}\n");
  fclose(f);

  /* Quantize with the command. */
  snprintf(cmd, sizeof cmd, "%s quantize %s %s --quiet --input-amax 4", tool, in, out);
  CHECK(system(cmd) == 0, "%s failed", cmd);
  snprintf(path, sizeof path, "%s/tokenizer.json", out);
  CHECK(access(path, R_OK) == 0, "tokenizer.json not copied");

  /* Inspect (library call behind `fp4kit inspect --json`). */
  char *report = NULL;
  fp4_inspect_options io = {1, 1, 1};
  CHECK(fp4_model_inspect(out, &io, &report) == FP4_OK, "%s", fp4_last_error());
  cJSON *doc = report ? cJSON_Parse(report) : NULL;
  CHECK(doc != NULL, "inspect JSON does not parse");
  if (doc) {
    const cJSON *q = cJSON_GetObjectItem(doc, "quantization");
    CHECK(!strcmp(cJSON_GetObjectItem(q, "algorithm")->valuestring, "NVFP4"), "algorithm");
    CHECK(!strcmp(cJSON_GetObjectItem(q, "source")->valuestring, "hf_quant_config.json"), "source");
    const cJSON *census = cJSON_GetObjectItem(doc, "census");
    /* Quantized: per layer 4 experts x 3 + 3 shared = 15, layer 0 DeltaNet in_proj_qkv/z + out_proj
     * (in_proj_a/b have N = 4 but K = 64: quantized too), layer 1 q/k/v/o. */
    CHECK(num(census, "nvfp4") == 15 * 2 + 5 + 4, "nvfp4 modules %g", num(census, "nvfp4"));
    const cJSON *mtp = cJSON_GetObjectItem(doc, "mtp");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(mtp, "present")) && num(mtp, "experts") == 4 &&
              !strcmp(cJSON_GetObjectItem(mtp, "storage")->valuestring, "bf16") && num(mtp, "config_layers") == 1,
          "mtp block: %s", report);
    const cJSON *g = gemm(doc, "model.language_model.layers.*.mlp.experts.*.down_proj");
    CHECK(g && num(g, "n") == 64 && num(g, "k") == 32 && num(g, "experts") == 4 && num(g, "count") == 2 * 2 &&
              !strcmp(cJSON_GetObjectItem(g, "dtype")->valuestring, "nvfp4"),
          "expert down_proj GEMM");
    CHECK(gemm(doc, "lm_head") && !strcmp(cJSON_GetObjectItem(gemm(doc, "lm_head"), "dtype")->valuestring, "bf16"),
          "lm_head kept BF16");
    cJSON_Delete(doc);
  }
  fp4_model_free(report);
  io.tp = 2;
  io.ep = 2;
  report = NULL;
  CHECK(fp4_model_inspect(out, &io, &report) == FP4_OK, "%s", fp4_last_error());
  doc = report ? cJSON_Parse(report) : NULL;
  if (doc) {
    const cJSON *g = gemm(doc, "model.language_model.layers.*.mlp.experts.*.down_proj");
    CHECK(g && num(g, "experts") == 2 && num(g, "k") == 32, "EP2 expert GEMM");
    g = gemm(doc, "model.language_model.layers.*.self_attn.q_proj");
    CHECK(g && num(g, "n") == 64, "TP2 q_proj N");
    cJSON_Delete(doc);
  }
  fp4_model_free(report);
  snprintf(cmd, sizeof cmd, "%s inspect %s --tp 2 > /dev/null", tool, out);
  CHECK(system(cmd) == 0, "%s failed", cmd);

  /* Load the expert weight (zero copy) and run a W4A16 GEMM on the reference backend. */
  fp4_safetensors *st = NULL;
  CHECK(fp4_safetensors_open(out, 0, &st) == FP4_OK, "%s", fp4_last_error());
  fp4_qmatrix w;
  if (st && fp4_safetensors_qmatrix(st, expert, &w) == FP4_OK) {
    CHECK(w.rows == 64 && w.cols == 32 && w.format == FP4_FORMAT_NVFP4 && w.layout == FP4_LAYOUT_LINEAR, "view");
    float *dq = malloc(64 * 32 * sizeof *dq);
    fp4_matrix dqm = {dq, 64, 32, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    CHECK(fp4_dequantize(&w, &dqm) == FP4_OK, "%s", fp4_last_error());
    /* FP4 keeps the weight within its rounding error: relative Frobenius error well under 0.2. */
    double e2 = 0, r2 = 0;
    for (int i = 0; i < 64 * 32; i++) {
      double o = fp4_bf16_to_f32(orig[i]);
      e2 += (dq[i] - o) * (dq[i] - o);
      r2 += o * o;
    }
    CHECK(r2 > 0 && sqrt(e2 / r2) < 0.2, "dequantized weight error %g", sqrt(e2 / r2));
    const int M = 5;
    uint16_t x[5 * 32];
    for (int i = 0; i < M * 32; i++) x[i] = fp4_bf16_from_f32((float)(uniform() * 2 - 1));
    float y[5 * 64];
    for (int i = 0; i < M * 64; i++) y[i] = NAN;
    fp4_matrix a = {x, M, 32, 0, FP4_DTYPE_BF16, FP4_MEMORY_HOST};
    fp4_matrix ym = {y, M, 64, 0, FP4_DTYPE_F32, FP4_MEMORY_HOST};
    fp4_options opt = {"ref", NULL, 0, NULL, NULL};
    CHECK(fp4_mm_w4a16(NULL, &a, &w, 1.0f, &ym, &opt) == FP4_OK, "%s", fp4_last_error());
    double worst = 0;
    for (int m = 0; m < M; m++)
      for (int n = 0; n < 64; n++) {
        double ref = 0;
        for (int k = 0; k < 32; k++) ref += (double)fp4_bf16_to_f32(x[m * 32 + k]) * dq[n * 32 + k];
        double err = fabs(y[m * 64 + n] - ref) / (fabs(ref) + 1e-3);
        if (!(err <= worst)) worst = err;
      }
    CHECK(worst < 1e-5, "W4A16 GEMM differs from the double reference by %g (relative)", worst);
    free(dq);
  } else {
    CHECK(0, "cannot load %s: %s", expert, fp4_last_error());
  }
  /* The MTP expert and lm_head stayed BF16. */
  CHECK(st && fp4_safetensors_find(st, "mtp.layers.0.mlp.experts.0.gate_proj.weight")->dtype == FP4_ST_BF16, "mtp");
  CHECK(st && fp4_safetensors_find(st, "lm_head.weight")->dtype == FP4_ST_BF16, "lm_head");
  const fp4_st_tensor *router = st ? fp4_safetensors_find(st, "model.language_model.layers.0.mlp.gate.weight") : NULL;
  CHECK(router && router->dtype == FP4_ST_BF16, "the router was quantized");
  fp4_safetensors_close(st);

  /* The compressed-tensors and MXFP4 outputs load too. */
  const char *variants[] = {"--compressed-tensors", "--format mxfp4"};
  for (int v = 0; v < 2; v++) {
    snprintf(path, sizeof path, "%s/v%d", dir, v);
    snprintf(cmd, sizeof cmd, "%s quantize %s %s --quiet %s", tool, in, path, variants[v]);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    st = NULL;
    CHECK(fp4_safetensors_open(path, 0, &st) == FP4_OK, "%s", fp4_last_error());
    CHECK(st && fp4_safetensors_qmatrix(st, expert, &w) == FP4_OK &&
              w.format == (v ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4),
          "%s: %s", variants[v], fp4_last_error());
    fp4_safetensors_close(st);
  }
  /* Usage errors are reported, not crashes. */
  snprintf(cmd, sizeof cmd, "%s quantize %s %s --format int4 2>/dev/null", tool, in, out);
  CHECK(WEXITSTATUS(system(cmd)) == 2, "bad --format accepted");
  snprintf(cmd, sizeof cmd, "%s inspect %s/nothing 2>/dev/null", tool, dir);
  CHECK(WEXITSTATUS(system(cmd)) == 3, "missing directory accepted");

  free(orig);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("model end to end: all checks passed\n");
  return 0;
}
