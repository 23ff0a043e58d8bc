/* safetensors reader: every length, offset and shape of a file from the internet is checked
 * before it is used; data are memory-mapped and handed out as zero-copy views. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/cpu/cpu_kernels.h" /* fp4_cpu_parallel: shards are parsed on the library's CPU threads */
#include "core/error.h"
#include "fp4kit_model.h"
#include "model/model_internal.h"

static const struct {
  const char *name;
  int bits;
} st_dtypes[FP4_ST_DTYPE_COUNT] = {
    {"BOOL", 8},     {"U8", 8},       {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8},
    {"I16", 16},     {"U16", 16},     {"F16", 16}, {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},     {"F64", 64},     {"I64", 64}, {"U64", 64},    {"F4", 4},
};

const char *fp4_st_dtype_name(fp4_st_dtype dtype) {
  return (unsigned)dtype < FP4_ST_DTYPE_COUNT ? st_dtypes[dtype].name : NULL;
}
int fp4_st_dtype_bits(fp4_st_dtype dtype) { return (unsigned)dtype < FP4_ST_DTYPE_COUNT ? st_dtypes[dtype].bits : 0; }

fp4_status fp4_st_dtype_parse(const char *name, fp4_st_dtype *dtype) {
  for (int i = 0; i < FP4_ST_DTYPE_COUNT; i++)
    if (name && !strcmp(name, st_dtypes[i].name)) {
      *dtype = (fp4_st_dtype)i;
      return FP4_OK;
    }
  return FP4_ERR_NOT_FOUND;
}

/* ---- one file ------------------------------------------------------------------------------------ */

typedef struct st_file {
  char *path;
  const uint8_t *map;   /* whole file (mmap) or the caller's image; NULL in headers-only mode */
  size_t map_size;
  int mapped;           /* map came from mmap                                               */
  cJSON *metadata;      /* the __metadata__ object, detached from the header                */
} st_file;

/* Tensor names live in large blocks, chained (no allocation per tensor, few per checkpoint). */
typedef struct st_name_block {
  struct st_name_block *next;
  size_t used, cap;
  char bytes[];
} st_name_block;

struct fp4_safetensors {
  st_file *files;
  int nfiles;
  fp4_st_tensor *tensors; /* sorted by name */
  int64_t ntensors;
  st_name_block *names;   /* every name block of every loader */
};

/* What one loading thread collects from the shards it parses (shards are parsed in parallel). */
typedef struct st_part {
  fp4_st_tensor *tensors; /* header order within each shard */
  int64_t ntensors, cap;
  st_name_block *names;   /* newest block first */
  char *scratch;          /* header buffer reused from shard to shard */
  size_t scratch_cap;
  fp4_st_tensor **order;  /* offset-order scratch, reused from shard to shard */
  int64_t order_cap;
} st_part;

/* Room for `bytes` of names; NULL when out of memory. Blocks of at least 1 MiB: allocating between
 * two header parses makes the allocator consolidate everything the last parse freed. */
static char *name_room(st_part *st, size_t bytes) {
  st_name_block *b = st->names;
  if (!b || b->cap - b->used < bytes) {
    size_t cap = bytes > ((size_t)1 << 20) ? bytes : (size_t)1 << 20;
    if (!(b = malloc(sizeof *b + cap))) return NULL;
    b->next = st->names;
    b->used = 0;
    b->cap = cap;
    st->names = b;
  }
  char *p = b->bytes + b->used;
  b->used += bytes;
  return p;
}

enum { ST_MAX_HEADER = 100 * 1024 * 1024 }; /* the limit of the reference implementation */

/* Byte offset in the file of `"name"` inside the header (8 + position), for messages. */
static unsigned long long header_pos(const char *hdr, size_t n, const char *name) {
  size_t len = strlen(name);
  for (size_t i = 0; i + len + 2 <= n; i++)
    if (hdr[i] == '"' && !memcmp(hdr + i + 1, name, len) && hdr[i + len + 1] == '"') return 8 + i;
  return 8;
}

