/* fp4_model_inspect on what a user or an attacker may hand it: one .safetensors file (which must
 * be parsed as such, so that a malformed file is reported for what is wrong with it), an index file,
 * configs with numbers no integer can hold or that overflow the sharding arithmetic, text that is
 * not UTF-8, a directory name that is not, a FIFO as config.json and NULL arguments; and checkpoint
 * layouts the GEMM list must read right: a DeepSeek MTP layer and the exclude list's spellings,
 * vision blocks and GPT-2 layers, gpt-oss MXFP4 experts, int4 pack-quantized weights, and tensors of no
 * known kind. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fp4kit_model.h"

#include "model_ckpt_testing.h"
#include "model_test_check.h"

static char root[] = "/tmp/fp4kit_inspin_XXXXXX";

static fp4_status inspect(const char *path, int tp, int ep, char **report) {
  fp4_inspect_options o = {tp, ep, 1};
  *report = NULL;
  return fp4_model_inspect(path, &o, report);
}

/* Inspecting the file path must fail with FP4_ERR_FORMAT and a message naming the file and want. */
static void malformed(const char *what, const char *header, size_t data, uint64_t len_field, const char *want) {
  char path[600], *report = NULL;
  snprintf(path, sizeof path, "%s/bad.safetensors", root);
  CHECK(ckpt_raw(path, header, data, len_field), "%s: write", what);
  fp4_status st = inspect(path, 1, 1, &report);
  CHECK(st == FP4_ERR_FORMAT && strstr(fp4_last_error(), path) && strstr(fp4_last_error(), want),
        "%s: %s '%s' (want the file and '%s')", what, fp4_status_str(st), fp4_last_error(), want);
  fp4_model_free(report);
}

