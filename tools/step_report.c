/* The decode step's record: helpers of its derived numbers, and its table, JSON, CSV and HTML
 * forms (step_report.h). */
#include "step_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static double scale_to_model(const step_report *r) {
  return r->layers_built > 0 ? (double)r->plan.layers / (double)r->layers_built : 0.0;
}
static bv div_bv(double num, bv den) { return den.ok && den.v > 0 ? (bv){1, num / den.v} : (bv){0, 0}; }
/* --sweep: config k's time over the default's for a type (JSON and text). */
static bv sweep_over_default(const type_result *y, int k) {
  return y->sweep_us[k].ok ? div_bv(y->sweep_us[k].v, y->us) : (bv){0, 0};
}
static bv frac_read(const step_report *r, const step_point *p) {
  return r->read_bps.ok && p->pdl_us.ok ? (bv){1, p->bytes / r->read_bps.v * 1e6 / p->pdl_us.v} : (bv){0, 0};
}
static bv over_copy(const step_report *r, const step_point *p) {
  return r->copy_bps.ok && p->pdl_us.ok && p->bytes > 0 ? (bv){1, p->pdl_us.v / (p->bytes / r->copy_bps.v * 1e6)}
                                                        : (bv){0, 0};
}
/* The read-only chain's fraction of the read ceiling, and its time over the copy floor (the MoE
 * target's measure, applied to the chain). */
static bv chain_frac_read(const step_report *r, const step_point *p) {
  return r->read_bps.ok && p->reads_us.ok ? (bv){1, p->bytes / r->read_bps.v * 1e6 / p->reads_us.v} : (bv){0, 0};
}
static bv chain_over_copy(const step_report *r, const step_point *p) {
  return r->copy_bps.ok && p->reads_us.ok && p->bytes > 0 ? (bv){1, p->reads_us.v / (p->bytes / r->copy_bps.v * 1e6)}
                                                          : (bv){0, 0};
}
static bv pdl_gain(const step_point *p) {
  return p->graph_us.ok ? div_bv(p->graph_us.v, p->pdl_us) : (bv){0, 0};
}
/* Tokens one step serves: the batch, or with --moe-comm all-to-all every rank's batch. */
static double step_tokens(const step_report *r, const step_point *p) {
  return (double)p->batch * (r->o->a2a ? (double)r->gpus : 1.0);
}
static bv tokens_bound(const step_report *r, const step_point *p) {
  return p->pdl_us.ok ? (bv){1, step_tokens(r, p) * 1e6 / (p->pdl_us.v * scale_to_model(r))} : (bv){0, 0};
}
static bv bf16_speedup(const step_point *p) { return p->bf16_us.ok ? div_bv(p->bf16_us.v, p->pdl_us) : (bv){0, 0}; }
static bv read_floor_us(const step_report *r, double bytes) {
  return r->read_bps.ok ? (bv){1, bytes / r->read_bps.v * 1e6} : (bv){0, 0};
}
/* A layer type's read floor over its time: its fraction of the read ceiling. */
static bv type_frac_read(const step_report *r, const type_result *y) {
  const bv fl = read_floor_us(r, y->bytes);
  return fl.ok && y->us.ok && y->us.v > 0 ? (bv){1, fl.v / y->us.v} : (bv){0, 0};
}
/* --gpus: the step's read floor plus its collectives alone, and the step's time over that. */
static bv floor_plus_alone(const step_report *r, const step_point *p) {
  const bv fl = read_floor_us(r, p->bytes);
  return fl.ok && p->coll_us.ok ? (bv){1, fl.v + p->coll_us.v} : (bv){0, 0};
}
static bv over_floor_plus_alone(const step_report *r, const step_point *p) {
  const bv base = floor_plus_alone(r, p);
  return base.ok && p->pdl_us.ok && base.v > 0 ? (bv){1, p->pdl_us.v / base.v} : (bv){0, 0};
}
static bv gbps(bv bps) { return (bv){bps.ok, bps.v / 1e9}; }

/* Whether a value was measured: a number in every form, else JSON null, an empty CSV cell, and in
 * the table and the HTML words that say so, never a 0 that reads as a measurement. */
