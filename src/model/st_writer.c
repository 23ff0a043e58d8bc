/* safetensors writer and small file helpers. A checkpoint file is never seen half-written: data go
 * to a temporary file in the target directory, which is fsync'ed and renamed over the name. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/model_internal.h"

int fp4_model_open_regular(const char *path, struct stat *sb, const char **kind) {
  *kind = NULL;
  /* O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -1;
  if (fstat(fd, sb) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(sb->st_mode)) {
    *kind = S_ISDIR(sb->st_mode)    ? "a directory"
            : S_ISFIFO(sb->st_mode) ? "a FIFO (named pipe)"
            : S_ISSOCK(sb->st_mode) ? "a socket"
            : S_ISCHR(sb->st_mode)  ? "a character device"
            : S_ISBLK(sb->st_mode)  ? "a block device"
                                    : "not a regular file";
    close(fd);
    return -1;
  }
  /* A regular file: reads block as they always do. */
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

fp4_status fp4_model_read_text(const char *path, size_t max_bytes, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  struct stat sb;
  const char *kind = NULL;
  int fd = fp4_model_open_regular(path, &sb, &kind);
  if (fd < 0 && kind) return fp4_fail(FP4_ERR_FORMAT, "%s is %s, not a regular file", path, kind);
  if (fd < 0)
    return fp4_fail(errno == ENOENT ? FP4_ERR_NOT_FOUND : FP4_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  if ((uint64_t)sb.st_size > max_bytes) {
    close(fd);
    return fp4_fail(FP4_ERR_FORMAT, "%s is larger than %zu bytes", path, max_bytes);
  }
  size_t n = (size_t)sb.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "out of host memory reading %s", path);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      free(buf);
      close(fd);
      return fp4_fail(FP4_ERR_IO, "cannot read %s", path);
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *text = buf;
  *len = n;
  return FP4_OK;
}

static fp4_status write_all(int fd, const void *data, size_t len, uint64_t offset, const char *path) {
  const char *p = data;
  while (len) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : len;
    ssize_t w = pwrite(fd, p, chunk, (off_t)offset);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fp4_fail(FP4_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    p += w;
    len -= (size_t)w;
    offset += (uint64_t)w;
  }
  return FP4_OK;
}

/* Temporary name next to path, so the rename stays within one file system. */
static int temp_open(const char *path, char *tmp, size_t tmp_size) {
  if (snprintf(tmp, tmp_size, "%s.tmp.XXXXXX", path) >= (int)tmp_size) return -1;
  int fd = mkstemp(tmp);
  if (fd >= 0) fchmod(fd, 0644);
  return fd;
}

fp4_status fp4_model_write_file(const char *path, const void *data, size_t len) {
  char tmp[PATH_MAX];
  int fd = temp_open(path, tmp, sizeof tmp);
  if (fd < 0) return fp4_fail(FP4_ERR_IO, "cannot create a temporary file for %s: %s", path, strerror(errno));
  fp4_status st = write_all(fd, data, len, 0, path);
  if (!st && fsync(fd) != 0) st = fp4_fail(FP4_ERR_IO, "cannot sync %s: %s", path, strerror(errno));
  close(fd);
  if (!st && rename(tmp, path) != 0) st = fp4_fail(FP4_ERR_IO, "cannot rename into %s: %s", path, strerror(errno));
  if (st) unlink(tmp);
  return st;
}

/* ---- safetensors writer ----------------------------------------------------------------------- */

typedef struct wtensor {
  char *name;
  fp4_st_dtype dtype;
  int ndim;
  int64_t shape[FP4_ST_MAX_DIMS];
  uint64_t bytes;
  uint64_t begin;   /* offset in the data area, set when the header is laid out */
  int written;
} wtensor;

struct fp4_st_writer {
  char *path;
  char tmp[PATH_MAX];
  int fd;
  cJSON *metadata;
  wtensor *t;
  int n, cap;
  uint64_t data_bytes;
  uint64_t data_start; /* 8 + header length, 0 until the header is written */
};

