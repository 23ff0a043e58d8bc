"""The engine-facing Python API: FlashInfer's current signatures, device scalars, the per-shape call
plans, the torch.library custom ops, the MoE entry points (fp4kit's moe_forward and FlashInfer's
cutlass_fused_moe contract) against a direct fp4_moe_forward call, scale-layout and tune() errors.

Host tests run on NumPy arrays and CPU tensors; the CUDA ones where PyTorch sees a GPU (skipped
visibly otherwise).
"""

import ctypes
import enum
import inspect
import os
import pathlib
import re
import threading

import numpy as np
import pytest

import test_package as base  # noqa: E402  (locates and loads fp4kit)

fp4kit = base.fp4kit
torch = base.torch
ml_dtypes = base.ml_dtypes
torch_only, cuda_only = base.torch_only, base.cuda_only

# ---- FlashInfer's signatures (flashinfer/quantization/fp4_quantization.py, flashinfer/gemm/gemm_base.py) ----

FLASHINFER_PARAMS = {
    "fp4_quantize": ["input", "global_scale", "sf_vec_size", "sf_use_ue8m0", "is_sf_swizzled_layout",
                     "is_sf_8x4_layout", "is_global_scale_inversed", "enable_pdl", "backend"],
    "nvfp4_quantize": ["a", "a_global_sf", "sfLayout", "do_shuffle", "sf_vec_size", "enable_pdl", "backend",
                       "per_token_activation", "expanded_idx_to_permuted_idx"],
    "mxfp4_quantize": ["a", "backend", "enable_pdl", "sfLayout"],
    "mxfp4_dequantize": ["a_fp4", "a_sf", "sfLayout"],
    "e2m1_and_ufp8sf_scale_to_float": ["e2m1_tensor", "ufp8_scale_tensor", "global_scale_tensor", "sf_vec_size",
                                       "ufp8_type", "is_sf_swizzled_layout", "is_sf_8x4_layout"],
    "mm_fp4": ["a", "b", "a_descale", "b_descale", "alpha", "out_dtype", "out", "block_size", "use_8x4_sf_layout",
               "backend", "use_nvfp4", "enable_pdl"],
    "block_scale_interleave": ["unswizzled_sf"],
}


@pytest.mark.parametrize("name", sorted(FLASHINFER_PARAMS))
def test_signatures_follow_flashinfer(name):
    params = list(inspect.signature(getattr(fp4kit, name)).parameters)
    want = FLASHINFER_PARAMS[name]
    assert params[:len(want)] == want, params


def test_fp4_quantize_seventh_parameter_is_is_global_scale_inversed():
    x = base.random_input(np.random.default_rng(1), 4, 64)
    with pytest.raises(NotImplementedError, match="is_global_scale_inversed"):
        fp4kit.fp4_quantize(x, 2.0, 16, False, True, False, True)
    q1, s1 = fp4kit.fp4_quantize(x, 2.0, 16, False, True, False, False, True)  # 8th: enable_pdl
    q2, s2 = fp4kit.fp4_quantize(x, 2.0)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(s1, s2)


def test_nvfp4_quantize_per_token_arguments_are_named():
    x = base.random_input(np.random.default_rng(2), 4, 64)
    with pytest.raises(NotImplementedError, match="per_token_activation"):
        fp4kit.nvfp4_quantize(x, 1.0, per_token_activation=True)
    with pytest.raises(NotImplementedError, match="expanded_idx_to_permuted_idx"):
        fp4kit.nvfp4_quantize(x, 1.0, expanded_idx_to_permuted_idx=np.zeros(4, np.int32))
    q, s = fp4kit.nvfp4_quantize(x, 3.0, fp4kit.SfLayout.layout_linear, False, 16, None, "auto")
    q2, s2 = fp4kit.fp4_quantize(x, 3.0, 16, False, False)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(s, s2)


def test_mxfp4_quantize_and_dequantize_take_flashinfer_positions():
    x = base.random_input(np.random.default_rng(3), 5, 96)
    q, s = fp4kit.mxfp4_quantize(x, "auto", None, fp4kit.SfLayout.layout_linear)
    q2, s2 = fp4kit.fp4_quantize(x, None, 32, True, False)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(s, s2)
    assert s.shape == (5, 3)
    d_lin = fp4kit.mxfp4_dequantize(q, s, fp4kit.SfLayout.layout_linear)
    q3, s3 = fp4kit.mxfp4_quantize(x)
    np.testing.assert_array_equal(q3, q)
    np.testing.assert_array_equal(fp4kit.mxfp4_dequantize(q3, s3), d_lin)
    with pytest.raises(ValueError, match="sfLayout"):
        fp4kit.mxfp4_quantize(x, "auto", None, 7)


def test_e2m1_dequantize_8x4_layout():
    x = base.random_input(np.random.default_rng(4), 9, 64)
    q, s8 = fp4kit.fp4_quantize(x, 2.0, 16, False, True, True)
    _, s128 = fp4kit.fp4_quantize(x, 2.0)
    a = fp4kit.e2m1_and_ufp8sf_scale_to_float(q, s8, np.float32(0.5), 16, 1, True, True)
    b = fp4kit.e2m1_and_ufp8sf_scale_to_float(q, s128, np.float32(0.5), 16, 1, True, False)
    np.testing.assert_array_equal(a, b)


def test_dequantize_8x4_layout_for_both_formats():
    """is_sf_8x4_layout selects the 8x4 layout for E4M3 (NVFP4) and UE8M0 (MXFP4) scales alike, on
    arrays and tensors, and mxfp4_dequantize takes SfLayout.layout_8x4; scales whose 2-D shape is the
    other swizzled layout's padded shape are refused."""
    x = base.random_input(np.random.default_rng(41), 9, 128)
    for ufp8_type, vec, gs in ((1, 16, 2.0), (0, 32, None)):
        ue8m0 = ufp8_type == 0
        q8, s8 = fp4kit.fp4_quantize(x, gs, vec, ue8m0, True, True)
        q1, s1 = fp4kit.fp4_quantize(x, gs, vec, ue8m0, True, False)
        np.testing.assert_array_equal(q8, q1)
        assert s8.shape[0] == 16 and s1.shape[0] == 128  # rows padded to 8 and to 128
        mult = None if ue8m0 else np.float32(0.5)
        a = fp4kit.e2m1_and_ufp8sf_scale_to_float(q8, s8, mult, vec, ufp8_type, True, True)
        b = fp4kit.e2m1_and_ufp8sf_scale_to_float(q1, s1, mult, vec, ufp8_type, True, False)
        np.testing.assert_array_equal(a, b)
        assert not np.isnan(a).any()
        with pytest.raises(ValueError, match="8x4"):
            fp4kit.e2m1_and_ufp8sf_scale_to_float(q1, s1, mult, vec, ufp8_type, True, True)
        if torch is not None:
            t = fp4kit.e2m1_and_ufp8sf_scale_to_float(torch.from_numpy(q8), torch.from_numpy(s8), mult, vec, ufp8_type,
                                                      True, True)
            np.testing.assert_array_equal(t.numpy(), a)
    q, s = fp4kit.mxfp4_quantize(x, sfLayout=fp4kit.SfLayout.layout_8x4)
    got = fp4kit.mxfp4_dequantize(q, s, fp4kit.SfLayout.layout_8x4)
    np.testing.assert_array_equal(got, fp4kit.mxfp4_dequantize(*fp4kit.mxfp4_quantize(x)))


