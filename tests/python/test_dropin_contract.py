"""What a caller switching from FlashInfer relies on beyond names and parameter order: SfLayout being an
IntEnum, the dequantizer's exact scale size (flat scales of another layout refused, not misread),
block_scale_interleave's dtypes (uint8 and bfloat16 taken, the input's dtype returned) and empty
grids, and refusals that name the argument in Python terms (K = 0, a string scalar, an out_dtype
that is no dtype, a single MoE activation scale).
"""

import numpy as np
import pytest

import test_package as base  # noqa: E402  (locates and loads fp4kit)

fp4kit = base.fp4kit
torch = base.torch
ml_dtypes = base.ml_dtypes
torch_only = base.torch_only


def test_sf_layout_is_an_int_enum_like_flashinfers():
    L = fp4kit.SfLayout
    assert (L.layout_128x4, L.layout_8x4, L.layout_linear) == (0, 1, 2)
    assert int(L.layout_linear) == 2 and isinstance(L.layout_8x4, int)
    assert L(1) is L.layout_8x4
    x = base.random_input(np.random.default_rng(11), 9, 64)
    for layout in L:
        for a, b in zip(fp4kit.nvfp4_quantize(x, 2.0, layout), fp4kit.nvfp4_quantize(x, 2.0, int(layout))):
            np.testing.assert_array_equal(a, b)


def test_dequantize_refuses_flat_scales_of_another_layout():
    """A flat scale buffer holds no shape to tell its layout by; its byte count must be the asked
    layout's (FlashInfer checks the same), else 128x4 bytes would be read as linear or 8x4 ones."""
    x = base.random_input(np.random.default_rng(12), 5, 64)
    q, s = fp4kit.fp4_quantize(x, 1.0)
    _, s_lin = fp4kit.fp4_quantize(x, 1.0, 16, False, False)
    deq = fp4kit.e2m1_and_ufp8sf_scale_to_float
    with pytest.raises(ValueError, match=r"holds 512 bytes .* linear layout take 20 .*pass is_sf_swizzled_layout=True"):
        deq(q, s.reshape(-1), None, 16, 1, False)
    with pytest.raises(ValueError, match=r"holds 512 bytes .* 8x4 layout take 32 .*pass is_sf_8x4_layout=False"):
        deq(q, s.reshape(-1), None, 16, 1, True, True)
    with pytest.raises(ValueError, match=r"holds 24 bytes .* linear layout take 20"):
        deq(q, np.concatenate([s_lin.reshape(-1), np.zeros(4, np.uint8)]), None, 16, 1, False)
    mq, ms = fp4kit.mxfp4_quantize(x)
    with pytest.raises(ValueError, match=r"holds 512 bytes .* MXFP4 scales .* linear layout take 10"):
        fp4kit.mxfp4_dequantize(mq, ms.reshape(-1), fp4kit.SfLayout.layout_linear)
    # the right byte count, flat or 2-D, still decodes
    np.testing.assert_array_equal(deq(q, s.reshape(-1)), deq(q, s_lin, None, 16, 1, False))
    np.testing.assert_array_equal(deq(q, s_lin.reshape(-1), None, 16, 1, False), deq(q, s))


def _swizzled(grid):
    """The 128x4 layout of [experts, rows, cols] values, flat, padding zero (the formula of test_package)."""
    experts, rows, cols = grid.shape
    per = (rows + 127) // 128 * 128 * ((cols + 3) // 4 * 4)
    out = np.zeros(experts * per, grid.dtype)
    off = base.offsets_128x4(rows, cols).reshape(-1)
    for e in range(experts):
        out[e * per + off] = grid[e].reshape(-1)
    return out


@pytest.mark.parametrize("shape", [(130, 5), (3, 40, 6)])
def test_block_scale_interleave_takes_bfloat16_and_keeps_the_dtype(shape):
    rng = np.random.default_rng(sum(shape))
    grid = rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    out = fp4kit.block_scale_interleave(grid)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.view(np.uint16), _swizzled(grid.reshape((-1,) + shape[-2:])).view(np.uint16))
    codes = rng.integers(1, 255, size=shape, dtype=np.uint8)
    for dtype in (np.uint8, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu):
        out = fp4kit.block_scale_interleave(codes.view(dtype))
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.view(np.uint8), _swizzled(codes.reshape((-1,) + shape[-2:])))