static const cJSON *gemm(const cJSON *doc, const char *name) {
  for (const cJSON *e = cJSON_GetObjectItem(doc, "gemms")->child; e; e = e->next)
    if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, name)) return e;
  return NULL;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItem(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItem(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* The row of that name among the MTP rows (mtp 1) or the others (mtp 0). */
static const cJSON *gemm_row(const cJSON *doc, const char *name, int mtp) {
  for (const cJSON *e = cJSON_GetObjectItem(doc, "gemms")->child; e; e = e->next)
    if (!strcmp(str(e, "name"), name) && cJSON_IsTrue(cJSON_GetObjectItem(e, "mtp")) == mtp) return e;
  return NULL;
}

/* A fresh directory root/name in out. */
static void subdir(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", root, name);
  CHECK(mkdir(out, 0700) == 0, "mkdir %s", out);
}

/* The JSON report of dir, parsed (NULL, reported, on failure); *text keeps the text when asked for. */
static cJSON *inspect_doc(const char *dir, int tp, int ep, char **text) {
  char *report = NULL;
  fp4_status st = inspect(dir, tp, ep, &report);
  CHECK(st == FP4_OK, "inspect %s: %s %s", dir, fp4_status_str(st), fp4_last_error());
  cJSON *doc = report ? cJSON_Parse(report) : NULL;
  CHECK(!report || doc, "the report of %s does not parse: %s", dir, report);
  if (text) *text = report;
  else fp4_model_free(report);
  return doc;
}

/* DeepSeek V3: decoder layers 0-2 and the MTP layer 3 (index = num_hidden_layers). The MTP layer's
 * modules are rows of their own, and the exclude list is matched against their names in each
 * spelling of a pattern (glob, module name, regular expression), whatever the pattern says. */
static void deepseek_mtp(void) {
  char dir[600], path[700], cfg[1024];
  subdir(dir, sizeof dir, "deepseek");
  ckpt_tensor ts[16];
  char names[16][96];
  int nt = 0;
  for (int l = 0; l < 4; l++) {
    snprintf(names[nt], sizeof names[nt], "model.layers.%d.self_attn.o_proj.weight", l);
    ts[nt] = (ckpt_tensor){names[nt], 32, 64, -1}, nt++;
    snprintf(names[nt], sizeof names[nt], "model.layers.%d.self_attn.q_a_proj.weight", l);
    ts[nt] = (ckpt_tensor){names[nt], 16, 32, -1}, nt++;
    for (int e = 0; l > 0 && e < 2; e++) {
      snprintf(names[nt], sizeof names[nt], "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
      ts[nt] = (ckpt_tensor){names[nt], 32, 16, -1}, nt++;
    }
  }
  ts[nt++] = (ckpt_tensor){"model.layers.3.eh_proj.weight", 32, 64, -1};
  ts[nt++] = (ckpt_tensor){"model.layers.3.shared_head.head.weight", 128, 32, -1};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_shard(path, ts, nt), "%s", fp4_last_error());
  /* exclude_modules, and how many of the MTP layer's 6 modules it excludes. */
  static const struct {
    const char *patterns;
    int excluded;
  } cases[] = {{"\"model.layers.3*\", \"lm_head\"", 6},
               {"\"lm_head\"", 0},
               {"\"model.layers.3\"", 6},
               {"\"re:model\\\\.layers\\\\.3\\\\.\"", 6},
               {"\"model.layers.*.eh_proj\", \"re:.*shared_head\"", 2},
               {"\"re:model\\\\.layers\\\\.\\\\d+\\\\.self_attn\"", 2},
               {"\"model.layers.[3-4].mlp.experts.?.down_proj\"", 2},
               /* a module name excludes itself and what it holds, not names it is a prefix of */
               {"\"model.layers.3.eh\", \"model.layers.3.shared_head\"", 1},
               {"\"model.layers.3.eh_proj\"", 1},
               {"\"re:model\\\\.layers\\\\.\\\\d{1}\"", 0}}; /* last: the text below reads it */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"num_hidden_layers\": 3, \"num_nextn_predict_layers\": 1,"
             " \"n_routed_experts\": 2, \"num_experts_per_tok\": 1, \"quantization_config\": {\"quant_method\": "
             "\"modelopt\", \"exclude_modules\": [%s]}}\n", cases[c].patterns);
    CHECK(ckpt_text(dir, "config.json", cfg), "config");
    char *text = NULL;
    cJSON *doc = inspect_doc(dir, 1, 1, &text);
    if (!doc) continue;
    const cJSON *mtp = cJSON_GetObjectItem(doc, "mtp");
    CHECK(num(mtp, "modules") == 6 && num(mtp, "modules_excluded") == cases[c].excluded &&
              cJSON_IsTrue(cJSON_GetObjectItem(mtp, "listed_in_excludes")) == (cases[c].excluded == 6),
          "MTP modules in the exclude list [%s]: want %d of 6: %s", cases[c].patterns, cases[c].excluded, text);
    fp4_model_free(text);
    if (c == 0) { /* the rows: decoder layers apart from the MTP layer */
      const cJSON *g = gemm_row(doc, "model.layers.*.self_attn.o_proj", 0);
      CHECK(g && num(g, "count") == 3, "o_proj of the 3 decoder layers: count %g", g ? num(g, "count") : -1);
      g = gemm_row(doc, "model.layers.*.self_attn.o_proj", 1);
      CHECK(g && num(g, "count") == 1, "o_proj of the MTP layer: count %g", g ? num(g, "count") : -1);
      g = gemm_row(doc, "model.layers.*.mlp.experts.*.down_proj", 0);
      CHECK(g && num(g, "count") == 2 && num(g, "experts") == 2, "experts of decoder layers 1-2: count %g",
            g ? num(g, "count") : -1);
      g = gemm_row(doc, "model.layers.*.mlp.experts.*.down_proj", 1);
      CHECK(g && num(g, "count") == 1 && num(g, "experts") == 2, "experts of the MTP layer: count %g",
            g ? num(g, "count") : -1);
      CHECK(gemm_row(doc, "model.layers.*.eh_proj", 1) && !gemm_row(doc, "model.layers.*.eh_proj", 0), "eh_proj is MTP");
      CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "gemms")) == 8, "8 rows: 3 of the decoder layers, 5 of the MTP layer");
    }
    if (strstr(cases[c].patterns, "{1}")) {
      const cJSON *ne = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "quantization"), "patterns_not_evaluated");
      CHECK(cJSON_GetArraySize(ne) == 1 && strstr(ne->child->valuestring, "{1}"),
            "a regular expression with a repetition count is reported as not evaluated");
    }
    cJSON_Delete(doc);
  }
  /* The text says so when none is listed. */
  char *report = NULL;
  fp4_inspect_options text = {1, 1, 0};
  CHECK(fp4_model_inspect(dir, &text, &report) == FP4_OK && strstr(report, "(0 of 6") == NULL &&
            strstr(report, "not evaluated"),
        "text: %s", report ? report : fp4_last_error());
  fp4_model_free(report);
  snprintf(cfg, sizeof cfg, "{\"num_hidden_layers\": 3, \"num_nextn_predict_layers\": 1, \"quantization_config\": "
           "{\"quant_method\": \"modelopt\", \"exclude_modules\": [\"model.layers.*.eh_proj\"]}}");
  CHECK(ckpt_text(dir, "config.json", cfg), "config");
  CHECK(fp4_model_inspect(dir, &text, &report) == FP4_OK && strstr(report, "(1 of 6 modules in the exclude list)"),
        "text: %s", report ? report : fp4_last_error());
  fp4_model_free(report);
  snprintf(cfg, sizeof cfg, "{\"num_hidden_layers\": 3, \"num_nextn_predict_layers\": 1}");
  CHECK(ckpt_text(dir, "config.json", cfg), "config");
  CHECK(fp4_model_inspect(dir, &text, &report) == FP4_OK && strstr(report, "(not in the exclude list)"), "text: %s",
        report ? report : fp4_last_error());
  fp4_model_free(report);
}