# ---- the order of the NVFP4 scale computation ----------------------------------------------------------------

C_ORDER_EXACT = 1
base.C.fp4_quantize_ordered.argtypes = [ctypes.c_void_p, ctypes.POINTER(base.CM), ctypes.c_float, ctypes.c_int,
                                        ctypes.POINTER(base.CQ), ctypes.POINTER(base.COpts)]


def _c_quantize_exact(x, gsf, layout=1):
    rows, cols = x.shape
    n = ctypes.c_size_t()
    assert base.C.fp4_scales_size(0, layout, rows, cols, ctypes.byref(n)) == 0
    q = np.full((rows, cols // 2), 0xAB, np.uint8)
    s = np.full(n.value, 0xAB, np.uint8)
    m = base.CM(x.ctypes.data, rows, cols, 0, base.DTYPES[x.dtype.name][0], 0)
    out = base.CQ(q.ctypes.data, s.ctypes.data, rows, cols, 0, layout, 0.0, 0)
    st = base.C.fp4_quantize_ordered(None, ctypes.byref(m), ctypes.c_float(gsf), C_ORDER_EXACT, ctypes.byref(out), None)
    assert st == 0, base.C.fp4_last_error().decode()
    return q, s


def test_quantize_order_keyword():
    """order='exact' gives fp4_quantize_ordered(FP4_ORDER_EXACT)'s bits (which differ from the default
    order on some blocks), order='flashinfer' the default's; 'exact' is the ref backend's on host data
    only, and MXFP4 has one order."""
    rng = np.random.default_rng(42)
    x = base.random_input(rng, 64, 1024, "bfloat16")
    differ = 0
    for gsf in (1.0, 3.0, 448 * 6 / 7.5, 448 * 6 / 0.37, 1000.0):
        q, s = fp4kit.fp4_quantize(x, gsf, order="exact")
        eq, es = _c_quantize_exact(x, gsf)
        np.testing.assert_array_equal(q, eq)
        np.testing.assert_array_equal(s.reshape(-1), es)
        dq, ds = fp4kit.fp4_quantize(x, gsf)
        fq, fs = fp4kit.fp4_quantize(x, gsf, order="flashinfer")
        np.testing.assert_array_equal(fq, dq)
        np.testing.assert_array_equal(fs, ds)
        differ += int((s != ds).sum())
        nq, ns = fp4kit.nvfp4_quantize(x, gsf, order="exact")
        np.testing.assert_array_equal(nq, q)
        np.testing.assert_array_equal(ns, s)
    assert differ > 0, "no block of the sample straddles a rounding boundary: the test data must change"
    assert fp4kit.last_run()["backend"] == "ref"
    q, s = fp4kit.fp4_quantize(x, 2.0, order="exact", backend="ref")
    with pytest.raises(NotImplementedError, match="ref backend only"):
        fp4kit.fp4_quantize(x, 2.0, order="exact", backend="cpu")
    with pytest.raises(ValueError, match="order must be"):
        fp4kit.fp4_quantize(x, 2.0, order="fast")
    mq, ms = fp4kit.fp4_quantize(x, None, 32, True, order="exact")
    np.testing.assert_array_equal(ms, fp4kit.mxfp4_quantize(x)[1])
    np.testing.assert_array_equal(mq, fp4kit.mxfp4_quantize(x)[0])
    assert "order" not in list(inspect.signature(fp4kit.fp4_quantize).parameters)[:len(FLASHINFER_PARAMS["fp4_quantize"])]
    assert inspect.signature(fp4kit.fp4_quantize).parameters["order"].kind == inspect.Parameter.KEYWORD_ONLY
    if torch is not None:
        tx = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
        tq, ts = fp4kit.fp4_quantize(tx, torch.tensor([3.0]), order="exact")
        eq, es = _c_quantize_exact(x, 3.0)
        np.testing.assert_array_equal(tq.numpy(), eq)
        np.testing.assert_array_equal(ts.numpy().reshape(-1), es)


def test_ue8m0_dequantization_ignores_the_global_scale():
    """FlashInfer ignores global_scale_tensor for UE8M0 (MXFP4) scales."""
    x = base.random_input(np.random.default_rng(5), 3, 64)
    q, s = fp4kit.mxfp4_quantize(x)
    plain = fp4kit.e2m1_and_ufp8sf_scale_to_float(q, s, None, 32, 0)
    scaled = fp4kit.e2m1_and_ufp8sf_scale_to_float(q, s, np.array([4.0], np.float32), 32, 0)
    np.testing.assert_array_equal(scaled, plain)


def test_mm_fp4_skip_check_and_backend_queries():
    xq, xs, wq, ws, alpha, _ = base._operands(3, 32, 64)
    a = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, backend="ref")
    b = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, backend="ref", skip_check=True)
    np.testing.assert_array_equal(a, b)
    assert fp4kit.mm_fp4.is_backend_supported("ref") is True
    assert fp4kit.mm_fp4.is_backend_supported("auto") is False
    names = [x["name"] for x in fp4kit.backends()]
    for upstream in ("cudnn", "trtllm", "cutlass"):
        assert fp4kit.mm_fp4.is_backend_supported(upstream) == (upstream in names)
    assert fp4kit.mm_fp4.is_backend_supported("ref", 90) is True  # the C reference runs everywhere
    assert fp4kit.mm_fp4.has_backend("ref") and fp4kit.mm_fp4.is_compute_capability_supported(100)


def test_unknown_compute_capabilities_are_answered_no():
    """FlashInfer's queries answer False for a compute capability no backend runs on, including
    those the architecture table does not list (Turing, Orin, Thor), instead of raising."""
    for cc in (75, 87, 110, 0):
        assert fp4kit.mm_fp4.is_compute_capability_supported(cc) is False
        for backend in ("ref", "cpu"):
            assert fp4kit.mm_fp4.is_backend_supported(backend, cc) is False
    assert fp4kit.mm_fp4.is_backend_supported("ref", np.int64(90)) is True
    with pytest.raises(ValueError, match="compute capability"):
        fp4kit.mm_fp4.is_backend_supported("ref", "sm_90")


