/* The reports of `fp4kit bench`: a table for people, JSON and CSV for machines, and one
 * self-contained HTML page with a roofline chart (SVG) of every measured point. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench.h"

const char *bench_op_name(bench_op op) {
  return op == BENCH_W4A16 ? "w4a16" : op == BENCH_W4A4 ? "w4a4" : op == BENCH_QUANTIZE ? "quantize" : "?";
}

static const char *status_of(const bench_point *p) { return p->status ? p->status : "unsupported"; }

/* "%.*f" of a value or a dash. */
static const char *num(char *buf, size_t size, bench_value v, int prec) {
  if (!v.ok) snprintf(buf, size, "-");
  else snprintf(buf, size, "%.*f", prec, v.v);
  return buf;
}

static bench_value val(double v) { return (bench_value){1, v}; }
static const bench_value none = {0, 0};

/* ---------------------------------------------------------------------------------------------- */
/* Table                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* The once-per-run peers, one line each, ended by eol ("\n" or "<br>\n"). */
static void print_peers(FILE *f, const bench_run *r, const char *eol) {
  char a[32], b[32], c[32], d[32];
  if (r->copy_gbps.ok || r->bf16_peak_tflops.ok)
    fprintf(f, "same-run device peers: copy %s GB/s (read+write), read %s GB/s, cuBLAS BF16 %s TFLOP/s, cuBLASLt FP8 %s "
               "TFLOP/s (8192^3)%s",
            num(a, sizeof a, r->copy_gbps, 0), num(b, sizeof b, r->read_gbps, 0), num(c, sizeof c, r->bf16_peak_tflops, 0),
            num(d, sizeof d, r->fp8_peak_tflops, 0), eol);
  if (r->host_read_gbps.ok || r->host_fma_gflops.ok)
    fprintf(f, "same-run host peers: read %s GB/s, FP32 FMA peak %s GFLOP/s%s", num(a, sizeof a, r->host_read_gbps, 1),
            num(b, sizeof b, r->host_fma_gflops, 0), eol);
}

static void print_header(FILE *f, const bench_run *r) {
  fprintf(f, "fp4kit %s bench  %s  commit %s\n", fp4_version(), r->origin.date, r->origin.commit);
  if (r->dev.device >= 0)
    fprintf(f, "device %d: %s (SM%d%d, %d SMs, L2 %lld MiB), driver %d, CUDA runtime %d\n", r->dev.device, r->dev.name,
            r->dev.cc_major, r->dev.cc_minor, r->dev.processors, (long long)(r->dev.cache_bytes >> 20),
            r->dev.driver_version, r->dev.runtime_version);
  fprintf(f, "host: %s (%d threads, LLC %lld MiB)\n", r->host.name, r->host.processors,
          (long long)(r->host.cache_bytes >> 20));
  print_peers(f, r, "\n");
  if (r->peer_notes[0]) fprintf(f, "peers not measured: %s\n", r->peer_notes);
  fprintf(f, "median of %d timed calls (device) / %d (host) after %d warm-up calls\n\n", r->runs_device, r->runs_host,
          r->warmup);
}