/* Every numeric path component collapses: a vision tower's blocks.N and GPT-2's h.N are one row each,
 * counting their instances, while a routed expert's row still counts layers and experts. */
static void numeric_components(void) {
  char dir[600], path[700];
  subdir(dir, sizeof dir, "blocks");
  const ckpt_tensor ts[] = {{"model.visual.blocks.0.attn.qkv.weight", 96, 32, -1},
                            {"model.visual.blocks.1.attn.qkv.weight", 96, 32, -1},
                            {"model.visual.blocks.2.attn.qkv.weight", 96, 32, -1},
                            {"transformer.h.0.mlp.c_fc.weight", 64, 32, -1},
                            {"transformer.h.1.mlp.c_fc.weight", 64, 32, -1},
                            {"transformer.h.10.mlp.c_fc.weight", 64, 32, -1},
                            {"model.layers.0.mlp.experts.0.down_proj.weight", 32, 16, -1},
                            {"model.layers.0.mlp.experts.1.down_proj.weight", 32, 16, -1},
                            {"model.layers.0.mlp.experts.2.down_proj.weight", 32, 16, -1},
                            {"model.layers.1.mlp.experts.0.down_proj.weight", 32, 16, -1},
                            {"model.layers.1.mlp.experts.1.down_proj.weight", 32, 16, -1},
                            {"model.layers.1.mlp.experts.2.down_proj.weight", 32, 16, -1}};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_shard(path, ts, (int)(sizeof ts / sizeof ts[0])), "%s", fp4_last_error());
  CHECK(ckpt_text(dir, "config.json", "{\"num_hidden_layers\": 2, \"num_experts_per_tok\": 1}\n"), "config");
  char *text = NULL;
  cJSON *doc = inspect_doc(dir, 1, 1, &text);
  if (!doc) return;
  const cJSON *g = gemm_row(doc, "model.visual.blocks.*.attn.qkv", 0);
  CHECK(g && num(g, "count") == 3 && num(g, "n") == 96, "vision blocks: one row of count 3: %s", text);
  g = gemm_row(doc, "transformer.h.*.mlp.c_fc", 0);
  CHECK(g && num(g, "count") == 3, "transformer.h.N: one row of count 3: %s", text);
  g = gemm_row(doc, "model.layers.*.mlp.experts.*.down_proj", 0);
  CHECK(g && num(g, "count") == 2 && num(g, "experts") == 3, "experts: 2 layers x 1 active of 3: %s", text);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "gemms")) == 3, "3 rows: %s", text);
  fp4_model_free(text);
  cJSON_Delete(doc);
}

/* gpt-oss: MXFP4 experts as X_blocks U8 [E, N, K/32, 16] + X_scales U8 [E, N, K/32], the exclude list in
 * modules_to_not_convert; a tensor of no known kind (a 3-D convolution weight) is reported, not dropped. */
