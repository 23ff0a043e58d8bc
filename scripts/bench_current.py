#!/usr/bin/env python3
"""Writes the page of current numbers (current.md) and its data (current.json) from the JSON
records of `fp4kit bench` (dense GEMMs and quantize: one record per point) and `fp4kit bench --moe`
(one record per layer point).

    python3 scripts/bench_current.py --md bench/results/h200/current.md \
        --json bench/results/h200/current.json FILE[=TITLE] ...

Each input file becomes one section of the page, under TITLE (default: the file name), with the
provenance its records carry: command, commit, date, device, the same-run peers. Options:

    --commit FILE=HASH    the commit measured, where the records say "unknown" (a copied tree)
    --command FILE=TEXT   the command, where the records do not carry it (fp4kit bench --moe)
    --date FILE=TEXT      the date, where the records do not carry it
    --note FILE=TEXT      a sentence printed under the section's provenance
    --intro TEXT          a paragraph after the page title

Tables:
- W4A16 / W4A4 GEMMs: per weight shape (N x K) and M, the fastest backend that ran, its median time,
  its speed over the same-run cuBLAS BF16 GEMM of the same (M, N, K) (for W4A4 with the activation
  quantize included where it was timed) and, at M <= 64, its weight bytes over the same-run copy
  bandwidth (the decode roof). `auto` rows, where timed, are shown as their own backend.
- quantize: per K and M, the median time and the GB/s of bf16 read + FP4 and scales written.
- MoE layer: per model, mode and batch B, the layer time, the time over the copy floor (touched
  expert bytes / same-run copy bandwidth) and the speed over the same-run cuBLAS BF16 expert loop.
current.json holds, per section, the provenance and the rows of these tables.
Only the standard library is used, so the GPU machine needs nothing extra.
"""
import argparse
import json
import os
import sys


def fmt_us(us):
    if us is None:
        return "-"
    return f"{us:.1f} us" if us < 1000 else f"{us / 1000:.2f} ms"


def fmt_x(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}x"


def fmt_pct(v):
    return "-" if v is None else f"{100 * v:.0f}%"


def kv_option(values, name):
    out = {}
    for v in values or []:
        if "=" not in v:
            sys.exit(f"bench_current.py: {name} '{v}': use FILE=VALUE")
        k, val = v.split("=", 1)
        out[k] = val
    return out


def provenance(records, commit_override, command_override, date_override):
    """One dict describing where a file's records come from (first record's fields)."""
    first = records[0] if records else {}
    commits = sorted({r.get("commit") for r in records if r.get("commit")})
    commit = commit_override or (", ".join(commits) if commits else "not recorded")
    dates = sorted({r.get("date") for r in records if r.get("date")})
    copy = sorted({r.get("copy_gbps") for r in records if r.get("copy_gbps")})
    bf16 = sorted({r.get("cublas_bf16_peak_tflops") for r in records if r.get("cublas_bf16_peak_tflops")})
    return {
        "command": command_override or first.get("command", "not recorded"),
        "commit": commit,
        "date": date_override or ((dates[0] if len(dates) == 1 else f"{dates[0]} .. {dates[-1]}") if dates else "not recorded"),
        "device": first.get("device", "not recorded"),
        "driver": first.get("driver_version"),
        "copy_gbps": copy[0] if copy else None,
        "cublas_bf16_peak_tflops": bf16[0] if bf16 else None,
    }


def gemm_rows(records, op):
    """Fastest ok record per (n, k, m) for one op."""
    best = {}
    for r in records:
        if r.get("op") != op or r.get("status") != "ok" or r.get("median_us") is None:
            continue
        key = (r["n"], r["k"], r["m"])
        t = r["total_us"] if op == "w4a4" and r.get("total_us") else r["median_us"]
        if key not in best or t < best[key][0]:
            best[key] = (t, r)
    rows = []
    for (n, k, m), (t, r) in sorted(best.items(), key=lambda kv: (-kv[0][0] * kv[0][1], -kv[0][0], kv[0][2])):
        rows.append({
            "shape": f"{n}x{k}", "name": r.get("shape", ""), "m": m, "backend": r["backend"],
            "config": r.get("config", ""), "median_us": r["median_us"], "total_us": r.get("total_us"),
            "speedup_vs_cublas_bf16": r.get("speedup_vs_cublas_bf16"),
            "frac_of_copy": r.get("frac_of_bw_peer"), "tflops": r.get("tflops"),
        })
    return rows


def gemm_table(rows, op):
    lines = [f"| weight N x K | M | fastest backend (config) | {'GEMM / with quantize' if op == 'w4a4' else 'time'} "
             "| x cuBLAS BF16 | weight bytes / copy (M <= 64) |", "|---|---|---|---|---|---|"]
    for r in rows:
        t = fmt_us(r["median_us"])
        if op == "w4a4" and r["total_us"]:
            t += f" / {fmt_us(r['total_us'])}"
        frac = fmt_pct(r["frac_of_copy"]) if r["m"] <= 64 else ""
        cfg = f" ({r['config']})" if r["config"] else ""
        lines.append(f"| {r['shape']} | {r['m']} | {r['backend']}{cfg} | {t} | {fmt_x(r['speedup_vs_cublas_bf16'])} | {frac} |")
    return lines