static int json_uint(const cJSON *v, uint64_t *out) {
  /* cJSON keeps numbers as double: integers above 2^53 cannot be trusted, so refuse them. */
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
  *out = (uint64_t)d;
  return 1;
}

static int cmp_begin(const void *a, const void *b) {
  const fp4_st_tensor *x = *(fp4_st_tensor *const *)a, *y = *(fp4_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
  return 0;
}

/* Makes room for `more` tensors (one growth per file, not per tensor). */
static fp4_status reserve_tensors(st_part *st, int64_t more) {
  if (st->ntensors + more <= st->cap) return FP4_OK;
  int64_t cap = st->cap ? st->cap : 64;
  while (cap < st->ntensors + more) cap *= 2;
  fp4_st_tensor *nt = realloc(st->tensors, (size_t)cap * sizeof *nt);
  if (!nt) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor list");
  st->tensors = nt;
  st->cap = cap;
  return FP4_OK;
}

/* Appends t (room reserved), its name copied to *names (the file's name block). */
static void push_tensor(st_part *st, const fp4_st_tensor *t, char **names) {
  size_t len = strlen(t->name) + 1;
  memcpy(*names, t->name, len);
  st->tensors[st->ntensors] = *t;
  st->tensors[st->ntensors].name = *names;
  *names += len;
  st->ntensors++;
}

/* Parses and validates the header of file fi (header bytes hdr[0..n), data area of data_size bytes
 * starting at file offset 8+n) and appends its tensors. */
static fp4_status parse_header(fp4_safetensors *st, st_part *part, int fi, const char *hdr, size_t n, uint64_t data_size) {
  const char *path = st->files[fi].path;
  const char *json_end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &json_end, 0);
  /* Only the spaces that writers pad with may follow the JSON value. */
  while (root && json_end && json_end < hdr + n && (*json_end == ' ' || *json_end == '\n' || *json_end == '\t' || *json_end == '\r')) json_end++;
  if (root && json_end && json_end < hdr + n) {
    cJSON_Delete(root);
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: bytes after the header's JSON (byte %llu)", path,
                    8 + (unsigned long long)(json_end - hdr));
  }
  if (!root) {
    const char *at = json_end; /* cJSON's error position for this parse (its global one is shared) */
    unsigned long long pos = at && at >= hdr && at <= hdr + n ? 8 + (unsigned long long)(at - hdr) : 8;
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the header is not valid JSON (near byte %llu)", path, pos);
  }
  fp4_status status = FP4_OK;
  int64_t first = part->ntensors;
  if (!cJSON_IsObject(root)) {
    status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the header at byte 8 is not a JSON object", path);
    goto done;
  }
  /* Room for every entry and one block for the names, sized before the walk. */
  size_t name_bytes = 1;
  int64_t entries = 0;
  for (const cJSON *e = root->child; e; e = e->next, entries++) name_bytes += (e->string ? strlen(e->string) : 0) + 1;
  char *names = name_room(part, name_bytes);
  if (!names) {
    status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor names");
    goto done;
  }
  if ((status = reserve_tensors(part, entries))) goto done;
  for (cJSON *e = root->child; e; e = e->next) {
    const char *name = e->string ? e->string : "";
    /* The position is searched for only when a message needs it: a scan per tensor is quadratic. */
#define pos header_pos(hdr, n, name)
    if (!strcmp(name, "__metadata__")) {
      if (!cJSON_IsObject(e)) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ at byte %llu is not an object", path, pos);
        goto done;
      }
      for (cJSON *m = e->child; m; m = m->next)
        if (!cJSON_IsString(m)) {
          status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ value '%s' at byte %llu is not a string",
                            path, m->string ? m->string : "", pos);
          goto done;
        }
      if (st->files[fi].metadata) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ appears twice (byte %llu)", path, pos);
        goto done;
      }
      st->files[fi].metadata = cJSON_Duplicate(e, 1);
      continue;
    }
    if (!cJSON_IsObject(e)) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu is not an object", path, name,
                        pos);
      goto done;
    }
    fp4_st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.file = fi;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt) || fp4_st_dtype_parse(dt->valuestring, &t.dtype) != FP4_OK) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu has unknown dtype %s%s%s", path,
                        name, pos, cJSON_IsString(dt) ? "'" : "", cJSON_IsString(dt) ? dt->valuestring : "(missing)",
                        cJSON_IsString(dt) ? "'" : "");
      goto done;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    int ndim = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (ndim < 0 || ndim > FP4_ST_MAX_DIMS) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: shape is %s", path, name, pos,
                        ndim < 0 ? "missing or not an array" : "of more than 8 dimensions");
      goto done;
    }
    t.ndim = ndim;
    /* Element count times bits, with every multiplication checked: a hostile shape must not wrap. */
    uint64_t bits = (uint64_t)fp4_st_dtype_bits(t.dtype);
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
      uint64_t dim;
      if (!json_uint(s, &dim) || dim > (uint64_t)INT64_MAX) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: dimension %d is not a "
                          "non-negative integer below 2^53", path, name, pos, d);
        goto done;
      }
      t.shape[d] = (int64_t)dim;
      if (dim != 0 && bits > UINT64_MAX / dim) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: shape overflows 64-bit "
                          "byte counts", path, name, pos);
        goto done;
      }
      bits *= dim;
    }
    if (bits % 8) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: %s shape is not a whole "
                        "number of bytes", path, name, pos, fp4_st_dtype_name(t.dtype));
      goto done;
    }
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t begin = 0, end = 0;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &begin) ||
        !json_uint(off->child->next, &end) || end < begin) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: data_offsets is not "
                        "[begin, end] with begin <= end", path, name, pos);
      goto done;
    }
    if (end > data_size) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s': data_offsets [%llu, %llu] run past the data "
                        "area of %llu bytes (file byte %llu)", path, name, (unsigned long long)begin,
                        (unsigned long long)end, (unsigned long long)data_size, 8ULL + n + begin);
      goto done;
    }
    if (end - begin != bits / 8) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at file byte %llu: shape and dtype need %llu "
                        "bytes, data_offsets hold %llu", path, name, 8ULL + n + begin,
                        (unsigned long long)(bits / 8), (unsigned long long)(end - begin));
      goto done;
    }
    t.offset = 8 + n + begin;
    t.bytes = end - begin;
    t.data = st->files[fi].map ? st->files[fi].map + t.offset : NULL;
    push_tensor(part, &t, &names);
