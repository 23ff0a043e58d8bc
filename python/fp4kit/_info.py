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


def probe(device=None):
    """The capability probe (what `fp4kit probe --json` reports) as a dict: devices, and for every
    backend and capability whether it runs here, with the reason for every 'no'."""
    fn = _need("fp4_probe_json", "probe")
    ctx = T.context(device) if device is not None else None
    handle = ctx.handle if ctx else None
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = ctypes.c_size_t()
        _lib.check(fn(handle, buf, size, ctypes.byref(needed)), "fp4_probe_json")
        if needed.value <= size:
            return json.loads(buf.value.decode())
        size = needed.value


_FORMATS = {"nvfp4": _lib.FORMAT_NVFP4, "mxfp4": _lib.FORMAT_MXFP4}


def tune(shapes, m=(1, 16, 128, 1024), format="nvfp4", out_dtype="bfloat16", cache_path=None, device=0):
    """Times every supported (backend, config) for each GEMM shape and records the winners in the
    tuning cache that backend='auto' reads. shapes: iterable of (N, K); m: one M or several.
    cache_path: None for the library's default cache file. Returns the number of (M, N, K) tuned."""
    fn = _need("fp4_tune", "tune")
    if format not in _FORMATS:
        raise InvalidArgumentError("tune: format must be 'nvfp4' or 'mxfp4', not %r" % (format,))
    dt = T.dtype_name(out_dtype)
    if dt not in T.DENSE_DTYPES:
        raise InvalidArgumentError("tune: out_dtype %s is not bfloat16, float16 or float32" % dt)
    ms = [m] if isinstance(m, int) else list(m)
    ctx = T.context(device)
    path = cache_path.encode() if cache_path else None
    count = 0
    for n, k in shapes:
        for mm in ms:
            with ctx.lock:
                _lib.check(fn(ctx.handle, _FORMATS[format], int(mm), int(n), int(k), T.C_DTYPE[dt], path), "fp4_tune")
            count += 1
    return count
