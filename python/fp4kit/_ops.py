"""The operations: FlashInfer-compatible quantize / GEMM / scale helpers and fp4kit's W4A16 GEMM.

Every function takes NumPy arrays (host) or PyTorch tensors (CPU or CUDA), passes their memory to
libfp4kit without copying (except where FlashInfer itself copies to the host, noted per function),
and returns the kind of object it was given.
"""

import ctypes
import enum
import threading

from . import _lib
from . import _tensors as T
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


class SfLayout(enum.Enum):
    """Layout of block scale factors (FlashInfer's enum, same member names and values)."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


_SF_LAYOUT_C = {SfLayout.layout_128x4: _lib.LAYOUT_128X4, SfLayout.layout_8x4: _lib.LAYOUT_8X4,
                SfLayout.layout_linear: _lib.LAYOUT_LINEAR}

# ---- what ran last on this thread --------------------------------------------------------------------

_last = threading.local()


def last_run():
    """What the last quantize/GEMM call on this thread ran: {'backend', 'config', 'pdl', 'note'}
    (None before the first call)."""
    return getattr(_last, "info", None)


def _record(info):
    _last.info = {
        "backend": info.backend.decode(errors="replace"),
        "config": info.config.decode(errors="replace"),
        "pdl": bool(info.pdl),
        "note": info.note.decode(errors="replace"),
    }


# ---- shared argument handling -------------------------------------------------------------------------

def registered_backends():
    lib = _lib.LIB
    return [lib.fp4_backend_name(i).decode() for i in range(lib.fp4_backend_count())]


def _backend_bytes(backend, fn):
    if backend is None or backend == "auto":
        return None
    if not isinstance(backend, str):
        raise InvalidArgumentError("%s: backend must be a string, not %s" % (fn, type(backend).__name__))
    names = registered_backends()
    if backend not in names and backend in FLASHINFER_BACKENDS:
        raise UnsupportedError(
            "%s: backend '%s' is a FlashInfer backend that fp4kit does not provide; fp4kit backends: %s "
            "(or 'auto', which picks the best one that can run the problem)" % (fn, backend, ", ".join(names)),
            _lib.ERR_UNSUPPORTED)
    return backend.encode()


def _call(fn_name, device, backend, enable_pdl, c_fn, *args):
    # fn_name: the Python function, for messages this module writes; the C library's messages name
    # the C function.
    """Runs a quantize/GEMM entry point with options built for the operands' device: the device's
    context, PyTorch's current stream, PDL, backend. Raises the status as an exception."""
    info = _lib.RunInfo()
    opts = _lib.Options()
    opts.backend = _backend_bytes(backend, fn_name)
    opts.enable_pdl = 1 if (T.default_pdl(device) if enable_pdl is None else enable_pdl) else 0
    opts.info = ctypes.pointer(info)
    with T.call_scope(device) as (ctx, stream):
        opts.stream = stream
        status = c_fn(ctx, *args, ctypes.byref(opts))
        if status == _lib.OK:
            _record(info)
        _lib.check(status, c_fn.__name__)


# How each function spells the format flag, per format: mm_fp4's use_nvfp4 is True for NVFP4.
_FORMAT_ARG_VALUE = {
    "use_nvfp4": {_lib.FORMAT_NVFP4: True, _lib.FORMAT_MXFP4: False},
    "sf_use_ue8m0": {_lib.FORMAT_NVFP4: False, _lib.FORMAT_MXFP4: True},
    "ufp8_type": {_lib.FORMAT_NVFP4: 1, _lib.FORMAT_MXFP4: 0},
}


def _format(block_size, use_ue8m0, fn, block_arg="block_size", fmt_arg="use_nvfp4"):
    if block_size not in (16, 32):
        raise UnsupportedError("%s: %s can only be 16 or 32, got %r" % (fn, block_arg, block_size), _lib.ERR_UNSUPPORTED)
    fmt = _lib.FORMAT_MXFP4 if use_ue8m0 else _lib.FORMAT_NVFP4
    if _BLOCK[fmt] != block_size:
        raise InvalidArgumentError(
            "%s: %s=%d does not match %s=%s: NVFP4 has E4M3 scales per 16 elements, MXFP4 UE8M0 scales per 32"
            % (fn, block_arg, block_size, fmt_arg, _FORMAT_ARG_VALUE[fmt_arg][fmt]))
    return fmt