#undef pos
  }
  /* No overlaps and no holes: sorted by begin, each tensor starts where the previous ended and the
   * last ends at the end of the file. */
  int64_t nt = part->ntensors - first;
  if (nt > part->order_cap) {
    int64_t cap = part->order_cap ? part->order_cap : 4096;
    while (cap < nt) cap *= 2;
    free(part->order);
    part->order_cap = 0;
    if (!(part->order = malloc((size_t)cap * sizeof *part->order))) {
      status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
      goto done;
    }
    part->order_cap = cap;
  }
  fp4_st_tensor **order = part->order;
  int in_order = 1; /* writers usually list tensors in data order: then no sort is needed */
  for (int64_t i = 0; i < nt; i++) {
    order[i] = &part->tensors[first + i];
    if (i && cmp_begin(&order[i - 1], &order[i]) > 0) in_order = 0;
  }
  if (!in_order) qsort(order, (size_t)nt, sizeof *order, cmp_begin);
  uint64_t expect = 8 + n;
  for (int64_t i = 0; i < nt && !status; i++) {
    if (order[i]->offset != expect)
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' starts at file byte %llu but the previous tensor "
                        "ends at %llu (%s)", path, order[i]->name, (unsigned long long)order[i]->offset,
                        (unsigned long long)expect, order[i]->offset < expect ? "overlap" : "hole");
    expect = order[i]->offset + order[i]->bytes;
  }
  if (!status && expect != 8 + n + data_size)
    status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the tensors end at file byte %llu but the file has %llu bytes",
                      path, (unsigned long long)expect, (unsigned long long)(8 + n + data_size));