def test_gemm_block_size_errors_are_value_errors_as_in_flashinfer():
    """FlashInfer's mm_fp4 raises ValueError for a block size its format does not have (64 among
    them); fp4_quantize's NotImplementedError for sf_vec_size 64 is FlashInfer's too."""
    xq, xs, wq, ws, alpha, _ = base._operands(3, 32, 64)
    for block, nv in ((64, True), (64, False), (8, True), (32, True)):
        with pytest.raises(ValueError, match="block_size") as e:
            fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, block_size=block, use_nvfp4=nv)
        assert not isinstance(e.value, NotImplementedError)
        with pytest.raises(ValueError, match="block_size") as e:
            fp4kit.mm_w4a16(np.ones((3, 64), np.float32), wq.T, ws.T, alpha, block_size=block, use_nvfp4=nv)
        assert not isinstance(e.value, NotImplementedError)
    with pytest.raises(NotImplementedError, match="sf_vec_size"):
        fp4kit.fp4_quantize(np.ones((3, 64), np.float32), 1.0, 64)


class FlashInferSfLayout(enum.IntEnum):
    """FlashInfer's flashinfer.tllm_enums.SfLayout: an IntEnum of the same names and values."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


class OtherLayout(enum.IntEnum):
    row_major = 2


def test_sf_layout_arguments_follow_one_rule():
    """nvfp4_quantize, mxfp4_quantize and mxfp4_dequantize take the same sfLayout values: fp4kit's
    SfLayout, FlashInfer's IntEnum of the same names, or the value as an integer; a bool, another
    enum or an unknown value is refused by each."""
    x = base.random_input(np.random.default_rng(7), 9, 64)
    for name, value in (("layout_128x4", 0), ("layout_8x4", 1), ("layout_linear", 2)):
        mine = fp4kit.SfLayout[name]
        for given in (FlashInferSfLayout[name], value, np.int32(value)):
            for a, b in zip(fp4kit.nvfp4_quantize(x, 2.0, given), fp4kit.nvfp4_quantize(x, 2.0, mine)):
                np.testing.assert_array_equal(a, b)
            mq, ms = fp4kit.mxfp4_quantize(x, "auto", None, given)
            mq2, ms2 = fp4kit.mxfp4_quantize(x, "auto", None, mine)
            np.testing.assert_array_equal(ms, ms2)
            np.testing.assert_array_equal(fp4kit.mxfp4_dequantize(mq, ms, given),
                                          fp4kit.mxfp4_dequantize(mq2, ms2, mine))
    q, s = fp4kit.mxfp4_quantize(x)
    for bad in (True, 7, 1.0, "layout_linear", OtherLayout.row_major):
        with pytest.raises(ValueError, match="sfLayout"):
            fp4kit.nvfp4_quantize(x, 2.0, bad)
        with pytest.raises(ValueError, match="sfLayout"):
            fp4kit.mxfp4_quantize(x, "auto", None, bad)
        with pytest.raises(ValueError, match="sfLayout"):
            fp4kit.mxfp4_dequantize(q, s, bad)


def test_layout_hints_name_the_flag_that_fixes_the_call():
    """A scale tensor in another layout's shape is refused with the argument value that reads it:
    128x4 scales given to the linear dequantizer ask for is_sf_swizzled_layout=True, 128x4 scales of
    a with use_8x4_sf_layout=True ask for use_8x4_sf_layout=False, and the reverse."""
    x = base.random_input(np.random.default_rng(8), 4, 64)
    xq, xs = fp4kit.fp4_quantize(x, 1.0)
    _, xs8 = fp4kit.fp4_quantize(x, 1.0, 16, False, True, True)
    _, xs_lin = fp4kit.fp4_quantize(x, 1.0, 16, False, False)
    wq, ws = fp4kit.fp4_quantize(base.random_input(np.random.default_rng(9), 32, 64), 1.0)
    deq = fp4kit.e2m1_and_ufp8sf_scale_to_float
    with pytest.raises(ValueError, match=r"pass is_sf_swizzled_layout=True for 128x4 scales$"):
        deq(xq, xs, None, 16, 1, False)
    with pytest.raises(ValueError, match=r"pass is_sf_swizzled_layout=True and is_sf_8x4_layout=True for 8x4"):
        deq(xq, xs8, None, 16, 1, False)
    with pytest.raises(ValueError, match=r"pass is_sf_8x4_layout=False for 128x4 scales$"):
        deq(xq, xs, None, 16, 1, True, True)
    with pytest.raises(ValueError, match=r"pass is_sf_swizzled_layout=False for linear scales$"):
        deq(xq, xs_lin, None, 16, 1, True, True)
    with pytest.raises(ValueError, match=r"pass use_8x4_sf_layout=False for 128x4 scales$"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 1.0, use_8x4_sf_layout=True)
    with pytest.raises(ValueError, match=r"pass use_8x4_sf_layout=True for 8x4 scales$"):
        fp4kit.mm_fp4(xq, wq.T, xs8, ws.T, 1.0)
    np.testing.assert_array_equal(fp4kit.mm_fp4(xq, wq.T, xs8, ws.T, 1.0, np.float32, use_8x4_sf_layout=True),
                                  fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 1.0, np.float32))


# ---- scale layouts told apart by shape ----------------------------------------------------------------------


def _weight(n, k, layout, seed=6):
    w = base.random_input(np.random.default_rng(seed), n, k)
    sf_layout = fp4kit.SfLayout.layout_linear if layout == "linear" else fp4kit.SfLayout.layout_128x4
    return fp4kit.nvfp4_quantize(w, 1.0, sfLayout=sf_layout)


def test_mm_w4a16_refuses_linear_scales_where_128x4_is_expected():
    a = np.ones((2, 80), np.float32)
    wq, ws_lin = _weight(40, 80, "linear")
    assert ws_lin.shape == (40, 5)
    with pytest.raises(ValueError, match=r"shape of linear .*b_descale_layout='linear'"):
        fp4kit.mm_w4a16(a, wq.T, ws_lin.T, 1.0)
    _, ws_sw = _weight(40, 80, "128x4")
    with pytest.raises(ValueError, match=r"padded shape of 128x4 .*b_descale_layout='128x4'"):
        fp4kit.mm_w4a16(a, wq.T, ws_sw, 1.0, b_descale_layout="linear")
    got = fp4kit.mm_w4a16(a, wq.T, ws_lin.T, 1.0, b_descale_layout="linear")
    np.testing.assert_array_equal(got, fp4kit.mm_w4a16(a, wq.T, ws_sw.T, 1.0))


def test_mm_fp4_refuses_linear_scales():
    xq, xs = fp4kit.fp4_quantize(np.ones((2, 80), np.float32), 1.0)
    wq, ws_lin = _weight(40, 80, "linear")
    with pytest.raises(ValueError, match=r"block_scale_interleave"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws_lin.T, 1.0)


# ---- tune() without a GPU ----------------------------------------------------------------------------------------


def test_tune_defaults_to_the_host_without_a_gpu(tmp_path):
    from fp4kit import _lib
    if _lib.LIB.fp4_probe_device_count() > 0:
        pytest.skip("a CUDA device is visible: tune() defaults to device 0 there")
    results = fp4kit.tune([(32, 64)], m=1, runs=1, cache_path=str(tmp_path / "t.json"))
    assert results and results[0]["backend"] in [b["name"] for b in fp4kit.backends() if b["available"]]
    with pytest.raises(ValueError, match="device"):
        fp4kit.tune([(32, 64)], device=-2, cache_path=str(tmp_path / "t.json"))


def test_tune_takes_path_objects_and_numpy_integers(tmp_path):
    path = tmp_path / "tuning.json"
    results = fp4kit.tune([(np.int64(32), np.int32(64))], m=np.int64(4), runs=np.int64(1), cache_path=path,
                          device=None)
    assert [(r["m"], r["n"], r["k"]) for r in results] == [(4, 32, 64)]
    assert path.exists()
    results = fp4kit.tune([(32, 64)], m=np.array([1, 3]), runs=1, cache_path=pathlib.PurePath(path), device=None)
    assert [r["m"] for r in results] == [1, 4]
    for bad in (dict(m=2.5), dict(m="4"), dict(runs=1.5), dict(cache_path=3), dict(device=True)):
        kw = dict(m=1, runs=1, cache_path=path, device=None)
        kw.update(bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            fp4kit.tune([(32, 64)], **kw)


def test_backends_and_probe_of_a_device_this_build_cannot_use_say_why():
    """backends(device) and probe(device) answer, as their docstrings promise, also where the device
    cannot be used (a build without CUDA, no GPU): every backend unavailable, with the reason."""
    from fp4kit import _lib
    if _lib.LIB.fp4_probe_device_count() > 0:
        pytest.skip("the library sees a CUDA device")
    for device in (0, np.int64(0), 7):
        listed = fp4kit.backends(device)
        assert [b["name"] for b in listed] == [b["name"] for b in fp4kit.backends()]
        for b in listed:
            assert b["available"] is False and b["reason"] and "device -1" not in b["reason"], b
        report = fp4kit.probe(device)
        assert [r["backend"] for r in report["backends"]] == [b["name"] for b in listed]
        for r in report["backends"]:
            assert r["available"] == "no" and r["reason"] == listed[0]["reason"]
            assert all(c["support"] == "no" and c["reason"] == r["reason"] for c in r["capabilities"].values())
    assert report["device"] == 7
    with pytest.raises(ValueError, match="device"):
        fp4kit.backends(True)
    # tune runs on the device: a build without CUDA cannot (UnsupportedError), a CUDA build without
    # the GPU has no device 0 (NotFoundError)
    no_cuda = _lib.has_symbol("fp4_build_cuda_targets") and not _lib.LIB.fp4_build_cuda_targets()
    with pytest.raises(fp4kit.UnsupportedError if no_cuda else fp4kit.NotFoundError) as e:
        fp4kit.tune([(32, 64)], device=0)
    assert "device -1" not in str(e.value)


def _doc_calls(path):
    """(function name, listed parameters) of every inline `name(p1, p2=..., ...)` in a document whose
    parameters are plain names or '...' (examples that pass expressions are left out)."""
    text = open(path, encoding="utf-8").read()
    for name, args in re.findall(r"`(?:fp4kit\.)?([a-z_0-9]+)\(([^`]*)\)`", text):
        parts, depth, cur = [], 0, ""
        for ch in args:  # split at the commas outside parentheses (defaults such as m=(1, 16))
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        params = [p.strip().split("=")[0].strip() for p in parts + [cur] if p.strip()]
        if all(p == "..." or re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", p) for p in params):
            yield name, params


def test_documented_signatures_match_the_code():
    """Every call written out in docs/python.md and python/README.md names the function's parameters
    in the code's order: those before any '...' are its first parameters, and every name listed is
    one of its parameters, in order (trailing ones may be left out). A call whose first argument is
    not the first parameter's name is an example with the caller's variables and is left out."""
    checked = 0
    for doc in (os.path.join(base.REPO, "docs", "python.md"), os.path.join(base.REPO, "python", "README.md")):
        for name, params in _doc_calls(doc):
            fn = getattr(fp4kit, name, None)
            if not callable(fn) or name not in fp4kit.__all__:
                continue
            real = list(inspect.signature(fn).parameters)
            if params and params[0] not in (real[0], "..."):
                continue  # a call with the caller's variables (an example), not a signature
            lead = params[:params.index("...")] if "..." in params else params
            assert lead == real[:len(lead)], (doc, name, params, real)
            named = [p for p in params if p != "..."]
            at = [real.index(p) if p in real else -1 for p in named]
            assert -1 not in at and at == sorted(at), (doc, name, params, real)
            checked += 1
    assert checked >= 8


# ---- call plans: shapes and threads never share a stale plan ---------------------------------------------------


def test_plans_follow_every_shape_and_kind():
    cases = [base._operands(m, n, k, seed=m) for m, n, k in [(1, 32, 64), (3, 48, 128), (1, 32, 64), (2, 32, 64)]]
    first = [fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, backend="ref") for xq, xs, wq, ws, alpha, _ in cases]
    again = [fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, backend="ref") for xq, xs, wq, ws, alpha, _ in cases]
    for (xq, xs, wq, ws, alpha, ref), a, b in zip(cases, first, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a.astype(np.float64), ref.astype(np.float32).astype(np.float64))
    # a read-only output is refused even when a writable one of the same shape ran before
    xq, xs, wq, ws, alpha, _ = cases[0]
    out = np.empty((1, 32), np.float32)
    fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, out)
    ro = np.empty((1, 32), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32, ro)
    with pytest.raises(ValueError, match="alpha must be a number"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, "0.5")


def _in_threads(work, n):
    """work(0) .. work(n - 1), each on a thread of its own, all started before any is joined."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_plans_are_per_thread():
    cases = [base._operands(2, 64, 128, seed=s) for s in range(4)]
    expect = [fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32) for xq, xs, wq, ws, alpha, _ in cases]
    bad = []

    def work(i):
        xq, xs, wq, ws, alpha, _ = cases[i % 4]
        for _ in range(50):
            got = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, np.float32)
            if not np.array_equal(got, expect[i % 4]):
                bad.append(i)

    _in_threads(work, 8)
    assert not bad


