"""fp4kit: NVFP4 / MXFP4 4-bit floating-point GEMM for NumPy arrays and PyTorch tensors.

The functions have FlashInfer's names, signatures and defaults, so code written for FlashInfer runs
with ``import fp4kit as flashinfer``: mm_fp4, fp4_quantize, nvfp4_quantize, mxfp4_quantize,
e2m1_and_ufp8sf_scale_to_float, block_scale_interleave, SfLayout. fp4kit's own additions:
mm_w4a16 (FP4 weights, 16-bit activations), backends(), probe(), tune(), last_run().

Errors raised on behalf of the C library carry its message: ValueError (InvalidArgumentError) for
bad arguments, NotImplementedError (UnsupportedError) for requests no backend here can run,
RuntimeError (LibraryError) for CUDA and internal failures.
"""

from ._lib import (Error, InvalidArgumentError, LibraryError, NotFoundError, OutOfMemoryError,
                   UnsupportedError)
from ._ops import (SfLayout, block_scale_interleave, e2m1_and_ufp8sf_scale_to_float, fp4_quantize, last_run,
                   mm_fp4, mm_w4a16, mxfp4_dequantize, mxfp4_quantize, nvfp4_block_scale_interleave,
                   nvfp4_quantize)
from ._info import backends, library_path, library_version, probe, tune

__version__ = "0.1.0"

__all__ = [
    "mm_fp4", "fp4_quantize", "nvfp4_quantize", "mxfp4_quantize", "e2m1_and_ufp8sf_scale_to_float",
    "block_scale_interleave", "nvfp4_block_scale_interleave", "mxfp4_dequantize", "SfLayout",
    "mm_w4a16", "backends", "probe", "tune", "last_run", "library_version", "library_path",
    "Error", "InvalidArgumentError", "UnsupportedError", "NotFoundError", "OutOfMemoryError", "LibraryError",
]
