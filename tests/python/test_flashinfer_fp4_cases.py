"""FlashInfer's FP4 quantization test cases, with their parameters, against fp4kit's FlashInfer API.

The cases are those of FlashInfer's tests/utils/test_fp4_quantize.py (test_fp4_quantization: shapes
(128, 64), (256, 128), (120, 64), (200, 256), (2048, 2048); fp16 and bf16; seed 42; NVFP4 with E4M3
scales per 16 and MXFP4 with UE8M0 scales per 32; linear and 128x4 swizzled scales) and of
test_fp4_quantize_padding.py (test_fp4_quantize_unaligned_m_non_swizzled: M not a multiple of 16,
linear scales), rewritten here; the 8x4 layout is added for both formats.

The oracle is FlashInfer's scale order, restated (the quantizer FlashInfer's default build runs and
its test reference computes), per block of 16 (NVFP4) values x with vmax = max |x|, every operation
one float32 operation:
  1. t  = vmax * f32(1/6)                      (the reciprocal of 6 first, then the block maximum)
  2. sf = gsf * t                              (then the global encode scale)
  3. scale byte = E4M3(sf), round to nearest even, saturating at 448; vmax = 0 gives 0
  4. d  = float(scale byte) * (1 / gsf)        (the decoded scale times the global decode scale)
  5. out_scale = 1 / d                         (+inf when the byte is 0 but vmax is not)
  6. code = E2M1(x * out_scale), round to nearest even, saturating at 6, NaN (0 * inf) -> 7
FlashInfer's kernel takes the reciprocals in 1, 4 and 5 from the approximate rcp.approx.ftz
instruction; this oracle, like fp4kit and FlashInfer's own ref_fp4_quant, rounds them correctly.
The other order, sf = vmax * (gsf * f32(1/6)), belongs to FlashInfer's
FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH build (fp4kit: FP4_ORDER_EXACT); it moves about one scale
in a hundred by one E4M3 step on such bf16 data, which FlashInfer's tolerance (0.1 absolute plus
0.1 relative) rejects for steps of 32 at 256..288. MXFP4: scale = 2^ceil(log2(vmax / 6)) over 32
values, codes of x * 2^-e.

The global scale is formed as the FlashInfer tests form it: 448 * 6 / amax with amax a float32
tensor, which torch evaluates as (1 / amax) * 2688.

The host cases run in CI on NumPy data (numpy's generator seeded 42: other values than torch's).
The GPU cases make the tests' own data (torch.manual_seed(42), torch.randn on cuda:0) and skip,
visibly, without torch, CUDA or an fp4kit build with the cuda backend.
"""
import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
fp4kit = pytest.importorskip("fp4kit", reason="the fp4kit package (set FP4KIT_LIB to a built libfp4kit.so)")

f32 = np.float32
SHAPES = [(128, 64), (256, 128), (120, 64), (200, 256), (2048, 2048)]
UNALIGNED_M_SHAPES = [(17, 512), (33, 1024), (1025, 1024), (1025, 6144)]
SEED = 42
NP_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
LAYOUTS = ["linear", "128x4", "8x4"]


# ---- the oracle -----------------------------------------------------------------------------------

def encode_scale(amax):
    """448 * 6 / amax as torch computes a Python number over a float32 tensor."""
    return f32(f32(1) / f32(amax)) * f32(448 * 6)


