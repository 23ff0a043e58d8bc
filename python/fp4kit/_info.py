"""What the library can do here: backends(), probe(), tune()."""

import ctypes
import json

from . import _lib
from . import _tensors as T
from ._lib import InvalidArgumentError, UnsupportedError


def library_version():
    """The loaded libfp4kit's version string."""
    return _lib.LIB.fp4_version().decode()


def library_path():
    """The file libfp4kit was loaded from (the bundled copy, or FP4KIT_LIB)."""
    return _lib.LIB_PATH


def call_path():
    """Which path the eager calls of mm_fp4, mm_w4a16 and fp4_quantize on PyTorch tensors take:
    {'path': 'compiled' or 'python', 'why': '' or why the compiled path (fp4kit._native, built with
    the library where Python's headers are found) does not run, 'module': its file or None}. NumPy
    arrays always take the Python path; the results are the same bits either way."""
    from . import _ops
    from . import _plan
    mod = _lib.NATIVE
    if mod is None:
        why = _lib.NATIVE_WHY
    elif not _plan.native_enabled:
        why = "turned off (fp4kit._ops._use_native(False))"
    elif _ops._torch_ops is None:
        why = ("PyTorch has not been seen yet (the compiled path is set up on the first call with a tensor, "
               "or by register_torch_ops())")
    else:
        why = ""
    return {"path": "python" if why else "compiled", "why": why,
            "module": getattr(mod, "__file__", None) if mod is not None else None}


def backends(device=None):
    """Every registered backend with whether it can run on the host (device None) or on CUDA device
    `device`: a list of {'name', 'summary', 'available', 'reason'}."""
    lib = _lib.LIB
    if device is not None and (not isinstance(device, int) or device < 0):
        raise InvalidArgumentError("backends: device must be None (the host) or a CUDA device ordinal, not %r" % (device,))
    ctx = T.context(device) if device is not None else None
    result = []
    for i in range(lib.fp4_backend_count()):
        name = lib.fp4_backend_name(i)
        reason = ctypes.create_string_buffer(256)
        status = lib.fp4_backend_available(ctx.handle if ctx else None, name, reason, len(reason))
        result.append({
            "name": name.decode(),
            "summary": (lib.fp4_backend_summary(i) or b"").decode(),
            "available": status == _lib.OK,
            "reason": reason.value.decode(errors="replace"),
        })
    return result


def _need(symbol, what):
    if not _lib.has_symbol(symbol):
        raise UnsupportedError(
            "%s: the loaded libfp4kit (%s, version %s) has no %s; it comes with the capability probe and tuner "
            "of the backend registry" % (what, _lib.LIB_PATH, library_version(), symbol), _lib.ERR_UNSUPPORTED)
    return getattr(_lib.LIB, symbol)


def _probe_record(bp):
    lib = _lib.LIB
    caps = {}
    for c in range(len(bp.caps)):
        cap = bp.caps[c]
        caps[lib.fp4_cap_name(c).decode()] = {
            "support": lib.fp4_support_name(cap.support).decode(),
            "evidence": lib.fp4_evidence_name(cap.evidence).decode(),
            "reason": cap.reason.decode(errors="replace"),
        }
    return {
        "backend": bp.backend.decode(),
        "available": lib.fp4_support_name(bp.available).decode(),
        "reason": bp.reason.decode(errors="replace"),
        "device_memory": bool(bp.device_memory),
        "capabilities": caps,
    }


def probe(device=None, arch=None):
    """The capability probe as a dict: the CUDA devices, and for every backend and capability
    (nvfp4 w4a4, mxfp4 w4a4, w4a16, grouped/moe, pdl) whether it runs, how that was established
    (table, queried, executed) and the reason for every 'no'. device: None for the host, or a CUDA
    ordinal; arch: an architecture name ("sm_120") answered from the architecture table instead."""
    _need("fp4_probe_backend", "probe")
    lib = _lib.LIB
    devices = []
    for d in range(lib.fp4_probe_device_count()):
        dp = _lib.DeviceProbe()
        _lib.check(lib.fp4_probe_device(d, ctypes.byref(dp)), "fp4_probe_device")
        devices.append({"device": dp.device, "name": dp.name.decode(), "arch": dp.arch.decode(), "cc": dp.cc,
                        "sm_count": dp.sm_count, "memory_bytes": dp.memory_bytes,
                        "driver_version": dp.driver_version, "runtime_version": dp.runtime_version,
                        "cublaslt_version": dp.cublaslt_version, "cudnn_version": dp.cudnn_version,
                        "binary_has_code": bool(dp.binary_has_code)})
    ctx = T.context(device) if device is not None else None
    records = []
    for i in range(lib.fp4_backend_count()):
        name = lib.fp4_backend_name(i)
        bp = _lib.BackendProbe()
        if arch is not None:
            _lib.check(lib.fp4_probe_backend_arch(str(arch).encode(), name, ctypes.byref(bp)), "fp4_probe_backend_arch")
        else:
            with (ctx.lock if ctx else _NoLock()):
                _lib.check(lib.fp4_probe_backend(ctx.handle if ctx else None, name, ctypes.byref(bp)),
                           "fp4_probe_backend")
        records.append(_probe_record(bp))
    return {"library": library_version(), "devices": devices, "arch": arch, "device": device, "backends": records}


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_FORMATS = {"nvfp4": _lib.FORMAT_NVFP4, "mxfp4": _lib.FORMAT_MXFP4}
_OPS = {"w4a4": 0, "w4a16": 1}


