"""The operations: FlashInfer-compatible quantize / GEMM / scale helpers and fp4kit's W4A16 GEMM.

Every function takes NumPy arrays (host) or PyTorch tensors (CPU or CUDA), passes their memory to
libfp4kit without copying (except where FlashInfer itself copies to the host, noted per function),
and returns the kind of object it was given.
"""

import ctypes
import enum

import numpy as np

from . import _lib
from . import _plan as P
from . import _tensors as T
from ._info import _integer
from ._lib import InvalidArgumentError, UnsupportedError

# Backends of FlashInfer's mm_fp4 that fp4kit may not have; asking for one that is not registered
# here is an unsupported request, not a typo.
FLASHINFER_BACKENDS = ("cudnn", "trtllm", "cutlass", "cute-dsl", "b12x")

_FP4_BYTES = ("uint8", "int8", "float4_e2m1fn_x2")
_SCALE_BYTES = {
    _lib.FORMAT_NVFP4: ("uint8", "float8_e4m3fn"),
    _lib.FORMAT_MXFP4: ("uint8", "float8_e8m0fnu"),
}
_FORMAT_NAME = {_lib.FORMAT_NVFP4: "NVFP4", _lib.FORMAT_MXFP4: "MXFP4"}
_BLOCK = {_lib.FORMAT_NVFP4: 16, _lib.FORMAT_MXFP4: 32}
_LAYOUT_NAME = {_lib.LAYOUT_LINEAR: "linear", _lib.LAYOUT_128X4: "128x4", _lib.LAYOUT_8X4: "8x4"}
_LAYOUT_BY_NAME = {v: k for k, v in _LAYOUT_NAME.items()}


class SfLayout(enum.IntEnum):
    """Layout of block scale factors (FlashInfer's IntEnum, same member names and values: a member
    compares equal to its value, as FlashInfer callers rely on)."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


_SF_LAYOUT_C = {SfLayout.layout_128x4: _lib.LAYOUT_128X4, SfLayout.layout_8x4: _lib.LAYOUT_8X4,
                SfLayout.layout_linear: _lib.LAYOUT_LINEAR}

# ---- what ran last on this thread --------------------------------------------------------------------

def last_run():
    """What the last quantize/GEMM/MoE call on this thread ran: {'backend', 'config', 'pdl', 'note'}
    (None before the first call)."""
    info = getattr(P.last, "info", None)
    if info is None:
        return None
    return {
        "backend": info.backend.decode(errors="replace"),
        "config": info.config.decode(errors="replace"),
        "pdl": bool(info.pdl),
        "note": info.note.decode(errors="replace"),
    }


# ---- shared argument handling -------------------------------------------------------------------------

_registered = []


def registered_backends():
    """The library's backend names (the registry is fixed once the library is loaded)."""
    if not _registered:
        lib = _lib.LIB
        _registered.extend(lib.fp4_backend_name(i).decode() for i in range(lib.fp4_backend_count()))
    return list(_registered)


def _backend_bytes(backend, fn):
    if backend is None or backend == "auto":
        return None
    if not isinstance(backend, str):
        raise InvalidArgumentError("%s: backend must be a string, not %s" % (fn, type(backend).__name__))
    names = registered_backends()
    if backend not in names and backend in FLASHINFER_BACKENDS:
        raise UnsupportedError(
            "%s: backend '%s' is a FlashInfer backend that fp4kit does not provide; fp4kit backends: %s "
            "(or 'auto', which picks the best one that can run the problem)" % (fn, backend, ", ".join(names)))
    return backend.encode()


# How each function spells the format flag, per format: mm_fp4's use_nvfp4 is True for NVFP4.
_FORMAT_ARG_VALUE = {
    "use_nvfp4": {_lib.FORMAT_NVFP4: True, _lib.FORMAT_MXFP4: False},
    "sf_use_ue8m0": {_lib.FORMAT_NVFP4: False, _lib.FORMAT_MXFP4: True},
    "ufp8_type": {_lib.FORMAT_NVFP4: 1, _lib.FORMAT_MXFP4: 0},
}


def _format(block_size, use_ue8m0, fn, block_arg="block_size", fmt_arg="use_nvfp4", other_block=UnsupportedError):
    """The format of (block size, scale flag). other_block: the error for a block size that is
    neither 16 nor 32, as FlashInfer raises it for the function: NotImplementedError from its
    quantizers, ValueError from mm_fp4."""
    if block_size not in (16, 32):
        raise other_block("%s: %s can only be 16 or 32, got %r" % (fn, block_arg, block_size))
    fmt = _lib.FORMAT_MXFP4 if use_ue8m0 else _lib.FORMAT_NVFP4
    if _BLOCK[fmt] != block_size:
        raise InvalidArgumentError(
            "%s: %s=%d does not match %s=%s: NVFP4 has E4M3 scales per 16 elements, MXFP4 UE8M0 scales per 32"
            % (fn, block_arg, block_size, fmt_arg, _FORMAT_ARG_VALUE[fmt_arg][fmt]))
    return fmt


_scales_sizes = {}


def scales_size(fmt, layout, rows, cols, fn="fp4_scales_size"):
    """Bytes of the scales of a [rows, cols] matrix (fp4_scales_size); 0 for no rows (an empty
    batch has no scales: the 128x4 and 8x4 paddings of 0 rows are 0 rows)."""
    k = (fmt, layout, rows, cols)
    n = _scales_sizes.get(k)
    if n is None:
        if rows == 0:
            return 0
        if cols <= 0:  # the library's message would name its own function and "matrix cols"
            raise InvalidArgumentError("%s: K = %d: an FP4 matrix needs at least one block of %d columns"
                                       % (fn, cols, _BLOCK[fmt]))
        c = ctypes.c_size_t()
        _lib.check(_lib.LIB.fp4_scales_size(fmt, layout, rows, cols, ctypes.byref(c)), "fp4_scales_size")
        n = _scales_sizes[k] = c.value
    return n


