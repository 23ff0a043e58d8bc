"""Drop-in test: code written against FlashInfer's FP4 call pattern (mm_fp4, fp4_quantize), unchanged, with
`import fp4kit as flashinfer`. Runs on CPU tensors (host backends) and, where PyTorch sees a GPU,
on CUDA tensors (the GPU backends)."""

import pytest

torch = pytest.importorskip("torch")

import test_package as base  # noqa: E402  (locates and loads fp4kit)

flashinfer = base.fp4kit  # the one line a user changes: `import fp4kit as flashinfer`


# ---- the FlashInfer-style code under test, as an engine writes it ---------------------------------------

def prepare_weight_nvfp4(weight):
    """Weight loading: quantize once, keep the transposed views the GEMM takes."""
    w_global_sf = (448 * 6) / weight.float().abs().nan_to_num().max()
    w_fp4, w_sf = flashinfer.nvfp4_quantize(weight, w_global_sf, sfLayout=flashinfer.SfLayout.layout_128x4,
                                            do_shuffle=False)
    return w_fp4, w_sf, w_global_sf


def linear_nvfp4(x, w_fp4, w_sf, w_global_sf, backend="auto"):
    """Forward: quantize the activations at run time, then the W4A4 GEMM (vLLM / SGLang pattern)."""
    x_global_sf = (448 * 6) / x.float().abs().nan_to_num().max()
    x_fp4, x_sf = flashinfer.fp4_quantize(x, x_global_sf, sf_vec_size=16, sf_use_ue8m0=False,
                                          is_sf_swizzled_layout=True)
    alpha = 1.0 / (x_global_sf * w_global_sf)
    return flashinfer.mm_fp4(x_fp4, w_fp4.T, x_sf, w_sf.T, alpha, torch.bfloat16, None, backend=backend), \
        (x_fp4, x_sf, x_global_sf)


def linear_mxfp4(x, weight):
    x_fp4, x_sf = flashinfer.mxfp4_quantize(x)
    w_fp4, w_sf = flashinfer.mxfp4_quantize(weight)
    out = flashinfer.mm_fp4(x_fp4, w_fp4.T, x_sf, w_sf.T, None, torch.bfloat16, None, block_size=32,
                            use_nvfp4=False)
    return out, flashinfer.mxfp4_dequantize(x_fp4, x_sf), flashinfer.mxfp4_dequantize(w_fp4, w_sf)


def checkpoint_weight(weight_packed, weight_scale_linear):
    """Model Optimizer checkpoint: linear weight_scale [N, K/16] swizzled at load time."""
    n = weight_packed.shape[0]
    w_sf = flashinfer.block_scale_interleave(weight_scale_linear)
    return weight_packed, w_sf.reshape((n + 127) // 128 * 128, -1)


# ---- the checks --------------------------------------------------------------------------------------------

DEVICES = ["cpu"] + (["cuda"] if base.CUDA else [])


def _within_flashinfer_tolerance(out, ref):
    # FlashInfer's own test bound (its mm_fp4 tests), and a far tighter one an exact kernel meets.
    err = (out.double().cpu() - ref).abs()
    assert (err <= 0.12 * ref.abs().max() + 0.10 * ref.abs()).all()
    assert (err <= 2.0 ** -8 * ref.abs() + 1e-4 * ref.abs().max()).all(), err.max().item()


def _skip_without_gpu_backend(device):
    if device == "cuda":
        base._gpu_backends_or_skip()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m", [1, 40])
def test_flashinfer_nvfp4_linear_runs_unchanged(device, m):
    _skip_without_gpu_backend(device)
    torch.manual_seed(m)
    x = torch.randn(m, 256, dtype=torch.bfloat16, device=device)
    weight = torch.randn(96, 256, dtype=torch.bfloat16, device=device)
    w_fp4, w_sf, w_gsf = prepare_weight_nvfp4(weight)
    out, (x_fp4, x_sf, x_gsf) = linear_nvfp4(x, w_fp4, w_sf, w_gsf)
    assert out.shape == (m, 96) and out.dtype == torch.bfloat16 and out.device == x.device
    # FlashInfer's test reference: dequantize both operands on the host, matmul in high precision.
    dx = flashinfer.e2m1_and_ufp8sf_scale_to_float(x_fp4, x_sf, (1.0 / x_gsf).reshape(1).cpu(), 16, 1, True)
    dw = flashinfer.e2m1_and_ufp8sf_scale_to_float(w_fp4, w_sf, (1.0 / w_gsf).reshape(1).cpu(), 16, 1, True)
    _within_flashinfer_tolerance(out, dx.double() @ dw.double().T)
    # and the quantized GEMM approximates the bf16 one
    exact = x.double().cpu() @ weight.double().cpu().T
    assert ((out.double().cpu() - exact).norm() / exact.norm()).item() < 0.2


@pytest.mark.parametrize("device", DEVICES)
def test_flashinfer_mxfp4_linear_runs_unchanged(device):
    _skip_without_gpu_backend(device)
    torch.manual_seed(5)
    x = torch.randn(9, 128, dtype=torch.bfloat16, device=device)
    weight = torch.randn(64, 128, dtype=torch.bfloat16, device=device)
    out, dx, dw = linear_mxfp4(x, weight)
    _within_flashinfer_tolerance(out, dx.double() @ dw.double().T)


@pytest.mark.parametrize("device", DEVICES)
def test_flashinfer_checkpoint_scales_path(device):
    _skip_without_gpu_backend(device)
    torch.manual_seed(6)
    weight = torch.randn(40, 128, dtype=torch.bfloat16, device=device)
    w_gsf = (448 * 6) / weight.float().abs().max()
    packed, scale_linear = flashinfer.fp4_quantize(weight, w_gsf, 16, False, False)  # as a checkpoint stores it
    w_fp4, w_sf = checkpoint_weight(packed, scale_linear)
    _, swizzled = flashinfer.fp4_quantize(weight, w_gsf, 16, False, True)
    assert torch.equal(w_sf.cpu(), swizzled.cpu().reshape(w_sf.shape))
    x = torch.randn(3, 128, dtype=torch.bfloat16, device=device)
    out, _ = linear_nvfp4(x, w_fp4, w_sf, w_gsf)
    assert out.shape == (3, 40) and not torch.isnan(out).any()