def scales_size(fmt, layout, rows, cols):
    n = ctypes.c_size_t()
    _lib.check(_lib.LIB.fp4_scales_size(fmt, layout, rows, cols, ctypes.byref(n)), "fp4_scales_size")
    return n.value


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


def _scales(v, fmt, layout, rows, cols, fn, exact=True):
    """A scale buffer: any shape whose memory is one contiguous block (the view or its transpose),
    holding exactly the bytes of [rows, cols] scales in the layout."""
    v.require_dtype(_SCALE_BYTES[fmt], "%s block scales" % _FORMAT_NAME[fmt])
    if not (v.is_contiguous() or v.is_transposed_contiguous()):
        raise InvalidArgumentError("%s: %s must be contiguous or the transpose of a contiguous tensor (strides %s)"
                                   % (fn, v.name, list(v.strides)))
    need = scales_size(fmt, layout, rows, cols)
    if (v.numel != need) if exact else (v.numel < need):
        bs = _BLOCK[fmt]
        raise InvalidArgumentError(
            "%s: %s holds %d bytes but the %s scales of a [%d, %d] matrix in the %s layout take %d "
            "(%d rows x %d scale columns%s)"
            % (fn, v.name, v.numel, _FORMAT_NAME[fmt], rows, cols, _LAYOUT_NAME[layout], need, rows, cols // bs,
               ", padded to 128 x 4" if layout == _lib.LAYOUT_128X4 else ", padded to 8 x 4" if layout == _lib.LAYOUT_8X4 else ""))
    return v.ptr


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
    want = T.dtype_name(out_dtype)
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


# ---- GEMM ---------------------------------------------------------------------------------------------

def mm_fp4(a, b, a_descale, b_descale, alpha=None, out_dtype=None, out=None, block_size=16,
           use_8x4_sf_layout=False, backend="auto", use_nvfp4=True, enable_pdl=True):
    """W4A4 GEMM with FlashInfer's contract: ``out[M, N] = alpha * dq(a) @ dq(w)^T``.

    a: [M, K/2] packed FP4 (uint8), row-major. b: ``w_q.T``, the transposed view of the row-major
    [N, K/2] weight. a_descale / b_descale: the swizzled block scales of a and of the weight (128x4,
    or 8x4 for a when use_8x4_sf_layout); b_descale may be passed transposed as FlashInfer callers do.
    alpha: FP32 scalar (tensor, array or float; None = 1), for NVFP4 usually 1/(gsf_a*gsf_b); a CUDA
    tensor is read back to the host, which waits for the queued work. out_dtype: bfloat16 (default),
    float16 or float32. block_size / use_nvfp4: 16 and True for NVFP4, 32 and False for MXFP4.
    backend: 'auto' or an fp4kit backend name (fp4kit.backends()). enable_pdl: launch with
    programmatic dependent launch on SM90+ (None: when the device has it).
    Returns out (allocated when None) as the kind of array/tensor given.
    """
    fn = "mm_fp4"
    fmt = _format(block_size, not use_nvfp4, fn)
    va, vb = T.View(a, "a"), T.View(b, "b")
    vsa, vsb = T.View(a_descale, "a_descale"), T.View(b_descale, "b_descale")
    device = T.same_place(va, vb, vsa, vsb)
    m, k = _fp4_rowmajor(va, fn)
    n = _weight_n(vb, va, k, "[M, K/2]", block_size, fn)
    a_layout = _lib.LAYOUT_8X4 if use_8x4_sf_layout else _lib.LAYOUT_128X4
    sa = _scales(vsa, fmt, a_layout, m, k, fn)
    sb = _scales(vsb, fmt, _lib.LAYOUT_128X4, n, k, fn)
    alpha_f = T.scalar(alpha, "alpha", 1.0)
    out, vo, ld = _output(out, out_dtype, va, m, n, T.BF16, fn)
    T.same_place(va, vo)
    qa = _qmatrix(va.ptr, sa, m, k, fmt, a_layout, 1.0, va.memory)
    qb = _qmatrix(vb.ptr, sb, n, k, fmt, _lib.LAYOUT_128X4, 1.0, vb.memory)
    mo = _matrix(vo, m, n, ld)
    _call(fn, device, backend, enable_pdl, _lib.LIB.fp4_mm, ctypes.byref(qa), ctypes.byref(qb),
          ctypes.c_float(alpha_f), ctypes.byref(mo))
    return out


