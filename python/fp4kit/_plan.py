"""Per-call plans: the validation, struct building and option resolution of a call, done once per
(op, operand shapes, strides, dtypes, devices, options) key and looked up afterwards.

A call with a key seen before sets the operands' data pointers in the plan's prebuilt C structs and
calls the library: no argument re-validation in Python, no struct or option building, no backend
list, dtype-name or scale-size lookups. The C library still checks every call itself. Plans are
per thread (they hold the structs a call fills), so host calls from several threads never share one.

The hot path is written for few Python frames: the public function builds a flat key from the
tensors' attributes itself, run() fills the structs, invoke() makes the call through an entry point
without argtypes (its arguments are prebuilt ctypes objects: byref structs, c_void_p, c_float), so
ctypes converts nothing against a prototype.
"""

import ctypes
import threading

import numpy as np

from . import _lib
from . import _tensors as T
from ._lib import InvalidArgumentError

_ndarray = np.ndarray
tls = threading.local()  # .plans: this thread's {key: plan}
_MAX_PLANS = 4096
last = threading.local()  # .info: the fp4_run_info of this thread's last call (fp4kit.last_run)


def plans():
    """This thread's plan dictionary."""
    try:
        return tls.plans
    except AttributeError:
        d = tls.plans = {}
        return d


def remember(key, plan):
    d = plans()
    if len(d) >= _MAX_PLANS:
        d.clear()
    d[key] = plan
    return plan


def forget_plans():
    """Drops this thread's plans, the compiled path's included."""
    plans().clear()
    if _lib.NATIVE is not None:
        _lib.NATIVE.forget()


# ---- the compiled path's plans ------------------------------------------------------------------------

native_enabled = True  # _ops._use_native() turns it off to compare the two paths


def remember_native(key, plan):
    """Gives the compiled path this thread's plan for its key: plan.native(), or None (the call
    stays on the Python path)."""
    _lib.NATIVE.remember(key, plan.native())


def native_plan(plan, kind, first, qmat, out, scalar_mode, template, sf_template):
    """A _native.Plan over a Python plan's structs (the Python plan stays alive with it). template:
    the output template of a GEMM that allocates its output (None: the caller passes `out`), or of
    the codes of a quantization, whose scales' template is sf_template."""
    addr = ctypes.addressof
    return _lib.NATIVE.Plan(
        kind=kind, fn=ctypes.cast(plan.fn, ctypes.c_void_p).value, ctx=plan.ctx.handle.value if plan.ctx else None,
        first=addr(first), qmat=addr(qmat), out=addr(out) if out is not None else None, opts=addr(plan.opts),
        scalar=addr(plan.scalar), scalar_mode=scalar_mode, device=plan.device, lock=plan.lock, info=plan.info,
        template=template, sf_template=sf_template, name=plan.name, owner=plan)


def output_template(torch, shape, dtype, device):
    """What a plan allocates its outputs from: one element expanded to the output's shape (no memory
    beyond the element), so that torch.empty_like(template) allocates a contiguous tensor of that
    shape, dtype and device. empty_like takes one argument, which PyTorch parses faster than
    new_empty's shape and dtype: 1.7 against 2.4 us a call on a fast host, 3.5 against 5.0 on a slow
    one (bench/results/h200/2026-12-02-host-cost-new-empty/, ../2026-12-04-compiled-call-path/)."""
    return torch.empty((1,), dtype=dtype, device=device).expand(shape)


class _OTHER:
    """The tag of key() for an object that is neither an array nor a tensor."""


def key(x):
    """What a plan depends on in an array or tensor: kind, shape, strides, dtype and device. For
    anything else its type, under a tag no array's key has: such a key never shares a plan with an
    array's, with None's or with a number's, so an argument of another type is validated on its own
    (and, being refused there, on every call)."""
    if type(x) is _ndarray:
        return (x.shape, x.strides, x.dtype)
    try:
        return (x.shape, x.stride(), x.dtype, x.get_device())
    except (AttributeError, TypeError):
        if isinstance(x, _ndarray):
            return (x.shape, x.strides, x.dtype, type(x))
        return (_OTHER, type(x))


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
    return key(x)  # a tensor's key, or the type of anything else (validated, and refused, on its own)