static int measured(bv v) { return v.ok && isfinite(v.v); }
typedef struct shown {
  char s[64];
} shown;
/* A value as fmt writes it, or `missing` where it was not measured. */
static shown show(bv v, const char *fmt, const char *missing) {
  shown o;
  if (measured(v)) snprintf(o.s, sizeof o.s, fmt, v.v);
  else snprintf(o.s, sizeof o.s, "%s", missing);
  return o;
}
/* The table's cell and the prose's phrase of a value not measured. */
static shown cell(bv v, const char *fmt) { return show(v, fmt, "-"); }
static shown prose(bv v, const char *fmt) { return show(v, fmt, "not measured"); }

static void jnum(cJSON *o, const char *key, bv v) {
  if (measured(v)) cJSON_AddNumberToObject(o, key, v.v);
  else cJSON_AddNullToObject(o, key);
}

static cJSON *record_json(const step_report *r) {
  const step_plan *p = &r->plan;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "step");
  cJSON_AddStringToObject(root, "model", p->model);
  cJSON_AddNumberToObject(root, "tp", p->tp);
  cJSON_AddNumberToObject(root, "ep", p->ep);
  cJSON_AddStringToObject(root, "mode", r->o->w4a4 ? "w4a4" : "w4a16");
  if (r->gpus) {
    cJSON_AddNumberToObject(root, "gpus", r->gpus);
    cJSON_AddNumberToObject(root, "nccl_version", r->nccl_version);
    cJSON_AddStringToObject(root, "moe_comm", r->o->a2a ? "all-to-all" : "all-reduce");
    cJSON_AddStringToObject(root, "collectives",
                            r->o->a2a ? "per MoE layer two NCCL all-to-alls of bf16 rows (grouped sends and receives): "
                                        "each token's row to the rank of every expert it picked, and the experts' "
                                        "weighted outputs back; dense layers run on the rank's own tokens without one; "
                                        "in the step's stream and graph; times are the slowest rank's, bytes the "
                                        "largest rank's; the read and copy peers the slowest GPU's"
                                      : "an in-place bf16 sum all-reduce (NCCL) after every call whose output each rank "
                                        "holds a partial sum of (row-parallel linears under tp > 1, the MoE layer with "
                                        "its experts split), in the step's "
                                        "stream and graph; times are the slowest rank's; the read and copy peers the "
                                        "slowest GPU's");
  }
  cJSON_AddNumberToObject(root, "layers_model", (double)p->layers);
  cJSON_AddNumberToObject(root, "layers_built", (double)r->layers_built);
  cJSON_AddStringToObject(root, "layers_note", r->layers_note);
  cJSON_AddNumberToObject(root, "rounds", r->o->rounds);
  cJSON_AddNumberToObject(root, "seed", (double)r->o->seed);
  cJSON_AddStringToObject(root, "routing",
                          r->o->a2a ? "every rank holds batch tokens of its own; each token picks top_k distinct experts "
                                      "of the whole model uniformly, seeded per layer; weights positive, summing to 1"
                                    : "each token picks ceil(top_k / ep) distinct experts of the rank uniformly, "
                                      "seeded per layer; weights positive, summing to 1");
  cJSON_AddStringToObject(root, "bytes", "FP4 codes + E4M3 block scales (128x4) of every layer built; MoE: the shared "
                                         "expert and the distinct routed experts the routing touches");
  cJSON *dev = cJSON_AddObjectToObject(root, "device");
  cJSON_AddStringToObject(dev, "name", r->dev.name);
  cJSON_AddNumberToObject(dev, "cc", r->dev.cc_major * 10 + r->dev.cc_minor);
  cJSON_AddNumberToObject(dev, "sms", r->dev.processors);
  cJSON_AddNumberToObject(dev, "l2_bytes", (double)r->dev.cache_bytes);
  cJSON_AddNumberToObject(dev, "memory_bytes", (double)r->dev.memory_bytes);
  cJSON_AddNumberToObject(dev, "driver", r->dev.driver_version);
  cJSON_AddNumberToObject(dev, "runtime", r->dev.runtime_version);
  cJSON_AddStringToObject(root, "commit", r->origin.commit);
  cJSON_AddStringToObject(root, "date", r->origin.date);
  cJSON_AddStringToObject(root, "command", r->origin.command);
  cJSON *peers = cJSON_AddObjectToObject(root, "peers");
  jnum(peers, "read_gbps", gbps(r->read_bps));
  jnum(peers, "copy_gbps", gbps(r->copy_bps));
  cJSON_AddStringToObject(peers, "note", r->peer_note);
  cJSON_AddStringToObject(peers, "definitions",
                          "read_gbps: fp4_time_peer READ over 1 GiB; frac_read_ceiling = (fp4_bytes / read_gbps) / "
                          "graph_pdl_us; copy_gbps counts bytes read + written (fp4_time_peer COPY over 1 GiB); "
                          "time_over_copy_floor = graph_pdl_us / (fp4_bytes / copy_gbps), as fp4kit bench --moe; "
                          "pdl_gain = graph_us / graph_pdl_us; tokens_per_s_bound = tokens_per_step / graph_pdl_us "
                          "scaled from layers_built to layers_model (tokens_per_step: batch, or with moe_comm "
                          "all-to-all batch on every rank)");
  cJSON *types = cJSON_AddArrayToObject(root, "layer_types");
  for (int i = 0; i < p->ntypes; i++) {
    const step_type *t = &p->types[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "kind", t->kind == STEP_MOE ? "moe" : "dense");
    cJSON_AddNumberToObject(o, "n", (double)t->n);
    cJSON_AddNumberToObject(o, "k", (double)t->k);
    if (t->kind == STEP_MOE) {
      cJSON_AddNumberToObject(o, "experts", (double)t->experts);
      cJSON_AddNumberToObject(o, "top_k_rank", (double)t->top_k);
      cJSON_AddNumberToObject(o, "top_k_model", (double)t->active);
      cJSON_AddNumberToObject(o, "hidden", (double)t->hidden);
      cJSON_AddNumberToObject(o, "inter", (double)t->inter);
      cJSON_AddNumberToObject(o, "shared_inter", (double)t->shared_inter);
      cJSON_AddNumberToObject(o, "expert_bytes", (double)t->weight_bytes);
      cJSON_AddNumberToObject(o, "shared_bytes", (double)t->shared_bytes);
    } else {
      cJSON_AddNumberToObject(o, "weight_bytes", (double)t->weight_bytes);
    }
    cJSON_AddItemToArray(types, o);
  }
  cJSON *pts = cJSON_AddArrayToObject(root, "points");
  for (int i = 0; i < r->npts; i++) {
    const step_point *x = &r->pts[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch", (double)x->batch);
    cJSON_AddNumberToObject(o, "tokens_per_step", step_tokens(r, x));
    cJSON_AddStringToObject(o, "status", x->status);
    cJSON_AddStringToObject(o, "reason", x->reason);
    cJSON_AddNumberToObject(o, "calls", x->calls);
    cJSON_AddNumberToObject(o, "graph_nodes", x->graph_nodes);
    cJSON_AddNumberToObject(o, "fp4_bytes", x->bytes);
    jnum(o, "touched_experts_per_layer", (bv){step_moe_type(p) != NULL, x->touched_mean});
    jnum(o, "eager_us", x->eager_us);
    jnum(o, "graph_us", x->graph_us);
    jnum(o, "graph_pdl_us", x->pdl_us);
    jnum(o, "pdl_gain", pdl_gain(x));
    jnum(o, "read_floor_us", read_floor_us(r, x->bytes));
    jnum(o, "frac_read_ceiling", frac_read(r, x));
    jnum(o, "time_over_copy_floor", over_copy(r, x));
    jnum(o, "tokens_per_s_bound", tokens_bound(r, x));
    jnum(o, "read_chain_graph_us", x->reads_us);
    jnum(o, "read_chain_frac_read_ceiling", chain_frac_read(r, x));
    jnum(o, "read_chain_over_copy_floor", chain_over_copy(r, x));
    cJSON_AddStringToObject(o, "read_chain_note", x->reads_note);
    jnum(o, "bf16_cublas_graph_us", x->bf16_us);
    jnum(o, "speedup_vs_bf16", bf16_speedup(x));
    cJSON_AddStringToObject(o, "bf16_note", x->bf16_note);
    if (r->o->trace) {
      cJSON *tr = cJSON_AddObjectToObject(o, "trace");
      const step_trace_summary *t = &x->trace;
      jnum(tr, "kernels", (bv){x->traced, t->kernels});
      jnum(tr, "span_us", (bv){x->traced, t->span_us});
      jnum(tr, "busy_us", (bv){x->traced, t->busy_us});
      jnum(tr, "kernel_sum_us", (bv){x->traced, t->sum_us});
      cJSON *sl = cJSON_AddArrayToObject(tr, "per_layer_position");
      for (int q = 0; x->traced && q < t->period; q++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "kernel", t->slots[q].name);
        cJSON_AddNumberToObject(e, "count", t->slots[q].count);
        cJSON_AddNumberToObject(e, "mean_us", t->slots[q].mean_us);
        cJSON_AddNumberToObject(e, "mean_start_after_previous_end_us", t->slots[q].gap_us);
        cJSON_AddItemToArray(sl, e);
      }
      cJSON_AddStringToObject(tr, "note", x->trace_note);
    }
    if (r->gpus) {
      cJSON *c = cJSON_AddObjectToObject(o, "collectives");
      cJSON_AddNumberToObject(c, "count", x->coll_count);
      cJSON_AddNumberToObject(c, "bytes", x->coll_bytes);
      cJSON_AddNumberToObject(c, "bytes_sent_per_rank", x->coll_sent_bytes);
      if (!r->o->a2a) cJSON_AddNumberToObject(c, "ring_bytes_per_rank", x->coll_sent_bytes);
      jnum(c, "alone_us", x->coll_us);
      jnum(c, "read_floor_plus_alone_us", floor_plus_alone(r, x));
      jnum(c, "step_over_floor_plus_alone", over_floor_plus_alone(r, x));
      cJSON *ranks = cJSON_AddArrayToObject(o, "rank_graph_pdl_us");
      for (int k = 0; k < r->gpus; k++)
        cJSON_AddItemToArray(ranks, measured(x->rank_pdl_us[k]) ? cJSON_CreateNumber(x->rank_pdl_us[k].v) : cJSON_CreateNull());
    }
    cJSON *tl = cJSON_AddArrayToObject(o, "per_type");
    for (int t = 0; t < p->ntypes; t++) {
      const type_result *y = &x->types[t];
      cJSON *q = cJSON_CreateObject();
      cJSON_AddStringToObject(q, "name", p->types[t].name);
      cJSON_AddNumberToObject(q, "calls", y->calls);
      cJSON_AddNumberToObject(q, "fp4_bytes", y->bytes);
      jnum(q, "graph_pdl_us", y->us);
      jnum(q, "read_floor_us", read_floor_us(r, y->bytes));
      jnum(q, "frac_read_ceiling", type_frac_read(r, y));
      cJSON_AddStringToObject(q, "ran", y->ran);
      cJSON_AddStringToObject(q, "note", y->note);
      if (r->o->nsweep) {
        cJSON *sw = cJSON_AddArrayToObject(q, "sweep");
        for (int k = 0; k < r->o->nsweep; k++) {
          cJSON *e = cJSON_CreateObject();
          cJSON_AddStringToObject(e, "config", r->o->sweep[k]);
          jnum(e, "graph_pdl_us", y->sweep_us[k]);
          jnum(e, "over_default", sweep_over_default(y, k));
          cJSON_AddStringToObject(e, "note", y->sweep_note[k]);
          cJSON_AddItemToArray(sw, e);
        }
      }
      cJSON_AddItemToArray(tl, q);
    }
    cJSON_AddItemToArray(pts, o);
  }
  return root;
}