void bench_print_table(FILE *f, const bench_run *r) {
  print_header(f, r);
  /* Runs with auto points show what auto ran and the tuning cache's verdict for the key. */
  int has_auto = 0;
  for (int i = 0; i < r->npoints; i++) has_auto |= r->points[i].ran[0] != 0;
  fprintf(f, "%-12s %-8s %-5s %5s %6s %6s ", "backend", "op", "fmt", "M", "N", "K");
  if (has_auto) fprintf(f, "%-28s %-5s ", "ran", "cache");
  fprintf(f, "%10s %8s %8s %6s %6s %9s %9s %9s %6s %9s %6s  %s\n", "median_us", "TFLOP/s", "wGB/s", "%bw", "%rd",
          "quant_us", "total_us", "bf16_us", "x_bf16", "fp8_us", "x_fp8", "note");
  for (int i = 0; i < r->npoints; i++) {
    const bench_point *p = &r->points[i];
    char t[10][32];
    int ok = !strcmp(status_of(p), "ok");
    fprintf(f, "%-12s %-8s %-5s %5lld %6lld %6lld ", p->backend, bench_op_name(p->op), fp4_format_name(p->format),
            (long long)p->m, (long long)p->n, (long long)p->k);
    if (has_auto) fprintf(f, "%-28s %-5s ", p->ran[0] ? p->ran : "-", p->cache[0] ? p->cache : "-");
    if (!ok) {
      fprintf(f, "%s: %s\n", status_of(p), p->reason);
      continue;
    }
    fprintf(f, "%10.2f %8s %8s %6s %6s %9s %9s %9s %6s %9s %6s  %s%s%s\n", p->t.median_us,
            num(t[0], 32, p->tflops, 3), num(t[1], 32, p->weight_gbps, 1),
            num(t[2], 32, (bench_value){p->frac_bw.ok, 100.0 * p->frac_bw.v}, 1),
            num(t[9], 32, (bench_value){p->frac_read_floor.ok, 100.0 * p->frac_read_floor.v}, 1),
            num(t[3], 32, p->quant_us, 2), num(t[4], 32, p->total_us, 2), num(t[5], 32, p->bf16_us, 2),
            num(t[6], 32, p->bf16_speedup, 2), num(t[7], 32, p->fp8_us, 2), num(t[8], 32, p->fp8_speedup, 2), p->shape,
            p->quant_reason[0] ? "; quantize: " : "", p->quant_reason);
    if (!strcmp(p->cache, "miss")) fprintf(f, "%*s^ the tuning cache's winner is %s\n", 12, "", p->cache_winner);
  }
  if (has_auto)
    fprintf(f, "\nran: backend:config auto ran (fp4_run_info). cache: hit = the tuning cache's winner for the key\n"
               "(op, format, activation/output dtype, M bucket, N, K); miss = the cache names another winner;\n"
               "none = no entry, auto used the heuristic.\n");
  fprintf(f, "\nwGB/s: FP4 weight + scale bytes / median time. %%bw: wGB/s / same-run %s. %%rd: the same-run\n"
             "time of a read-only kernel over the weight + scale bytes (one launch per sample, as ours) / ours: 100 = at\n"
             "that floor. quant_us: W4A4 activation quantize alone; total_us: quantize then GEMM. x_bf16, x_fp8: same-run\n"
             "cuBLAS time / ours (total_us for W4A4, also in %%rd). For quantize rows wGB/s counts input + output bytes.\n",
          r->dev.device >= 0 ? "copy bandwidth (read+write)" : "host read bandwidth");
}

/* ---------------------------------------------------------------------------------------------- */
/* JSON and CSV                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/* The fields of a record, in order, shared by JSON and CSV so the two never disagree. F_COUNT is a
 * count held in a double (FLOPs, bytes): written as an integer, or null when missing. */
typedef enum field_kind { F_STR, F_NUM, F_INT, F_COUNT } field_kind;
typedef struct field {
  const char *name;
  field_kind kind;
  const char *s;
  bench_value v;
  long long i;
} field;

enum { MAX_FIELDS = 80 };