def scalar_key(x, name="a scale"):
    """How a per-tensor scalar (alpha, global scale) is passed: 'n' for None, a float or an int,
    else key(): an array's or tensor's, or for any other object its type (a NumPy scalar, a list),
    which the plan then validates as it would validate that object. A string is refused here
    (float('0.5') would accept it), naming the argument `name`."""
    if x is None or type(x) is float or type(x) is int:
        return "n"
    if isinstance(x, (str, bytes)):
        raise InvalidArgumentError("%s must be a number or a one-element array/tensor, not %s"
                                   % (name, type(x).__name__))
    return key(x)


def ptr(x):
    """The data pointer of an array or tensor whose plan was built (its kind is known to be right)."""
    if type(x) is _ndarray:
        return x.ctypes.data
    try:
        return x.data_ptr()
    except AttributeError:
        return x.ctypes.data


# ---- scalars ---------------------------------------------------------------------------------------

SCALAR_NUMBER, SCALAR_HOST, SCALAR_DEVICE, SCALAR_DEVICE_CAST, SCALAR_UNUSED = range(5)


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
    """The float of a scalar passed by value (modes SCALAR_NUMBER and SCALAR_HOST). A number of a
    type whose plan was built converts as the one the plan was built with did; one that does not
    (a type that converts some values only) gets the validation's error."""
    if mode == SCALAR_NUMBER:
        if x is None:
            return 1.0
        try:
            return float(x)
        except (TypeError, ValueError):
            return T.scalar(x, "scalar", 1.0)
    return T.scalar(x, "scalar", 1.0)


def set_scalar(plan, x, mode, device_field):
    """Puts scalar x where the plan's call reads it: the by-value c_float (plan.scalar) or the
    options' device pointer field. Returns what must stay alive until the call is queued (a float32
    copy of a bf16/f16/f64 CUDA scalar, converted on the device: stream-ordered, no host sync)."""
    if mode == SCALAR_DEVICE:
        setattr(plan.opts, device_field, x.data_ptr())
    elif mode == SCALAR_DEVICE_CAST:
        x = x.float()
        setattr(plan.opts, device_field, x.data_ptr())
        return x
    elif mode != SCALAR_UNUSED:
        plan.scalar.value = host_scalar(x, mode)
    return None


# ---- calling the library ------------------------------------------------------------------------------

_raw = {}


def raw_function(name):
    """A second function object of the library's entry point `name`, without argtypes (restype int):
    the hot call, whose arguments are prebuilt ctypes objects."""
    fn = _raw.get(name)
    if fn is None:
        fn = _raw[name] = _lib.LIB[name]
        fn.restype = ctypes.c_int
    return fn


class Plan:
    """What every plan's call needs: the entry point and its argument tuple, the options and run
    info, and for a CUDA device the context's lock and PyTorch's stream and device queries."""

    __slots__ = ("device", "ctx", "lock", "raw_stream", "get_device", "fn", "name", "args", "opts", "info", "scalar",
                 "torch")

    def setup(self, device, name, backend_bytes, enable_pdl):
        """Options, info, context and entry point of a plan on `device` (-1: the host)."""
        self.device, self.name = device, name
        self.fn = raw_function(name)
        self.info = _lib.RunInfo()
        opts = self.opts = _lib.Options()
        opts.backend = backend_bytes
        opts.enable_pdl = 1 if (T.default_pdl(device) if enable_pdl is None else enable_pdl) else 0
        opts.info = ctypes.pointer(self.info)
        self.scalar = ctypes.c_float(1.0)
        ctx = self.ctx = T.context(device)
        self.lock = ctx.lock if ctx is not None else None
        if device >= 0:
            self.raw_stream, self.get_device = T.cuda_fns()
        return ctx


def invoke(plan):
    """Calls the plan's entry point with opts.stream set to PyTorch's current stream of its device
    (host: no stream), holding the device context's lock and with the device current; raises the
    library's error."""
    device = plan.device
    if device < 0:
        status = plan.fn(*plan.args)
    else:
        with plan.lock:
            if plan.get_device() == device:
                plan.opts.stream = plan.raw_stream(device)
                status = plan.fn(*plan.args)
            else:
                with T._torch().cuda.device(device):
                    plan.opts.stream = plan.raw_stream(device)
                    status = plan.fn(*plan.args)
    if status:
        _lib.check(status, plan.name)
    last.info = plan.info


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