static void gpt_oss(void) {
  char dir[600], path[700];
  subdir(dir, sizeof dir, "gpt-oss");
  ckpt_decl ts[32];
  char names[32][96];
  int nt = 0;
#define DECL(dt, nd, ...)                                                     \
  do {                                                                        \
    ts[nt] = (ckpt_decl){names[nt], dt, nd, {__VA_ARGS__}};                   \
    nt++;                                                                     \
  } while (0)
  for (int l = 0; l < 2; l++) {
    static const char *const parts[] = {"mlp.experts.gate_up_proj_blocks", "mlp.experts.gate_up_proj_scales",
                                        "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_blocks",
                                        "mlp.experts.down_proj_scales", "mlp.experts.down_proj_bias",
                                        "mlp.router.weight", "mlp.router.bias", "self_attn.q_proj.weight",
                                        "self_attn.sinks", "input_layernorm.weight", "linear_attn.conv1d.weight"};
    for (int p = 0; p < 12; p++) snprintf(names[nt + p], sizeof names[0], "model.layers.%d.%s", l, parts[p]);
    DECL(FP4_ST_U8, 4, 4, 128, 2, 16);
    DECL(FP4_ST_U8, 3, 4, 128, 2);
    DECL(FP4_ST_BF16, 2, 4, 128);
    DECL(FP4_ST_U8, 4, 4, 64, 2, 16);
    DECL(FP4_ST_U8, 3, 4, 64, 2);
    DECL(FP4_ST_BF16, 2, 4, 64);
    DECL(FP4_ST_BF16, 2, 4, 64);
    DECL(FP4_ST_BF16, 1, 4);
    DECL(FP4_ST_BF16, 2, 64, 64);
    DECL(FP4_ST_BF16, 1, 8);
    DECL(FP4_ST_BF16, 1, 64);
    DECL(FP4_ST_BF16, 3, 8, 1, 4);
  }
  snprintf(names[nt], sizeof names[0], "model.embed_tokens.weight");
  DECL(FP4_ST_BF16, 2, 100, 64);
  snprintf(names[nt], sizeof names[0], "lm_head.weight");
  DECL(FP4_ST_BF16, 2, 100, 64);
#undef DECL
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_zeros(path, ts, nt), "%s", fp4_last_error());
  CHECK(ckpt_text(dir, "config.json",
                  "{\"architectures\": [\"GptOssForCausalLM\"], \"num_hidden_layers\": 2, \"num_local_experts\": 4,"
                  " \"num_experts_per_tok\": 2, \"quantization_config\": {\"quant_method\": \"mxfp4\", "
                  "\"modules_to_not_convert\": [\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", "
                  "\"model.embed_tokens\", \"lm_head\"]}}\n"),
        "config");
  char *text = NULL;
  cJSON *doc = inspect_doc(dir, 1, 1, &text);
  if (!doc) return;
  const cJSON *q = cJSON_GetObjectItem(doc, "quantization");
  CHECK(!strcmp(str(q, "algorithm"), "MXFP4") && cJSON_GetArraySize(cJSON_GetObjectItem(q, "excluded_modules")) == 4,
        "gpt-oss quantization: %s", text);
  CHECK(num(cJSON_GetObjectItem(doc, "census"), "mxfp4") == 2 * 2 * 4, "16 MXFP4 expert modules: %s", text);
  const cJSON *g = gemm_row(doc, "model.layers.*.mlp.experts.gate_up_proj", 0);
  /* 2 layers x 2 active of 4 experts */
  CHECK(g && num(g, "n") == 128 && num(g, "k") == 64 && num(g, "experts") == 4 && num(g, "count") == 4 &&
            !strcmp(str(g, "dtype"), "mxfp4"),
        "gpt-oss gate_up: %s", text);
  g = gemm_row(doc, "model.layers.*.mlp.experts.down_proj", 0);
  CHECK(g && num(g, "n") == 64 && num(g, "k") == 64 && !strcmp(str(g, "dtype"), "mxfp4"), "gpt-oss down: %s", text);
  /* Every tensor has a kind; the conv1d weights are listed as unclassified. */
  const cJSON *k = cJSON_GetObjectItem(doc, "tensor_kinds");
  CHECK(num(k, "gemm_weights") == 9 && num(k, "gemm_scales_and_biases") == 10 && num(k, "embeddings") == 1 &&
            num(k, "vectors") == 4 && num(k, "unclassified") == 2,
        "tensor kinds: %s", text);
  double sum = 0;
  for (const cJSON *e = k ? k->child : NULL; e; e = e->next) sum += e->valuedouble;
  CHECK(sum == num(doc, "tensors"), "the kinds add up to %g of %g tensors", sum, num(doc, "tensors"));
  const cJSON *u = cJSON_GetObjectItem(doc, "unclassified");
  CHECK(cJSON_GetArraySize(u) == 1 && !strcmp(str(u->child, "name"), "model.layers.*.linear_attn.conv1d.weight") &&
            num(u->child, "tensors") == 2 && cJSON_GetArraySize(cJSON_GetObjectItem(u->child, "shape")) == 3,
        "unclassified conv1d: %s", text);
  fp4_model_free(text);
  cJSON_Delete(doc);
  doc = inspect_doc(dir, 2, 2, NULL);
  g = doc ? gemm_row(doc, "model.layers.*.mlp.experts.gate_up_proj", 0) : NULL;
  CHECK(g && num(g, "experts") == 2 && num(g, "n") == 128, "gpt-oss EP 2: 2 experts a rank");
  cJSON_Delete(doc);
  fp4_inspect_options plain = {1, 1, 0};
  CHECK(fp4_model_inspect(dir, &plain, &text) == FP4_OK && strstr(text, "unclassified 2 tensor(s)") &&
            strstr(text, "conv1d.weight bf16 [8,1,4] x2"),
        "text: %s", text ? text : fp4_last_error());
  fp4_model_free(text);
}

