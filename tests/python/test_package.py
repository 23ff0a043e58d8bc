"""Tests of the Python package fp4kit (python/fp4kit) on NumPy arrays and PyTorch tensors.

Which library is tested, in order: FP4KIT_LIB (with the package source of this checkout), the
installed package (`pip install ./python`), or a library this module builds with CMake into
build-pytest/ (host-only, or CUDA for the local GPU when PyTorch sees one).

The C reference is called directly through ctypes, with structs declared here independently of the
package, so a mistake in the package's own declarations cannot hide.
"""

import ctypes
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

try:
    import torch
except ImportError:  # the CPU tests run without PyTorch
    torch = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = torch is not None and torch.cuda.is_available()


def _build_library():
    build = os.path.join(REPO, "build-pytest")
    args = ["cmake", "-S", REPO, "-B", build, "-DFP4KIT_BUILD_TESTS=OFF", "-DFP4KIT_BUILD_TOOLS=OFF",
            "-DPython3_EXECUTABLE=" + sys.executable]  # fp4kit._native for the Python running the tests
    args += ["-DCMAKE_CUDA_ARCHITECTURES=native"] if CUDA else ["-DFP4KIT_ENABLE_CUDA=OFF"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(build, "libfp4kit.so")


def _import_fp4kit():
    if not os.environ.get("FP4KIT_LIB"):
        try:
            return importlib.import_module("fp4kit")
        except ImportError:
            os.environ["FP4KIT_LIB"] = _build_library()
    sys.path.insert(0, os.path.join(REPO, "python"))
    sys.modules.pop("fp4kit", None)
    return importlib.import_module("fp4kit")


fp4kit = _import_fp4kit()
cuda_only = pytest.mark.skipif(not CUDA, reason="needs PyTorch with a CUDA device")
torch_only = pytest.mark.skipif(torch is None, reason="needs PyTorch")

# ---- the C API through ctypes, declared here ----------------------------------------------------------

C = ctypes.CDLL(fp4kit.library_path())


class CQ(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("format", ctypes.c_int), ("layout", ctypes.c_int),
                ("multiplier", ctypes.c_float), ("memory", ctypes.c_int)]


class CM(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("ld", ctypes.c_int64), ("dtype", ctypes.c_int), ("memory", ctypes.c_int)]


class COpts(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char_p), ("config", ctypes.c_char_p), ("enable_pdl", ctypes.c_int),
                ("stream", ctypes.c_void_p), ("info", ctypes.c_void_p), ("alpha_device", ctypes.c_void_p),
                ("global_scale_device", ctypes.c_void_p)]


C.fp4_quantize.argtypes = [ctypes.c_void_p, ctypes.POINTER(CM), ctypes.c_float, ctypes.POINTER(CQ), ctypes.POINTER(COpts)]
C.fp4_scales_size.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_size_t)]
C.fp4_last_error.restype = ctypes.c_char_p

NVFP4, MXFP4 = 0, 1
LAYOUTS = {"linear": 0, "128x4": 1, "8x4": 2}
DTYPES = {"float32": (0, np.float32), "bfloat16": (1, ml_dtypes.bfloat16), "float16": (2, np.float16)}


