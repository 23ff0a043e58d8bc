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

/* Room for up to `bytes` of names, committed with name_commit once the length is known; NULL when out
 * of memory. Blocks of at least 1 MiB: allocating between two header parses makes the allocator
 * consolidate everything the last parse freed. */
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
  return b->bytes + b->used;
}
static void name_commit(st_part *st, size_t bytes) { st->names->used += bytes; }

enum { ST_MAX_HEADER = 100 * 1024 * 1024 }; /* the limit of the reference implementation */
enum { ST_MAX_DEPTH = 64 };                 /* nesting allowed inside ignored header values */

/* ---- the header's JSON ----------------------------------------------------------------------------
 * A strict RFC 8259 reader made for this one document: an object of tensor entries and __metadata__.
 * It decodes names straight into the name blocks and numbers into integers, allocating nothing per
 * tensor (a general JSON tree cost more than everything else in the inspection of a large
 * checkpoint: bench/results/cpu/inspect_reader.md). Strings must be UTF-8 without NUL characters; integers must be exact (below 2^53,
 * the bound every JSON reader keeps exactly). */

typedef struct jreader {
  const char *p, *end, *hdr; /* cursor, end and start of the header bytes (file byte 8) */
  const char *path;
  fp4_status status;         /* the first error, with its message set */
} jreader;

static unsigned long long jpos(const jreader *r, const char *at) { return 8 + (unsigned long long)(at - r->hdr); }

static int jerror(jreader *r, const char *at, const char *what) {
  if (!r->status)
    r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the header is not valid JSON (near byte %llu: %s)", r->path,
                         jpos(r, at), what);
  return 0;
}

static void jspace(jreader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\t' || *r->p == '\r')) r->p++;
}

/* Consumes c after optional white space. */
static int jexpect(jreader *r, char c) {
  jspace(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return 1;
  }
  char what[32];
  snprintf(what, sizeof what, "expected '%c'", c);
  return jerror(r, r->p, what);
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int jhex4(const char *p, const char *end, unsigned *v) {
  if (end - p < 4) return 0;
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p[i]);
    if (h < 0) return 0;
    *v = *v << 4 | (unsigned)h;
  }
  return 1;
}

/* Bytes from the cursor to the closing quote of the string there (or to the end): a bound on its
 * decoded length, since no escape decodes to more bytes than it is written with. */
static size_t jraw_len(const jreader *r) {
  const size_t n = (size_t)(r->end - r->p);
  for (size_t i = 1; i < n;) {
    const char *q = memchr(r->p + i, '"', n - i);
    if (!q) break;
    /* A quote ends the string unless an odd run of backslashes escapes it. */
    size_t j = (size_t)(q - r->p), b = 0;
    while (j - b > 1 && r->p[j - b - 1] == '\\') b++;
    if (b % 2 == 0) return j;
    i = j + 1;
  }
  return n;
}

