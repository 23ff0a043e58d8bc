/* Model inspection from config files and tensor headers only (no weight is read): architecture,
 * quantization scheme, census of linear modules by storage type, excluded modules, MTP heads and
 * the GEMM list sharded for TP/EP. One JSON document is built; text is rendered from it. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/model_internal.h"
#include "model/shard.h"

/* Storage of the linear module whose weight tensor is w. */
static const char *storage_of(const fp4_safetensors *st, const char *module, size_t module_len, const fp4_st_tensor *w,
                              int packed) {
  char name[1200];
  static const char suffix[] = ".weight_scale";
  if (module_len + sizeof suffix > sizeof name) module_len = sizeof name - sizeof suffix; /* as snprintf truncated */
  memcpy(name, module, module_len);
  memcpy(name + module_len, suffix, sizeof suffix);
  const fp4_st_tensor *s = fp4_safetensors_find(st, name);
  if (w->dtype == FP4_ST_U8 || packed) {
    if (s && s->dtype == FP4_ST_F8_E4M3) return "nvfp4";
    if (s && (s->dtype == FP4_ST_U8 || s->dtype == FP4_ST_F8_E8M0)) return "mxfp4";
    return "u8";
  }
  if (w->dtype == FP4_ST_F8_E4M3 || w->dtype == FP4_ST_F8_E5M2) return "fp8";
  if (w->dtype == FP4_ST_F4) return "fp4";
  static const char *lower[FP4_ST_DTYPE_COUNT] = {"bool", "u8", "i8", "fp8", "fp8", "e8m0", "i16", "u16", "f16",
                                                  "bf16", "i32", "u32", "f32", "f64", "i64", "u64", "fp4"};
  return lower[w->dtype];
}

/* Name with layer and expert indices replaced by '*': the GEMM's role. Also returns the indices. */
static void role_of(const char *name, char *role, size_t size, long *layer, long *expert) {
  *layer = -1;
  *expert = -1;
  size_t o = 0;
  for (const char *p = name; *p && o + 2 < size;) {
    /* Only a digit right after a '.' can follow "layers." or "experts.": test that first, since the
     * comparisons for every character of every name were the bulk of a large inspection. */
    int after_layers = 0, after_experts = 0;
    if (p > name && p[-1] == '.' && isdigit((unsigned char)*p)) {
      after_layers = p - name >= 7 && !memcmp(p - 7, "layers.", 7);
      after_experts = p - name >= 8 && !memcmp(p - 8, "experts.", 8);
    }
    if (after_layers || after_experts) {
      long v = strtol(p, (char **)&p, 10);
      if (after_layers && *layer < 0) *layer = v;
      else if (after_experts) *expert = v;
      role[o++] = '*';
      continue;
    }
    role[o++] = *p++;
  }
  role[o] = 0;
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

typedef struct gemm_group {
  char role[160];
  int64_t n, k;
  char storage[16];
  int64_t modules;
  long layers_seen[2]; /* min, max layer index seen */
  int expert;          /* role has an expert index */
  int mtp;
  unsigned char *layer_bits; /* distinct layers (up to 4096) */
  uint64_t hash;             /* of role, storage, n and k */
} gemm_group;

/* FNV-1a over the group key. */
static uint64_t group_hash(const char *role, const char *storage, int64_t n, int64_t k) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = role; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (const char *p = storage; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ (uint64_t)n) * 1099511628211ull;
  return (h ^ (uint64_t)k) * 1099511628211ull;
}