static int record_fields(const bench_run *r, const bench_point *p, field *fs) {
  int n = 0;
  const int ok = !strcmp(status_of(p), "ok");
  const int device = p->memory == FP4_MEMORY_DEVICE && ok;
  static char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", device ? r->dev.cc_major : 0, device ? r->dev.cc_minor : 0);
#define S(nm, x) fs[n++] = (field){nm, F_STR, (x), {0, 0}, 0}
#define N(nm, x) fs[n++] = (field){nm, F_NUM, NULL, (x), 0}
#define I(nm, x) fs[n++] = (field){nm, F_INT, NULL, {0, 0}, (long long)(x)}
#define C(nm, x) fs[n++] = (field){nm, F_COUNT, NULL, (x), 0}
  S("backend", p->backend);
  S("op", bench_op_name(p->op));
  S("format", fp4_format_name(p->format));
  I("m", p->m);
  I("n", p->n);
  I("k", p->k);
  S("shape", p->shape);
  S("status", status_of(p));
  S("reason", p->reason);
  S("memory", ok ? fp4_memory_name(p->memory) : "");
  S("config", p->config);
  S("auto_ran", p->ran);
  S("cache", p->cache);
  S("cache_winner", p->cache_winner);
  I("pdl", p->pdl);
  N("median_us", ok ? val(p->t.median_us) : none);
  N("min_us", ok ? val(p->t.min_us) : none);
  N("max_us", ok ? val(p->t.max_us) : none);
  I("runs", ok ? p->t.runs : 0);
  I("warmup", r->warmup);
  I("sets", p->sets);
  C("flops", ok && p->flops > 0 ? val(p->flops) : none);
  N("tflops", p->tflops);
  C("weight_bytes", ok && p->weight_bytes > 0 ? val(p->weight_bytes) : none);
  C("act_bytes", ok ? val(p->act_bytes) : none);
  C("out_bytes", ok ? val(p->out_bytes) : none);
  N("weight_gbps", p->weight_gbps);
  N("intensity_flop_per_byte", p->intensity);
  N("frac_of_bw_peer", p->frac_bw);
  S("quantize_backend", p->quant_backend);
  N("quantize_us", p->quant_us);
  N("total_us", p->total_us);
  S("quantize_note", p->quant_reason);
  N("cublas_bf16_us", p->bf16_us);
  N("cublas_bf16_tflops", p->bf16_tflops);
  N("speedup_vs_cublas_bf16", p->bf16_speedup);
  N("cublaslt_fp8_us", p->fp8_us);
  N("cublaslt_fp8_tflops", p->fp8_tflops);
  N("speedup_vs_cublaslt_fp8", p->fp8_speedup);
  N("read_floor_us", p->read_floor_us);
  N("frac_of_read_floor", p->frac_read_floor);
  S("peer_note", p->peer_note);
  N("copy_gbps", r->copy_gbps);
  N("read_gbps", r->read_gbps);
  N("cublas_bf16_peak_tflops", r->bf16_peak_tflops);
  N("cublaslt_fp8_peak_tflops", r->fp8_peak_tflops);
  N("host_read_gbps", r->host_read_gbps);
  N("host_fma_gflops", r->host_fma_gflops);
  S("peers_not_measured", r->peer_notes);
  S("device", p->memory == FP4_MEMORY_DEVICE ? r->dev.name : r->host.name);
  I("device_index", p->memory == FP4_MEMORY_DEVICE ? r->dev.device : -1);
  S("compute_capability", cc);
  S("host", r->host.name);
  I("host_threads", r->host.processors);
  I("driver_version", r->dev.driver_version);
  I("cuda_runtime_version", r->dev.runtime_version ? r->dev.runtime_version : r->host.runtime_version);
  S("fp4kit_version", fp4_version());
  S("commit", r->origin.commit);
  S("date", r->origin.date);
  S("command", r->origin.command);
#undef S
#undef N
#undef I
#undef C
  return n;
}

/* An integer as JSON writes it: cJSON prints the doubles it holds without an exponent below 1e15
 * (exactly: every such integer is a double); larger ones go in as their digits. */
static cJSON *json_int(long long i) {
  if (i > -1000000000000000LL && i < 1000000000000000LL) return cJSON_CreateNumber((double)i);
  char digits[24];
  snprintf(digits, sizeof digits, "%lld", i);
  return cJSON_CreateRaw(digits);
}