@torch_only
def test_tensor_plans_follow_dtype_stride_and_scalar_kind():
    """The tensor fast path keys a call on every operand's shape, stride, dtype and device and on how
    the scalar is passed: calls differing only in one of these each get their own plan (same bits as
    a fresh process would give), and a NumPy operand among tensors takes the validating path."""
    from fp4kit import _plan
    x, gx, gw, wq, ws = _torch_linear_operands(m=2, n=64, k=128)
    w_alpha = (1.0 / gw).float()
    cases = ((x, w_alpha), (x.half(), w_alpha), (x.float(), w_alpha), (x, float(w_alpha)),
             (x, w_alpha.to(torch.bfloat16)), (x, w_alpha.double()), (x, w_alpha.numpy()),
             (torch.cat((x, x), 1)[:, :128], w_alpha), (x, w_alpha.reshape(())))
    want = []
    for a, alpha in cases:  # each from a plan built for it alone
        _plan.forget_plans()
        want.append(fp4kit.mm_w4a16(a, wq.T, ws.T, alpha, torch.float32))
    for _ in range(2):  # all plans present: each call must find its own
        for (a, alpha), w in zip(cases, want):
            out = torch.full((2, 64), float("nan"))
            got = fp4kit.mm_w4a16(a, wq.T, ws.T, alpha, torch.float32, out)
            assert got is out and torch.equal(out, w) and not torch.isnan(out).any(), (a.dtype, a.stride(), alpha)
            assert torch.equal(fp4kit.mm_w4a16(a, wq.T, ws.T, alpha, torch.float32), w)
    # a NumPy weight among CPU tensors takes the general key and pointer path, with the same bits
    assert torch.equal(fp4kit.mm_w4a16(x, wq.numpy().T, ws.T, w_alpha, torch.float32), want[0])
    with pytest.raises(ValueError, match="must be a scalar"):
        fp4kit.mm_w4a16(x, wq.T, ws.T, torch.ones(3))
    with pytest.raises(ValueError, match="not bfloat16"):
        fp4kit.mm_w4a16(x, wq.T, ws.T, w_alpha, torch.int32)
    xq, xs = fp4kit.fp4_quantize(x, gx)
    for alpha in (None, 2.0, 2, np.float32(2.0), torch.tensor([2.0]), torch.tensor(2.0, dtype=torch.bfloat16)):
        expect = fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 1.0 if alpha is None else 2.0, torch.float32)
        for _ in range(2):
            assert torch.equal(fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, torch.float32), expect), type(alpha)
    # the library's own check still runs on every call of a known plan, with its message
    bad = wq.clone()
    assert torch.equal(fp4kit.mm_fp4(xq, bad.T, xs, ws.T, 2.0), fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 2.0))
    with pytest.raises(ValueError, match="alpha"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, float("inf"))


