/* Checkpoint quantization: BF16/F16/F32 linear weights -> NVFP4 (Model Optimizer recipe, Model
 * Optimizer or compressed-tensors tensor names) or MXFP4, shard by shard, one tensor in memory at a
 * time. Everything that is not quantized is copied unchanged. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/error.h"
#include "model/model_internal.h"

static const char *const default_excludes[] = {"*lm_head*", "*embed*",  "*norm*",   "*router*", "*shared_expert_gate*",
                                               "mtp.*",     "*.mtp.*",  "*visual*", "*vision*", NULL};

const char *const *fp4_model_default_excludes(void) { return default_excludes; }

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

/* What becomes of a tensor. A weight is a BF16/F16/F32 2-D ".weight", or a BF16/F16/F32 tensor of 3
 * or more dimensions under an "experts" module (fused experts: experts.gate_up_proj). */
typedef enum tensor_plan {
  PLAN_COPY = 0,     /* not a weight: copied unchanged            */
  PLAN_QUANTIZE,     /* a weight written in FP4                   */
  PLAN_KEEP_DEFAULT, /* a weight kept by a default rule           */
  PLAN_KEEP_PATTERN, /* a weight kept by the include/exclude      */
  PLAN_KEEP_SHAPE    /* a weight FP4 [N, K] cannot hold            */
} tensor_plan;

enum { MAX_EXPERT_COUNTS = 8 };

typedef struct qctx {
  const fp4_model_quantize_options *o;
  long mtp_first_layer; /* DeepSeek-style MTP layers: index >= num_hidden_layers; LONG_MAX if none */
  int64_t experts[MAX_EXPERT_COUNTS]; /* the experts per MoE block (config, tensor names and shapes) */
  int nexperts;
  unsigned char *plan;  /* a tensor_plan per tensor, in fp4_safetensors_at order                  */
  fp4_model_quantize_summary sum;
  uint64_t out_bytes;   /* tensor and file bytes the output will hold                               */
  cJSON *excluded;      /* modules of the kept weights: the configs' ignore list                    */
  char **files;         /* the other files of the input directory, to copy                          */
  int nfiles;
} qctx;

static void warn(const qctx *q, const char *fmt, ...) FP4_PRINTF_LIKE(2, 3);
static void warn(const qctx *q, const char *fmt, ...) {
  if (!q->o->warning) return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  q->o->warning(q->o->warning_user, line);
}

static int float_dtype(fp4_st_dtype d) { return d == FP4_ST_BF16 || d == FP4_ST_F16 || d == FP4_ST_F32; }

/* End of the last "experts" component of name that has another component after it, or NULL. */
static const char *experts_end(const char *name) {
  const char *end = NULL;
  for (const char *p = name; (p = strstr(p, "experts.")) != NULL; p++)
    if (p == name || p[-1] == '.') end = p + 7;
  return end;
}

/* Whether t is a weight; its module into module[size]: the name without ".weight", or for fused
 * expert tensors without that suffix the experts module (what a loader's ignore list names). Other
 * tensors of 3 or more dimensions (convolutions) are not weights: nothing quantizes them. */
static int weight_module(const fp4_st_tensor *t, char *module, size_t size) {
  if (!float_dtype(t->dtype) || t->ndim < 2) return 0;
  const size_t len = strlen(t->name);
  const int suffix = len > 7 && !strcmp(t->name + len - 7, ".weight");
  const char *end = t->ndim >= 3 ? experts_end(t->name) : NULL;
  if (t->ndim == 2 ? !suffix : !end) return 0;
  snprintf(module, size, "%.*s", suffix ? (int)(len - 7) : (int)(end - t->name), t->name);
  return 1;
}

static void add_expert_count(qctx *q, int64_t n) {
  for (int i = 0; i < q->nexperts; i++)
    if (q->experts[i] == n) return;
  if (n > 0 && q->nexperts < MAX_EXPERT_COUNTS) q->experts[q->nexperts++] = n;
}

/* The experts per MoE block: from the config's counts, the largest N of "experts.N." in the tensor
 * names plus one, and the first dimension of fused expert tensors. */
