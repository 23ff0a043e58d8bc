"""What the library can do here: backends(), probe(), tune()."""

import ctypes
import os

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


def _integer(x, what):
    """A Python or NumPy integer as an int (a bool, a float or a string is refused)."""
    n = T.integer(x)
    if n is None:
        raise InvalidArgumentError("%s must be an integer, not %r" % (what, x))
    return n


def _device(device, fn, allowed="None (the host) or a CUDA device ordinal"):
    """device as None or a CUDA ordinal (a Python or NumPy integer >= 0)."""
    if device is None:
        return None
    d = T.integer(device)
    if d is None or d < 0:
        raise InvalidArgumentError("%s: device must be %s, not %r" % (fn, allowed, device))
    return d


def _no_device(device):
    """Why CUDA device `device` cannot be used here (this build has no CUDA, or there is no such
    device), or None when it exists."""
    lib = _lib.LIB
    if _lib.has_symbol("fp4_build_cuda_targets"):
        if not lib.fp4_build_cuda_targets():  # "" in a build without CUDA
            return "this fp4kit was built without CUDA (host backends only); pass device=None for the host"
    if _lib.has_symbol("fp4_probe_device_count"):
        count = lib.fp4_probe_device_count()
        if device >= count:
            return ("there is no CUDA device %d here (the library sees %s)"
                    % (device, "%d device%s" % (count, "" if count == 1 else "s") if count else
                       "none: no GPU, or no CUDA driver"))
    return None


def backends(device=None):
    """Every registered backend with whether it can run on the host (device None) or on CUDA device
    `device`: a list of {'name', 'summary', 'available', 'reason'}. Where the device cannot be used
    (a build without CUDA, no such device) every backend is unavailable with that reason."""
    lib = _lib.LIB
    device = _device(device, "backends")
    missing = _no_device(device) if device is not None else None
    ctx = T.context(device) if device is not None and missing is None else None
    result = []
    for i in range(lib.fp4_backend_count()):
        name = lib.fp4_backend_name(i)
        if missing is not None:
            available, why = False, missing
        else:
            reason = ctypes.create_string_buffer(256)
            available = lib.fp4_backend_available(ctx.handle if ctx else None, name, reason, len(reason)) == _lib.OK
            why = reason.value.decode(errors="replace")
        result.append({
            "name": name.decode(),
            "summary": (lib.fp4_backend_summary(i) or b"").decode(),
            "available": available,
            "reason": why,
        })
    return result