def test_compiled_path_is_built_and_matches_the_library():
    """The build makes fp4kit._native beside libfp4kit where Python's headers are found (as on the
    machines that run these tests), and the package refuses one built against other structs."""
    from fp4kit import _lib
    if _lib.NATIVE is None:
        pytest.skip("fp4kit._native did not load: " + _lib.NATIVE_WHY)
    assert _lib.NATIVE.struct_sizes == (ctypes.sizeof(_lib.Matrix), ctypes.sizeof(_lib.QMatrix),
                                        ctypes.sizeof(_lib.Options), ctypes.sizeof(_lib.RunInfo))
    info = fp4kit.call_path()
    assert info["module"] == _lib.NATIVE.__file__
    if fp4kit._ops._torch_ops is None:
        assert info["path"] == "python" and "PyTorch" in info["why"], info
    else:
        assert info == {"path": "compiled", "why": "", "module": _lib.NATIVE.__file__}
    with pytest.raises(TypeError):
        _lib.NATIVE.remember(("k",), object())


def _both_paths(call):
    """call() on the compiled path, then on the Python path: both results, and how many plans the
    compiled path held after its calls (0 would mean it never ran one)."""
    from fp4kit import _lib, _ops, _plan
    _plan.forget_plans()
    assert _ops._use_native(True)
    compiled = [call() for _ in range(3)]  # the first builds the plan (Python path), the rest run it
    held = _lib.NATIVE.plan_count()
    try:
        _ops._use_native(False)
        assert fp4kit.call_path()["path"] == "python"
        python = call()
    finally:
        _ops._use_native(True)
    return compiled, python, held


def _nan_out(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _check_compiled_path_bits(device):
    from fp4kit import _lib
    if _lib.NATIVE is None:
        pytest.skip("fp4kit._native did not load: " + _lib.NATIVE_WHY)
    fp4kit.register_torch_ops()
    x, gx, gw, wq, ws = _torch_linear_operands(m=3, n=64, k=128, device=device)
    alpha = (1.0 / (gx * gw)).float()
    walpha = (1.0 / gw).float()
    xq, xs = fp4kit.fp4_quantize(x, gx)
    calls = {
        "quantize, tensor scale": lambda: fp4kit.fp4_quantize(x, gx),
        "quantize, float scale": lambda: fp4kit.fp4_quantize(x, float(gx)),
        "quantize, mxfp4": lambda: fp4kit.mxfp4_quantize(x),
        "quantize, 3-D": lambda: fp4kit.fp4_quantize(x.reshape(1, 3, 128), gx),
        "mm_fp4, tensor alpha": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, torch.bfloat16),
        "mm_fp4, float alpha": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, float(alpha), torch.float32),
        "mm_fp4, no alpha": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T),
        "mm_fp4, bf16 alpha": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha.to(torch.bfloat16)),
        "mm_fp4, out": lambda: fp4kit.mm_fp4(xq, wq.T, xs, ws.T, alpha, torch.float32,
                                             _nan_out((3, 64), torch.float32, device)),
        "mm_w4a16, bf16": lambda: fp4kit.mm_w4a16(x, wq.T, ws.T, walpha),
        "mm_w4a16, f16 out f32": lambda: fp4kit.mm_w4a16(x.half(), wq.T, ws.T, walpha, torch.float32),
        "mm_w4a16, f32, out": lambda: fp4kit.mm_w4a16(x.float(), wq.T, ws.T, float(walpha), torch.float32,
                                                      _nan_out((3, 64), torch.float32, device)),
        "mm_w4a16, row stride": lambda: fp4kit.mm_w4a16(torch.cat((x, x), 1)[:, :128], wq.T, ws.T, walpha),
    }
    for name, call in calls.items():
        compiled, python, held = _both_paths(call)
        assert held >= 1, name
        for got in compiled:
            for a, b in zip(_as_tuple(got), _as_tuple(python)):
                assert a.shape == b.shape and a.dtype == b.dtype and a.device == b.device, name
                assert a.is_contiguous() and a.stride() == b.stride(), (name, a.stride(), b.stride())
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
                if a.is_floating_point():
                    assert not torch.isnan(a).any(), name
        assert fp4kit.last_run()["backend"], name
    # an error keeps the library's message on the compiled path (its plan ran before, the scalar is bad now)
    fp4kit.mm_fp4(xq, wq.T, xs, ws.T, 2.0)
    with pytest.raises(ValueError, match="alpha"):
        fp4kit.mm_fp4(xq, wq.T, xs, ws.T, float("inf"))
    # operands the compiled path does not take go to the Python path, which validates them
    with pytest.raises(ValueError, match="must be a scalar"):
        fp4kit.mm_w4a16(x, wq.T, ws.T, torch.ones(3, device=device))


@torch_only
def test_compiled_path_gives_the_python_paths_bits_on_cpu_tensors():
    _check_compiled_path_bits("cpu")


