/* Checkpoint quantization: BF16/F16/F32 linear weights -> NVFP4 (Model Optimizer recipe, Model
 * Optimizer or compressed-tensors tensor names) or MXFP4, shard by shard, one tensor in memory at a
 * time. Everything that is not quantized is copied unchanged. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/model_internal.h"

static const char *const default_excludes[] = {
    "*lm_head*", "*embed*", "*norm*", "*.mlp.gate", "*router*", "*shared_expert_gate*", "mtp.*", "*.mtp.*",
    "*visual*",  "*vision*", NULL};

const char *const *fp4_model_default_excludes(void) { return default_excludes; }

int fp4_model_pattern_match(const char *pattern, const char *name) {
  /* No flags: '*' also matches '.' and '/', as module names are dotted paths. */
  return pattern && name && fnmatch(pattern, name, 0) == 0;
}

static int matches_any(const char *const *patterns, int n, const char *name) {
  for (int i = 0; patterns && (n < 0 ? patterns[i] != NULL : i < n); i++)
    if (fp4_model_pattern_match(patterns[i], name)) return 1;
  return 0;
}

/* Layer index of "...layers.N...." or -1. */
static long layer_index(const char *name) {
  const char *p = strstr(name, "layers.");
  return p ? strtol(p + 7, NULL, 10) : -1;
}

typedef struct qctx {
  const fp4_model_quantize_options *o;
  long mtp_first_layer; /* DeepSeek-style MTP layers: index >= num_hidden_layers; LONG_MAX if none */
  cJSON *excluded;      /* module names left unquantized (2-D float weights)                      */
} qctx;

/* Whether tensor t is quantized; *why says why not for 2-D float weights. */
static int should_quantize(const qctx *q, const fp4_st_tensor *t, char *module, size_t msize, int *linear) {
  *linear = 0;
  size_t len = strlen(t->name);
  if (len < 8 || strcmp(t->name + len - 7, ".weight") || t->ndim != 2) return 0;
  if (t->dtype != FP4_ST_BF16 && t->dtype != FP4_ST_F16 && t->dtype != FP4_ST_F32) return 0;
  snprintf(module, msize, "%.*s", (int)(len - 7), t->name);
  *linear = 1;
  const int block = q->o->format == FP4_FORMAT_MXFP4 ? 32 : 16;
  if (t->shape[1] % block != 0 || t->shape[0] == 0) return 0;
  if (q->o->include_count > 0 && !matches_any(q->o->include, q->o->include_count, module)) return 0;
  if (matches_any(q->o->exclude, q->o->exclude_count, module)) return 0;
  if (!q->o->no_default_excludes) {
    if (matches_any(default_excludes, -1, module)) return 0;
    if (layer_index(module) >= q->mtp_first_layer) return 0;
  }
  return 1;
}

static fp4_dtype matrix_dtype(fp4_st_dtype d) {
  return d == FP4_ST_BF16 ? FP4_DTYPE_BF16 : d == FP4_ST_F16 ? FP4_DTYPE_F16 : FP4_DTYPE_F32;
}

static fp4_status declare_outputs(const qctx *q, fp4_st_writer *w, const char *module, const fp4_st_tensor *t) {
  char name[1200];
  const int64_t n = t->shape[0], k = t->shape[1];
  const int mx = q->o->format == FP4_FORMAT_MXFP4;
  const int ct = !mx && q->o->layout == FP4_CKPT_COMPRESSED_TENSORS;
  fp4_status st;
  snprintf(name, sizeof name, "%s.%s", module, ct ? "weight_packed" : "weight");
  if ((st = fp4_st_writer_declare(w, name, FP4_ST_U8, 2, (int64_t[]){n, k / 2}))) return st;
  snprintf(name, sizeof name, "%s.weight_scale", module);
  if ((st = fp4_st_writer_declare(w, name, mx ? FP4_ST_U8 : FP4_ST_F8_E4M3, 2, (int64_t[]){n, k / (mx ? 32 : 16)})))
    return st;
  if (mx) return FP4_OK;
  snprintf(name, sizeof name, "%s.%s", module, ct ? "weight_global_scale" : "weight_scale_2");
  if ((st = fp4_st_writer_declare(w, name, FP4_ST_F32, ct ? 1 : 0, (int64_t[]){1}))) return st;
  if (q->o->input_amax > 0.0f) {
    snprintf(name, sizeof name, "%s.%s", module, ct ? "input_global_scale" : "input_scale");
    if ((st = fp4_st_writer_declare(w, name, FP4_ST_F32, ct ? 1 : 0, (int64_t[]){1}))) return st;
  }
  return FP4_OK;
}

