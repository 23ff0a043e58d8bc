/* Per-context memory of dispatch decisions (selection_cache.h). */
#include "dispatch/selection_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/context.h"

enum { TABLE_SLOTS = 512 }; /* direct-mapped: a decode step of a large model has a few hundred shapes */

typedef struct selection_slot {
  int used;
  fp4_selection_key key;
  const fp4_backend *backend;
  char config[64];
} selection_slot;

struct fp4_selection_table {
  selection_slot slots[TABLE_SLOTS];
};

/* 0..15: the low address bits that decide alignment rules (16-byte loads, 2-byte scale reads). */
static uint64_t align_class(const void *p) { return (uint64_t)((uintptr_t)p & 15u); }

static void put_qmatrix(uint64_t *w, int *n, const fp4_qmatrix *q) {
  w[(*n)++] = q ? (uint64_t)q->rows : UINT64_MAX;
  w[(*n)++] = q ? (uint64_t)q->cols : 0;
  w[(*n)++] = q ? ((uint64_t)q->format | (uint64_t)q->layout << 8 | (uint64_t)q->memory << 16 |
                   align_class(q->data) << 24 | align_class(q->scales) << 32)
                : 0;
}

static void put_matrix(uint64_t *w, int *n, const fp4_matrix *m) {
  w[(*n)++] = m ? (uint64_t)m->rows : UINT64_MAX;
  w[(*n)++] = m ? (uint64_t)m->cols : 0;
  w[(*n)++] = m ? ((uint64_t)m->ld | (uint64_t)m->dtype << 40 | (uint64_t)m->memory << 48 | align_class(m->data) << 56)
                : 0;
}

int fp4_selection_key_of(const fp4_problem *p, int backend_index, const char *config, uint64_t tuning_generation,
                         fp4_selection_key *key) {
  if (p->op != FP4_OP_QUANTIZE && p->op != FP4_OP_MM && p->op != FP4_OP_MM_W4A16) return 0;
  memset(key, 0, sizeof *key);
  if (config) {
    size_t len = strlen(config);
    if (len >= sizeof key->config) return 0;
    memcpy(key->config, config, len);
  }
  uint64_t *w = key->w;
  int n = 0;
  w[n++] = (uint64_t)p->op | (uint64_t)p->memory << 8 | (uint64_t)(p->enable_pdl != 0) << 16 |
           (uint64_t)(p->alpha_device != NULL) << 17 | (uint64_t)(p->global_scale_device != NULL) << 18 |
           (uint64_t)(p->exact_order != 0) << 19 |
           (uint64_t)(uint32_t)(backend_index + 1) << 32;
  w[n++] = tuning_generation;
  put_qmatrix(w, &n, p->a_q);
  put_matrix(w, &n, p->a);
  put_qmatrix(w, &n, p->b);
  put_matrix(w, &n, p->out);
  put_qmatrix(w, &n, p->q_out);
  return n <= FP4_SELECTION_KEY_WORDS;
}

static size_t slot_of(const fp4_selection_key *key) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < FP4_SELECTION_KEY_WORDS; i++) {
    h ^= key->w[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (const char *c = key->config; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
  return (size_t)(h % TABLE_SLOTS);
}

/* The context's table, created on first use when create is set (NULL without one). */
static struct fp4_selection_table *table_of(fp4_context *ctx, int create) {
  static const char owner = 0; /* the address that names this state among the context's slots */
  void **slot = fp4_context_slot(ctx, &owner, free);
  if (slot && !*slot && create) *slot = calloc(1, sizeof(struct fp4_selection_table));
  return slot ? *slot : NULL;
}

const fp4_backend *fp4_selection_find(fp4_context *ctx, const fp4_selection_key *key, const char **config) {
  const struct fp4_selection_table *t = table_of(ctx, 0);
  if (!t) return NULL;
  const selection_slot *s = &t->slots[slot_of(key)];
  if (!s->used || memcmp(&s->key, key, sizeof *key) != 0) return NULL;
  *config = s->config[0] ? s->config : NULL;
  return s->backend;
}

void fp4_selection_store(fp4_context *ctx, const fp4_selection_key *key, const fp4_backend *backend,
                         const char *config) {
  struct fp4_selection_table *t = table_of(ctx, 1);
  if (!t) return;
  if (fp4_registry_index(backend) < 0 || (config && strlen(config) >= sizeof t->slots[0].config)) return;
  selection_slot *s = &t->slots[slot_of(key)];
  s->used = 1;
  s->key = *key;
  s->backend = backend;
  strcpy(s->config, config ? config : "");
}