static void csv_num(FILE *f, bv v, const char *fmt) {
  if (measured(v)) fprintf(f, fmt, v.v);
  fputc(',', f);
}

static void write_csv(FILE *f, const step_report *r) {
  fprintf(f, "model,tp,ep,mode,batch,layers_built,layers_model,part,calls,fp4_bytes,eager_us,graph_us,graph_pdl_us,"
             "pdl_gain,read_floor_us,frac_read_ceiling,time_over_copy_floor,tokens_per_s_bound,read_chain_graph_us,"
             "read_chain_frac_read_ceiling,read_chain_over_copy_floor,bf16_cublas_graph_us,speedup_vs_bf16,gpus,moe_comm,collectives,collective_bytes_sent_per_rank,"
             "collectives_alone_us,status,tokens_per_step\n");
  for (int i = 0; i < r->npts; i++) {
    const step_point *x = &r->pts[i];
    for (int t = -1; t < r->plan.ntypes; t++) {
      const type_result *y = t >= 0 ? &x->types[t] : NULL;
      fprintf(f, "%s,%d,%d,%s,%lld,%lld,%lld,%s,%d,%.0f,", r->plan.model, r->plan.tp, r->plan.ep,
              r->o->w4a4 ? "w4a4" : "w4a16", (long long)x->batch, (long long)r->layers_built,
              (long long)r->plan.layers, y ? r->plan.types[t].name : "step", y ? y->calls : x->calls,
              y ? y->bytes : x->bytes);
      const bv none = {0, 0};
      csv_num(f, y ? none : x->eager_us, "%.2f");
      csv_num(f, y ? none : x->graph_us, "%.2f");
      csv_num(f, y ? y->us : x->pdl_us, "%.2f");
      csv_num(f, y ? none : pdl_gain(x), "%.4f");
      const bv fl = read_floor_us(r, y ? y->bytes : x->bytes);
      csv_num(f, fl, "%.2f");
      csv_num(f, y ? type_frac_read(r, y) : frac_read(r, x), "%.4f");
      csv_num(f, y ? none : over_copy(r, x), "%.4f");
      csv_num(f, y ? none : tokens_bound(r, x), "%.1f");
      csv_num(f, y ? none : x->reads_us, "%.2f");
      csv_num(f, y ? none : chain_frac_read(r, x), "%.4f");
      csv_num(f, y ? none : chain_over_copy(r, x), "%.4f");
      csv_num(f, y ? none : x->bf16_us, "%.2f");
      csv_num(f, y ? none : bf16_speedup(x), "%.3f");
      fprintf(f, "%d,%s,", r->gpus, r->gpus ? (r->o->a2a ? "all-to-all" : "all-reduce") : "");
      csv_num(f, r->gpus && !y ? (bv){1, x->coll_count} : none, "%.0f");
      csv_num(f, r->gpus && !y ? (bv){1, x->coll_sent_bytes} : none, "%.0f");
      csv_num(f, r->gpus && !y ? x->coll_us : none, "%.2f");
      /* tokens_per_step last, after the columns readers already index: with all-to-all the batch
       * column counts one rank's tokens */
      fprintf(f, "%s,%.0f\n", x->status, step_tokens(r, x));
    }
  }
}

