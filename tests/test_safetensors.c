/* safetensors: writer -> reader round trip, sharded index, every hostile-header rule, and a FIFO
 * where a shard should be. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fp4kit_model.h"

#include "model_test_check.h"

/* An image with the given header JSON and data_len bytes of data. */
static size_t image(uint8_t *buf, const char *json, size_t data_len) {
  size_t n = strlen(json);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  memcpy(buf + 8, json, n);
  for (size_t i = 0; i < data_len; i++) buf[8 + n + i] = (uint8_t)i;
  return 8 + n + data_len;
}

/* Expects FP4_ERR_FORMAT whose message contains want. */
static void hostile(const char *what, const char *json, size_t data_len, const char *want) {
  static uint8_t buf[4096];
  size_t size = image(buf, json, data_len);
  fp4_safetensors *st = NULL;
  fp4_status s = fp4_safetensors_open_memory(buf, size, &st);
  CHECK(s == FP4_ERR_FORMAT && strstr(fp4_last_error(), want), "%s: status %s, message '%s' (want '%s')", what,
        fp4_status_str(s), fp4_last_error(), want);
  CHECK(st == NULL, "%s: handle returned on failure", what);
  fp4_safetensors_close(st);
}

/* An image of one module "m" (weight U8 [2, 16], K = 32) with the scale tensors described by
 * scales_json (offsets from 32 on) and, when scalar_key is not NULL, a one-element F32 scalar of
 * that name holding value at the end; opened from memory into *st. */
static size_t module_image(uint8_t *buf, const char *weight_key, const char *scales_json, size_t scales_bytes,
                           const char *scalar_key, float value) {
  char json[600];
  int len = snprintf(json, sizeof json, "{\"m.%s\": {\"dtype\": \"U8\", \"shape\": [2, 16], \"data_offsets\": [0, 32]}, %s",
                     weight_key, scales_json);
  if (scalar_key)
    len += snprintf(json + len, sizeof json - (size_t)len,
                    ", \"m.%s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [%zu, %zu]}", scalar_key,
                    32 + scales_bytes, 36 + scales_bytes);
  snprintf(json + len, sizeof json - (size_t)len, "}");
  const size_t data = 32 + scales_bytes + (scalar_key ? 4 : 0);
  const size_t n = image(buf, json, data);
  if (scalar_key) memcpy(buf + n - 4, &value, 4);
  return n;
}

/* fp4_safetensors_qmatrix reads the three storage schemes it names (Model Optimizer NVFP4 with its
 * weight_scale_2 as the multiplier, compressed-tensors with 1/weight_global_scale, MXFP4 with U8 or
 * F8_E8M0 scales and multiplier 1) as zero-copy views, and refuses scale tensors that do not match
 * the weight: another row count, another column count than K/16 or K/32, a missing scalar. */