def reserve_workspace(device, bytes):
    """Reserves at least `bytes` of CUDA device `device`'s workspace ahead of a CUDA-graph capture
    (the calls also reserve what they need on their first eager run with a shape); returns the bytes
    the workspace holds."""
    if not isinstance(device, int) or device < 0:
        raise InvalidArgumentError("reserve_workspace: device must be a CUDA device ordinal, not %r" % (device,))
    reserve = _need("fp4_context_reserve_workspace", "reserve_workspace")
    ctx = T.context(device)
    with ctx.lock:
        _lib.check(reserve(ctx.handle, int(bytes)), "fp4_context_reserve_workspace")
        return _lib.LIB.fp4_context_workspace_bytes(ctx.handle)


def _default_tune_device():
    """tune()'s device when none is given: CUDA device 0 when the library sees one, else the host."""
    count = _lib.LIB.fp4_probe_device_count() if _lib.has_symbol("fp4_probe_device_count") else 0
    return 0 if count > 0 else None


def tune(shapes, m=(1, 16, 128, 1024), format="nvfp4", op="w4a4", out_dtype="bfloat16", a_dtype="bfloat16",
         runs=20, cache_path=None, device="auto"):
    """Times every supported (backend, config) for each GEMM shape (N, K) at each M bucket and
    records the winners in the tuning cache that backend='auto' reads (merged with the cache file
    already there when it belongs to this library version and device). cache_path: None for the
    library's default file. Returns a list of dicts (m, n, k, backend, config, median_us,
    candidates, rejected, cut). device: a CUDA ordinal, None to tune the host backends, or 'auto'
    (the default): CUDA device 0 when the library sees a GPU, else the host."""
    _need("fp4_tune", "tune")
    if device == "auto":
        device = _default_tune_device()
    elif device is not None and (not isinstance(device, int) or device < 0):
        raise InvalidArgumentError("tune: device must be 'auto', None (the host) or a CUDA device ordinal, not %r"
                                   % (device,))
    lib = _lib.LIB
    if format not in _FORMATS:
        raise InvalidArgumentError("tune: format must be 'nvfp4' or 'mxfp4', not %r" % (format,))
    if op not in _OPS:
        raise InvalidArgumentError("tune: op must be 'w4a4' or 'w4a16', not %r" % (op,))
    dt = T.dtype_name(out_dtype)
    if dt not in T.DENSE_DTYPES:
        raise InvalidArgumentError("tune: out_dtype %s is not bfloat16, float16 or float32" % dt)
    at = T.dtype_name(a_dtype)
    if op == "w4a16" and at not in T.DENSE_DTYPES:
        raise InvalidArgumentError("tune: a_dtype %s is not bfloat16, float16 or float32" % at)
    ms = [m] if isinstance(m, int) else list(m)
    keys = [(int(mm), int(n), int(k)) for n, k in shapes for mm in ms]
    if not keys:
        raise InvalidArgumentError("tune: no shapes given")
    arr = (_lib.TuneKey * len(keys))()
    for i, (mm, n, k) in enumerate(keys):
        arr[i] = _lib.TuneKey(_OPS[op], _FORMATS[format], T.C_DTYPE[at] if op == "w4a16" else _lib.DTYPE_E2M1X2,
                              T.C_DTYPE[dt], mm, n, k)
    results = (_lib.TuneResult * len(keys))()
    ctx = T.context(device) if device is not None else None
    if cache_path is None:
        buf = ctypes.create_string_buffer(4096)
        _lib.check(lib.fp4_tuning_cache_default_path(buf, len(buf)), "fp4_tuning_cache_default_path")
        cache_path = buf.value.decode()
    cache = ctypes.c_void_p()
    handle = ctx.handle if ctx else None
    with (ctx.lock if ctx else _NoLock()):
        _lib.check(lib.fp4_tuning_cache_create(handle, ctypes.byref(cache)), "fp4_tuning_cache_create")
        try:
            lib.fp4_tuning_cache_load(cache, cache_path.encode())  # a missing or stale file: start empty
            _lib.check(lib.fp4_tune(handle, arr, len(keys), int(runs), cache, results, None, None), "fp4_tune")
            _lib.check(lib.fp4_tuning_cache_save(cache, cache_path.encode()), "fp4_tuning_cache_save")
        finally:
            lib.fp4_tuning_cache_destroy(cache)
    return [{"m": r.key.m, "n": r.key.n, "k": r.key.k, "backend": r.backend.decode(), "config": r.config.decode(),
             "median_us": r.median_us, "candidates": r.candidates, "rejected": r.rejected, "cut": r.cut}
            for r in results]
