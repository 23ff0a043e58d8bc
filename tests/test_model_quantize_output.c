/* fp4_model_quantize's output directory and input checks: a run that fails (here: a NaN weight in
 * shard 2) leaves no output that inspect would accept and removes what it wrote; temporaries of
 * killed runs are removed by the next run; a non-empty output is refused unless forced, and then
 * replaced only when the new output is complete; an already quantized input is refused, naming why;
 * hostile config numbers are refused; the command's options (getopt_long), --force and progress lines
 * when stderr is not a terminal. What is kept: MoE routers of every naming (by shape, not by parent
 * name), empty and fused 3-D expert weights (warned about, in the ignore list); a run quantizing
 * nothing is refused before writing; other files are copied whatever their size, the entries not
 * copied are warned about before any work; IN_DIR must be a directory. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp4kit_model.h"

#include "model_ckpt_testing.h"
#include "model_test_check.h"

static char root[] = "/tmp/fp4kit_qout_XXXXXX";

/* A 2-shard BF16 model in root/name with an index and a config; nan_in_shard2 spoils shard 2. */
static void make_model(const char *name, int nan_in_shard2, const char *config) {
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  mkdir(dir, 0755);
  const ckpt_tensor s1[] = {{"model.layers.0.mlp.down_proj.weight", 32, 64, -1},
                            {"model.layers.0.mlp.up_proj.weight", 64, 32, -1}};
  const ckpt_tensor s2[] = {{"model.layers.1.mlp.down_proj.weight", 32, 64, nan_in_shard2 ? 100 : -1},
                            {"model.layers.1.mlp.up_proj.weight", 64, 32, -1}};
  snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
  CHECK(ckpt_shard(path, s1, 2), "shard 1: %s", fp4_last_error());
  snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
  CHECK(ckpt_shard(path, s2, 2), "shard 2: %s", fp4_last_error());
  CHECK(ckpt_text(dir, "model.safetensors.index.json",
                  "{\"metadata\": {}, \"weight_map\": {"
                  "\"model.layers.0.mlp.down_proj.weight\": \"model-00001-of-00002.safetensors\", "
                  "\"model.layers.0.mlp.up_proj.weight\": \"model-00001-of-00002.safetensors\", "
                  "\"model.layers.1.mlp.down_proj.weight\": \"model-00002-of-00002.safetensors\", "
                  "\"model.layers.1.mlp.up_proj.weight\": \"model-00002-of-00002.safetensors\"}}\n"),
        "index");
  CHECK(ckpt_text(dir, "config.json", config ? config : "{\"num_hidden_layers\": 2}\n"), "config");
  CHECK(ckpt_text(dir, "tokenizer.json", "{}\n"), "tokenizer");
}

static fp4_status quantize(const char *in, const char *out, int force) {
  char a[600], b[600];
  snprintf(a, sizeof a, "%s/%s", root, in);
  snprintf(b, sizeof b, "%s/%s", root, out);
  fp4_model_quantize_options o;
  memset(&o, 0, sizeof o);
  o.format = FP4_FORMAT_NVFP4;
  o.force = force;
  return fp4_model_quantize(a, b, &o);
}

static int inspect_ok(const char *name) {
  char p[600], *report = NULL;
  snprintf(p, sizeof p, "%s/%s", root, name);
  fp4_status st = fp4_model_inspect(p, NULL, &report);
  fp4_model_free(report);
  return st == FP4_OK;
}

static int exists(const char *name) {
  char p[600];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", root, name);
  return lstat(p, &sb) == 0;
}

/* A tensor of rank 2 or 3 (the checkpoint helpers write 2-D ones) with small varied BF16 values. */
typedef struct nd_tensor {
  const char *name;
  int ndim;
  int64_t shape[3];
} nd_tensor;

