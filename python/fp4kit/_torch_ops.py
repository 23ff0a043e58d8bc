"""torch.library custom ops torch.ops.fp4kit.* behind the FlashInfer-named functions, with fake
(meta) implementations, so torch.compile(fullgraph=True) traces a module that calls fp4kit and keeps
each call as one opaque node. Imported only when PyTorch is (fp4kit itself never imports PyTorch).

Eager calls do not go through these ops (the dispatcher would cost more than the call): the public
functions call the ops only while PyTorch compiles. The ops' real implementations are those same
eager functions, so compiled and eager results are the same bits.

Each op takes the weight as the row-major [N, K/2] tensor (the public functions pass b.T), so a
compiler that materializes views hands over the layout the library reads, and the ops carry
needs_fixed_stride_order.
"""

from typing import Optional, Tuple

import torch

from . import _lib
from . import _ops

_TAGS = (torch._C.Tag.needs_fixed_stride_order,) if hasattr(torch._C.Tag, "needs_fixed_stride_order") else ()


def _scalar_args(x):
    """A scalar argument as (tensor or None, float): ops take a tensor and a number separately."""
    if isinstance(x, torch.Tensor):
        return x, 1.0
    return None, (1.0 if x is None else float(x))


def _scalar(t, v):
    return t if t is not None else v


# ---- mm_fp4 ------------------------------------------------------------------------------------------

@torch.library.custom_op("fp4kit::mm_fp4", mutates_args=(), tags=_TAGS)
def _mm_fp4(a: torch.Tensor, w: torch.Tensor, a_descale: torch.Tensor, b_descale: torch.Tensor,
            alpha: Optional[torch.Tensor], alpha_value: float, out_dtype: torch.dtype, block_size: int,
            use_8x4_sf_layout: bool, backend: str, use_nvfp4: bool, enable_pdl: Optional[bool]) -> torch.Tensor:
    return _ops.mm_fp4(a, w.T, a_descale, b_descale, _scalar(alpha, alpha_value), out_dtype, None, block_size,
                       use_8x4_sf_layout, backend, use_nvfp4, enable_pdl)


