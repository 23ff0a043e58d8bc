"""fp4_quantize_modelopt_version against an independent numpy implementation of Model Optimizer's
NVFP4 weight recipe (NVFP4QTensor in nvfp4_tensor.py), bit for bit, for both releases' rules.

The nvidia-modelopt package needs PyTorch, which is too large to install here, so the oracle is a
transcription of its operations in numpy float32: amax / (6*448), block amax / (6*weight_scale_2),
zero -> 1, (nvidia-modelopt 0.45 and later) clamp to [2^-9, 448] as _cast_per_block_scale_to_fp8
does, cast to float8_e4m3fn (ml_dtypes, round to nearest even; 0.44 and earlier cast plainly), scaled =
w / (float(scale) * weight_scale_2), codes by the searchsorted rule on the bounds
[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5] plus one at 0.75, 1.75 and 3.5, sign = (scaled < 0).
"""
import ctypes
import os

import ml_dtypes
import numpy as np
import pytest

LIB = os.environ.get("FP4KIT_LIB", os.path.join(os.path.dirname(__file__), "../../build/libfp4kit.so"))


class Matrix(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("ld", ctypes.c_int64), ("dtype", ctypes.c_int), ("memory", ctypes.c_int)]


class QMatrix(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("format", ctypes.c_int), ("layout", ctypes.c_int),
                ("multiplier", ctypes.c_float), ("memory", ctypes.c_int)]


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIB):
        pytest.skip(f"{LIB} not built (set FP4KIT_LIB)")
    lib = ctypes.CDLL(LIB)
    lib.fp4_quantize_modelopt.argtypes = [ctypes.POINTER(Matrix), ctypes.POINTER(QMatrix), ctypes.POINTER(ctypes.c_float)]
    lib.fp4_quantize_modelopt_version.argtypes = [ctypes.POINTER(Matrix), ctypes.c_int, ctypes.POINTER(QMatrix),
                                                  ctypes.POINTER(ctypes.c_float)]
    lib.fp4_last_error.restype = ctypes.c_char_p
    return lib


CURRENT, V0_44 = 0, 1  # fp4_modelopt_version