def c_quantize_ref(x, fmt, layout, gsf):
    """fp4_quantize on the ref backend, outputs pre-filled with 0xAB so unwritten bytes show."""
    rows, cols = x.shape
    n = ctypes.c_size_t()
    assert C.fp4_scales_size(fmt, LAYOUTS[layout], rows, cols, ctypes.byref(n)) == 0
    q = np.full((rows, cols // 2), 0xAB, np.uint8)
    s = np.full(n.value, 0xAB, np.uint8)
    m = CM(x.ctypes.data, rows, cols, 0, DTYPES[x.dtype.name][0], 0)
    out = CQ(q.ctypes.data, s.ctypes.data, rows, cols, fmt, LAYOUTS[layout], 0.0, 0)
    opts = COpts(b"ref", None, 0, None, None)
    st = C.fp4_quantize(None, ctypes.byref(m), ctypes.c_float(gsf), ctypes.byref(out), ctypes.byref(opts))
    assert st == 0, C.fp4_last_error().decode()
    return q, s, out.multiplier


# ---- independent NumPy helpers ------------------------------------------------------------------------

def offsets_128x4(rows, cols):
    """The 128x4 layout: off = (r/128)*(Cp/4)*512 + (c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + (c%4)."""
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    cp = (cols + 3) // 4 * 4
    return (r // 128) * (cp // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)


def offsets(layout, rows, cols):
    if layout == "128x4":
        return offsets_128x4(rows, cols)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    if layout == "8x4":
        cp = (cols + 3) // 4 * 4
        return (r // 8) * cp * 8 + (c // 4) * 32 + (r % 8) * 4 + (c % 4)
    return r * cols + c


def unpack_codes(q):
    """Packed bytes [R, K/2] -> codes [R, K], element 0 in the low nibble."""
    codes = np.empty((q.shape[0], q.shape[1] * 2), np.uint8)
    codes[:, 0::2] = q & 0xF
    codes[:, 1::2] = q >> 4
    return codes


def decode_e2m1(codes):
    return codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)


def decode_scales(s, fmt, layout, rows, k):
    bs = 16 if fmt == NVFP4 else 32
    sb = s.reshape(-1)[offsets(layout, rows, k // bs)]
    t = ml_dtypes.float8_e4m3fn if fmt == NVFP4 else ml_dtypes.float8_e8m0fnu
    return sb, sb.view(t).astype(np.float32)


def dequant(q, s, fmt, layout):
    """Float64 values e2m1 * block scale (no per-tensor multiplier), decoded with ml_dtypes."""
    rows, k = q.shape[0], q.shape[1] * 2
    bs = 16 if fmt == NVFP4 else 32
    _, sc = decode_scales(s, fmt, layout, rows, k)
    return decode_e2m1(unpack_codes(q)).astype(np.float64) * np.repeat(sc, bs, axis=1).astype(np.float64)


def random_input(rng, rows, cols, dtype="float32"):
    """Normal values with edge blocks: zeros, ties of the E2M1 grid, huge and tiny magnitudes."""
    x = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(3.0)
    x[0, :16] = 0.0
    if cols >= 32:
        x[0, 16:32] = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2, np.float32) * np.float32(1 / 6 * 6)
    if rows > 1:
        x[1, :16] *= np.float32(1e3)
        x[1, -16:] *= np.float32(1e-6)
        x[1, 3] = -1e-30
    return x.astype(DTYPES[dtype][1])


def gsf_of(x):
    return float(np.float32(448 * 6) / np.float32(np.abs(x.astype(np.float32)).max()))


SHAPES = [(1, 64), (37, 48), (130, 256), (5, 96)]

# ---- quantization --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt,layout", [(NVFP4, "128x4"), (NVFP4, "linear"), (NVFP4, "8x4"), (MXFP4, "128x4"),
                                        (MXFP4, "linear")])
def test_quantize_bit_exact_vs_c_reference(rows, cols, dtype, fmt, layout):
    if fmt == MXFP4 and cols % 32:
        cols += 16
    rng = np.random.default_rng(rows * 1000 + cols)
    x = random_input(rng, rows, cols, dtype)
    gsf = gsf_of(x)
    q_ref, s_ref, mult = c_quantize_ref(x, fmt, layout, gsf)
    kwargs = dict(sf_vec_size=16 if fmt == NVFP4 else 32, sf_use_ue8m0=fmt == MXFP4,
                  is_sf_swizzled_layout=layout != "linear", is_sf_8x4_layout=layout == "8x4")
    q, s = fp4kit.fp4_quantize(x, np.array([gsf], np.float32), **kwargs)
    assert q.dtype == np.uint8 and q.shape == (rows, cols // 2)
    assert s.dtype == np.uint8 and s.size == s_ref.size
    np.testing.assert_array_equal(q, q_ref)
    np.testing.assert_array_equal(s.reshape(-1), s_ref)
    assert mult == (np.float32(1) / np.float32(gsf) if fmt == NVFP4 else 1.0)
    # padding of swizzled layouts is zero
    mask = np.ones(s_ref.size, bool)
    mask[offsets(layout, rows, cols // (16 if fmt == NVFP4 else 32)).reshape(-1)] = False
    assert not s_ref[mask].any()


def _expected_nvfp4(x, gsf):
    """The runtime recipe in float32 NumPy with ml_dtypes casts: (codes, scale bytes)."""
    f = np.float32
    xb = x.astype(f).reshape(x.shape[0], -1, 16)
    vmax = np.abs(xb).max(axis=2)
    sf_value = f(gsf) * (vmax * f(1.0 / 6.0))  # FlashInfer's order (fp4_quantize's default)
    sb = np.minimum(sf_value, f(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    with np.errstate(divide="ignore", over="ignore"):
        out_scale = f(1) / (sb.view(ml_dtypes.float8_e4m3fn).astype(f) * (f(1) / f(gsf)))
    out_scale = np.where(vmax == 0, f(0), out_scale).astype(f)  # an underflowed scale byte: +inf
    sb = np.where(vmax == 0, 0, sb).astype(np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (xb * out_scale[:, :, None]).astype(f)
    codes = np.clip(scaled, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    codes = np.where(np.isnan(scaled), 7, codes)  # 0 * inf: NaN -> +6
    return codes.reshape(x.shape), sb


def _expected_mxfp4(x):
    f = np.float32
    xb = x.astype(f).reshape(x.shape[0], -1, 32)
    v = np.abs(xb).max(axis=2) / f(6)
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1): ceil(log2 v) = e - 1 when m == 0.5
    biased = np.where(m == 0.5, e - 1, e) + 127
    biased = np.where(v == 0, 0, np.clip(biased, 0, 254)).astype(np.uint8)
    out_scale = np.ldexp(f(1), 127 - biased.astype(np.int32)).astype(f)
    codes = np.clip((xb * out_scale[:, :, None]).astype(f), -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    return codes.reshape(x.shape), biased


@pytest.mark.parametrize("rows,cols", [(3, 64), (129, 128)])
@pytest.mark.parametrize("fmt", [NVFP4, MXFP4])
def test_quantize_and_dequantize_agree_with_ml_dtypes(rows, cols, fmt):
    rng = np.random.default_rng(7 + rows)
    x = random_input(rng, rows, cols)
    gsf = gsf_of(x)
    if fmt == NVFP4:
        q, s = fp4kit.nvfp4_quantize(x, gsf, sfLayout=fp4kit.SfLayout.layout_128x4)
        codes, sb = _expected_nvfp4(x, gsf)
    else:
        q, s = fp4kit.mxfp4_quantize(x)
        codes, sb = _expected_mxfp4(x)
    np.testing.assert_array_equal(unpack_codes(q), codes)
    got_sb, sc = decode_scales(s, fmt, "128x4", rows, cols)
    np.testing.assert_array_equal(got_sb, sb)
    mult = np.float32(1) / np.float32(gsf) if fmt == NVFP4 else np.float32(1)
    bs = 16 if fmt == NVFP4 else 32
    expect = (decode_e2m1(codes) * np.repeat(sc, bs, axis=1)).astype(np.float32) * mult
    got = fp4kit.e2m1_and_ufp8sf_scale_to_float(q, s, np.float32(mult), bs, 1 if fmt == NVFP4 else 0, True)
    assert got.dtype == np.float32 and got.shape == (rows, cols)
    np.testing.assert_array_equal(got, expect)


def test_quantize_row_stride_and_leading_dims():
    rng = np.random.default_rng(3)
    big = random_input(rng, 6, 160)
    view = big[:, :128]  # row stride 160 > K
    q1, s1 = fp4kit.fp4_quantize(view, 2.0)
    q2, s2 = fp4kit.fp4_quantize(np.ascontiguousarray(view), 2.0)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(s1, s2)
    x3 = random_input(rng, 6, 64).reshape(2, 3, 64)
    q3, s3 = fp4kit.fp4_quantize(x3, 1.0)
    q4, s4 = fp4kit.fp4_quantize(x3.reshape(6, 64), 1.0)
    assert q3.shape == (2, 3, 32)
    np.testing.assert_array_equal(q3.reshape(6, 32), q4)
    np.testing.assert_array_equal(s3, s4)


def test_quantize_column_major_input_is_quantized_along_memory_rows():
    rng = np.random.default_rng(4)
    x = random_input(rng, 64, 48)  # row-major [64, 48]; x.T is a column-major [48, 64]
    q, s = fp4kit.fp4_quantize(x.T, 1.0)
    q_ref, s_ref = fp4kit.fp4_quantize(x, 1.0)
    assert q.shape == (24, 64)
    np.testing.assert_array_equal(q, q_ref.T)
    np.testing.assert_array_equal(s, s_ref.T)


def test_scale_shape_follows_flashinfer():
    x = np.ones((3, 128), np.float32)
    _, s = fp4kit.fp4_quantize(x, 1.0)
    assert s.shape == (128, 8)  # (-1, K/16): roundup(3, 128) rows
    _, s = fp4kit.fp4_quantize(np.ones((3, 80), np.float32), 1.0)
    assert s.shape == (128, 8)  # K/16 = 5 does not divide the padded buffer: (roundup(M,128), roundup(5,4))
    _, s = fp4kit.fp4_quantize(np.ones((3, 80), np.float32), 1.0, is_sf_swizzled_layout=False)
    assert s.shape == (3, 5)


@pytest.mark.parametrize("m", [1, 4, 100, 128, 300])
@pytest.mark.parametrize("k", [16, 32, 96, 128])
@pytest.mark.parametrize("fmt,layout", [(NVFP4, "128x4"), (NVFP4, "8x4"), (NVFP4, "linear"), (MXFP4, "128x4"),
                                        (MXFP4, "8x4"), (MXFP4, "linear")])
def test_scale_shape_is_the_padded_grid_for_every_m(m, k, fmt, layout):
    """FlashInfer's shape of the returned scales: [roundup(M, 128), roundup(K/block, 4)] for 128x4,
    [roundup(M, 8), roundup(K/block, 4)] for 8x4 and [M, K/block] for linear, whatever M is (no
    reshaping of the padded buffer to K/block columns where that divides)."""
    bs = 16 if fmt == NVFP4 else 32
    if k % bs:
        pytest.skip("K not a multiple of the block")
    c = k // bs
    want = {"128x4": ((m + 127) // 128 * 128, (c + 3) // 4 * 4), "8x4": ((m + 7) // 8 * 8, (c + 3) // 4 * 4),
            "linear": (m, c)}[layout]
    x = random_input(np.random.default_rng(m + k), m, k)
    q, s = fp4kit.fp4_quantize(x, None if fmt == MXFP4 else 1.0, bs, fmt == MXFP4, layout != "linear",
                               layout == "8x4")
    assert q.shape == (m, k // 2) and s.shape == want
    q_ref, s_ref, _ = c_quantize_ref(x, fmt, layout, 1.0)
    np.testing.assert_array_equal(s.reshape(-1), s_ref)
    # a column-major input gives the transposes, and N-D inputs the scales of their rows
    qt, st = fp4kit.fp4_quantize(np.asfortranarray(x.T).T, None if fmt == MXFP4 else 1.0, bs, fmt == MXFP4,
                                 layout != "linear", layout == "8x4")
    assert st.shape == want
    if m % 2 == 0:
        _, s3 = fp4kit.fp4_quantize(x.reshape(2, m // 2, k), None if fmt == MXFP4 else 1.0, bs, fmt == MXFP4,
                                    layout != "linear", layout == "8x4")
        assert s3.shape == want


# ---- block_scale_interleave ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1), (130, 5), (256, 8), (3, 40, 6)])
def test_block_scale_interleave_matches_128x4_formula(shape):
    rng = np.random.default_rng(sum(shape))
    sf = rng.integers(1, 255, size=shape, dtype=np.uint8)
    out = fp4kit.block_scale_interleave(sf)
    experts, rows, cols = (1,) + shape if len(shape) == 2 else shape
    per = (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)
    assert out.dtype == np.uint8 and out.shape == (experts * per,)
    for e in range(experts):
        expect = np.zeros(per, np.uint8)
        expect[offsets_128x4(rows, cols).reshape(-1)] = sf.reshape(experts, rows, cols)[e].reshape(-1)
        np.testing.assert_array_equal(out[e * per:(e + 1) * per], expect)


def test_block_scale_interleave_of_checkpoint_scales_equals_quantize_128x4():
    x = random_input(np.random.default_rng(5), 50, 128)
    _, s_lin = fp4kit.fp4_quantize(x, 3.0, is_sf_swizzled_layout=False)
    _, s_sw = fp4kit.fp4_quantize(x, 3.0)
    np.testing.assert_array_equal(fp4kit.block_scale_interleave(s_lin), s_sw.reshape(-1))
    assert fp4kit.nvfp4_block_scale_interleave is fp4kit.block_scale_interleave


# ---- GEMM ------------------------------------------------------------------------------------------------


def _operands(m, n, k, fmt=NVFP4, seed=0):
    rng = np.random.default_rng(seed)
    x, w = random_input(rng, m, k), random_input(rng, n, k)
    if fmt == NVFP4:
        gx, gw = gsf_of(x), gsf_of(w)
        xq, xs = fp4kit.nvfp4_quantize(x, gx)
        wq, ws = fp4kit.nvfp4_quantize(w, gw)
        alpha = np.float32(1) / (np.float32(gx) * np.float32(gw))
    else:
        (xq, xs), (wq, ws) = fp4kit.mxfp4_quantize(x), fp4kit.mxfp4_quantize(w)
        alpha = np.float32(1)
    ref = dequant(xq, xs, fmt, "128x4") @ dequant(wq, ws, fmt, "128x4").T * np.float64(alpha)
    return xq, xs, wq, ws, alpha, ref


@pytest.mark.parametrize("m,n,k", [(1, 7, 64), (33, 130, 256), (128, 64, 96)])
@pytest.mark.parametrize("fmt", [NVFP4, MXFP4])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
def test_mm_fp4_ref_is_exact_against_float64(m, n, k, fmt, out_dtype):
    if fmt == MXFP4 and k % 32:
        k += 32 - k % 32
    xq, xs, wq, ws, alpha, ref = _operands(m, n, k, fmt, seed=m + n)
    np_dtype = DTYPES[out_dtype][1]
    out = np.full((m, n), np.nan, np_dtype)
    got = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np_dtype, out, block_size=16 if fmt == NVFP4 else 32,
                        backend="ref", use_nvfp4=fmt == NVFP4)
    assert got is out
    # The reference sums exact products in double: the float64 product of NumPy, rounded to float
    # and then to the output type, is the same number.
    with np.errstate(over="ignore"):  # the huge test block overflows float16 to inf on both sides
        expect = ref.astype(np.float32).astype(np_dtype).astype(np.float64)
    np.testing.assert_array_equal(got.astype(np.float64), expect)
    assert fp4kit.last_run()["backend"] == "ref"


def test_mm_fp4_auto_within_tolerance_and_default_bf16():
    xq, xs, wq, ws, alpha, ref = _operands(17, 96, 512, seed=11)
    got = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha)
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (17, 96)
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= 2.0 ** -8 * np.abs(ref) + 1e-5 * np.abs(ref).max()), err.max()
    assert fp4kit.last_run()["backend"] in [b["name"] for b in fp4kit.backends() if b["available"]]


def test_mm_fp4_b_descale_either_orientation_and_out_with_row_stride():
    xq, xs, wq, ws, alpha, ref = _operands(5, 40, 64, seed=2)
    a = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32)
    b = fp4kit.mm_fp4(xq, wq.T, xs, ws, alpha, np.float32)
    np.testing.assert_array_equal(a, b)
    big = np.full((5, 64), np.nan, np.float32)
    c = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, big[:, :40])
    np.testing.assert_array_equal(c, a)
    assert np.isnan(big[:, 40:]).all()


@pytest.mark.parametrize("layout", ["128x4", "linear"])
def test_mm_w4a16_against_float64(layout):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((9, 128)).astype(np.float32)
    w = random_input(rng, 70, 128)
    gw = gsf_of(w)
    wq, ws = fp4kit.nvfp4_quantize(w, gw, sfLayout=fp4kit.SfLayout.layout_128x4 if layout == "128x4"
                                   else fp4kit.SfLayout.layout_linear)
    alpha = np.float32(1) / np.float32(gw)
    ref = a.astype(np.float64) @ dequant(wq, ws, NVFP4, layout).T * np.float64(alpha)
    got = fp4kit.mm_w4a16(a, wq.T, ws.T, alpha, b_descale_layout=layout)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
    got16 = fp4kit.mm_w4a16(a.astype(ml_dtypes.bfloat16), wq.T, ws.T, alpha, b_descale_layout=layout)
    assert got16.dtype == ml_dtypes.bfloat16


def test_mm_rejects_a_weight_that_is_not_the_transposed_view():
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    with pytest.raises(ValueError, match=r"transposed view w_q\.T"):
        fp4kit.mm_fp4(xq, np.ascontiguousarray(wq.T), xs, ws.T, alpha)


# ---- errors ------------------------------------------------------------------------------------------------


def test_errors_carry_their_status():
    """Every fp4kit error carries a C status: the library's, or for the package's own checks the
    status of the error's kind."""
    with pytest.raises(fp4kit.InvalidArgumentError) as e:
        fp4kit.fp4_quantize(np.ones(64, np.float32), 1.0)  # refused in Python (a 1-D input)
    assert e.value.status == -1
    with pytest.raises(fp4kit.UnsupportedError) as e:
        fp4kit.fp4_quantize(np.ones((4, 64), np.float32), 1.0, sf_vec_size=64)
    assert e.value.status == -2
    with pytest.raises(fp4kit.InvalidArgumentError) as e:
        fp4kit.fp4_quantize(np.ones((4, 64), np.float32), 0.0)  # refused by the library
    assert e.value.status == -1
    assert fp4kit.NotFoundError("x").status == -7 and fp4kit.OutOfMemoryError("x").status == -3
    assert fp4kit.InvalidArgumentError("x", -5).status == -5


def test_errors_carry_the_library_message():
    x = np.ones((4, 64), np.float32)
    with pytest.raises(ValueError, match=r"fp4_quantize: global_scale \(0\) must be finite and positive"):
        fp4kit.fp4_quantize(x, 0.0)
    with pytest.raises(fp4kit.InvalidArgumentError):
        fp4kit.fp4_quantize(x, float("inf"))
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    with pytest.raises(ValueError, match=r"fp4_mm: alpha \(inf\) is not finite"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, float("inf"))
    with pytest.raises(ValueError, match=r"no backend named 'nonexistent'") as e:
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, backend="nonexistent")
    assert isinstance(e.value, fp4kit.NotFoundError) and e.value.status == -7


def test_argument_errors_are_value_errors_with_a_message():
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    cases = [
        (lambda: fp4kit.fp4_quantize(np.ones((4, 40), np.float32), 1.0), r"K = 40 is not a multiple of sf_vec_size 16"),
        (lambda: fp4kit.fp4_quantize(np.ones(64, np.float32), 1.0), r"at least 2 dimensions"),
        (lambda: fp4kit.fp4_quantize(np.ones((4, 64), np.int32), 1.0), r"input dtype int32"),
        (lambda: fp4kit.fp4_quantize([[1.0] * 16], 1.0), r"NumPy array or a PyTorch tensor"),
        (lambda: fp4kit.fp4_quantize(np.ones((4, 64), np.float32), 1.0, 32, False), r"sf_vec_size=32 does not match"),
        (lambda: fp4kit.mm_fp4(np.ascontiguousarray(xq[:, :16]), wq.T, xs, ws.T, alpha), r"K differs \(32 vs 64\)"),
        (lambda: fp4kit.mm_fp4(xq[:, :16], wq.T, xs, ws.T, alpha), r"must be row-major and contiguous"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs[:64], ws.T, alpha), r"a_descale holds 256 bytes"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs.reshape(-1)[:100], ws.T, alpha), r"a_descale holds 100 bytes but the NVFP4 scales of a \[4, 64\] matrix in the 128x4 layout take 512"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, out=np.empty((4, 31), np.float32)), r"out has shape \[4, 31\]"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float16, np.empty((4, 32), np.float32)), r"out is float32 but out_dtype is float16"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.int32), r"out_dtype int32"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, np.ones(2, np.float32)), r"alpha must be a scalar"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, block_size=32), r"block_size=32 does not match use_nvfp4=True"),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs.view(ml_dtypes.float8_e8m0fnu), ws.T, alpha), r"a_descale dtype float8_e8m0fnu"),
        (lambda: fp4kit.mm_w4a16(np.ones((4, 64), np.float32), wq.T, ws.T, b_descale_layout="16x4"), r"b_descale_layout"),
        (lambda: fp4kit.e2m1_and_ufp8sf_scale_to_float(xq, xs, None, 16, 3), r"ufp8_type must be 1"),
        (lambda: fp4kit.block_scale_interleave(np.ones(5, np.uint8)), r"\[rows, cols\] or \[experts, rows, cols\]"),
        (lambda: fp4kit.backends(device=-3), r"CUDA device ordinal"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()
    # MXFP4 scales in the 8x4 layout, as FlashInfer writes them: [roundup(4, 8), roundup(2, 4)].
    q, s = fp4kit.fp4_quantize(np.ones((4, 64), np.float32), 1.0, 32, True, True, True)
    assert q.shape == (4, 32) and s.size == 32 and (s.reshape(-1)[[0, 1, 4, 5, 8, 9, 12, 13]] == 125).all()


def test_unsupported_requests_are_not_implemented_errors():
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    names = [b["name"] for b in fp4kit.backends()]
    if "cutlass" not in names:
        with pytest.raises(NotImplementedError, match=r"'cutlass' is a FlashInfer backend that fp4kit does not provide"):
            fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, backend="cutlass")
    with pytest.raises(fp4kit.UnsupportedError, match=r"sf_vec_size can only be 16 or 32"):
        fp4kit.fp4_quantize(np.ones((4, 64), np.float32), 1.0, sf_vec_size=64)
    with pytest.raises(NotImplementedError, match=r"do_shuffle=True"):
        fp4kit.nvfp4_quantize(np.ones((4, 64), np.float32), 1.0, do_shuffle=True)