/* The bytes a string holds as they are: printable ASCII but the quote and the backslash. */
static const unsigned char plain_byte[256] = {
    ['\x20'] = 1, 1, 0 /* '"' */, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    ['@'] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0 /* '\\' */, 1, 1, 1,
    ['`'] = 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* Reads the string at the cursor (which is at its opening quote) and, when out is not NULL, writes
 * its decoded bytes and a NUL there (room: the raw length + 1 is always enough). Returns the decoded
 * length, or -1 on error. */
static long long jstring(jreader *r, char *out) {
  const char *start = r->p;
  if (r->p >= r->end || *r->p != '"') return jerror(r, r->p, "expected a string"), -1;
  const char *p = r->p + 1;
  size_t o = 0;
  for (;;) {
    const char *run = p; /* a run of plain ASCII copied in one go */
    while (p < r->end && plain_byte[(unsigned char)*p]) p++;
    if (out && p > run) memcpy(out + o, run, (size_t)(p - run));
    o += (size_t)(p - run);
    if (p >= r->end) return jerror(r, start, "unterminated string"), -1;
    const unsigned char c = (unsigned char)*p;
    if (c == '"') break;
    if (c < 0x20) return jerror(r, p, "control character in a string"), -1;
    if (c >= 0x80) {
      size_t n = fp4_model_utf8_span(p, (size_t)(r->end - p) < 4 ? (size_t)(r->end - p) : 4);
      size_t seq = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (n < seq) {
        if (!r->status)
          r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: a header string starting at byte %llu is not valid "
                               "UTF-8 (byte %llu)", r->path, jpos(r, start), jpos(r, p));
        return -1;
      }
      if (out) memcpy(out + o, p, seq);
      o += seq;
      p += seq;
      continue;
    }
    /* An escape. */
    if (p + 1 >= r->end) return jerror(r, p, "unterminated escape"), -1;
    const char e = p[1];
    static const char plain_in[] = "\"\\/bfnrt", plain_out[] = "\"\\/\b\f\n\r\t";
    const char *k = e ? strchr(plain_in, e) : NULL;
    if (k) {
      if (out) out[o] = plain_out[k - plain_in];
      o++;
      p += 2;
      continue;
    }
    unsigned u;
    if (e != 'u' || !jhex4(p + 2, r->end, &u)) return jerror(r, p, "invalid escape"), -1;
    p += 6;
    if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low half */
      unsigned lo;
      if (r->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !jhex4(p + 2, r->end, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        if (!r->status)
          r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: a header string starting at byte %llu is not valid "
                               "UTF-8 (lone surrogate escape at byte %llu)", r->path, jpos(r, start), jpos(r, p - 6));
        return -1;
      }
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      p += 6;
    } else if (u >= 0xDC00 && u <= 0xDFFF) {
      if (!r->status)
        r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: a header string starting at byte %llu is not valid UTF-8 "
                             "(lone surrogate escape at byte %llu)", r->path, jpos(r, start), jpos(r, p - 6));
      return -1;
    } else if (u == 0) {
      if (!r->status)
        r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: a header string starting at byte %llu holds a NUL "
                             "character (byte %llu)", r->path, jpos(r, start), jpos(r, p - 6));
      return -1;
    }
    char enc[4];
    size_t len;
    if (u < 0x80) {
      enc[0] = (char)u;
      len = 1;
    } else if (u < 0x800) {
      enc[0] = (char)(0xC0 | u >> 6);
      enc[1] = (char)(0x80 | (u & 0x3F));
      len = 2;
    } else if (u < 0x10000) {
      enc[0] = (char)(0xE0 | u >> 12);
      enc[1] = (char)(0x80 | (u >> 6 & 0x3F));
      enc[2] = (char)(0x80 | (u & 0x3F));
      len = 3;
    } else {
      enc[0] = (char)(0xF0 | u >> 18);
      enc[1] = (char)(0x80 | (u >> 12 & 0x3F));
      enc[2] = (char)(0x80 | (u >> 6 & 0x3F));
      enc[3] = (char)(0x80 | (u & 0x3F));
      len = 4;
    }
    if (out) memcpy(out + o, enc, len);
    o += len;
  }
  if (out) out[o] = 0;
  r->p = p + 1;
  return (long long)o;
}

/* Reads the number at the cursor (RFC 8259 grammar). *exact is 1 when it is a non-negative integer
 * written without fraction or exponent and below 2^53, with its value in *v. */
static int jnumber(jreader *r, uint64_t *v, int *exact) {
  const char *p = r->p, *start = p;
  int neg = 0, frac = 0;
  uint64_t x = 0;
  if (p < r->end && *p == '-') {
    neg = 1;
    p++;
  }
  if (p >= r->end || *p < '0' || *p > '9') return jerror(r, start, "invalid number");
  if (*p == '0') {
    p++;
  } else {
    for (; p < r->end && *p >= '0' && *p <= '9'; p++)
      x = x > (UINT64_MAX - 9) / 10 ? UINT64_MAX : x * 10 + (uint64_t)(*p - '0'); /* saturates: too large anyway */
  }
  if (p < r->end && *p == '.') {
    frac = 1;
    if (++p >= r->end || *p < '0' || *p > '9') return jerror(r, start, "invalid number");
    while (p < r->end && *p >= '0' && *p <= '9') p++;
  }
  if (p < r->end && (*p == 'e' || *p == 'E')) {
    frac = 1;
    p++;
    if (p < r->end && (*p == '+' || *p == '-')) p++;
    if (p >= r->end || *p < '0' || *p > '9') return jerror(r, start, "invalid number");
    while (p < r->end && *p >= '0' && *p <= '9') p++;
  }
  r->p = p;
  *exact = !neg && !frac && x <= ((uint64_t)1 << 53);
  *v = x;
  return 1;
}