/* Names of other families, and tensors the gpt-oss reading must not take:
 *   - Mixtral's experts w1 / w3 (gate / up: column-parallel, TP 2 halves N) and w2 (down:
 *     row-parallel, TP 2 halves K);
 *   - the decoder layer of a name is the index after its first "layers.": a module nested in layer 0
 *     whose own path has "layers.2" stays in layer 0 and is not the MTP layer 2;
 *   - "_blocks" of 8 bytes a block are not MXFP4 (32 values are 16 bytes): U8 storage;
 *   - "_blocks" with more experts than an int holds (and no elements) are no GEMM. */
static void other_names(void) {
  char dir[600], path[700];
  subdir(dir, sizeof dir, "mixtral");
  ckpt_decl ts[24];
  char names[12][96];
  int nt = 0;
  for (int l = 0; l < 2; l++)
    for (int e = 0; e < 2; e++)
      for (int w = 1; w <= 3; w++) {
        snprintf(names[nt], sizeof names[0], "model.layers.%d.block_sparse_moe.experts.%d.w%d.weight", l, e, w);
        ts[nt] = (ckpt_decl){names[nt], FP4_ST_BF16, 2, {w == 2 ? 32 : 64, w == 2 ? 64 : 32}};
        nt++;
      }
  ts[nt++] = (ckpt_decl){"model.layers.0.adapter.layers.2.proj.weight", FP4_ST_BF16, 2, {16, 32}};
  ts[nt++] = (ckpt_decl){"model.layers.1.mlp.experts.down_proj_blocks", FP4_ST_U8, 4, {2, 64, 2, 8}};
  ts[nt++] = (ckpt_decl){"model.layers.1.mlp.experts.down_proj_scales", FP4_ST_U8, 3, {2, 64, 2}};
  ts[nt++] = (ckpt_decl){"model.layers.1.mlp.experts.up_proj_blocks", FP4_ST_U8, 4, {(int64_t)1 << 31, 0, 1, 16}};
  ts[nt++] = (ckpt_decl){"model.layers.1.mlp.experts.up_proj_scales", FP4_ST_U8, 3, {(int64_t)1 << 31, 0, 1}};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_zeros(path, ts, nt), "%s", fp4_last_error());
  CHECK(ckpt_text(dir, "config.json",
                  "{\"num_hidden_layers\": 2, \"num_nextn_predict_layers\": 1, \"num_local_experts\": 2,"
                  " \"num_experts_per_tok\": 1}\n"),
        "config");
  char *text = NULL;
  cJSON *doc = inspect_doc(dir, 2, 1, &text);
  if (!doc) return;
  const cJSON *g1 = gemm_row(doc, "model.layers.*.block_sparse_moe.experts.*.w1", 0);
  const cJSON *g3 = gemm_row(doc, "model.layers.*.block_sparse_moe.experts.*.w3", 0);
  const cJSON *g2 = gemm_row(doc, "model.layers.*.block_sparse_moe.experts.*.w2", 0);
  CHECK(g1 && g3 && g2 && num(g1, "n") == 32 && num(g3, "n") == 32 && num(g2, "k") == 32 && num(g1, "k") == 32 &&
            num(g3, "k") == 32 && num(g2, "n") == 32,
        "Mixtral w1/w3 split N and w2 splits K over TP 2: %s", text);
  CHECK(gemm_row(doc, "model.layers.*.adapter.layers.*.proj", 0) && !gemm_row(doc, "model.layers.*.adapter.layers.*.proj", 1),
        "a nested layers.2 made a module of layer 0 an MTP one: %s", text);
  const cJSON *b = gemm_row(doc, "model.layers.*.mlp.experts.down_proj", 0);
  CHECK(b && !strcmp(str(b, "dtype"), "u8") && num(cJSON_GetObjectItem(doc, "census"), "mxfp4") <= 0,
        "8-byte blocks read as MXFP4: %s", text);
  CHECK(!gemm_row(doc, "model.layers.*.mlp.experts.up_proj", 0) && !gemm_row(doc, "model.layers.*.mlp.experts.up_proj", 1),
        "2^31 experts of blocks read as a GEMM: %s", text);
  fp4_model_free(text);
  cJSON_Delete(doc);
}