def quantize_rows(records):
    rows = []
    for r in records:
        if r.get("op") != "quantize" or r.get("status") != "ok":
            continue
        m, k, us = r["m"], r["k"], r["median_us"]
        moved = m * k * 2 + m * k / 2 + m * k / 16  # bf16 read, codes and (NVFP4) scales written
        rows.append({"m": m, "k": k, "backend": r["backend"], "median_us": us, "gbps": moved / us / 1e3})
    return sorted(rows, key=lambda x: (x["k"], x["m"], x["backend"]))


def moe_rows(records):
    rows = []
    for r in records:
        if r.get("bench") != "moe":
            continue
        rows.append({
            "model": r["model"], "mode": r["mode"], "batch": r["batch"], "status": r["status"],
            "layer_us": r.get("layer_us"), "time_over_copy_floor": r.get("time_over_copy_floor"),
            "speedup_vs_cublas_bf16_loop": r.get("speedup_vs_cublas_bf16_loop"),
            "active_experts": r.get("active_experts"),
        })
    return rows


def moe_table(rows):
    lines = ["| model | mode | B | active experts | layer | x copy floor | x cuBLAS BF16 expert loop |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['mode']} | {r['batch']} | | {r['status']} | | |")
            continue
        lines.append(f"| {r['model']} | {r['mode']} | {r['batch']} | {r['active_experts']} | {fmt_us(r['layer_us'])} "
                     f"| {fmt_x(r['time_over_copy_floor'])} | {fmt_x(r['speedup_vs_cublas_bf16_loop'])} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="FILE[=TITLE]: a JSON file of fp4kit bench records")
    ap.add_argument("--md", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--title", default="Current numbers on the H200")
    ap.add_argument("--intro", default="")
    ap.add_argument("--commit", action="append")
    ap.add_argument("--command", action="append")
    ap.add_argument("--date", action="append")
    ap.add_argument("--note", action="append")
    a = ap.parse_args()
    commits, notes = kv_option(a.commit, "--commit"), kv_option(a.note, "--note")
    commands, dates = kv_option(a.command, "--command"), kv_option(a.date, "--date")

    md = [f"# {a.title}", "", "Generated by `scripts/bench_current.py` from the JSON records named in each section; "
          "do not edit by hand. Ratios are to peers measured in the same run as the point; compare ratios, "
          "not absolute times across runs.", ""]
    if a.intro:
        md += [a.intro, ""]
    sections = []
    for spec in a.inputs:
        path, title = (spec.split("=", 1) + [None])[:2] if "=" in spec else (spec, None)
        with open(path) as f:
            records = json.load(f)
        if isinstance(records, dict):
            records = [records]
        prov = provenance(records, commits.get(path), commands.get(path), dates.get(path))
        sec = {"title": title or os.path.basename(path), "file": path, "provenance": prov}
        md += [f"## {sec['title']}", "",
               f"- file: `{path}`",
               f"- command: `{prov['command']}`",
               f"- commit: {prov['commit']}; date: {prov['date']}; device: {prov['device']}"]
        peers = []
        if prov["copy_gbps"]:
            peers.append(f"copy {prov['copy_gbps']:.0f} GB/s")
        if prov["cublas_bf16_peak_tflops"]:
            peers.append(f"cuBLAS BF16 8192^3 {prov['cublas_bf16_peak_tflops']:.0f} TFLOP/s")
        if peers:
            md.append("- same-run peers: " + ", ".join(peers))
        if path in notes:
            md.append(f"- {notes[path]}")
        md.append("")
        for op in ("w4a16", "w4a4"):
            rows = gemm_rows(records, op)
            if rows:
                sec[op] = rows
                md += [f"{op.upper()}, NVFP4 unless the command says otherwise:", ""] + gemm_table(rows, op) + [""]
        q = quantize_rows(records)
        if q:
            sec["quantize"] = q
            md += ["Activation quantize (bf16 in, NVFP4 codes and scales out):", "",
                   "| K | M | backend | time | GB/s moved |", "|---|---|---|---|---|"]
            md += [f"| {r['k']} | {r['m']} | {r['backend']} | {fmt_us(r['median_us'])} | {r['gbps']:.0f} |" for r in q]
            md.append("")
        m = moe_rows(records)
        if m:
            sec["moe"] = m
            md += moe_table(m) + [""]
        sections.append(sec)

    with open(a.md, "w") as f:
        f.write("\n".join(md).rstrip() + "\n")
    with open(a.json, "w") as f:
        json.dump({"title": a.title, "sections": sections}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
