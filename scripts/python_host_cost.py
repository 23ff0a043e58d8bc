#!/usr/bin/env python3
"""Host microseconds per call of the Python package, call to return, at M = 1 on the decode shapes.

For mm_fp4, mm_w4a16 and fp4_quantize, with NumPy arrays and PyTorch tensors (CPU tensors, and CUDA
tensors when PyTorch sees a GPU), it reports the median wall time of a call (from the call to its
return, eager, the same operands every call) and, beside it, the median of the bare C call with
prebuilt structs on the same operands (through an entry point without argtypes, the cheapest way
from Python to C): their difference is what the Python layer costs. The operands, the transposed
weight views `w.T` and `w_sf.T` included, are made before the timed calls; the "w.T in" column
times mm_fp4 and mm_w4a16 again with the two views made inside each call, as an engine that writes
`layer.weight.T` at its call site pays; "out=" times them with the output passed in (no allocation).
The calls column counts the
Python functions and builtins one steady-state call runs (sys.setprofile). Times are
the mean of a batch of calls, the fastest of several batches. Where the compiled path
(fp4kit._native) runs the tensor calls, "py path" times the same call on the package's Python path
(fp4kit._ops._use_native(False)) right after it. On the host
backends a call computes its result before it returns, so the C column holds the GEMM itself; on a
GPU the C column is the library's own host cost (launches are asynchronous).

Same-run peers, on CUDA tensors: "torch linear" times torch.nn.functional.linear on the same
shape with the weight in bf16 (PyTorch's own decode GEMM: an output allocation and one cuBLAS
launch, the cost an engine already pays per linear layer), and "empty launch" times the cheapest
launch there is from the same ctypes path as the bare C column: cuLaunchKernel of an empty kernel
(driver API, one thread block). They bound what a call can cost on the host the run lands on:
the host's speed varies between machine starts, and the peers move with it.

  FP4KIT_LIB=$PWD/build/libfp4kit.so PYTHONPATH=python python3 scripts/python_host_cost.py
  ... --package DIR      import fp4kit from DIR instead (compare two versions of the package)
  ... --shapes 4096x4096,2048x4096 --calls 2000 --json out.json
  ... --parts            also time the PyTorch and ctypes pieces a call is made of (allocating the
                         output three ways, attribute reads, the stream and device queries, a lock,
                         a ctypes call), on a CUDA tensor where PyTorch sees a GPU, else a CPU one
"""

import argparse
import ctypes
import importlib
import json
import os
import sys
import time

import numpy as np

DECODE_SHAPES = [(4096, 4096), (2048, 4096), (4096, 1024), (128, 128)]  # N x K; the last: Python cost alone


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", help="directory holding the fp4kit package to measure (default: python/ of this checkout)")
    ap.add_argument("--shapes", help="comma-separated NxK list (default: %s)" % ",".join("%dx%d" % s for s in DECODE_SHAPES))
    ap.add_argument("--calls", type=int, default=1000, help="timed calls per point (default 1000)")
    ap.add_argument("--repeats", type=int, default=5, help="medians taken over this many batches (default 5)")
    ap.add_argument("--kinds", default="numpy,torch-cpu,torch-cuda", help="operand kinds to measure")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--parts", action="store_true", help="also time the pieces of a call (see above)")
    return ap.parse_args()


def load(package):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, package or os.path.join(here, "python"))
    return importlib.import_module("fp4kit")


def per_call_us(fn, calls, repeats, sync=None):
    """The mean wall time of one call in the fastest of `repeats` batches, in microseconds (the
    fastest batch is the one least disturbed by other work on a shared machine)."""
    for _ in range(min(50, calls)):
        fn()
    if sync:
        sync()
    batches = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter() - t0) / calls * 1e6)
        if sync:
            sync()
    return min(batches)