/* Text with the four HTML-special characters escaped. */
static void html_text(FILE *f, const char *s) {
  static const char special[] = "<>&\"", *const escaped[] = {"&lt;", "&gt;", "&amp;", "&quot;"};
  for (; *s; s++) {
    const char *hit = strchr(special, *s);
    if (hit) fputs(escaped[hit - special], f);
    else fputc(*s, f);
  }
}

/* One bar row: time against a floor (what `floor_name` says: the read floor of the same bytes, or
 * that plus the collectives alone), scaled to `scale` us. */
static void html_bar(FILE *f, const char *name, bv us, bv floor_us, const char *floor_name, double scale) {
  fputs("<tr><td>", f);
  html_text(f, name);
  fputs("</td><td class=bars>", f);
  if (us.ok && scale > 0)
    fprintf(f, "<div class=t style=\"width:%.1f%%\">%.1f us</div>", 100.0 * us.v / scale, us.v);
  else
    fputs("<div class=na>not measured</div>", f);
  if (floor_us.ok && scale > 0)
    fprintf(f, "<div class=f style=\"width:%.1f%%\">%s %.1f us</div>", 100.0 * floor_us.v / scale, floor_name, floor_us.v);
  fprintf(f, "</td><td>%s</td></tr>\n", cell(us.ok && floor_us.ok && us.v > 0 ? (bv){1, floor_us.v / us.v} : (bv){0, 0}, "%.2f").s);
}

