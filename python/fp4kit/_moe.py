"""The mixture-of-experts layer from Python: fp4kit's moe_forward (over fp4_moe_forward) and
cutlass_fused_moe with FlashInfer's contract for NVFP4 experts, as SGLang's flashinfer_cutlass MoE
runner calls it.
"""

import ctypes
import enum
import numbers

import numpy as np

from . import _lib
from . import _ops
from . import _plan as P
from . import _tensors as T
from ._lib import InvalidArgumentError, UnsupportedError

_MODES = {"w4a4": _lib.MOE_W4A4, "w4a16": _lib.MOE_W4A16}


class ActivationType(enum.IntEnum):
    """FlashInfer's activation enum (same names and values); fp4kit's MoE runs Swiglu:
    down(SiLU(gate(x)) * up(x))."""

    Gelu = 0
    Relu = 1
    Silu = 2
    Swiglu = 3
    Geglu = 4
    SwigluBias = 5
    Relu2 = 6
    SwigluStep = 7
    GegluTanh = 8
    Identity = 9
    Situ = 10
    InvalidType = 11


class _MoePlan(P.Plan):
    __slots__ = ("layer", "hidden", "routing", "out", "act_mode", "w13_mult", "w2_mult", "ws_bytes", "out_shape",
                 "out_dtype", "tokens", "u8")

    def run(self, hidden, topk_ids, topk_weights, w13, w13_scales, w13_mult, w2, w2_scales, w2_mult, act_scales, out):
        ptr = P.ptr
        r = self.layer.routed
        gu, dn = r.gate_up, r.down
        gu.data, gu.scales = ptr(w13), ptr(w13_scales)
        dn.data, dn.scales = ptr(w2), ptr(w2_scales)
        if self.w13_mult:
            gu.multipliers = ptr(w13_mult)
        if self.w2_mult:
            dn.multipliers = ptr(w2_mult)
        keep = None
        mode = self.act_mode
        if mode == P.SCALAR_DEVICE:
            r.act_scales_device = act_scales.data_ptr()
        elif mode == P.SCALAR_DEVICE_CAST:
            keep = act_scales.float()
            r.act_scales_device = keep.data_ptr()
        elif mode == P.SCALAR_HOST:
            r.gate_up_act_scale, r.down_act_scale = (float(v) for v in act_scales.reshape(-1).tolist())
        elif mode == P.SCALAR_NUMBER:  # a pair of numbers of the types the plan was built with
            r.gate_up_act_scale, r.down_act_scale = float(act_scales[0]), float(act_scales[1])
        if self.torch:
            if out is None:  # hidden's device (torch.empty would parse it again)
                out = hidden.new_empty(self.out_shape, dtype=self.out_dtype)
            ws = hidden.new_empty(self.ws_bytes, dtype=self.u8) if self.ws_bytes else None
        else:
            if out is None:
                out = np.empty(self.out_shape, self.out_dtype)
            ws = np.empty(self.ws_bytes, np.uint8) if self.ws_bytes else None
        if self.tokens == 0:
            return out
        self.hidden.data = ptr(hidden)
        rt = self.routing
        rt.topk_ids, rt.topk_weights.data = ptr(topk_ids), ptr(topk_weights)
        self.out.data = ptr(out)
        a = self.args
        a[4].value = ptr(ws) if ws is not None else None
        P.invoke(self)
        del keep, ws  # the workspace is released in stream order after the queued call
        return out


def check_act_scales_given(act_scales, mode, use_nvfp4, fn):
    """W4A4 NVFP4 experts quantize their activations with the two encode scales: None is refused
    (with a Python message, here and in the torch op's trace, before the library would refuse a
    zero scale)."""
    if act_scales is None and mode == "w4a4" and use_nvfp4:
        raise InvalidArgumentError("%s: mode='w4a4' with NVFP4 experts needs act_scales, the gate_up and down "
                                   "activation encode scales (1/input_scale): a pair of numbers or a [2] float32 "
                                   "array/tensor" % fn)


def _number(x, name, fn):
    """A Python or NumPy real number as a float (a string or another object is refused)."""
    if isinstance(x, (str, bytes)) or not isinstance(x, numbers.Real):
        raise InvalidArgumentError("%s: %s must be a number, not %s" % (fn, name, type(x).__name__))
    return float(x)