static int jliteral(jreader *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n)) return jerror(r, r->p, "invalid value");
  r->p += n;
  return 1;
}

/* Skips any value (validating it). */
static int jskip(jreader *r, int depth) {
  jspace(r);
  if (r->p >= r->end) return jerror(r, r->p, "expected a value");
  const char c = *r->p;
  if (c == '"') return jstring(r, NULL) >= 0;
  if (c == '-' || (c >= '0' && c <= '9')) {
    uint64_t v;
    int exact;
    return jnumber(r, &v, &exact);
  }
  if (c == 't') return jliteral(r, "true");
  if (c == 'f') return jliteral(r, "false");
  if (c == 'n') return jliteral(r, "null");
  if (c != '{' && c != '[') return jerror(r, r->p, "invalid value");
  if (depth >= ST_MAX_DEPTH) return jerror(r, r->p, "nested too deeply");
  const char close = c == '{' ? '}' : ']';
  r->p++;
  jspace(r);
  if (r->p < r->end && *r->p == close) {
    r->p++;
    return 1;
  }
  for (;;) {
    if (close == '}') {
      jspace(r);
      if (jstring(r, NULL) < 0 || !jexpect(r, ':')) return 0;
    }
    if (!jskip(r, depth + 1)) return 0;
    jspace(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    return jexpect(r, close);
  }
}

/* Enters the object at the cursor: 1 at its first key, 0 when it is empty (and consumed), -1 when the
 * value there is valid JSON but not an object, -2 when it is not JSON (r->status set). */
static int jobject_begin(jreader *r) {
  jspace(r);
  if (r->p >= r->end || *r->p != '{') return jskip(r, 1) ? -1 : -2;
  r->p++;
  jspace(r);
  if (r->p < r->end && *r->p == '}') {
    r->p++;
    return 0;
  }
  return 1;
}

/* Reads "[" values "]" calling item(r, index, ctx) for each; returns the count or -1. */
typedef int (*jitem_fn)(jreader *r, int index, void *ctx);
static int jarray(jreader *r, jitem_fn item, void *ctx) {
  if (!jexpect(r, '[')) return -1;
  jspace(r);
  if (r->p < r->end && *r->p == ']') {
    r->p++;
    return 0;
  }
  for (int i = 0;; i++) {
    jspace(r);
    if (!item(r, i, ctx)) return -1;
    jspace(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    return jexpect(r, ']') ? i + 1 : -1;
  }
}

/* One integer of a shape or of data_offsets; other values are read and marked bad. */
typedef struct juints {
  uint64_t v[FP4_ST_MAX_DIMS];
  int bad;  /* index of the first element that is not an exact non-negative integer, or -1 */
  int max;  /* elements kept */
} juints;

static int juint_item(jreader *r, int index, void *ctx) {
  juints *u = ctx;
  uint64_t v = 0;
  int exact = 0;
  const char c = r->p < r->end ? *r->p : 0;
  if (c == '-' || (c >= '0' && c <= '9')) {
    if (!jnumber(r, &v, &exact)) return 0;
  } else if (!jskip(r, 1)) {
    return 0;
  }
  if (!exact && u->bad < 0) u->bad = index;
  if (index < u->max) u->v[index] = v;
  return 1;
}

/* What a tensor entry says, before it is checked. */
typedef struct jentry {
  char dtype[16];
  int has_dtype;   /* 1: a string (possibly unknown), -1: another value */
  juints shape, offsets;
  int ndim, noffsets;
} jentry;

/* Reads a tensor entry's object. */
static int jtensor(jreader *r, jentry *e, const char *name, const char *key_at) {
  memset(e, 0, sizeof *e);
  e->ndim = e->noffsets = -2; /* absent */
  e->shape.bad = e->offsets.bad = -1;
  e->shape.max = FP4_ST_MAX_DIMS;
  e->offsets.max = 2;
  const int open = jobject_begin(r);
  if (open == -1)
    r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu is not an object", r->path,
                         name, jpos(r, key_at));
  if (open <= 0) return open == 0;
  for (;;) {
    char key[16] = "";
    jspace(r);
    /* Only short keys can be known ones; longer keys are read without copying. */
    const long long klen = jraw_len(r) < sizeof key ? jstring(r, key) : jstring(r, NULL);
    if (klen < 0 || !jexpect(r, ':')) return 0;
    int *seen = klen == 5 && !memcmp(key, "dtype", 5)           ? &e->has_dtype
                : klen == 5 && !memcmp(key, "shape", 5)         ? &e->ndim
                : klen == 12 && !memcmp(key, "data_offsets", 12) ? &e->noffsets
                                                                : NULL;
    if (seen && *seen != 0 && *seen != -2) {
      r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: key '%s' appears twice",
                           r->path, name, jpos(r, key_at), key);
      return 0;
    }
    jspace(r);
    const char c = r->p < r->end ? *r->p : 0;
    if (seen == &e->has_dtype) {
      if (c == '"') {
        if (jraw_len(r) < sizeof e->dtype) {
          if (jstring(r, e->dtype) < 0) return 0;
        } else {
          if (jstring(r, NULL) < 0) return 0;
          memcpy(e->dtype, "(too long)", sizeof "(too long)");
        }
        e->has_dtype = 1;
      } else {
        if (!jskip(r, 1)) return 0;
        e->has_dtype = -1;
      }
    } else if (seen) {
      juints *u = seen == &e->ndim ? &e->shape : &e->offsets;
      if (c == '[') {
        int n = jarray(r, juint_item, u);
        if (n < 0) return 0;
        *seen = n;
      } else {
        if (!jskip(r, 1)) return 0;
        *seen = -1; /* not an array */
      }
    } else if (!jskip(r, 1)) {
      return 0;
    }
    jspace(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    return jexpect(r, '}');
  }
}

/* The __metadata__ object: string values only, kept as a cJSON object (a handful of entries). */
static int jmetadata(jreader *r, st_file *file, const char *key_at) {
  const int open = jobject_begin(r);
  if (open == -1)
    r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ at byte %llu is not an object", r->path,
                         jpos(r, key_at));
  if (open < 0) return 0;
  if (file->metadata) {
    r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ appears twice (byte %llu)", r->path,
                         jpos(r, key_at));
    return 0;
  }
  if (!(file->metadata = cJSON_CreateObject())) {
    r->status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for __metadata__");
    return 0;
  }
  if (open == 0) return 1;
  for (;;) {
    jspace(r);
    const char *at = r->p;
    char *k = malloc(jraw_len(r) + 1);
    long long kl = k ? jstring(r, k) : -1;
    if (!k) r->status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for __metadata__");
    if (kl < 0 || !jexpect(r, ':')) {
      free(k);
      return 0;
    }
    jspace(r);
    if (r->p >= r->end || *r->p != '"') {
      r->status = fp4_fail(FP4_ERR_FORMAT, "safetensors %s: __metadata__ value '%s' at byte %llu is not a string",
                           r->path, k, jpos(r, at));
      free(k);
      return 0;
    }
    char *v = malloc(jraw_len(r) + 1);
    long long vl = v ? jstring(r, v) : -1;
    if (!v) r->status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for __metadata__");
    if (vl >= 0 && !cJSON_AddStringToObject(file->metadata, k, v))
      r->status = fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for __metadata__");
    free(k);
    free(v);
    if (r->status) return 0;
    jspace(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    return jexpect(r, '}');
  }
}

