"""fp4kit._native, the compiled hot path, driven without PyTorch: a stand-in tensor type over NumPy
arrays takes torch.Tensor's place in its setup, so the C dispatch (the key, the per-thread plans, a
miss handed to the registered function with its key, a hit run from the plan's structs, the output
from the template, errors, references) runs on every machine that builds the module, CI included.
The package's own use of it with PyTorch is tested in test_engine_api.py.

The plans here are built by the test from ctypes structs of its own, as the package builds them,
and every result is compared bit for bit with the library called directly through ctypes.
"""

import ctypes
import sys
import threading

import numpy as np
import pytest

import test_package as base  # noqa: E402  (locates and loads fp4kit)

fp4kit = base.fp4kit
from fp4kit import _lib, _ops  # noqa: E402

native = _lib.NATIVE
pytestmark = pytest.mark.skipif(native is None, reason="fp4kit._native did not load: %s" % _lib.NATIVE_WHY)

W4A16 = 1  # _native.c's KIND_W4A16
SCALAR_NUMBER, SCALAR_HOST = 0, 1


class Fake:
    """What the compiled path reads of a tensor (shape, stride(), dtype, device, get_device(),
    data_ptr(), item()), over a NumPy array on the host."""

    def __init__(self, arr):
        self.arr = arr

    @property
    def shape(self):
        return self.arr.shape

    def stride(self):
        return tuple(s // self.arr.itemsize for s in self.arr.strides)

    @property
    def dtype(self):
        return self.arr.dtype

    @property
    def device(self):
        return "host"

    def get_device(self):
        return -1

    def data_ptr(self):
        return self.arr.ctypes.data

    def item(self):
        return float(self.arr.reshape(-1)[0])


class Template:
    """An output recipe: empty_like(Template) is a NaN-filled Fake of its shape and dtype."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def empty_like(t):
    return Fake(np.full(t.shape, np.nan, t.dtype))


class Harness:
    """A setup of the module with the stand-in type, and the plans a miss builds: W4A16 with f32
    activations and output on the host (the library's own fp4_mm_w4a16), as _ops builds them."""

    def __init__(self):
        self.misses = []  # the key each miss came with (None: an operand the compiled path does not take)
        self.last = threading.local()
        self.fn = ctypes.cast(_lib.LIB.fp4_mm_w4a16, ctypes.c_void_p).value

        # mm_fp4 and fp4_quantize keep the package's own Python paths: with PyTorch the package routes
        # its calls (the operands' quantization here) through the module while this setup holds
        native.setup(Fake, empty_like, lambda: 0, lambda d: 0, self.last, _lib.check, _ops._mm_fp4_python, self.slow,
                     _ops._quantize_python)

    def structs(self, a, wq):
        L = _lib
        m, k = a.shape
        n = wq.shape[0]
        s = {
            "a": L.Matrix(None, m, k, a.stride()[0], L.DTYPE_F32, L.MEMORY_HOST),
            "qb": L.QMatrix(None, None, n, k, L.FORMAT_NVFP4, L.LAYOUT_128X4, 1.0, L.MEMORY_HOST),
            "mo": L.Matrix(None, m, n, n, L.DTYPE_F32, L.MEMORY_HOST),
            "opts": L.Options(),
            "scalar": ctypes.c_float(1.0),
            "info": L.RunInfo(),
        }
        s["opts"].backend = b"cpu"
        s["opts"].info = ctypes.pointer(s["info"])
        return s

    def slow(self, key, a, b, sb, alpha, out_dtype, out, block_size, use_nvfp4, layout, backend, enable_pdl):
        """The registered function of a miss: runs the call through ctypes and, for a key, hands the
        module a plan over structs like those it filled."""
        self.misses.append(key)
        wq, ws = b.arr.T, sb.arr.T  # the weight and its scales come transposed (w.T), as the package passes them
        res = direct(a.arr if isinstance(a, Fake) else a, wq, ws, alpha)
        if key is not None:
            s = self.structs(a, wq)
            a_, qb, mo, opts = s["a"], s["qb"], s["mo"], s["opts"]
            mode = SCALAR_HOST if isinstance(alpha, Fake) else SCALAR_NUMBER
            plan = native.Plan(kind=W4A16, fn=self.fn, ctx=None, first=ctypes.addressof(a_), qmat=ctypes.addressof(qb),
                               out=ctypes.addressof(mo), opts=ctypes.addressof(opts),
                               scalar=ctypes.addressof(s["scalar"]), scalar_mode=mode, device=-1, lock=None,
                               info=s["info"], template=None if out is not None else Template(res.shape, np.float32),
                               sf_template=None, name="fp4_mm_w4a16", owner=s)
            native.remember(key, plan)
        if out is not None:
            out.arr[...] = res
            return out
        return Fake(res)


def direct(x, wq, ws, alpha):
    """fp4_mm_w4a16 through ctypes on the cpu backend: x [M, K] f32, wq [N, K/2], ws 128x4."""
    L = _lib
    m, k = x.shape
    n = wq.shape[0]
    out = np.full((m, n), np.nan, np.float32)
    a = L.Matrix(x.ctypes.data, m, k, x.strides[0] // 4, L.DTYPE_F32, L.MEMORY_HOST)
    ws = np.ascontiguousarray(ws)
    qb = L.QMatrix(wq.ctypes.data, ws.ctypes.data, n, k, L.FORMAT_NVFP4, L.LAYOUT_128X4, 1.0, L.MEMORY_HOST)
    mo = L.Matrix(out.ctypes.data, m, n, n, L.DTYPE_F32, L.MEMORY_HOST)
    opts = L.Options()
    opts.backend = b"cpu"
    value = alpha.item() if isinstance(alpha, Fake) else (1.0 if alpha is None else float(alpha))
    _lib.check(_lib.LIB.fp4_mm_w4a16(None, ctypes.byref(a), ctypes.byref(qb), ctypes.c_float(value),
                                     ctypes.byref(mo), ctypes.byref(opts)), "fp4_mm_w4a16")
    return out


@pytest.fixture
def harness():
    h = Harness()
    native.forget()
    yield h
    native.forget()
    if _ops._torch_ops is not None:  # give the package its own setup back
        _ops._setup_native(_ops._Tensor)


def operands(m, n, k, seed):
    rng = np.random.default_rng(seed)
    x = base.random_input(rng, m, k)
    w = base.random_input(rng, n, k)
    wq, ws = fp4kit.nvfp4_quantize(w, base.gsf_of(w))
    return x, np.ascontiguousarray(wq), np.ascontiguousarray(ws)


def call(x, wq, ws, alpha=0.5, out=None):
    """mm_w4a16's argument order, as the package passes it: the weight and its scales transposed."""
    return native.mm_w4a16(x, wq, ws, alpha, np.float32, out, 16, True, "128x4", "cpu", False)


def fake_t(arr):
    """A Fake of arr.T, as the package receives w.T."""
    return Fake(arr.T)


def test_a_miss_builds_the_plan_and_a_hit_runs_it(harness):
    x, wq, ws = operands(3, 64, 256, seed=1)
    first = call(Fake(x), fake_t(wq), fake_t(ws))
    assert len(harness.misses) == 1 and isinstance(harness.misses[0], tuple)
    assert native.plan_count() == 1
    assert np.array_equal(first.arr, direct(x, wq, ws, 0.5))
    for seed in (2, 3):  # new data, same shapes: the plan runs, the Python side is not called
        x2, wq2, ws2 = operands(3, 64, 256, seed)
        got = call(Fake(x2), fake_t(wq2), fake_t(ws2), alpha=0.25)
        want = direct(x2, wq2, ws2, 0.25)
        assert len(harness.misses) == 1
        assert got.arr.shape == want.shape and not np.isnan(got.arr).any()
        assert np.array_equal(got.arr.view(np.uint32), want.view(np.uint32))
    assert harness.last.info.backend == b"cpu"
    # an int scalar keys like a float; a one-element host tensor is read with item()
    assert np.array_equal(call(Fake(x), fake_t(wq), fake_t(ws), alpha=2).arr, direct(x, wq, ws, 2.0))
    assert len(harness.misses) == 1
    alpha = Fake(np.array([0.125], np.float32))
    call(Fake(x), fake_t(wq), fake_t(ws), alpha=alpha)
    got = call(Fake(x), fake_t(wq), fake_t(ws), alpha=alpha)
    assert len(harness.misses) == 2 and np.array_equal(got.arr, direct(x, wq, ws, 0.125))


def test_keys_follow_shapes_strides_dtypes_and_out(harness):
    x, wq, ws = operands(2, 32, 128, seed=4)
    call(Fake(x), fake_t(wq), fake_t(ws))
    wide = np.zeros((2, 256), np.float32)
    wide[:, :128] = x
    calls = [
        lambda: call(Fake(operands(3, 32, 128, 5)[0]), fake_t(wq), fake_t(ws)),  # another M
        lambda: call(Fake(wide[:, :128]), fake_t(wq), fake_t(ws)),  # another row stride
        lambda: call(Fake(x), fake_t(wq), fake_t(ws), out=Fake(np.full((2, 32), np.nan, np.float32))),  # out given
    ]
    for i, c in enumerate(calls):
        c()
        assert len(harness.misses) == 2 + i, i
        got = c()  # now a hit
        assert len(harness.misses) == 2 + i, i
        assert not np.isnan(got.arr).any()
    out = Fake(np.full((2, 32), np.nan, np.float32))
    assert call(Fake(x), fake_t(wq), fake_t(ws), out=out) is out
    assert np.array_equal(out.arr, direct(x, wq, ws, 0.5))


def test_operands_it_does_not_take_go_to_the_python_side_without_a_key(harness):
    x, wq, ws = operands(2, 32, 128, seed=6)
    call(x, fake_t(wq), fake_t(ws))  # a NumPy array is not the tensor type
    call(Fake(x), fake_t(wq), fake_t(ws), alpha=np.float32(0.5))  # nor a NumPy scalar
    assert harness.misses == [None, None] and native.plan_count() == 0
    # a key given None (the package's answer for a plan the compiled path cannot run) stays on the Python side
    call(Fake(x), fake_t(wq), fake_t(ws))
    key = harness.misses[-1]
    native.remember(key, None)
    call(Fake(x), fake_t(wq), fake_t(ws))
    assert harness.misses[-1] is None
    with pytest.raises(TypeError):
        native.remember(key, object())
    with pytest.raises(TypeError):
        native.mm_w4a16(Fake(x))  # the wrong number of arguments


def test_the_library_error_and_its_message_come_through(harness):
    x, wq, ws = operands(2, 32, 128, seed=7)
    call(Fake(x), fake_t(wq), fake_t(ws))
    with pytest.raises(ValueError, match="alpha"):
        call(Fake(x), fake_t(wq), fake_t(ws), alpha=float("inf"))
    assert len(harness.misses) == 1  # the plan ran and the library refused
    assert np.array_equal(call(Fake(x), fake_t(wq), fake_t(ws)).arr, direct(x, wq, ws, 0.5))


def test_references_are_released(harness):
    x, wq, ws = operands(2, 32, 128, seed=8)
    a, b, sb = Fake(x), fake_t(wq), fake_t(ws)
    alpha = Fake(np.array([0.5], np.float32))
    call(a, b, sb, alpha)
    call(a, b, sb, alpha)
    before = [sys.getrefcount(o) for o in (a, b, sb, alpha)]
    for _ in range(1000):
        call(a, b, sb, alpha)
    for _ in range(100):
        with pytest.raises(ValueError):
            call(a, b, sb, float("nan"))
    assert [sys.getrefcount(o) for o in (a, b, sb, alpha)] == before


def test_plans_are_per_thread(harness):
    x, wq, ws = operands(2, 32, 128, seed=9)
    want = direct(x, wq, ws, 0.5)
    seen, bad = [], []

    def work(i):
        for _ in range(20):
            if not np.array_equal(call(Fake(x), fake_t(wq), fake_t(ws)).arr, want):
                bad.append(i)
        seen.append(native.plan_count())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad and seen == [1] * 4
    assert len(harness.misses) == 4  # one miss a thread: a thread never runs another's plan