done:
  cJSON_Delete(root);
  return status;
}

/* Name order; equal names (refused below) in shard order, then header order, as read serially. */
static int cmp_name(const void *a, const void *b) {
  const fp4_st_tensor *x = *(const fp4_st_tensor *const *)a, *y = *(const fp4_st_tensor *const *)b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x < y ? -1 : x > y; /* one shard is parsed by one thread, into one array, in header order */
}

/* Gathers the tensors of every part in name order (pointers are sorted, each tensor is copied
 * once) and refuses duplicate names (within or across shards). */
static fp4_status finalize(fp4_safetensors *st, const st_part *parts, int nparts) {
  int64_t total = 0;
  for (int i = 0; i < nparts; i++) total += parts[i].ntensors;
  const fp4_st_tensor **sorted = malloc((size_t)(total ? total : 1) * sizeof *sorted);
  st->tensors = malloc((size_t)(total ? total : 1) * sizeof *st->tensors);
  if (!sorted || !st->tensors) {
    free(sorted);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor list");
  }
  int64_t k = 0;
  for (int i = 0; i < nparts; i++)
    for (int64_t j = 0; j < parts[i].ntensors; j++) sorted[k++] = &parts[i].tensors[j];
  if (total > 1) qsort(sorted, (size_t)total, sizeof *sorted, cmp_name);
  for (int64_t i = 0; i < total; i++) st->tensors[i] = *sorted[i];
  st->ntensors = total;
  free(sorted);
  for (int64_t i = 1; i < st->ntensors; i++)
    if (!strcmp(st->tensors[i].name, st->tensors[i - 1].name))
      return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' (file byte %llu) is defined twice (also in %s)",
                      st->files[st->tensors[i].file].path, st->tensors[i].name,
                      (unsigned long long)st->tensors[i].offset, st->files[st->tensors[i - 1].file].path);
  return FP4_OK;
}

static fp4_status parse_image(fp4_safetensors *st, st_part *part, int fi, const uint8_t *image, uint64_t size) {
  const char *path = st->files[fi].path;
  if (size < 8)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: %llu bytes is too short for the 8-byte header length", path,
                    (unsigned long long)size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | image[i];
  if (n > size - 8 || n > ST_MAX_HEADER)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: header length %llu at byte 0 exceeds the file (%llu bytes) or "
                    "the %d-byte limit", path, (unsigned long long)n, (unsigned long long)size, ST_MAX_HEADER);
  return parse_header(st, part, fi, (const char *)image + 8, (size_t)n, size - 8 - n);
}

/* Registers a shard; load_files reads them all. */
static fp4_status add_file(fp4_safetensors *st, const char *path) {
  st_file *nf = realloc(st->files, (size_t)(st->nfiles + 1) * sizeof *nf);
  if (!nf) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
  st->files = nf;
  int fi = st->nfiles++;
  memset(&st->files[fi], 0, sizeof st->files[fi]);
  st->files[fi].path = strdup(path);
  if (!st->files[fi].path) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
  return FP4_OK;
}