static void write_html(FILE *f, const step_report *r) {
  const step_plan *p = &r->plan;
  fprintf(f, "<!doctype html>\n<html><head><meta charset=utf-8><title>fp4kit decode step: ");
  html_text(f, p->model);
  fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:100%%}"
             "td,th{padding:3px 8px;text-align:left;vertical-align:top}td.bars{width:70%%}"
             "div.t{background:#3b78c4;color:#fff;white-space:nowrap;margin:1px 0;font-size:12px}"
             "div.f{background:#bbb;white-space:nowrap;margin:1px 0;font-size:12px}div.na{color:#999}"
             "</style></head><body>\n<h1>Decode step: ");
  html_text(f, p->model);
  fprintf(f, ", tp %d, ep %d, %s", p->tp, p->ep, r->o->w4a4 ? "W4A4" : "W4A16");
  /* a dense model's collectives are the row-parallel linears' all-reduces, not the MoE's */
  if (r->gpus)
    fprintf(f, ", %d GPU%s, %s%s%s", r->gpus, r->gpus == 1 ? "" : "s", step_moe_type(p) ? "MoE " : "",
            r->o->a2a ? "all-to-all" : "all-reduce", r->o->a2a ? " (batch: tokens per rank)" : "");
  fputs("</h1>\n<p>", f);
  html_text(f, r->dev.name);
  fprintf(f, "; %lld of %lld layers built", (long long)r->layers_built, (long long)p->layers);
  if (r->layers_note[0]) {
    fputs(" (", f);
    html_text(f, r->layers_note);
    fputs(")", f);
  }
  fprintf(f, "; read ceiling %s", prose(gbps(r->read_bps), "%.0f GB/s").s);
  if (!r->read_bps.ok && r->peer_note[0]) {
    fputs(" (", f);
    html_text(f, r->peer_note);
    fputs(")", f);
  }
  fputs("; commit ", f);
  html_text(f, r->origin.commit);
  fputs(", ", f);
  html_text(f, r->origin.date);
  fputs("<br><code>", f);
  html_text(f, r->origin.command);
  fputs("</code></p>\n<p>Blue: the time of a CUDA graph with PDL holding only that layer type's calls of the step (the "
        "step: all of them); grey: the time to read the same FP4 bytes at the same-run read ceiling. Last column: "
        "floor / time.</p>\n",
        f);
  for (int i = 0; i < r->npts; i++) {
    const step_point *x = &r->pts[i];
    double scale = x->pdl_us.ok ? x->pdl_us.v : 0;
    const bv fl = read_floor_us(r, x->bytes);
    if (fl.ok && fl.v > scale) scale = fl.v;
    for (int t = 0; t < p->ntypes; t++)
      if (x->types[t].us.ok && x->types[t].us.v > scale) scale = x->types[t].us.v;
    const bv base = floor_plus_alone(r, x);
    if (r->gpus && base.ok && base.v > scale) scale = base.v;
    fprintf(f, "<h2>batch %lld", (long long)x->batch);
    if (r->o->a2a) fprintf(f, " per rank, %.0f tokens a step", step_tokens(r, x));
    fprintf(f, ": %s</h2>\n<p>", x->status);
    if (x->reason[0]) {
      html_text(f, x->reason);
      fputs("; ", f);
    }
    fprintf(f, "separate launches %s, graph %s, graph + PDL %s (PDL gain %s), BF16 cuBLAS graph ",
            prose(x->eager_us, "%.1f us").s, prose(x->graph_us, "%.1f us").s, prose(x->pdl_us, "%.1f us").s,
            prose(pdl_gain(x), "%.3f").s);
    if (x->bf16_us.ok) fprintf(f, "%.1f us (%s)", x->bf16_us.v, show(bf16_speedup(x), "%.2fx", "speedup not measured").s);
    else html_text(f, x->bf16_note[0] ? x->bf16_note : "not run");
    fprintf(f, "; tokens/s bound %s</p>\n<table><tr><th>layer type</th><th>time and read floor</th><th>floor/time</th>"
               "</tr>\n",
            prose(tokens_bound(r, x), "%.0f").s);
    for (int t = 0; t < p->ntypes; t++) {
      char name[160];
      snprintf(name, sizeof name, "%s (%d calls, %.1f MB)", p->types[t].name, x->types[t].calls, x->types[t].bytes / 1e6);
      html_bar(f, name, x->types[t].us, read_floor_us(r, x->types[t].bytes), "read floor", scale);
    }
    char name[160];
    snprintf(name, sizeof name, "step (%d calls, %.1f MB)", x->calls, x->bytes / 1e6);
    html_bar(f, name, x->pdl_us, fl, "read floor", scale);
    if (r->gpus) { /* the multi-GPU target's measure: the step against its read floor plus the collectives alone */
      snprintf(name, sizeof name, "%d %s alone (%.2f MB sent per rank)", x->coll_count,
               r->o->a2a ? "all-to-alls" : "all-reduces", x->coll_sent_bytes / 1e6);
      html_bar(f, name, x->coll_us, (bv){0, 0}, "", scale);
      html_bar(f, "step against read floor + collectives alone", x->pdl_us, floor_plus_alone(r, x),
               "read floor + collectives", scale);
    }
    fputs("</table>\n", f);
  }
  fputs("</body></html>\n", f);
}