def scale_shape(fmt, layout, rows, cols):
    """The 2-D shape of the scales of a [rows, cols] matrix as fp4_quantize returns them, FlashInfer's:
    linear [rows, K/block]; 128x4 [roundup(rows, 128), roundup(K/block, 4)]; 8x4 [roundup(rows, 8),
    roundup(K/block, 4)]: the padded grid, whatever rows is. Integer arithmetic only, so the fake
    implementation of the torch op computes the same shape on symbolic sizes."""
    c = cols // _BLOCK[fmt]
    if layout == _lib.LAYOUT_LINEAR:
        return (rows, c)
    pad = 128 if layout == _lib.LAYOUT_128X4 else 8
    return ((rows + pad - 1) // pad * pad, (c + 3) // 4 * 4)


def _fp4_rowmajor(v, fn):
    """A row-major [rows, K/2] packed FP4 matrix."""
    v.require_dims(2, "packed FP4 data [rows, K/2]")
    v.require_dtype(_FP4_BYTES, "packed FP4 codes, two per byte")
    if not v.is_contiguous():
        raise InvalidArgumentError("%s: packed FP4 data [%d, %d] must be row-major and contiguous (strides %s)"
                                   % (v.name, v.shape[0], v.shape[1], list(v.strides)))
    return v.shape[0], 2 * v.shape[1]


def _fp4_weight_t(v, fn):
    """b = w_q.T: the [K/2, N] transposed view of the row-major [N, K/2] weight; returns (N, K)."""
    v.require_dims(2, "transposed view [K/2, N] of the weight w_q [N, K/2] (pass w_q.T)")
    v.require_dtype(_FP4_BYTES, "packed FP4 codes, two per byte")
    if not v.is_transposed_contiguous():
        raise InvalidArgumentError(
            "%s: %s must be the transposed view w_q.T of the row-major [N, K/2] weight (column-major [K/2, N]); "
            "got shape %s with strides %s" % (fn, v.name, list(v.shape), list(v.strides)))
    return v.shape[1], 2 * v.shape[0]


def _weight_n(vb, va, k, a_dims, block_size, fn):
    """N of the weight view b = w_q.T, checked against the K of the activations a."""
    n, kb = _fp4_weight_t(vb, fn)
    if kb != k:
        raise InvalidArgumentError("%s: a is %s = %s but b is [K/2, N] = %s: K differs (%d vs %d)"
                                   % (fn, a_dims, list(va.shape), list(vb.shape), k, kb))
    if k % block_size:
        raise InvalidArgumentError("%s: K = %d is not a multiple of the block size %d" % (fn, k, block_size))
    return n


def _layout_by_shape(v, fmt, layout, rows, cols, fn, fix):
    """Refuses a 2-D scale tensor whose shape is that of another layout: [rows, K/block] linear
    scales (a checkpoint's weight_scale) where the padded 128x4 [roundup(rows, 128),
    roundup(K/block, 4)] is expected, the reverse, or the 8x4 layout's [roundup(rows, 8), ...] for
    the 128x4 one and back. Where the shapes coincide the bytes alone cannot tell, and the byte
    count decides. fix: {layout seen: what to do instead}."""
    if len(v.shape) != 2:
        return
    c = cols // _BLOCK[fmt]
    cp = (c + 3) // 4 * 4
    shapes = {_lib.LAYOUT_LINEAR: (rows, c), _lib.LAYOUT_128X4: ((rows + 127) // 128 * 128, cp),
              _lib.LAYOUT_8X4: ((rows + 7) // 8 * 8, cp)}
    seen = (tuple(v.shape), tuple(v.shape[::-1]))
    if shapes[layout] in seen:
        return
    other = next((lay for lay, shape in shapes.items() if lay != layout and shape in seen), None)
    if other is None:
        return
    if layout == _lib.LAYOUT_128X4 and other == _lib.LAYOUT_LINEAR:
        raise InvalidArgumentError(
            "%s: %s has shape %s, the shape of linear (unswizzled) scales of a [%d, %d] matrix ([rows, K/%d]), "
            "but the 128x4 swizzled layout is expected (padded shape %s); %s"
            % (fn, v.name, list(v.shape), rows, cols, _BLOCK[fmt], list(shapes[layout]), fix.get(other, "")))
    if layout == _lib.LAYOUT_LINEAR and other == _lib.LAYOUT_128X4:
        raise InvalidArgumentError(
            "%s: %s has shape %s, the padded shape of 128x4 swizzled scales of a [%d, %d] matrix, but linear "
            "scales [rows, K/%d] = %s are expected; %s"
            % (fn, v.name, list(v.shape), rows, cols, _BLOCK[fmt], list(shapes[layout]), fix.get(other, "")))
    raise InvalidArgumentError(
        "%s: %s has shape %s, the %s shape of %s scales of a [%d, %d] matrix, but the %s layout is expected "
        "(shape %s)%s" % (fn, v.name, list(v.shape), "padded" if other != _lib.LAYOUT_LINEAR else "unpadded",
                          _LAYOUT_NAME[other], rows, cols, _LAYOUT_NAME[layout], list(shapes[layout]),
                          "; " + fix[other] if other in fix else ""))


def _fix_by_size(numel, fmt, rows, cols, fn, fix):
    """The hint appended to a size refusal: what to do (from fix) when the byte count is that of
    another layout, which a flat buffer tells where its shape cannot; else an empty string."""
    for lay, what in (fix or {}).items():
        if rows and scales_size(fmt, lay, rows, cols, fn) == numel:
            return "; it holds the bytes of %s scales: %s" % (_LAYOUT_NAME[lay], what)
    return ""


def _scales(v, fmt, layout, rows, cols, fn, fix=None):
    """A scale buffer: any shape whose memory is one contiguous block (the view or its transpose),
    holding exactly the bytes of [rows, cols] scales in the layout. fix: see _layout_by_shape."""
    v.require_dtype(_SCALE_BYTES[fmt], "%s block scales" % _FORMAT_NAME[fmt])
    if fix:
        _layout_by_shape(v, fmt, layout, rows, cols, fn, fix)
    if not (v.is_contiguous() or v.is_transposed_contiguous()):
        raise InvalidArgumentError("%s: %s must be contiguous or the transpose of a contiguous tensor (strides %s)"
                                   % (fn, v.name, list(v.strides)))
    need = scales_size(fmt, layout, rows, cols, fn)
    if v.numel != need:
        bs = _BLOCK[fmt]
        raise InvalidArgumentError(
            "%s: %s holds %d bytes but the %s scales of a [%d, %d] matrix in the %s layout take %d "
            "(%d rows x %d scale columns%s)%s"
            % (fn, v.name, v.numel, _FORMAT_NAME[fmt], rows, cols, _LAYOUT_NAME[layout], need, rows, cols // bs,
               ", padded to 128 x 4" if layout == _lib.LAYOUT_128X4 else ", padded to 8 x 4" if layout == _lib.LAYOUT_8X4 else "",
               _fix_by_size(v.numel, fmt, rows, cols, fn, fix)))
    return v.ptr


def _dense_rows(v, what, fn):
    """A 2-D dense (bf16/fp16/fp32) operand with unit column stride: its row stride."""
    v.require_dims(2, what)
    v.require_dtype(T.DENSE_DTYPES, what)
    ld = v.row_stride()
    if ld is None:
        raise InvalidArgumentError("%s: %s must be row-major with unit column stride (strides %s)"
                                   % (fn, v.name, list(v.strides)))
    return ld


def _qmatrix(data_ptr, scales_ptr, rows, cols, fmt, layout, multiplier, memory):
    q = _lib.QMatrix()
    q.data, q.scales, q.rows, q.cols = data_ptr, scales_ptr, rows, cols
    q.format, q.layout, q.multiplier, q.memory = fmt, layout, multiplier, memory
    return q


def _matrix(v, rows, cols, ld):
    m = _lib.Matrix()
    m.data, m.rows, m.cols, m.ld = v.ptr, rows, cols, ld
    m.dtype, m.memory = T.C_DTYPE[v.dtype], v.memory
    return m


def _output(out, out_dtype, like, m, n, default_dtype, fn):
    """The [m, n] output: the caller's `out` (checked) or a new one of like's kind and device."""
    try:
        want = T.dtype_name(out_dtype)
    except InvalidArgumentError:
        raise InvalidArgumentError("%s: out_dtype %r is not a dtype (bfloat16, float16 or float32)" % (fn, out_dtype))
    if want is not None and want not in T.DENSE_DTYPES:
        raise InvalidArgumentError("%s: out_dtype %s is not bfloat16, float16 or float32" % (fn, want))
    if out is None:
        out = T.empty(like, (m, n), want or default_dtype)
    vo = T.View(out, "out")
    vo.require_dims(2, "[M, N]")
    vo.require_dtype(T.DENSE_DTYPES, "the GEMM output")
    vo.require_writable()
    if want is not None and vo.dtype != want:
        raise InvalidArgumentError("%s: out is %s but out_dtype is %s" % (fn, vo.dtype, want))
    if vo.shape != (m, n):
        raise InvalidArgumentError("%s: out has shape %s but must be [M, N] = [%d, %d]" % (fn, list(vo.shape), m, n))
    if vo.torch != like.torch:
        raise InvalidArgumentError("%s: out must be a %s like the inputs" % (fn, "tensor" if like.torch else "NumPy array"))
    ld = vo.row_stride()
    if ld is None:
        raise InvalidArgumentError("%s: out must be row-major with unit column stride (strides %s)" % (fn, list(vo.strides)))
    return out, vo, ld


# ---- torch.compile hook -------------------------------------------------------------------------------
#
# While PyTorch compiles (TorchDynamo traces), the public functions hand CUDA/CPU tensors to the
# torch.library custom ops torch.ops.fp4kit.* (registered by _torch_ops when PyTorch is present),
# which the compiler keeps as opaque calls with fake (meta) implementations. Eager calls go to the
# plans below directly: the PyTorch dispatcher would cost more than the whole call.

def _not_compiling():
    return False


class _NoTensor:
    """Stands for torch.Tensor until PyTorch is seen: nothing is of this type."""


_compiling = _not_compiling
_torch_ops = None
_Tensor = _NoTensor


def _set_torch_ops(module, is_compiling, tensor_type):
    global _compiling, _torch_ops, _Tensor
    _torch_ops, _compiling, _Tensor = module, is_compiling, tensor_type
    _setup_native(tensor_type)


# ---- the compiled path ------------------------------------------------------------------------------------
#
# With PyTorch, eager calls on tensors go to fp4kit._native (_native.c): the same key, plan lookup,
# allocation and library call in C, 2-3.5 us less host time a call than the Python below on the H200
# machine's host (bench/results/h200/2026-12-04-compiled-call-path/). A call it has no plan for comes
# back here with the key it built (`native_key`); the plan made here is handed to it
# (P.remember_native), or None where it cannot run the plan (NumPy operands, a transposed input, the
# ordered quantizer), so such calls stay on the Python path. fp4kit.call_path() says which path runs.

_native_mm_fp4 = _native_mm_w4a16 = _native_quantize = None


def _setup_native(tensor_type):
    global _native_mm_fp4, _native_mm_w4a16, _native_quantize
    nat = _lib.NATIVE
    if nat is None or not P.native_enabled:
        _native_mm_fp4 = _native_mm_w4a16 = _native_quantize = None
        return
    raw_stream, current_device = T.cuda_fns()
    nat.setup(tensor_type, T._torch().empty_like, current_device, raw_stream, P.last, _lib.check, _mm_fp4_python,
              _mm_w4a16_python, _quantize_python)
    _native_mm_fp4, _native_mm_w4a16, _native_quantize = nat.mm_fp4, nat.mm_w4a16, nat.fp4_quantize


def _use_native(on):
    """Turns the compiled path on or off (tests and host-cost measurements compare the two); returns
    whether it is on. It cannot be turned on where the module did not load (_lib.NATIVE_WHY)."""
    P.native_enabled = bool(on)
    P.forget_plans()
    if _torch_ops is not None:
        _setup_native(_Tensor)
    return _native_mm_fp4 is not None


# ---- keys of the tensor fast path -------------------------------------------------------------------------
#
# The public functions key a call on PyTorch tensors with one flat tuple of the tensors' own
# attributes (shape, stride, dtype, device), built inline: no helper frame per operand. Anything
# else (NumPy arrays, a missing attribute) raises AttributeError there and takes the general key of
# _plan (tagged differently, so the two never collide).

# ---- GEMM ---------------------------------------------------------------------------------------------

# Tags of the tensor fast-path keys (the general keys start with the function's name).
_MM_FP4, _MM_W4A16, _QUANTIZE = "mm_fp4/t", "mm_w4a16/t", "q/t"

# What to do when a scale tensor has another layout's shape (see _layout_by_shape), per layout seen.
_MM_FIX_A = {_lib.LAYOUT_LINEAR: "swizzle checkpoint scales with fp4kit.block_scale_interleave first",
             _lib.LAYOUT_128X4: "pass use_8x4_sf_layout=False for 128x4 scales",
             _lib.LAYOUT_8X4: "pass use_8x4_sf_layout=True for 8x4 scales"}
_MM_FIX_B = {_lib.LAYOUT_LINEAR: "swizzle checkpoint scales with fp4kit.block_scale_interleave first",
             _lib.LAYOUT_8X4: "the weight's scales must be 128x4 (use_8x4_sf_layout is about a_descale only)"}
_W4A16_FIX = {_lib.LAYOUT_LINEAR: "pass b_descale_layout='linear' for scales as a checkpoint stores them",
              _lib.LAYOUT_128X4: "pass b_descale_layout='128x4' for swizzled scales"}


class _GemmPlan(P.Plan):
    """A validated fp4_mm / fp4_mm_w4a16 call: the C structs with everything but the pointers."""

    __slots__ = ("w4a16", "a", "qb", "mo", "alpha_mode", "out_shape", "out_dtype", "out_device", "empty", "template")

    def run(self, a, b, sa, sb, alpha, out):
        mode = self.alpha_mode
        if mode == P.SCALAR_DEVICE:
            self.opts.alpha_device = alpha.data_ptr()
            keep = None
        else:  # kept until the call is queued (stream-ordered reuse of a converted device scalar)
            keep = P.set_scalar(self, alpha, mode, "alpha_device")
        a_struct, qb = self.a, self.qb
        if out is None:
            out = self.new_output()
        if self.torch:  # every operand a tensor
            a_struct.data = a.data_ptr()
            if not self.w4a16:
                a_struct.scales = sa.data_ptr()
            qb.data, qb.scales = b.data_ptr(), sb.data_ptr()
            self.mo.data = out.data_ptr()
        else:
            a_struct.data = P.ptr(a)
            if not self.w4a16:
                a_struct.scales = P.ptr(sa)
            qb.data, qb.scales = P.ptr(b), P.ptr(sb)
            self.mo.data = P.ptr(out)
        P.invoke(self)
        del keep
        return out

    def new_output(self):
        """The [M, N] output of a call given none (the recipe _finish_plan stored)."""
        empty = self.empty
        if empty is None:
            return np.empty(self.out_shape, self.out_dtype)
        if self.torch:
            return empty(self.template)  # torch.empty_like: see P.output_template
        return empty(self.out_shape, dtype=self.out_dtype, device=self.out_device)

    def native(self):
        """This plan as the compiled path runs it, or None where only run() can (NumPy operands)."""
        if not self.torch:
            return None
        return P.native_plan(self, 1 if self.w4a16 else 0, self.a, self.qb, self.mo, self.alpha_mode,
                             getattr(self, "template", None), None)


class _EmptyGemmPlan(_GemmPlan):
    """A validated GEMM whose output has no elements (M = 0, an empty batch, or N = 0): returns the
    empty [M, N] output without calling the library (its GEMMs need M, N >= 1), as FlashInfer does."""

    __slots__ = ()

    def run(self, a, b, sa, sb, alpha, out):
        return self.new_output() if out is None else out

    def native(self):
        return None


def _finish_plan(plan, device, backend, enable_pdl, fn, c_name, size_fn, first, second, views, out_given):
    """The parts every GEMM plan shares: options, info, context, argument tuple, output recipe and,
    on a device, the workspace reserved ahead of the call. views: the operands', output last."""
    ctx = plan.setup(device, c_name, _backend_bytes(backend, fn), enable_pdl)
    opts = plan.opts
    r = ctypes.byref
    plan.args = (ctx.handle if ctx else None, r(first), r(second), plan.scalar, r(plan.mo), r(opts))
    plan.torch = all(v.torch for v in views)
    vo = views[-1]
    plan.empty = None
    if not out_given:
        plan.out_shape = tuple(vo.shape)
        plan.out_dtype = vo.obj.dtype
        plan.out_device = vo.obj.device if vo.torch else None
        plan.empty = None
        if vo.torch:
            torch = T._torch()
            plan.empty = torch.empty_like if plan.torch else torch.empty
            plan.template = P.output_template(torch, plan.out_shape, plan.out_dtype, plan.out_device)
    if ctx is not None and not isinstance(plan, _EmptyGemmPlan):
        P.reserve_workspace(ctx, getattr(_lib.LIB, size_fn, None),
                            [ctx.handle, r(first), r(second), r(plan.mo), r(opts)], size_fn)
    return plan


def _mm_fp4_plan(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout, backend,
                 use_nvfp4, enable_pdl):
    fn = "mm_fp4"
    out_given = out is not None
    fmt = _format(block_size, not use_nvfp4, fn, other_block=InvalidArgumentError)  # FlashInfer's ValueError
    va, vb = T.View(a, "a"), T.View(b, "b")
    vsa, vsb = T.View(a_descale, "a_descale"), T.View(b_descale, "b_descale")
    device = T.same_place(va, vb, vsa, vsb)
    m, k = _fp4_rowmajor(va, fn)
    n = _weight_n(vb, va, k, "[M, K/2]", block_size, fn)
    a_layout = _lib.LAYOUT_8X4 if use_8x4_sf_layout else _lib.LAYOUT_128X4
    sa = _scales(vsa, fmt, a_layout, m, k, fn, fix=_MM_FIX_A)
    sb = _scales(vsb, fmt, _lib.LAYOUT_128X4, n, k, fn, fix=_MM_FIX_B)
    plan = _GemmPlan() if m and n else _EmptyGemmPlan()
    plan.w4a16 = False
    plan.alpha_mode = P.scalar_mode(alpha, "alpha", device)
    out, vo, ld = _output(out, out_dtype, va, m, n, T.BF16, fn)
    T.same_place(va, vo)
    plan.a = _qmatrix(va.ptr, sa, m, k, fmt, a_layout, 1.0, va.memory)
    plan.qb = _qmatrix(vb.ptr, sb, n, k, fmt, _lib.LAYOUT_128X4, 1.0, vb.memory)
    plan.mo = _matrix(vo, m, n, ld)
    return _finish_plan(plan, device, backend, enable_pdl, fn, "fp4_mm", "fp4_mm_workspace_size",
                        plan.a, plan.qb, (va, vb, vsa, vsb, vo), out_given)




def mm_fp4(a, b, a_descale, b_descale, alpha=None, out_dtype=None, out=None, block_size=16,
           use_8x4_sf_layout=False, backend="auto", use_nvfp4=True, enable_pdl=True, skip_check=False):
    """W4A4 GEMM with FlashInfer's contract: ``out[M, N] = alpha * dq(a) @ dq(w)^T``.

    a: [M, K/2] packed FP4 (uint8), row-major. b: ``w_q.T``, the transposed view of the row-major
    [N, K/2] weight. a_descale / b_descale: the swizzled block scales of a and of the weight (128x4,
    or 8x4 for a when use_8x4_sf_layout); b_descale may be passed transposed as FlashInfer callers do.
    alpha: FP32 scalar (None = 1): a float, a host array, or a one-element tensor; a CUDA tensor is
    read by the kernel on the GPU (no host synchronization; a CUDA graph replays with its current
    value). out_dtype: bfloat16 (default), float16 or float32. block_size / use_nvfp4: 16 and True
    for NVFP4, 32 and False for MXFP4 (another block size raises ValueError, as FlashInfer does).
    backend: 'auto' or an fp4kit backend name (fp4kit.backends()).
    enable_pdl: launch with programmatic dependent launch on SM90+ (None: when the device has it).
    skip_check: FlashInfer's switch to skip its Python checks; fp4kit checks a call's arguments
    once per shape anyway, so it changes nothing.
    Returns out (allocated when None) as the kind of array/tensor given; [0, N] for M = 0.
    """
    if _compiling():
        return _torch_ops.mm_fp4(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout,
                                 backend, use_nvfp4, enable_pdl)
    if _native_mm_fp4 is None:
        return _mm_fp4_python(None, a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout,
                              backend, use_nvfp4, enable_pdl)
    return _native_mm_fp4(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout, backend,
                          use_nvfp4, enable_pdl)


def _mm_fp4_python(native_key, a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout,
                   backend, use_nvfp4, enable_pdl):
    """mm_fp4's Python path; native_key: the compiled path's key of a call it had no plan for."""
    try:
        key = (_MM_FP4, a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.get_device(),
               a_descale.shape, a_descale.stride(), a_descale.dtype, a_descale.get_device(), b_descale.shape,
               b_descale.stride(), b_descale.dtype, b_descale.get_device(),
               "n" if alpha is None or alpha.__class__ is float else
               (alpha.shape, alpha.dtype, alpha.get_device()) if alpha.__class__ is _Tensor else
               P.scalar_key(alpha, "alpha"),
               out_dtype, None if out is None else P.out_key(out), block_size, use_8x4_sf_layout, backend, use_nvfp4,
               enable_pdl)
    except AttributeError:
        key = ("mm_fp4", P.first_key(a), P.key(b), P.key(a_descale), P.key(b_descale), P.scalar_key(alpha, "alpha"),
               out_dtype, P.out_key(out), block_size, use_8x4_sf_layout, backend, use_nvfp4, enable_pdl)
    try:
        plan = P.tls.plans[key]
    except (AttributeError, KeyError):
        plan = P.remember(key, _mm_fp4_plan(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size,
                                            use_8x4_sf_layout, backend, use_nvfp4, enable_pdl))
    if native_key is not None:
        P.remember_native(native_key, plan)
    return plan.run(a, b, a_descale, b_descale, alpha, out)


def _mm_fp4_is_backend_supported(backend, cc=None):
    """FlashInfer's mm_fp4.is_backend_supported: whether `backend` is one of fp4kit's backends and,
    for a compute capability cc (major*10+minor), whether it runs NVFP4 W4A4 there (answered by the
    architecture table of the capability probe). 'auto' is not a backend here either."""
    if backend not in registered_backends():
        return False
    if cc is None:
        return True
    if not _lib.has_symbol("fp4_probe_backend_arch"):
        raise UnsupportedError("mm_fp4.is_backend_supported: the loaded libfp4kit has no fp4_probe_backend_arch")
    bp = _lib.BackendProbe()
    status = _lib.LIB.fp4_probe_backend_arch(("sm_%d" % _integer(cc, _CC)).encode(), backend.encode(), ctypes.byref(bp))
    if status == _lib.ERR_NOT_FOUND:  # a compute capability the architecture table does not know: no
        return False
    _lib.check(status, "fp4_probe_backend_arch")
    return bp.caps[0].support == 1


_CC = "mm_fp4: a compute capability (major*10+minor, such as 90)"


def _mm_fp4_is_compute_capability_supported(cc):
    """Whether any fp4kit backend runs NVFP4 W4A4 on compute capability cc (FlashInfer's method)."""
    return any(_mm_fp4_is_backend_supported(b, cc) for b in registered_backends())


mm_fp4.is_backend_supported = _mm_fp4_is_backend_supported
mm_fp4.is_compute_capability_supported = _mm_fp4_is_compute_capability_supported
mm_fp4.has_backend = lambda backend: backend in registered_backends()
mm_fp4.has_backend_choices = lambda: True


def _mm_w4a16_plan(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout, backend,
                   enable_pdl):
    fn = "mm_w4a16"
    out_given = out is not None
    fmt = _format(block_size, not use_nvfp4, fn, other_block=InvalidArgumentError)  # FlashInfer's ValueError
    layout = _LAYOUT_BY_NAME.get(b_descale_layout)
    if layout is None:
        raise InvalidArgumentError("%s: b_descale_layout %r is not one of %s" % (fn, b_descale_layout, sorted(_LAYOUT_BY_NAME)))
    va, vb, vsb = T.View(a, "a"), T.View(b, "b"), T.View(b_descale, "b_descale")
    device = T.same_place(va, vb, vsb)
    lda = _dense_rows(va, "activations [M, K]", fn)
    m, k = va.shape
    n = _weight_n(vb, va, k, "[M, K]", block_size, fn)
    sb = _scales(vsb, fmt, layout, n, k, fn, fix=_W4A16_FIX)
    plan = _GemmPlan() if m and n else _EmptyGemmPlan()
    plan.w4a16 = True
    plan.alpha_mode = P.scalar_mode(alpha, "alpha", device)
    out, vo, ld = _output(out, out_dtype, va, m, n, va.dtype, fn)
    T.same_place(va, vo)
    plan.a = _matrix(va, m, k, lda)
    plan.qb = _qmatrix(vb.ptr, sb, n, k, fmt, layout, 1.0, vb.memory)
    plan.mo = _matrix(vo, m, n, ld)
    return _finish_plan(plan, device, backend, enable_pdl, fn, "fp4_mm_w4a16", "fp4_mm_w4a16_workspace_size",
                        plan.a, plan.qb, (va, vb, vsb, vo), out_given)


def mm_w4a16(a, b, b_descale, alpha=None, out_dtype=None, out=None, block_size=16, use_nvfp4=True,
             b_descale_layout="128x4", backend="auto", enable_pdl=True):
    """W4A16 GEMM (fp4kit's own): ``out[M, N] = alpha * a @ dq(w)^T`` with a in bf16/fp16/fp32.

    a: [M, K] dense, row-major (a row stride larger than K is fine). b, b_descale: as in mm_fp4
    (b = w_q.T); b_descale_layout: '128x4' (default) or 'linear' (checkpoints' weight_scale [N, K/16]
    as stored); a scale tensor whose shape is that of the other layout is refused. alpha: for a Model
    Optimizer checkpoint, weight_scale_2 (a CUDA tensor is read on the GPU, as in mm_fp4). out_dtype
    defaults to a's dtype.
    """
    if _compiling():
        return _torch_ops.mm_w4a16(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout,
                                   backend, enable_pdl)
    if _native_mm_w4a16 is None:
        return _mm_w4a16_python(None, a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout,
                                backend, enable_pdl)
    return _native_mm_w4a16(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout, backend,
                            enable_pdl)


def _mm_w4a16_python(native_key, a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout,
                     backend, enable_pdl):
    """mm_w4a16's Python path (native_key as in _mm_fp4_python)."""
    try:
        key = (_MM_W4A16, a.shape, a.stride(), a.dtype, a.device, b.shape, b.stride(), b.dtype, b.get_device(),
               b_descale.shape, b_descale.stride(), b_descale.dtype, b_descale.get_device(),
               "n" if alpha is None or alpha.__class__ is float else
               (alpha.shape, alpha.dtype, alpha.get_device()) if alpha.__class__ is _Tensor else
               P.scalar_key(alpha, "alpha"),
               out_dtype, None if out is None else P.out_key(out), block_size, use_nvfp4, b_descale_layout, backend,
               enable_pdl)
    except AttributeError:
        key = ("mm_w4a16", P.first_key(a), P.key(b), P.key(b_descale), P.scalar_key(alpha, "alpha"), out_dtype,
               P.out_key(out), block_size, use_nvfp4, b_descale_layout, backend, enable_pdl)
    try:
        plan = P.tls.plans[key]
    except (AttributeError, KeyError):
        plan = P.remember(key, _mm_w4a16_plan(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4,
                                              b_descale_layout, backend, enable_pdl))
    if native_key is not None:
        P.remember_native(native_key, plan)
    return plan.run(a, b, None, b_descale, alpha, out)


# ---- quantization -------------------------------------------------------------------------------------

class _QuantizePlan(P.Plan):
    __slots__ = ("mx", "q", "gs_mode", "transpose", "q_shape", "sf_shape", "empty_like", "q_template", "sf_template")

    def native(self):
        """This plan as the compiled path runs it, or None where only run() can (NumPy operands, a
        transposed input, the reference's ordered quantizer)."""
        if not self.torch or self.transpose or self.name != "fp4_quantize":
            return None
        return P.native_plan(self, 2, self.mx, self.q, None, self.gs_mode, self.q_template, self.sf_template)

    def run(self, x, global_scale):
        if self.transpose:
            x = x.T
        mode = self.gs_mode
        if mode == P.SCALAR_DEVICE:
            self.opts.global_scale_device = global_scale.data_ptr()
            keep = None
        else:
            keep = P.set_scalar(self, global_scale, mode, "global_scale_device")
        q = self.q
        if self.torch:
            x_q = self.empty_like(self.q_template)  # see P.output_template
            sf = self.empty_like(self.sf_template)
            self.mx.data = x.data_ptr()
            q.data, q.scales = x_q.data_ptr(), sf.data_ptr()
        else:
            x_q = np.empty(self.q_shape, np.uint8)
            sf = np.empty(self.sf_shape, np.uint8)
            self.mx.data = P.ptr(x)
            q.data, q.scales = P.ptr(x_q), P.ptr(sf)
        P.invoke(self)
        del keep
        if self.transpose:
            return x_q.T, sf.T
        return x_q, sf


class _EmptyQuantizePlan(_QuantizePlan):
    """A validated quantization of no rows: returns empty codes [..., 0, K/2] and scales [0, C]
    without calling the library."""

    __slots__ = ()

    def native(self):
        return None

    def run(self, x, global_scale):
        if self.torch:
            x_q, sf = self.empty_like(self.q_template), self.empty_like(self.sf_template)
        else:
            x_q, sf = np.empty(self.q_shape, np.uint8), np.empty(self.sf_shape, np.uint8)
        return (x_q.T, sf.T) if self.transpose else (x_q, sf)


_ORDERS = {"flashinfer": 0, "exact": 1}  # fp4_quantize_order


def _check_global_scale_inversed(is_global_scale_inversed, fn):
    if is_global_scale_inversed:
        raise UnsupportedError(
            "%s: is_global_scale_inversed=True (global_scale given as its inverse, 1/global_scale) is not "
            "implemented in fp4kit; pass the encode scale itself (448*6/amax)" % fn)


def _quantize_plan(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout,
                   enable_pdl, backend, order):
    fn = "fp4_quantize"
    c_order = _ORDERS.get(order) if isinstance(order, str) else None
    if c_order is None:
        raise InvalidArgumentError("%s: order must be 'flashinfer' (FlashInfer's default build) or 'exact' (its "
                                   "FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH build), not %r" % (fn, order))
    if c_order and not _lib.has_symbol("fp4_quantize_ordered"):
        raise UnsupportedError("%s: order=%r needs fp4_quantize_ordered, which the loaded libfp4kit lacks"
                               % (fn, order))
    fmt = _format(sf_vec_size, sf_use_ue8m0, fn, "sf_vec_size", "sf_use_ue8m0")
    layout = (_lib.LAYOUT_8X4 if is_sf_8x4_layout else _lib.LAYOUT_128X4) if is_sf_swizzled_layout else _lib.LAYOUT_LINEAR
    v = T.View(input, "input")
    if len(v.shape) < 2:
        raise InvalidArgumentError("%s: input must be [..., K] with at least 2 dimensions; got shape %s" % (fn, list(v.shape)))
    v.require_dtype(T.DENSE_DTYPES, "the values to quantize")
    transpose = len(v.shape) == 2 and v.row_stride() is None and v.is_transposed_contiguous()
    if transpose:  # a column-major input is quantized along its memory rows, results transposed back
        v = T.View(input.T, "input")
    k = v.shape[-1]
    if k % sf_vec_size:
        raise InvalidArgumentError("%s: the last dimension K = %d is not a multiple of sf_vec_size %d" % (fn, k, sf_vec_size))
    lead = tuple(v.shape[:-1])
    rows = 1
    for d in lead:
        rows *= d
    if len(v.shape) == 2:
        ld = v.row_stride()
    else:
        ld = k if v.is_contiguous() else None
    if ld is None:
        raise InvalidArgumentError("%s: input must be row-major (2-D: unit column stride; N-D: contiguous); strides %s"
                                   % (fn, list(v.strides)))
    if rows:
        scales_size(fmt, layout, rows, k, fn)  # the library's own size checks (fp4_scales_size)
    # An empty batch gets empty codes and scales, as FlashInfer returns (the library needs rows).
    plan = _QuantizePlan() if rows else _EmptyQuantizePlan()
    plan.transpose = transpose
    mxfp4 = fmt == _lib.FORMAT_MXFP4
    plan.gs_mode = P.SCALAR_UNUSED if mxfp4 else P.scalar_mode(global_scale, "global_scale", v.device)
    if c_order and not mxfp4 and plan.gs_mode >= P.SCALAR_DEVICE:
        raise UnsupportedError("%s: order='exact' runs on host data (the reference quantizer); a CUDA global_scale "
                               "is quantized in FlashInfer's order only" % fn)
    plan.q_shape = lead + (k // 2,)
    plan.sf_shape = scale_shape(fmt, layout, rows, k)
    plan.torch = v.torch
    if v.torch:
        torch = T._torch()
        plan.empty_like = torch.empty_like
        plan.q_template = P.output_template(torch, plan.q_shape, torch.uint8, v.obj.device)
        plan.sf_template = P.output_template(torch, plan.sf_shape, torch.uint8, v.obj.device)
    plan.mx = _matrix(v, rows, k, ld)
    plan.q = _qmatrix(None, None, rows, k, fmt, layout, 1.0, v.memory)
    ctx = plan.setup(v.device, "fp4_quantize_ordered" if c_order else "fp4_quantize", _backend_bytes(backend, fn),
                     enable_pdl)
    r = ctypes.byref
    handle = ctx.handle if ctx else None
    if c_order:
        plan.args = (handle, r(plan.mx), plan.scalar, ctypes.c_int(c_order), r(plan.q), r(plan.opts))
    else:
        plan.args = (handle, r(plan.mx), plan.scalar, r(plan.q), r(plan.opts))
    return plan


def fp4_quantize(input, global_scale=None, sf_vec_size=16, sf_use_ue8m0=False, is_sf_swizzled_layout=True,
                 is_sf_8x4_layout=False, is_global_scale_inversed=False, enable_pdl=None, backend="auto", *,
                 order="flashinfer"):
    """Quantizes [..., K] bf16/fp16/fp32 values with the runtime recipe (FlashInfer's fp4_quantize,
    same parameters in the same order).

    global_scale: the NVFP4 encode scale 448*6/amax (None = 1; ignored for MXFP4): a float, a host
    array, or a one-element tensor; a CUDA tensor is read by the kernel on the GPU.
    is_global_scale_inversed=True (the scale given as its inverse) raises NotImplementedError.
    sf_vec_size=16 with sf_use_ue8m0=False is NVFP4, 32 with True is MXFP4. Scales are swizzled 128x4
    (8x4 with is_sf_8x4_layout) or linear. backend: 'auto' or an fp4kit backend name (FlashInfer's
    'cuda' is fp4kit's cuda backend; 'cute-dsl' is not provided). A column-major 2-D input is
    quantized along its memory rows and the results are returned transposed, as FlashInfer does.
    order (fp4kit's keyword): the order of the NVFP4 scale computation, 'flashinfer' (the default:
    FlashInfer's default build, every backend) or 'exact' (its FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH
    build: sf = vmax * (gsf / 6), one E4M3 step apart where the two float32 scales straddle a
    rounding boundary); 'exact' runs on host data on the ref backend only and raises
    NotImplementedError otherwise. MXFP4 has one order.
    Returns (x_q uint8 [..., K/2], sf uint8), sf in FlashInfer's shape for M = the input's rows:
    [roundup(M, 128), roundup(K/sf_vec_size, 4)] (128x4), [roundup(M, 8), roundup(K/sf_vec_size, 4)]
    (8x4) or [M, K/sf_vec_size] (linear). An input of no rows gives empty results.
    """
    if is_global_scale_inversed:
        _check_global_scale_inversed(is_global_scale_inversed, "fp4_quantize")
    if _compiling():
        return _torch_ops.fp4_quantize(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                                       is_sf_8x4_layout, enable_pdl, backend, order)
    if _native_quantize is None:
        return _quantize_python(None, input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                                is_sf_8x4_layout, enable_pdl, backend, order)
    return _native_quantize(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout,
                            enable_pdl, backend, order)


def _quantize_python(native_key, input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                     is_sf_8x4_layout, enable_pdl, backend, order):
    """fp4_quantize's Python path (native_key as in _mm_fp4_python)."""
    try:
        key = (_QUANTIZE, input.shape, input.stride(), input.dtype, input.device,
               "n" if global_scale is None or global_scale.__class__ is float else
               (global_scale.shape, global_scale.dtype, global_scale.get_device()) if global_scale.__class__ is _Tensor
               else P.scalar_key(global_scale, "global_scale"),
               sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout, enable_pdl, backend, order)
    except AttributeError:
        key = ("q", P.first_key(input), P.scalar_key(global_scale, "global_scale"), sf_vec_size, sf_use_ue8m0,
               is_sf_swizzled_layout, is_sf_8x4_layout, enable_pdl, backend, order)
    try:
        plan = P.tls.plans[key]
    except (AttributeError, KeyError):
        plan = P.remember(key, _quantize_plan(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                                              is_sf_8x4_layout, enable_pdl, backend, order))
    if native_key is not None:
        P.remember_native(native_key, plan)
    return plan.run(input, global_scale)


def nvfp4_quantize(a, a_global_sf, sfLayout=SfLayout.layout_128x4, do_shuffle=False, sf_vec_size=16, enable_pdl=None,
                   backend="auto", per_token_activation=False, expanded_idx_to_permuted_idx=None, *,
                   order="flashinfer"):
    """NVFP4 quantization (FlashInfer's nvfp4_quantize, same parameters in the same order): scales
    in sfLayout (128x4, 8x4 or linear). order (fp4kit's keyword): 'flashinfer' or 'exact', as in
    fp4_quantize. Not provided, each raising NotImplementedError that names it:
    do_shuffle=True (TensorRT-LLM's shuffled weight layout for its trtllm GEMM: fp4kit's GEMMs take
    weights as quantized), per_token_activation=True (per-token activation scales) and
    expanded_idx_to_permuted_idx (its row remapping)."""
    fn = "nvfp4_quantize"
    if do_shuffle:
        raise UnsupportedError("nvfp4_quantize: do_shuffle=True produces the trtllm backend's shuffled weight layout, "
                               "which fp4kit does not use; quantize with do_shuffle=False")
    if per_token_activation:
        raise UnsupportedError("%s: per_token_activation=True (per-token NVFP4 activation scales) is not implemented "
                               "in fp4kit; quantize with one global scale" % fn)
    if expanded_idx_to_permuted_idx is not None:
        raise UnsupportedError("%s: expanded_idx_to_permuted_idx (the row remapping of per-token activation "
                               "quantization) is not implemented in fp4kit" % fn)
    if sf_vec_size != 16:
        raise UnsupportedError("nvfp4_quantize: NVFP4 has sf_vec_size 16, got %r" % (sf_vec_size,))
    layout = _SF_LAYOUT_C[_sf_layout(sfLayout, fn)]
    return fp4_quantize(a, a_global_sf, 16, False, layout != _lib.LAYOUT_LINEAR, layout == _lib.LAYOUT_8X4, False,
                        enable_pdl, backend, order=order)


def _sf_layout(sfLayout, fn):
    """The SfLayout of an sfLayout argument, one rule for every function that takes one: an
    fp4kit.SfLayout; a member of another enum of the same name and value (FlashInfer's IntEnum
    SfLayout); or the value as a Python or NumPy integer (0 128x4, 1 8x4, 2 linear)."""
    if isinstance(sfLayout, SfLayout):
        return sfLayout
    if isinstance(sfLayout, enum.Enum):
        mine = SfLayout.__members__.get(sfLayout.name)
        if mine is not None and sfLayout.value == mine.value:
            return mine
    elif T.integer(sfLayout) in (0, 1, 2):
        return SfLayout(T.integer(sfLayout))
    raise InvalidArgumentError("%s: sfLayout must be an fp4kit.SfLayout, FlashInfer's SfLayout or its value (0 "
                               "layout_128x4, 1 layout_8x4, 2 layout_linear), not %r" % (fn, sfLayout))


def mxfp4_quantize(a, backend="auto", enable_pdl=None, sfLayout=SfLayout.layout_128x4):
    """MXFP4 quantization (FlashInfer's mxfp4_quantize, same parameters in the same order): UE8M0
    scales per 32 in sfLayout (128x4 default, or linear)."""
    layout = _SF_LAYOUT_C[_sf_layout(sfLayout, "mxfp4_quantize")]
    return fp4_quantize(a, None, 32, True, layout != _lib.LAYOUT_LINEAR, layout == _lib.LAYOUT_8X4, False, enable_pdl,
                        backend)


# ---- dequantization and scale layouts (host) --------------------------------------------------------------

def _host(x):
    """The host copy FlashInfer's host-side helpers make of a CUDA tensor; other inputs as they are."""
    return x.cpu() if T.is_torch(x) and x.is_cuda else x


def _dequantize_fix(is_sf_swizzled_layout, is_sf_8x4_layout):
    """What e2m1_and_ufp8sf_scale_to_float's caller passes for scales of each layout seen: the flags
    that differ from the ones given."""
    flags = {_lib.LAYOUT_LINEAR: (False, False), _lib.LAYOUT_128X4: (True, False), _lib.LAYOUT_8X4: (True, True)}
    fix = {}
    for layout, (swizzled, s8x4) in flags.items():
        change = []
        if bool(is_sf_swizzled_layout) != swizzled:
            change.append("is_sf_swizzled_layout=%s" % swizzled)
        if bool(is_sf_8x4_layout) != s8x4 and swizzled:
            change.append("is_sf_8x4_layout=%s" % s8x4)
        if change:
            fix[layout] = "pass %s for %s scales" % (" and ".join(change), _LAYOUT_NAME[layout])
    return fix


def e2m1_and_ufp8sf_scale_to_float(e2m1_tensor, ufp8_scale_tensor, global_scale_tensor=None, sf_vec_size=16,
                                   ufp8_type=1, is_sf_swizzled_layout=True, is_sf_8x4_layout=False):
    """Dequantizes packed FP4 [M, K/2] with its block scales to float32 [M, K] on the host (like
    FlashInfer, CUDA tensors are copied to the CPU and a CPU tensor is returned).

    ufp8_type: 1 = E4M3 scales (NVFP4, sf_vec_size 16), 0 = UE8M0 (MXFP4, 32).
    global_scale_tensor: the per-tensor decode multiplier of E4M3 scales (1/global_scale; None = 1);
    ignored for UE8M0 scales, as FlashInfer does. Scales, of either format, are in the 128x4 layout,
    the 8x4 layout (is_sf_8x4_layout) or linear (is_sf_swizzled_layout=False); a 2-D scale tensor
    whose shape is another of these layouts' shape is refused, naming the flag to pass.
    """
    fn = "e2m1_and_ufp8sf_scale_to_float"
    if ufp8_type not in (0, 1):
        raise InvalidArgumentError("%s: ufp8_type must be 1 (E4M3) or 0 (UE8M0), got %r" % (fn, ufp8_type))
    if is_sf_8x4_layout and not is_sf_swizzled_layout:
        raise InvalidArgumentError("%s: is_sf_8x4_layout=True needs is_sf_swizzled_layout=True" % fn)
    fmt = _format(sf_vec_size, ufp8_type == 0, fn, "sf_vec_size", "ufp8_type")
    layout = (_lib.LAYOUT_8X4 if is_sf_8x4_layout else _lib.LAYOUT_128X4) if is_sf_swizzled_layout else _lib.LAYOUT_LINEAR
    e2m1, sf = _host(e2m1_tensor), _host(ufp8_scale_tensor)
    ve, vs = T.View(e2m1, "e2m1_tensor"), T.View(sf, "ufp8_scale_tensor")
    m, k = _fp4_rowmajor(ve, fn)
    if k % sf_vec_size:
        raise InvalidArgumentError("%s: K = %d is not a multiple of sf_vec_size %d" % (fn, k, sf_vec_size))
    sp = _scales(vs, fmt, layout, m, k, fn, fix=_dequantize_fix(is_sf_swizzled_layout, is_sf_8x4_layout))
    mult = 1.0 if ufp8_type == 0 else T.scalar(global_scale_tensor, "global_scale_tensor", 1.0)
    out = T.empty(ve, (m, k), T.F32)
    if not m:  # no rows: an empty result (the library needs rows)
        return out
    vo = T.View(out, "out")
    q = _qmatrix(ve.ptr, sp, m, k, fmt, layout, mult, _lib.MEMORY_HOST)
    mo = _matrix(vo, m, k, k)
    _lib.check(_lib.LIB.fp4_dequantize(ctypes.byref(q), ctypes.byref(mo)), fn)
    return out


def _host_bytes(ptr, n):
    """The n bytes at host address ptr as a NumPy uint8 array (no copy; the caller keeps the owner
    alive)."""
    if n == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


def block_scale_interleave(unswizzled_sf):
    """Swizzles linear block scales [rows, cols] (or [experts, rows, cols]) into the 128x4 layout
    and returns them flat, in the input's dtype: experts * roundup(rows, 128) * roundup(cols, 4)
    elements, padding zero. One-byte scales (uint8, float8) and bfloat16 values are taken, as
    FlashInfer takes uint8 and bfloat16. The layout work runs on the host; a CUDA tensor is copied
    there and the result copied back."""
    fn = "block_scale_interleave"
    v = T.View(unswizzled_sf, "unswizzled_sf")
    if len(v.shape) not in (2, 3):
        raise InvalidArgumentError("%s: unswizzled_sf must be [rows, cols] or [experts, rows, cols]; got shape %s"
                                   % (fn, list(v.shape)))
    v.require_dtype(("uint8", "float8_e4m3fn", "float8_e8m0fnu", T.BF16), "block scales: one byte each, or bfloat16")
    if not v.is_contiguous():
        raise InvalidArgumentError("%s: unswizzled_sf must be contiguous (strides %s)" % (fn, list(v.strides)))
    experts, rows, cols = (1,) + v.shape if len(v.shape) == 2 else v.shape
    host = _host(unswizzled_sf)
    vh = T.View(host, "unswizzled_sf")
    # The layout does not depend on the format; NVFP4 with 16 elements per scale column maps the
    # scale grid [rows, cols] onto a [rows, 16*cols] matrix. No rows or no columns: nothing to swizzle.
    per = scales_size(_lib.FORMAT_NVFP4, _lib.LAYOUT_128X4, rows, 16 * cols, fn) if rows and cols else 0
    out = T.empty(vh, (experts * per,), v.dtype)
    vo = T.View(out, "out")
    # The library swizzles bytes; wider values move as whole elements, so each byte of an element
    # (a plane) is swizzled alone and the planes are put back together.
    width = v.itemsize
    src = _host_bytes(vh.ptr, experts * rows * cols * width).reshape(experts, rows * cols, width)
    dst = _host_bytes(vo.ptr, experts * per * width).reshape(experts, per, width)
    for e in range(experts if per else 0):
        for b in range(width):
            plane = np.ascontiguousarray(src[e, :, b])  # no copy for one-byte scales
            swizzled = dst[e, :, b] if width == 1 else np.empty(per, np.uint8)
            _lib.check(_lib.LIB.fp4_scales_convert(_lib.FORMAT_NVFP4, rows, 16 * cols, plane.ctypes.data,
                                                   _lib.LAYOUT_LINEAR, swizzled.ctypes.data, _lib.LAYOUT_128X4), fn)
            if width > 1:
                dst[e, :, b] = swizzled
    if v.device >= 0:
        out = out.to(unswizzled_sf.device)
    return out


nvfp4_block_scale_interleave = block_scale_interleave


def mxfp4_dequantize(a_fp4, a_sf, sfLayout=SfLayout.layout_128x4):
    """Dequantizes MXFP4 [M, K/2] with UE8M0 scales in sfLayout (128x4 default, 8x4 or linear) to
    float32 [M, K] on the host (FlashInfer's mxfp4_dequantize, same parameters)."""
    layout = _sf_layout(sfLayout, "mxfp4_dequantize")
    return e2m1_and_ufp8sf_scale_to_float(a_fp4, a_sf, None, 32, 0, layout != SfLayout.layout_linear,
                                          layout == SfLayout.layout_8x4)