/* Reads and validates shard fi into part (runs on a loading thread; touches only files[fi]). */
static fp4_status load_file(fp4_safetensors *st, st_part *part, int fi, unsigned flags) {
  const char *path = st->files[fi].path;
  if (st->files[fi].map && !st->files[fi].mapped) /* the caller's image */
    return parse_image(st, part, fi, st->files[fi].map, st->files[fi].map_size);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fp4_fail(errno == ENOENT ? FP4_ERR_NOT_FOUND : FP4_ERR_IO, "safetensors: cannot open %s: %s",
                              path, strerror(errno));
  struct stat sb;
  fp4_status status = FP4_OK;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    status = fp4_fail(FP4_ERR_IO, "safetensors: %s is not a readable regular file", path);
  } else if (flags & FP4_SAFETENSORS_HEADERS_ONLY) {
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len8[8];
    if (size < 8 || pread(fd, len8, 8, 0) != 8) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: %llu bytes is too short for the 8-byte header length", path,
                        (unsigned long long)size);
    } else {
      uint64_t n = 0;
      for (int i = 7; i >= 0; i--) n = (n << 8) | len8[i];
      if (n > size - 8 || n > ST_MAX_HEADER) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: header length %llu at byte 0 exceeds the file (%llu bytes) "
                          "or the %d-byte limit", path, (unsigned long long)n, (unsigned long long)size, ST_MAX_HEADER);
      } else {
        /* One buffer for every shard's header: a fresh multi-megabyte allocation per shard made
         * the allocator consolidate its free lists each time. */
        if (n > part->scratch_cap) {
          free(part->scratch);
          part->scratch_cap = 0;
          if ((part->scratch = malloc(n)) != NULL) part->scratch_cap = n;
        }
        char *hdr = part->scratch;
        if (n && !hdr) status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for a header");
        else if (n && pread(fd, hdr, n, 8) != (ssize_t)n) status = fp4_fail(FP4_ERR_IO, "safetensors: cannot read %s", path);
        else status = parse_header(st, part, fi, n ? hdr : "", (size_t)n, size - 8 - n);
      }
    }
  } else {
    size_t size = (size_t)sb.st_size;
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (size && map == MAP_FAILED) {
      status = fp4_fail(FP4_ERR_IO, "safetensors: cannot map %s: %s", path, strerror(errno));
    } else if (!size) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the file is empty", path);
    } else {
      st->files[fi].map = map;
      st->files[fi].map_size = size;
      st->files[fi].mapped = 1;
      status = parse_image(st, part, fi, map, size);
    }
  }
  close(fd);
  return status;
}

typedef struct st_job {
  fp4_safetensors *st;
  unsigned flags;
  st_part *parts;    /* one per thread */
  fp4_status *status; /* one per shard */
  char **message;     /* one per shard: the failing thread's error text */
} st_job;

static void load_unit(void *arg, int64_t unit, int thread) {
  st_job *j = arg;
  fp4_status s = load_file(j->st, &j->parts[thread], (int)unit, j->flags);
  j->status[unit] = s;
  if (s) j->message[unit] = strdup(fp4_last_error());
}

/* Reads every registered shard, in parallel over the library's CPU threads (FP4KIT_NUM_THREADS):
 * parsing a header's JSON dominates the time and shards are independent. The error reported is the
 * first failing shard's in shard order, as a serial read would report it. */
static fp4_status load_files(fp4_safetensors *st, unsigned flags) {
  int threads = fp4_cpu_current_threads();
  if (threads > st->nfiles) threads = st->nfiles;
  if (threads < 1) threads = 1;
  st_job job = {st, flags, calloc((size_t)threads, sizeof(st_part)), calloc((size_t)(st->nfiles ? st->nfiles : 1),
                sizeof(fp4_status)), calloc((size_t)(st->nfiles ? st->nfiles : 1), sizeof(char *))};
  fp4_status status = FP4_OK;
  if (!job.parts || !job.status || !job.message) {
    status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
  } else {
    fp4_cpu_parallel(threads, st->nfiles, load_unit, &job);
    for (int i = 0; i < st->nfiles && !status; i++)
      if (job.status[i]) status = fp4_fail(job.status[i], "%s", job.message[i] ? job.message[i] : "safetensors: out of host memory");
    if (!status) status = finalize(st, job.parts, threads);
  }
  for (int t = 0; job.parts && t < threads; t++) {
    st_part *p = &job.parts[t];
    while (p->names) { /* the names now belong to st */
      st_name_block *next = p->names->next;
      p->names->next = st->names;
      st->names = p->names;
      p->names = next;
    }
    free(p->tensors);
    free(p->scratch);
    free(p->order);
  }
  for (int i = 0; job.message && i < st->nfiles; i++) free(job.message[i]);
  free(job.parts);
  free(job.status);
  free(job.message);
  return status;
}