def act_scales_key(act_scales):
    """What a plan depends on in act_scales: None, the kind and length of a sequence with the type
    of each element (the plan checked those elements), or the array's or tensor's key."""
    if act_scales is None:
        return None
    if isinstance(act_scales, (tuple, list)):
        return (type(act_scales),) + tuple(type(x) for x in act_scales)
    return P.key(act_scales)


def _bytes_3d(v, what, fn):
    v.require_dims(3, what)
    v.require_dtype(_ops._FP4_BYTES, "packed FP4 codes, two per byte")
    if not v.is_contiguous():
        raise InvalidArgumentError("%s: %s must be contiguous (strides %s)" % (fn, v.name, list(v.strides)))
    return v.shape


def _expert_scales(v, fmt, layout, experts, rows, cols, fn):
    v.require_dtype(_ops._SCALE_BYTES[fmt], "%s block scales" % _ops._FORMAT_NAME[fmt])
    if not v.is_contiguous():
        raise InvalidArgumentError("%s: %s must be contiguous (strides %s)" % (fn, v.name, list(v.strides)))
    per = _ops.scales_size(fmt, layout, rows, cols, fn)
    if v.numel != experts * per:
        raise InvalidArgumentError(
            "%s: %s holds %d bytes but %d experts' %s scales of [%d, %d] in the %s layout take %d (%d each)"
            % (fn, v.name, v.numel, experts, _ops._FORMAT_NAME[fmt], rows, cols, _ops._LAYOUT_NAME[layout],
               experts * per, per))


def _multipliers(v, experts, fn):
    if v is None:
        return False
    v.require_dtype((T.F32,), "per-expert decode multipliers")
    if v.numel != experts or not v.is_contiguous():
        raise InvalidArgumentError("%s: %s must be [E] = [%d] contiguous float32; got shape %s"
                                   % (fn, v.name, experts, list(v.shape)))
    return True


def _grouped(shape, fmt, layout, memory):
    g = _lib.GroupedQMatrix()
    g.experts, g.rows, g.cols = shape[0], shape[1], 2 * shape[2]
    g.format, g.layout, g.memory = fmt, layout, memory
    return g