@torch_only
def test_compiled_path_hands_unusual_operands_to_the_python_path():
    """Operands the compiled path does not run itself (M = 0, a column-major input to quantize, a
    NumPy scalar, an nn.Parameter weight, a meta tensor) give what the Python path gives, and the
    plans of the compiled path stay usable after them."""
    from fp4kit import _lib
    if _lib.NATIVE is None:
        pytest.skip("fp4kit._native did not load: " + _lib.NATIVE_WHY)
    fp4kit.register_torch_ops()
    x, gx, gw, wq, ws = _torch_linear_operands(m=3, n=64, k=128)
    walpha = float(1.0 / gw)
    want = fp4kit.mm_w4a16(x, wq.T, ws.T, walpha, torch.float32)
    xt = torch.randn(64, 32, dtype=torch.bfloat16).T  # [32, 64], column-major: quantized along its 32-long rows
    cases = {
        "M = 0": lambda: fp4kit.mm_w4a16(x[:0], wq.T, ws.T, walpha, torch.float32),
        "column-major quantize input": lambda: fp4kit.fp4_quantize(xt, gx),
        "NumPy scalar": lambda: fp4kit.mm_w4a16(x, wq.T, ws.T, np.float32(walpha), torch.float32),
        "Parameter weight": lambda: fp4kit.mm_w4a16(x, torch.nn.Parameter(wq, requires_grad=False).T, ws.T, walpha,
                                                    torch.float32),
    }
    for name, call in cases.items():
        compiled, python, _ = _both_paths(call)
        for got in compiled:
            for a, b in zip(_as_tuple(got), _as_tuple(python)):
                assert a.shape == b.shape and a.stride() == b.stride(), name
                assert torch.equal(a, b), name
    assert fp4kit.mm_w4a16(x[:0], wq.T, ws.T, walpha, torch.float32).shape == (0, 64)
    with pytest.raises(ValueError, match="meta"):  # keyed apart from the CPU plan by its device type
        fp4kit.mm_w4a16(x.to("meta"), wq.T, ws.T, walpha, torch.float32)
    assert torch.equal(fp4kit.mm_w4a16(x, wq.T, ws.T, walpha, torch.float32), want)


@torch_only
def test_compiled_path_plans_are_per_thread():
    from fp4kit import _lib
    if _lib.NATIVE is None:
        pytest.skip("fp4kit._native did not load: " + _lib.NATIVE_WHY)
    fp4kit.register_torch_ops()
    cases = [_torch_linear_operands(m=2, n=32 * (s + 1), k=128) for s in range(4)]
    expect = [fp4kit.mm_w4a16(x, wq.T, ws.T, float(1.0 / gw)) for x, gx, gw, wq, ws in cases]
    bad = []

    def work(i):
        x, gx, gw, wq, ws = cases[i % 4]
        for _ in range(50):
            if not torch.equal(fp4kit.mm_w4a16(x, wq.T, ws.T, float(1.0 / gw)), expect[i % 4]):
                bad.append(i)
        if not _lib.NATIVE.plan_count():
            bad.append("thread %d held no compiled plan" % i)

    _in_threads(work, 8)
    assert not bad


def test_hot_calls_bypass_ctypes_prototypes():
    """The plans call the library through entry points without argtypes (arguments are prebuilt
    ctypes objects), and a failing status still raises the library's message."""
    from fp4kit import _plan
    x = base.random_input(np.random.default_rng(43), 3, 64)
    fp4kit.fp4_quantize(x, 2.0)
    fn = _plan.raw_function("fp4_quantize")
    assert fn.argtypes is None and fn is not fp4kit._lib.LIB.fp4_quantize
    assert fp4kit._lib.LIB.fp4_quantize.argtypes  # the bound prototype is left as it was
    with pytest.raises(ValueError, match="global_scale"):
        fp4kit.fp4_quantize(x, float("nan"))


def test_scale_shape_holds_the_librarys_scales_size():
    """scale_shape (integer arithmetic, usable on symbolic sizes) covers fp4_scales_size bytes."""
    from fp4kit import _ops
    for fmt in (0, 1):
        for layout in (0, 1, 2):
            if fmt == 1 and layout == 2:
                continue
            for rows, k in [(1, 64), (130, 96), (7, 512)]:
                if k % (16 if fmt == 0 else 32):
                    continue
                r, c = _ops.scale_shape(fmt, layout, rows, k)
                assert r * c == _ops.scales_size(fmt, layout, rows, k)


# ---- torch: tensor scales, custom ops, compile ---------------------------------------------------------------


def _torch_linear_operands(m=3, n=64, k=128, device="cpu"):
    torch.manual_seed(m + n)
    x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    w = torch.randn(n, k, dtype=torch.bfloat16, device=device)
    gx = (448 * 6) / x.float().abs().max().reshape(1)
    gw = (448 * 6) / w.float().abs().max().reshape(1)
    wq, ws = fp4kit.nvfp4_quantize(w, gw)
    return x, gx, gw, wq, ws


@torch_only
def test_torch_ops_are_registered_with_fake_implementations():
    x, gx, gw, wq, ws = _torch_linear_operands()
    xq, xs = fp4kit.fp4_quantize(x, gx)
    alpha = (1.0 / (gx * gw)).float()
    ops = torch.ops.fp4kit
    for op, args in [
        (ops.fp4_quantize, (x, gx, 1.0, 16, False, True, False, None, "auto", "flashinfer")),
        (ops.mm_fp4, (xq, wq, xs, ws, alpha, 1.0, torch.bfloat16, 16, False, "auto", True, None)),
        (ops.mm_w4a16, (x, wq, ws, 1.0 / gw, 1.0, torch.bfloat16, 16, True, "128x4", "auto", None)),
    ]:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))


@torch_only
def test_torch_compile_fullgraph_traces_fp4kit_calls():
    x, gx, gw, wq, ws = _torch_linear_operands(m=4)

    class Linear(torch.nn.Module):
        def forward(self, h):
            hq, hs = fp4kit.fp4_quantize(h, gx)
            y = fp4kit.mm_fp4(hq, wq.T, hs, ws.T, 1.0 / (gx * gw), torch.bfloat16)
            return y + fp4kit.mm_w4a16(h, wq.T, ws.T, 1.0 / gw)

    mod = Linear()
    eager = mod(x)
    compiled = torch.compile(mod, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(compiled, eager)


# ---- MoE -----------------------------------------------------------------------------------------------------

E, H, I, T_TOK, TOP_K = 4, 64, 32, 5, 2


class CG(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("scales", ctypes.c_void_p), ("multipliers", ctypes.c_void_p),
                ("experts", ctypes.c_int64), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("format", ctypes.c_int), ("layout", ctypes.c_int), ("memory", ctypes.c_int)]


class CX(ctypes.Structure):
    _fields_ = [("gate_up", CG), ("down", CG), ("gate_up_act_scale", ctypes.c_float),
                ("down_act_scale", ctypes.c_float), ("act_scales_device", ctypes.c_void_p)]


class CL(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("routed", CX), ("shared", ctypes.c_void_p)]


class CR(ctypes.Structure):
    _fields_ = [("topk_ids", ctypes.c_void_p), ("tokens", ctypes.c_int64), ("top_k", ctypes.c_int64),
                ("topk_weights", base.CM), ("shared_weights", ctypes.c_void_p)]


C = base.C
C.fp4_moe_workspace_size.argtypes = [ctypes.POINTER(CL), ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_size_t)]
C.fp4_moe_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(CL), ctypes.POINTER(base.CM), ctypes.POINTER(CR),
                              ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(base.CM), ctypes.c_void_p]


