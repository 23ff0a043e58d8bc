/* fp4_model_inspect on what a user or an attacker may hand it: one .safetensors file (which must
 * be parsed as such, so that a malformed file is reported for what is wrong with it), an index file,
 * configs with numbers no integer can hold or that overflow the sharding arithmetic, text that is
 * not UTF-8, a directory name that is not, a FIFO as config.json and NULL arguments. */
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