def _need(symbol, what):
    if not _lib.has_symbol(symbol):
        raise UnsupportedError(
            "%s: the loaded libfp4kit (%s, version %s) has no %s; it comes with the capability probe and tuner "
            "of the backend registry" % (what, _lib.LIB_PATH, library_version(), symbol))
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
    ordinal; arch: an architecture name ("sm_120") answered from the architecture table instead.
    Where the device cannot be used (a build without CUDA, no such device) every backend and
    capability is 'no' with that reason."""
    _need("fp4_probe_backend", "probe")
    lib = _lib.LIB
    device = _device(device, "probe")
    devices = []
    for d in range(lib.fp4_probe_device_count()):
        dp = _lib.DeviceProbe()
        _lib.check(lib.fp4_probe_device(d, ctypes.byref(dp)), "fp4_probe_device")
        devices.append({"device": dp.device, "name": dp.name.decode(), "arch": dp.arch.decode(), "cc": dp.cc,
                        "sm_count": dp.sm_count, "memory_bytes": dp.memory_bytes,
                        "driver_version": dp.driver_version, "runtime_version": dp.runtime_version,
                        "cublaslt_version": dp.cublaslt_version, "cudnn_version": dp.cudnn_version,
                        "binary_has_code": bool(dp.binary_has_code)})
    missing = _no_device(device) if device is not None and arch is None else None
    ctx = T.context(device) if device is not None and arch is None and missing is None else None
    records = []
    for i in range(lib.fp4_backend_count()):
        name = lib.fp4_backend_name(i)
        bp = _lib.BackendProbe()
        if arch is not None:
            _lib.check(lib.fp4_probe_backend_arch(str(arch).encode(), name, ctypes.byref(bp)), "fp4_probe_backend_arch")
        elif missing is not None:  # the backend's own facts from the host probe, every answer "no" for the device
            _lib.check(lib.fp4_probe_backend(None, name, ctypes.byref(bp)), "fp4_probe_backend")
            _answer_no(bp, missing)
        else:
            with (ctx.lock if ctx else _NoLock()):
                _lib.check(lib.fp4_probe_backend(ctx.handle if ctx else None, name, ctypes.byref(bp)),
                           "fp4_probe_backend")
        records.append(_probe_record(bp))
    return {"library": library_version(), "devices": devices, "arch": arch, "device": device, "backends": records}


def _answer_no(bp, reason):
    """Marks a probe record unavailable, every capability 'no', for `reason` (found at run time)."""
    text = reason.encode()
    bp.available, bp.reason = 0, text[:_lib.BackendProbe.reason.size - 1]
    for c in range(len(bp.caps)):
        cap = bp.caps[c]
        cap.support, cap.evidence, cap.reason = 0, 1, text[:_lib.Capability.reason.size - 1]  # no; queried


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
    device = _device(device, "reserve_workspace", "a CUDA device ordinal")
    if device is None:
        raise InvalidArgumentError("reserve_workspace: device must be a CUDA device ordinal, not None")
    n = _integer(bytes, "reserve_workspace: bytes")
    reserve = _need("fp4_context_reserve_workspace", "reserve_workspace")
    ctx = T.context(device)
    with ctx.lock:
        _lib.check(reserve(ctx.handle, n), "fp4_context_reserve_workspace")
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
    (the default): CUDA device 0 when the library sees a GPU, else the host. m, the N and K of
    shapes and runs are Python or NumPy integers; cache_path a str or os.PathLike."""
    _need("fp4_tune", "tune")
    if isinstance(device, str) and device == "auto":
        device = _default_tune_device()
    else:
        device = _device(device, "tune", "'auto', None (the host) or a CUDA device ordinal")
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
    try:
        ms = [_integer(m, "tune: m")]
    except InvalidArgumentError:
        try:
            ms = [_integer(mm, "tune: each m") for mm in m]
        except TypeError:
            raise InvalidArgumentError("tune: m must be an integer or a sequence of integers, not %r" % (m,))
    try:
        pairs = [(n, k) for n, k in shapes]
    except (TypeError, ValueError):
        raise InvalidArgumentError("tune: shapes must be a sequence of (N, K) pairs, not %r" % (shapes,))
    keys = [(mm, _integer(n, "tune: N"), _integer(k, "tune: K")) for n, k in pairs for mm in ms]
    runs = _integer(runs, "tune: runs")
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
    try:
        path = os.fsencode(cache_path)
    except TypeError:
        raise InvalidArgumentError("tune: cache_path must be a str, bytes or os.PathLike, not %s"
                                   % type(cache_path).__name__)
    cache = ctypes.c_void_p()
    handle = ctx.handle if ctx else None
    with (ctx.lock if ctx else _NoLock()):
        _lib.check(lib.fp4_tuning_cache_create(handle, ctypes.byref(cache)), "fp4_tuning_cache_create")
        try:
            lib.fp4_tuning_cache_load(cache, path)  # a missing or stale file: start empty
            _lib.check(lib.fp4_tune(handle, arr, len(keys), runs, cache, results, None, None), "fp4_tune")
            _lib.check(lib.fp4_tuning_cache_save(cache, path), "fp4_tuning_cache_save")
        finally:
            lib.fp4_tuning_cache_destroy(cache)
    return [{"m": r.key.m, "n": r.key.n, "k": r.key.k, "backend": r.backend.decode(), "config": r.config.decode(),
             "median_us": r.median_us, "candidates": r.candidates, "rejected": r.rejected, "cut": r.cut}
            for r in results]