def c_moe(hidden, ids, weights, w13, s13, m13, w2, s2, m2, mode, act):
    """fp4_moe_forward called directly on host arrays; output pre-filled with NaN."""
    t, h = hidden.shape
    lay = CL()
    lay.mode = mode
    for g, w, s, m in ((lay.routed.gate_up, w13, s13, m13), (lay.routed.down, w2, s2, m2)):
        g.data, g.scales, g.multipliers = w.ctypes.data, s.ctypes.data, m.ctypes.data
        g.experts, g.rows, g.cols, g.format, g.layout, g.memory = w.shape[0], w.shape[1], 2 * w.shape[2], 0, 1, 0
    lay.routed.gate_up_act_scale, lay.routed.down_act_scale = act
    rt = CR(ids.ctypes.data, t, ids.shape[1], base.CM(weights.ctypes.data, t, ids.shape[1], 0, 0, 0), None)
    n = ctypes.c_size_t()
    assert C.fp4_moe_workspace_size(ctypes.byref(lay), t, ids.shape[1], None, ctypes.byref(n)) == 0
    ws = np.empty(max(n.value, 1), np.uint8)
    out = np.full((t, h), np.nan, hidden.dtype)
    dt = base.DTYPES[hidden.dtype.name][0]
    hm, om = base.CM(hidden.ctypes.data, t, h, 0, dt, 0), base.CM(out.ctypes.data, t, h, 0, dt, 0)
    st = C.fp4_moe_forward(None, ctypes.byref(lay), ctypes.byref(hm), ctypes.byref(rt), ws.ctypes.data, n.value,
                           ctypes.byref(om), None)
    assert st == 0, C.fp4_last_error().decode()
    return out


def moe_operands(seed=0):
    rng = np.random.default_rng(seed)
    hidden = base.random_input(rng, T_TOK, H, "bfloat16")
    ids = np.stack([rng.choice(E, TOP_K, replace=False) for _ in range(T_TOK)]).astype(np.int32)
    weights = rng.random((T_TOK, TOP_K)).astype(np.float32)
    parts = {}
    for name, rows, cols in (("w13", 2 * I, H), ("w2", H, I)):
        qs, ss, gs = [], [], []
        for e in range(E):
            w = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.1 * (e + 1))
            g = base.gsf_of(w)
            q, s = fp4kit.nvfp4_quantize(w, g)
            qs.append(q)
            ss.append(s.reshape(-1))
            gs.append(np.float32(1) / np.float32(g))
        parts[name] = (np.stack(qs), np.stack(ss), np.array(gs, np.float32))
    return hidden, ids, weights, parts


@pytest.mark.parametrize("mode", ["w4a4", "w4a16"])
def test_moe_forward_equals_fp4_moe_forward(mode):
    hidden, ids, weights, p = moe_operands(1)
    act = (3.0, 5.0)
    expect = c_moe(hidden, ids, weights, *p["w13"], *p["w2"], 1 if mode == "w4a4" else 0, act)
    got = fp4kit.moe_forward(hidden, ids, weights, *p["w13"], *p["w2"], act_scales=act, mode=mode)
    assert got.dtype == hidden.dtype and got.shape == (T_TOK, H)
    np.testing.assert_array_equal(got.view(np.uint16), expect.view(np.uint16))
    assert not np.isnan(got.astype(np.float32)).any()
    if torch is not None:
        th = torch.from_numpy(hidden.view(np.uint16)).view(torch.bfloat16)
        tt = [torch.from_numpy(v) for v in (*p["w13"], *p["w2"])]
        gt = fp4kit.moe_forward(th, torch.from_numpy(ids), torch.from_numpy(weights), *tt,
                                act_scales=torch.tensor(act), mode=mode)
        np.testing.assert_array_equal(gt.view(torch.uint16).numpy(), expect.view(np.uint16))


def test_moe_forward_act_scales_and_multipliers_are_part_of_the_plan():
    """A call's activation scales are never those of an earlier call: W4A4 NVFP4 with act_scales=None
    is refused every time, also after a call with a pair; a new pair computes with its own values;
    list multipliers are refused rather than ignored after a call without multipliers."""
    hidden, ids, weights, p = moe_operands(4)
    w13, s13, m13 = p["w13"]
    w2, s2, m2 = p["w2"]
    for act in ((3.0, 5.0), (2.0, 0.5), [np.float32(4.0), 1]):
        expect = c_moe(hidden, ids, weights, w13, s13, m13, w2, s2, m2, 1, tuple(float(v) for v in act))
        got = fp4kit.moe_forward(hidden, ids, weights, w13, s13, m13, w2, s2, m2, act, "w4a4")
        np.testing.assert_array_equal(got.view(np.uint16), expect.view(np.uint16))
        for _ in range(2):
            with pytest.raises(fp4kit.InvalidArgumentError, match="needs act_scales"):
                fp4kit.moe_forward(hidden, ids, weights, w13, s13, m13, w2, s2, m2, None, "w4a4")
    for bad in ((1.0,), ("1.0", 2.0), 2.0):
        with pytest.raises(fp4kit.InvalidArgumentError, match="act_scales"):
            fp4kit.moe_forward(hidden, ids, weights, w13, s13, m13, w2, s2, m2, bad, "w4a4")
    plain = fp4kit.moe_forward(hidden, ids, weights, w13, s13, None, w2, s2, None, None, "w4a16")
    for _ in range(2):
        with pytest.raises(fp4kit.InvalidArgumentError, match="w13_multipliers"):
            fp4kit.moe_forward(hidden, ids, weights, w13, s13, list(m13), w2, s2, None, None, "w4a16")
    np.testing.assert_array_equal(
        plain.view(np.uint16),
        c_moe(hidden, ids, weights, w13, s13, np.ones(E, np.float32), w2, s2, np.ones(E, np.float32), 0,
              (0.0, 0.0)).view(np.uint16))


def test_moe_forward_of_no_tokens_returns_an_empty_output():
    hidden, ids, weights, p = moe_operands(5)
    for empty in ((hidden[:0], ids[:0], weights[:0]),
                  (np.zeros((0, H), hidden.dtype), np.zeros((0, TOP_K), np.int32), np.zeros((0, TOP_K), np.float32))):
        out = fp4kit.moe_forward(*empty, *p["w13"], *p["w2"], (2.0, 2.0), "w4a4")
        assert out.shape == (0, H) and out.dtype == hidden.dtype