def e2m1_codes(y):
    """float32 -> E2M1 codes: ties to even, saturating, NaN -> 7 (ml_dtypes maps NaN elsewhere)."""
    with np.errstate(invalid="ignore"):
        codes = np.clip(y, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    return np.where(np.isnan(y), 7, codes).astype(np.uint8)


def reference_nvfp4(x, gsf, order="flashinfer"):
    """(codes [M, K], scale bytes [M, K/16]) in FlashInfer's order (or the exact-math one)."""
    xb = x.astype(f32).reshape(x.shape[0], -1, 16)
    vmax = np.abs(xb).max(axis=2)
    gsf = f32(gsf)
    sf = gsf * (vmax * (f32(1) / f32(6))) if order == "flashinfer" else vmax * (gsf * (f32(1) / f32(6)))
    sb = np.minimum(sf, f32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    sb = np.where(vmax == 0, 0, sb).astype(np.uint8)
    with np.errstate(divide="ignore", over="ignore"):
        out_scale = f32(1) / (sb.view(ml_dtypes.float8_e4m3fn).astype(f32) * (f32(1) / gsf))
    if order != "flashinfer":
        out_scale = np.minimum(out_scale, np.finfo(f32).max)
    out_scale = np.where(vmax == 0, f32(0), out_scale).astype(f32)
    with np.errstate(over="ignore", invalid="ignore"):
        codes = e2m1_codes((xb * out_scale[:, :, None]).astype(f32))
    return codes.reshape(x.shape), sb


def reference_mxfp4(x):
    xb = x.astype(f32).reshape(x.shape[0], -1, 32)
    v = np.abs(xb).max(axis=2) / f32(6)
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1): ceil(log2 v) = e - 1 exactly when m == 0.5
    biased = np.where(v == 0, 0, np.clip(np.where(m == 0.5, e - 1, e) + 127, 0, 254)).astype(np.uint8)
    out_scale = np.ldexp(f32(1), 127 - biased.astype(np.int32)).astype(f32)
    return e2m1_codes((xb * out_scale[:, :, None]).astype(f32)).reshape(x.shape), biased


def scale_offsets(layout, rows, cols):
    """Byte offset of scale (r, c) in FlashInfer's layouts: row-major; [M/128, C/4, 32, 4, 4]; [M/8, C/4, 8, 4]."""
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    ktiles = (cols + 3) // 4
    if layout == "128x4":
        return (((r // 128) * ktiles + c // 4) * 32 + r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    if layout == "8x4":
        return (((r // 8) * ktiles + c // 4) * 8 + r % 8) * 4 + c % 4
    return r * cols + c


def unpack(q):
    q = np.asarray(q)
    codes = np.empty((q.shape[0], q.shape[1] * 2), np.uint8)
    codes[:, 0::2] = q & 0xF
    codes[:, 1::2] = q >> 4
    return codes


def e2m1_values(codes):
    table = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], f32)
    return table[codes]


def check(x, q, sf, fmt, layout, gsf):
    """fp4kit's output against the oracle: bit for bit, and within FlashInfer's own tolerances."""
    m, k = x.shape
    bs = 16 if fmt == "nvfp4" else 32
    codes, sb = reference_nvfp4(x, gsf) if fmt == "nvfp4" else reference_mxfp4(x)
    sf = np.asarray(sf).reshape(-1)
    got_sb = sf[scale_offsets(layout, m, k // bs)]
    got_codes = unpack(q)
    # FlashInfer's assertions: codes within rtol 1 / atol 0.1, scales within rtol 0.1 / atol 0.1.
    ftype = ml_dtypes.float8_e4m3fn if fmt == "nvfp4" else ml_dtypes.float8_e8m0fnu
    got_s, want_s = got_sb.view(ftype).astype(f32), sb.view(ftype).astype(f32)
    np.testing.assert_allclose(got_s, want_s, rtol=0.1, atol=0.1)
    np.testing.assert_allclose(e2m1_values(got_codes), e2m1_values(codes), rtol=1.0, atol=0.1)
    np.testing.assert_array_equal(got_sb, sb)
    np.testing.assert_array_equal(got_codes, codes)
    if layout != "linear":  # padding scale bytes are zero
        mask = np.ones(sf.size, bool)
        mask[scale_offsets(layout, m, k // bs).reshape(-1)] = False
        assert not sf[mask].any()


def quantize(x, gsf, fmt, layout, **kw):
    return fp4kit.fp4_quantize(x, gsf, 16 if fmt == "nvfp4" else 32, fmt == "mxfp4", layout != "linear",
                               layout == "8x4", **kw)


# ---- host cases (CI) ------------------------------------------------------------------------------

def host_data(shape, dtype):
    return np.random.default_rng(SEED).standard_normal(shape).astype(f32).astype(NP_DTYPES[dtype])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_fp4_quantization_host(shape, dtype, fmt, layout):
    x = host_data(shape, dtype)
    gsf = encode_scale(np.abs(x.astype(f32)).max()) if fmt == "nvfp4" else f32(1)
    q, sf = quantize(x, np.array([gsf], f32), fmt, layout)
    check(x, q, sf, fmt, layout, gsf)


@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
@pytest.mark.parametrize("shape", UNALIGNED_M_SHAPES)
def test_fp4_quantize_unaligned_m_non_swizzled_host(shape, dtype):
    x = host_data(shape, dtype)
    gsf = encode_scale(np.abs(x.astype(f32)).max())
    q, sf = quantize(x, np.array([gsf], f32), "nvfp4", "linear")
    assert np.asarray(q).shape == (shape[0], shape[1] // 2) and np.asarray(sf).size == shape[0] * shape[1] // 16
    check(x, q, sf, "nvfp4", "linear", gsf)


def test_scale_ties_follow_flashinfer_order():
    """bf16 data whose amax is 3 (gsf = 896): block maxima that are multiples of 2^-7 land on E4M3
    ties in FlashInfer's order; fp4kit must round them as FlashInfer does, not as the exact order."""
    rng = np.random.default_rng(SEED)
    x = (rng.integers(-384, 385, (256, 256)) / np.float32(128)).astype(f32)
    x[0, 0] = 3.0
    x = x.astype(ml_dtypes.bfloat16)
    gsf = encode_scale(3.0)
    fi_codes, fi_sb = reference_nvfp4(x, gsf)
    _, ex_sb = reference_nvfp4(x, gsf, order="exact")
    assert (fi_sb != ex_sb).sum() > 0  # the data does exercise the difference
    q, sf = quantize(x, np.array([gsf], f32), "nvfp4", "linear")
    np.testing.assert_array_equal(np.asarray(sf).reshape(fi_sb.shape), fi_sb)
    np.testing.assert_array_equal(unpack(q), fi_codes)


# ---- GPU cases: FlashInfer's own data ------------------------------------------------------------

def _cuda_ready():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    names = [b["name"] for b in fp4kit.backends()]
    if "cuda" not in names:
        return "this fp4kit build has no cuda backend"
    return None


def _gpu_case(shape, dtype, fmt, layout):
    why = _cuda_ready()
    if why:
        pytest.skip("GPU case skipped: " + why)
    import torch
    torch.manual_seed(SEED)
    x = torch.randn(shape, dtype=getattr(torch, dtype), device="cuda:0")
    if fmt == "nvfp4":
        gs = (448.0 * 6.0) / x.abs().max().to(torch.float32)  # the tests' expression, on the device
        gsf = f32(gs.item())
    else:
        gs = torch.tensor(1.0, dtype=torch.float32, device="cuda:0")
        gsf = f32(1)
    q, sf = quantize(x, gs, fmt, layout, backend="cuda")
    host_x = x.float().cpu().numpy().astype(NP_DTYPES[dtype])
    to_np = (lambda t: t.cpu().numpy()) if hasattr(q, "cpu") else np.asarray
    check(host_x, to_np(q), to_np(sf), fmt, layout, gsf)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_fp4_quantization_gpu(shape, dtype, fmt, layout):
    _gpu_case(shape, dtype, fmt, layout)


@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
@pytest.mark.parametrize("shape", UNALIGNED_M_SHAPES)
def test_fp4_quantize_unaligned_m_non_swizzled_gpu(shape, dtype):
    _gpu_case(shape, dtype, "nvfp4", "linear")