void fp4_safetensors_close(fp4_safetensors *st) {
  if (!st) return;
  for (int i = 0; i < st->nfiles; i++) {
    if (st->files[i].mapped) munmap((void *)st->files[i].map, st->files[i].map_size);
    cJSON_Delete(st->files[i].metadata);
    free(st->files[i].path);
  }
  while (st->names) {
    st_name_block *next = st->names->next;
    free(st->names);
    st->names = next;
  }
  free(st->tensors);
  free(st->files);
  free(st);
}

fp4_status fp4_safetensors_open_memory(const void *image, size_t size, fp4_safetensors **out) {
  fp4_clear_error();
  if (!out) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_safetensors_open_memory: st is NULL");
  *out = NULL;
  if (!image && size) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "fp4_safetensors_open_memory: image is NULL");
  fp4_safetensors *st = calloc(1, sizeof *st);
  if (!st || !(st->files = calloc(1, sizeof *st->files)) || !(st->files[0].path = strdup("(memory)"))) {
    fp4_safetensors_close(st);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "fp4_safetensors_open_memory: out of host memory");
  }
  st->nfiles = 1;
  st->files[0].map = image;
  st->files[0].map_size = size;
  fp4_status status = load_files(st, 0);
  if (status) {
    fp4_safetensors_close(st);
    return status;
  }
  *out = st;
  return FP4_OK;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard name from an index must be a plain file name in the index's directory. */
static int safe_file_name(const char *f) {
  return *f && !strchr(f, '/') && !strchr(f, '\\') && strcmp(f, ".") && strcmp(f, "..");
}

static fp4_status open_index(fp4_safetensors *st, const char *index_path, unsigned flags) {
  char *text = NULL;
  size_t len = 0;
  fp4_status status = fp4_model_read_text(index_path, 64 * 1024 * 1024, &text, &len);
  if (status) return status;
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    unsigned long long pos = at && at >= text && at <= text + len ? (unsigned long long)(at - text) : 0;
    free(text);
    return fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: not valid JSON (near byte %llu)", index_path, pos);
  }
  free(text);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(map)) {
    cJSON_Delete(root);
    return fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: no \"weight_map\" object", index_path);
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", index_path);
  char *slash = strrchr(dir, '/');
  if (slash) slash[1] = 0;
  else dir[0] = 0;
  /* Unique shard names, sorted, so files open once and in a stable order. */
  int n = cJSON_GetArraySize(map), nu = 0;
  char **files = calloc((size_t)(n ? n : 1), sizeof *files);
  if (!files) status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
  for (const cJSON *e = map->child; e && !status; e = e->next) {
    if (!cJSON_IsString(e) || !safe_file_name(e->valuestring)) {
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: tensor '%s' maps to %s, not a file name in the index's "
                        "directory", index_path, e->string ? e->string : "", cJSON_IsString(e) ? e->valuestring : "a non-string");
      break;
    }
    files[nu++] = e->valuestring;
  }
  if (!status) {
    qsort(files, (size_t)nu, sizeof *files, cmp_str);
    for (int i = 0; i < nu && !status; i++) {
      if (i && !strcmp(files[i], files[i - 1])) continue;
      char path[PATH_MAX];
      if (snprintf(path, sizeof path, "%s%s", dir, files[i]) >= (int)sizeof path)
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: shard path too long", index_path);
      else
        status = add_file(st, path);
    }
  }
  if (!status) status = load_files(st, flags);
  /* Every index entry must exist in the shard it names. */
  for (const cJSON *e = map->child; e && !status; e = e->next) {
    const fp4_st_tensor *t = fp4_safetensors_find(st, e->string);
    const char *base = t ? strrchr(st->files[t->file].path, '/') : NULL;
    base = base ? base + 1 : (t ? st->files[t->file].path : NULL);
    if (!t || strcmp(base, e->valuestring))
      status = fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: tensor '%s' is listed in %s but %s", index_path, e->string,
                        e->valuestring, t ? "found in another shard" : "missing there");
  }
  free(files);
  cJSON_Delete(root);
  return status;
}

