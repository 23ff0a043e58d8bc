"""NumPy arrays and PyTorch tensors seen as pointers, shapes and element strides, without copies.

PyTorch is optional: it is looked up in sys.modules, so the package never imports it itself; a
tensor can only reach us if the caller imported torch already.
"""

import operator
import sys
import threading

import numpy as np

from . import _lib
from ._lib import InvalidArgumentError

try:  # bfloat16 and the float8 types for NumPy arrays
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    ml_dtypes = None

# Canonical dtype names used throughout the package.
F32, F16, BF16, U8 = "float32", "float16", "bfloat16", "uint8"
BYTE_DTYPES = ("uint8", "int8", "float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn_x2")
DENSE_DTYPES = (F32, BF16, F16)
C_DTYPE = {F32: _lib.DTYPE_F32, BF16: _lib.DTYPE_BF16, F16: _lib.DTYPE_F16}

_ALIASES = {
    "f32": F32, "fp32": F32, "float": F32, "float32": F32,
    "f16": F16, "fp16": F16, "half": F16, "float16": F16,
    "bf16": BF16, "bfloat16": BF16,
    "u8": U8, "uint8": U8,
}


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


_DTYPE_NAMES = {}  # dtype object -> canonical name, filled on first sight (the hot path looks names up)


def dtype_name(d):
    """Canonical name of a torch dtype, NumPy dtype (or type) or string; None for None."""
    if d is None:
        return None
    try:
        return _DTYPE_NAMES[d]
    except (KeyError, TypeError):
        pass
    name = _dtype_name(d)
    try:
        _DTYPE_NAMES[d] = name
    except TypeError:
        pass
    return name


def _dtype_name(d):
    t = _torch()
    if t is not None and isinstance(d, t.dtype):
        name = str(d).replace("torch.", "")
    elif isinstance(d, str):
        name = d
    else:
        try:
            name = np.dtype(d).name
        except TypeError:
            raise InvalidArgumentError("dtype %r is neither a torch dtype, a NumPy dtype nor a name" % (d,))
    return _ALIASES.get(name.lower(), name)


on_first_tensor = None  # set by the package: registers the torch custom ops when a tensor first arrives


class View:
    """One array or tensor: data pointer, shape, strides in elements, dtype name, device."""

    __slots__ = ("obj", "name", "torch", "ptr", "shape", "strides", "dtype", "itemsize", "device")

    def __init__(self, obj, name):
        self.obj, self.name = obj, name
        if is_torch(obj):
            global on_first_tensor
            if on_first_tensor is not None:
                hook, on_first_tensor = on_first_tensor, None
                hook()
            dev = obj.device
            if dev.type == "cuda":
                self.device = dev.index if dev.index is not None else _torch().cuda.current_device()
            elif dev.type == "cpu":
                self.device = -1
            else:
                raise InvalidArgumentError("%s is a tensor on device '%s'; fp4kit takes CPU and CUDA tensors" % (name, dev))
            self.torch = True
            self.ptr = obj.data_ptr()
            self.shape = tuple(obj.shape)
            self.strides = tuple(obj.stride())
            self.dtype = dtype_name(obj.dtype)
            self.itemsize = obj.element_size()
        elif isinstance(obj, np.ndarray):
            if not obj.dtype.isnative:
                raise InvalidArgumentError(_byte_order_message(name, obj.dtype))
            self.torch = False
            self.device = -1
            self.ptr = obj.__array_interface__["data"][0]
            self.shape = tuple(obj.shape)
            self.itemsize = obj.dtype.itemsize
            if any(s % self.itemsize for s in obj.strides):
                raise InvalidArgumentError("%s has strides %s that are not whole elements" % (name, obj.strides))
            self.strides = tuple(s // self.itemsize for s in obj.strides)
            self.dtype = dtype_name(obj.dtype)
        else:
            raise InvalidArgumentError("%s must be a NumPy array or a PyTorch tensor, not %s" % (name, type(obj).__name__))

    # -- where it lives ------------------------------------------------------------------------
    @property
    def memory(self):
        return _lib.MEMORY_DEVICE if self.device >= 0 else _lib.MEMORY_HOST

    def where(self):
        return "cuda:%d" % self.device if self.device >= 0 else ("cpu tensor" if self.torch else "host array")

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    # -- layout checks -------------------------------------------------------------------------
    def is_contiguous(self):
        """C-contiguous (dimensions of size 1 may have any stride)."""
        return _is_contig(self.shape, self.strides)

    def is_transposed_contiguous(self):
        """A 2-D view whose transpose is C-contiguous: the `.T` of a row-major matrix."""
        return len(self.shape) == 2 and _is_contig((self.shape[1], self.shape[0]), (self.strides[1], self.strides[0]))

    def row_stride(self):
        """Elements between rows of a 2-D view with unit column stride, else None."""
        rows, cols = self.shape
        if rows == 0 or cols == 0:
            return cols  # no elements: any stride describes it (NumPy and PyTorch report 0 or anything)
        if cols != 1 and self.strides[1] != 1:
            return None
        ld = self.strides[0] if rows > 1 else cols
        return ld if ld >= cols else None

    def require_dims(self, n, what):
        if len(self.shape) != n:
            raise InvalidArgumentError("%s must be %d-D %s; got shape %s" % (self.name, n, what, list(self.shape)))

    def require_dtype(self, allowed, what):
        if self.dtype not in allowed:
            raise InvalidArgumentError("%s dtype %s is not %s (%s)" % (self.name, self.dtype, " or ".join(allowed), what))

    def require_writable(self):
        if not self.torch and not self.obj.flags.writeable:
            raise InvalidArgumentError("%s is a read-only array" % self.name)


def _byte_order_message(name, dtype):
    return ("%s is a NumPy array of dtype %s in non-native byte order (%r); the library reads values in this "
            "machine's byte order: pass x.astype(x.dtype.newbyteorder('='))" % (name, dtype.name, dtype.str))


def _is_contig(shape, strides):
    if 0 in shape:
        return True  # no elements: any strides describe it (NumPy reports 0 for np.zeros((0, k)))
    expect = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def same_place(*views):
    """All operands on one device (the host, or one CUDA device) and of one kind (NumPy or torch)."""
    first = views[0]
    for v in views[1:]:
        if v.device != first.device:
            raise InvalidArgumentError("%s is on %s but %s is on %s; all operands must be on one device"
                                       % (first.name, first.where(), v.name, v.where()))
    return first.device


def _numpy_dtype(name):
    if name in (F32, F16, U8):
        return np.dtype(name)
    if ml_dtypes is not None and hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    raise InvalidArgumentError("dtype %s has no NumPy equivalent here (install ml_dtypes for bfloat16)" % name)


def empty(like, shape, dtype):
    """A new uninitialized array of the kind and device of view `like`."""
    if like.torch:
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device)
    return np.empty(shape, dtype=_numpy_dtype(dtype))