fp4_status fp4_st_writer_create(const char *path, fp4_st_writer **out) {
  fp4_clear_error();
  static const char fn[] = "fp4_st_writer_create";
  if (!path || !out) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: path or w is NULL", fn);
  *out = NULL;
  fp4_st_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  }
  w->fd = temp_open(path, w->tmp, sizeof w->tmp);
  if (w->fd < 0) {
    free(w->path);
    free(w);
    return fp4_fail(FP4_ERR_IO, "%s: cannot create a temporary file for %s: %s", fn, path, strerror(errno));
  }
  *out = w;
  return FP4_OK;
}

void fp4_st_writer_abort(fp4_st_writer *w) {
  if (!w) return;
  if (w->fd >= 0) {
    close(w->fd);
    unlink(w->tmp);
  }
  for (int i = 0; i < w->n; i++) free(w->t[i].name);
  free(w->t);
  cJSON_Delete(w->metadata);
  free(w->path);
  free(w);
}

fp4_status fp4_st_writer_metadata(fp4_st_writer *w, const char *key, const char *value) {
  fp4_clear_error();
  if (!w || !key || !value) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_writer_metadata: NULL argument");
  if (w->data_start) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_writer_metadata: the header is already written");
  if (fp4_model_utf8_span(key, strlen(key)) != strlen(key) || fp4_model_utf8_span(value, strlen(value)) != strlen(value))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_writer_metadata: the key or value is not valid UTF-8");
  if (!w->metadata && !(w->metadata = cJSON_CreateObject()))
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_st_writer_metadata: out of memory");
  cJSON_DeleteItemFromObjectCaseSensitive(w->metadata, key);
  if (!cJSON_AddStringToObject(w->metadata, key, value))
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_st_writer_metadata: out of memory");
  return FP4_OK;
}

static wtensor *wfind(fp4_st_writer *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->t[i].name, name)) return &w->t[i];
  return NULL;
}

fp4_status fp4_st_writer_declare(fp4_st_writer *w, const char *name, fp4_st_dtype dtype, int ndim,
                                 const int64_t *shape) {
  fp4_clear_error();
  static const char fn[] = "fp4_st_writer_declare";
  if (!w || !name || (ndim > 0 && !shape)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
  if (w->data_start) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s' declared after the first write", fn, name);
  if (!fp4_st_dtype_name(dtype)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s': unknown dtype %d", fn, name, dtype);
  if (ndim < 0 || ndim > FP4_ST_MAX_DIMS)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s': %d dimensions (0..8 allowed)", fn, name, ndim);
  if (fp4_model_utf8_span(name, strlen(name)) != strlen(name))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: a tensor name is not valid UTF-8", fn);
  if (!strcmp(name, "__metadata__") || wfind(w, name))
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s' is declared twice or reserved", fn, name);
  uint64_t bits = (uint64_t)fp4_st_dtype_bits(dtype);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && bits > UINT64_MAX / (uint64_t)shape[d]))
      return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s': dimension %d (%lld) is negative or overflows", fn, name, d,
                      (long long)shape[d]);
    bits *= (uint64_t)shape[d];
  }
  if (bits % 8) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s': not a whole number of bytes", fn, name);
  if (w->n == w->cap) {
    int cap = w->cap ? w->cap * 2 : 64;
    wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
    if (!nt) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    w->t = nt;
    w->cap = cap;
  }
  wtensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name))) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  t->dtype = dtype;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
  t->bytes = bits / 8;
  w->n++;
  w->data_bytes += t->bytes;
  return FP4_OK;
}

uint64_t fp4_st_writer_data_bytes(const fp4_st_writer *w) { return w ? w->data_bytes : 0; }

/* Wider elements first keeps every tensor aligned to its element size (the data area starts at a
 * multiple of 8); within a width, declaration order. */