def operands(fp4kit, kind, n, k, torch):
    rng = np.random.default_rng(n + k)
    x = rng.standard_normal((1, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    w16 = None
    if kind == "numpy":
        import ml_dtypes
        x16 = x.astype(ml_dtypes.bfloat16)
        gs = 1.0
    else:
        dev = "cuda" if kind == "torch-cuda" else "cpu"
        x16 = torch.from_numpy(x).to(dev, torch.bfloat16)
        w = torch.from_numpy(w).to(dev, torch.bfloat16)
        w16 = w
        gs = torch.tensor([1.0], device=dev)
    wq, ws = fp4kit.nvfp4_quantize(w, gs)
    xq, xs = fp4kit.fp4_quantize(x16, gs)
    alpha = gs
    return x16, xq, xs, wq, ws, gs, alpha, w16


EMPTY_PTX = b""".version 6.0
.target sm_50
.address_size 64
.visible .entry fp4kit_host_cost_empty()
{
  ret;
}
"""


def empty_launch(torch):
    """A function launching an empty kernel through the driver API on PyTorch's current stream, with
    the arguments prebuilt (as bare_c does), or None with the reason where the driver cannot."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, "libcuda.so.1: %s" % e
    torch.cuda.synchronize()  # the primary context is current on this thread
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    rc = cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(EMPTY_PTX))
    if rc == 0:
        rc = cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"fp4kit_host_cost_empty")
    if rc != 0:
        return None, "cuModuleLoadData/cuModuleGetFunction returned %d" % rc
    launch = cu.cuLaunchKernel
    launch.restype = ctypes.c_int
    one, threads, zero = ctypes.c_uint(1), ctypes.c_uint(32), ctypes.c_uint(0)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
    args = (fn, one, one, one, threads, one, one, zero, stream, None, None)
    if launch(*args) != 0:
        return None, "cuLaunchKernel failed"
    return (lambda: launch(*args)), None


def bare_c(fp4kit, kind, op, x16, xq, xs, wq, ws, n, k, torch):
    """A function making the C call of `op` on the same operands with prebuilt structs."""
    L = fp4kit._lib
    lib = L.LIB
    dev = -1
    if kind == "torch-cuda":
        dev = x16.device.index or 0
    ptr = (lambda t: t.data_ptr()) if kind != "numpy" else (lambda a: a.ctypes.data)
    mem = L.MEMORY_DEVICE if dev >= 0 else L.MEMORY_HOST
    ctx = fp4kit._tensors.context(dev) if dev >= 0 else None
    handle = ctx.handle if ctx else None
    opts = L.Options()
    opts.enable_pdl = 1 if dev >= 0 else 0
    if dev >= 0:
        opts.stream = torch.cuda.current_stream().cuda_stream or None
    nb = ctypes.c_size_t()
    lib.fp4_scales_size(L.FORMAT_NVFP4, L.LAYOUT_128X4, 1, k, ctypes.byref(nb))
    if kind == "numpy":
        out = np.empty((1, n), x16.dtype)
        q_out = np.empty((1, k // 2), np.uint8)
        s_out = np.empty(nb.value, np.uint8)
    else:
        out = torch.empty((1, n), dtype=torch.bfloat16, device=x16.device)
        q_out = torch.empty((1, k // 2), dtype=torch.uint8, device=x16.device)
        s_out = torch.empty(nb.value, dtype=torch.uint8, device=x16.device)
    mo = L.Matrix(ptr(out), 1, n, n, L.DTYPE_BF16, mem)
    qa = L.QMatrix(ptr(xq), ptr(xs), 1, k, L.FORMAT_NVFP4, L.LAYOUT_128X4, 1.0, mem)
    qb = L.QMatrix(ptr(wq), ptr(ws), n, k, L.FORMAT_NVFP4, L.LAYOUT_128X4, 1.0, mem)
    ma = L.Matrix(ptr(x16), 1, k, k, L.DTYPE_BF16, mem)
    qq = L.QMatrix(ptr(q_out), ptr(s_out), 1, k, L.FORMAT_NVFP4, L.LAYOUT_128X4, 1.0, mem)
    r = ctypes.byref
    keep = (out, q_out, s_out)
    one = ctypes.c_float(1.0)
    h = ctypes.c_void_p(handle.value if handle else None)
    fns = {}
    for name in ("fp4_mm", "fp4_mm_w4a16", "fp4_quantize"):
        fns[name] = lib[name]  # a function object without argtypes: arguments passed as built
        fns[name].restype = ctypes.c_int
    if op == "mm_fp4":
        args = (h, r(qa), r(qb), one, r(mo), r(opts))
    elif op == "mm_w4a16":
        args = (h, r(ma), r(qb), one, r(mo), r(opts))
    else:
        args = (h, r(ma), one, r(qq), r(opts))
    fn = fns[{"mm_fp4": "fp4_mm", "mm_w4a16": "fp4_mm_w4a16"}.get(op, "fp4_quantize")]
    return lambda: (fn(*args), keep)


def call_parts(torch, calls, repeats):
    """Microseconds of the pieces a tensor call is made of, each timed alone as the calls are."""
    import threading
    dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    a = torch.zeros((1, 4096), dtype=torch.bfloat16, device=dev)
    w = torch.zeros((4096, 2048), dtype=torch.uint8, device=dev)
    shape, bf16 = (1, 4096), torch.bfloat16
    lock = threading.Lock()

    def locked():
        with lock:
            pass

    buf = ctypes.create_string_buffer(64)
    memset = ctypes.CDLL(None).memset
    memset.restype = ctypes.c_void_p
    pieces = {
        "torch.empty(shape, dtype=, device=)": lambda: torch.empty(shape, dtype=bf16, device=dev),
        "a.new_empty(shape, dtype=)": lambda: a.new_empty(shape, dtype=bf16),
        "torch.empty_like(a)": lambda: torch.empty_like(a),
        "a.shape": lambda: a.shape,
        "a.stride()": lambda: a.stride(),
        "a.dtype": lambda: a.dtype,
        "a.device": lambda: a.device,
        "a.get_device()": lambda: a.get_device(),
        "a.data_ptr()": lambda: a.data_ptr(),
        "w.T": lambda: w.T,
        "the plan key of a call (9 attributes in a tuple)": lambda: (
            1, a.shape, a.stride(), a.dtype, a.device, w.shape, w.stride(), w.dtype, w.get_device()),
        "torch.compiler.is_compiling()": lambda: torch.compiler.is_compiling(),
        "threading.Lock enter and exit": locked,
        "ctypes call, 3 arguments (memset)": lambda: memset(buf, 0, 0),
    }
    if dev.type == "cuda":
        raw, getdev = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice
        pieces["torch._C._cuda_getCurrentRawStream(0)"] = lambda: raw(0)
        pieces["torch._C._cuda_getDevice()"] = getdev
        pieces["torch.cuda.current_device()"] = torch.cuda.current_device
    out = {"device": str(dev)}
    for name, fn in pieces.items():
        out[name] = round(per_call_us(fn, calls, repeats), 3)
        print("  %-50s %7.3f us" % (name, out[name]))
    return out


def calls_per_call(fn):
    """Python functions and builtins one call of fn runs (fn's own frame not counted)."""
    n = [0]

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1

    fn()  # a plan dropped since (the compiled path turned off and on) is built outside the count
    sys.setprofile(prof)
    fn()
    sys.setprofile(None)
    return n[0] - 2  # fn itself and setprofile


def call_path(fp4kit):
    """fp4kit.call_path(), or the Python path for a package that predates the compiled one."""
    if hasattr(fp4kit, "call_path"):
        return fp4kit.call_path()
    return {"path": "python", "why": "this package has no compiled path", "module": None}


def main():
    args = parse_args()
    fp4kit = load(args.package)
    try:
        import torch
    except ImportError:
        torch = None
    shapes = DECODE_SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    kinds = [kd for kd in args.kinds.split(",") if kd == "numpy" or (torch is not None and (
        kd == "torch-cpu" or (kd == "torch-cuda" and torch.cuda.is_available())))]
    print("fp4kit from %s, libfp4kit %s" % (os.path.dirname(fp4kit.__file__), fp4kit.library_path()))
    print("host microseconds per call, call to return, M = 1 (fastest of %d batches of %d calls)"
          % (args.repeats, args.calls))
    path = call_path(fp4kit)
    print("calls on tensors: the %s path%s" % (path["path"], " (%s)" % path["why"] if path["why"] else ""))
    print("%-11s %-12s %-11s %10s %10s %10s %10s %6s  %-8s %-8s %-12s %-12s %s" % (
        "kind", "op", "N x K", "python", "py path", "bare C", "layer", "calls", "w.T in", "out=", "torch linear",
        "empty launch", "backend"))
    rows = []
    for kind in kinds:
        sync = torch.cuda.synchronize if kind == "torch-cuda" else None
        launch = None
        if kind == "torch-cuda":
            launch, why = empty_launch(torch)
            if launch is None:
                print("empty launch peer: not measured: %s" % why)
        for n, k in shapes:
            x16, xq, xs, wq, ws, gs, alpha, w16 = operands(fp4kit, kind, n, k, torch)
            # The transposed weight views FlashInfer's contract takes, made once as an engine keeps its
            # weights: a call is timed from call to return (building a torch view costs about 1 us).
            wt, wst = wq.T, ws.T
            calls = {
                "mm_fp4": lambda: fp4kit.mm_fp4(xq, wt, xs, wst, alpha),
                "mm_w4a16": lambda: fp4kit.mm_w4a16(x16, wt, wst, alpha),
                "fp4_quantize": lambda: fp4kit.fp4_quantize(x16, gs),
            }
            # the same calls with the views made in each call, as an engine writes `w.T` at the call site
            with_views = {
                "mm_fp4": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha),
                "mm_w4a16": lambda: fp4kit.mm_w4a16(x16, wq.T, ws.T, alpha),
            }
            # and with the output passed in (`out=`), as an engine that keeps its activations' buffers calls
            out_buf = (torch.empty((1, n), dtype=torch.bfloat16, device=x16.device) if kind != "numpy"
                       else np.empty((1, n), x16.dtype))
            with_out = {
                "mm_fp4": lambda: fp4kit.mm_fp4(xq, wt, xs, wst, alpha, out_buf.dtype, out_buf),
                "mm_w4a16": lambda: fp4kit.mm_w4a16(x16, wt, wst, alpha, out_buf.dtype, out_buf),
            }
            for op, fn in calls.items():
                try:
                    t_py = per_call_us(fn, args.calls, args.repeats, sync)
                    backend = fp4kit.last_run()["backend"] if fp4kit.last_run() else "?"
                    t_pp = None  # the same call on the Python path, where the compiled one ran it
                    if kind != "numpy" and call_path(fp4kit)["path"] == "compiled":
                        fp4kit._ops._use_native(False)
                        try:
                            t_pp = per_call_us(fn, args.calls, args.repeats, sync)
                        finally:
                            fp4kit._ops._use_native(True)
                    t_c = per_call_us(bare_c(fp4kit, kind, op, x16, xq, xs, wq, ws, n, k, torch), args.calls,
                                      args.repeats, sync)
                    t_views = per_call_us(with_views[op], args.calls, args.repeats, sync) if op in with_views else None
                    t_out = per_call_us(with_out[op], args.calls, args.repeats, sync) if op in with_out else None
                    # the peers beside each point: the host's state can change from one point to the next
                    floor = per_call_us(launch, args.calls, args.repeats, sync) if launch is not None else None
                    peer_linear = None
                    if kind == "torch-cuda":
                        linear = torch.nn.functional.linear
                        peer_linear = per_call_us(lambda: linear(x16, w16), args.calls, args.repeats, sync)
                except Exception as e:  # noqa: BLE001 - report the point that cannot run and go on
                    print("%-11s %-12s %-11s %s" % (kind, op, "%dx%d" % (n, k), "not measured: %s" % e))
                    continue
                ncalls = calls_per_call(fn)
                row = {"kind": kind, "op": op, "n": n, "k": k, "python_us": round(t_py, 2), "c_us": round(t_c, 2),
                       "layer_us": round(t_py - t_c, 2), "calls": ncalls, "backend": backend,
                       "path": call_path(fp4kit)["path"] if kind != "numpy" else "python",
                       "python_path_us": None if t_pp is None else round(t_pp, 2),
                       "python_views_in_call_us": None if t_views is None else round(t_views, 2),
                       "python_out_given_us": None if t_out is None else round(t_out, 2),
                       "torch_linear_us": None if peer_linear is None else round(peer_linear, 2),
                       "empty_launch_us": None if floor is None else round(floor, 2)}
                rows.append(row)
                print("%-11s %-12s %-11s %10.2f %10s %10.2f %10.2f %6d  %-8s %-8s %-12s %-12s %s" % (
                    kind, op, "%dx%d" % (n, k), t_py, "-" if t_pp is None else "%.2f" % t_pp, t_c, t_py - t_c, ncalls,
                    "-" if t_views is None else "%.2f" % t_views, "-" if t_out is None else "%.2f" % t_out,
                    "-" if peer_linear is None else "%.2f" % peer_linear, "-" if floor is None else "%.2f" % floor,
                    backend))
    parts = None
    if args.parts:
        if torch is None:
            print("--parts: not run: PyTorch is not installed")
        else:
            print("pieces of a call, microseconds each:")
            parts = call_parts(torch, args.calls, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"package": os.path.dirname(fp4kit.__file__), "library": fp4kit.library_path(),
                       "calls": args.calls, "repeats": args.repeats, "rows": rows, "parts": parts}, f, indent=1)


if __name__ == "__main__":
    main()
