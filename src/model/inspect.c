/* Model inspection from config files and tensor headers only (no weight is read): architecture,
 * quantization scheme, census of linear modules by storage type, excluded modules, MTP heads and
 * the GEMM list sharded for TP/EP. One JSON document is built; text is rendered from it. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/model_internal.h"
#include "model/shard.h"

static const char *dtype_label(fp4_st_dtype d) {
  static const char *lower[FP4_ST_DTYPE_COUNT] = {"bool", "u8", "i8", "fp8", "fp8", "e8m0", "i16", "u16", "f16",
                                                  "bf16", "i32", "u32", "f32", "f64", "i64", "u64", "fp4"};
  return (int)d >= 0 && d < FP4_ST_DTYPE_COUNT ? lower[d] : "?";
}

/* The tensor module + suffix, or NULL. */
static const fp4_st_tensor *find_beside(const fp4_safetensors *st, const char *module, size_t module_len,
                                        const char *suffix) {
  char name[1200];
  const size_t sl = strlen(suffix);
  if (module_len + sl + 1 > sizeof name) return NULL; /* longer than any module name kept */
  memcpy(name, module, module_len);
  memcpy(name + module_len, suffix, sl + 1);
  return fp4_safetensors_find(st, name);
}

/* Storage of the linear module whose 2-D weight tensor is w (.weight, or .weight_packed when packed)
 * and the weight's logical K: FP4 holds two values a byte, compressed-tensors pack-quantized integers
 * 32 / int_bits values an I32. */
static const char *storage_of(const fp4_safetensors *st, const char *module, size_t module_len, const fp4_st_tensor *w,
                              int packed, int int_bits, int64_t *k) {
  *k = w->shape[1];
  if (packed && w->dtype == FP4_ST_I32) { /* integer weights: no FP4 format fp4kit computes */
    *k = w->shape[1] * (32 / int_bits);
    return int_bits == 8 ? "int8" : int_bits == 2 ? "int2" : "int4";
  }
  if (w->dtype == FP4_ST_U8) {
    const fp4_st_tensor *s = find_beside(st, module, module_len, ".weight_scale");
    if (s && (s->dtype == FP4_ST_F8_E4M3 || s->dtype == FP4_ST_U8 || s->dtype == FP4_ST_F8_E8M0)) {
      *k = w->shape[1] * 2;
      return s->dtype == FP4_ST_F8_E4M3 ? "nvfp4" : "mxfp4";
    }
    return "u8";
  }
  if (w->dtype == FP4_ST_F8_E4M3 || w->dtype == FP4_ST_F8_E5M2) return "fp8";
  return dtype_label(w->dtype);
}

/* gpt-oss MXFP4 weights: X_blocks U8 [(E,) N, K/32, 16] (16 bytes = one block of 32 FP4 values) beside
 * X_scales U8 [(E,) N, K/32] (E8M0). 1 with n, k and the experts (0 without the expert dimension)
 * when t is such a weight; its storage is "mxfp4" with matching scales, else "u8". */
static int blocks_weight(const fp4_safetensors *st, const fp4_st_tensor *t, size_t module_len, int64_t *n, int64_t *k,
                         int64_t *experts, const char **storage) {
  const int nd = t->ndim;
  if (t->dtype != FP4_ST_U8 || (nd != 3 && nd != 4)) return 0;
  const int64_t blocks = t->shape[nd - 2], bytes = t->shape[nd - 1];
  if (blocks > 0 && bytes > INT64_MAX / 2 / blocks) return 0; /* no K this arithmetic holds */
  if (nd == 4 && t->shape[0] > INT_MAX) return 0;
  *n = t->shape[nd - 3];
  *k = blocks * bytes * 2;
  *experts = nd == 4 ? t->shape[0] : 0;
  const fp4_st_tensor *s = find_beside(st, t->name, module_len, "_scales");
  int scales = s && (s->dtype == FP4_ST_U8 || s->dtype == FP4_ST_F8_E8M0) && s->ndim == nd - 1 && bytes == 16;
  for (int i = 0; scales && i < nd - 1; i++) scales = s->shape[i] == t->shape[i];
  *storage = scales ? "mxfp4" : "u8";
  return 1;
}

/* The role of a module: its name with every numeric path component replaced by '*' (decoder layers,
 * experts, vision blocks, GPT-2's h.N, Sequential indices), so that one row stands for all its
 * instances. Also returns the index after the first "layers." (the decoder layer, which says MTP),
 * the index after "experts." and the first other index (the instance a routed expert belongs to). */