static fp4_status write_header(fp4_st_writer *w) {
  uint64_t off = 0;
  for (int width = 64; width >= 8; width /= 2)
    for (int i = 0; i < w->n; i++) {
      int b = fp4_st_dtype_bits(w->t[i].dtype);
      if (b == width || (width == 8 && b < 8)) {
        w->t[i].begin = off;
        off += w->t[i].bytes;
      }
    }
  cJSON *root = cJSON_CreateObject();
  if (!root) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors writer: out of memory");
  if (w->metadata) cJSON_AddItemReferenceToObject(root, "__metadata__", w->metadata);
  fp4_status st = FP4_OK;
  for (int i = 0; i < w->n && !st; i++) {
    cJSON *e = cJSON_AddObjectToObject(root, w->t[i].name);
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *offs = NULL;
    if (e && shape && cJSON_AddStringToObject(e, "dtype", fp4_st_dtype_name(w->t[i].dtype)))
      offs = cJSON_AddArrayToObject(e, "data_offsets");
    if (!offs) {
      st = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors writer: out of memory");
      break;
    }
    for (int d = 0; d < w->t[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)w->t[i].shape[d]));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)w->t[i].begin));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(w->t[i].begin + w->t[i].bytes)));
  }
  char *json = st ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (st) return st;
  if (!json) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors writer: out of memory");
  size_t n = strlen(json), padded = (n + 7) / 8 * 8;
  char *hdr = malloc(8 + padded);
  if (!hdr) {
    free(json);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors writer: out of memory");
  }
  for (int i = 0; i < 8; i++) hdr[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xFF);
  memcpy(hdr + 8, json, n);
  memset(hdr + 8 + n, ' ', padded - n);
  free(json);
  st = write_all(w->fd, hdr, 8 + padded, 0, w->path);
  free(hdr);
  if (st) return st;
  w->data_start = 8 + padded;
  /* Size the file now so an all-empty checkpoint is complete and writes may come in any order. */
  if (ftruncate(w->fd, (off_t)(w->data_start + w->data_bytes)) != 0)
    return fp4_fail(FP4_ERR_IO, "cannot size %s: %s", w->path, strerror(errno));
  return FP4_OK;
}

fp4_status fp4_st_writer_write(fp4_st_writer *w, const char *name, const void *data, size_t bytes) {
  fp4_clear_error();
  static const char fn[] = "fp4_st_writer_write";
  if (!w || !name || (bytes && !data)) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
  wtensor *t = wfind(w, name);
  if (!t) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s' was not declared", fn, name);
  if (t->written) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s' is written twice", fn, name);
  if (bytes != t->bytes)
    return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: '%s' has %zu bytes, its declaration %llu", fn, name, bytes,
                    (unsigned long long)t->bytes);
  fp4_status st;
  if (!w->data_start && (st = write_header(w))) return st;
  if ((st = write_all(w->fd, data, bytes, w->data_start + t->begin, w->path))) return st;
  t->written = 1;
  return FP4_OK;
}

fp4_status fp4_st_writer_finish(fp4_st_writer *w) {
  fp4_clear_error();
  if (!w) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_writer_finish: w is NULL");
  fp4_status st = FP4_OK;
  if (!w->data_start) st = write_header(w);
  for (int i = 0; i < w->n && !st; i++)
    if (!w->t[i].written)
      st = fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_st_writer_finish: %s: tensor '%s' was declared but never written",
                    w->path, w->t[i].name);
  if (!st && fsync(w->fd) != 0) st = fp4_fail(FP4_ERR_IO, "cannot sync %s: %s", w->path, strerror(errno));
  if (!st) {
    close(w->fd);
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) {
      st = fp4_fail(FP4_ERR_IO, "cannot rename into %s: %s", w->path, strerror(errno));
      unlink(w->tmp);
    }
  }
  fp4_st_writer_abort(w); /* frees; removes the temporary file when it was not renamed */
  return st;
}