# ---- backends, probe, tune -------------------------------------------------------------------------------


def test_backends_lists_ref_as_available_on_the_host():
    bs = fp4kit.backends()
    ref = [b for b in bs if b["name"] == "ref"]
    assert ref and ref[0]["available"] and ref[0]["summary"]
    for b in bs:
        assert b["available"] or b["reason"], b  # every "no" says why


def test_probe_reports_every_backend_with_reasons():
    report = fp4kit.probe()
    names = [b["backend"] for b in report["backends"]]
    assert names == [b["name"] for b in fp4kit.backends()]
    ref = report["backends"][names.index("ref")]
    assert ref["available"] == "yes"
    assert ref["capabilities"]["nvfp4 w4a4"]["support"] == "yes"
    for b in report["backends"]:
        for cap, answer in b["capabilities"].items():
            assert answer["support"] == "yes" or answer["reason"], (b["backend"], cap)


def test_probe_answers_for_an_architecture_from_the_table():
    report = fp4kit.probe(arch="sm_120")
    assert report["arch"] == "sm_120" and report["backends"]
    with pytest.raises(ValueError):
        fp4kit.probe(arch="sm_7")


def test_tune_on_the_host_writes_a_cache(tmp_path):
    path = tmp_path / "tuning.json"
    results = fp4kit.tune([(64, 128)], m=[1, 3], device=None, runs=2, cache_path=str(path))
    assert [(r["m"], r["n"], r["k"]) for r in results] == [(1, 64, 128), (4, 64, 128)]  # M rounded to its bucket
    assert all(r["backend"] and r["median_us"] > 0 for r in results)
    assert path.exists() and path.read_text().strip().startswith("{")
    with pytest.raises(ValueError, match="format"):
        fp4kit.tune([(64, 128)], format="int4", device=None)