/* One point's record; NULL when out of memory. */
static cJSON *record_json(const bench_run *r, const bench_point *p) {
  field fs[MAX_FIELDS];
  const int n = record_fields(r, p, fs);
  cJSON *o = cJSON_CreateObject();
  for (int j = 0; o && j < n; j++) {
    const field *x = &fs[j];
    cJSON *v = NULL;
    if (x->kind == F_STR) v = cJSON_CreateString(x->s ? x->s : "");
    else if (x->kind == F_INT) v = json_int(x->i);
    else if (!x->v.ok || !isfinite(x->v.v)) v = cJSON_CreateNull();
    else if (x->kind == F_COUNT) v = json_int(llround(x->v.v));
    else v = cJSON_CreateNumber(x->v.v);
    if (!v || !cJSON_AddItemToObject(o, x->name, v)) {
      cJSON_Delete(v);
      cJSON_Delete(o);
      o = NULL;
    }
  }
  return o;
}

static int out_of_memory(void) {
  fprintf(stderr, "fp4kit bench: out of memory writing the records\n");
  return -1;
}

/* One record per line, so the file reads (and greps) by point. */
int bench_write_json(FILE *f, const bench_run *r) {
  fputs("[\n", f);
  for (int i = 0; i < r->npoints; i++) {
    cJSON *o = record_json(r, &r->points[i]);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!text) return out_of_memory();
    fprintf(f, "  %s%s\n", text, i + 1 < r->npoints ? "," : "");
    cJSON_free(text);
  }
  fputs("]\n", f);
  return ferror(f) ? -1 : 0;
}

/* RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. */
static void csv_str(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* The JSON records as CSV: the keys as the header, numbers as JSON writes them, null empty. */
int bench_write_csv(FILE *f, const bench_run *r) {
  bench_point empty;
  memset(&empty, 0, sizeof empty);
  for (int i = -1; i < r->npoints; i++) {
    cJSON *o = record_json(r, i < 0 ? &empty : &r->points[i]), *v;
    if (!o) return out_of_memory();
    cJSON_ArrayForEach(v, o) {
      if (v != o->child) fputc(',', f);
      if (i < 0) {
        csv_str(f, v->string); /* the header */
      } else if (cJSON_IsString(v)) {
        csv_str(f, v->valuestring);
      } else if (!cJSON_IsNull(v)) {
        char *text = cJSON_PrintUnformatted(v);
        if (!text) {
          cJSON_Delete(o);
          return out_of_memory();
        }
        fputs(text, f);
        cJSON_free(text);
      }
    }
    fputc('\n', f);
    cJSON_Delete(o);
  }
  return ferror(f) ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* HTML: roofline chart (log-log: FLOP/byte vs TFLOP/s) and the table                             */
/* ---------------------------------------------------------------------------------------------- */

static void html_str(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

enum { W = 900, H = 560, ML = 70, MR = 30, MT = 30, MB = 50 };

typedef struct axes {
  double x0, x1, y0, y1; /* log10 ranges */
} axes;

static double px(const axes *a, double x) { return ML + (log10(x) - a->x0) / (a->x1 - a->x0) * (W - ML - MR); }
static double py(const axes *a, double y) { return H - MB - (log10(y) - a->y0) / (a->y1 - a->y0) * (H - MT - MB); }

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/* Colour per (backend, op), in order of first appearance. */
static int series_of(const bench_run *r, const bench_point *p) {
  int s = 0;
  for (int i = 0; i < r->npoints; i++) {
    const bench_point *q = &r->points[i];
    if (strcmp(status_of(q), "ok") || q->op == BENCH_QUANTIZE || !q->intensity.ok) continue;
    int seen = 0;
    for (int j = 0; j < i; j++) {
      const bench_point *o = &r->points[j];
      seen |= !strcmp(status_of(o), "ok") && o->op != BENCH_QUANTIZE && o->intensity.ok && o->op == q->op &&
              !strcmp(o->backend, q->backend);
    }
    if (q->op == p->op && !strcmp(q->backend, p->backend)) return s;
    if (!seen) s++;
  }
  return s;
}

/* Text boxes, to keep point labels off each other, the dots, the roof labels and the legend. A
 * character of the sans-serif font is at most 0.62 of the font size wide (digits 0.56); the box spans
 * 0.8 of the size above the baseline and 0.2 below. */
typedef struct box {
  double x0, y0, x1, y1;
} box;

static box text_box(double x, double y, char anchor, size_t chars, double font) {
  const double w = 0.62 * font * (double)chars;
  const double x0 = anchor == 's' ? x : anchor == 'e' ? x - w : x - w / 2;
  return (box){x0, y - 0.8 * font, x0 + w, y + 0.2 * font};
}

static int boxes_meet(const box *a, const box *b) { return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1; }

static const char *anchor_name(char anchor) { return anchor == 's' ? "start" : anchor == 'e' ? "end" : "middle"; }

enum { LABEL_FONT = 10, DOT_R = 4 };

/* Where a point's label goes: the first of these offsets from the dot (baseline, anchor) whose box
 * stays in the plot and meets no other box; none: the label is left out (the tooltip and the
 * table still carry the number). */
static int place_label(double x, double y, size_t chars, const box *taken, int ntaken, double *lx, double *ly, char *anchor) {
  static const struct {
    double dx, dy;
    char anchor;
  } at[] = {{6, -3, 's'}, {6, 11, 's'}, {-6, -3, 'e'}, {-6, 11, 'e'}, {0, -7, 'm'}, {0, 16, 'm'}};
  const box plot = {ML, MT, W - MR, H - MB};
  for (size_t c = 0; c < sizeof at / sizeof *at; c++) {
    const box b = text_box(x + at[c].dx, y + at[c].dy, at[c].anchor, chars, LABEL_FONT);
    int room = b.x0 >= plot.x0 && b.x1 <= plot.x1 && b.y0 >= plot.y0 && b.y1 <= plot.y1;
    for (int i = 0; room && i < ntaken; i++) room = !boxes_meet(&b, &taken[i]);
    if (room) {
      *lx = x + at[c].dx;
      *ly = y + at[c].dy;
      *anchor = at[c].anchor;
      return 1;
    }
  }
  return 0;
}

static box roof_line(FILE *f, const axes *a, double bw_tbs, double peak, const char *color, const char *dash,
                     const char *label) {
  /* Memory roof y = bw * x until it meets the ceiling at the ridge x = peak / bw. */
  double xl = pow(10, a->x0), xr = pow(10, a->x1), ridge = peak / bw_tbs;
  if (ridge < xl) ridge = xl;
  if (ridge > xr) ridge = xr;
  /* Start where the slope enters the plotted range so it keeps its 45-degree meaning. */
  double xs = fmin(fmax(xl, pow(10, a->y0) / bw_tbs), ridge);
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" %s points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n",
          color, dash, px(a, xs), py(a, fmin(bw_tbs * xs, peak)), px(a, ridge), py(a, fmin(bw_tbs * ridge, peak)),
          px(a, xr), py(a, fmin(bw_tbs * xr, peak)));
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"%s\" text-anchor=\"end\">%s</text>\n", px(a, xr) - 4,
          py(a, peak) - 6, color, label);
  return text_box(px(a, xr) - 4, py(a, peak) - 6, 'e', strlen(label), 12);
}

static int chart_point(const bench_point *p, fp4_memory mem) {
  return !strcmp(status_of(p), "ok") && p->memory == mem && p->intensity.ok && p->tflops.ok && p->tflops.v > 0;
}

static void chart(FILE *f, const bench_run *r, fp4_memory mem) {
  const int device = mem == FP4_MEMORY_DEVICE;
  bench_value bw = device ? r->copy_gbps : r->host_read_gbps;                               /* GB/s */
  bench_value peak = device ? r->bf16_peak_tflops : (bench_value){r->host_fma_gflops.ok, r->host_fma_gflops.v * 1e-3};
  double xmin = 1e30, xmax = 0, ymin = 1e30, ymax = 0;
  int count = 0;
  for (int i = 0; i < r->npoints; i++) {
    const bench_point *p = &r->points[i];
    if (!chart_point(p, mem)) continue;
    xmin = fmin(xmin, p->intensity.v);
    xmax = fmax(xmax, p->intensity.v);
    ymin = fmin(ymin, p->tflops.v);
    ymax = fmax(ymax, p->tflops.v);
    count++;
  }
  if (!count) return;
  if (peak.ok) ymax = fmax(ymax, peak.v);
  if (bw.ok && peak.ok) xmax = fmax(xmax, peak.v / (bw.v * 1e-3));
  axes a = {floor(log10(xmin)) - 0.0, ceil(log10(xmax)) + 0.0, floor(log10(ymin)), ceil(log10(ymax * 1.5))};
  if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
  if (a.y1 <= a.y0) a.y1 = a.y0 + 1;
  fprintf(f, "<h2>Roofline: %s</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n",
          device ? "device" : "host", W, H, W, H);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#999\"/>\n", ML, MT, W - ML - MR,
          H - MT - MB);
  for (int d = (int)a.x0; d <= (int)a.x1; d++) {
    double x = px(&a, pow(10, d));
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>", x, MT, x, H - MB);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">%g</text>\n", x, H - MB + 16, pow(10, d));
  }
  for (int d = (int)a.y0; d <= (int)a.y1; d++) {
    double y = py(&a, pow(10, d));
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>", ML, y, W - MR, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4, pow(10, d));
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\">arithmetic intensity (FLOP per byte of "
             "weights + scales + activations + output)</text>\n",
          (W + ML - MR) / 2, H - 12);
  fprintf(f, "<text x=\"16\" y=\"%d\" font-size=\"13\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">TFLOP/s</text>\n",
          (H + MT - MB) / 2, (H + MT - MB) / 2);
  /* Boxes labels must not meet: every dot, the roof labels, the legend, then each label placed. */
  box *taken = malloc((size_t)(2 * count + 2 + 64) * sizeof *taken);
  int ntaken = 0;
  char label[160];
  const int solid = bw.ok && peak.ok, dashed = device && bw.ok && r->fp8_peak_tflops.ok;
  if (solid) {
    snprintf(label, sizeof label, "%s %.0f GB/s, %s %.3g TFLOP/s", device ? "copy" : "host read", bw.v,
             device ? "cuBLAS BF16" : "FP32 FMA peak", peak.v);
    box b = roof_line(f, &a, bw.v * 1e-3, peak.v, "#333", "", label);
    if (taken) taken[ntaken++] = b;
  }
  if (dashed) {
    snprintf(label, sizeof label, "cuBLASLt FP8 %.0f TFLOP/s", r->fp8_peak_tflops.v);
    box b = roof_line(f, &a, bw.v * 1e-3, r->fp8_peak_tflops.v, "#888", "stroke-dasharray=\"6 4\"", label);
    if (taken) taken[ntaken++] = b;
  }
  for (int i = 0; taken && i < r->npoints; i++) {
    const bench_point *p = &r->points[i];
    if (!chart_point(p, mem)) continue;
    const double x = px(&a, p->intensity.v), y = py(&a, p->tflops.v);
    taken[ntaken++] = (box){x - DOT_R, y - DOT_R, x + DOT_R, y + DOT_R};
  }
  /* Legend: one entry per (backend, op), drawn after the points, on top. */
  int legend[64], nlegend = 0, shown = -1;
  for (int i = 0; i < r->npoints && nlegend < 64; i++) {
    const bench_point *p = &r->points[i];
    if (strcmp(status_of(p), "ok") || p->memory != mem || !p->intensity.ok) continue;
    int s = series_of(r, p);
    if (s <= shown) continue;
    shown = s;
    legend[nlegend] = i;
    const double ly = MT + 16 + 16 * nlegend++;
    char entry[80];
    snprintf(entry, sizeof entry, "%s %s", p->backend, bench_op_name(p->op));
    if (taken) {
      box b = text_box(ML + 24, ly, 's', strlen(entry), 12);
      b.x0 = ML + 14 - DOT_R;
      taken[ntaken++] = b;
    }
  }
  char tf[32], gb[32];
  for (int i = 0; i < r->npoints; i++) {
    const bench_point *p = &r->points[i];
    if (!chart_point(p, mem)) continue;
    const char *color = palette[series_of(r, p) % (int)(sizeof palette / sizeof *palette)];
    double x = px(&a, p->intensity.v), y = py(&a, p->tflops.v);
    /* The tooltip's numbers are the table's, at the table's precision. */
    fprintf(f, "<g><title>#%d %s %s %s M=%lld N=%lld K=%lld: %.2f us, %s TFLOP/s, %s GB/s of weights</title>", i + 1,
            p->backend, bench_op_name(p->op), fp4_format_name(p->format), (long long)p->m, (long long)p->n,
            (long long)p->k, p->t.median_us, num(tf, sizeof tf, p->tflops, 3), num(gb, sizeof gb, p->weight_gbps, 1));
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%d\" fill=\"%s\"/>", x, y, DOT_R, color);
    char number[16];
    double lx = 0, ly = 0;
    char anchor = 's';
    snprintf(number, sizeof number, "%d", i + 1);
    if (taken && place_label(x, y, strlen(number), taken, ntaken, &lx, &ly, &anchor)) {
      taken[ntaken++] = text_box(lx, ly, anchor, strlen(number), LABEL_FONT);
      fprintf(f, "<text class=\"pl\" x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\" fill=\"%s\">%s</text>", lx,
              ly, LABEL_FONT, anchor_name(anchor), color, number);
    }
    fputs("</g>\n", f);
  }
  free(taken);
  for (int e = 0; e < nlegend; e++) {
    const bench_point *p = &r->points[legend[e]];
    const char *color = palette[series_of(r, p) % (int)(sizeof palette / sizeof *palette)];
    const int ly = MT + 16 + 16 * e;
    fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"%d\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">%s %s</text>\n",
            ML + 14, ly - 4, DOT_R, color, ML + 24, ly, p->backend, bench_op_name(p->op));
  }
  /* The note describes the lines drawn, and only those. */
  fputs("</svg>\n<p class=\"note\">Each point is labelled with its row number in the table where the label has room "
        "(hover a point for its details; every point is in the table).",
        f);
  const char *bandwidth = device ? "copy bandwidth" : "host read bandwidth";
  if (solid)
    fprintf(f, " The solid line is the same-run %s rising to the same-run %s ceiling%s", bandwidth,
            device ? "cuBLAS BF16" : "FP32 FMA", dashed ? "; the dashed one rises to the same-run cuBLASLt FP8 ceiling." : ".");
  else if (dashed)
    fprintf(f, " The dashed line is the same-run %s rising to the same-run cuBLASLt FP8 ceiling.", bandwidth);
  else
    fputs(" No roof is drawn: the same-run bandwidth and compute peers were not both measured.", f);
  fputs("</p>\n", f);
}