static int is_mtp(const char *name, long layer, long first_mtp_layer) {
  return !strncmp(name, "mtp.", 4) || strstr(name, ".mtp.") != NULL || (first_mtp_layer > 0 && layer >= first_mtp_layer);
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
    cJSON_AddStringToObject(quant, "method", cJSON_IsString(m) ? m->valuestring : "unknown");
    cJSON_AddStringToObject(quant, "algorithm", cJSON_IsString(a) ? a->valuestring : cJSON_IsString(f) ? f->valuestring : "unknown");
    const cJSON *ign = cJSON_GetObjectItemCaseSensitive(qc, "ignore");
    if (!ign) ign = cJSON_GetObjectItemCaseSensitive(qc, "exclude_modules");
    excluded = cJSON_Duplicate(ign, 1);
  } else {
    cJSON_AddStringToObject(quant, "method", "none");
  }
  if (!cJSON_IsArray(excluded)) {
    cJSON_Delete(excluded);
    excluded = cJSON_CreateArray();
  }
  cJSON_AddItemToObject(quant, "excluded_modules", excluded);

  /* One pass over the headers: linear modules by storage, GEMM groups, MTP. */
  gemm_group *groups = NULL;
  int ngroups = 0, capg = 0;
  int *slots = NULL; /* open addressing: group index or -1 */
  size_t nslots = 0;
  cJSON *census = cJSON_CreateObject();
  int64_t mtp_tensors = 0;
  unsigned char *mtp_experts = calloc(65536 / 8, 1);
  char mtp_storage[64] = "";
  char module[1024], role[160];
  for (int64_t i = 0; i < fp4_safetensors_count(st) && !status; i++) {
    const fp4_st_tensor *t = fp4_safetensors_at(st, i);
    long layer = -1, expert = -1;
    const int packed = has_suffix(t->name, ".weight_packed");
    const int linear = (packed || has_suffix(t->name, ".weight")) && t->ndim == 2;
    /* The role (and indices) only where they are used: linear weights and MTP candidates. */
    if (linear || first_mtp_layer > 0 || is_mtp(t->name, -1, 0)) role_of(t->name, role, sizeof role, &layer, &expert);
    const int mtp = is_mtp(t->name, layer, first_mtp_layer);
    if (mtp) {
      mtp_tensors++;
      if (expert >= 0 && expert < 65536 && mtp_experts) mtp_experts[expert / 8] |= (unsigned char)(1u << (expert % 8));
    }
    if (!linear) continue;
    size_t len = strlen(t->name) - (packed ? 14 : 7);
    if (len >= sizeof module) len = sizeof module - 1;
    memcpy(module, t->name, len);
    module[len] = 0;
    const char *storage = storage_of(st, module, len, t, packed);
    if (strstr(module, "embed")) continue; /* a lookup table, not a GEMM */
    const int fp4 = !strcmp(storage, "nvfp4") || !strcmp(storage, "mxfp4");
    const int64_t n = t->shape[0], k = fp4 ? t->shape[1] * 2 : t->shape[1];
    cJSON *c = cJSON_GetObjectItemCaseSensitive(census, storage);
    if (c) cJSON_SetNumberHelper(c, c->valuedouble + 1);
    else cJSON_AddNumberToObject(census, storage, 1);
    if (mtp && !strstr(mtp_storage, storage) && strlen(mtp_storage) + strlen(storage) + 2 < sizeof mtp_storage)
      snprintf(mtp_storage + strlen(mtp_storage), sizeof mtp_storage - strlen(mtp_storage), "%s%s",
               *mtp_storage ? "," : "", storage);
    role[strlen(role) - (packed ? 14 : 7)] = 0;
    /* Hash lookup of the group: a model has hundreds of roles and a linear scan per module added up. */
    const uint64_t h = group_hash(role, storage, n, k);
    size_t slot = (size_t)h & (nslots - 1);
    int g = -1;
    for (; slots && slots[slot] >= 0; slot = (slot + 1) & (nslots - 1)) {
      const gemm_group *G = &groups[slots[slot]];
      if (G->hash == h && G->n == n && G->k == k && !strcmp(G->role, role) && !strcmp(G->storage, storage)) {
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
      groups[g].expert = expert >= 0;
      groups[g].mtp = mtp;
      groups[g].layer_bits = calloc(4096 / 8, 1);
      ngroups++;
    }
    groups[g].modules++;
    if (layer >= 0 && layer < 4096 && groups[g].layer_bits)
      groups[g].layer_bits[layer / 8] |= (unsigned char)(1u << (layer % 8));
  }
  cJSON_AddItemToObject(doc, "census", census);

  /* MTP heads. */
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
  int mtp_listed = 0;
  for (const cJSON *e = excluded->child; e; e = e->next)
    if (cJSON_IsString(e) && (strstr(e->valuestring, "mtp") != NULL)) mtp_listed = 1;
  cJSON_AddBoolToObject(mtpj, "listed_in_excludes", mtp_listed);

  /* GEMM list. */
  cJSON *gemms = cJSON_AddArrayToObject(doc, "gemms");
  cJSON_AddNumberToObject(doc, "tp", o.tp);
  cJSON_AddNumberToObject(doc, "ep", o.ep);
  for (int g = 0; g < ngroups && !status; g++) {
    gemm_group *G = &groups[g];
    int64_t nlayers = 0;
    for (int b = 0; G->layer_bits && b < 4096; b++) nlayers += (G->layer_bits[b / 8] >> (b % 8)) & 1;
    if (nlayers == 0) nlayers = 1;
    fp4_linear_desc d = {G->role, G->n, G->k, nlayers, shard_kind(G->role, G->expert), G->storage, 0, 0, 0, 0, 0};
    if (G->expert) {
      d.experts = (int)(G->modules / nlayers);
      d.active = active > 0 ? (int)active : d.experts;
    }
    fp4_gemm_shape s;
    const char *last = strrchr(G->role, '.');
    last = last ? last + 1 : G->role;
    if (!G->expert && (!strcmp(last, "k_proj") || !strcmp(last, "v_proj")) && kv_heads > 0 && kv_heads < o.tp) {
      d.kind = FP4_SHARD_REPLICATED; /* fewer KV heads than ranks: each rank keeps one head */
      d.n = G->n / kv_heads;
    }
    if ((status = fp4_linear_shard(&d, o.tp, o.ep, &s))) break;
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
    EMIT("\n");
    if (mtp_tensors > 0)
      EMIT("mtp heads    yes: %ld layer(s) in config, %lld tensors, %lld experts, storage %s%s\n", mtp_cfg,
           (long long)mtp_tensors, (long long)mtp_nexperts, *mtp_storage ? mtp_storage : "-",
           mtp_listed ? "" : " (not in the exclude list)");
    else
      EMIT("mtp heads    none in the tensors%s\n", mtp_cfg ? " (the config declares some)" : "");
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