def test_import_does_not_need_torch():
    code = ("import sys; sys.modules['torch'] = None; import fp4kit, numpy as np; "
            "q, s = fp4kit.fp4_quantize(np.ones((2, 32), np.float32), 1.0); print(q.shape)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(2, 16)"


# ---- PyTorch CPU tensors -----------------------------------------------------------------------------------


@torch_only
def test_torch_cpu_tensors_give_the_same_bits_and_types():
    x = random_input(np.random.default_rng(12), 33, 128, "bfloat16")
    xt = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
    gsf = gsf_of(x)
    q, s = fp4kit.fp4_quantize(x, gsf)
    qt, st = fp4kit.fp4_quantize(xt, torch.tensor([gsf], dtype=torch.float32))
    assert isinstance(qt, torch.Tensor) and qt.dtype == torch.uint8 and st.dtype == torch.uint8
    np.testing.assert_array_equal(qt.numpy(), q)
    np.testing.assert_array_equal(st.numpy(), s)
    wt = torch.randn(24, 128, dtype=torch.bfloat16)
    wq, ws = fp4kit.fp4_quantize(wt, 1.0)
    out = fp4kit.mm_fp4(qt, wq.T, st, ws.T, torch.tensor(0.5), torch.float16, backend="ref")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float16 and out.shape == (33, 24)
    ref = dequant(q, s, NVFP4, "128x4") @ dequant(wq.numpy(), ws.numpy(), NVFP4, "128x4").T * 0.5
    np.testing.assert_array_equal(out.numpy().astype(np.float64), ref.astype(np.float32).astype(np.float16))
    deq = fp4kit.e2m1_and_ufp8sf_scale_to_float(qt, st, torch.tensor([1.0]))
    assert isinstance(deq, torch.Tensor) and deq.dtype == torch.float32
    lin = fp4kit.block_scale_interleave(torch.from_numpy(np.ones((3, 4), np.uint8)))
    assert isinstance(lin, torch.Tensor) and lin.shape == (512,)


@torch_only
def test_torch_transposed_views_are_used_without_copies():
    w = torch.randn(48, 64)
    wq, ws = fp4kit.fp4_quantize(w, 1.0)
    b = wq.T
    assert b.stride() == (1, 32) and b.data_ptr() == wq.data_ptr()
    xq, xs = fp4kit.fp4_quantize(torch.randn(3, 64), 1.0)
    a = fp4kit.mm_fp4(xq, b, xs, ws.T, None, torch.float32)
    c = fp4kit.mm_fp4(xq, b.contiguous().T.contiguous().T, xs, ws.T, None, torch.float32)  # another buffer, same layout
    assert torch.equal(a, c)
    with pytest.raises(ValueError, match="transposed view"):
        fp4kit.mm_fp4(xq, b.contiguous(), xs, ws.T, None, torch.float32)


@torch_only
def test_mixed_devices_or_kinds_are_rejected():
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    with pytest.raises(ValueError, match="out must be a NumPy array"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, out=torch.empty(4, 32, dtype=torch.bfloat16))


# ---- CUDA tensors (run on the GPU machine: pytest tests/python) -------------------------------------------


def _gpu_backends_or_skip(device=0):
    avail = [b for b in fp4kit.backends(device) if b["available"] and b["name"] not in ("ref", "cpu")]
    if not avail:
        pytest.skip("no GPU backend in this libfp4kit can run on cuda:%d: %s" % (
            device, "; ".join("%s: %s" % (b["name"], b["reason"]) for b in fp4kit.backends(device))))
    return [b["name"] for b in avail]


@cuda_only
@pytest.mark.parametrize("fmt", [NVFP4, MXFP4])
def test_cuda_quantize_bit_exact_vs_host_reference(fmt):
    _gpu_backends_or_skip()
    x = random_input(np.random.default_rng(21), 300, 512, "bfloat16")
    xh = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
    gsf = gsf_of(x)
    kw = dict(sf_vec_size=16 if fmt == NVFP4 else 32, sf_use_ue8m0=fmt == MXFP4)
    qd, sd = fp4kit.fp4_quantize(xh.cuda(), torch.tensor([gsf], device="cuda"), **kw)
    assert qd.is_cuda and sd.is_cuda
    q_ref, s_ref, _ = c_quantize_ref(x, fmt, "128x4", gsf)
    np.testing.assert_array_equal(qd.cpu().numpy(), q_ref)
    np.testing.assert_array_equal(sd.cpu().numpy().reshape(-1), s_ref)


@cuda_only
@pytest.mark.parametrize("m", [1, 16, 200])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_cuda_mm_fp4_against_torch_float64_on_a_side_stream(m, out_dtype):
    names = _gpu_backends_or_skip()
    n, k = 256, 1024
    torch.manual_seed(m)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    gx = (448 * 6) / x.float().abs().max()
    gw = (448 * 6) / w.float().abs().max()
    xq, xs = fp4kit.nvfp4_quantize(x, gx)
    wq, ws = fp4kit.nvfp4_quantize(w, gw)
    alpha = 1.0 / (gx * gw)
    dx = fp4kit.e2m1_and_ufp8sf_scale_to_float(xq, xs).double()
    dw = fp4kit.e2m1_and_ufp8sf_scale_to_float(wq, ws).double()
    ref = (dx @ dw.T) * alpha.double().cpu()
    dt = getattr(torch, out_dtype)
    for backend in ["auto"] + names:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())  # the quantized operands come from the default stream
        with torch.cuda.stream(stream):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            try:
                got = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, dt, out, backend=backend)
            except fp4kit.UnsupportedError as e:  # an available backend may still refuse NVFP4 W4A4, saying why
                assert backend != "auto" and str(e), backend
                continue
        stream.synchronize()
        assert got is out and got.is_cuda
        err = (got.double().cpu() - ref).abs()
        eps = 2.0 ** -8 if out_dtype == "bfloat16" else 2.0 ** -11
        assert not torch.isnan(got).any(), backend
        assert (err <= eps * ref.abs() + 1e-4 * ref.abs().max()).all(), (backend, err.max().item())