fp4_status fp4_safetensors_open(const char *path, unsigned flags, fp4_safetensors **out) {
  fp4_clear_error();
  static const char fn[] = "fp4_safetensors_open";
  if (!out) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: st is NULL", fn);
  *out = NULL;
  if (!path || !*path) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: path is NULL or empty", fn);
  fp4_safetensors *st = calloc(1, sizeof *st);
  if (!st) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
  struct stat sb;
  fp4_status status = FP4_OK;
  if (stat(path, &sb) != 0) {
    status = fp4_fail(FP4_ERR_NOT_FOUND, "%s: %s: %s", fn, path, strerror(errno));
  } else if (S_ISDIR(sb.st_mode)) {
    char index[PATH_MAX];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    if (access(index, R_OK) == 0) {
      status = open_index(st, index, flags);
    } else {
      DIR *d = opendir(path);
      char **names = NULL;
      int nn = 0;
      if (!d) status = fp4_fail(FP4_ERR_IO, "%s: cannot list %s: %s", fn, path, strerror(errno));
      for (struct dirent *de; d && !status && (de = readdir(d));) {
        if (!ends_with(de->d_name, ".safetensors")) continue;
        char **nn2 = realloc(names, (size_t)(nn + 1) * sizeof *names);
        if (!nn2 || !(nn2[nn] = strdup(de->d_name))) {
          if (nn2) names = nn2;
          status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
          break;
        }
        names = nn2;
        nn++;
      }
      if (d) closedir(d);
      if (!status && nn == 0) status = fp4_fail(FP4_ERR_NOT_FOUND, "%s: %s holds no *.safetensors file", fn, path);
      if (!status) qsort(names, (size_t)nn, sizeof *names, cmp_str);
      for (int i = 0; i < nn && !status; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        status = add_file(st, p);
      }
      for (int i = 0; i < nn; i++) free(names[i]);
      free(names);
      if (!status) status = load_files(st, flags);
    }
  } else if (ends_with(path, ".json")) {
    status = open_index(st, path, flags);
  } else {
    status = add_file(st, path);
    if (!status) status = load_files(st, flags);
  }
  if (status) {
    fp4_safetensors_close(st);
    return status;
  }
  *out = st;
  return FP4_OK;
}

int64_t fp4_safetensors_count(const fp4_safetensors *st) { return st ? st->ntensors : 0; }

const fp4_st_tensor *fp4_safetensors_at(const fp4_safetensors *st, int64_t index) {
  return st && index >= 0 && index < st->ntensors ? &st->tensors[index] : NULL;
}