def mm_w4a16(a, b, b_descale, alpha=None, out_dtype=None, out=None, block_size=16, use_nvfp4=True,
             b_descale_layout="128x4", backend="auto", enable_pdl=True):
    """W4A16 GEMM (fp4kit's own): ``out[M, N] = alpha * a @ dq(w)^T`` with a in bf16/fp16/fp32.

    a: [M, K] dense, row-major (a row stride larger than K is fine). b, b_descale: as in mm_fp4
    (b = w_q.T); b_descale_layout: '128x4' (default) or 'linear' (checkpoints' weight_scale [N, K/16]
    as stored). alpha: for a Model Optimizer checkpoint, weight_scale_2. out_dtype defaults to a's
    dtype.
    """
    fn = "mm_w4a16"
    fmt = _format(block_size, not use_nvfp4, fn)
    layout = _LAYOUT_BY_NAME.get(b_descale_layout)
    if layout is None:
        raise InvalidArgumentError("%s: b_descale_layout %r is not one of %s" % (fn, b_descale_layout, sorted(_LAYOUT_BY_NAME)))
    va, vb, vsb = T.View(a, "a"), T.View(b, "b"), T.View(b_descale, "b_descale")
    device = T.same_place(va, vb, vsb)
    va.require_dims(2, "activations [M, K]")
    va.require_dtype(T.DENSE_DTYPES, "the activations")
    lda = va.row_stride()
    if lda is None:
        raise InvalidArgumentError("%s: a must be row-major with unit column stride (strides %s)" % (fn, list(va.strides)))
    m, k = va.shape
    n = _weight_n(vb, va, k, "[M, K]", block_size, fn)
    sb = _scales(vsb, fmt, layout, n, k, fn)
    alpha_f = T.scalar(alpha, "alpha", 1.0)
    out, vo, ld = _output(out, out_dtype, va, m, n, va.dtype, fn)
    T.same_place(va, vo)
    ma = _matrix(va, m, k, lda)
    qb = _qmatrix(vb.ptr, sb, n, k, fmt, layout, 1.0, vb.memory)
    mo = _matrix(vo, m, n, ld)
    _call(fn, device, backend, enable_pdl, _lib.LIB.fp4_mm_w4a16, ctypes.byref(ma), ctypes.byref(qb),
          ctypes.c_float(alpha_f), ctypes.byref(mo))
    return out


# ---- quantization -------------------------------------------------------------------------------------