int bench_write_html(FILE *f, const bench_run *r) {
  fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>fp4kit bench</title>\n"
        "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l,th.l{text-align:left}"
        "tr.bad td{color:#a00}.note{color:#555;font-size:13px}</style>\n</head>\n<body>\n<h1>fp4kit bench</h1>\n<p>",
        f);
  fprintf(f, "fp4kit %s, commit ", fp4_version());
  html_str(f, r->origin.commit);
  fprintf(f, ", %s<br>\n", r->origin.date);
  if (r->dev.device >= 0) {
    fputs("device: ", f);
    html_str(f, r->dev.name);
    fprintf(f, " (SM%d%d, %d SMs, L2 %lld MiB), driver %d, CUDA runtime %d<br>\n", r->dev.cc_major, r->dev.cc_minor,
            r->dev.processors, (long long)(r->dev.cache_bytes >> 20), r->dev.driver_version, r->dev.runtime_version);
  }
  fputs("host: ", f);
  html_str(f, r->host.name);
  fprintf(f, " (%d threads)<br>\ncommand: <code>", r->host.processors);
  html_str(f, r->origin.command);
  fputs("</code><br>\n", f);
  print_peers(f, r, "<br>\n");
  if (r->peer_notes[0]) {
    fputs("peers not measured: ", f);
    html_str(f, r->peer_notes);
  }
  fputs("</p>\n", f);
  chart(f, r, FP4_MEMORY_DEVICE);
  chart(f, r, FP4_MEMORY_HOST);
  fputs("<h2>Points</h2>\n<table>\n<tr><th>#</th><th class=\"l\">backend</th><th class=\"l\">op</th><th class=\"l\">fmt"
        "</th><th>M</th><th>N</th><th>K</th><th>median us</th><th>TFLOP/s</th><th>weight GB/s</th><th>% of bw peer</th>"
        "<th>% of read floor</th>"
        "<th>quantize us</th><th>total us</th><th>cuBLAS BF16 us</th><th>x BF16</th><th>cuBLASLt FP8 us</th><th>x FP8</th>"
        "<th class=\"l\">shape / note</th></tr>\n",
        f);
  for (int i = 0; i < r->npoints; i++) {
    const bench_point *p = &r->points[i];
    int ok = !strcmp(status_of(p), "ok");
    char t[10][32];
    fprintf(f, "<tr%s><td>%d</td><td class=\"l\">", ok ? "" : " class=\"bad\"", i + 1);
    html_str(f, p->backend);
    fprintf(f, "</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%lld</td><td>%lld</td><td>%lld</td>",
            bench_op_name(p->op), fp4_format_name(p->format), (long long)p->m, (long long)p->n, (long long)p->k);
    if (ok)
      fprintf(f, "<td>%.2f</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                 "<td>%s</td><td>%s</td><td class=\"l\">",
              p->t.median_us, num(t[0], 32, p->tflops, 3), num(t[1], 32, p->weight_gbps, 1),
              num(t[2], 32, (bench_value){p->frac_bw.ok, 100.0 * p->frac_bw.v}, 1),
              num(t[9], 32, (bench_value){p->frac_read_floor.ok, 100.0 * p->frac_read_floor.v}, 1),
              num(t[3], 32, p->quant_us, 2),
              num(t[4], 32, p->total_us, 2), num(t[5], 32, p->bf16_us, 2), num(t[6], 32, p->bf16_speedup, 2),
              num(t[7], 32, p->fp8_us, 2), num(t[8], 32, p->fp8_speedup, 2));
    else
      fprintf(f, "<td colspan=\"11\" class=\"l\">%s: ", status_of(p));
    html_str(f, ok ? p->shape : p->reason);
    if (ok && p->quant_reason[0]) {
      fputs("; quantize: ", f);
      html_str(f, p->quant_reason);
    }
    if (ok && p->peer_note[0]) {
      fputs("; peers: ", f);
      html_str(f, p->peer_note);
    }
    fputs("</td></tr>\n", f);
  }
  fputs("</table>\n<p class=\"note\">weight GB/s: FP4 weight + scale bytes / median time (quantize rows: input + output "
        "bytes). % of bw peer: against the same-run copy bandwidth (device, read + write bytes) or host read bandwidth. "
        "x BF16 / x FP8: same-run cuBLAS time on the same shape divided by ours (quantize + GEMM for W4A4).</p>\n"
        "</body>\n</html>\n",
        f);
  return ferror(f) ? -1 : 0;
}
