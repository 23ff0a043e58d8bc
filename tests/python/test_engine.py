"""An engine-style decode step: several layers, each a dense NVFP4 linear (runtime activation
quantization + W4A4 GEMM) and an NVFP4 MoE layer (router, top-k, fp4kit's MoE), built from
torch.nn.Modules that keep every scale as a CUDA tensor, the way SGLang and vLLM hold them.

On a GPU: the step captured once in a CUDA graph and replayed 100 times is bit-identical to eager,
and the same module under torch.compile(fullgraph=True) equals eager. Without a GPU those tests are
skipped (visibly); the host test still checks that torch.compile(fullgraph=True) traces the module.

  pytest -v tests/python/test_engine.py
"""

import pytest

torch = pytest.importorskip("torch")

import test_package as base  # noqa: E402  (locates and loads fp4kit)

fp4kit = base.fp4kit

HIDDEN, INTER, EXPERTS, TOP_K, LAYERS = 512, 256, 8, 2, 3


def _nvfp4(w):
    """Quantizes a weight once at load time: codes, 128x4 scales and its decode multiplier."""
    gs = (448 * 6) / w.float().abs().max().reshape(1)
    q, s = fp4kit.nvfp4_quantize(w, gs)
    return q, s, (1.0 / gs).float()


class DenseFP4(torch.nn.Module):
    """A Model Optimizer style NVFP4 linear: static activation scale, W4A4 GEMM, alpha as a tensor."""

    def __init__(self, n, k, gen, device):
        super().__init__()
        w = torch.randn(n, k, generator=gen, device=device).to(torch.bfloat16) * 0.05
        q, s, w_mult = _nvfp4(w)
        self.register_buffer("wq", q)
        self.register_buffer("ws", s)
        self.register_buffer("x_gs", torch.tensor([448 * 6 / 8.0], device=device))  # 1/input_scale
        self.register_buffer("alpha", (w_mult / self.x_gs).float())

    def forward(self, x):
        xq, xs = fp4kit.fp4_quantize(x, self.x_gs)
        return fp4kit.mm_fp4(xq, self.wq.T, xs, self.ws.T, self.alpha, torch.bfloat16)


class MoeFP4(torch.nn.Module):
    """Router (bf16), top-k, and the NVFP4 experts through fp4kit.moe_forward with tensor scales."""

    def __init__(self, gen, device):
        super().__init__()
        self.register_buffer("router", torch.randn(EXPERTS, HIDDEN, generator=gen, device=device).to(torch.bfloat16) * 0.05)
        q13, s13, m13, q2, s2, m2 = [], [], [], [], [], []
        for _ in range(EXPERTS):
            a = _nvfp4(torch.randn(2 * INTER, HIDDEN, generator=gen, device=device).to(torch.bfloat16) * 0.05)
            b = _nvfp4(torch.randn(HIDDEN, INTER, generator=gen, device=device).to(torch.bfloat16) * 0.05)
            for lst, v in zip((q13, s13, m13, q2, s2, m2), a + b):
                lst.append(v.reshape(v.shape) if v.dim() == 2 else v.reshape(-1))
        self.register_buffer("w13", torch.stack(q13))
        self.register_buffer("s13", torch.stack([s.reshape(-1) for s in s13]))
        self.register_buffer("m13", torch.cat(m13))
        self.register_buffer("w2", torch.stack(q2))
        self.register_buffer("s2", torch.stack([s.reshape(-1) for s in s2]))
        self.register_buffer("m2", torch.cat(m2))
        self.register_buffer("act_scales", torch.tensor([448 * 6 / 8.0, 448 * 6 / 2.0], device=device))

    def forward(self, x):
        logits = (x @ self.router.T).float()
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), TOP_K, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return fp4kit.moe_forward(x, ids.to(torch.int32), weights, self.w13, self.s13, self.m13, self.w2, self.s2,
                                  self.m2, self.act_scales, "w4a4")


def capture(model, x, warmups=2):
    """model(x) captured once in a CUDA graph, after warm-up calls on a side stream (plans built,
    workspace reserved, as an engine warms up before capturing): (graph, its output tensor)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmups):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = model(x)
    return graph, y


class DecodeStep(torch.nn.Module):
    def __init__(self, device, seed=0):
        super().__init__()
        gen = torch.Generator(device=device).manual_seed(seed)
        self.dense = torch.nn.ModuleList(DenseFP4(HIDDEN, HIDDEN, gen, device) for _ in range(LAYERS))
        self.moe = torch.nn.ModuleList(MoeFP4(gen, device) for _ in range(LAYERS))

    def forward(self, x):
        for dense, moe in zip(self.dense, self.moe):
            x = x + dense(x)
            x = x + moe(x)
        return x


def _gpu_or_skip():
    if not base.CUDA:
        pytest.skip("needs PyTorch with a CUDA device (run on the GPU machine: pytest -v tests/python/test_engine.py)")
    base._gpu_backends_or_skip()


@pytest.mark.parametrize("batch", [1, 8])
def test_decode_step_cuda_graph_replay_is_bit_identical(batch):
    _gpu_or_skip()
    model = DecodeStep("cuda")
    x = torch.randn(batch, HIDDEN, device="cuda").to(torch.bfloat16)
    eager = model(x)
    torch.cuda.synchronize()
    assert not torch.isnan(eager.float()).any()
    static_x = x.clone()
    graph, static_y = capture(model, static_x)
    for i in range(100):
        static_y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_y, eager), "replay %d differs from eager" % i
    # new input copied in place: the replay follows it, as an engine's decode loop does
    x2 = torch.randn(batch, HIDDEN, device="cuda").to(torch.bfloat16)
    static_x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, model(x2))


def test_decode_step_torch_compile_fullgraph_equals_eager():
    _gpu_or_skip()
    model = DecodeStep("cuda", seed=1)
    x = torch.randn(4, HIDDEN, device="cuda").to(torch.bfloat16)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    got = compiled(x)
    torch.cuda.synchronize()
    # fp4kit's calls are opaque ops with the eager bits; the residual adds between them are fused
    # by the compiler, which may round differently from eager bf16 adds
    assert torch.allclose(got.float(), eager.float(), rtol=2 ** -7, atol=1e-3), (got.float() - eager.float()).abs().max()
    got2 = compiled(x)
    assert torch.equal(got2, got)


def test_decode_step_traces_fullgraph_on_the_host():
    """torch.compile(fullgraph=True) traces the decode step on CPU tensors (the host backends), with
    the fake implementations of the custom ops, and reproduces eager's bits (aot_eager backend)."""
    model = DecodeStep("cpu", seed=2)
    x = torch.randn(2, HIDDEN).to(torch.bfloat16)
    eager = model(x)
    got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert torch.equal(got, eager)
