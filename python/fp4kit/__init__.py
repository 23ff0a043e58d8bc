"""fp4kit: NVFP4 / MXFP4 4-bit floating-point GEMM for NumPy arrays and PyTorch tensors.

The functions have FlashInfer's names, signatures and defaults, so code written for FlashInfer runs
with ``import fp4kit as flashinfer``: mm_fp4, fp4_quantize, nvfp4_quantize, mxfp4_quantize,
e2m1_and_ufp8sf_scale_to_float, block_scale_interleave, SfLayout. fp4kit's own additions:
mm_w4a16 (FP4 weights, 16-bit activations), moe_forward (the MoE layer), backends(), probe(),
tune(), last_run(), reserve_workspace(), call_path(). cutlass_fused_moe has FlashInfer's fused-MoE
contract for NVFP4 experts. With PyTorch, the functions are also torch.library custom ops
(torch.ops.fp4kit.*), so torch.compile(fullgraph=True) traces modules that call them, and CUDA
scalars (alpha, global scales) are read on the GPU, so CUDA graphs capture the calls. Eager calls on
tensors run through a compiled hot path where it was built (call_path() says).

Errors raised on behalf of the C library carry its message: ValueError (InvalidArgumentError) for
bad arguments, NotImplementedError (UnsupportedError) for requests no backend here can run,
RuntimeError (LibraryError) for CUDA and internal failures.
"""

from ._lib import (Error, InvalidArgumentError, LibraryError, NotFoundError, OutOfMemoryError,
                   UnsupportedError)
from ._ops import (SfLayout, block_scale_interleave, e2m1_and_ufp8sf_scale_to_float, fp4_quantize, last_run,
                   mm_fp4, mm_w4a16, mxfp4_dequantize, mxfp4_quantize, nvfp4_block_scale_interleave,
                   nvfp4_quantize)
from ._info import backends, call_path, library_path, library_version, probe, reserve_workspace, tune
from ._moe import ActivationType, cutlass_fused_moe, moe_forward, w31_to_w13
from . import _ops as _ops_module
from . import _tensors as _tensors_module


def register_torch_ops():
    """Registers the torch.library custom ops torch.ops.fp4kit.* (mm_fp4, mm_fp4_out, mm_w4a16,
    mm_w4a16_out, fp4_quantize, moe_forward) that torch.compile traces. Done on import when PyTorch
    is already imported, else on the first call with a tensor; call it before compiling a model when
    fp4kit was imported before PyTorch and has not been called yet."""
    if _ops_module._torch_ops is None:
        import torch
        from . import _torch_ops
        _ops_module._set_torch_ops(_torch_ops, torch.compiler.is_compiling, torch.Tensor)
    return _ops_module._torch_ops


_tensors_module.on_first_tensor = register_torch_ops
if _tensors_module._torch() is not None:
    register_torch_ops()

__version__ = "0.1.0"

__all__ = [
    "mm_fp4", "fp4_quantize", "nvfp4_quantize", "mxfp4_quantize", "e2m1_and_ufp8sf_scale_to_float",
    "block_scale_interleave", "nvfp4_block_scale_interleave", "mxfp4_dequantize", "SfLayout",
    "mm_w4a16", "backends", "call_path", "probe", "tune", "last_run", "library_version", "library_path",
    "cutlass_fused_moe", "moe_forward", "w31_to_w13", "ActivationType", "reserve_workspace", "register_torch_ops",
    "Error", "InvalidArgumentError", "UnsupportedError", "NotFoundError", "OutOfMemoryError", "LibraryError",
]
