#!/usr/bin/env python3
"""The engine-style decode step (tests/python/test_engine.py: dense NVFP4 linears and NVFP4 MoE
layers with tensor scales) captured once in a CUDA graph: replay time against the sum of its
kernels' times, the measure of what a graph replay adds on top of the GPU work.

  FP4KIT_LIB=build/libfp4kit.so PYTHONPATH=python python3 scripts/engine_graph_replay.py [--tokens 1,8] [--json F]

Per token count: the replay time (median over --rounds rounds of --replays back-to-back replays,
CUDA events around each round), the kernels of one replay as the CUDA profiler reports them
(their count, the sum of their durations and the union of their intervals, from --profiled
replays), and replay / sum. Kernels launched with PDL may start before their predecessor ends
(they wait inside), so the sum can exceed the union; both are printed. Needs a CUDA device and
PyTorch with its profiler (CUPTI).
"""

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def kernel_events(prof):
    """(name, start_us, end_us) of every device activity the profiler recorded."""
    out = []
    for e in prof.events():
        dev = str(getattr(e, "device_type", ""))
        if not dev.endswith("CUDA"):
            continue
        tr = getattr(e, "time_range", None)
        if tr is None:
            continue
        out.append((e.name, float(tr.start), float(tr.end)))
    return out


def union_us(events):
    total, end = 0.0, None
    for _, s, e in sorted(events, key=lambda x: x[1]):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1,8", help="tokens per step, comma-separated (default 1,8)")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds (default 20)")
    ap.add_argument("--replays", type=int, default=50, help="replays per round (default 50)")
    ap.add_argument("--profiled", type=int, default=20, help="replays under the profiler (default 20)")
    ap.add_argument("--json", help="write the records here")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        print("engine_graph_replay: no CUDA device", file=sys.stderr)
        return 2
    import test_engine as eng  # the step's modules, as the GPU test builds them

    dev = torch.device("cuda")
    step = eng.DecodeStep(dev, seed=1)
    records = []
    for t in [int(x) for x in args.tokens.split(",")]:
        x = (torch.randn(t, eng.HIDDEN, device=dev) * 0.5).to(torch.bfloat16)
        g, y = eng.capture(step, x, warmups=3)  # as the GPU test captures it
        for _ in range(10):
            g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.rounds):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(args.replays):
                g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0 / args.replays)
        replay_us = statistics.median(times)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.profiled):
                g.replay()
            torch.cuda.synchronize()
        ev = kernel_events(prof)
        n = args.profiled
        sum_us = sum(e - s0 for _, s0, e in ev) / n
        rec = {"tokens": t, "layers": eng.LAYERS, "hidden": eng.HIDDEN, "replay_us": replay_us,
               "replay_us_min": min(times), "replay_us_max": max(times), "kernels_per_replay": len(ev) / n,
               "kernel_sum_us": sum_us, "kernel_union_us": union_us(ev) / n,
               "replay_over_kernel_sum": replay_us / sum_us if sum_us else None,
               "kernels": sorted({name for name, _, _ in ev}), "output_finite": bool(torch.isfinite(y.float()).all())}
        records.append(rec)
        print(f"tokens {t}: replay {replay_us:.2f} us, {rec['kernels_per_replay']:.0f} kernels, sum {sum_us:.2f} us, "
              f"union {rec['kernel_union_us']:.2f} us, replay / sum {rec['replay_over_kernel_sum']:.3f}")
    meta = {"script": "scripts/engine_graph_replay.py", "argv": sys.argv[1:], "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0), "commit": os.environ.get("FP4KIT_COMMIT", "unknown")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