static void write_nd(const char *dir, const char *file, const nd_tensor *t, int count) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s/%s", root, dir, file);
  fp4_st_writer *w = NULL;
  CHECK(fp4_st_writer_create(path, &w) == FP4_OK, "%s: %s", path, fp4_last_error());
  for (int i = 0; w && i < count; i++)
    CHECK(fp4_st_writer_declare(w, t[i].name, FP4_ST_BF16, t[i].ndim, t[i].shape) == FP4_OK, "%s", fp4_last_error());
  for (int i = 0; w && i < count; i++) {
    int64_t e = 1;
    for (int d = 0; d < t[i].ndim; d++) e *= t[i].shape[d];
    uint16_t *v = malloc((size_t)e * 2 + 2);
    for (int64_t j = 0; j < e; j++) v[j] = fp4_bf16_from_f32((float)((j * 37 + i) % 19 - 9) * 0.01f);
    CHECK(fp4_st_writer_write(w, t[i].name, v, (size_t)e * 2) == FP4_OK, "%s", fp4_last_error());
    free(v);
  }
  CHECK(w && fp4_st_writer_finish(w) == FP4_OK, "%s", fp4_last_error());
}

/* Storage type of a tensor of the output root/dir (-1 when absent). */
static int out_dtype(const char *dir, const char *tensor) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", root, dir);
  fp4_safetensors *q = NULL;
  if (fp4_safetensors_open(p, FP4_SAFETENSORS_HEADERS_ONLY, &q)) return -1;
  const fp4_st_tensor *t = fp4_safetensors_find(q, tensor);
  int d = t ? (int)t->dtype : -1;
  fp4_safetensors_close(q);
  return d;
}

/* Times module is listed as kept in root/dir: in hf_quant_config.json's exclude_modules when
 * config.json's quantization_config ignore says the same, else -1. */
static int times_listed(const char *dir, const char *module) {
  char p[700];
  int n[2] = {0, 0};
  for (int f = 0; f < 2; f++) {
    snprintf(p, sizeof p, "%s/%s/%s", root, dir, f ? "config.json" : "hf_quant_config.json");
    char *text = ckpt_slurp(p);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *list = f ? cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "quantization_config"), "ignore")
                          : cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "quantization"), "exclude_modules");
    for (const cJSON *e = list ? list->child : NULL; e; e = e->next)
      n[f] += cJSON_IsString(e) && !strcmp(e->valuestring, module);
    cJSON_Delete(doc);
  }
  return n[0] == n[1] ? n[0] : -1;
}

/* MoE routers stay BF16 whatever their parent module is called: block_sparse_moe.gate (Mixtral,
 * MiniMax, Phi-MoE), mlp.gate (Qwen, DeepSeek), gate.wg (Hunyuan), router.layer (DBRX, Granite); a
 * router is a 2-D gate/router weight with one row per expert, the count from the config or, without
 * one, from the expert tensors. A gate with another row count is an ordinary linear. */
