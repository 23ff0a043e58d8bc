"""Per-call plans: the validation, struct building and option resolution of a call, done once per
(op, operand shapes, strides, dtypes, devices, options) key and looked up afterwards.

A call with a key seen before sets the operands' data pointers in the plan's prebuilt C structs and
calls the library: no argument re-validation in Python, no struct or option building, no backend
list, dtype-name or scale-size lookups. The C library still checks every call itself. Plans are
per thread (they hold the structs a call fills), so host calls from several threads never share one.
"""

import threading

import numpy as np

from . import _lib
from . import _tensors as T
from ._lib import InvalidArgumentError

_ndarray = np.ndarray
_tls = threading.local()
_MAX_PLANS = 4096


def plans():
    """This thread's plan dictionary."""
    try:
        return _tls.plans
    except AttributeError:
        d = _tls.plans = {}
        return d


def remember(key, plan):
    d = plans()
    if len(d) >= _MAX_PLANS:
        d.clear()
    d[key] = plan
    return plan


def key(x):
    """What a plan depends on in an array or tensor: kind, shape, strides, dtype and device. None
    for anything else (the call then takes the validating path, which says what is wrong)."""
    if type(x) is _ndarray:
        return (x.shape, x.strides, x.dtype)
    try:
        return (x.shape, x.stride(), x.dtype, x.get_device())
    except (AttributeError, TypeError):
        if isinstance(x, _ndarray):
            return (x.shape, x.strides, x.dtype, type(x))
        return None


def first_key(x):
    """key() of a call's first operand, with its full device (type and index), which the other
    operands' ordinals are then compared against by the plan's own validation."""
    if type(x) is _ndarray:
        return (x.shape, x.strides, x.dtype)
    try:
        return (x.shape, x.stride(), x.dtype, x.device)
    except (AttributeError, TypeError):
        return key(x)


def out_key(x):
    """key() of a caller's output, which must also be writable (a read-only NumPy array is refused)."""
    if x is None:
        return None
    if isinstance(x, _ndarray):
        return (x.shape, x.strides, x.dtype, x.flags.writeable, type(x))
    return key(x)


def scalar_key(x):
    """How a per-tensor scalar (alpha, global scale) is passed: 'n' for None or a number, else the
    array or tensor key. A string is refused here (float('0.5') would accept it)."""
    if x is None or type(x) is float or type(x) is int:
        return "n"
    if isinstance(x, (str, bytes)):
        raise InvalidArgumentError("a scale must be a number or a one-element array/tensor, not %s" % type(x).__name__)
    k = key(x)
    return "n" if k is None else k


def ptr(x):
    """The data pointer of an array or tensor whose plan was built (its kind is known to be right)."""
    if type(x) is _ndarray:
        return x.ctypes.data
    try:
        return x.data_ptr()
    except AttributeError:
        return x.ctypes.data


# ---- scalars ---------------------------------------------------------------------------------------

SCALAR_NUMBER, SCALAR_HOST, SCALAR_DEVICE, SCALAR_DEVICE_CAST = range(4)


def scalar_mode(x, name, device):
    """How the plan passes scalar x for operands on `device` (-1: the host): as a float (a number, a
    host array, a CPU tensor) or, for a one-element CUDA tensor on the operands' device, as a device
    pointer the kernel reads on the GPU (never copied back to the host)."""
    if x is None or not (T.is_torch(x) or isinstance(x, _ndarray)):
        T.scalar(x, name, 1.0)  # a number, or the error saying what it is not
        return SCALAR_NUMBER
    v = T.View(x, name)
    if v.numel != 1:
        raise InvalidArgumentError("%s must be a scalar (one element); got %d elements" % (name, v.numel))
    if v.device < 0:
        if v.dtype not in T.DENSE_DTYPES + ("float64",):
            raise InvalidArgumentError("%s dtype %s is not a floating-point type" % (name, v.dtype))
        return SCALAR_HOST
    if device < 0:
        raise InvalidArgumentError("%s is on %s but the operands are on the host; pass a number or a host scalar"
                                   % (name, v.where()))
    if v.device != device:
        raise InvalidArgumentError("%s is on %s but the operands are on cuda:%d" % (name, v.where(), device))
    if v.dtype == T.F32:
        return SCALAR_DEVICE
    if v.dtype in (T.BF16, T.F16, "float64"):
        return SCALAR_DEVICE_CAST
    raise InvalidArgumentError("%s dtype %s is not a floating-point type" % (name, v.dtype))


def host_scalar(x, mode):
    """The float of a scalar passed by value (modes SCALAR_NUMBER and SCALAR_HOST)."""
    if mode == SCALAR_NUMBER:
        return 1.0 if x is None else float(x)
    return T.scalar(x, "scalar", 1.0)


def device_scalar(x, mode):
    """(pointer, tensor to keep alive for the call) of a CUDA scalar: float32 as it is, other
    floating types converted on the device (stream-ordered, no host synchronization)."""
    if mode == SCALAR_DEVICE_CAST:
        x = x.float()
    return x.data_ptr(), x


# ---- calling the library ------------------------------------------------------------------------------

def call(device, ctx, opts, c_fn, args):
    """Calls c_fn(*args) with opts.stream set to PyTorch's current stream of `device` (host: no
    stream), holding the device context's lock and with `device` current."""
    if device < 0:
        return c_fn(*args)
    raw_stream, current_device = T.cuda_fns()
    with ctx.lock:
        if current_device() == device:
            opts.stream = raw_stream(device) or None
            return c_fn(*args)
        with T._torch().cuda.device(device):
            opts.stream = raw_stream(device) or None
            return c_fn(*args)


def stream_capturing(device):
    """Whether PyTorch's current stream of `device` is capturing a CUDA graph."""
    torch = T._torch()
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - an older PyTorch without the query: assume not capturing
        return False


def reserve_workspace(ctx, size_fn, args, what):
    """Grows the device context's workspace to what a call needs (fp4_*_workspace_size), ahead of
    the call, so a later capture of the same call finds it reserved. Does nothing while the current
    stream captures (the call then fails with the size to reserve if the workspace is too small) or
    when the library has no workspace queries."""
    lib = _lib.LIB
    if ctx is None or size_fn is None or not hasattr(lib, "fp4_context_reserve_workspace"):
        return
    if stream_capturing(ctx.device):
        return
    n = _lib.ctypes.c_size_t()
    _lib.check(size_fn(*args, _lib.ctypes.byref(n)), what)
    with ctx.lock:
        if n.value > lib.fp4_context_workspace_bytes(ctx.handle):
            _lib.check(lib.fp4_context_reserve_workspace(ctx.handle, n.value), "fp4_context_reserve_workspace")
