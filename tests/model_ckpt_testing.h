/* Small checkpoints for the model tests: BF16 shards written with the library's writer, zero-filled
 * shards of any dtype and shape, text files, raw safetensors files with a given header, and the
 * fp4kit command next to the test binaries. */
#ifndef FP4_TESTS_MODEL_CKPT_TESTING_H
#define FP4_TESTS_MODEL_CKPT_TESTING_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fp4kit_model.h"

/* A 2-D BF16 tensor [n, k] of small varied values; nan_at >= 0 puts a NaN at that element. */
typedef struct ckpt_tensor {
  const char *name;
  int64_t n, k;
  int64_t nan_at;
} ckpt_tensor;

static inline int ckpt_shard(const char *path, const ckpt_tensor *t, int count) {
  fp4_st_writer *w = NULL;
  if (fp4_st_writer_create(path, &w)) return 0;
  int ok = 1;
  for (int i = 0; i < count && ok; i++) ok = fp4_st_writer_declare(w, t[i].name, FP4_ST_BF16, 2, (int64_t[]){t[i].n, t[i].k}) == FP4_OK;
  for (int i = 0; i < count && ok; i++) {
    const int64_t e = t[i].n * t[i].k;
    uint16_t *v = malloc((size_t)e * 2);
    for (int64_t j = 0; v && j < e; j++) v[j] = fp4_bf16_from_f32(j == t[i].nan_at ? 0.0f / 0.0f : (float)((j * 37 + i) % 19 - 9) * 0.01f);
    ok = v && fp4_st_writer_write(w, t[i].name, v, (size_t)e * 2) == FP4_OK;
    free(v);
  }
  if (!ok) {
    fp4_st_writer_abort(w);
    return 0;
  }
  return fp4_st_writer_finish(w) == FP4_OK;
}

/* A tensor of any dtype and rank up to 4, written as zeros: header shapes for inspection tests. */
typedef struct ckpt_decl {
  const char *name;
  fp4_st_dtype dtype;
  int ndim;
  int64_t shape[4];
} ckpt_decl;

static inline int ckpt_zeros(const char *path, const ckpt_decl *t, int count) {
  fp4_st_writer *w = NULL;
  if (fp4_st_writer_create(path, &w)) return 0;
  int ok = 1;
  for (int i = 0; i < count && ok; i++) ok = fp4_st_writer_declare(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape) == FP4_OK;
  for (int i = 0; i < count && ok; i++) {
    int64_t e = 1;
    for (int d = 0; d < t[i].ndim; d++) e *= t[i].shape[d];
    const size_t bytes = (size_t)((e * fp4_st_dtype_bits(t[i].dtype) + 7) / 8);
    void *v = calloc(bytes ? bytes : 1, 1);
    ok = v && fp4_st_writer_write(w, t[i].name, v, bytes) == FP4_OK;
    free(v);
  }
  if (!ok) {
    fp4_st_writer_abort(w);
    return 0;
  }
  return fp4_st_writer_finish(w) == FP4_OK;
}

static inline int ckpt_text(const char *dir, const char *name, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fputs(text, f);
  return fclose(f) == 0;
}

/* A .safetensors file with this header and data_len bytes of data (the length field may lie:
 * hdr_len_field 0 means the true length). */
static inline int ckpt_raw(const char *path, const char *header, size_t data_len, uint64_t hdr_len_field) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  const uint64_t n = hdr_len_field ? hdr_len_field : strlen(header);
  for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i)) & 0xFF, f);
  fputs(header, f);
  for (size_t i = 0; i < data_len; i++) fputc(0, f);
  return fclose(f) == 0;
}

/* Entries of dir whose name contains needle (0 when dir cannot be read). */
static inline int ckpt_count_entries(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));) n += strstr(de->d_name, needle) != NULL;
  if (d) closedir(d);
  return n;
}

/* The fp4kit command built beside the tests ("" when it is not). */
static inline const char *ckpt_tool(void) {
  static char tool[PATH_MAX + 32];
  char exe[PATH_MAX] = "";
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(tool, sizeof tool, "%s/../tools/fp4kit", exe);
  return access(tool, X_OK) == 0 ? tool : "";
}

/* Runs a shell command; its exit status, or -1. */
static inline int ckpt_run(const char *cmd) {
  int s = system(cmd);
  return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

/* Reads a whole small file (NULL if absent); free() it. */
static inline char *ckpt_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = malloc(1 << 20);
  size_t n = s ? fread(s, 1, (1 << 20) - 1, f) : 0;
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

#endif