static void check_routers(void) {
  const char *routers[] = {"model.layers.0.block_sparse_moe.gate", "model.layers.1.mlp.gate",
                           "model.layers.2.mlp.gate.wg", "model.layers.3.block_sparse_moe.router.layer"};
  for (int variant = 0; variant < 2; variant++) {
    char dir[64], path[700];
    snprintf(dir, sizeof dir, "moe%d", variant);
    snprintf(path, sizeof path, "%s/%s", root, dir);
    mkdir(path, 0755);
    nd_tensor t[16];
    int n = 0;
    for (int r = 0; r < 4; r++) t[n++] = (nd_tensor){NULL, 2, {4, 64, 0}};
    char names[4][80];
    for (int r = 0; r < 4; r++) {
      snprintf(names[r], sizeof names[r], "%s.weight", routers[r]);
      t[r].name = names[r];
    }
    const char *experts[] = {"model.layers.0.block_sparse_moe.experts.0.w1.weight",
                             "model.layers.0.block_sparse_moe.experts.3.w2.weight",
                             "model.layers.1.mlp.experts.0.down_proj.weight",
                             "model.layers.1.mlp.experts.3.down_proj.weight"};
    for (int e = 0; e < 4; e++) t[n++] = (nd_tensor){experts[e], 2, {64, 32, 0}};
    t[n++] = (nd_tensor){"model.layers.0.self_attn.gate.weight", 2, {64, 64, 0}};
    write_nd(dir, "model.safetensors", t, n);
    /* variant 0: the count in the config (num_local_experts); variant 1: from the names experts.0-3 */
    CHECK(ckpt_text(path, "config.json", variant ? "{\"num_hidden_layers\": 4}\n"
                                                   : "{\"num_hidden_layers\": 4, \"num_local_experts\": 4}\n"),
          "config");
    char out[80];
    snprintf(out, sizeof out, "%s_out", dir);
    fp4_model_quantize_summary sum;
    memset(&sum, 0, sizeof sum);
    fp4_model_quantize_options o;
    memset(&o, 0, sizeof o);
    o.format = FP4_FORMAT_NVFP4;
    o.summary = &sum;
    char in_path[600], out_path[600];
    snprintf(in_path, sizeof in_path, "%s/%s", root, dir);
    snprintf(out_path, sizeof out_path, "%s/%s", root, out);
    CHECK(fp4_model_quantize(in_path, out_path, &o) == FP4_OK, "%s", fp4_last_error());
    for (int r = 0; r < 4; r++) {
      CHECK(out_dtype(out, names[r]) == FP4_ST_BF16, "variant %d: router %s was quantized", variant, names[r]);
      CHECK(times_listed(out, routers[r]) == 1, "variant %d: router %s not in the ignore list", variant, routers[r]);
    }
    for (int e = 0; e < 4; e++) CHECK(out_dtype(out, experts[e]) == FP4_ST_U8, "expert %s not quantized", experts[e]);
    CHECK(out_dtype(out, "model.layers.0.self_attn.gate.weight") == FP4_ST_U8, "a 64-row gate (not a router) kept");
    CHECK(sum.quantized == 5 && sum.kept_by_default == 4 && sum.kept_by_pattern == 0 && sum.kept_for_shape == 0,
          "variant %d: summary %lld quantized %lld default %lld pattern %lld shape", variant, (long long)sum.quantized,
          (long long)sum.kept_by_default, (long long)sum.kept_by_pattern, (long long)sum.kept_for_shape);
  }
}

typedef struct call_log {
  int warnings, progress, warning_after_progress;
  char text[4096];
} call_log;

static void log_warning(void *user, const char *message) {
  call_log *l = user;
  l->warnings++;
  l->warning_after_progress |= l->progress > 0;
  size_t n = strlen(l->text);
  snprintf(l->text + n, sizeof l->text - n, "%s\n", message);
}

static void log_progress(void *user, const char *tensor, int64_t done, int64_t total) {
  (void)tensor;
  (void)done;
  (void)total;
  ((call_log *)user)->progress++;
}

/* Other files are copied whatever their size (a sparse 5 GiB pytorch_model.bin, copied sparse); the
 * entries not copied (a subdirectory, a shard the index does not list) are warned about before the
 * first tensor is touched. */
static void check_extra_files(const char *tool) {
  char path[700], cmd[16384];
  make_model("extras", 0, NULL);
  snprintf(path, sizeof path, "%s/extras/pytorch_model.bin", root);
  CHECK(ckpt_text(root, "extras/pytorch_model.bin", "") && truncate(path, (off_t)5 << 30) == 0, "sparse file");
  snprintf(path, sizeof path, "%s/extras/original", root);
  mkdir(path, 0755);
  CHECK(ckpt_text(path, "params.json", "{}\n"), "original/params.json");
  const ckpt_tensor stray[] = {{"x.weight", 16, 16, -1}};
  snprintf(path, sizeof path, "%s/extras/consolidated.safetensors", root);
  CHECK(ckpt_shard(path, stray, 1), "stray shard");
  if (*tool) {
    snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/extras %s/extras_cli >/dev/null 2>%s/extras.err", tool, root, root,
             root);
    CHECK(ckpt_run(cmd) == 0, "a 5 GiB extra file failed the run");
    snprintf(path, sizeof path, "%s/extras.err", root);
    char *err = ckpt_slurp(path);
    CHECK(err && strstr(err, "original/ not copied") && strstr(err, "consolidated.safetensors not copied"),
          "entries not copied are not named: '%s'", err ? err : "");
    free(err);
    struct stat sb;
    snprintf(path, sizeof path, "%s/extras_cli/pytorch_model.bin", root);
    CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)5 << 30, "pytorch_model.bin not copied whole");
    CHECK(stat(path, &sb) == 0 && (long long)sb.st_blocks * 512 < (1 << 20),
          "the sparse file was filled in (%lld bytes)", (long long)sb.st_blocks * 512);
    CHECK(!exists("extras_cli/original") && !exists("extras_cli/consolidated.safetensors"), "skipped entries copied");
  }
  /* The library call: warnings first, then the work; the counts. */
  call_log log;
  memset(&log, 0, sizeof log);
  fp4_model_quantize_summary sum;
  memset(&sum, 0, sizeof sum);
  fp4_model_quantize_options o;
  memset(&o, 0, sizeof o);
  o.format = FP4_FORMAT_NVFP4;
  o.warning = log_warning;
  o.warning_user = &log;
  o.progress = log_progress;
  o.progress_user = &log;
  o.summary = &sum;
  char in[600], out[600];
  snprintf(in, sizeof in, "%s/extras", root);
  snprintf(out, sizeof out, "%s/extras_lib", root);
  CHECK(fp4_model_quantize(in, out, &o) == FP4_OK, "%s", fp4_last_error());
  CHECK(log.warnings == 2 && !log.warning_after_progress && log.progress > 0, "%d warnings (after the work: %d): %s",
        log.warnings, log.warning_after_progress, log.text);
  CHECK(sum.files_copied == 2 && sum.entries_skipped == 2 && sum.quantized == 4, "files %lld skipped %lld",
        (long long)sum.files_copied, (long long)sum.entries_skipped);
  snprintf(path, sizeof path, "rm -rf %s/extras %s/extras_cli %s/extras_lib", root, root, root);
  CHECK(ckpt_run(path) == 0, "cleanup");
}