def fp4kit_quantize(lib, w_bf16, version=None):
    n, k = w_bf16.shape
    w = np.ascontiguousarray(w_bf16)
    data = np.zeros((n, k // 2), np.uint8)
    scales = np.zeros((n, k // 16), np.uint8)
    m = Matrix(w.ctypes.data, n, k, 0, 1, 0)  # FP4_DTYPE_BF16, host
    q = QMatrix(data.ctypes.data, scales.ctypes.data, n, k, 0, 0, 1.0, 0)  # NVFP4, linear, host
    ws2 = ctypes.c_float()
    if version is None:  # the default: the current release's rule
        st = lib.fp4_quantize_modelopt(ctypes.byref(m), ctypes.byref(q), ctypes.byref(ws2))
    else:
        st = lib.fp4_quantize_modelopt_version(ctypes.byref(m), version, ctypes.byref(q), ctypes.byref(ws2))
    assert st == 0, lib.fp4_last_error().decode()
    return data, scales, np.float32(ws2.value)


def modelopt_numpy(w_bf16, version=CURRENT):
    """Model Optimizer's operations, one float32 numpy operation for each torch one."""
    w = w_bf16.astype(np.float32)
    n, k = w.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ws2 = np.float32(np.max(np.abs(w))) / np.float32(6.0 * 448.0)
        blocks = w.reshape(n, k // 16, 16)
        bamax = np.max(np.abs(blocks), axis=-1)
        scale = bamax / (np.float32(6.0) * ws2)
        scale[scale == 0] = np.float32(1.0)
        if version == CURRENT:
            scale = np.clip(scale, np.float32(2.0 ** -9), np.float32(448.0))
        # torch's float8_e4m3fn cast: RNE, values up to 464 round to 448 (none larger occur here).
        scale8 = np.minimum(scale, np.float32(448.0)).astype(ml_dtypes.float8_e4m3fn)
        denom = scale8.astype(np.float32) * ws2
        scaled = blocks / denom[..., None]
    sign = (scaled < 0).astype(np.uint8)
    a = np.abs(scaled)
    bounds = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    ordv = np.searchsorted(bounds, a, side="left").astype(np.uint8)
    ordv[np.isnan(a)] = 7  # torch.searchsorted puts NaN past the end
    odd = np.isin(a, bounds[[1, 3, 5]]).astype(np.uint8)
    codes = ((sign << 3) + ordv + odd).reshape(n, k)
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2]
    return packed.astype(np.uint8), scale8.view(np.uint8), np.float32(ws2)


def bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


CASES = {
    "gaussian": lambda r: r.standard_normal((64, 256)) * 0.02,
    "outliers": lambda r: r.standard_normal((32, 512)) * (1 + 50 * (r.random((32, 512)) < 0.001)),
    "ties": lambda r: np.tile(np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -0.75, -2.5, -3.5, -5.0,
                                        0.0, -0.0, 448.0 * 6], np.float32) / (448 * 6) * 1e3, (8, 4)),
    "negative_zero_rows": lambda r: np.where(r.random((16, 64)) < 0.5, -0.0, r.standard_normal((16, 64))),
    "zero_blocks": lambda r: np.concatenate([np.zeros((8, 32)), r.standard_normal((8, 32))], axis=1),
    "tiny_blocks": lambda r: np.concatenate([r.standard_normal((8, 16)) * 1e-9, r.standard_normal((8, 48)) * 10], 1),
    "subnormal_scales": lambda r: np.concatenate([r.standard_normal((8, 16)) * 1e-4, np.full((8, 16), 100.0)], 1),
    "scale_ties": lambda r: scale_tie_blocks(r),
}


def scale_tie_blocks(r):
    """Blocks whose scale amax / (6 * weight_scale_2) sits next to an E4M3 rounding tie (21/128,
    between bytes 34 and 35), on a side that depends on how 6 * weight_scale_2 is rounded: with the
    tensor amax 0.010009765625, amax / 448 is one float32 step away from 6 * (amax / 2688), and the
    block maximum 3.6656856536865234e-06 gives 0.16406251 (byte 35) by Model Optimizer's order and
    exactly the tie (byte 34, the even one) by the shortcut amax / 448."""
    amax, bmax = 0.010009765625, 3.6656856536865234e-06
    head = r.uniform(-1.0, 1.0, (8, 16)) * amax
    head[:, 0] = amax
    tail = r.uniform(-1.0, 1.0, (8, 16)) * bmax
    tail[:, 3] = -bmax
    return np.concatenate([head, tail], axis=1)


@pytest.mark.parametrize("version", [None, CURRENT, V0_44])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bit_exact_with_modelopt_recipe(lib, case, seed, version):
    w = bf16(CASES[case](np.random.default_rng(seed)))
    got = fp4kit_quantize(lib, w, version)
    want = modelopt_numpy(w, CURRENT if version is None else version)
    np.testing.assert_array_equal(got[2].view(np.uint32), want[2].view(np.uint32), "weight_scale_2")
    np.testing.assert_array_equal(got[1], want[1], "weight_scale bytes")
    np.testing.assert_array_equal(got[0], want[0], "packed codes")


def test_tiny_block_scale_per_release(lib):
    # A block 1e-9 of the tensor amax: 0.45+ clamps its scale to 2^-9 (byte 1; 1e-9 / (2^-9 * ws2) is
    # about 1.4e-6, code 0); 0.44 cast it to byte 0 and its codes saturated.
    w = bf16(np.concatenate([np.full((1, 16), 1e-9), np.full((1, 16), 1.0)], axis=1))
    data, scales, _ = fp4kit_quantize(lib, w)
    assert scales[0, 0] == 1 and data[0, 0] == 0x00
    data, scales, _ = fp4kit_quantize(lib, w, V0_44)
    assert scales[0, 0] == 0 and data[0, 0] == 0x77


def test_scale_tie_bytes(lib):
    # The recipe's own order of operations decides a tie of the block scale: byte 35 (0.171875).
    w = bf16(scale_tie_blocks(np.random.default_rng(5)))
    _, scales, _ = fp4kit_quantize(lib, w)
    assert (scales[:, 1] == 35).all(), scales[:, 1]


def test_negative_zero_encodes_as_positive_zero(lib):
    w = bf16(np.array([[-0.0] * 15 + [1.0]], np.float32))
    data, _, _ = fp4kit_quantize(lib, w)
    assert (data[0, :7] == 0).all()