static fp4_status quantize_one(const qctx *q, fp4_st_writer *w, const char *module, const fp4_st_tensor *t) {
  const int64_t n = t->shape[0], k = t->shape[1];
  const int mx = q->o->format == FP4_FORMAT_MXFP4;
  const int ct = !mx && q->o->layout == FP4_CKPT_COMPRESSED_TENSORS;
  const size_t esize = (size_t)fp4_st_dtype_bits(t->dtype) / 8;
  void *aligned = NULL;
  const void *src = t->data;
  if ((uintptr_t)src % esize) { /* a foreign writer may leave data unaligned: copy once */
    if (!(aligned = malloc(t->bytes))) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "quantize: out of memory for %s", t->name);
    memcpy(aligned, src, t->bytes);
    src = aligned;
  }
  const size_t data_bytes = (size_t)n * (size_t)(k / 2), scale_bytes = (size_t)n * (size_t)(k / (mx ? 32 : 16));
  uint8_t *buf = malloc(data_bytes + scale_bytes);
  if (!buf) {
    free(aligned);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "quantize: out of memory for %s (%zu bytes)", t->name, data_bytes + scale_bytes);
  }
  fp4_matrix x = {(void *)src, n, k, 0, matrix_dtype(t->dtype), FP4_MEMORY_HOST};
  fp4_qmatrix out = {buf, buf + data_bytes, n, k, mx ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4, FP4_LAYOUT_LINEAR, 1.0f,
                     FP4_MEMORY_HOST};
  float ws2 = 1.0f;
  fp4_status st;
  if (mx) {
    fp4_options opt = {"ref", NULL, 0, NULL, NULL};
    st = fp4_quantize(NULL, &x, 1.0f, &out, &opt);
  } else {
    st = fp4_quantize_modelopt_version(&x, q->o->modelopt_version, &out, &ws2);
  }
  if (st) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", fp4_last_error());
    free(buf);
    free(aligned);
    return fp4_fail(st, "quantize %s: %s", t->name, detail);
  }
  char name[1200];
  snprintf(name, sizeof name, "%s.%s", module, ct ? "weight_packed" : "weight");
  st = fp4_st_writer_write(w, name, buf, data_bytes);
  snprintf(name, sizeof name, "%s.weight_scale", module);
  if (!st) st = fp4_st_writer_write(w, name, buf + data_bytes, scale_bytes);
  if (!st && !mx) {
    /* compressed-tensors stores encode scales: the reciprocals of Model Optimizer's multipliers. */
    float g = ct ? (ws2 > 0.0f ? 1.0f / ws2 : 1.0f) : ws2;
    snprintf(name, sizeof name, "%s.%s", module, ct ? "weight_global_scale" : "weight_scale_2");
    st = fp4_st_writer_write(w, name, &g, 4);
    if (!st && q->o->input_amax > 0.0f) {
      float in = ct ? 6.0f * 448.0f / q->o->input_amax : q->o->input_amax / (6.0f * 448.0f);
      snprintf(name, sizeof name, "%s.%s", module, ct ? "input_global_scale" : "input_scale");
      st = fp4_st_writer_write(w, name, &in, 4);
    }
  }
  free(buf);
  free(aligned);
  return st;
}