@cuda_only
def test_cuda_mm_w4a16_against_torch_float64():
    _gpu_backends_or_skip()
    torch.manual_seed(3)
    a = torch.randn(7, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(192, 512, device="cuda", dtype=torch.bfloat16)
    gw = (448 * 6) / w.float().abs().max()
    wq, ws = fp4kit.nvfp4_quantize(w, gw)
    try:
        got = fp4kit.mm_w4a16(a, wq.T, ws.T, 1.0 / gw)
    except NotImplementedError as e:
        pytest.skip("no W4A16 GPU backend here: %s" % e)
    ref = a.double().cpu() @ fp4kit.e2m1_and_ufp8sf_scale_to_float(wq, ws).double().T / gw.double().cpu()
    err = (got.double().cpu() - ref).abs()
    assert (err <= 2.0 ** -8 * ref.abs() + 1e-3 * ref.abs().max()).all(), err.max().item()


def test_struct_mirror_matches_the_library():
    """Every struct the binding mirrors has the library's size (a field added to include/fp4kit.h
    without the mirror would make ctypes read past each entry)."""
    from fp4kit import _lib
    lib = _lib.LIB
    for name in _lib.MIRRORED_STRUCTS:
        assert lib.fp4_struct_size(name.encode()) > 0, name
    assert _lib.layout_mismatches(lib) == []
    assert lib.fp4_struct_size(b"fp4_no_such_struct") == 0


def test_bad_scalars_and_empty_batches():
    """A string alpha is refused before any work; a batch of zero tokens is a valid call that returns an
    empty result of the right shape."""
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    with pytest.raises((TypeError, ValueError)):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, "1.0")
    with pytest.raises((TypeError, ValueError)):
        fp4kit.mm_w4a16(np.ones((4, 64), np.float32), wq.T, ws.T, "2")
    out = fp4kit.mm_w4a16(np.ones((0, 64), np.float32), wq.T, ws.T, alpha)
    assert out.shape == (0, 32)