static void role_of(const char *name, char *role, size_t size, long *layer, long *outer, long *expert) {
  *layer = *outer = *expert = -1;
  size_t o = 0;
  for (const char *p = name; *p && o + 2 < size;) {
    /* Only a component of digits collapses: test the cheap condition first, since this runs for
     * every character of every GEMM name of a large inspection. */
    if (isdigit((unsigned char)*p) && (p == name || p[-1] == '.')) {
      const char *q = p;
      while (isdigit((unsigned char)*q)) q++;
      if (*q == '.' || !*q) {
        const long v = strtol(p, NULL, 10); /* LONG_MAX for a run of digits no long holds */
        if (p - name >= 8 && !memcmp(p - 8, "experts.", 8)) {
          *expert = v;
        } else {
          if (*layer < 0 && p - name >= 7 && !memcmp(p - 7, "layers.", 7)) *layer = v;
          if (*outer < 0) *outer = v;
        }
        role[o++] = '*';
        p = q;
        continue;
      }
    }
    role[o++] = *p++;
  }
  role[fp4_model_utf8_span(role, o)] = 0; /* a name cut short ends on a whole character */
}

static int has_suffix(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static fp4_shard_kind shard_kind(const char *role, int expert) {
  static const char *const col[] = {"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj",
                                    "w1", "w3", "lm_head", "q_b_proj", "kv_b_proj", "in_proj_qkvz", "in_proj_ba",
                                    "in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "fc1", "c_fc", NULL};
  static const char *const row[] = {"o_proj", "down_proj", "out_proj", "w2", "fc2", "dense", "c_proj", NULL};
  const char *last = strrchr(role, '.');
  last = last ? last + 1 : role;
  for (int i = 0; col[i]; i++)
    if (!strcmp(last, col[i])) return expert ? FP4_SHARD_EXPERT_COLUMN : FP4_SHARD_COLUMN;
  for (int i = 0; row[i]; i++)
    if (!strcmp(last, row[i])) return expert ? FP4_SHARD_EXPERT_ROW : FP4_SHARD_ROW;
  return FP4_SHARD_REPLICATED; /* routers, low-rank projections, MTP fc and anything unknown */
}

/* ---- exclude lists ----------------------------------------------------------------------------------
 * Three spellings: module names (a name excludes itself and every module inside it: transformers'
 * modules_to_not_convert, compressed-tensors' ignore), shell globs (modelopt's exclude_modules,
 * "model.layers.3*", fp4_model_glob) and compressed-tensors' "re:"
 * regular expressions, matched from the start of the name as Python's re.match does. The patterns come
 * from the checkpoint: globs are matched in time linear in pattern x name, and regular expressions are
 * evaluated only in a subset glibc matches without blowing up (no repetition counts, no
 * back-references, no Python-only syntax); any other pattern is reported as not evaluated. */


typedef struct exclude_pattern {
  const char *text; /* the pattern, "re:" dropped */
  int kind;         /* 0 a module name, 1 a glob, 2 a regular expression */
  regex_t re;
} exclude_pattern;

/* Bounds on the work a hostile checkpoint can ask for: regular expressions compiled, and pattern
 * matches over all modules (a real MTP layer needs well under a million). */
enum { EXCLUDE_REGEX_MAX = 256, EXCLUDE_MATCH_BUDGET = 1 << 24 };

typedef struct exclude_set {
  exclude_pattern *p;
  int count, regexes;
  int64_t budget;       /* pattern matches left */
  cJSON *not_evaluated; /* the patterns this matcher cannot evaluate */
} exclude_set;

/* A "re:" pattern in POSIX extended syntax anchored at the start, with \d and \D spelled out; 0 when it
 * is outside the subset evaluated here. */
static int regex_translate(const char *re, char *out, size_t size) {
  size_t o = 0;
  int in_set = 0;
  const size_t room = size - 4; /* "^(" ... ")" and the NUL */
  out[o++] = '^';
  out[o++] = '(';
  for (const char *p = re; *p; p++) {
    if (o + 8 > room) return 0;
    if (*p == '{' || (*p == '(' && p[1] == '?')) return 0;
    if (*p == '[' && !in_set) in_set = 1;
    else if (*p == ']' && in_set && p[-1] != '[') in_set = 0;
    if (*p != '\\') {
      out[o++] = *p;
      continue;
    }
    const char c = *++p;
    if (in_set || !c) return 0;
    if (c == 'd' || c == 'D') {
      memcpy(out + o, c == 'd' ? "[0-9]" : "[^0-9]", c == 'd' ? 5 : 6);
      o += c == 'd' ? 5 : 6;
    } else if (strchr(".^$*+?()[]|\\/-wWsS", c)) {
      out[o++] = '\\';
      out[o++] = c;
    } else {
      return 0; /* a back-reference or an escape whose meaning differs */
    }
  }
  out[o++] = ')';
  out[o] = 0;
  return !in_set;
}

static void excludes_free(exclude_set *x) {
  for (int i = 0; i < x->count; i++)
    if (x->p[i].kind == 2) regfree(&x->p[i].re);
  free(x->p);
  cJSON_Delete(x->not_evaluated);
  memset(x, 0, sizeof *x);
}

static fp4_status excludes_compile(const cJSON *list, exclude_set *x, const char *fn) {
  memset(x, 0, sizeof *x);
  x->budget = EXCLUDE_MATCH_BUDGET;
  x->p = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *x->p);
  x->not_evaluated = cJSON_CreateArray();
  if (!x->p || !x->not_evaluated) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  for (const cJSON *e = list->child; e; e = e->next) {
    if (!cJSON_IsString(e)) {
      cJSON_AddItemToArray(x->not_evaluated, cJSON_CreateString("(not a string)"));
      continue;
    }
    exclude_pattern *p = &x->p[x->count];
    p->text = e->valuestring;
    if (!strncmp(p->text, "re:", 3)) {
      char re[1600];
      p->text += 3;
      p->kind = 2;
      if (x->regexes == EXCLUDE_REGEX_MAX || strlen(p->text) > 256 || !regex_translate(p->text, re, sizeof re) ||
          regcomp(&p->re, re, REG_EXTENDED | REG_NOSUB) != 0) {
        cJSON_AddItemToArray(x->not_evaluated, cJSON_CreateString(e->valuestring));
        continue;
      }
      x->regexes++;
    } else {
      p->kind = strpbrk(p->text, "*?[") ? 1 : 0;
    }
    x->count++;
  }
  return FP4_OK;
}

/* 1 when a pattern excludes the module (or a module holding it), 0 when none does, -1 when the
 * budget of matches ran out before the answer was known. */
static int excludes_match(exclude_set *x, const char *module) {
  const size_t len = strlen(module);
  for (int i = 0; i < x->count; i++) {
    const exclude_pattern *p = &x->p[i];
    if (x->budget-- <= 0) return -1;
    if (p->kind == 0) {
      const size_t pl = strlen(p->text);
      if (pl <= len && !memcmp(module, p->text, pl) && (module[pl] == 0 || module[pl] == '.')) return 1;
    } else if (p->kind == 1) {
      if (fp4_model_glob(p->text, module, len)) return 1;
      for (size_t j = 0; j < len; j++)
        if (module[j] == '.' && x->budget-- > 0 && fp4_model_glob(p->text, module, j)) return 1;
    } else if (regexec(&p->re, module, 0, NULL, 0) == 0) {
      return 1;
    }
  }
  return 0;
}

/* ---- GEMM groups and tensors that are none ------------------------------------------------------ */

typedef struct gemm_group {
  char role[160];
  int64_t n, k;
  char storage[16];
  int64_t modules;
  int expert;                /* role has an expert index, or the weight an expert dimension */
  int mtp;                   /* part of the group's key: MTP layers are rows of their own */
  unsigned char *layer_bits; /* distinct instances of a routed expert's layer (up to 4096) */
  uint64_t hash;             /* of role, storage, n, k and mtp */
} gemm_group;

/* FNV-1a over the group key. */
static uint64_t group_hash(const char *role, const char *storage, int64_t n, int64_t k, int mtp) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = role; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (const char *p = storage; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ (uint64_t)n) * 1099511628211ull;
  h = (h ^ (uint64_t)mtp) * 1099511628211ull;
  return (h ^ (uint64_t)k) * 1099511628211ull;
}