def zeros(like, shape, dtype):
    if like.torch:
        torch = _torch()
        return torch.zeros(shape, dtype=getattr(torch, dtype), device=like.obj.device)
    return np.zeros(shape, dtype=_numpy_dtype(dtype))


def reshape(obj, shape):
    return obj.reshape(shape)


def integer(x):
    """A Python or NumPy integer as an int; None for anything else (a bool, a float, a string)."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def scalar(x, name, default):
    """A float from None (default), a Python/NumPy number or a one-element array or tensor. Only the
    host helpers (dequantization) read a CUDA tensor back this way; the GEMM and quantize paths pass
    CUDA scalars to the library as device pointers."""
    if x is None:
        return float(default)
    if is_torch(x) or isinstance(x, np.ndarray):
        if not is_torch(x) and not x.dtype.isnative:
            raise InvalidArgumentError(_byte_order_message(name, x.dtype))
        n = x.numel() if is_torch(x) else x.size
        if n != 1:
            raise InvalidArgumentError("%s must be a scalar (one element); got %d elements" % (name, n))
        return float(x.reshape(-1)[0].item() if not is_torch(x) else x.item())
    try:
        return float(x)
    except (TypeError, ValueError):
        raise InvalidArgumentError("%s must be a number or a one-element array/tensor, not %s" % (name, type(x).__name__))


# ---- CUDA: contexts per device, current stream, device guard ----------------------------------------

_contexts = {}
_contexts_lock = threading.Lock()


class _Context:
    """An fp4_context for one device plus the lock that keeps it to one thread at a time (the C
    contract). Contexts live until the process ends: destroying them at interpreter exit could run
    after the CUDA runtime has been torn down."""

    def __init__(self, device):
        handle = _lib.ctypes.c_void_p()
        status = _lib.LIB.fp4_context_create(_lib.ctypes.byref(handle), device)
        if status == _lib.ERR_UNSUPPORTED:  # the library's hint is about its C API; say it in Python terms
            raise _lib.UnsupportedError("CUDA device %d asked for, but this fp4kit was built without CUDA (host "
                                        "backends only): pass NumPy arrays or CPU tensors, or device=None" % device)
        _lib.check(status, "fp4_context_create")
        self.handle = handle
        self.device = device
        self.lock = threading.Lock()


def context(device):
    """The shared context of a CUDA device; None for host work (the C API takes NULL there)."""
    if device < 0:
        return None
    with _contexts_lock:
        ctx = _contexts.get(device)
        if ctx is None:
            ctx = _contexts[device] = _Context(device)
        return ctx


def _raw_stream_fn():
    """A function device -> the current cudaStream_t of PyTorch as an integer: the raw accessor
    TorchInductor uses when present (no Stream object per call), else the public one."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def _current_device_fn():
    torch = _torch()
    return getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


_cuda_fns = []


def cuda_fns():
    """(current raw stream of a device, current device ordinal), looked up once."""
    if not _cuda_fns:
        _cuda_fns.extend((_raw_stream_fn(), _current_device_fn()))
    return _cuda_fns


_pdl_by_device = {}


def default_pdl(device):
    """FlashInfer's enable_pdl=None: on when the device has programmatic dependent launch (SM90+)."""
    if device < 0:
        return False
    pdl = _pdl_by_device.get(device)
    if pdl is None:
        major, _ = _torch().cuda.get_device_capability(device)
        pdl = _pdl_by_device[device] = major >= 9
    return pdl