/* dir/name into path[PATH_MAX]; FP4_ERR_INVALID_ARGUMENT when it does not fit. */
static fp4_status join_path(char *path, const char *dir, const char *name) {
  if (snprintf(path, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "quantize: the path %s/%s is too long", dir, name);
  return FP4_OK;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static fp4_status copy_file(const char *from, const char *to) {
  char *text = NULL;
  size_t len = 0;
  fp4_status st = fp4_model_read_text(from, (size_t)1 << 32, &text, &len);
  if (!st) st = fp4_model_write_file(to, text, len);
  free(text);
  return st;
}

static fp4_status write_json(const char *path, const cJSON *json) {
  char *text = cJSON_Print(json);
  if (!text) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "quantize: out of memory printing %s", path);
  size_t len = strlen(text);
  char *withnl = realloc(text, len + 2);
  if (withnl) {
    text = withnl;
    text[len++] = '\n';
    text[len] = 0;
  }
  fp4_status st = fp4_model_write_file(path, text, len);
  free(text);
  return st;
}

/* hf_quant_config.json and config.json's quantization_config. */
static fp4_status write_configs(const qctx *q, const char *in_dir, const char *out_dir) {
  const int mx = q->o->format == FP4_FORMAT_MXFP4;
  const int ct = !mx && q->o->layout == FP4_CKPT_COMPRESSED_TENSORS;
  const char *algo = mx ? "MXFP4" : q->o->input_amax > 0.0f ? "NVFP4" : "W4A16_NVFP4";
  const int group = mx ? 32 : 16;
  char path[PATH_MAX];
  fp4_status st = FP4_OK;
  cJSON *qc = cJSON_CreateObject();
  if (ct) {
    cJSON_AddStringToObject(qc, "quant_method", "compressed-tensors");
    cJSON_AddStringToObject(qc, "format", "nvfp4-pack-quantized");
    cJSON *groups = cJSON_AddObjectToObject(qc, "config_groups");
    cJSON *g0 = cJSON_AddObjectToObject(groups, "group_0");
    cJSON *targets = cJSON_AddArrayToObject(g0, "targets");
    cJSON_AddItemToArray(targets, cJSON_CreateString("Linear"));
    cJSON *wq = cJSON_AddObjectToObject(g0, "weights");
    cJSON_AddNumberToObject(wq, "num_bits", 4);
    cJSON_AddStringToObject(wq, "type", "float");
    cJSON_AddStringToObject(wq, "strategy", "tensor_group");
    cJSON_AddNumberToObject(wq, "group_size", 16);
    cJSON_AddBoolToObject(wq, "symmetric", 1);
    cJSON_AddBoolToObject(wq, "dynamic", 0);
    if (q->o->input_amax > 0.0f) {
      cJSON *iq = cJSON_AddObjectToObject(g0, "input_activations");
      cJSON_AddNumberToObject(iq, "num_bits", 4);
      cJSON_AddStringToObject(iq, "type", "float");
      cJSON_AddStringToObject(iq, "strategy", "tensor_group");
      cJSON_AddNumberToObject(iq, "group_size", 16);
      cJSON_AddBoolToObject(iq, "symmetric", 1);
      cJSON_AddStringToObject(iq, "dynamic", "local");
    } else {
      cJSON_AddNullToObject(g0, "input_activations");
    }
    cJSON_AddItemToObject(qc, "ignore", cJSON_Duplicate(q->excluded, 1));
  } else {
    cJSON *hf = cJSON_CreateObject();
    cJSON *producer = cJSON_AddObjectToObject(hf, "producer");
    cJSON_AddStringToObject(producer, "name", "fp4kit");
    cJSON_AddStringToObject(producer, "version", fp4_version());
    cJSON *quant = cJSON_AddObjectToObject(hf, "quantization");
    cJSON_AddStringToObject(quant, "quant_algo", algo);
    cJSON_AddNumberToObject(quant, "group_size", group);
    cJSON_AddNullToObject(quant, "kv_cache_quant_algo");
    cJSON_AddItemToObject(quant, "exclude_modules", cJSON_Duplicate(q->excluded, 1));
    st = join_path(path, out_dir, "hf_quant_config.json");
    if (!st) st = write_json(path, hf);
    cJSON_Delete(hf);
    cJSON_AddStringToObject(qc, "quant_method", "modelopt");
    cJSON_AddStringToObject(qc, "quant_algo", algo);
    cJSON_AddNumberToObject(qc, "group_size", group);
    cJSON_AddNullToObject(qc, "kv_cache_quant_algo");
    cJSON_AddItemToObject(qc, "ignore", cJSON_Duplicate(q->excluded, 1));
    cJSON *p2 = cJSON_AddObjectToObject(qc, "producer");
    cJSON_AddStringToObject(p2, "name", "fp4kit");
    cJSON_AddStringToObject(p2, "version", fp4_version());
  }
  /* config.json: the input's, with quantization_config replaced. */
  char *text = NULL;
  size_t len = 0;
  cJSON *config = NULL;
  if (!st) st = join_path(path, in_dir, "config.json");
  if (!st && fp4_model_read_text(path, 64u << 20, &text, &len) == FP4_OK) {
    config = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(config)) st = fp4_fail(FP4_ERR_FORMAT, "quantize: %s is not a JSON object", path);
  } else if (!st) {
    fp4_clear_error();
    config = cJSON_CreateObject(); /* no config.json: write one holding the quantization only */
  }
  if (!st) {
    cJSON_DeleteItemFromObjectCaseSensitive(config, "quantization_config");
    cJSON_AddItemToObject(config, "quantization_config", qc);
    qc = NULL;
    st = join_path(path, out_dir, "config.json");
    if (!st) st = write_json(path, config);
  }
  cJSON_Delete(config);
  cJSON_Delete(qc);
  return st;
}

/* What makes in_dir an already quantized checkpoint, written to why; 0 when nothing does. Quantizing
 * it again would write a new format's config over tensors still in the old one. */