/* compressed-tensors pack-quantized: 8 int4 values in each I32 of weight_packed [N, K/8]. */
static void int4_packed(void) {
  char dir[600], path[700];
  subdir(dir, sizeof dir, "int4");
  const ckpt_decl ts[] = {{"model.layers.0.mlp.down_proj.weight_packed", FP4_ST_I32, 2, {64, 16}},
                          {"model.layers.0.mlp.down_proj.weight_scale", FP4_ST_BF16, 2, {64, 1}},
                          {"model.layers.0.mlp.down_proj.weight_shape", FP4_ST_I32, 1, {2}}};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_zeros(path, ts, 3), "%s", fp4_last_error());
  CHECK(ckpt_text(dir, "config.json", "{\"num_hidden_layers\": 1, \"quantization_config\": {\"quant_method\": "
                  "\"compressed-tensors\", \"format\": \"pack-quantized\"}}\n"), "config");
  char *text = NULL;
  cJSON *doc = inspect_doc(dir, 1, 1, &text);
  const cJSON *g = doc ? gemm_row(doc, "model.layers.*.mlp.down_proj", 0) : NULL;
  CHECK(g && !strcmp(str(g, "dtype"), "int4") && num(g, "k") == 128 && num(g, "n") == 64 &&
            num(cJSON_GetObjectItem(doc, "census"), "int4") == 1,
        "int4 pack-quantized: %s", text ? text : "");
  fp4_model_free(text);
  cJSON_Delete(doc);
}

/* A directory name that is not UTF-8 (Linux allows any bytes): the JSON report stays valid UTF-8. */
static void non_utf8_directory(void) {
  char dir[600], path[700];
  subdir(dir, sizeof dir, "bad\xff" "dir");
  const ckpt_tensor ts[] = {{"model.layers.0.self_attn.o_proj.weight", 32, 64, -1}};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_shard(path, ts, 1), "%s", fp4_last_error());
  char *text = NULL;
  cJSON *doc = inspect_doc(dir, 1, 1, &text);
  CHECK(text && !strchr(text, '\xff') && strstr(text, "bad\xef\xbf\xbd" "dir"),
        "the invalid byte of the directory name is written as U+FFFD: %s", text ? text : "");
  fp4_model_free(text);
  cJSON_Delete(doc);
}

/* A FIFO as config.json is refused at once: the alarm turns waiting for a writer into a failure. */
static void fifo_config(void) {
  char dir[600], path[700], *report = NULL;
  subdir(dir, sizeof dir, "fifo");
  const ckpt_tensor ts[] = {{"model.layers.0.self_attn.o_proj.weight", 32, 64, -1}};
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(ckpt_shard(path, ts, 1), "%s", fp4_last_error());
  snprintf(path, sizeof path, "%s/config.json", dir);
  CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
  alarm(30);
  fp4_status st = inspect(dir, 1, 1, &report);
  alarm(0);
  CHECK(st == FP4_ERR_FORMAT && strstr(fp4_last_error(), "config.json") && strstr(fp4_last_error(), "FIFO"),
        "config.json as a FIFO: %s %s", fp4_status_str(st), fp4_last_error());
  fp4_model_free(report);
}

