/* libFuzzer target: the JSON files beside a checkpoint, as fp4_model_inspect reads them. The first
 * byte of the input picks the file it becomes (config.json, hf_quant_config.json or
 * model.safetensors.index.json) and the parallelism (TP and EP of 1-8) of the inspection; the rest
 * is the file's text. Next to it lies a small valid checkpoint (attention, MoE experts, an MTP
 * block), so that hostile numbers reach the GEMM list and its sharding arithmetic. Any input must
 * give FP4_OK (then a report that is valid UTF-8 JSON when asked for JSON) or an error status, never
 * a crash, a leak or undefined behaviour (float-cast-overflow included). */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fp4kit_model.h"
#include "model/model_internal.h"

/* The reader parses shards on the cpu backend's threads; this target links the reader without the
 * backend's feature detection: one thread. */
int fp4_cpu_current_threads(void);
int fp4_cpu_current_threads(void) { return 1; }

static char dir[64];

static void cleanup(void) {
  static const char *const names[] = {"model.safetensors", "config.json", "hf_quant_config.json",
                                      "model.safetensors.index.json", NULL};
  char path[128];
  for (int i = 0; names[i]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

/* The checkpoint, written once: names shaped like real models, BF16 and NVFP4 storage. */
static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/fp4kit_fuzz_cfg_XXXXXX");
  if (!mkdtemp(dir)) abort();
  atexit(cleanup);
  char path[128];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  fp4_st_writer *w = NULL;
  if (fp4_st_writer_create(path, &w)) abort();
  static const char *const bf16[] = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                                     "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                                     "model.layers.1.mlp.gate.weight", "mtp.layers.0.mlp.experts.0.up_proj.weight",
                                     "lm_head.weight", "model.embed_tokens.weight", NULL};
  for (int i = 0; bf16[i]; i++)
    if (fp4_st_writer_declare(w, bf16[i], FP4_ST_BF16, 2, (int64_t[]){16, 32})) abort();
  char name[128];
  for (int e = 0; e < 4; e++)
    for (int l = 1; l < 3; l++) {
      snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
      if (fp4_st_writer_declare(w, name, FP4_ST_U8, 2, (int64_t[]){32, 16})) abort();
      snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight_scale", l, e);
      if (fp4_st_writer_declare(w, name, FP4_ST_F8_E4M3, 2, (int64_t[]){32, 2})) abort();
    }
  static uint8_t zeros[1024];
  for (int i = 0; bf16[i]; i++)
    if (fp4_st_writer_write(w, bf16[i], zeros, 16 * 32 * 2)) abort();
  for (int e = 0; e < 4; e++)
    for (int l = 1; l < 3; l++) {
      snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
      if (fp4_st_writer_write(w, name, zeros, 32 * 16)) abort();
      snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight_scale", l, e);
      if (fp4_st_writer_write(w, name, zeros, 32 * 2)) abort();
    }
  if (fp4_st_writer_finish(w)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) setup();
  if (size < 1) return 0;
  static const char *const files[] = {"config.json", "hf_quant_config.json", "model.safetensors.index.json"};
  const char *file = files[(data[0] & 3) % 3];
  const int tp = 1 << ((data[0] >> 2) & 3), ep = 1 << ((data[0] >> 4) & 3);
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) abort();
  if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) abort();
  close(fd);

  fp4_inspect_options o = {tp, ep, (data[0] >> 6) & 1};
  char *report = NULL;
  if (fp4_model_inspect(dir, &o, &report) == FP4_OK) {
    if (!report) abort();
    if (fp4_model_utf8_span(report, strlen(report)) != strlen(report)) abort(); /* echoes must stay UTF-8 */
    if (o.json) {
      cJSON *doc = cJSON_Parse(report);
      if (!doc) abort();
      cJSON_Delete(doc);
    }
  } else if (report) {
    abort(); /* no report on failure */
  }
  free(report);
  unlink(path);
  return 0;
}