/* Makes room for `more` tensors (grows geometrically). */
static fp4_status reserve_tensors(st_part *st, int64_t more) {
  if (st->ntensors + more <= st->cap) return FP4_OK;
  int64_t cap = st->cap ? st->cap : 1024;
  while (cap < st->ntensors + more) cap *= 2;
  fp4_st_tensor *nt = realloc(st->tensors, (size_t)cap * sizeof *nt);
  if (!nt) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor list");
  st->tensors = nt;
  st->cap = cap;
  return FP4_OK;
}

static int cmp_begin(const void *a, const void *b) {
  const fp4_st_tensor *x = *(fp4_st_tensor *const *)a, *y = *(fp4_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
  return 0;
}

/* Checks what entry e says about tensor t (name set) and fills t; header of n bytes, data area of
 * data_size bytes. */
static fp4_status check_entry(const jreader *r, const jentry *e, fp4_st_tensor *t, size_t n, uint64_t data_size,
                              unsigned long long pos) {
  const char *path = r->path, *name = t->name;
  if (e->has_dtype != 1 || fp4_st_dtype_parse(e->dtype, &t->dtype) != FP4_OK)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu has unknown dtype %s%s%s", path,
                    name, pos, e->has_dtype == 1 ? "'" : "", e->has_dtype == 1 ? e->dtype : "(missing)",
                    e->has_dtype == 1 ? "'" : "");
  if (e->ndim < 0 || e->ndim > FP4_ST_MAX_DIMS)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: shape is %s", path, name, pos,
                    e->ndim < 0 ? "missing or not an array" : "of more than 8 dimensions");
  t->ndim = e->ndim;
  /* Element count times bits, with every multiplication checked: a hostile shape must not wrap. */
  uint64_t bits = (uint64_t)fp4_st_dtype_bits(t->dtype);
  for (int d = 0; d < e->ndim; d++) {
    const uint64_t dim = e->shape.v[d];
    if (e->shape.bad == d)
      return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: dimension %d is not a "
                      "non-negative integer below 2^53", path, name, pos, d);
    t->shape[d] = (int64_t)dim;
    if (dim != 0 && bits > UINT64_MAX / dim)
      return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: shape overflows 64-bit byte "
                      "counts", path, name, pos);
    bits *= dim;
  }
  if (bits % 8)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: %s shape is not a whole number "
                    "of bytes", path, name, pos, fp4_st_dtype_name(t->dtype));
  const uint64_t begin = e->offsets.v[0], end = e->offsets.v[1];
  if (e->noffsets != 2 || e->offsets.bad >= 0 || end < begin)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at header byte %llu: data_offsets is not [begin, end] "
                    "with begin <= end", path, name, pos);
  if (end > data_size)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s': data_offsets [%llu, %llu] run past the data area of "
                    "%llu bytes (file byte %llu)", path, name, (unsigned long long)begin, (unsigned long long)end,
                    (unsigned long long)data_size, 8ULL + n + begin);
  if (end - begin != bits / 8)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' at file byte %llu: shape and dtype need %llu bytes, "
                    "data_offsets hold %llu", path, name, 8ULL + n + begin, (unsigned long long)(bits / 8),
                    (unsigned long long)(end - begin));
  t->offset = 8 + n + begin;
  t->bytes = end - begin;
  return FP4_OK;
}

