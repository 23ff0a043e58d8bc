#define _GNU_SOURCE
/* The writers of `fp4kit bench`'s reports (tools/bench_report.c, compiled into this test) on made-up
 * runs: JSON through cJSON (integers written as integers at any size, strings escaped, missing
 * numbers null), CSV with the JSON's numbers and RFC 4180 quoting, and the HTML page: point labels
 * that never overlap each other, a dot, a roof label or the legend, even with every point at one
 * place; tooltips at the table's precision; a note that describes only the roof lines drawn. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../tools/bench_report.c"
#include "testing.h"

typedef int (*writer)(FILE *, const bench_run *);

/* What a writer writes, NUL-terminated (caller frees). */
static char *written(writer w, const bench_run *r) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) return NULL;
  int rc = w(f, r);
  fclose(f);
  CHECK(rc == 0, "a writer failed");
  return text;
}

static void point(bench_point *p, const char *backend, bench_op op, fp4_memory mem, int64_t m, int64_t n, int64_t k,
                  double us) {
  memset(p, 0, sizeof *p);
  snprintf(p->backend, sizeof p->backend, "%s", backend);
  snprintf(p->shape, sizeof p->shape, "%lldx%lld", (long long)n, (long long)k);
  p->op = op;
  p->format = FP4_FORMAT_NVFP4;
  p->memory = mem;
  p->m = m;
  p->n = n;
  p->k = k;
  p->status = "ok";
  p->t = (fp4_timing){us, us * 0.9, us * 1.2, 100};
  p->flops = 2.0 * (double)m * (double)n * (double)k;
  p->weight_bytes = (double)(n * k) / 2 + (double)(n * k) / 16;
  p->act_bytes = (double)(m * k) * 2;
  p->out_bytes = (double)(m * n) * 2;
  p->tflops = (bench_value){1, p->flops / (us * 1e-6) * 1e-12};
  p->weight_gbps = (bench_value){1, p->weight_bytes / (us * 1e-6) * 1e-9};
  p->intensity = (bench_value){1, p->flops / (p->weight_bytes + p->act_bytes + p->out_bytes)};
}

static void host_run(bench_run *r, bench_point *pts, int n) {
  memset(r, 0, sizeof *r);
  r->dev.device = -1;
  r->host.device = -1;
  snprintf(r->host.name, sizeof r->host.name, "test cpu");
  snprintf(r->origin.commit, sizeof r->origin.commit, "0123abc");
  snprintf(r->origin.date, sizeof r->origin.date, "2025-01-01T00:00:00Z");
  snprintf(r->origin.command, sizeof r->origin.command, "fp4kit bench --test");
  r->host_read_gbps = (bench_value){1, 20.0};
  r->host_fma_gflops = (bench_value){1, 500.0};
  r->points = pts;
  r->npoints = n;
}

static void json_and_csv(void) {
  bench_point pts[3];
  point(&pts[0], "cpu", BENCH_W4A16, FP4_MEMORY_HOST, 1, 4096, 4096, 1234.5678);
  point(&pts[1], "cpu", BENCH_W4A4, FP4_MEMORY_HOST, 16384, 262144, 262144, 5e7); /* flops 2.25e15 */
  point(&pts[2], "ref", BENCH_W4A16, FP4_MEMORY_HOST, 3, 128, 256, 1.0);
  pts[2].status = "error";
  snprintf(pts[2].reason, sizeof pts[2].reason, "said \"no\", then\nstopped\t\\ \x01 caf\xc3\xa9");
  bench_run r;
  host_run(&r, pts, 3);
  char *json = written(bench_write_json, &r);
  cJSON *arr = json ? cJSON_Parse(json) : NULL;
  CHECK(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 3, "the JSON is an array of 3 records:\n%s", json ? json : "");
  /* Integers as integers: 2*4096*4096 = 33554432 FLOPs, 4096*4096*(1/2 + 1/16) = 9437184 bytes. */
  CHECK(json && strstr(json, "\"flops\":33554432,") && strstr(json, "\"weight_bytes\":9437184,"),
        "counts are written as integers (no 3.35544e+07)");
  CHECK(json && strstr(json, "\"flops\":2251799813685248,"), "a count past 1e15 is written with all its digits");
  CHECK(json && strstr(json, "\"m\":16384,") && strstr(json, "\"runs\":100,"), "integer fields");
  CHECK(json && !strstr(json, "e+"), "no number has an exponent");
  const cJSON *rec = cJSON_GetArrayItem(arr, 2);
  const cJSON *reason = cJSON_GetObjectItemCaseSensitive(rec, "reason");
  CHECK(cJSON_IsString(reason) && !strcmp(reason->valuestring, pts[2].reason), "the reason survives escaping and parsing");
  CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rec, "median_us")) && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rec, "flops")),
        "a failed point has null numbers");
  const cJSON *med = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "median_us");
  CHECK(cJSON_IsNumber(med) && med->valuedouble == 1234.5678, "doubles keep their value (%.17g)", cJSON_GetNumberValue(med));
  CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rec, "copy_gbps")), "a peer not measured is null");

  char *csv = written(bench_write_csv, &r);
  /* Fields of each CSV record, quotes honoured (a quoted field may hold line breaks). */
  int records = 0, fields = 0, header = 0, quoted = 0;
  for (const char *p = csv; p && *p; p++) {
    if (*p == '"') quoted = !quoted;
    else if (*p == ',' && !quoted) fields++;
    else if (*p == '\n' && !quoted) {
      if (!records) header = fields + 1;
      CHECK(fields + 1 == header, "CSV record %d has %d fields, the header %d", records, fields + 1, header);
      records++;
      fields = 0;
    }
  }
  CHECK(records == 4 && header == cJSON_GetArraySize(cJSON_GetArrayItem(arr, 0)), "CSV: header + 3 rows of the JSON's %d keys",
        header);
  CHECK(csv && strstr(csv, ",33554432,") && strstr(csv, ",9437184,") && strstr(csv, ",2251799813685248,") &&
            strstr(csv, ",1234.5678,") && strstr(csv, "\"said \"\"no\"\", then\nstopped"),
        "CSV numbers as the JSON writes them, quotes doubled:\n%s", csv ? csv : "");
  free(csv);
  cJSON_Delete(arr);
  free(json);
}