@_mm_fp4.register_fake
def _(a, w, a_descale, b_descale, alpha, alpha_value, out_dtype, block_size, use_8x4_sf_layout, backend, use_nvfp4,
      enable_pdl):
    return a.new_empty((a.shape[0], w.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fp4kit::mm_fp4_out", mutates_args=("out",), tags=_TAGS)
def _mm_fp4_out(a: torch.Tensor, w: torch.Tensor, a_descale: torch.Tensor, b_descale: torch.Tensor,
                alpha: Optional[torch.Tensor], alpha_value: float, out: torch.Tensor, block_size: int,
                use_8x4_sf_layout: bool, backend: str, use_nvfp4: bool, enable_pdl: Optional[bool]) -> None:
    _ops.mm_fp4(a, w.T, a_descale, b_descale, _scalar(alpha, alpha_value), out.dtype, out, block_size,
                use_8x4_sf_layout, backend, use_nvfp4, enable_pdl)


@_mm_fp4_out.register_fake
def _(a, w, a_descale, b_descale, alpha, alpha_value, out, block_size, use_8x4_sf_layout, backend, use_nvfp4,
      enable_pdl):
    return None


def mm_fp4(a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_8x4_sf_layout, backend, use_nvfp4,
           enable_pdl):
    t, v = _scalar_args(alpha)
    backend = backend or "auto"
    if out is not None:
        torch.ops.fp4kit.mm_fp4_out(a, b.T, a_descale, b_descale, t, v, out, block_size, use_8x4_sf_layout, backend,
                                    use_nvfp4, enable_pdl)
        return out
    return torch.ops.fp4kit.mm_fp4(a, b.T, a_descale, b_descale, t, v, out_dtype or torch.bfloat16, block_size,
                                   use_8x4_sf_layout, backend, use_nvfp4, enable_pdl)


# ---- mm_w4a16 ------------------------------------------------------------------------------------------

@torch.library.custom_op("fp4kit::mm_w4a16", mutates_args=(), tags=_TAGS)
def _mm_w4a16(a: torch.Tensor, w: torch.Tensor, b_descale: torch.Tensor, alpha: Optional[torch.Tensor],
              alpha_value: float, out_dtype: torch.dtype, block_size: int, use_nvfp4: bool, b_descale_layout: str,
              backend: str, enable_pdl: Optional[bool]) -> torch.Tensor:
    return _ops.mm_w4a16(a, w.T, b_descale, _scalar(alpha, alpha_value), out_dtype, None, block_size, use_nvfp4,
                         b_descale_layout, backend, enable_pdl)


@_mm_w4a16.register_fake
def _(a, w, b_descale, alpha, alpha_value, out_dtype, block_size, use_nvfp4, b_descale_layout, backend, enable_pdl):
    return a.new_empty((a.shape[0], w.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fp4kit::mm_w4a16_out", mutates_args=("out",), tags=_TAGS)
def _mm_w4a16_out(a: torch.Tensor, w: torch.Tensor, b_descale: torch.Tensor, alpha: Optional[torch.Tensor],
                  alpha_value: float, out: torch.Tensor, block_size: int, use_nvfp4: bool, b_descale_layout: str,
                  backend: str, enable_pdl: Optional[bool]) -> None:
    _ops.mm_w4a16(a, w.T, b_descale, _scalar(alpha, alpha_value), out.dtype, out, block_size, use_nvfp4,
                  b_descale_layout, backend, enable_pdl)


@_mm_w4a16_out.register_fake
def _(a, w, b_descale, alpha, alpha_value, out, block_size, use_nvfp4, b_descale_layout, backend, enable_pdl):
    return None


def mm_w4a16(a, b, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, b_descale_layout, backend, enable_pdl):
    t, v = _scalar_args(alpha)
    backend = backend or "auto"
    if out is not None:
        torch.ops.fp4kit.mm_w4a16_out(a, b.T, b_descale, t, v, out, block_size, use_nvfp4, b_descale_layout, backend,
                                      enable_pdl)
        return out
    return torch.ops.fp4kit.mm_w4a16(a, b.T, b_descale, t, v, out_dtype or a.dtype, block_size, use_nvfp4,
                                     b_descale_layout, backend, enable_pdl)


# ---- fp4_quantize ------------------------------------------------------------------------------------------

@torch.library.custom_op("fp4kit::fp4_quantize", mutates_args=(), tags=_TAGS)
def _fp4_quantize(input: torch.Tensor, global_scale: Optional[torch.Tensor], global_scale_value: float,
                  sf_vec_size: int, sf_use_ue8m0: bool, is_sf_swizzled_layout: bool, is_sf_8x4_layout: bool,
                  enable_pdl: Optional[bool], backend: str, order: str) -> Tuple[torch.Tensor, torch.Tensor]:
    return _ops.fp4_quantize(input, _scalar(global_scale, global_scale_value), sf_vec_size, sf_use_ue8m0,
                             is_sf_swizzled_layout, is_sf_8x4_layout, False, enable_pdl, backend, order=order)


@_fp4_quantize.register_fake
def _(input, global_scale, global_scale_value, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout,
      enable_pdl, backend, order):
    k = input.shape[-1]
    rows = 1
    for d in input.shape[:-1]:
        rows = rows * d
    fmt = _lib.FORMAT_MXFP4 if sf_use_ue8m0 else _lib.FORMAT_NVFP4
    layout = ((_lib.LAYOUT_8X4 if is_sf_8x4_layout else _lib.LAYOUT_128X4) if is_sf_swizzled_layout
              else _lib.LAYOUT_LINEAR)
    x_q = input.new_empty(tuple(input.shape[:-1]) + (k // 2,), dtype=torch.uint8)
    return x_q, input.new_empty(_ops.scale_shape(fmt, layout, rows, k), dtype=torch.uint8)  # eager's shape


def fp4_quantize(input, global_scale, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout, is_sf_8x4_layout, enable_pdl,
                 backend, order="flashinfer"):
    t, v = _scalar_args(global_scale)
    if input.dim() == 2 and input.stride(-2) == 1 and input.stride(-1) != 1:
        # column-major: quantized along its memory rows, results transposed back (FlashInfer's rule)
        x_q, sf = torch.ops.fp4kit.fp4_quantize(input.T, t, v, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                                                is_sf_8x4_layout, enable_pdl, backend or "auto", order)
        return x_q.T, sf.T
    return torch.ops.fp4kit.fp4_quantize(input, t, v, sf_vec_size, sf_use_ue8m0, is_sf_swizzled_layout,
                                         is_sf_8x4_layout, enable_pdl, backend or "auto", order)


# ---- the MoE layer ------------------------------------------------------------------------------------------

@torch.library.custom_op("fp4kit::moe_forward", mutates_args=(), tags=_TAGS)
def _moe_forward(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w13: torch.Tensor,
                 w13_scales: torch.Tensor, w13_multipliers: Optional[torch.Tensor], w2: torch.Tensor,
                 w2_scales: torch.Tensor, w2_multipliers: Optional[torch.Tensor], act_scales: Optional[torch.Tensor],
                 gate_up_act_scale: float, down_act_scale: float, mode: str, use_nvfp4: bool, scale_layout: str,
                 out_dtype: torch.dtype, backend: str, enable_pdl: Optional[bool]) -> torch.Tensor:
    from . import _moe
    return _moe.moe_forward(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2, w2_scales,
                            w2_multipliers, act_scales if act_scales is not None else (gate_up_act_scale, down_act_scale),
                            mode, use_nvfp4, scale_layout, out_dtype, None, backend, enable_pdl)


@_moe_forward.register_fake
def _(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2, w2_scales, w2_multipliers, act_scales,
      gate_up_act_scale, down_act_scale, mode, use_nvfp4, scale_layout, out_dtype, backend, enable_pdl):
    return hidden.new_empty((hidden.shape[0], hidden.shape[1]), dtype=out_dtype)


def moe_forward(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2, w2_scales, w2_multipliers,
                act_scales, mode, use_nvfp4, scale_layout, out_dtype, backend, enable_pdl):
    from . import _moe
    _moe.check_act_scales_given(act_scales, mode, use_nvfp4, "moe_forward")  # as the eager call refuses None
    if isinstance(act_scales, torch.Tensor):
        t, g, d = act_scales, 1.0, 1.0
    else:
        t, (g, d) = None, ((1.0, 1.0) if act_scales is None else (float(act_scales[0]), float(act_scales[1])))
    return torch.ops.fp4kit.moe_forward(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2,
                                        w2_scales, w2_multipliers, t, g, d, mode, use_nvfp4, scale_layout,
                                        out_dtype or hidden.dtype, backend or "auto", enable_pdl)