def test_empty_batches_return_empty_results():
    """M = 0 (an empty batch) is a valid call everywhere, as in FlashInfer: quantizing no rows gives
    empty codes and scales, and the GEMMs, the MoE layer and the dequantizer give empty outputs,
    for sliced arrays and for the zero-stride arrays np.zeros((0, k)) makes."""
    xq, xs, wq, ws, alpha, ref = _operands(4, 32, 64)
    x = random_input(np.random.default_rng(3), 4, 64)
    for empty in (x[:0], np.zeros((0, 64), np.float32)):
        for swizzled, s8x4, sf_shape in ((True, False, (0, 4)), (True, True, (0, 4)), (False, False, (0, 4))):
            q0, s0 = fp4kit.fp4_quantize(empty, 1.0, 16, False, swizzled, s8x4)
            assert q0.shape == (0, 32) and s0.shape == sf_shape and q0.dtype == s0.dtype == np.uint8
        q0, s0 = fp4kit.fp4_quantize(empty, 1.0)
        assert fp4kit.mm_fp4(q0, wq.T, s0, ws.T, alpha).shape == (0, 32)
        out = np.empty((0, 32), np.float32)
        assert fp4kit.mm_fp4(q0, wq.T, s0, ws.T, alpha, np.float32, out) is out
        assert fp4kit.mm_w4a16(empty, wq.T, ws.T, alpha).shape == (0, 32)
        assert fp4kit.e2m1_and_ufp8sf_scale_to_float(q0, s0).shape == (0, 64)
    a0 = np.zeros((0, 32), np.uint8)
    assert fp4kit.mm_fp4(a0, wq.T, np.zeros((0, 4), np.uint8), ws.T, alpha).shape == (0, 32)
    q3, s3 = fp4kit.fp4_quantize(np.zeros((2, 0, 64), np.float32), 1.0)
    assert q3.shape == (2, 0, 32) and s3.shape == (0, 4)
    assert fp4kit.block_scale_interleave(np.zeros((0, 4), np.uint8)).shape == (0,)
    # calls with rows after calls without them still compute (the plans differ)
    out = np.full((4, 32), np.nan, np.float32)
    fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, out, backend="ref")
    np.testing.assert_array_equal(out, ref.astype(np.float32))