/* Parses and validates the header of file fi (header bytes hdr[0..n), data area of data_size bytes
 * starting at file offset 8+n) and appends its tensors. */
static fp4_status parse_header(fp4_safetensors *st, st_part *part, int fi, const char *hdr, size_t n, uint64_t data_size) {
  jreader r = {hdr, hdr + n, hdr, st->files[fi].path, FP4_OK};
  const char *path = r.path;
  const int64_t first = part->ntensors;
  jspace(&r);
  if (r.p < r.end && *r.p != '{')
    if (jskip(&r, 0)) /* valid JSON of another kind */
      return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the header at byte 8 is not a JSON object", path);
  if (r.status || !jexpect(&r, '{')) return r.status;
  jspace(&r);
  int empty = r.p < r.end && *r.p == '}';
  if (empty) r.p++;
  while (!empty) {
    jspace(&r);
    const char *key_at = r.p;
    char *name = name_room(part, jraw_len(&r) + 1);
    if (!name) return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor names");
    const long long len = jstring(&r, name);
    if (len < 0 || !jexpect(&r, ':')) return r.status;
    if (!strcmp(name, "__metadata__")) {
      if (!jmetadata(&r, &st->files[fi], key_at)) return r.status;
    } else {
      jentry e;
      if (!jtensor(&r, &e, name, key_at)) return r.status;
      fp4_st_tensor t;
      memset(&t, 0, sizeof t);
      t.name = name;
      t.file = fi;
      fp4_status s = check_entry(&r, &e, &t, n, data_size, jpos(&r, key_at));
      if (!s) s = reserve_tensors(part, 1);
      if (s) return s;
      t.data = st->files[fi].map ? st->files[fi].map + t.offset : NULL;
      name_commit(part, (size_t)len + 1);
      part->tensors[part->ntensors++] = t;
    }
    jspace(&r);
    if (r.p < r.end && *r.p == ',') {
      r.p++;
      continue;
    }
    if (!jexpect(&r, '}')) return r.status;
    break;
  }
  /* Only the spaces that writers pad with may follow the JSON value. */
  jspace(&r);
  if (r.p < r.end)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: bytes after the header's JSON (byte %llu)", path, jpos(&r, r.p));
  /* No overlaps and no holes: sorted by begin, each tensor starts where the previous ended and the
   * last ends at the end of the file. */
  int64_t nt = part->ntensors - first;
  if (nt > part->order_cap) {
    int64_t cap = part->order_cap ? part->order_cap : 4096;
    while (cap < nt) cap *= 2;
    free(part->order);
    part->order_cap = 0;
    if (!(part->order = malloc((size_t)cap * sizeof *part->order)))
      return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory");
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
  for (int64_t i = 0; i < nt; i++) {
    if (order[i]->offset != expect)
      return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: tensor '%s' starts at file byte %llu but the previous tensor "
                      "ends at %llu (%s)", path, order[i]->name, (unsigned long long)order[i]->offset,
                      (unsigned long long)expect, order[i]->offset < expect ? "overlap" : "hole");
    expect = order[i]->offset + order[i]->bytes;
  }
  if (expect != 8 + n + data_size)
    return fp4_fail(FP4_ERR_FORMAT, "safetensors %s: the tensors end at file byte %llu but the file has %llu bytes",
                    path, (unsigned long long)expect, (unsigned long long)(8 + n + data_size));
  return FP4_OK;
}