static int already_quantized(const fp4_safetensors *st, const cJSON *config, const cJSON *hfq, char *why, size_t size) {
  if (hfq) {
    snprintf(why, size, "it has an hf_quant_config.json");
    return 1;
  }
  const cJSON *qc = fp4_model_config_item(config, "quantization_config");
  if (qc && !cJSON_IsNull(qc)) {
    const cJSON *m = cJSON_IsObject(qc) ? cJSON_GetObjectItemCaseSensitive(qc, "quant_method") : NULL;
    snprintf(why, size, "its config.json has a quantization_config%s%s%s", cJSON_IsString(m) ? " (quant_method " : "",
             cJSON_IsString(m) ? m->valuestring : "", cJSON_IsString(m) ? ")" : "");
    return 1;
  }
  static const char *const suffixes[] = {".weight_scale", ".weight_scale_2", ".weight_scale_inv", ".weight_packed",
                                          ".weight_global_scale", ".input_scale", ".input_global_scale", NULL};
  for (int64_t i = 0; i < fp4_safetensors_count(st); i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    const size_t len = strlen(t->name);
    const char *found = NULL;
    for (int k = 0; suffixes[k] && !found; k++) {
      const size_t sl = strlen(suffixes[k]);
      if (len > sl && !strcmp(t->name + len - sl, suffixes[k])) found = suffixes[k] + 1;
    }
    const int low = t->dtype == FP4_ST_F8_E4M3 || t->dtype == FP4_ST_F8_E5M2 || t->dtype == FP4_ST_F8_E8M0 ||
                    t->dtype == FP4_ST_F4;
    if (found || low) {
      snprintf(why, size, "tensor '%s' (%s) is %s", t->name, fp4_st_dtype_name(t->dtype),
               found ? "a quantization scale or packed FP4 weight" : "stored in an FP4/FP8 format");
      return 1;
    }
  }
  return 0;
}

/* Writes the whole output into dir (the temporary directory). */
static fp4_status quantize_into(qctx *q, fp4_safetensors *st, const char *in_dir, const char *dir) {
  const fp4_model_quantize_options *o = q->o;
  fp4_status s = FP4_OK;
  const int nfiles = fp4_safetensors_file_count(st);
  int64_t done = 0, total = fp4_safetensors_count(st);
  cJSON *weight_map = cJSON_CreateObject();
  uint64_t total_size = 0;
  char module[1024];
  for (int f = 0; f < nfiles && !s; f++) {
    char path[PATH_MAX];
    const char *shard = base_name(fp4_safetensors_file(st, f));
    fp4_st_writer *w = NULL;
    if ((s = join_path(path, dir, shard)) || (s = fp4_st_writer_create(path, &w))) break;
    fp4_st_writer_metadata(w, "format", "pt");
    /* Pass 1 declares (the header goes first in the file), pass 2 writes tensor by tensor. */
    for (int pass = 0; pass < 2 && !s; pass++)
      for (int64_t i = 0; i < total && !s; i++) {
        const fp4_st_tensor *t = fp4_safetensors_at(st, i);
        if (t->file != f) continue;
        int linear;
        int quant = should_quantize(q, t, module, sizeof module, &linear);
        if (pass == 0) {
          s = quant ? declare_outputs(q, w, module, t) : fp4_st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape);
          if (!quant && linear) cJSON_AddItemToArray(q->excluded, cJSON_CreateString(module));
          continue;
        }
        if (o->progress) o->progress(o->progress_user, t->name, done, total);
        s = quant ? quantize_one(q, w, module, t) : fp4_st_writer_write(w, t->name, t->data, t->bytes);
        done++;
      }
    if (s) {
      fp4_st_writer_abort(w);
      break;
    }
    total_size += fp4_st_writer_data_bytes(w);
    if ((s = fp4_st_writer_finish(w))) break;
    /* The output's names, for the index. */
    fp4_safetensors *out = NULL;
    if ((s = fp4_safetensors_open(path, FP4_SAFETENSORS_HEADERS_ONLY, &out))) break;
    for (int64_t i = 0; i < fp4_safetensors_count(out); i++)
      cJSON_AddStringToObject(weight_map, fp4_safetensors_at(out, i)->name, shard);
    fp4_safetensors_close(out);
  }
  if (!s && o->progress) o->progress(o->progress_user, "", total, total);
  /* An index whenever the input had one or several shards. */
  char idx[PATH_MAX];
  struct stat sb;
  if (!s) s = join_path(idx, in_dir, "model.safetensors.index.json");
  if (!s && (nfiles > 1 || stat(idx, &sb) == 0)) {
    cJSON *index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total_size);
    cJSON_AddItemToObject(index, "weight_map", weight_map);
    weight_map = NULL;
    s = join_path(idx, dir, "model.safetensors.index.json");
    if (!s) s = write_json(idx, index);
    cJSON_Delete(index);
  }
  cJSON_Delete(weight_map);
  /* Other files (tokenizer, generation config, ...) are copied; config.json is rewritten. */
  DIR *d = s ? NULL : opendir(in_dir);
  for (struct dirent *de; d && !s && (de = readdir(d));) {
    const char *nm = de->d_name;
    size_t len = strlen(nm);
    if (nm[0] == '.' || (len > 12 && !strcmp(nm + len - 12, ".safetensors")) ||
        !strcmp(nm, "model.safetensors.index.json") || !strcmp(nm, "config.json") || !strcmp(nm, "hf_quant_config.json"))
      continue;
    char from[PATH_MAX], to[PATH_MAX];
    if ((s = join_path(from, in_dir, nm)) || (s = join_path(to, dir, nm))) break;
    if (stat(from, &sb) == 0 && S_ISREG(sb.st_mode)) s = copy_file(from, to);
  }
  if (d) closedir(d);
  if (!s) s = write_configs(q, in_dir, dir);
  return s;
}