def test_arrays_in_non_native_byte_order_are_refused():
    """The library reads values in the machine's byte order: a big-endian array (whose dtype is still
    named float32) is refused with a ValueError at every entry that takes arrays, also after a call
    of the same shape in native order, instead of being read as other numbers."""
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    x = random_input(np.random.default_rng(4), 4, 64)
    swapped = lambda a: a.astype(a.dtype.newbyteorder("S"))  # noqa: E731
    for _ in range(2):  # before and after the native calls below built their plans
        cases = [
            lambda: fp4kit.fp4_quantize(swapped(x), 1.0),
            lambda: fp4kit.fp4_quantize(x, swapped(np.array([1.0], np.float32))),
            lambda: fp4kit.mm_w4a16(swapped(x), wq.T, ws.T, alpha),
            lambda: fp4kit.mm_w4a16(x, wq.T, ws.T, swapped(np.array([0.5], np.float32))),
            lambda: fp4kit.mm_w4a16(x, wq.T, ws.T, alpha, np.float32, swapped(np.zeros((4, 32), np.float32))),
            lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, swapped(np.array([0.5], np.float32))),
            lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, swapped(np.zeros((4, 32), np.float32))),
            lambda: fp4kit.e2m1_and_ufp8sf_scale_to_float(xq, xs, swapped(np.array([0.5], np.float32))),
        ]
        for call in cases:
            with pytest.raises(fp4kit.InvalidArgumentError, match="byte order"):
                call()
        fp4kit.fp4_quantize(x, 1.0)
        fp4kit.fp4_quantize(x, np.array([1.0], np.float32))
        fp4kit.mm_w4a16(x, wq.T, ws.T, np.array([0.5], np.float32), np.float32, np.zeros((4, 32), np.float32))
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, np.array([0.5], np.float32), np.float32, np.zeros((4, 32), np.float32))