static void qmatrix_views(void) {
  static uint8_t buf[2048];
  static const char nv_scales[] = "\"m.weight_scale\": {\"dtype\": \"F8_E4M3\", \"shape\": [2, 2], "
                                  "\"data_offsets\": [32, 36]}";
  const struct {
    const char *what, *weight, *scales, *scalar;
    size_t scales_bytes;
    float value;
    fp4_status want;
    fp4_format format;
    float multiplier;
  } cases[] = {
      {"modelopt", "weight", nv_scales, "weight_scale_2", 4, 0.375f, FP4_OK, FP4_FORMAT_NVFP4, 0.375f},
      {"compressed-tensors", "weight_packed", nv_scales, "weight_global_scale", 4, 4.0f, FP4_OK, FP4_FORMAT_NVFP4,
       0.25f},
      {"mxfp4 u8", "weight",
       "\"m.weight_scale\": {\"dtype\": \"U8\", \"shape\": [2, 1], \"data_offsets\": [32, 34]}", NULL, 2, 0.0f,
       FP4_OK, FP4_FORMAT_MXFP4, 1.0f},
      {"mxfp4 e8m0", "weight",
       "\"m.weight_scale\": {\"dtype\": \"F8_E8M0\", \"shape\": [2, 1], \"data_offsets\": [32, 34]}", NULL, 2,
       0.0f, FP4_OK, FP4_FORMAT_MXFP4, 1.0f},
      {"scale rows", "weight",
       "\"m.weight_scale\": {\"dtype\": \"F8_E4M3\", \"shape\": [3, 2], \"data_offsets\": [32, 38]}",
       "weight_scale_2", 6, 1.0f, FP4_ERR_FORMAT, FP4_FORMAT_NVFP4, 0.0f},
      {"scale columns", "weight",
       "\"m.weight_scale\": {\"dtype\": \"F8_E4M3\", \"shape\": [2, 3], \"data_offsets\": [32, 38]}",
       "weight_scale_2", 6, 1.0f, FP4_ERR_FORMAT, FP4_FORMAT_NVFP4, 0.0f},
      {"mxfp4 scale columns", "weight",
       "\"m.weight_scale\": {\"dtype\": \"U8\", \"shape\": [2, 2], \"data_offsets\": [32, 36]}", NULL, 4, 0.0f,
       FP4_ERR_FORMAT, FP4_FORMAT_MXFP4, 0.0f},
      {"no weight_scale_2", "weight", nv_scales, NULL, 4, 0.0f, FP4_ERR_FORMAT, FP4_FORMAT_NVFP4, 0.0f},
      {"global scale of modelopt", "weight", nv_scales, "weight_global_scale", 4, 4.0f, FP4_ERR_FORMAT,
       FP4_FORMAT_NVFP4, 0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const size_t n =
        module_image(buf, cases[i].weight, cases[i].scales, cases[i].scales_bytes, cases[i].scalar, cases[i].value);
    fp4_safetensors *st = NULL;
    CHECK(fp4_safetensors_open_memory(buf, n, &st) == FP4_OK, "%s: %s", cases[i].what, fp4_last_error());
    if (!st) continue;
    fp4_qmatrix q;
    memset(&q, 0, sizeof q);
    const fp4_status got = fp4_safetensors_qmatrix(st, "m", &q);
    CHECK(got == cases[i].want, "%s: %s (%s), want %s", cases[i].what, fp4_status_str(got), fp4_last_error(),
          fp4_status_str(cases[i].want));
    if (got == FP4_OK && cases[i].want == FP4_OK) {
      const fp4_st_tensor *w = fp4_safetensors_find(st, cases[i].weight[6] ? "m.weight_packed" : "m.weight");
      const fp4_st_tensor *sc = fp4_safetensors_find(st, "m.weight_scale");
      CHECK(w && sc && q.data == w->data && q.scales == sc->data && q.rows == 2 && q.cols == 32 &&
                q.format == cases[i].format && q.layout == FP4_LAYOUT_LINEAR && q.memory == FP4_MEMORY_HOST &&
                q.multiplier == cases[i].multiplier,
            "%s: view rows %lld cols %lld format %d multiplier %g (want %g)", cases[i].what, (long long)q.rows,
            (long long)q.cols, (int)q.format, (double)q.multiplier, (double)cases[i].multiplier);
    }
    fp4_safetensors_close(st);
  }
}

int main(void) {
  char dir[] = "/tmp/fp4kit_st_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[512], path2[512], idx[512];
  snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
  snprintf(path2, sizeof path2, "%s/model-00002-of-00002.safetensors", dir);
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);

  /* Round trip with mixed widths (alignment), a scalar, an empty tensor and metadata. */
  uint16_t bf[6] = {1, 2, 3, 4, 5, 6};
  uint8_t u8[3] = {7, 8, 9};
  float f = 0.5f;
  fp4_st_writer *w = NULL;
  CHECK(fp4_st_writer_create(path, &w) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_metadata(w, "format", "pt") == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "a.u8", FP4_ST_U8, 1, (int64_t[]){3}) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "b.bf16", FP4_ST_BF16, 2, (int64_t[]){2, 3}) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "c.scalar", FP4_ST_F32, 0, NULL) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "d.empty", FP4_ST_F32, 2, (int64_t[]){0, 4}) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "a.u8", FP4_ST_U8, 1, (int64_t[]){3}) == FP4_ERR_INVALID_ARGUMENT, "duplicate");
  CHECK(fp4_st_writer_write(w, "c.scalar", &f, 4) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_write(w, "b.bf16", bf, 11) == FP4_ERR_INVALID_ARGUMENT, "wrong size accepted");
  CHECK(fp4_st_writer_write(w, "b.bf16", bf, 12) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_write(w, "a.u8", u8, 3) == FP4_OK, "%s", fp4_last_error());
  CHECK(access(path, F_OK) != 0, "file visible before finish");
  CHECK(fp4_st_writer_write(w, "d.empty", NULL, 0) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_finish(w) == FP4_OK, "%s", fp4_last_error());

  fp4_safetensors *st = NULL;
  CHECK(fp4_safetensors_open(path, 0, &st) == FP4_OK, "%s", fp4_last_error());
  if (st) {
    CHECK(fp4_safetensors_count(st) == 4, "count %lld", (long long)fp4_safetensors_count(st));
    const fp4_st_tensor *t = fp4_safetensors_find(st, "b.bf16");
    CHECK(t && t->dtype == FP4_ST_BF16 && t->ndim == 2 && t->shape[1] == 3 && t->bytes == 12 &&
              !memcmp(t->data, bf, 12) && (uintptr_t)t->data % 2 == 0,
          "bf16 tensor wrong");
    t = fp4_safetensors_find(st, "c.scalar");
    CHECK(t && t->ndim == 0 && t->bytes == 4 && !memcmp(t->data, &f, 4) && (uintptr_t)t->data % 4 == 0, "scalar");
    t = fp4_safetensors_find(st, "a.u8");
    CHECK(t && !memcmp(t->data, u8, 3), "u8");
    CHECK(fp4_safetensors_find(st, "zzz") == NULL, "absent tensor found");
    const char *fmt = fp4_safetensors_metadata(st, 0, "format");
    CHECK(fmt && !strcmp(fmt, "pt"), "metadata");
    fp4_safetensors_close(st);
  }

  /* An unfinished writer leaves nothing behind; finish with a missing tensor fails. */
  CHECK(fp4_st_writer_create(path2, &w) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "e", FP4_ST_U8, 1, (int64_t[]){2}) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_finish(w) == FP4_ERR_INVALID_ARGUMENT && strstr(fp4_last_error(), "never written"), "%s",
        fp4_last_error());
  CHECK(access(path2, F_OK) != 0, "failed writer left its file");

  /* Sharded: second shard + index; headers-only open has no data but the same tensors. */
  CHECK(fp4_st_writer_create(path2, &w) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "e.f4", FP4_ST_F4, 1, (int64_t[]){4}) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_write(w, "e.f4", u8, 2) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_finish(w) == FP4_OK, "%s", fp4_last_error());
  FILE *fi = fopen(idx, "w");
  fprintf(fi, "{\"metadata\": {\"total_size\": 21}, \"weight_map\": {\"a.u8\": \"model-00001-of-00002.safetensors\", "
              "\"b.bf16\": \"model-00001-of-00002.safetensors\", \"c.scalar\": \"model-00001-of-00002.safetensors\", "
              "\"d.empty\": \"model-00001-of-00002.safetensors\", \"e.f4\": \"model-00002-of-00002.safetensors\"}}");
  fclose(fi);
  CHECK(fp4_safetensors_open(dir, FP4_SAFETENSORS_HEADERS_ONLY, &st) == FP4_OK, "%s", fp4_last_error());
  if (st) {
    CHECK(fp4_safetensors_count(st) == 5 && fp4_safetensors_file_count(st) == 2, "sharded count");
    const fp4_st_tensor *t = fp4_safetensors_find(st, "e.f4");
    CHECK(t && t->file == 1 && t->data == NULL && t->bytes == 2, "f4 tensor in shard 2");
    fp4_safetensors_close(st);
  }
  /* An index pointing outside the directory, or at the wrong shard, is refused. */
  fi = fopen(idx, "w");
  fprintf(fi, "{\"weight_map\": {\"a.u8\": \"../etc/passwd\"}}");
  fclose(fi);
  CHECK(fp4_safetensors_open(dir, 0, &st) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "not a file name"), "%s",
        fp4_last_error());
  fi = fopen(idx, "w");
  fprintf(fi, "{\"weight_map\": {\"a.u8\": \"model-00002-of-00002.safetensors\"}}");
  fclose(fi);
  CHECK(fp4_safetensors_open(dir, 0, &st) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "a.u8"), "%s",
        fp4_last_error());
  /* A tensor defined in two shards. */
  unlink(idx);
  char path3[600];
  snprintf(path3, sizeof path3, "%s/extra.safetensors", dir);
  CHECK(fp4_st_writer_create(path3, &w) == FP4_OK, "%s", fp4_last_error());
  fp4_st_writer_declare(w, "a.u8", FP4_ST_U8, 1, (int64_t[]){1});
  fp4_st_writer_write(w, "a.u8", u8, 1);
  CHECK(fp4_st_writer_finish(w) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_safetensors_open(dir, 0, &st) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "defined twice"), "%s",
        fp4_last_error());
  CHECK(fp4_safetensors_open("/nonexistent/x.safetensors", 0, &st) == FP4_ERR_NOT_FOUND, "missing file");

  /* Hostile headers. */
  static uint8_t buf[1024];
  fp4_safetensors *hs = NULL;
  CHECK(fp4_safetensors_open_memory(buf, 5, &hs) == FP4_ERR_FORMAT, "5-byte file");
  memset(buf, 0xFF, 16);
  CHECK(fp4_safetensors_open_memory(buf, 16, &hs) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "exceeds"),
        "header length beyond file: %s", fp4_last_error());
  hostile("invalid JSON", "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]", 2, "not valid JSON");
  hostile("not an object", "[1, 2]", 0, "not a JSON object");
  hostile("unknown dtype", "{\"w\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2, "unknown dtype 'Q4'");
  hostile("missing dtype", "{\"w\": {\"shape\": [2], \"data_offsets\": [0, 2]}}", 2, "unknown dtype (missing)");
  hostile("shape vs bytes", "{\"w\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2, "need 4 bytes");
  hostile("past the end", "{\"w\": {\"dtype\": \"U8\", \"shape\": [8], \"data_offsets\": [0, 8]}}", 4, "run past");
  hostile("overflow", "{\"w\": {\"dtype\": \"F64\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8,
          "overflows");
  hostile("negative dim", "{\"w\": {\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, 1]}}", 1, "dimension 0");
  hostile("fractional dim", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1.5], \"data_offsets\": [0, 1]}}", 1, "dimension 0");
  hostile("reversed offsets", "{\"w\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [2, 1]}}", 2, "begin <= end");
  hostile("overlap",
          "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, "
          "\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]}}", 3, "overlap");
  hostile("hole",
          "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
          "\"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [2, 3]}}", 3, "hole");
  hostile("trailing data", "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 3, "the file has");
  hostile("duplicate names",
          "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
          "\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", 2, "defined twice");
  hostile("odd F4", "{\"w\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 1]}}", 1, "whole number of bytes");
  hostile("too many dims", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", 1,
          "more than 8");
  hostile("metadata value", "{\"__metadata__\": {\"k\": 3}}", 0, "not a string");
  hostile("junk after JSON", "{} xyz", 0, "bytes after");
  hostile("error names the tensor", "{\"layers.7.mlp.w\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 3]}}",
          3, "layers.7.mlp.w");
  /* Strings must be UTF-8 without NUL (the format requires UTF-8 JSON): raw bytes and escapes. */
  hostile("0xFF in a name", "{\"w\xff\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "UTF-8");
  hostile("overlong NUL", "{\"w\xc0\x80\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "UTF-8");
  hostile("encoded surrogate", "{\"w\xed\xa0\x80\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "UTF-8");
  hostile("truncated sequence", "{\"w\xe2\x82\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "UTF-8");
  hostile("above U+10FFFF", "{\"w\xf4\x90\x80\x80\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
          1, "UTF-8");
  hostile("lone surrogate escape", "{\"w\\ud800\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "UTF-8");
  hostile("NUL escape", "{\"w\\u0000x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "NUL");
  hostile("metadata value", "{\"__metadata__\": {\"k\": \"\xfe\"}}", 0, "UTF-8");
  hostile("dtype value", "{\"w\": {\"dtype\": \"U\x80\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "UTF-8");
  /* Strict JSON: what a permissive reader would let through. */
  hostile("leading zero", "{\"w\": {\"dtype\": \"U8\", \"shape\": [01], \"data_offsets\": [0, 1]}}", 1, "not valid JSON");
  hostile("trailing comma", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},}", 1, "not valid JSON");
  hostile("control character", "{\"w\t\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "not valid JSON");
  hostile("bad escape", "{\"w\\x\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1, "not valid JSON");
  hostile("single quotes", "{'w': {}}", 0, "not valid JSON");
  hostile("deep nesting", "{\"w\": {\"x\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]"
          "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], \"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "nested too deeply");
  hostile("exponent dimension", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1e0], \"data_offsets\": [0, 1]}}", 1, "dimension 0");
  hostile("dimension 2^53+1", "{\"w\": {\"dtype\": \"U8\", \"shape\": [9007199254740993], \"data_offsets\": [0, 1]}}", 1,
          "dimension 0");
  hostile("string offsets", "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [\"0\", 1]}}", 1,
          "data_offsets");
  hostile("key twice", "{\"w\": {\"dtype\": \"U8\", \"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1,
          "appears twice");
  /* Valid UTF-8 and escapes are decoded: raw, \u00e9 and a surrogate pair give the same bytes. */
  size_t n = image(buf, "{\"a\\\"\\u00e9\\ud83d\\ude00\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
                        "\"\xc3\xa9\xf0\x9f\x98\x80\": {\"dtype\": \"U8\", \"extra\": {\"k\": [true, null, -1.5e3]}, "
                        "\"shape\": [1], \"data_offsets\": [1, 2]}}", 2);
  CHECK(fp4_safetensors_open_memory(buf, n, &hs) == FP4_OK, "escapes: %s", fp4_last_error());
  CHECK(hs && fp4_safetensors_find(hs, "a\"\xc3\xa9\xf0\x9f\x98\x80") && fp4_safetensors_find(hs, "\xc3\xa9\xf0\x9f\x98\x80"),
        "decoded names not found");
  fp4_safetensors_close(hs);
  hs = NULL;

  /* Name order over many shared-prefix names of every length around 8-byte boundaries, given in a
   * scrambled order: the result must be strictly increasing by strcmp. */
  {
    enum { NT = 3000 };
    static char hdr[NT * 96 + 16];
    size_t len = 0;
    uint64_t r = 12345;
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "{");
    for (int i = 0; i < NT; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const int v = (int)(r >> 33) % NT; /* a permutation is not needed: duplicates are made unique by i */
      len += (size_t)snprintf(hdr + len, sizeof hdr - len, "%s\"model.layers.%d.mlp.%.*s%d\":{\"dtype\":\"U8\",\"shape\":[0],"
                              "\"data_offsets\":[0,0]}", i ? "," : "", v % 37, (int)(r >> 60), "xxxxxxxxxxxxxxxx", i);
    }
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
    uint8_t *img = malloc(8 + len);
    image(img, hdr, 0);
    CHECK(fp4_safetensors_open_memory(img, 8 + len, &hs) == FP4_OK, "sorted names: %s", fp4_last_error());
    CHECK(fp4_safetensors_count(hs) == NT, "sorted names: count %lld", (long long)fp4_safetensors_count(hs));
    for (int64_t i = 1; i < fp4_safetensors_count(hs); i++)
      if (strcmp(fp4_safetensors_at(hs, i - 1)->name, fp4_safetensors_at(hs, i)->name) >= 0) {
        CHECK(0, "names out of order at %lld: %s >= %s", (long long)i, fp4_safetensors_at(hs, i - 1)->name,
              fp4_safetensors_at(hs, i)->name);
        break;
      }
    fp4_safetensors_close(hs);
    hs = NULL;
    /* The same names twice over: a duplicate is found however the sort meets it. */
    memcpy(hdr + len - 1, ",", 1);
    size_t len2 = len;
    len2 += (size_t)snprintf(hdr + len2, sizeof hdr - len2, "\"model.layers.0.mlp.x77\":{\"dtype\":\"U8\",\"shape\":[0],"
                             "\"data_offsets\":[0,0]},\"model.layers.0.mlp.x77\":{\"dtype\":\"U8\",\"shape\":[0],"
                             "\"data_offsets\":[0,0]}}");
    uint8_t *img2 = malloc(8 + len2);
    image(img2, hdr, 0);
    CHECK(fp4_safetensors_open_memory(img2, 8 + len2, &hs) == FP4_ERR_FORMAT && strstr(fp4_last_error(), "x77"),
          "duplicate among many: %s", fp4_last_error());
    free(img);
    free(img2);
  }

  qmatrix_views();
  /* Eight dimensions are the most a tensor may have (nine are refused above). */
  n = image(buf, "{\"w\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,2], \"data_offsets\": [0, 2]}}", 2);
  CHECK(fp4_safetensors_open_memory(buf, n, &hs) == FP4_OK && fp4_safetensors_find(hs, "w") &&
            fp4_safetensors_find(hs, "w")->ndim == 8 && fp4_safetensors_find(hs, "w")->shape[7] == 2,
        "8-D tensor: %s", fp4_last_error());
  fp4_safetensors_close(hs);
  hs = NULL;
  /* The surrogate pairs at both ends of the range decode to U+10000 and U+10FFFF, and \u escapes of
   * 2- and 3-byte characters at the edges of their ranges to their UTF-8 bytes. */
  n = image(buf, "{\"a\\ud800\\udc00\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
                 "\"b\\udbff\\udfff\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}, "
                 "\"c\\u0080\\u07ff\\u0800\\uffff\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [2, 3]}}",
            3);
  CHECK(fp4_safetensors_open_memory(buf, n, &hs) == FP4_OK && fp4_safetensors_find(hs, "a\xf0\x90\x80\x80") &&
            fp4_safetensors_find(hs, "b\xf4\x8f\xbf\xbf") &&
            fp4_safetensors_find(hs, "c\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf"),
        "escapes at the edges of the UTF-8 ranges: %s", fp4_last_error());
  fp4_safetensors_close(hs);
  hs = NULL;

  /* NULL arguments are refused with a status, never a crash. */
  fp4_st_dtype dt;
  CHECK(fp4_st_dtype_parse("U8", NULL) == FP4_ERR_INVALID_ARGUMENT, "dtype_parse NULL out");
  CHECK(fp4_st_dtype_parse(NULL, &dt) == FP4_ERR_NOT_FOUND, "dtype_parse NULL name");
  CHECK(fp4_safetensors_open(NULL, 0, &hs) == FP4_ERR_INVALID_ARGUMENT, "open NULL path");
  CHECK(fp4_safetensors_open(dir, 0, NULL) == FP4_ERR_INVALID_ARGUMENT, "open NULL out");
  CHECK(fp4_safetensors_open_memory(NULL, 16, &hs) == FP4_ERR_INVALID_ARGUMENT, "open_memory NULL image");
  CHECK(fp4_safetensors_open_memory(buf, 16, NULL) == FP4_ERR_INVALID_ARGUMENT, "open_memory NULL out");
  fp4_qmatrix qm;
  CHECK(fp4_safetensors_qmatrix(NULL, "m", &qm) == FP4_ERR_INVALID_ARGUMENT, "qmatrix NULL st");
  CHECK(fp4_safetensors_count(NULL) == 0 && fp4_safetensors_at(NULL, 0) == NULL &&
            fp4_safetensors_find(NULL, "a") == NULL && fp4_safetensors_file_count(NULL) == 0 &&
            fp4_safetensors_file(NULL, 0) == NULL && fp4_safetensors_metadata(NULL, 0, "k") == NULL,
        "queries on NULL");
  CHECK(fp4_st_writer_create(NULL, &w) == FP4_ERR_INVALID_ARGUMENT && fp4_st_writer_create(path, NULL) ==
            FP4_ERR_INVALID_ARGUMENT, "writer_create NULL");
  CHECK(fp4_st_writer_metadata(NULL, "k", "v") == FP4_ERR_INVALID_ARGUMENT, "writer_metadata NULL");
  CHECK(fp4_st_writer_declare(NULL, "a", FP4_ST_U8, 0, NULL) == FP4_ERR_INVALID_ARGUMENT, "writer_declare NULL");
  CHECK(fp4_st_writer_write(NULL, "a", buf, 1) == FP4_ERR_INVALID_ARGUMENT, "writer_write NULL");
  CHECK(fp4_st_writer_finish(NULL) == FP4_ERR_INVALID_ARGUMENT && fp4_st_writer_data_bytes(NULL) == 0, "writer NULL");
  fp4_st_writer_abort(NULL);
  fp4_safetensors_close(NULL);
  /* The writer refuses what the reader would refuse. */
  CHECK(fp4_st_writer_create(path2, &w) == FP4_OK, "%s", fp4_last_error());
  CHECK(fp4_st_writer_declare(w, "bad\xff", FP4_ST_U8, 0, NULL) == FP4_ERR_INVALID_ARGUMENT, "non-UTF-8 name written");
  CHECK(fp4_st_writer_metadata(w, "k", "\xc0\x80") == FP4_ERR_INVALID_ARGUMENT, "non-UTF-8 metadata written");
  fp4_st_writer_abort(w);

  /* The empty checkpoint is valid. */
  n = image(buf, "{}", 0);
  CHECK(fp4_safetensors_open_memory(buf, n, &hs) == FP4_OK && fp4_safetensors_count(hs) == 0, "%s", fp4_last_error());
  fp4_safetensors_close(hs);

  /* A FIFO in a shard's place is refused at once, in both modes, not waited on (a writer never comes):
   * the alarm turns a wait into a failure. */
  char fifo_dir[600], fifo[700];
  snprintf(fifo_dir, sizeof fifo_dir, "%s/fifo", dir);
  snprintf(fifo, sizeof fifo, "%s/model.safetensors", fifo_dir);
  CHECK(mkdir(fifo_dir, 0700) == 0 && mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
  for (unsigned flags = 0; flags < 2; flags++) {
    alarm(30);
    fp4_status fs = fp4_safetensors_open(fifo_dir, flags, &st);
    alarm(0);
    CHECK(fs == FP4_ERR_IO && strstr(fp4_last_error(), fifo) && strstr(fp4_last_error(), "FIFO") && !st,
          "a FIFO shard (flags %u): %s %s", flags, fp4_status_str(fs), fp4_last_error());
  }

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("safetensors: all checks passed\n");
  return 0;
}