/* Weights kept for their shape: empty ones ([4, 0] and [0, 64]) and fused 3-D experts are copied
 * unchanged, named in a warning, listed in the ignore list and counted in the summary line; the
 * router next to fused experts is known by the experts' first dimension. Quantizing nothing (an
 * include pattern that matches no module, an index whose weight_map is empty) is an error that
 * writes nothing. A file as IN_DIR is named as such. */
static void check_kept_weights(const char *tool) {
  char path[700], cmd[16384];
  snprintf(path, sizeof path, "%s/shapes", root);
  mkdir(path, 0755);
  const nd_tensor t[] = {{"model.layers.0.self_attn.o_proj.weight", 2, {64, 64, 0}},
                         {"model.layers.0.mlp.gate.weight", 2, {4, 64, 0}},
                         {"model.layers.0.mlp.experts.gate_up_proj", 3, {4, 64, 64}},
                         {"model.layers.0.mlp.experts.down_proj", 3, {4, 32, 64}},
                         {"model.layers.0.self_attn.zero_k.weight", 2, {4, 0, 0}},
                         {"model.layers.0.self_attn.zero_n.weight", 2, {0, 64, 0}}};
  write_nd("shapes", "model.safetensors", t, 6);
  CHECK(ckpt_text(path, "config.json", "{\"num_hidden_layers\": 1}\n"), "config");
  snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/shapes %s/shapes_out >%s/shapes.out 2>%s/shapes.err", tool, root, root,
           root, root);
  CHECK(ckpt_run(cmd) == 0, "empty or fused weights failed the run");
  snprintf(path, sizeof path, "%s/shapes.err", root);
  char *err = ckpt_slurp(path);
  CHECK(err && strstr(err, "warning: model.layers.0.mlp.experts.gate_up_proj BF16 [4, 64, 64]") &&
            strstr(err, "warning: model.layers.0.mlp.experts.down_proj") && strstr(err, "zero_k.weight BF16 [4, 0]") &&
            strstr(err, "zero_n.weight BF16 [0, 64]"),
        "kept weights not named: '%s'", err ? err : "");
  free(err);
  snprintf(path, sizeof path, "%s/shapes.out", root);
  char *out = ckpt_slurp(path);
  CHECK(out && strstr(out, ": 1 tensor quantized, 5 kept unquantized (1 by the default rules, 0 by --include/--exclude, "
                           "4 for an unsupported shape)"),
        "summary line: '%s'", out ? out : "");
  free(out);
  CHECK(times_listed("shapes_out", "model.layers.0.mlp.experts") == 1, "fused experts not listed once as ignored");
  CHECK(times_listed("shapes_out", "model.layers.0.self_attn.zero_k") == 1 &&
            times_listed("shapes_out", "model.layers.0.self_attn.zero_n") == 1 &&
            times_listed("shapes_out", "model.layers.0.mlp.gate") == 1,
        "empty weights or the router not in the ignore list");
  CHECK(out_dtype("shapes_out", "model.layers.0.mlp.experts.gate_up_proj") == FP4_ST_BF16 &&
            out_dtype("shapes_out", "model.layers.0.self_attn.zero_k.weight") == FP4_ST_BF16 &&
            out_dtype("shapes_out", "model.layers.0.self_attn.zero_n.weight") == FP4_ST_BF16 &&
            out_dtype("shapes_out", "model.layers.0.mlp.gate.weight") == FP4_ST_BF16 &&
            out_dtype("shapes_out", "model.layers.0.self_attn.o_proj.weight") == FP4_ST_U8,
        "what was quantized");

  /* Nothing to quantize: refused, nothing written. */
  snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/good %s/none --include 'model.layer.*' 2>%s/none.err", tool, root,
           root, root);
  CHECK(ckpt_run(cmd) == 3, "an include matching nothing was not an error");
  snprintf(path, sizeof path, "%s/none.err", root);
  err = ckpt_slurp(path);
  CHECK(err && strstr(err, "nothing to quantize") && strstr(err, "4 by the include/exclude patterns") &&
            strstr(err, "such as 'model.layers.0.mlp.down_proj'"),
        "the refusal does not say why: '%s'", err ? err : "");
  free(err);
  CHECK(!exists("none") && ckpt_count_entries(root, ".none.fp4kit-tmp") == 0, "a refused run wrote something");
  make_model("nomap", 0, NULL);
  snprintf(path, sizeof path, "%s/nomap", root);
  CHECK(ckpt_text(path, "model.safetensors.index.json", "{\"metadata\": {}, \"weight_map\": {}}\n"), "empty index");
  snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/nomap %s/nomap_out 2>/dev/null", tool, root, root);
  CHECK(ckpt_run(cmd) == 3 && !exists("nomap_out"), "an empty weight_map made a model");

  /* A file as IN_DIR. */
  snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/good/model-00001-of-00002.safetensors %s/file_out 2>%s/file.err",
           tool, root, root, root);
  CHECK(ckpt_run(cmd) == 3, "a file as IN_DIR");
  snprintf(path, sizeof path, "%s/file.err", root);
  err = ckpt_slurp(path);
  CHECK(err && strstr(err, "IN_DIR must be a directory: ") && strstr(err, "model-00001-of-00002.safetensors"),
        "a file as IN_DIR: '%s'", err ? err : "");
  free(err);
  CHECK(!exists("file_out"), "a file as IN_DIR made an output");
}