int main(void) {
  if (!mkdtemp(root)) return 1;
  deepseek_mtp();
  numeric_components();
  gpt_oss();
  int4_packed();
  other_names();
  non_utf8_directory();
  fifo_config();
  char path[600], dir[600], cmd[16384], *report = NULL;

  /* One file, alone in its directory and beside a config. */
  snprintf(path, sizeof path, "%s/model.safetensors", root);
  const ckpt_tensor ts[] = {{"model.layers.0.mlp.experts.0.down_proj.weight", 32, 64, -1},
                            {"model.layers.0.mlp.experts.1.down_proj.weight", 32, 64, -1},
                            {"model.layers.0.mlp.experts.2.down_proj.weight", 32, 64, -1},
                            {"model.layers.0.mlp.experts.3.down_proj.weight", 32, 64, -1},
                            {"model.layers.0.self_attn.o_proj.weight", 32, 64, -1}};
  CHECK(ckpt_shard(path, ts, 5), "%s", fp4_last_error());
  fp4_status st = inspect(path, 1, 1, &report);
  CHECK(st == FP4_OK && report && strstr(report, "\"tensors\":\t5"), "inspect FILE: %s %s", fp4_status_str(st),
        fp4_last_error());
  fp4_model_free(report);
  CHECK(ckpt_text(root, "config.json", "{\"architectures\": [\"TinyMoe\"], \"num_hidden_layers\": 1}\n"), "config");
  st = inspect(path, 1, 1, &report);
  CHECK(st == FP4_OK && report && strstr(report, "TinyMoe"), "inspect FILE reads the config beside it: %s",
        fp4_last_error());
  fp4_model_free(report);
  CHECK(ckpt_text(root, "model.safetensors.index.json",
                  "{\"weight_map\": {\"model.layers.0.self_attn.o_proj.weight\": \"model.safetensors\"}}\n"),
        "index");
  snprintf(dir, sizeof dir, "%s/model.safetensors.index.json", root);
  CHECK(inspect(dir, 1, 1, &report) == FP4_OK && report && strstr(report, "TinyMoe"), "inspect INDEX: %s",
        fp4_last_error());
  fp4_model_free(report);
  /* A shard the index lists but the directory lacks is said with the index and a tensor it maps. */
  CHECK(ckpt_text(root, "model.safetensors.index.json",
                  "{\"weight_map\": {\"model.layers.0.self_attn.o_proj.weight\": \"model.safetensors\", "
                  "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}\n"),
        "index");
  st = inspect(dir, 1, 1, &report);
  CHECK(st == FP4_ERR_NOT_FOUND && strstr(fp4_last_error(), dir) &&
            strstr(fp4_last_error(), "model-00002-of-00002.safetensors") && strstr(fp4_last_error(), "lm_head.weight"),
        "an index naming a missing shard: %s %s", fp4_status_str(st), fp4_last_error());
  fp4_model_free(report);
  unlink(dir);

  /* Malformed files are parsed and reported as what they are. */
  malformed("header length past the end", "{}", 0, 1000, "exceeds");
  malformed("invalid JSON", "{\"a\": ", 0, 0, "not valid JSON");
  malformed("non-UTF-8 name", "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, "UTF-8");
  malformed("short data", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 2, 0, "run past");
  malformed("unknown dtype", "{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, "Q9");
  snprintf(path, sizeof path, "%s/bad.safetensors", root);
  unlink(path);

  /* Config numbers: 1e999 is infinity, which no integer holds; INT_MAX experts per token with EP 2
   * must not overflow the experts-touched arithmetic. */
  snprintf(path, sizeof path, "%s/model.safetensors", root);
  CHECK(ckpt_text(root, "config.json", "{\"num_hidden_layers\": 1e999}\n"), "config");
  st = inspect(path, 1, 1, &report);
  CHECK(st == FP4_ERR_FORMAT && strstr(fp4_last_error(), "num_hidden_layers"), "1e999: %s %s", fp4_status_str(st),
        fp4_last_error());
  fp4_model_free(report);
  CHECK(ckpt_text(root, "config.json", "{\"text_config\": {\"num_experts_per_tok\": -1e300}}\n"), "config");
  CHECK(inspect(root, 1, 1, &report) == FP4_ERR_FORMAT, "-1e300 experts per token accepted");
  fp4_model_free(report);
  CHECK(ckpt_text(root, "config.json", "{\"num_hidden_layers\": 1, \"num_experts_per_tok\": 2147483647}\n"), "config");
  st = inspect(root, 2, 2, &report);
  CHECK(st == FP4_OK, "INT_MAX experts per token: %s", fp4_last_error());
  cJSON *doc = report ? cJSON_Parse(report) : NULL;
  const cJSON *g = doc ? gemm(doc, "model.layers.*.mlp.experts.*.down_proj") : NULL;
  /* 4 experts over EP 2: 2 local experts, each token can touch both: count 1 layer x 2. */
  CHECK(g && cJSON_GetObjectItem(g, "count")->valuedouble == 2 && cJSON_GetObjectItem(g, "experts")->valuedouble == 2,
        "INT_MAX experts per token, EP 2: %s", report ? report : "(no report)");
  cJSON_Delete(doc);
  fp4_model_free(report);

  /* Config text that is not UTF-8 is refused, not echoed into the JSON report. */
  CHECK(ckpt_text(root, "config.json", "{\"architectures\": [\"Bad\xc3\x28\"]}\n"), "config");
  st = inspect(root, 1, 1, &report);
  CHECK(st == FP4_ERR_FORMAT && strstr(fp4_last_error(), "UTF-8"), "non-UTF-8 config: %s %s", fp4_status_str(st),
        fp4_last_error());
  fp4_model_free(report);
  CHECK(ckpt_text(root, "config.json", "{\"architectures\": [\"Tiny\xc3\xa9\"]}\n"), "config");
  CHECK(ckpt_text(root, "hf_quant_config.json", "[\"not an object\"]"), "hf_quant_config");
  CHECK(inspect(root, 1, 1, &report) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "hf_quant_config.json"),
        "hf_quant_config.json that is not an object: %s", fp4_last_error());
  fp4_model_free(report);
  snprintf(path, sizeof path, "%s/hf_quant_config.json", root);
  unlink(path);
  snprintf(path, sizeof path, "%s/model-bad.safetensors.index.json", root);
  CHECK(ckpt_text(root, "model-bad.safetensors.index.json", "{\"weight_map\": {\"a\xff\": \"model.safetensors\"}}"),
        "index");
  fp4_safetensors *sts = NULL;
  CHECK(fp4_safetensors_open(path, FP4_SAFETENSORS_HEADERS_ONLY, &sts) == FP4_ERR_FORMAT &&
            strstr(fp4_last_error(), "UTF-8"),
        "non-UTF-8 index: %s", fp4_last_error());
  unlink(path);

  /* NULL arguments. */
  fp4_inspect_options o = {1, 1, 0};
  CHECK(fp4_model_inspect(NULL, &o, &report) == FP4_ERR_INVALID_ARGUMENT, "NULL path");
  CHECK(fp4_model_inspect(root, &o, NULL) == FP4_ERR_INVALID_ARGUMENT, "NULL report");
  CHECK(fp4_model_inspect(root, NULL, &report) == FP4_OK, "NULL options (defaults): %s", fp4_last_error());
  fp4_model_free(report);
  fp4_model_free(NULL);
  o.ep = 0;
  CHECK(fp4_model_inspect(root, &o, &report) == FP4_ERR_INVALID_ARGUMENT, "ep 0");

  /* The command: a file path, --json output that parses, option forms of getopt_long. */
  const char *tool = ckpt_tool();
  if (!*tool) {
    printf("skip (command part): the fp4kit command is not built next to the tests\n");
  } else {
    snprintf(cmd, sizeof cmd, "%s inspect %s/model.safetensors --json --tp=2 > %s/out.json", tool, root, root);
    CHECK(ckpt_run(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/out.json", root);
    char *text = ckpt_slurp(path);
    doc = text ? cJSON_Parse(text) : NULL;
    CHECK(doc && cJSON_GetObjectItem(doc, "tp")->valuedouble == 2, "inspect FILE --json: '%s'", text ? text : "");
    cJSON_Delete(doc);
    free(text);
    snprintf(cmd, sizeof cmd, "%s inspect --json '%s/bad\xff" "dir' > %s/out.json", tool, root, root);
    CHECK(ckpt_run(cmd) == 0, "%s", cmd);
    text = ckpt_slurp(path);
    doc = text ? cJSON_Parse(text) : NULL;
    CHECK(doc && !strchr(text, '\xff') && strstr(text, "bad\xef\xbf\xbd" "dir"), "inspect --json of a non-UTF-8 "
          "directory name: '%s'", text ? text : "");
    cJSON_Delete(doc);
    free(text);
    snprintf(cmd, sizeof cmd, "%s inspect %s/model.safetensors --tp 2>/dev/null", tool, root);
    CHECK(ckpt_run(cmd) == 2, "--tp without a value accepted");
    snprintf(cmd, sizeof cmd, "%s inspect %s %s 2>/dev/null", tool, root, root);
    CHECK(ckpt_run(cmd) == 2, "two paths accepted");
    snprintf(path, sizeof path, "%s/bad.safetensors", root);
    CHECK(ckpt_raw(path, "{\"a\":", 0, 0), "bad file");
    snprintf(cmd, sizeof cmd, "%s inspect %s 2>%s/err.txt", tool, path, root);
    CHECK(ckpt_run(cmd) == 3, "a malformed file inspected");
    snprintf(path, sizeof path, "%s/err.txt", root);
    text = ckpt_slurp(path);
    CHECK(text && strstr(text, "not valid JSON") && !strstr(text, "Not a directory"), "malformed file: '%s'",
          text ? text : "");
    free(text);
  }

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("inspect inputs: all checks passed\n");
  return 0;
}