fp4_status fp4_model_quantize(const char *in_dir, const char *out_dir, const fp4_model_quantize_options *o) {
  fp4_clear_error();
  static const char fn[] = "fp4_model_quantize";
  if (!in_dir || !out_dir || !o) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: in_dir, out_dir or options is NULL", fn);
  if (o->format != FP4_FORMAT_NVFP4 && o->format != FP4_FORMAT_MXFP4)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: unknown format %d", fn, (int)o->format);
  if (o->format == FP4_FORMAT_MXFP4 && o->layout != FP4_CKPT_MODELOPT)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the compressed-tensors layout is NVFP4 only", fn);
  if (!(o->input_amax >= 0.0f) || o->input_amax > 3.0e38f)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: input_amax %g must be finite and >= 0", fn, (double)o->input_amax);
  if (o->format == FP4_FORMAT_MXFP4 && o->input_amax > 0.0f)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: input_amax applies to NVFP4 only", fn);
  if (o->include_count < 0 || o->exclude_count < 0 || (o->include_count > 0 && !o->include) ||
      (o->exclude_count > 0 && !o->exclude))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: include/exclude is NULL or its count negative", fn);
  for (int i = 0; i < o->include_count + o->exclude_count; i++)
    if (!(i < o->include_count ? o->include[i] : o->exclude[i - o->include_count]))
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: a NULL include/exclude pattern", fn);
  char rin[PATH_MAX];
  if (!realpath(in_dir, rin)) return fp4_fail(FP4_ERR_NOT_FOUND, "%s: %s: %s", fn, in_dir, strerror(errno));

  /* The input's configs: an already quantized checkpoint is refused, MTP layers found. */
  fp4_status s = FP4_OK;
  cJSON *config = fp4_model_load_json(in_dir, "config.json", fn, &s);
  cJSON *hfq = s ? NULL : fp4_model_load_json(in_dir, "hf_quant_config.json", fn, &s);
  long layers = 0, nextn = 0;
  if (!s) s = fp4_model_config_int(config, "num_hidden_layers", fn, &layers);
  if (!s) s = fp4_model_config_int(config, "num_nextn_predict_layers", fn, &nextn);
  qctx q = {o, layers > 0 && nextn > 0 ? layers : LONG_MAX, NULL};
  fp4_safetensors *st = NULL;
  if (!s) s = fp4_safetensors_open(in_dir, 0, &st);
  char why[512];
  if (!s && already_quantized(st, config, hfq, why, sizeof why))
    s = fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is already quantized: %s. Quantize the BF16/F16/F32 checkpoint it "
                 "came from", fn, in_dir, why);
  cJSON_Delete(config);
  cJSON_Delete(hfq);
  /* The output goes to a temporary sibling directory that replaces out_dir only when complete. */
  fp4_out_dir od;
  if (!s) s = fp4_model_out_begin(fn, out_dir, rin, o->force, &od);
  if (!s) {
    if (!(q.excluded = cJSON_CreateArray())) s = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (!s) s = quantize_into(&q, st, in_dir, od.tmp);
    if (!s) s = fp4_model_out_commit(fn, &od);
    else fp4_model_out_abort(&od); /* the status and message of the failure stay */
  }
  fp4_safetensors_close(st);
  cJSON_Delete(q.excluded);
  return s;
}

void fp4_model_free(void *p) { free(p); }