/* Name order from byte d on (the names agree before it); equal names (refused later) in shard order,
 * then header order, as read serially (one shard is parsed by one thread, into one array). */
static int cmp_name_from(const fp4_st_tensor *x, const fp4_st_tensor *y, size_t d) {
  int c = strcmp(x->name + d, y->name + d);
  if (c) return c;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* A tensor and 8 bytes of its name from some depth, big-endian, zero after the end of the name. */
typedef struct name_key {
  uint64_t key;
  const fp4_st_tensor *t;
} name_key;

static void load_keys(name_key *a, size_t n, size_t d) {
  for (size_t i = 0; i < n; i++) {
    const unsigned char *s = (const unsigned char *)a[i].t->name + d;
    uint64_t k = 0;
    int j = 0;
    for (; j < 8 && s[j]; j++) k = k << 8 | s[j];
    a[i].key = j == 0 ? 0 : j == 8 ? k : k << (8 * (8 - j));
  }
}

/* Sorts a[0..n) by cmp_name_from, all names sharing their first d bytes (keys loaded for depth d when
 * fresh): multikey quicksort on 8-byte slices of the names. Checkpoint names share long prefixes,
 * which qsort with strcmp read again for every comparison (a seventh of a large inspection,
 * bench/results/cpu/inspect_reader.md); here each name is read once per 8 bytes of depth. Recursion
 * goes only into parts of at most half the elements: depth O(log n) on any input. Sets *dups when
 * two names are equal. */
static void sort_names(name_key *a, size_t n, size_t d, int fresh, int *dups) {
  while (n > 1) {
    if (n < 16) { /* insertion sort */
      for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cmp_name_from(a[j - 1].t, a[j].t, d) > 0; j--) {
          const name_key t = a[j];
          a[j] = a[j - 1];
          a[j - 1] = t;
        }
      for (size_t i = 1; i < n && !*dups; i++) *dups = !strcmp(a[i - 1].t->name + d, a[i].t->name + d);
      return;
    }
    if (!fresh) load_keys(a, n, d);
    /* Median of three keys as the pivot. */
    const uint64_t x = a[0].key, y = a[n / 2].key, z = a[n - 1].key;
    const uint64_t pivot = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
    /* a[0..lt) < pivot, a[lt..i) == pivot, a[gt..n) > pivot. */
    size_t lt = 0, i = 0, gt = n;
    while (i < gt) {
      const name_key t = a[i];
      if (t.key < pivot) {
        a[i++] = a[lt];
        a[lt++] = t;
      } else if (t.key > pivot) {
        a[i] = a[--gt];
        a[gt] = t;
      } else {
        i++;
      }
    }
    size_t neq = gt - lt;
    if ((pivot & 0xFF) == 0 && neq > 0) { /* the names end within these 8 bytes: all equal */
      if (neq > 1) {
        *dups = 1;
        for (size_t p = lt + 1; p < gt; p++) /* shard order, then header order (few: an error follows) */
          for (size_t q = p; q > lt && cmp_name_from(a[q - 1].t, a[q].t, d) > 0; q--) {
            const name_key t = a[q];
            a[q] = a[q - 1];
            a[q - 1] = t;
          }
      }
      neq = 0;
    }
    /* The three parts: the largest is continued here, the others recursed into. */
    struct { name_key *a; size_t n, d; int fresh; } part[3] = {
        {a, lt, d, 1}, {a + lt, neq, d + 8, 0}, {a + gt, n - gt, d, 1}};
    int big = 0;
    for (int k = 1; k < 3; k++)
      if (part[k].n > part[big].n) big = k;
    for (int k = 0; k < 3; k++)
      if (k != big) sort_names(part[k].a, part[k].n, part[k].d, part[k].fresh, dups);
    a = part[big].a;
    n = part[big].n;
    d = part[big].d;
    fresh = part[big].fresh;
  }
}