static int is_mtp(const char *name, long layer, long first_mtp_layer) {
  return !strncmp(name, "mtp.", 4) || strstr(name, ".mtp.") != NULL || (first_mtp_layer > 0 && layer >= first_mtp_layer);
}

/* What a tensor is to the inspection. Every tensor is counted under one kind, so none goes unreported. */
enum {
  KIND_GEMM,      /* the weight of a linear layer (a row of the GEMM list) */
  KIND_COMPANION, /* a scale, zero point, bias or shape of one */
  KIND_EMBEDDING, /* a lookup table (embed_tokens, position and patch embeddings) */
  KIND_VECTOR,    /* other 0-D and 1-D tensors: norms, biases, scalars */
  KIND_OTHER,     /* none of these: listed by role */
  KIND_COUNT
};

/* The unclassified tensors by role, dtype and rank (the first instance's shape shown). */
enum { OTHER_ROLES_MAX = 64 };
typedef struct other_role {
  char role[160];
  fp4_st_dtype dtype;
  int ndim;
  int64_t shape[FP4_ST_MAX_DIMS];
  int64_t tensors;
} other_role;

/* The companion tensors of a linear layer X: X.weight_* (but a packed weight), X.input_* and X.bias,
 * and gpt-oss's X_scales and X_bias beside X_blocks. */
static int is_companion(const fp4_safetensors *st, const char *name) {
  const char *last = strrchr(name, '.');
  last = last ? last + 1 : name;
  if ((!strncmp(last, "weight_", 7) && strcmp(last, "weight_packed")) || !strncmp(last, "input_", 6) ||
      !strcmp(last, "bias"))
    return 1;
  const size_t len = strlen(name);
  const size_t base = has_suffix(name, "_scales") ? len - 7 : has_suffix(name, "_bias") ? len - 5 : 0;
  return base > 0 && find_beside(st, name, base, "_blocks") != NULL;
}