/* A text box measured here, not by the writer: a sans-serif character is at most 0.62 of the font size
 * wide; the box spans 0.8 of the size above the baseline and 0.2 below. */
typedef struct rect {
  double x0, y0, x1, y1;
} rect;

static rect measure(double x, double y, const char *anchor, size_t chars, double font) {
  const double w = 0.62 * font * (double)chars;
  const double x0 = !strcmp(anchor, "start") ? x : !strcmp(anchor, "end") ? x - w : x - w / 2;
  return (rect){x0, y - 0.8 * font, x0 + w, y + 0.2 * font};
}

static int meet(const rect *a, const rect *b) { return a->x0 < b->x1 && b->x0 < a->x1 && a->y0 < b->y1 && b->y0 < a->y1; }

/* Every point label of one chart and its box. */
typedef struct label {
  rect b;
  int number;
} label;

static int labels_of(const char *svg, const char *end, label *out, int max) {
  int n = 0;
  for (const char *p = svg; (p = strstr(p, "<text class=\"pl\"")) && p < end && n < max; p++) {
    double x = 0, y = 0;
    char anchor[8] = "";
    int number = 0;
    if (sscanf(p, "<text class=\"pl\" x=\"%lf\" y=\"%lf\" font-size=\"10\" text-anchor=\"%7[a-z]\"", &x, &y, anchor) != 3) {
      CHECK(0, "a label is not in the expected form: %.80s", p);
      continue;
    }
    const char *gt = strchr(p, '>');
    number = gt ? atoi(gt + 1) : 0;
    char digits[16];
    snprintf(digits, sizeof digits, "%d", number);
    out[n].b = measure(x, y, anchor, strlen(digits), 10);
    out[n++].number = number;
  }
  return n;
}