def test_misaligned_arrays_are_refused():
    """A NumPy view that does not start on its element size (flags.aligned False) is refused by the
    library's rule, the same on every backend, with the argument named, never read misaligned."""
    _, _, wq, ws, alpha, _ = _operands(4, 32, 64)
    shifted = lambda shape, dtype, by: (  # noqa: E731
        np.zeros(int(np.prod(shape)) * np.dtype(dtype).itemsize + by, np.uint8)[by:].view(dtype).reshape(shape))
    x = shifted((4, 64), np.float32, 1)
    assert not x.flags.aligned
    for backend in ("auto", "ref", "cpu"):
        with pytest.raises(fp4kit.InvalidArgumentError, match=r"fp4_mm_w4a16: a->data .* is not 4-byte aligned"):
            fp4kit.mm_w4a16(x, wq.T, ws.T, alpha, backend=backend)
        with pytest.raises(fp4kit.InvalidArgumentError, match=r"out->data .* is not 4-byte aligned"):
            fp4kit.mm_w4a16(np.ones((4, 64), np.float32), wq.T, ws.T, alpha, np.float32,
                            shifted((4, 32), np.float32, 2), backend=backend)
    with pytest.raises(fp4kit.InvalidArgumentError, match=r"fp4_quantize: x->data .* is not 4-byte aligned"):
        fp4kit.fp4_quantize(x, 1.0)


def test_errors_do_not_depend_on_earlier_calls():
    """An argument that is neither None, a number nor an array (a list alpha or global scale, a list
    `out`) is refused with the same error whether or not a valid call of the same shapes built a plan
    before it: such arguments never share a plan with None or with numbers."""
    from fp4kit import _plan
    xq, xs, wq, ws, alpha, _ = _operands(4, 32, 64)
    a = np.ones((4, 64), np.float32)
    x = random_input(np.random.default_rng(5), 4, 64)
    cases = [
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, [0.5]), lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 0.5)),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 1j), lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 0.5)),
        (lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 0.5, None, [[0.0] * 32] * 4),
         lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 0.5, None, None)),
        (lambda: fp4kit.mm_w4a16(a, wq.T, ws.T, [0.5]), lambda: fp4kit.mm_w4a16(a, wq.T, ws.T, None)),
        (lambda: fp4kit.mm_w4a16(a, wq.T, ws.T, 0.5, None, (1, 2)), lambda: fp4kit.mm_w4a16(a, wq.T, ws.T, 0.5)),
        (lambda: fp4kit.fp4_quantize(x, [2.0]), lambda: fp4kit.fp4_quantize(x, 2.0)),
    ]
    for bad, good in cases:
        _plan.forget_plans()
        with pytest.raises(fp4kit.InvalidArgumentError) as first:
            bad()
        good()
        with pytest.raises(fp4kit.InvalidArgumentError) as again:
            bad()
        assert str(again.value) == str(first.value)
    # NumPy scalars take their own plan and their value
    np.testing.assert_array_equal(fp4kit.mm_w4a16(a, wq.T, ws.T, np.float32(0.25)),
                                  fp4kit.mm_w4a16(a, wq.T, ws.T, 0.25))