const fp4_st_tensor *fp4_safetensors_find(const fp4_safetensors *st, const char *name) {
  if (!st || !name) return NULL;
  int64_t lo = 0, hi = st->ntensors;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = strcmp(st->tensors[mid].name, name);
    if (!c) return &st->tensors[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

int fp4_safetensors_file_count(const fp4_safetensors *st) { return st ? st->nfiles : 0; }

const char *fp4_safetensors_file(const fp4_safetensors *st, int index) {
  return st && index >= 0 && index < st->nfiles ? st->files[index].path : NULL;
}

const char *fp4_safetensors_metadata(const fp4_safetensors *st, int file, const char *key) {
  if (!st || file < 0 || file >= st->nfiles || !key || !st->files[file].metadata) return NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->files[file].metadata, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- quantized weights ------------------------------------------------------------------------ */

static const fp4_st_tensor *find_suffix(const fp4_safetensors *st, const char *module, const char *suffix) {
  char name[1024];
  if (snprintf(name, sizeof name, "%s.%s", module, suffix) >= (int)sizeof name) return NULL;
  return fp4_safetensors_find(st, name);
}

static int scalar_f32(const fp4_st_tensor *t, float *v) {
  if (!t || t->dtype != FP4_ST_F32 || t->bytes != 4 || !t->data) return 0;
  memcpy(v, t->data, 4);
  return 1;
}

fp4_status fp4_safetensors_qmatrix(const fp4_safetensors *st, const char *module, fp4_qmatrix *q) {
  fp4_clear_error();
  static const char fn[] = "fp4_safetensors_qmatrix";
  if (!st || !module || !q) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: st, module or q is NULL", fn);
  const fp4_st_tensor *w = find_suffix(st, module, "weight");
  int compressed = 0;
  if (!w || w->dtype != FP4_ST_U8) {
    w = find_suffix(st, module, "weight_packed");
    compressed = 1;
  }
  const fp4_st_tensor *s = find_suffix(st, module, "weight_scale");
  if (!w || w->dtype != FP4_ST_U8 || w->ndim != 2 || !s || s->ndim != 2)
    return fp4_fail(FP4_ERR_NOT_FOUND, "%s: %s has no packed FP4 weight (U8 weight or weight_packed, 2-D) with a 2-D "
                    "weight_scale", fn, module);
  if (!w->data) return fp4_fail(FP4_ERR_INVALID_ARGUMENT, "%s: the checkpoint was opened headers-only", fn);
  const int64_t rows = w->shape[0], cols = w->shape[1] * 2;
  fp4_format format;
  if (s->dtype == FP4_ST_F8_E4M3 && s->shape[1] * 16 == cols) format = FP4_FORMAT_NVFP4;
  else if ((s->dtype == FP4_ST_U8 || s->dtype == FP4_ST_F8_E8M0) && s->shape[1] * 32 == cols) format = FP4_FORMAT_MXFP4;
  else
    return fp4_fail(FP4_ERR_FORMAT, "%s: %s.weight_scale is %s [%lld, %lld], which fits neither NVFP4 (F8_E4M3, K/16) "
                    "nor MXFP4 (U8, K/32) for K = %lld", fn, module, fp4_st_dtype_name(s->dtype),
                    (long long)s->shape[0], (long long)s->shape[1], (long long)cols);
  if (s->shape[0] != rows)
    return fp4_fail(FP4_ERR_FORMAT, "%s: %s.weight_scale has %lld rows, the weight %lld", fn, module,
                    (long long)s->shape[0], (long long)rows);
  float mult = 1.0f;
  if (format == FP4_FORMAT_NVFP4) {
    float v;
    if (!compressed && scalar_f32(find_suffix(st, module, "weight_scale_2"), &v)) mult = v;
    else if (compressed && scalar_f32(find_suffix(st, module, "weight_global_scale"), &v)) mult = 1.0f / v;
    else
      return fp4_fail(FP4_ERR_FORMAT, "%s: %s lacks a one-element F32 %s", fn, module,
                      compressed ? "weight_global_scale" : "weight_scale_2");
  }
  memset(q, 0, sizeof *q);
  q->data = (void *)w->data;
  q->scales = (void *)s->data;
  q->rows = rows;
  q->cols = cols;
  q->format = format;
  q->layout = FP4_LAYOUT_LINEAR;
  q->multiplier = mult;
  q->memory = FP4_MEMORY_HOST;
  return FP4_OK;
}