def _scale_shape(nbytes, fmt, layout, k):
    """FlashInfer reshapes scales to (-1, K/block); when the padded buffer does not divide that way
    (K/block not a multiple of 4 in a swizzled layout) the padded 2-D shape is returned instead."""
    c = k // _BLOCK[fmt]
    if nbytes % c == 0:
        return (nbytes // c, c)
    cp = (c + 3) // 4 * 4
    return (nbytes // cp, cp)


def fp4_quantize(input, global_scale=None, sf_vec_size=16, sf_use_ue8m0=False, is_sf_swizzled_layout=True,
                 is_sf_8x4_layout=False, enable_pdl=None, backend="auto"):
    """Quantizes [..., K] bf16/fp16/fp32 values with the runtime recipe (FlashInfer's fp4_quantize).

    global_scale: the NVFP4 encode scale 448*6/amax (tensor, array or float; None = 1; ignored for
    MXFP4); a CUDA tensor is read back to the host. sf_vec_size=16 with sf_use_ue8m0=False is NVFP4,
    32 with True is MXFP4. Scales are swizzled 128x4 (8x4 with is_sf_8x4_layout) or linear.
    A column-major 2-D input is quantized along its memory rows and the results are returned
    transposed, as FlashInfer does. Returns (x_q uint8 [..., K/2], sf uint8 [-1, K/sf_vec_size]).
    """
    fn = "fp4_quantize"
    fmt = _format(sf_vec_size, sf_use_ue8m0, fn, "sf_vec_size", "sf_use_ue8m0")
    layout = (_lib.LAYOUT_8X4 if is_sf_8x4_layout else _lib.LAYOUT_128X4) if is_sf_swizzled_layout else _lib.LAYOUT_LINEAR
    v = T.View(input, "input")
    if len(v.shape) < 2:
        raise InvalidArgumentError("%s: input must be [..., K] with at least 2 dimensions; got shape %s" % (fn, list(v.shape)))
    v.require_dtype(T.DENSE_DTYPES, "the values to quantize")
    column_major = len(v.shape) == 2 and v.row_stride() is None and v.is_transposed_contiguous()
    if column_major:
        x_q, sf = fp4_quantize(input.T, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                               is_sf_8x4_layout, enable_pdl, backend)
        return x_q.T, sf.T
    k = v.shape[-1]
    if k % sf_vec_size:
        raise InvalidArgumentError("%s: the last dimension K = %d is not a multiple of sf_vec_size %d" % (fn, k, sf_vec_size))
    lead = v.shape[:-1]
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
    gs = 1.0 if fmt == _lib.FORMAT_MXFP4 else T.scalar(global_scale, "global_scale", 1.0)
    nbytes = scales_size(fmt, layout, rows, k)
    x_q = T.empty(v, lead + (k // 2,), T.U8)
    sf = T.empty(v, (nbytes,), T.U8)
    vq, vs = T.View(x_q, "x_q"), T.View(sf, "sf")
    mx = _matrix(v, rows, k, ld)
    q = _qmatrix(vq.ptr, vs.ptr, rows, k, fmt, layout, 1.0, v.memory)
    _call(fn, v.device, backend, enable_pdl, _lib.LIB.fp4_quantize, ctypes.byref(mx), ctypes.c_float(gs),
          ctypes.byref(q))
    return x_q, T.reshape(sf, _scale_shape(nbytes, fmt, layout, k))


def nvfp4_quantize(a, a_global_sf, sfLayout=SfLayout.layout_128x4, do_shuffle=False, sf_vec_size=16, enable_pdl=None):
    """NVFP4 quantization (FlashInfer's nvfp4_quantize): scales in sfLayout (128x4, 8x4 or linear).
    do_shuffle=True (TensorRT-LLM's shuffled weight layout for its trtllm GEMM) is not provided:
    fp4kit's GEMMs take weights as quantized."""
    if do_shuffle:
        raise UnsupportedError("nvfp4_quantize: do_shuffle=True produces the trtllm backend's shuffled weight layout, "
                               "which fp4kit does not use; quantize with do_shuffle=False", _lib.ERR_UNSUPPORTED)
    if sf_vec_size != 16:
        raise UnsupportedError("nvfp4_quantize: NVFP4 has sf_vec_size 16, got %r" % (sf_vec_size,), _lib.ERR_UNSUPPORTED)
    if not isinstance(sfLayout, SfLayout):
        raise InvalidArgumentError("nvfp4_quantize: sfLayout must be an fp4kit.SfLayout, not %r" % (sfLayout,))
    layout = _SF_LAYOUT_C[sfLayout]
    return fp4_quantize(a, a_global_sf, 16, False, layout != _lib.LAYOUT_LINEAR, layout == _lib.LAYOUT_8X4, enable_pdl)


def mxfp4_quantize(a, enable_pdl=None):
    """MXFP4 quantization (FlashInfer's mxfp4_quantize): UE8M0 scales per 32, 128x4 layout."""
    return fp4_quantize(a, None, 32, True, True, False, enable_pdl)


# ---- dequantization and scale layouts (host) --------------------------------------------------------------

def _host(x):
    """The host copy FlashInfer's host-side helpers make of a CUDA tensor; other inputs as they are."""
    return x.cpu() if T.is_torch(x) and x.is_cuda else x


def e2m1_and_ufp8sf_scale_to_float(e2m1_tensor, ufp8_scale_tensor, global_scale_tensor=None, sf_vec_size=16,
                                   ufp8_type=1, is_sf_swizzled_layout=True):
    """Dequantizes packed FP4 [M, K/2] with its block scales to float32 [M, K] on the host (like
    FlashInfer, CUDA tensors are copied to the CPU and a CPU tensor is returned).

    ufp8_type: 1 = E4M3 scales (NVFP4, sf_vec_size 16), 0 = UE8M0 (MXFP4, 32).
    global_scale_tensor: the per-tensor decode multiplier (1/global_scale; None = 1).
    """
    fn = "e2m1_and_ufp8sf_scale_to_float"
    if ufp8_type not in (0, 1):
        raise InvalidArgumentError("%s: ufp8_type must be 1 (E4M3) or 0 (UE8M0), got %r" % (fn, ufp8_type))
    fmt = _format(sf_vec_size, ufp8_type == 0, fn, "sf_vec_size", "ufp8_type")
    layout = _lib.LAYOUT_128X4 if is_sf_swizzled_layout else _lib.LAYOUT_LINEAR
    e2m1, sf = _host(e2m1_tensor), _host(ufp8_scale_tensor)
    ve, vs = T.View(e2m1, "e2m1_tensor"), T.View(sf, "ufp8_scale_tensor")
    m, k = _fp4_rowmajor(ve, fn)
    if k % sf_vec_size:
        raise InvalidArgumentError("%s: K = %d is not a multiple of sf_vec_size %d" % (fn, k, sf_vec_size))
    sp = _scales(vs, fmt, layout, m, k, fn, exact=False)
    mult = T.scalar(global_scale_tensor, "global_scale_tensor", 1.0)
    out = T.empty(ve, (m, k), T.F32)
    vo = T.View(out, "out")
    q = _qmatrix(ve.ptr, sp, m, k, fmt, layout, mult, _lib.MEMORY_HOST)
    mo = _matrix(vo, m, k, k)
    _lib.check(_lib.LIB.fp4_dequantize(ctypes.byref(q), ctypes.byref(mo)), fn)
    return out


def block_scale_interleave(unswizzled_sf):
    """Swizzles linear block scales [rows, cols] (or [experts, rows, cols]) into the 128x4 layout
    and returns them flat: experts * roundup(rows, 128) * roundup(cols, 4) uint8, padding zero.
    The layout work runs on the host; a CUDA tensor is copied there and the result copied back."""
    fn = "block_scale_interleave"
    v = T.View(unswizzled_sf, "unswizzled_sf")
    if len(v.shape) not in (2, 3):
        raise InvalidArgumentError("%s: unswizzled_sf must be [rows, cols] or [experts, rows, cols]; got shape %s"
                                   % (fn, list(v.shape)))
    v.require_dtype(("uint8", "float8_e4m3fn", "float8_e8m0fnu"), "one-byte block scales")
    if not v.is_contiguous():
        raise InvalidArgumentError("%s: unswizzled_sf must be contiguous (strides %s)" % (fn, list(v.strides)))
    experts, rows, cols = (1,) + v.shape if len(v.shape) == 2 else v.shape
    host = _host(unswizzled_sf)
    vh = T.View(host, "unswizzled_sf")
    # The layout does not depend on the format; NVFP4 with 16 elements per scale column maps the
    # scale grid [rows, cols] onto a [rows, 16*cols] matrix.
    per = scales_size(_lib.FORMAT_NVFP4, _lib.LAYOUT_128X4, rows, 16 * cols)
    out = T.empty(vh, (experts * per,), T.U8)
    vo = T.View(out, "out")
    for e in range(experts):
        _lib.check(_lib.LIB.fp4_scales_convert(_lib.FORMAT_NVFP4, rows, 16 * cols, vh.ptr + e * rows * cols,
                                               _lib.LAYOUT_LINEAR, vo.ptr + e * per, _lib.LAYOUT_128X4), fn)
    if v.device >= 0:
        out = out.to(unswizzled_sf.device)
    return out


nvfp4_block_scale_interleave = block_scale_interleave


def mxfp4_dequantize(a_fp4, a_sf):
    """Dequantizes MXFP4 [M, K/2] with 128x4 UE8M0 scales to float32 [M, K] on the host."""
    return e2m1_and_ufp8sf_scale_to_float(a_fp4, a_sf, None, 32, 0, True)
