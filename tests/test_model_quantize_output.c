/* fp4_model_quantize's output directory and input checks: a run that fails (here: a NaN weight in
 * shard 2) leaves no output that inspect would accept and removes what it wrote; temporaries of
 * killed runs are removed by the next run; a non-empty output is refused unless forced, and then
 * replaced only when the new output is complete; an already quantized input is refused, naming why;
 * hostile config numbers are refused; the command's options (getopt_long), --force and progress lines
 * when stderr is not a terminal. */
#define _GNU_SOURCE
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

  /* The command: getopt_long forms, --force, progress lines on a non-terminal stderr. */
  const char *tool = ckpt_tool();
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