void step_report_print(FILE *f, const step_report *r) {
  const step_plan *p = &r->plan;
  const int peers_missing = !measured(r->read_bps) || !measured(r->copy_bps);
  fprintf(f, "%s tp %d ep %d %s on %s: %lld of %lld layers built%s%s%s; read %s, copy %s%s%s%s\n", p->model, p->tp, p->ep,
          r->o->w4a4 ? "w4a4" : "w4a16", r->dev.name, (long long)r->layers_built, (long long)p->layers,
          r->layers_note[0] ? " (" : "", r->layers_note, r->layers_note[0] ? ")" : "",
          prose(gbps(r->read_bps), "%.0f GB/s").s, prose(gbps(r->copy_bps), "%.0f GB/s").s,
          peers_missing && r->peer_note[0] ? " (" : "", peers_missing ? r->peer_note : "",
          peers_missing && r->peer_note[0] ? ")" : "");
  if (r->o->a2a)
    fprintf(f, "%d GPUs, one rank each, MoE tokens exchanged by all-to-all: rank_batch is tokens per rank (a step serves "
               "%d x rank_batch; tok/s counts them all)\n", r->gpus, r->gpus);
  /* With all-to-all the first column is one rank's tokens, and its header says so. */
  const int bw = r->o->a2a ? 10 : 5;
  fprintf(f, "%*s %6s %10s %10s %10s %10s %6s %6s %6s %10s %10s %7s  %s\n", bw, r->o->a2a ? "rank_batch" : "batch", "calls", "FP4_MB", "eager_us",
          "graph_us", "pdl_us", "gain", "/read", "/copy", "tok/s", "bf16_us", "x_bf16", "status");
  for (int i = 0; i < r->npts; i++) {
    const step_point *x = &r->pts[i];
    fprintf(f, "%*lld %6d %10.1f %10s %10s %10s %6s %6s %6s %10s %10s %7s  %s%s%s\n", bw, (long long)x->batch, x->calls,
            x->bytes / 1e6, cell(x->eager_us, "%.1f").s, cell(x->graph_us, "%.1f").s, cell(x->pdl_us, "%.1f").s,
            cell(pdl_gain(x), "%.3f").s, cell(frac_read(r, x), "%.3f").s, cell(over_copy(r, x), "%.3f").s,
            cell(tokens_bound(r, x), "%.0f").s, cell(x->bf16_us, "%.1f").s, cell(bf16_speedup(x), "%.2f").s, x->status,
            x->reason[0] ? ": " : "", x->reason);
    for (int t = 0; t < p->ntypes; t++) {
      const type_result *y = &x->types[t];
      fprintf(f, "      %-28s %5d calls %10.1f MB %10s us  floor %9s us  %5s  %s%s%s\n", p->types[t].name, y->calls,
              y->bytes / 1e6, cell(y->us, "%.1f").s, cell(read_floor_us(r, y->bytes), "%.1f").s,
              cell(type_frac_read(r, y), "%.3f").s, y->ran, y->note[0] ? "; " : "", y->note);
      if (!r->o->nsweep) continue;
      int best = -1;
      for (int k = 0; k < r->o->nsweep; k++)
        if (y->sweep_us[k].ok && (best < 0 || y->sweep_us[k].v < y->sweep_us[best].v)) best = k;
      for (int k = 0; k < r->o->nsweep; k++) {
        if (y->sweep_us[k].ok)
          fprintf(f, "        %-26s %10.1f us  %s%s\n", r->o->sweep[k], y->sweep_us[k].v,
                  show(sweep_over_default(y, k), "%.3f of the default's time", "the default's time not measured").s,
                  k == best ? "  (fastest named)" : "");
        else if (y->sweep_note[k][0])
          fprintf(f, "        %-26s refused: %s\n", r->o->sweep[k], y->sweep_note[k]);
        else
          fprintf(f, "        %-26s not measured\n", r->o->sweep[k]);
      }
    }
    if (x->bf16_note[0]) fprintf(f, "      bf16 peer: %s\n", x->bf16_note);
    if (x->reads_us.ok) {
      fprintf(f,
              "      read-only chain (each call one read of its weight bytes, in a graph): %.1f us, %s, %s\n",
              x->reads_us.v, show(chain_frac_read(r, x), "%.3f of the read ceiling", "read ceiling not measured").s,
              show(chain_over_copy(r, x), "%.2fx the copy floor", "copy floor not measured").s);
    } else {
      fprintf(f, "      read-only chain: not measured%s%s\n", x->reads_note[0] ? ": " : "", x->reads_note);
    }
    if (x->traced) {
      const step_trace_summary *t = &x->trace;
      fprintf(f,
              "      trace (one replay of the graph with PDL, CUPTI): %d kernels over %.1f us, some kernel running %.1f "
              "us (%.0f%%), the kernels' times added %.1f us\n",
              t->kernels, t->span_us, t->busy_us, t->span_us > 0 ? 100.0 * t->busy_us / t->span_us : 0.0, t->sum_us);
      for (int q = 0; q < t->period; q++)
        fprintf(f, "        %2d %-30s %4d x %8.2f us, start %+8.2f us after the end of those before\n", q,
                t->slots[q].name, t->slots[q].count, t->slots[q].mean_us, t->slots[q].gap_us);
    } else if (x->trace_note[0]) {
      fprintf(f, "      trace: not run: %s\n", x->trace_note);
    }
    if (r->gpus)
      fprintf(f, "      %d GPUs: %d %s, %.2f MB each rank sends, alone %s; step / (read floor + alone) %s\n", r->gpus,
              x->coll_count, r->o->a2a ? "all-to-alls" : "all-reduces", x->coll_sent_bytes / 1e6,
              prose(x->coll_us, "%.1f us").s, prose(over_floor_plus_alone(r, x), "%.3f").s);
  }
}

int step_report_write(const char *path, const step_report *r, int kind) {
  fp4cli_report_file out;
  if (fp4cli_report_open("bench --step", fp4cli_report_options[kind], path, &out)) return 0;
  FILE *f = out.f;
  int ok = 1;
  if (kind == 0) {
    cJSON *root = record_json(r);
    char *text = root ? cJSON_Print(root) : NULL;
    ok = text && fprintf(f, "%s\n", text) > 0;
    cJSON_free(text);
    cJSON_Delete(root);
  } else if (kind == 1) {
    write_csv(f, r);
  } else {
    write_html(f, r);
  }
  return fp4cli_report_close("bench --step", fp4cli_report_options[kind], path, &out, !ok) == FP4CLI_OK;
}
