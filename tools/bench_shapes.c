/* The GEMM shapes a model contributes to `fp4kit bench` and `fp4kit tune`: one function for both
 * commands, so a tuning run covers exactly the shapes a bench of the same model times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

const char *bench_find_model(const char *want, int *matches) {
  const char *hit = NULL;
  *matches = 0;
  for (int i = 0; fp4_shape_set_name(i); i++) {
    const char *s = fp4_shape_set_name(i);
    if (!strcmp(s, want)) {
      *matches = 1;
      return s;
    }
    if (!strncmp(s, want, strlen(want))) {
      hit = s;
      (*matches)++;
    }
  }
  return *matches == 1 ? hit : NULL;
}

int bench_add_shape(bench_shape *shapes, int *count, int64_t n, int64_t k, const char *name) {
  for (int i = 0; i < *count; i++)
    if (shapes[i].n == n && shapes[i].k == k) return 0; /* the first name that needs it is enough */
  if (*count == BENCH_MAX_SHAPES) return -1;
  shapes[*count].n = n;
  shapes[*count].k = k;
  snprintf(shapes[*count].name, sizeof shapes[*count].name, "%s", name);
  (*count)++;
  return 0;
}

int bench_parse_shapes(const char *list, bench_shape *shapes, int *count, char *why, size_t why_size) {
  int items = 0;
  const char *s = list;
  for (;;) {
    const size_t len = strcspn(s, ",");
    char item[64];
    snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), s);
    long long n = 0, k = 0;
    int used = -1;
    if (!len || len >= sizeof item || strspn(item, "0123456789xX") != len ||
        sscanf(item, "%lld%*[xX]%lld%n", &n, &k, &used) != 2 || used != (int)len || n < 1 || k < 1 ||
        n > (1LL << 31) || k > (1LL << 31)) {
      snprintf(why, why_size, "'%.*s' is not NxK with positive N and K", (int)len, s);
      return -1;
    }
    char name[64];
    snprintf(name, sizeof name, "%lldx%lld", n, k);
    if (bench_add_shape(shapes, count, n, k, name)) {
      snprintf(why, why_size, "more than %d shapes", BENCH_MAX_SHAPES);
      return -1;
    }
    items++;
    if (!s[len]) return items;
    s += len + 1;
  }
}

void bench_list_models(FILE *f) {
  fprintf(f, "shape sets:\n");
  for (int i = 0; fp4_shape_set_name(i); i++) fprintf(f, "  %s\n", fp4_shape_set_name(i));
}

int bench_model_shapes(const char *tool, const char *want, int tp, bench_shape *shapes, int *count) {
  int matches = 0;
  const char *model = bench_find_model(want, &matches);
  if (matches > 1) {
    fprintf(stderr, "fp4kit %s: '%s' is ambiguous: %d shape sets start with it:", tool, want, matches);
    for (int i = 0; fp4_shape_set_name(i); i++)
      if (!strncmp(fp4_shape_set_name(i), want, strlen(want))) fprintf(stderr, " %s", fp4_shape_set_name(i));
    fprintf(stderr, "; give more of the name\n");
    return FP4CLI_USAGE;
  }
  if (!model) {
    fprintf(stderr, "fp4kit %s: no shape set matches '%s'\n", tool, want);
    bench_list_models(stderr);
    return FP4CLI_USAGE;
  }
  int total = 0;
  fp4_status st = fp4_shape_set(model, tp, 1, NULL, 0, &total);
  fp4_gemm_shape *g = st ? NULL : calloc((size_t)(total ? total : 1), sizeof *g);
  if (!st && !g) st = FP4_ERR_OUT_OF_MEMORY;
  if (!st) st = fp4_shape_set(model, tp, 1, g, total, &total);
  if (st) {
    free(g);
    return fp4cli_report("reading the model shape set", st);
  }
  int dense = 0, rc = FP4CLI_OK;
  for (int i = 0; i < total; i++) {
    if (g[i].experts != 0) continue; /* MoE experts are a grouped GEMM: a different benchmark */
    char name[64];
    snprintf(name, sizeof name, "%.20s %.42s", model, g[i].name);
    if (bench_add_shape(shapes, count, g[i].n, g[i].k, name)) {
      fprintf(stderr, "fp4kit %s: more than %d shapes\n", tool, BENCH_MAX_SHAPES);
      rc = FP4CLI_USAGE;
      break;
    }
    dense++;
  }
  free(g);
  if (!dense && !rc) fprintf(stderr, "fp4kit %s: shape set '%s' has no dense GEMMs\n", tool, model);
  return rc;
}

void bench_print_shapes(FILE *f, const bench_shape *shapes, int count) {
  for (int i = 0; i < count; i++) fprintf(f, "%lld %lld %s\n", (long long)shapes[i].n, (long long)shapes[i].k, shapes[i].name);
}