def _moe_plan(hidden, topk_ids, topk_weights, w13, w13_scales, w13_mult, w2, w2_scales, w2_mult, act_scales, mode,
              use_nvfp4, scale_layout, out_dtype, out, backend, enable_pdl):
    fn = "moe_forward"
    if mode not in _MODES:
        raise InvalidArgumentError("%s: mode must be 'w4a4' or 'w4a16', not %r" % (fn, mode))
    layout = _ops._LAYOUT_BY_NAME.get(scale_layout)
    if layout is None:
        raise InvalidArgumentError("%s: scale_layout %r is not one of %s" % (fn, scale_layout, sorted(_ops._LAYOUT_BY_NAME)))
    fmt = _lib.FORMAT_NVFP4 if use_nvfp4 else _lib.FORMAT_MXFP4
    vh, vi, vw = T.View(hidden, "hidden"), T.View(topk_ids, "topk_ids"), T.View(topk_weights, "topk_weights")
    v13, vs13, v2, vs2 = T.View(w13, "w13"), T.View(w13_scales, "w13_scales"), T.View(w2, "w2"), T.View(w2_scales, "w2_scales")
    vm13 = T.View(w13_mult, "w13_multipliers") if w13_mult is not None else None
    vm2 = T.View(w2_mult, "w2_multipliers") if w2_mult is not None else None
    views = [vh, vi, vw, v13, vs13, v2, vs2] + [v for v in (vm13, vm2) if v is not None]
    device = T.same_place(*views)
    ldh = _ops._dense_rows(vh, "hidden states [T, H]", fn)
    tokens, hdim = vh.shape
    vi.require_dims(2, "expert ids [T, top_k]")
    vi.require_dtype(("int32",), "expert ids")
    if not vi.is_contiguous() or vi.shape[0] != tokens:
        raise InvalidArgumentError("%s: topk_ids must be a contiguous [T, top_k] = [%d, k] int32 tensor; got shape %s"
                                   % (fn, tokens, list(vi.shape)))
    top_k = vi.shape[1]
    vw.require_dims(2, "routing weights [T, top_k]")
    vw.require_dtype((T.F32,), "routing weights")
    if vw.shape != (tokens, top_k) or vw.row_stride() is None:
        raise InvalidArgumentError("%s: topk_weights must be a row-major [T, top_k] = [%d, %d] float32 tensor; got shape %s"
                                   % (fn, tokens, top_k, list(vw.shape)))
    s13 = _bytes_3d(v13, "gate_up weights [E, 2I, H/2]", fn)
    s2 = _bytes_3d(v2, "down weights [E, H, I/2]", fn)
    experts, two_i = s13[0], s13[1]
    if 2 * s13[2] != hdim:
        raise InvalidArgumentError("%s: w13 is [E, 2I, H/2] = %s but hidden has H = %d" % (fn, list(s13), hdim))
    if s2[0] != experts or s2[1] != hdim or 2 * 2 * s2[2] != two_i:
        raise InvalidArgumentError("%s: w2 is %s but must be [E, H, I/2] = [%d, %d, %d] to match w13 %s"
                                   % (fn, list(s2), experts, hdim, two_i // 4, list(s13)))
    _expert_scales(vs13, fmt, layout, experts, two_i, hdim, fn)
    _expert_scales(vs2, fmt, layout, experts, hdim, two_i // 2, fn)
    plan = _MoePlan()
    plan.w13_mult = _multipliers(vm13, experts, fn)
    plan.w2_mult = _multipliers(vm2, experts, fn)
    plan.tokens = tokens
    memory = vh.memory
    layer = plan.layer = _lib.MoeLayer()
    layer.mode = _MODES[mode]
    layer.routed.gate_up = _grouped(s13, fmt, layout, memory)
    layer.routed.down = _grouped(s2, fmt, layout, memory)
    layer.routed.gate_up.data, layer.routed.down.data = v13.ptr, v2.ptr
    layer.routed.gate_up.scales, layer.routed.down.scales = vs13.ptr, vs2.ptr
    layer.routed.gate_up.multipliers = vm13.ptr if vm13 else None
    layer.routed.down.multipliers = vm2.ptr if vm2 else None
    check_act_scales_given(act_scales, mode, use_nvfp4, fn)
    if isinstance(act_scales, (tuple, list)):
        if len(act_scales) != 2:
            raise InvalidArgumentError("%s: act_scales must be (gate_up_act_scale, down_act_scale)" % fn)
        plan.act_mode = P.SCALAR_NUMBER
        layer.routed.gate_up_act_scale, layer.routed.down_act_scale = (
            _number(x, "act_scales[%d]" % i, fn) for i, x in enumerate(act_scales))
    elif act_scales is None:
        plan.act_mode = P.SCALAR_UNUSED
    else:
        if not (T.is_torch(act_scales) or isinstance(act_scales, np.ndarray)):
            raise InvalidArgumentError("%s: act_scales must be a pair of numbers (gate_up, down) or a [2] float32 "
                                       "array/tensor, not %s" % (fn, type(act_scales).__name__))
        va = T.View(act_scales, "act_scales")
        if va.numel != 2 or not va.is_contiguous():
            raise InvalidArgumentError("%s: act_scales must hold 2 contiguous values (gate_up, down); got shape %s"
                                       % (fn, list(va.shape)))
        if va.device >= 0:
            if va.device != device:
                raise InvalidArgumentError("%s: act_scales is on %s but the operands on %s" % (fn, va.where(), vh.where()))
            plan.act_mode = P.SCALAR_DEVICE if va.dtype == T.F32 else P.SCALAR_DEVICE_CAST
            layer.routed.act_scales_device = va.ptr
        else:
            plan.act_mode = P.SCALAR_HOST
            layer.routed.gate_up_act_scale, layer.routed.down_act_scale = (
                float(x) for x in (act_scales.reshape(-1).tolist()))
    plan.hidden = _ops._matrix(vh, tokens, hdim, ldh)
    rt = plan.routing = _lib.MoeRouting()
    rt.topk_ids, rt.tokens, rt.top_k = vi.ptr, tokens, top_k
    rt.topk_weights = _ops._matrix(vw, tokens, top_k, vw.row_stride())
    out_given = out is not None
    out, vo, ld = _ops._output(out, out_dtype, vh, tokens, hdim, vh.dtype, fn)
    T.same_place(vh, vo)
    plan.out = _ops._matrix(vo, tokens, hdim, ld)
    plan.torch = vh.torch
    if not out_given:
        plan.out_shape, plan.out_dtype = (tokens, hdim), vo.obj.dtype
    if vh.torch:
        plan.u8 = T._torch().uint8
    ctx = plan.setup(device, "fp4_moe_forward", _ops._backend_bytes(backend, fn), enable_pdl)
    opts = plan.opts
    n = ctypes.c_size_t()
    _lib.check(_lib.LIB.fp4_moe_workspace_size(ctypes.byref(layer), tokens, top_k, ctypes.byref(opts), ctypes.byref(n)),
               "fp4_moe_workspace_size")
    plan.ws_bytes = n.value
    r = ctypes.byref
    plan.args = (ctx.handle if ctx else None, r(layer), r(plan.hidden), r(rt), ctypes.c_void_p(), ctypes.c_size_t(n.value),
                 r(plan.out), r(opts))
    return plan


def moe_forward(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2, w2_scales, w2_multipliers,
                act_scales=None, mode="w4a4", use_nvfp4=True, scale_layout="128x4", out_dtype=None, out=None,
                backend="auto", enable_pdl=None):
    """fp4kit's MoE layer (fp4_moe_forward): out[T, H] = sum_j topk_weights[t, j] *
    expert_{topk_ids[t, j]}(hidden[t]), each expert down(SiLU(gate(x)) * up(x)).

    hidden [T, H] bf16/fp16/fp32; topk_ids [T, k] int32 and topk_weights [T, k] float32 (the router's
    choice). w13 [E, 2I, H/2] packed FP4 with the gate rows first, then the up rows (the w13 order of
    checkpoints and of vLLM / SGLang loaders); w2 [E, H, I/2]. w13_scales / w2_scales: each expert's
    block scales in scale_layout ('128x4' or 'linear'), E consecutive buffers (any shape, contiguous);
    w13_multipliers / w2_multipliers: [E] float32 decode multipliers (Model Optimizer's weight_scale_2)
    or None for 1. mode: 'w4a4' (activations quantized in the weights' format) or 'w4a16'.
    act_scales (W4A4 NVFP4): the gate_up and down activation encode scales (1/input_scale), as a pair
    of floats or a [2] float32 tensor; a CUDA tensor is read on the GPU. use_nvfp4: False for MXFP4
    experts (UE8M0 scales per 32). Returns out [T, H] in out_dtype (default: hidden's dtype).
    """
    if _ops._compiling():
        result = _ops._torch_ops.moe_forward(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2,
                                             w2_scales, w2_multipliers, act_scales, mode, use_nvfp4, scale_layout,
                                             out_dtype if out is None else out.dtype, backend, enable_pdl)
        if out is None:
            return result
        out.copy_(result)
        return out
    key = ("moe", P.first_key(hidden), P.key(topk_ids), P.key(topk_weights), P.key(w13), P.key(w13_scales),
           None if w13_multipliers is None else P.key(w13_multipliers), P.key(w2), P.key(w2_scales),
           None if w2_multipliers is None else P.key(w2_multipliers),
           act_scales_key(act_scales),
           mode, use_nvfp4, scale_layout, out_dtype, P.out_key(out), backend, enable_pdl)
    try:
        plan = P.tls.plans[key]
    except (AttributeError, KeyError):
        plan = P.remember(key, _moe_plan(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2,
                                         w2_scales, w2_multipliers, act_scales, mode, use_nvfp4, scale_layout, out_dtype,
                                         out, backend, enable_pdl))
    return plan.run(hidden, topk_ids, topk_weights, w13, w13_scales, w13_multipliers, w2, w2_scales, w2_multipliers,
                    act_scales, out)


# ---- FlashInfer's cutlass_fused_moe ---------------------------------------------------------------------------

_w31_perm = {}


def _w31_scale_perm(two_i, hdim, device):
    """Byte permutation turning one expert's 128x4 scales of [w3; w1] rows into [w1; w3] rows (padding
    bytes stay in place), as a tensor on `device`."""
    key = (two_i, hdim, str(device))
    perm = _w31_perm.get(key)
    if perm is None:
        torch = T._torch()
        c = hdim // 16
        r = np.arange(two_i)[:, None]
        cc = np.arange(c)[None, :]
        cp = (c + 3) // 4 * 4

        def off(rr):
            return (rr // 128) * (cp // 4) * 512 + (cc // 4) * 512 + (rr % 32) * 16 + ((rr % 128) // 32) * 4 + (cc % 4)

        half = two_i // 2
        size = (two_i + 127) // 128 * 128 * cp
        p = np.arange(size, dtype=np.int64)
        p[off(r).reshape(-1)] = off((r + half) % two_i).reshape(-1)
        perm = _w31_perm[key] = torch.from_numpy(p).to(device)
    return perm


def w31_to_w13(fc1_weights, fc1_scales):
    """FlashInfer's fused-MoE fc1 order [w3 (up); w1 (gate)] to fp4kit's [w1; w3]: weights
    [E, 2I, H/2] (any byte-sized view) and their 128x4 block scales [E, ...]. Returns new tensors
    (run it once at load time, or let cutlass_fused_moe do it per call)."""
    torch = T._torch()
    w = fc1_weights.view(torch.uint8)
    experts, two_i = w.shape[0], w.shape[1]
    half = two_i // 2
    w13 = torch.cat((w[:, half:], w[:, :half]), dim=1)
    s = fc1_scales.view(torch.uint8).reshape(experts, -1)
    perm = _w31_scale_perm(two_i, 2 * w.shape[2], s.device)
    return w13, s.index_select(1, perm)


_UNSUPPORTED_FALSE = ("enable_alltoall", "use_deepseek_fp8_block_scale", "use_w4_group_scaling", "use_mxfp8_act_scaling",
                      "min_latency_mode", "use_packed_weights", "use_wfp4afp8_humming")
_UNSUPPORTED_NONE = ("fc1_expert_biases", "fc2_expert_biases", "input_sf", "swiglu_alpha", "swiglu_beta",
                     "swiglu_limit", "profile_ids", "situ_beta", "situ_linear_beta")


def cutlass_fused_moe(input, token_selected_experts, token_final_scales, fc1_expert_weights, fc2_expert_weights,
                      output_dtype, quant_scales, fc1_expert_biases=None, fc2_expert_biases=None, input_sf=None,
                      swiglu_alpha=None, swiglu_beta=None, swiglu_limit=None, tp_size=1, tp_rank=0, ep_size=1, ep_rank=0,
                      cluster_size=1, cluster_rank=0, output=None, enable_alltoall=False,
                      use_deepseek_fp8_block_scale=False, use_w4_group_scaling=False, use_mxfp8_act_scaling=False,
                      min_latency_mode=False, use_packed_weights=False, use_wfp4afp8_humming=False,
                      tune_max_num_tokens=8192, enable_pdl=None, activation_type=ActivationType.Swiglu,
                      swizzled_input_sf=True, use_fused_finalize=True, profile_ids=None, workspace_buffer=None, *,
                      situ_beta=None, situ_linear_beta=None, fc1_order="w31", w4a16=False, backend="auto"):
    """FlashInfer's fused MoE (flashinfer.fused_moe.cutlass_fused_moe) for NVFP4 experts, same
    parameters in the same order, backed by fp4_moe_forward. Returns [output] as FlashInfer does.

    input [T, H] bf16/fp16 (not pre-quantized: input_sf is not supported); token_selected_experts
    [T, k] int32; token_final_scales [T, k] float32; fc1_expert_weights [E, 2I, H/2] in FlashInfer's
    w31 order (up rows, then gate rows; any byte-sized view such as SGLang's .view(torch.long));
    fc2_expert_weights [E, H, I/2]. quant_scales (NVFP4):
      [0] fc1 activation global scale (1/input_scale, one element),
      [1] fc1 block scales, 128x4 per expert (any view, e.g. .view(torch.int32)),
      [2] fc1 dequant scale per expert [E] (input_scale * weight_scale_2),
      [3] fc2 activation global scale, [4] fc2 block scales, [5] fc2 dequant scale [E].
    fp4kit's own keywords after FlashInfer's: fc1_order='w13' takes fc1 weights and scales already
    in fp4kit's order (gate first), skipping the per-call reordering copy that the default 'w31'
    makes; w4a16=True runs the experts on bf16 activations, with quant_scales [0] and [3] None and
    [2] / [5] the weights' decode multipliers (weight_scale_2); backend: an fp4kit backend or 'auto'.
    Arguments fp4kit does not support raise NotImplementedError naming them. tune_max_num_tokens is
    a tuning hint and use_fused_finalize chooses FlashInfer's reduction order: fp4kit's combine is
    deterministic either way.
    """
    fn = "cutlass_fused_moe"
    nones = (fc1_expert_biases, fc2_expert_biases, input_sf, swiglu_alpha, swiglu_beta, swiglu_limit, profile_ids,
             situ_beta, situ_linear_beta)
    for name, value in zip(_UNSUPPORTED_NONE, nones):
        if value is not None:
            raise UnsupportedError("%s: %s is not supported by fp4kit" % (fn, name))
    flags = (enable_alltoall, use_deepseek_fp8_block_scale, use_w4_group_scaling, use_mxfp8_act_scaling,
             min_latency_mode, use_packed_weights, use_wfp4afp8_humming)
    for name, value in zip(_UNSUPPORTED_FALSE, flags):
        if value:
            raise UnsupportedError("%s: %s=True is not supported by fp4kit" % (fn, name))
    for name, value, one in (("tp_size", tp_size, 1), ("tp_rank", tp_rank, 0), ("ep_size", ep_size, 1),
                             ("ep_rank", ep_rank, 0), ("cluster_size", cluster_size, 1),
                             ("cluster_rank", cluster_rank, 0)):
        if value != one:
            raise UnsupportedError("%s: %s=%r is not supported by fp4kit (only %r: the experts passed are all the "
                                   "layer's)" % (fn, name, value, one))
    if int(activation_type) != ActivationType.Swiglu:
        raise UnsupportedError("%s: activation_type=%r is not supported by fp4kit (only Swiglu)"
                               % (fn, activation_type))
    if fc1_order not in ("w31", "w13"):
        raise InvalidArgumentError("%s: fc1_order must be 'w31' (FlashInfer's) or 'w13', not %r" % (fn, fc1_order))
    torch = T._torch()
    if torch is None or not isinstance(input, torch.Tensor):
        raise InvalidArgumentError("%s: input must be a PyTorch tensor (FlashInfer's contract)" % fn)
    if quant_scales is None or len(quant_scales) != 6:
        raise UnsupportedError("%s: quant_scales must be the 6 NVFP4 entries (fc1 act scale, fc1 block scales, fc1 "
                               "dequant scales, fc2 ...); other quantizations (FP8, W4A8, MXFP4) are not supported "
                               "by fp4kit" % fn)
    a1, s1, g1, a2, s2, g2 = quant_scales
    u8 = torch.uint8
    w1 = fc1_expert_weights.view(u8)
    w2 = fc2_expert_weights.view(u8)
    experts = w1.shape[0]
    if fc1_order == "w31":
        w1, s1 = w31_to_w13(w1, s1)
    s1 = s1.view(u8).reshape(experts, -1)
    s2 = s2.view(u8).reshape(experts, -1)
    g1 = g1.reshape(-1).float()
    g2 = g2.reshape(-1).float()
    if w4a16:
        if a1 is not None or a2 is not None:
            raise InvalidArgumentError("%s: w4a16=True takes quant_scales [0] and [3] (activation scales) as None" % fn)
        m1, m2, act = g1, g2, None
        mode = "w4a16"
    else:
        if a1 is None or a2 is None:
            raise InvalidArgumentError("%s: W4A4 needs quant_scales [0] and [3], the activation global scales "
                                       "(pass w4a16=True to run on bf16 activations)" % fn)
        a1 = a1.reshape(()).float() if isinstance(a1, torch.Tensor) else torch.tensor(float(a1), device=input.device)
        a2 = a2.reshape(()).float() if isinstance(a2, torch.Tensor) else torch.tensor(float(a2), device=input.device)
        # FlashInfer's per-expert alpha is 1/(act_scale * weight_global_scale); fp4kit keeps the
        # activations' 1/act_scale apart and takes the weights' decode multiplier alpha * act_scale.
        m1, m2 = g1 * a1, g2 * a2
        act = torch.stack((a1, a2))
        mode = "w4a4"
    if output is not None and output.dtype != output_dtype:
        raise InvalidArgumentError("%s: output is %s but output_dtype is %s" % (fn, output.dtype, output_dtype))
    out = moe_forward(input, token_selected_experts, token_final_scales, w1, s1, m1, w2, s2, m2, act, mode, True,
                      "128x4", output_dtype, output, backend, enable_pdl)
    return [out]