static fp4_status find_expert_counts(qctx *q, const cJSON *config, const fp4_safetensors *st, const char *fn) {
  static const char *const keys[] = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", NULL};
  const cJSON *ffn = fp4_model_config_item(config, "ffn_config"); /* DBRX */
  const cJSON *where[] = {config, cJSON_IsObject(ffn) ? ffn : NULL};
  for (int w = 0; w < 2; w++)
    for (int k = 0; keys[k] && where[w]; k++) {
      long v = 0;
      fp4_status s = fp4_model_config_int(where[w], keys[k], fn, &v);
      if (s) return s;
      add_expert_count(q, v);
    }
  long top = -1;
  for (int64_t i = 0; i < fp4_safetensors_count(st); i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    const char *e = experts_end(t->name);
    if (!e) continue;
    if (t->ndim >= 3 && float_dtype(t->dtype)) add_expert_count(q, t->shape[0]);
    char *after = NULL;
    const long v = e[1] >= '0' && e[1] <= '9' ? strtol(e + 1, &after, 10) : -1;
    if (v > top && v < INT_MAX && after && *after == '.') top = v;
  }
  add_expert_count(q, top + 1);
  return FP4_OK;
}

/* A MoE router named gate: a 2-D weight with one output row per expert whose module is named gate or
 * sits directly under one (gate.wg in Hunyuan). The parent module's name plays no part: mlp.gate
 * (Qwen, DeepSeek) and block_sparse_moe.gate (Mixtral, MiniMax, Phi-MoE) are both routers. Modules
 * named router (feed_forward.router in Llama 4, mlp.router in gpt-oss, router.layer in DBRX) are kept
 * by the "*router*" default pattern whatever their rows. */
static int is_router(const qctx *q, const fp4_st_tensor *t, const char *module) {
  int per_expert = 0;
  for (int i = 0; i < q->nexperts; i++) per_expert |= t->ndim == 2 && t->shape[0] == q->experts[i];
  if (!per_expert) return 0;
  const char *last = strrchr(module, '.');
  last = last ? last + 1 : module;
  if (!strcmp(last, "gate")) return 1;
  if (last == module) return 0;
  const char *start = last - 1; /* the parent component is [start, last - 1) */
  while (start > module && start[-1] != '.') start--;
  const size_t n = (size_t)(last - 1 - start);
  return n == 4 && !memcmp(start, "gate", 4);
}

/* The plan of weight t of module by the default rules and its shape alone. */
static tensor_plan plan_by_rules(const qctx *q, const fp4_st_tensor *t, const char *module) {
  const fp4_model_quantize_options *o = q->o;
  if (!o->no_default_excludes && (matches_any(default_excludes, -1, module) ||
                                  layer_index(module) >= q->mtp_first_layer || is_router(q, t, module)))
    return PLAN_KEEP_DEFAULT;
  const int block = o->format == FP4_FORMAT_MXFP4 ? 32 : 16;
  if (t->ndim != 2 || t->shape[0] == 0 || t->shape[1] == 0 || t->shape[1] % block != 0) return PLAN_KEEP_SHAPE;
  return PLAN_QUANTIZE;
}

/* The plan of tensor t; for a weight its module into module[msize]. */
static tensor_plan plan_tensor(const qctx *q, const fp4_st_tensor *t, char *module, size_t msize) {
  const fp4_model_quantize_options *o = q->o;
  if (!weight_module(t, module, msize)) return PLAN_COPY;
  if ((o->include_count > 0 && !matches_any(o->include, o->include_count, module)) ||
      matches_any(o->exclude, o->exclude_count, module))
    return PLAN_KEEP_PATTERN;
  return plan_by_rules(q, t, module);
}

static void shape_text(const fp4_st_tensor *t, char *text, size_t size) {
  size_t n = 0;
  for (int d = 0; d < t->ndim && n < size; d++)
    n += (size_t)snprintf(text + n, size - n, "%s%lld", d ? ", " : "[", (long long)t->shape[d]);
  if (n < size) snprintf(text + n, size - n, "]");
}

/* Plans every tensor before anything is written: q->plan, the counts, the ignore list and the output's
 * tensor bytes; warns about each weight kept for its shape. No weight to quantize is an error. */