int main(void) {
  if (!mkdtemp(root)) return 1;
  char path[800], cmd[16384];
  make_model("good", 0, NULL);
  make_model("bad", 1, NULL);

  /* A clean error during shard 2: nothing is left, neither OUT nor a temporary. */
  fp4_status st = quantize("bad", "out", 0);
  CHECK(st != FP4_OK, "a NaN weight in shard 2 was quantized");
  CHECK(!exists("out"), "a failed run left the output directory");
  CHECK(!inspect_ok("out"), "inspect accepts the output of a failed run");
  CHECK(ckpt_count_entries(root, "fp4kit-tmp") == 0, "a failed run left its temporary directory");
  /* An existing empty OUT stays empty after a failure. */
  snprintf(path, sizeof path, "%s/empty", root);
  mkdir(path, 0755);
  CHECK(quantize("bad", "empty", 0) != FP4_OK, "NaN quantized");
  CHECK(ckpt_count_entries(path, "") == 2, "a failed run wrote into the existing empty output"); /* . and .. */

  /* Success into a new directory, then into the existing empty one. */
  CHECK(quantize("good", "out", 0) == FP4_OK, "%s", fp4_last_error());
  CHECK(inspect_ok("out"), "the output does not inspect: %s", fp4_last_error());
  snprintf(path, sizeof path, "%s/out/tokenizer.json", root);
  CHECK(access(path, R_OK) == 0, "tokenizer.json not copied");
  snprintf(path, sizeof path, "%s/out", root);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0755, "output mode %o", (unsigned)(sb.st_mode & 0777));
  CHECK(quantize("good", "empty", 0) == FP4_OK && inspect_ok("empty"), "into an empty directory: %s", fp4_last_error());

  /* A non-empty OUT is refused before any work unless forced. */
  CHECK(ckpt_text(root, "out/marker", "old\n"), "marker");
  st = quantize("good", "out", 0);
  CHECK(st == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "not empty"), "non-empty output: %s %s",
        fp4_status_str(st), fp4_last_error());
  CHECK(exists("out/marker"), "a refused run touched the output");
  /* Forced but failing: the old output is intact. */
  CHECK(quantize("bad", "out", 1) != FP4_OK, "NaN quantized");
  CHECK(exists("out/marker") && inspect_ok("out"), "a failed forced run damaged the previous output");
  CHECK(ckpt_count_entries(root, "fp4kit-tmp") == 0, "a failed forced run left its temporary directory");
  /* Forced and succeeding: replaced as a whole. */
  CHECK(quantize("good", "out", 1) == FP4_OK, "%s", fp4_last_error());
  CHECK(!exists("out/marker") && inspect_ok("out"), "forced run did not replace the output");
  CHECK(ckpt_count_entries(root, "fp4kit-tmp") == 0, "the replaced output was left behind");

  /* Temporaries of runs that were killed go; those of live runs stay. A finished child's id is dead. */
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0);
  snprintf(path, sizeof path, "%s/.fresh.fp4kit-tmp.%ld.AbCdEf", root, (long)child);
  mkdir(path, 0700);
  CHECK(ckpt_text(path, "model-00001-of-00002.safetensors", "partial"), "stale file");
  snprintf(path, sizeof path, "%s/.fresh.fp4kit-tmp.%ld.GhIjKl", root, (long)getppid());
  mkdir(path, 0700);
  CHECK(quantize("good", "fresh", 0) == FP4_OK, "%s", fp4_last_error());
  snprintf(path, sizeof path, ".fresh.fp4kit-tmp.%ld.AbCdEf", (long)child);
  CHECK(!exists(path), "the temporary of a killed run was not removed");
  snprintf(path, sizeof path, ".fresh.fp4kit-tmp.%ld.GhIjKl", (long)getppid());
  CHECK(exists(path), "the temporary of a live run was removed");

  /* The output may be neither the input nor hold it. */
  CHECK(quantize("good", "good", 1) == FP4_ERR_INVALID_ARGUMENT, "output = input accepted");
  snprintf(path, sizeof path, "%s/nest", root);
  mkdir(path, 0755);
  make_model("nest/in", 0, NULL);
  CHECK(quantize("nest/in", "nest", 1) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "inside"),
        "output holding the input accepted: %s", fp4_last_error());
  CHECK(exists("nest/in/config.json"), "the input was touched");

  /* Already quantized inputs are refused, naming what gave them away. */
  st = quantize("out", "requant", 0);
  CHECK(st == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "already quantized") &&
            strstr(fp4_last_error(), "hf_quant_config.json"),
        "requantizing: %s %s", fp4_status_str(st), fp4_last_error());
  CHECK(!exists("requant"), "a refused run created its output");
  make_model("qcfg", 0, "{\"quantization_config\": {\"quant_method\": \"fp8\"}}\n");
  st = quantize("qcfg", "requant", 0);
  CHECK(st == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "quantization_config") &&
            strstr(fp4_last_error(), "fp8"),
        "quantization_config: %s", fp4_last_error());
  snprintf(path, sizeof path, "%s/scales", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/scales/model.safetensors", root);
  CHECK(ckpt_raw(path, "{\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[16,16],\"data_offsets\":[0,512]},"
                       "\"a.weight_scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[512,516]}}", 516, 0),
        "scales model");
  st = quantize("scales", "requant", 0);
  CHECK(st == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "a.weight_scale"), "scale tensor: %s",
        fp4_last_error());

  /* Hostile config numbers: refused by name, never cast. */
  make_model("inf", 0, "{\"num_hidden_layers\": 1e999, \"num_nextn_predict_layers\": 1}\n");
  st = quantize("inf", "infout", 0);
  CHECK(st == FP4_ERR_FORMAT && strstr(fp4_last_error(), "num_hidden_layers"), "1e999 layers: %s %s",
        fp4_status_str(st), fp4_last_error());
  make_model("neg", 0, "{\"text_config\": {\"num_hidden_layers\": -3.5}}\n");
  CHECK(quantize("neg", "negout", 0) == FP4_ERR_FORMAT, "negative layers: %s", fp4_last_error());

  /* NULL and inconsistent options. */
  fp4_model_quantize_options o;
  memset(&o, 0, sizeof o);
  char in[600], out[600];
  snprintf(in, sizeof in, "%s/good", root);
  snprintf(out, sizeof out, "%s/nullout", root);
  CHECK(fp4_model_quantize(NULL, out, &o) == FP4_ERR_INVALID_ARGUMENT, "NULL in");
  CHECK(fp4_model_quantize(in, NULL, &o) == FP4_ERR_INVALID_ARGUMENT, "NULL out");
  CHECK(fp4_model_quantize(in, out, NULL) == FP4_ERR_INVALID_ARGUMENT, "NULL options");
  /* An input amax whose scale amax/(6*448) is no normal float: written, it would be 0 (or its inverse,
   * the compressed-tensors global scale, infinite). */
  o.input_amax = 1e-40f;
  for (int ct = 0; ct < 2; ct++) {
    o.layout = ct ? FP4_CKPT_COMPRESSED_TENSORS : FP4_CKPT_MODELOPT;
    st = fp4_model_quantize(in, out, &o);
    CHECK(st == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "input_amax") &&
              strstr(fp4_last_error(), "normal float") && !exists("nullout"),
          "input_amax 1e-40 (layout %d): %s %s", ct, fp4_status_str(st), fp4_last_error());
  }
  o.layout = FP4_CKPT_MODELOPT;
  o.input_amax = 0.0f;
  o.include_count = 1;
  CHECK(fp4_model_quantize(in, out, &o) == FP4_ERR_INVALID_ARGUMENT, "include_count 1 with include NULL");
  const char *const nulls[] = {NULL};
  o.include = nulls;
  CHECK(fp4_model_quantize(in, out, &o) == FP4_ERR_INVALID_ARGUMENT, "a NULL include pattern");
  CHECK(!exists("nullout"), "a refused run created its output");
  /* fnmatch(3) globs: sets and ranges. */
  o.include = (const char *const[]){"model.layers.[1-9].mlp.*"};
  CHECK(fp4_model_quantize(in, out, &o) == FP4_OK, "%s", fp4_last_error());
  {
    fp4_safetensors *q = NULL;
    CHECK(fp4_safetensors_open(out, FP4_SAFETENSORS_HEADERS_ONLY, &q) == FP4_OK, "%s", fp4_last_error());
    const fp4_st_tensor *l0 = fp4_safetensors_find(q, "model.layers.0.mlp.down_proj.weight");
    const fp4_st_tensor *l1 = fp4_safetensors_find(q, "model.layers.1.mlp.down_proj.weight");
    CHECK(l0 && l0->dtype == FP4_ST_BF16 && l1 && l1->dtype == FP4_ST_U8, "include [1-9] chose the wrong layers");
    fp4_safetensors_close(q);
  }
  CHECK(fp4_model_pattern_match(NULL, "x") == 0 && fp4_model_pattern_match("*", NULL) == 0, "NULL pattern or name");
  CHECK(fp4_model_pattern_match("*.mlp.[gu]*_proj", "layers.3.mlp.up_proj") &&
            !fp4_model_pattern_match("*.mlp.[gu]*_proj", "layers.3.mlp.down_proj") &&
            fp4_model_pattern_match("mtp.*", "mtp.layers.0.x") && fp4_model_pattern_match("a?c", "abc"),
        "glob semantics");
  CHECK(fp4_model_pattern_match("layers.[!0-4].*", "layers.7.mlp") && !fp4_model_pattern_match("layers.[^0-9]*", "layers.7") &&
            fp4_model_pattern_match("a[", "a[") && !fp4_model_pattern_match("*.x", "a.xy") && fp4_model_pattern_match("**", ""),
        "glob sets, an unclosed '[', anchoring");
  /* A '-' right before the closing ']' is a member, not a range: [a-] is 'a' or '-'. */
  CHECK(fp4_model_pattern_match("x[a-]y", "x-y") && fp4_model_pattern_match("x[a-]y", "xay") &&
            !fp4_model_pattern_match("x[a-]y", "xby") && fp4_model_pattern_match("v[!a-]", "vb") &&
            !fp4_model_pattern_match("v[!a-]", "v-"),
        "glob sets ending in '-'");
  { /* many stars against a long name that fails only at its end: linear, where backtracking is not */
    char name[4001];
    memset(name, 'a', 4000);
    name[4000] = 0;
    CHECK(!fp4_model_pattern_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", name), "a long failing match");
  }

  check_routers();
  const char *tool = ckpt_tool();
  check_extra_files(tool);

  /* The command: getopt_long forms, --force, progress lines on a non-terminal stderr. */
  if (!*tool) {
    printf("skip (command part): the fp4kit command is not built next to the tests\n");
  } else {
    snprintf(cmd, sizeof cmd, "%s quantize --help > /dev/null", tool);
    CHECK(ckpt_run(cmd) == 0, "quantize --help");
    snprintf(cmd, sizeof cmd, "%s quantize --help | grep -q -- --force", tool);
    CHECK(ckpt_run(cmd) == 0, "--help does not describe --force");
    snprintf(cmd, sizeof cmd, "%s inspect --help > /dev/null", tool);
    CHECK(ckpt_run(cmd) == 0, "inspect --help");
    snprintf(cmd, sizeof cmd, "%s quantize %s/good %s/cli --bogus 2>/dev/null", tool, root, root);
    CHECK(ckpt_run(cmd) == 2, "unknown option accepted");
    snprintf(cmd, sizeof cmd, "%s quantize %s/good %s/cli --format 2>/dev/null", tool, root, root);
    CHECK(ckpt_run(cmd) == 2, "missing option value accepted");
    snprintf(cmd, sizeof cmd, "%s quantize %s/good 2>/dev/null", tool, root);
    CHECK(ckpt_run(cmd) == 2, "a missing OUT_DIR accepted");
    snprintf(cmd, sizeof cmd, "%s quantize --format=mxfp4 %s/good --exclude '*up_proj' %s/cli > /dev/null 2>%s/cli.err", tool,
             root, root, root);
    CHECK(ckpt_run(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/cli.err", root);
    char *err = ckpt_slurp(path);
    CHECK(err && strstr(err, "fp4kit quantize: [0/4] ") && strstr(err, "[4/4] tensors done") && !strchr(err, '\r'),
          "progress lines on a non-terminal stderr: '%s'", err ? err : "(none)");
    free(err);
    snprintf(path, sizeof path, "%s/cli/hf_quant_config.json", root);
    err = ckpt_slurp(path);
    CHECK(err && strstr(err, "MXFP4"), "--format=mxfp4 not applied");
    free(err);
    snprintf(cmd, sizeof cmd, "%s quantize --quiet %s/good %s/cli 2>%s/cli.err", tool, root, root, root);
    CHECK(ckpt_run(cmd) == 3, "a non-empty OUT_DIR accepted without --force");
    snprintf(cmd, sizeof cmd, "grep -q -- --force %s/cli.err", root);
    CHECK(ckpt_run(cmd) == 0, "the refusal does not mention --force");
    snprintf(cmd, sizeof cmd, "%s quantize --quiet --force %s/good %s/cli > /dev/null 2>%s/cli.err", tool, root, root,
             root);
    CHECK(ckpt_run(cmd) == 0, "--force refused");
    snprintf(path, sizeof path, "%s/cli.err", root);
    err = ckpt_slurp(path);
    CHECK(err && !*err, "--quiet printed '%s'", err ? err : "");
    free(err);
    snprintf(path, sizeof path, "%s/cli/hf_quant_config.json", root);
    err = ckpt_slurp(path);
    CHECK(err && strstr(err, "W4A16_NVFP4"), "--force did not replace the output");
    free(err);
    check_kept_weights(tool);
  }

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("quantize output: all checks passed\n");
  return 0;
}