@torch_only
def test_block_scale_interleave_of_bfloat16_tensors():
    grid = torch.randn(3, 40, 6, dtype=torch.bfloat16)
    out = fp4kit.block_scale_interleave(grid)
    assert out.dtype == torch.bfloat16 and out.device == grid.device
    want = fp4kit.block_scale_interleave(grid.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(out.view(torch.int16).numpy(), want.view(np.int16))


def test_block_scale_interleave_of_no_columns_is_empty():
    for shape in ((5, 0), (2, 5, 0), (0, 4)):
        for dtype in (np.uint8, ml_dtypes.bfloat16):
            out = fp4kit.block_scale_interleave(np.zeros(shape, dtype))
            assert out.shape == (0,) and out.dtype == dtype


def test_k_zero_is_refused_in_python_terms():
    rows, w = np.zeros((4, 0), np.uint8), np.zeros((3, 0), np.uint8)
    none = np.zeros(0, np.uint8)
    cases = [
        ("fp4_quantize", lambda: fp4kit.fp4_quantize(np.ones((4, 0), np.float32), 1.0)),
        ("mm_fp4", lambda: fp4kit.mm_fp4(rows, w.T, none, none, 1.0)),
        ("mm_w4a16", lambda: fp4kit.mm_w4a16(np.zeros((4, 0), np.float32), w.T, none)),
        ("e2m1_and_ufp8sf_scale_to_float", lambda: fp4kit.e2m1_and_ufp8sf_scale_to_float(rows, none)),
    ]
    for fn, call in cases:
        with pytest.raises(ValueError, match=r"^%s: K = 0: an FP4 matrix needs at least one block of 16 columns$" % fn):
            call()


def _experts(rng, experts, rows, cols):
    pairs = [fp4kit.fp4_quantize(rng.standard_normal((rows, cols)).astype(np.float32), 1.0) for _ in range(experts)]
    return np.stack([q for q, _ in pairs]), np.stack([s for _, s in pairs])


def test_string_scalars_are_refused_by_name():
    xq, xs, wq, ws, _, _ = base._operands(4, 32, 64)
    x = np.ones((4, 64), np.float32)
    with pytest.raises(ValueError, match=r"^alpha must be a number or a one-element array/tensor, not str$"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, "0.5")
    with pytest.raises(ValueError, match=r"^alpha must be a number"):
        fp4kit.mm_w4a16(x, wq.T, ws.T, b"1")
    with pytest.raises(ValueError, match=r"^global_scale must be a number or a one-element array/tensor, not str$"):
        fp4kit.fp4_quantize(x, "2.0")


def test_out_dtype_that_is_no_dtype_is_named():
    xq, xs, wq, ws, alpha, _ = base._operands(4, 32, 64)
    with pytest.raises(ValueError, match=r"^mm_fp4: out_dtype .* is not a dtype \(bfloat16, float16 or float32\)$"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, object())


def test_one_moe_activation_scale_is_refused_naming_the_forms_taken():
    rng = np.random.default_rng(13)
    w13, s13 = _experts(rng, 2, 64, 64)
    w2, s2 = _experts(rng, 2, 64, 32)
    ids = np.array([[0, 1], [1, 0]], np.int32)
    weights = np.full((2, 2), 0.5, np.float32)
    hidden = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match=r"^moe_forward: act_scales must be a pair of numbers .* not float$"):
        fp4kit.moe_forward(hidden, ids, weights, w13, s13, None, w2, s2, None, 1.0)
    out = fp4kit.moe_forward(hidden, ids, weights, w13, s13, None, w2, s2, None, (1.0, 1.0))
    assert out.shape == (2, 64) and np.isfinite(out).all()