fp4_status fp4_model_inspect(const char *dir, const fp4_inspect_options *options, char **report) {
  fp4_clear_error();
  static const char fn[] = "fp4_model_inspect";
  if (!dir || !report) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: dir or report is NULL", fn);
  *report = NULL;
  fp4_inspect_options o = options ? *options : (fp4_inspect_options){1, 1, 0};
  fp4_status status = fp4_parallel_check(fn, o.tp, o.ep);
  if (status) return status;
  /* A directory, or one .safetensors file or index: the config files are those beside it. */
  char cfg_dir[PATH_MAX];
  struct stat sb;
  if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
    const char *slash = strrchr(dir, '/');
    if (!slash) snprintf(cfg_dir, sizeof cfg_dir, ".");
    else if (slash == dir) snprintf(cfg_dir, sizeof cfg_dir, "/");
    else snprintf(cfg_dir, sizeof cfg_dir, "%.*s", (int)(slash - dir), dir);
  } else if (snprintf(cfg_dir, sizeof cfg_dir, "%s", dir) >= (int)sizeof cfg_dir) {
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the path %s is too long", fn, dir);
  }
  cJSON *config = fp4_model_load_json(cfg_dir, "config.json", fn, &status);
  cJSON *hfq = status ? NULL : fp4_model_load_json(cfg_dir, "hf_quant_config.json", fn, &status);
  /* The integers of the config, range-checked before anything uses them. */
  static const char *const fields[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                       "head_dim", "intermediate_size", "moe_intermediate_size", "vocab_size",
                                       "num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok",
                                       "mtp_num_hidden_layers", "num_nextn_predict_layers", NULL};
  enum { F_LAYERS = 1, F_KV_HEADS = 3, F_ACTIVE = 11, F_MTP_LAYERS = 12, F_NEXTN = 13, F_COUNT = 14 };
  long field[F_COUNT];
  for (int i = 0; fields[i] && !status; i++) status = fp4_model_config_int(config, fields[i], fn, &field[i]);
  if (status) {
    cJSON_Delete(config);
    cJSON_Delete(hfq);
    return status;
  }
  fp4_safetensors *st = NULL;
  if ((status = fp4_safetensors_open(dir, FP4_SAFETENSORS_HEADERS_ONLY, &st))) {
    cJSON_Delete(config);
    cJSON_Delete(hfq);
    return status;
  }
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "directory", dir);
  cJSON_AddNumberToObject(doc, "shards", fp4_safetensors_file_count(st));
  cJSON_AddNumberToObject(doc, "tensors", (double)fp4_safetensors_count(st));

  /* Architecture. */
  cJSON *arch = cJSON_AddObjectToObject(doc, "architecture");
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(config, "architectures");
  if (cJSON_IsArray(archs) && cJSON_IsString(archs->child)) cJSON_AddStringToObject(arch, "name", archs->child->valuestring);
  const cJSON *mt = fp4_model_config_item(config, "model_type");
  if (cJSON_IsString(mt)) cJSON_AddStringToObject(arch, "model_type", mt->valuestring);
  for (int i = 0; fields[i]; i++)
    if (field[i]) cJSON_AddNumberToObject(arch, fields[i], (double)field[i]);
  const long layers = field[F_LAYERS];
  const long active = field[F_ACTIVE];
  const long kv_heads = field[F_KV_HEADS];
  const long nextn = field[F_NEXTN];
  const long first_mtp_layer = nextn > 0 && layers > 0 ? layers : 0;

  /* Quantization scheme. */
  cJSON *quant = cJSON_AddObjectToObject(doc, "quantization");
  cJSON *excluded = NULL;
  int int_bits = 4; /* values of compressed-tensors pack-quantized integer weights */
  const cJSON *hq = cJSON_GetObjectItemCaseSensitive(hfq, "quantization");
  const cJSON *qc = cJSON_GetObjectItemCaseSensitive(config, "quantization_config");
  if (cJSON_IsObject(hq)) {
    cJSON_AddStringToObject(quant, "source", "hf_quant_config.json");
    cJSON_AddStringToObject(quant, "method", "modelopt");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(hq, "quant_algo");
    cJSON_AddStringToObject(quant, "algorithm", cJSON_IsString(a) ? a->valuestring : "unknown");
    excluded = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(hq, "exclude_modules"), 1);
  } else if (cJSON_IsObject(qc)) {
    cJSON_AddStringToObject(quant, "source", "config.json quantization_config");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(qc, "quant_algo");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(qc, "format");
    const char *method = cJSON_IsString(m) ? m->valuestring : "unknown";
    cJSON_AddStringToObject(quant, "method", method);
    /* transformers' "mxfp4" method (gpt-oss) names no algorithm: the method is the format. */
    cJSON_AddStringToObject(quant, "algorithm", cJSON_IsString(a)       ? a->valuestring
                                                : cJSON_IsString(f)     ? f->valuestring
                                                : !strcmp(method, "mxfp4") ? "MXFP4"
                                                                        : "unknown");
    /* compressed-tensors, modelopt and transformers (gpt-oss) name the list differently. */
    static const char *const lists[] = {"ignore", "exclude_modules", "modules_to_not_convert", NULL};
    const cJSON *ign = NULL;
    for (int i = 0; lists[i] && !ign; i++) ign = cJSON_GetObjectItemCaseSensitive(qc, lists[i]);
    excluded = cJSON_Duplicate(ign, 1);
    /* The bits of the integer weights a pack-quantized I32 holds 32 / bits of. */
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(qc, "config_groups");
    for (const cJSON *g = cJSON_IsObject(groups) ? groups->child : NULL; g; g = g->next) {
      const cJSON *b = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(g, "weights"), "num_bits");
      if (cJSON_IsNumber(b) && (b->valuedouble == 2 || b->valuedouble == 4 || b->valuedouble == 8)) {
        int_bits = (int)b->valuedouble;
        break;
      }
    }
  } else {
    cJSON_AddStringToObject(quant, "method", "none");
  }
  if (!cJSON_IsArray(excluded)) {
    cJSON_Delete(excluded);
    excluded = cJSON_CreateArray();
  }
  cJSON_AddItemToObject(quant, "excluded_modules", excluded);
  exclude_set xs;
  status = excludes_compile(excluded, &xs, fn);

  /* One pass over the headers: every tensor gets a kind; linear modules by storage, GEMM groups, MTP. */
  gemm_group *groups = NULL;
  int ngroups = 0, capg = 0;
  int *slots = NULL; /* open addressing: group index or -1 */
  size_t nslots = 0;
  cJSON *census = cJSON_CreateObject();
  int64_t kinds[KIND_COUNT] = {0};
  other_role *others = calloc(OTHER_ROLES_MAX, sizeof *others);
  int nothers = 0;
  int64_t others_unlisted = 0; /* unclassified tensors of roles past the first OTHER_ROLES_MAX */
  int64_t mtp_tensors = 0, mtp_modules = 0, mtp_modules_excluded = 0, mtp_modules_unchecked = 0;
  unsigned char *mtp_experts = calloc(65536 / 8, 1);
  char mtp_storage[64] = "";
  char module[1024], role[160];
  if (!others || !mtp_experts) status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  for (int64_t i = 0; i < fp4_safetensors_count(st) && !status; i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    long layer = -1, outer = -1, expert = -1;
    int64_t n = 0, k = 0, fused_experts = 0;
    const char *storage = NULL;
    /* A linear weight: X.weight or X.weight_packed [N, K'] or gpt-oss's X_blocks; module = X. */
    size_t len = 0;
    if (t->ndim == 2 && has_suffix(t->name, ".weight")) len = strlen(t->name) - 7;
    else if (t->ndim == 2 && has_suffix(t->name, ".weight_packed")) len = strlen(t->name) - 14;
    else if (has_suffix(t->name, "_blocks") &&
             blocks_weight(st, t, strlen(t->name) - 7, &n, &k, &fused_experts, &storage))
      len = strlen(t->name) - 7;
    int kind = len ? KIND_GEMM : KIND_OTHER;
    if (len >= sizeof module) len = sizeof module - 1;
    memcpy(module, t->name, len);
    module[len] = 0;
    if (kind == KIND_GEMM && strstr(module, "embed")) kind = KIND_EMBEDDING; /* a lookup table, not a GEMM */
    /* The role (and indices) only where they are used: linear weights and MTP candidates. */
    if (kind == KIND_GEMM) role_of(module, role, sizeof role, &layer, &outer, &expert);
    else if (first_mtp_layer > 0 || is_mtp(t->name, -1, 0)) role_of(t->name, role, sizeof role, &layer, &outer, &expert);
    const int mtp = is_mtp(t->name, layer, first_mtp_layer);
    if (mtp) {
      mtp_tensors++;
      if (expert >= 0 && expert < 65536) mtp_experts[expert / 8] |= (unsigned char)(1u << (expert % 8));
      for (int64_t e = 0; e < fused_experts && e < 65536; e++) mtp_experts[e / 8] |= (unsigned char)(1u << (e % 8));
    }
    if (kind != KIND_GEMM) {
      if (kind == KIND_OTHER) {
        const char *last = strrchr(t->name, '.');
        if (is_companion(st, t->name)) kind = KIND_COMPANION;
        else if (t->ndim <= 1) kind = KIND_VECTOR;
        else if (last && !strcmp(last, ".weight") && memmem(t->name, (size_t)(last - t->name), "embed", 5))
          kind = KIND_EMBEDDING; /* also convolutional patch embeddings */
      }
      kinds[kind]++;
      if (kind != KIND_OTHER) continue;
      /* Not understood here: listed by role so that nothing is left out unsaid. */
      long l2, o2, e2;
      role_of(t->name, role, sizeof role, &l2, &o2, &e2);
      int r = 0;
      while (r < nothers && (strcmp(others[r].role, role) || others[r].dtype != t->dtype || others[r].ndim != t->ndim)) r++;
      if (r == nothers && nothers < OTHER_ROLES_MAX) {
        other_role *R = &others[nothers++];
        snprintf(R->role, sizeof R->role, "%s", role);
        R->dtype = t->dtype;
        R->ndim = t->ndim;
        memcpy(R->shape, t->shape, sizeof R->shape);
      }
      if (r < nothers) others[r].tensors++;
      else others_unlisted++;
      continue;
    }
    kinds[KIND_GEMM]++;
    if (!storage) {
      n = t->shape[0];
      storage = storage_of(st, module, len, t, has_suffix(t->name, ".weight_packed"), int_bits, &k);
    }
    /* A gpt-oss weight holds every expert of its layer: as many modules as experts. */
    const int64_t modules = fused_experts > 0 ? fused_experts : 1;
    cJSON *c = cJSON_GetObjectItemCaseSensitive(census, storage);
    if (c) cJSON_SetNumberHelper(c, c->valuedouble + (double)modules);
    else cJSON_AddNumberToObject(census, storage, (double)modules);
    if (mtp) {
      if (!strstr(mtp_storage, storage) && strlen(mtp_storage) + strlen(storage) + 2 < sizeof mtp_storage)
        snprintf(mtp_storage + strlen(mtp_storage), sizeof mtp_storage - strlen(mtp_storage), "%s%s",
                 *mtp_storage ? "," : "", storage);
      mtp_modules += modules;
      const int m = excludes_match(&xs, module);
      if (m > 0) mtp_modules_excluded += modules;
      else if (m < 0) mtp_modules_unchecked += modules;
    }
    /* Hash lookup of the group: a model has hundreds of roles and a linear scan per module added up. */
    const uint64_t h = group_hash(role, storage, n, k, mtp);
    size_t slot = (size_t)h & (nslots - 1);
    int g = -1;
    for (; slots && slots[slot] >= 0; slot = (slot + 1) & (nslots - 1)) {
      const gemm_group *G = &groups[slots[slot]];
      if (G->hash == h && G->n == n && G->k == k && G->mtp == mtp && !strcmp(G->role, role) &&
          !strcmp(G->storage, storage)) {
        g = slots[slot];
        break;
      }
    }
    if (g < 0) {
      g = ngroups;
      if (ngroups == capg) {
        capg = capg ? capg * 2 : 32;
        gemm_group *ng = realloc(groups, (size_t)capg * sizeof *ng);
        int *ns = malloc((size_t)capg * 2 * sizeof *ns);
        if (ng) groups = ng;
        if (!ng || !ns) {
          free(ns);
          status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
          break;
        }
        /* Rehash into a table of twice the group capacity: never more than half full. */
        free(slots);
        slots = ns;
        nslots = (size_t)capg * 2;
        for (size_t s2 = 0; s2 < nslots; s2++) slots[s2] = -1;
        for (int r = 0; r < ngroups; r++) {
          size_t j = (size_t)groups[r].hash & (nslots - 1);
          while (slots[j] >= 0) j = (j + 1) & (nslots - 1);
          slots[j] = r;
        }
        for (slot = (size_t)h & (nslots - 1); slots[slot] >= 0;) slot = (slot + 1) & (nslots - 1);
      }
      slots[slot] = g;
      memset(&groups[g], 0, sizeof groups[g]);
      snprintf(groups[g].role, sizeof groups[g].role, "%s", role);
      snprintf(groups[g].storage, sizeof groups[g].storage, "%s", storage);
      groups[g].n = n;
      groups[g].k = k;
      groups[g].hash = h;
      groups[g].expert = expert >= 0 || fused_experts > 0;
      groups[g].mtp = mtp;
      groups[g].layer_bits = calloc(4096 / 8, 1);
      ngroups++;
    }
    groups[g].modules += modules;
    /* A routed expert's instance is its decoder layer (or the first other index). */
    const long instance = layer >= 0 ? layer : outer;
    if (instance >= 0 && instance < 4096 && groups[g].layer_bits)
      groups[g].layer_bits[instance / 8] |= (unsigned char)(1u << (instance % 8));
  }
  cJSON_AddItemToObject(doc, "census", census);

  /* Every tensor by kind, and those of no kind by role. */
  static const char *const kind_names[KIND_COUNT] = {"gemm_weights", "gemm_scales_and_biases", "embeddings", "vectors",
                                                     "unclassified"};
  cJSON *kj = cJSON_AddObjectToObject(doc, "tensor_kinds");
  for (int i = 0; i < KIND_COUNT; i++) cJSON_AddNumberToObject(kj, kind_names[i], (double)kinds[i]);
  cJSON *oj = cJSON_AddArrayToObject(doc, "unclassified");
  for (int r = 0; r < nothers; r++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", others[r].role);
    cJSON_AddStringToObject(e, "dtype", dtype_label(others[r].dtype));
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < others[r].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)others[r].shape[d]));
    cJSON_AddNumberToObject(e, "tensors", (double)others[r].tensors);
    cJSON_AddItemToArray(oj, e);
  }
  cJSON_AddNumberToObject(doc, "unclassified_not_listed", (double)others_unlisted);
  free(others);

  /* MTP heads. The exclude list is matched against their modules' names: a pattern need not say "mtp". */
  cJSON *mtpj = cJSON_AddObjectToObject(doc, "mtp");
  long mtp_cfg = field[F_MTP_LAYERS];
  if (!mtp_cfg) mtp_cfg = nextn;
  int64_t mtp_nexperts = 0;
  for (int b = 0; mtp_experts && b < 65536; b++) mtp_nexperts += (mtp_experts[b / 8] >> (b % 8)) & 1;
  free(mtp_experts);
  cJSON_AddBoolToObject(mtpj, "present", mtp_tensors > 0);
  cJSON_AddNumberToObject(mtpj, "config_layers", (double)mtp_cfg);
  cJSON_AddNumberToObject(mtpj, "tensors", (double)mtp_tensors);
  cJSON_AddNumberToObject(mtpj, "experts", (double)mtp_nexperts);
  cJSON_AddStringToObject(mtpj, "storage", mtp_storage);
  cJSON_AddNumberToObject(mtpj, "modules", (double)mtp_modules);
  cJSON_AddNumberToObject(mtpj, "modules_excluded", (double)mtp_modules_excluded);
  cJSON_AddNumberToObject(mtpj, "modules_not_checked", (double)mtp_modules_unchecked);
  cJSON_AddBoolToObject(mtpj, "listed_in_excludes", mtp_modules > 0 && mtp_modules_excluded == mtp_modules);
  cJSON *not_evaluated = xs.not_evaluated;
  xs.not_evaluated = NULL;
  if (not_evaluated) cJSON_AddItemToObject(quant, "patterns_not_evaluated", not_evaluated);
  excludes_free(&xs);

  /* GEMM list. */
  cJSON *gemms = cJSON_AddArrayToObject(doc, "gemms");
  cJSON_AddNumberToObject(doc, "tp", o.tp);
  cJSON_AddNumberToObject(doc, "ep", o.ep);
  for (int g = 0; g < ngroups && !status; g++) {
    gemm_group *G = &groups[g];
    /* A dense row counts its modules (one GEMM each); a routed expert's row its layers, each holding
     * modules / layers experts. */
    int64_t count = G->modules;
    if (G->expert) {
      count = 0;
      for (int b = 0; G->layer_bits && b < 4096; b++) count += (G->layer_bits[b / 8] >> (b % 8)) & 1;
      if (count == 0) count = 1;
      if (G->modules / count > INT_MAX) {
        status = fp4_fail(FP4_ERR_FORMAT, "%s: %s holds %lld experts a layer, more than an int counts", fn, G->role,
                          (long long)(G->modules / count));
        break;
      }
    }
    fp4_linear_desc d = {G->role, G->n, G->k, count, shard_kind(G->role, G->expert), G->storage, 0, 0, 0, 0, 0};
    if (G->expert) {
      d.experts = (int)(G->modules / count);
      d.active = active > 0 ? (int)active : d.experts;
    }
    fp4_gemm_shape s;
    const char *last = strrchr(G->role, '.');
    last = last ? last + 1 : G->role;
    if (!G->expert && (!strcmp(last, "k_proj") || !strcmp(last, "v_proj")) && kv_heads > 0 && kv_heads < o.tp) {
      d.kind = FP4_SHARD_REPLICATED; /* fewer KV heads than ranks: each rank keeps one head */
      d.n = G->n / kv_heads;
    }
    if ((status = fp4_linear_shard(fn, &d, o.tp, o.ep, &s))) break;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", G->role);
    cJSON_AddNumberToObject(e, "n", (double)s.n);
    cJSON_AddNumberToObject(e, "k", (double)s.k);
    cJSON_AddNumberToObject(e, "count", (double)s.count);
    cJSON_AddNumberToObject(e, "experts", s.experts);
    cJSON_AddStringToObject(e, "dtype", G->storage);
    cJSON_AddBoolToObject(e, "mtp", G->mtp);
    cJSON_AddItemToArray(gemms, e);
  }
  for (int g = 0; g < ngroups; g++) free(groups[g].layer_bits);
  free(groups);
  free(slots);
  fp4_safetensors_close(st);
  cJSON_Delete(config);
  cJSON_Delete(hfq);
  if (status) {
    cJSON_Delete(doc);
    return status;
  }
  char *out = NULL;
  if (o.json) {
    /* JSON text is UTF-8: a directory name that is not (any bytes on Linux) has its invalid bytes
     * replaced by U+FFFD rather than written raw. */
    char *printed = cJSON_Print(doc);
    out = printed ? fp4_model_utf8_repair(printed) : NULL;
    free(printed);
  } else {
    /* Text for people, from the same document. */
    size_t cap = 1 << 16, len = 0;
    out = malloc(cap);
#define EMIT(...)                                                                   \
  do {                                                                              \
    int need = snprintf(NULL, 0, __VA_ARGS__);                                      \
    if (out && len + (size_t)need + 1 > cap) {                                      \
      while (len + (size_t)need + 1 > cap) cap *= 2;                                \
      char *grown = realloc(out, cap);                                              \
      if (!grown) free(out);                                                        \
      out = grown;                                                                  \
    }                                                                               \
    if (out) len += (size_t)snprintf(out + len, cap - len, __VA_ARGS__);            \
  } while (0)
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(arch, "name");
    EMIT("model        %s (%s)\n", dir, cJSON_IsString(an) ? an->valuestring : "no config.json architecture");
    EMIT("files        %d shard(s), %lld tensors\n", (int)cJSON_GetObjectItem(doc, "shards")->valuedouble,
         (long long)cJSON_GetObjectItem(doc, "tensors")->valuedouble);
    EMIT("architecture");
    for (const cJSON *f = arch->child; f; f = f->next)
      if (cJSON_IsNumber(f)) EMIT(" %s=%ld", f->string, (long)f->valuedouble);
    EMIT("\n");
    const cJSON *qm = cJSON_GetObjectItem(quant, "method"), *qa = cJSON_GetObjectItem(quant, "algorithm");
    EMIT("quantization %s%s%s\n", qm->valuestring, qa ? " " : "", qa ? qa->valuestring : "");
    EMIT("storage      ");
    for (const cJSON *c = census->child; c; c = c->next) EMIT("%s: %ld modules  ", c->string, (long)c->valuedouble);
    EMIT("\nexcluded     %d module pattern(s)", cJSON_GetArraySize(excluded));
    int shown = 0;
    for (const cJSON *e = excluded->child; e && shown < 8; e = e->next, shown++)
      EMIT("%s%s", shown ? ", " : ": ", cJSON_IsString(e) ? e->valuestring : "?");
    if (cJSON_GetArraySize(excluded) > 8) EMIT(", ...");
    if (cJSON_GetArraySize(not_evaluated) > 0) {
      EMIT("; not evaluated (not matched against any module)");
      shown = 0;
      for (const cJSON *e = not_evaluated->child; e && shown < 8; e = e->next, shown++)
        EMIT("%s%s", shown ? ", " : ": ", e->valuestring);
    }
    EMIT("\n");
    EMIT("tensors      %lld GEMM weight(s), %lld scale/bias tensor(s) of them, %lld embedding(s), %lld vector(s) "
         "(norms, biases, scalars), %lld unclassified\n", (long long)kinds[KIND_GEMM], (long long)kinds[KIND_COMPANION],
         (long long)kinds[KIND_EMBEDDING], (long long)kinds[KIND_VECTOR], (long long)kinds[KIND_OTHER]);
    if (kinds[KIND_OTHER] > 0) {
      EMIT("unclassified %lld tensor(s) not read as GEMMs, left out of the list below", (long long)kinds[KIND_OTHER]);
      shown = 0;
      for (const cJSON *e = oj->child; e && shown < 8; e = e->next, shown++) {
        EMIT("%s%s %s [", shown ? ", " : ": ", cJSON_GetObjectItem(e, "name")->valuestring,
             cJSON_GetObjectItem(e, "dtype")->valuestring);
        for (const cJSON *d = cJSON_GetObjectItem(e, "shape")->child; d; d = d->next)
          EMIT("%s%lld", d == cJSON_GetObjectItem(e, "shape")->child ? "" : ",", (long long)d->valuedouble);
        EMIT("] x%lld", (long long)cJSON_GetObjectItem(e, "tensors")->valuedouble);
      }
      if (cJSON_GetArraySize(oj) > 8 || others_unlisted > 0) EMIT(", ...");
      EMIT("\n");
    }
    if (mtp_tensors > 0) {
      EMIT("mtp heads    yes: %ld layer(s) in config, %lld tensors, %lld experts, storage %s", mtp_cfg,
           (long long)mtp_tensors, (long long)mtp_nexperts, *mtp_storage ? mtp_storage : "-");
      if (mtp_modules > 0 && mtp_modules_excluded == 0 && mtp_modules_unchecked == 0) EMIT(" (not in the exclude list)");
      else if (mtp_modules_excluded < mtp_modules)
        EMIT(" (%lld of %lld modules in the exclude list)", (long long)mtp_modules_excluded, (long long)mtp_modules);
      if (mtp_modules_unchecked > 0)
        EMIT(" (%lld modules not checked against it: too many patterns x modules)", (long long)mtp_modules_unchecked);
      EMIT("\n");
    } else {
      EMIT("mtp heads    none in the tensors%s\n", mtp_cfg ? " (the config declares some)" : "");
    }
    EMIT("\nGEMMs (TP %d, EP %d): y[M,N] = x[M,K] * W[N,K]^T per rank\n", o.tp, o.ep);
    EMIT("%-56s %8s %8s %8s %8s  %s\n", "name", "N", "K", "count", "experts", "dtype");
    for (const cJSON *e = gemms->child; e; e = e->next)
      EMIT("%-56s %8lld %8lld %8lld %8d  %s%s\n", cJSON_GetObjectItem(e, "name")->valuestring,
           (long long)cJSON_GetObjectItem(e, "n")->valuedouble, (long long)cJSON_GetObjectItem(e, "k")->valuedouble,
           (long long)cJSON_GetObjectItem(e, "count")->valuedouble, (int)cJSON_GetObjectItem(e, "experts")->valuedouble,
           cJSON_GetObjectItem(e, "dtype")->valuestring, cJSON_IsTrue(cJSON_GetObjectItem(e, "mtp")) ? " (mtp)" : "");
#undef EMIT
  }
  cJSON_Delete(doc);
  if (!out) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory for the report", fn);
  *report = out;
  return FP4_OK;
}