@torch_only
@pytest.mark.parametrize("m,k", [(300, 96), (100, 96), (4, 32), (9, 16)])
@pytest.mark.parametrize("layout", ["128x4", "8x4", "linear"])
def test_fp4_quantize_fake_shapes_equal_eager_shapes(m, k, layout):
    """The torch op's fake implementation gives the shapes the eager call returns (FlashInfer's)."""
    x = torch.randn(m, k, dtype=torch.bfloat16)
    args = (x, torch.tensor([1.0]), 1.0, 16, False, layout != "linear", layout == "8x4", None, "auto", "flashinfer")
    torch.library.opcheck(torch.ops.fp4kit.fp4_quantize, args, test_utils=("test_faketensor",))
    q, s = fp4kit.fp4_quantize(x, 1.0, 16, False, layout != "linear", layout == "8x4")
    c = k // 16
    assert tuple(s.shape) == {"128x4": ((m + 127) // 128 * 128, (c + 3) // 4 * 4),
                              "8x4": ((m + 7) // 8 * 8, (c + 3) // 4 * 4), "linear": (m, c)}[layout]


@torch_only
@pytest.mark.parametrize("w4a16", [False, True])
@pytest.mark.parametrize("order", ["w31", "w13"])
def test_cutlass_fused_moe_contract_equals_fp4_moe_forward(w4a16, order):
    hidden, ids, weights, p = moe_operands(2)
    w13, s13, g13 = p["w13"]
    w2, s2, g2 = p["w2"]
    a1, a2 = np.float32(2.0), np.float32(0.5)
    t = torch.from_numpy
    if w4a16:
        qs = [None, t(s13).view(torch.int32), t(g13), None, t(s2).view(torch.int32), t(g2)]
        m13, m2, act = g13, g2, (1.0, 1.0)
    else:
        # FlashInfer's fc dequant scales 1/(act_scale * weight_global_scale); fp4kit's multipliers alpha * act_scale
        alpha13 = (t(g13) / torch.tensor(a1)).float()
        alpha2 = (t(g2) / torch.tensor(a2)).float()
        qs = [torch.tensor(a1), t(s13).view(torch.int32), alpha13, torch.tensor(a2), t(s2).view(torch.int32), alpha2]
        m13, m2, act = (alpha13 * torch.tensor(a1)).numpy(), (alpha2 * torch.tensor(a2)).numpy(), (a1, a2)
    expect = c_moe(hidden, ids, weights, w13, s13, m13, w2, s2, m2, 0 if w4a16 else 1, act)
    fc1, fc1_sf = t(w13), t(s13)
    if order == "w31":  # what SGLang's loader holds for the flashinfer_cutlass runner: up rows first
        fc1 = torch.cat((fc1[:, I:], fc1[:, :I]), dim=1)
        sf = torch.from_numpy(np.stack([_swap_scale_halves(s) for s in s13]))
        qs[1] = sf.view(torch.int32)
    else:
        qs[1] = fc1_sf.view(torch.int32)
    th = t(hidden.view(np.uint16)).view(torch.bfloat16)
    out = torch.full((T_TOK, H), float("nan"), dtype=torch.bfloat16)
    res = fp4kit.cutlass_fused_moe(th, t(ids), t(weights), fc1.view(torch.long), t(w2).view(torch.long),
                                   torch.bfloat16, qs, output=out, fc1_order=order, w4a16=w4a16)
    assert isinstance(res, list) and res[0] is out
    np.testing.assert_array_equal(out.view(torch.uint16).numpy(), expect.view(np.uint16))


def _swap_scale_halves(s):
    """128x4 scales of [w1; w3] rows re-laid as [w3; w1] rows, through the linear layout."""
    c = H // 16
    lin = np.empty((2 * I, c), np.uint8)
    off = base.offsets_128x4(2 * I, c)
    lin[:, :] = s[off]
    out = np.zeros_like(s)
    out[off] = np.concatenate((lin[I:], lin[:I]))
    return out


@torch_only
def test_cutlass_fused_moe_names_what_it_does_not_support():
    hidden, ids, weights, p = moe_operands(3)
    t = torch.from_numpy
    th = t(hidden.view(np.uint16)).view(torch.bfloat16)
    qs = [torch.tensor(1.0), t(p["w13"][1]), t(p["w13"][2]), torch.tensor(1.0), t(p["w2"][1]), t(p["w2"][2])]
    args = (th, t(ids), t(weights), t(p["w13"][0]), t(p["w2"][0]), torch.bfloat16, qs)
    for kw in [dict(fc1_expert_biases=torch.zeros(1)), dict(input_sf=torch.zeros(1)), dict(swiglu_limit=torch.zeros(1)),
               dict(ep_size=2), dict(tp_size=2), dict(cluster_size=2), dict(enable_alltoall=True),
               dict(use_w4_group_scaling=True), dict(min_latency_mode=True), dict(use_packed_weights=True),
               dict(use_deepseek_fp8_block_scale=True), dict(use_mxfp8_act_scaling=True),
               dict(activation_type=fp4kit.ActivationType.Relu2), dict(profile_ids=[0, 0])]:
        name = next(iter(kw))
        with pytest.raises(NotImplementedError, match=name):
            fp4kit.cutlass_fused_moe(*args, **kw)
    with pytest.raises(NotImplementedError, match="quant_scales"):
        fp4kit.cutlass_fused_moe(*args[:6], qs[:4])
    out = fp4kit.cutlass_fused_moe(*args, fc1_order="w13", use_fused_finalize=False, tune_max_num_tokens=16)[0]
    assert out.shape == (T_TOK, H) and not torch.isnan(out.float()).any()


# ---- CUDA: device scalars and graph capture of each entry point --------------------------------------------------


@cuda_only
def test_compiled_path_gives_the_python_paths_bits_on_cuda_tensors():
    base._gpu_backends_or_skip()
    _check_compiled_path_bits("cuda")


@cuda_only
def test_cuda_tensor_scales_are_read_on_the_device_and_captured():
    base._gpu_backends_or_skip()
    x, gx, gw, wq, ws = _torch_linear_operands(m=1, n=256, k=512, device="cuda")
    alpha = (1.0 / (gx * gw)).float()
    walpha = (1.0 / gw).float()

    def step():
        hq, hs = fp4kit.fp4_quantize(x, gx)
        y = fp4kit.mm_fp4(hq, wq.T, hs, ws.T, alpha, torch.bfloat16)
        z = fp4kit.mm_w4a16(x, wq.T, ws.T, walpha)
        return hq, hs, y, z

    eager = step()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up on the capture stream: plans built, workspace reserved
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # a host read of a scale (.item()) would invalidate the capture
        captured = step()
    for _ in range(100):
        g.replay()
    torch.cuda.synchronize()
    for a, b in zip(eager, captured):
        assert torch.equal(a, b)
    gx.mul_(0.5)  # the replay reads the scale's current value on the device
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], fp4kit.fp4_quantize(x, gx)[0])