static fp4_status plan_tensors(qctx *q, const fp4_safetensors *st, const char *in_dir, const char *fn) {
  const int64_t total = fp4_safetensors_count(st);
  const int mx = q->o->format == FP4_FORMAT_MXFP4, block = mx ? 32 : 16;
  if (!(q->plan = malloc((size_t)(total > 0 ? total : 1))))
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  char module[1024], listed[1024] = "", example[1024] = "";
  for (int64_t i = 0; i < total; i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    const tensor_plan p = plan_tensor(q, t, module, sizeof module);
    q->plan[i] = (unsigned char)p;
    if (p == PLAN_QUANTIZE) {
      const uint64_t n = (uint64_t)t->shape[0], k = (uint64_t)t->shape[1];
      q->out_bytes += n * (k / 2) + n * (k / (uint64_t)block) + 8;
      q->sum.quantized++;
      continue;
    }
    q->out_bytes += t->bytes;
    if (p == PLAN_COPY) {
      q->sum.other_tensors++;
      continue;
    }
    /* For the message when nothing is quantized: a module the patterns kept from quantization. */
    if (!example[0] && p == PLAN_KEEP_PATTERN && plan_by_rules(q, t, module) == PLAN_QUANTIZE)
      snprintf(example, sizeof example, "%s", module);
    if (p == PLAN_KEEP_DEFAULT) q->sum.kept_by_default++;
    else if (p == PLAN_KEEP_PATTERN) q->sum.kept_by_pattern++;
    else q->sum.kept_for_shape++;
    /* The tensors of one fused experts module are neighbours in name order: list it once. */
    if (strcmp(module, listed)) {
      cJSON_AddItemToArray(q->excluded, cJSON_CreateString(module));
      snprintf(listed, sizeof listed, "%s", module);
    }
    if (p != PLAN_KEEP_SHAPE) continue;
    char shape[160], why[160];
    shape_text(t, shape, sizeof shape);
    if (t->ndim != 2)
      snprintf(why, sizeof why, "FP4 holds 2-D [N, K] weights and this one is %d-D%s", t->ndim,
               experts_end(t->name) ? " (fused experts)" : "");
    else if (t->shape[0] == 0 || t->shape[1] == 0)
      snprintf(why, sizeof why, "it is empty");
    else
      snprintf(why, sizeof why, "K = %lld is not a multiple of the %s block (%d)", (long long)t->shape[1],
               mx ? "MXFP4" : "NVFP4", block);
    warn(q, "%s %s %s kept unquantized: %s; the ignore list names %s", t->name, fp4_st_dtype_name(t->dtype), shape,
         why, module);
  }
  if (q->sum.quantized > 0) return FP4_OK;
  const int64_t kept = q->sum.kept_by_default + q->sum.kept_by_pattern + q->sum.kept_for_shape;
  if (!kept)
    return fp4_fail(FP4_ERR_NOT_FOUND, "%s: nothing to quantize in %s: of its %lld tensor(s) none is a BF16/F16/F32 "
                    "weight; nothing was written", fn, in_dir, (long long)total);
  return fp4_fail(FP4_ERR_NOT_FOUND, "%s: nothing to quantize in %s: all %lld weights are kept (%lld by the "
                  "include/exclude patterns, %lld by the default rules, %lld for their shape); nothing was written%s%s%s",
                  fn, in_dir, (long long)kept, (long long)q->sum.kept_by_pattern, (long long)q->sum.kept_by_default,
                  (long long)q->sum.kept_for_shape, example[0] ? ". The patterns kept modules such as '" : "", example,
                  example[0] ? "'" : "");
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

/* Copies from into to (a new file) by streaming, any size; holes stay holes (a sparse input is not
 * filled with zeros on disk). */
static fp4_status copy_file(const char *from, const char *to) {
  struct stat sb;
  const char *kind = NULL;
  int in = fp4_model_open_regular(from, &sb, &kind); /* a FIFO put in its place since the plan: no wait */
  if (in < 0)
    return kind ? fp4_fail(FP4_ERR_IO, "quantize: %s is %s, not a file to copy", from, kind)
                : fp4_fail(FP4_ERR_IO, "quantize: cannot open %s: %s", from, strerror(errno));
  int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  enum { CHUNK = 4 << 20 };
  char *buf = out >= 0 ? malloc(CHUNK) : NULL;
  fp4_status st = FP4_OK;
  if (out < 0) st = fp4_fail(FP4_ERR_IO, "quantize: cannot create %s: %s", to, strerror(errno));
  else if (!buf) st = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "quantize: out of host memory copying %s", from);
  const off_t size = sb.st_size;
  for (off_t pos = 0; !st && pos < size;) {
    off_t data = lseek(in, pos, SEEK_DATA), hole = size;
    if (data < 0 && errno == ENXIO) break; /* only a hole is left */
    if (data < 0) data = pos;              /* no hole information here: copy every byte */
    else if ((hole = lseek(in, data, SEEK_HOLE)) < 0 || hole > size) hole = size;
    for (off_t at = data; !st && at < hole;) {
      const size_t want = (size_t)(hole - at < CHUNK ? hole - at : CHUNK);
      ssize_t got = pread(in, buf, want, at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        st = fp4_fail(FP4_ERR_IO, "quantize: cannot read %s at byte %lld: %s", from, (long long)at,
                      got < 0 ? strerror(errno) : "the file became shorter while being copied");
        break;
      }
      for (ssize_t done = 0; !st && done < got;) {
        ssize_t w = pwrite(out, buf + done, (size_t)(got - done), at + done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
          st = fp4_fail(FP4_ERR_IO, "quantize: cannot write %s: %s", to, w < 0 ? strerror(errno) : "no progress");
        else done += w;
      }
      at += got;
    }
    pos = hole;
  }
  if (!st && ftruncate(out, size) != 0) st = fp4_fail(FP4_ERR_IO, "quantize: cannot size %s: %s", to, strerror(errno));
  if (!st && fsync(out) != 0) st = fp4_fail(FP4_ERR_IO, "quantize: cannot sync %s: %s", to, strerror(errno));
  free(buf);
  close(in);
  if (out >= 0) close(out);
  if (st && out >= 0) unlink(to);
  return st;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Whether name is one of the shards st opened. */
static int is_shard(const fp4_safetensors *st, const char *name) {
  for (int f = 0; f < fp4_safetensors_file_count(st); f++)
    if (!strcmp(base_name(fp4_safetensors_file(st, f)), name)) return 1;
  return 0;
}

/* The other entries of in_dir, before anything is written: each regular file is opened (so that the
 * copy at the end does not fail on it) and listed in q->files; every other entry is warned about. */
static fp4_status plan_files(qctx *q, const fp4_safetensors *st, const char *in_dir, const char *fn) {
  DIR *d = opendir(in_dir);
  if (!d) return fp4_fail(FP4_ERR_IO, "%s: cannot list %s: %s", fn, in_dir, strerror(errno));
  char **names = NULL;
  int n = 0, cap = 0;
  fp4_status s = FP4_OK;
  for (struct dirent *de; !s && (de = readdir(d));) {
    const char *nm = de->d_name;
    if (!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, "config.json") ||
        !strcmp(nm, "model.safetensors.index.json") || is_shard(st, nm))
      continue; /* written anew */
    if (n == cap) {
      char **more = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
      if (!more) s = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
      else names = more;
    }
    if (!s && !(names[n++] = strdup(nm))) s = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  closedir(d);
  if (!s && n > 1) qsort(names, (size_t)n, sizeof *names, cmp_names); /* names is NULL when n is 0 */
  if (!s && !(q->files = calloc((size_t)(n ? n : 1), sizeof *q->files)))
    s = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  for (int i = 0; i < n && !s && names[i]; i++) {
    const char *nm = names[i];
    const size_t len = strlen(nm);
    char from[PATH_MAX];
    if ((s = join_path(from, in_dir, nm))) break;
    struct stat sb, lsb;
    const char *why = NULL;
    int dir = 0;
    if (stat(from, &sb) != 0) {
      if (errno != ENOENT || lstat(from, &lsb) != 0) {
        s = fp4_fail(FP4_ERR_IO, "%s: cannot read %s: %s; nothing was written", fn, from, strerror(errno));
        break;
      }
      why = "a symbolic link to nothing";
    } else if (S_ISDIR(sb.st_mode)) {
      dir = 1;
      why = "a directory (the files directly in the input directory are copied, not those below)";
    } else if (!S_ISREG(sb.st_mode)) {
      why = "not a regular file";
    } else if (nm[0] == '.') {
      why = "a hidden file";
    } else if (len > 12 && !strcmp(nm + len - 12, ".safetensors")) {
      why = "a .safetensors file that model.safetensors.index.json does not list";
    }
    if (why) {
      q->sum.entries_skipped++;
      warn(q, "%s%s not copied: %s", nm, dir ? "/" : "", why);
      continue;
    }
    const char *kind = NULL;
    int fd = fp4_model_open_regular(from, &sb, &kind); /* readable, and still a regular file */
    if (fd < 0) {
      s = kind ? fp4_fail(FP4_ERR_IO, "%s: %s is %s now; nothing was written", fn, from, kind)
               : fp4_fail(FP4_ERR_IO, "%s: cannot read %s: %s; nothing was written", fn, from, strerror(errno));
      break;
    }
    close(fd);
    const uint64_t stored = (uint64_t)sb.st_blocks * 512u; /* a sparse file is copied sparse */
    q->out_bytes += stored < (uint64_t)sb.st_size ? stored : (uint64_t)sb.st_size;
    q->files[q->nfiles++] = names[i];
    names[i] = NULL;
    q->sum.files_copied++;
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return s;
}

/* Whether the output fits on the file system that will hold it (when that can be asked). */
static fp4_status check_space(const qctx *q, const char *dir, const char *fn) {
  struct statvfs vs;
  if (statvfs(dir, &vs) != 0) return FP4_OK; /* not known: the writes will say */
  const uint64_t avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
  if (q->out_bytes <= avail) return FP4_OK;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  return fp4_fail(FP4_ERR_IO, "%s: the output needs about %.2f GiB and the file system of %s has %.2f GiB free; "
                  "nothing was written", fn, (double)q->out_bytes / gib, dir, (double)avail / gib);
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
        const int quant = q->plan[i] == PLAN_QUANTIZE && weight_module(t, module, sizeof module);
        if (pass == 0) {
          s = quant ? declare_outputs(q, w, module, t) : fp4_st_writer_declare(w, t->name, t->dtype, t->ndim, t->shape);
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
  /* The other files (tokenizer, generation config, ...), as planned; config.json is rewritten. */
  for (int i = 0; i < q->nfiles && !s; i++) {
    char from[PATH_MAX], to[PATH_MAX];
    if (!(s = join_path(from, in_dir, q->files[i])) && !(s = join_path(to, dir, q->files[i]))) s = copy_file(from, to);
  }
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
  /* A smaller amax makes input_scale = amax/(6*448) denormal or 0, and the compressed-tensors
   * global scale, its inverse, infinite: a checkpoint no engine can run. */
  if (o->input_amax > 0.0f && o->input_amax < 6.0f * 448.0f * FLT_MIN)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: input_amax %g is below %g, where input_scale = input_amax/(6*448) "
                    "is no longer a normal float", fn, (double)o->input_amax, (double)(6.0f * 448.0f * FLT_MIN));
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
  struct stat sb;
  if (stat(rin, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: IN_DIR must be a directory: %s is not one (give the directory that "
                    "holds the checkpoint's config.json and .safetensors files)", fn, in_dir);

  /* The input's configs: an already quantized checkpoint is refused, MTP layers found. */
  fp4_status s = FP4_OK;
  cJSON *config = fp4_model_load_json(in_dir, "config.json", fn, &s);
  cJSON *hfq = s ? NULL : fp4_model_load_json(in_dir, "hf_quant_config.json", fn, &s);
  long layers = 0, nextn = 0;
  if (!s) s = fp4_model_config_int(config, "num_hidden_layers", fn, &layers);
  if (!s) s = fp4_model_config_int(config, "num_nextn_predict_layers", fn, &nextn);
  qctx q;
  memset(&q, 0, sizeof q);
  q.o = o;
  q.mtp_first_layer = layers > 0 && nextn > 0 ? layers : LONG_MAX;
  fp4_safetensors *st = NULL;
  if (!s) s = fp4_safetensors_open(in_dir, 0, &st);
  char why[512];
  if (!s && already_quantized(st, config, hfq, why, sizeof why))
    s = fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: %s is already quantized: %s. Quantize the BF16/F16/F32 checkpoint it "
                 "came from", fn, in_dir, why);
  if (!s) s = find_expert_counts(&q, config, st, fn);
  cJSON_Delete(config);
  cJSON_Delete(hfq);
  /* Everything is planned and checked before the long work: what each tensor becomes, the files to copy. */
  if (!s && !(q.excluded = cJSON_CreateArray())) s = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  const int planned = !s;
  if (!s) s = plan_tensors(&q, st, in_dir, fn);
  if (!s) s = plan_files(&q, st, in_dir, fn);
  if (planned && o->summary) *o->summary = q.sum;
  /* The output goes to a temporary sibling directory that replaces out_dir only when complete. */
  fp4_out_dir od;
  if (!s) s = fp4_model_out_begin(fn, out_dir, rin, o->force, &od);
  if (!s) {
    s = check_space(&q, od.parent, fn);
    if (!s) s = quantize_into(&q, st, in_dir, od.tmp);
    if (!s) s = fp4_model_out_commit(fn, &od);
    else fp4_model_out_abort(&od); /* the status and message of the failure stay */
  }
  fp4_safetensors_close(st);
  cJSON_Delete(q.excluded);
  free(q.plan);
  for (int i = 0; i < q.nfiles; i++) free(q.files[i]);
  free(q.files);
  return s;
}

void fp4_model_free(void *p) { free(p); }