/* Gathers the tensors of every part in name order (pointers are sorted, each tensor is copied
 * once) and refuses duplicate names (within or across shards). */
static fp4_status finalize(fp4_safetensors *st, const st_part *parts, int nparts) {
  int64_t total = 0;
  for (int i = 0; i < nparts; i++) total += parts[i].ntensors;
  name_key *sorted = malloc((size_t)(total ? total : 1) * sizeof *sorted);
  st->tensors = malloc((size_t)(total ? total : 1) * sizeof *st->tensors);
  if (!sorted || !st->tensors) {
    free(sorted);
    return fp4_fail(FP4_ERR_OUT_OF_MEMORY, "safetensors: out of host memory for the tensor list");
  }
  int64_t k = 0;
  for (int i = 0; i < nparts; i++)
    for (int64_t j = 0; j < parts[i].ntensors; j++) sorted[k++].t = &parts[i].tensors[j];
  int dups = 0;
  sort_names(sorted, (size_t)total, 0, 0, &dups);
  for (int64_t i = 0; i < total; i++) st->tensors[i] = *sorted[i].t;
  st->ntensors = total;
  free(sorted);
  for (int64_t i = 1; dups && i < st->ntensors; i++)
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
  struct stat sb;
  const char *kind = NULL;
  int fd = fp4_model_open_regular(path, &sb, &kind);
  if (fd < 0 && kind) return fp4_fail(FP4_ERR_IO, "safetensors: %s is %s, not a regular file", path, kind);
  if (fd < 0) return fp4_fail(errno == ENOENT ? FP4_ERR_NOT_FOUND : FP4_ERR_IO, "safetensors: cannot open %s: %s",
                              path, strerror(errno));
  fp4_status status = FP4_OK;
  if (flags & FP4_SAFETENSORS_HEADERS_ONLY) {
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
  const size_t valid = fp4_model_utf8_span(text, len);
  if (valid != len) {
    free(text);
    return fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: not valid UTF-8 (byte %zu)", index_path, valid);
  }
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
      struct stat sb;
      if (snprintf(path, sizeof path, "%s%s", dir, files[i]) >= (int)sizeof path) {
        status = fp4_fail(FP4_ERR_FORMAT, "safetensors index %s: shard path too long", index_path);
      } else if (stat(path, &sb) != 0 && errno == ENOENT) {
        /* Said with the index that names it: the shard alone does not tell a missing download from a
         * mistyped index. */
        const cJSON *e = map->child;
        while (e && strcmp(e->valuestring, files[i])) e = e->next;
        status = fp4_fail(FP4_ERR_NOT_FOUND, "safetensors index %s lists shard %s (for tensor '%s'), which does not "
                          "exist", index_path, files[i], e ? e->string : "");
      } else {
        status = add_file(st, path);
      }
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