static void html_labels(void) {
  enum { N = 60 };
  static bench_point pts[N];
  /* 40 points on one spot (the same shape and time on two backends and ops), 20 spread out. */
  for (int i = 0; i < N; i++) {
    if (i < 40) point(&pts[i], i % 2 ? "cpu" : "ref", i % 4 < 2 ? BENCH_W4A16 : BENCH_W4A4, FP4_MEMORY_HOST, 8, 4096, 4096, 500.0);
    else point(&pts[i], "cpu", BENCH_W4A16, FP4_MEMORY_HOST, 1 << (i - 40) % 12, 1024 * (1 + i % 5), 4096, 50.0 + 7 * i);
    if (i < 40) { /* identical coordinates whatever the op: the same intensity and rate */
      pts[i].intensity = (bench_value){1, 10.0};
      pts[i].tflops = (bench_value){1, 0.05};
    }
  }
  pts[3].weight_gbps = (bench_value){1, 0.3};
  bench_run r;
  host_run(&r, pts, N);
  char *html = written(bench_write_html, &r);
  const char *svg = html ? strstr(html, "<svg") : NULL, *end = svg ? strstr(svg, "</svg>") : NULL;
  CHECK(svg && end, "the page has a chart");
  if (!svg || !end) {
    free(html);
    return;
  }
  label labels[N];
  int n = labels_of(svg, end, labels, N);
  CHECK(n >= 10 && n < N, "some points are labelled, the crowded ones not all (%d of %d)", n, N);
  int titles = 0;
  for (const char *p = svg; (p = strstr(p, "<title>#")) && p < end; p++) titles++;
  CHECK(titles == N, "every point has its tooltip (%d)", titles);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      CHECK(!meet(&labels[i].b, &labels[j].b), "labels %d and %d overlap", labels[i].number, labels[j].number);
  /* Labels stay off every dot and inside the plot. */
  for (const char *p = svg; (p = strstr(p, "<circle cx=\"")) && p < end; p++) {
    double x = 0, y = 0;
    if (sscanf(p, "<circle cx=\"%lf\" cy=\"%lf\"", &x, &y) != 2) continue;
    const rect dot = {x - 4, y - 4, x + 4, y + 4};
    for (int i = 0; i < n; i++) CHECK(!meet(&labels[i].b, &dot), "label %d covers the dot at %.1f,%.1f", labels[i].number, x, y);
  }
  for (int i = 0; i < n; i++)
    CHECK(labels[i].b.x0 >= ML && labels[i].b.x1 <= W - MR && labels[i].b.y0 >= MT && labels[i].b.y1 <= H - MB,
          "label %d is inside the plot", labels[i].number);
  /* The tooltip of point 4 says 0.3 GB/s, as its table row. */
  const char *t4 = strstr(svg, "<title>#4 ");
  CHECK(t4 && strstr(t4, "0.3 GB/s of weights</title>") && strstr(t4, "0.3 GB/s of weights</title>") < strstr(t4, "</g>"),
        "tooltip 4 has the table's precision: %.120s", t4 ? t4 : "");
  CHECK(strstr(html, "<td>0.3</td>") != NULL, "the table says 0.3 for point 4");
  free(html);
}

/* The note under the chart (caller frees); NULL without a chart. */
static char *chart_note(const bench_run *r) {
  char *html = written(bench_write_html, r), *note = NULL;
  const char *p = html ? strstr(html, "</svg>\n<p class=\"note\">") : NULL, *e = p ? strstr(p, "</p>") : NULL;
  if (e) {
    note = strndup(p, (size_t)(e - p));
    CHECK(!strstr(e, "<svg"), "one chart");
  }
  free(html);
  return note;
}

static void html_note(void) {
  bench_point pts[2];
  point(&pts[0], "cpu", BENCH_W4A16, FP4_MEMORY_HOST, 4, 1024, 1024, 30.0);
  point(&pts[1], "cuda", BENCH_W4A16, FP4_MEMORY_DEVICE, 4, 1024, 1024, 3.0);
  bench_run r;
  host_run(&r, pts, 1);
  char *note = chart_note(&r);
  CHECK(note && !strstr(note, "FP8") && !strstr(note, "dashed") && strstr(note, "The solid line is the same-run host read"),
        "a host chart's note names the solid roof only: %s", note ? note : "");
  free(note);
  /* A device chart with the copy and BF16 peers but no FP8 peer: no dashed line, no word of one. */
  host_run(&r, pts + 1, 1);
  r.dev.device = 0;
  snprintf(r.dev.name, sizeof r.dev.name, "test gpu");
  r.copy_gbps = (bench_value){1, 4000.0};
  r.bf16_peak_tflops = (bench_value){1, 700.0};
  char *html = written(bench_write_html, &r);
  note = chart_note(&r);
  CHECK(html && !strstr(html, "stroke-dasharray") && note && !strstr(note, "dashed") && !strstr(note, "FP8") &&
            strstr(note, "cuBLAS BF16 ceiling."),
        "without the FP8 peer no dashed line is drawn or described: %s", note ? note : "");
  free(html);
  free(note);
  r.fp8_peak_tflops = (bench_value){1, 1400.0};
  html = written(bench_write_html, &r);
  note = chart_note(&r);
  CHECK(html && strstr(html, "stroke-dasharray") && note && strstr(note, "the dashed one rises to the same-run cuBLASLt FP8 ceiling"),
        "with the FP8 peer the dashed roof is drawn and described: %s", note ? note : "");
  free(html);
  free(note);
  /* No peers: no roof, and the note says so. */
  host_run(&r, pts, 1);
  r.host_read_gbps = (bench_value){0, 0};
  html = written(bench_write_html, &r);
  note = chart_note(&r);
  CHECK(html && !strstr(html, "<polyline") && note && !strstr(note, "solid") && strstr(note, "No roof is drawn"),
        "without peers no roof is drawn or described: %s", note ? note : "");
  free(html);
  free(note);
}

int main(void) {
  json_and_csv();
  html_labels();
  html_note();
  return TEST_SUMMARY();
}
