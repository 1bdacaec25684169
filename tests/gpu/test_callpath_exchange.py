"""The exchange on the compiled call path, on a real GPU, against the Python code it replaces.

- ``from_cuda`` of CuPy and PyTorch arrays through ``_callpath.RawNew``: the same handle as the
  Python path's (a library loaded inside ``callpath.python_plans()``), the producer kept alive,
  the live-value counts equal;
- a Futhark handle exported again (``ArrayBase.__dlpack__`` in C): what CuPy and PyTorch read is
  the handle's data, also while Futhark is still computing it (the consumer's stream ordered in
  C), and every capsule is released;
- ``cuda.as_device_array`` of a PyTorch tensor read directly (``interop.torch_plain``): the same
  description as through PyTorch's own ``__cuda_array_interface__``, or the same error;
- pybridge.cuda's exchange in C (``_callpath.cuda_import_cai`` / ``cuda_dlpack``) against the
  Python functions on real CuPy, PyTorch and numba arrays: the same DeviceArray, the same data a
  consumer reads, and a CuPy array still being written on its own stream waited for on the device
  (tests/test_call_path_cuda_exchange.py covers the rest with fake producers, without a GPU).

Needs build/reference/cuda/libprobe.so (``make futhark FUTHARK_BACKEND=cuda``; on the GPU machine
from the carried generated C with ``FUTHARK=/bin/true``).
"""

from __future__ import annotations

import numpy as np
import pytest

import pybridge.futhark as pf
from conftest import library_sources
from pybridge import interop
from pybridge.futhark import callpath

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
]


@pytest.fixture(params=[p for p in library_sources("probe", backends=("cuda",))])
def both(request):
    fast = pf.load(request.param)
    with callpath.python_plans():
        slow = pf.load(request.param)
    assert isinstance(fast.types["[]f32"]._compiled_raw_new(), callpath.compiled.RawNew)
    assert slow.types["[]f32"]._compiled_raw_new() is None
    yield fast, slow
    fast.close()
    slow.close()


def _producers():
    out = []
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    for n in (0, 1, 4097, 1 << 20):
        x = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
        out += [(x, cp.asarray(x)), (x, torch.from_numpy(x).cuda())]
    return out


def test_from_cuda_in_c_and_in_python_agree(both) -> None:
    fast, slow = both
    for x, producer in _producers():
        seen = []
        for lib in both:
            h = lib.types["[]f32"].from_cuda(producer)
            assert h._keep is producer  # the producer's memory lives as long as the handle
            np.testing.assert_array_equal(h.numpy(), x)
            seen.append(lib.live_values())
            h.free()
            seen.append(lib.live_values())
        assert seen[:2] == seen[2:], (type(producer).__name__, x.size, seen)
    with pytest.raises(TypeError, match="expected dtype float32"):
        fast.types["[]f32"].from_cuda(pytest.importorskip("cupy").zeros(3, np.float64))
    # the fast library's method put _callpath.FromCuda on its kind; the Python one's kept the method
    assert isinstance(vars(fast.types["[]f32"]).get("from_cuda"), callpath.compiled.FromCuda)
    assert "from_cuda" not in vars(slow.types["[]f32"])


def _odd_producers():
    """Producers off FromCuda's common path (its fallback) and on it (numba), with the outcome each must give."""
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    x = np.arange(12, dtype=np.float32)
    out = [cp.asarray(x)[::2], cp.asarray(x).reshape(3, 4), cp.asarray(x.astype(np.float64)),
           torch.from_numpy(x).cuda().reshape(3, 4).t(), torch.from_numpy(x).cuda().requires_grad_(),
           torch.from_numpy(x.astype(np.float64)).cuda(), torch.nn.Parameter(torch.from_numpy(x).cuda(), requires_grad=False),
           torch.from_numpy(x), np.arange(3, dtype=np.float32)]
    try:
        from numba import cuda as nb

        out.append(nb.to_device(x))
    except Exception:  # noqa: BLE001 - numba-cuda may not work with this NumPy: the others still run
        pass
    return out


def test_from_cuda_off_its_common_path_in_c_and_in_python_agree(both) -> None:
    """Strided, 2-d, wrong-dtype, grad, Parameter, host and NumPy producers: the same handle or the
    same error, word for word, through FromCuda (its fallback) and the Python method."""
    for producer in _odd_producers():
        seen = []
        for lib in both:
            try:
                h = lib.types["[]f32"].from_cuda(producer)
                seen.append(("ok", h.numpy().tolist(), h._keep is producer))
                h.free()
            except Exception as e:  # noqa: BLE001 - compared: type and message
                seen.append((type(e).__name__, str(e)))
            seen.append(lib.live_values())
        assert seen[:2] == seen[2:], (type(producer).__name__, seen)


def test_from_cuda_in_c_waits_for_each_producer_stream_in_turn(both) -> None:
    """Producers on two CuPy streams and on PyTorch's side stream, each still computing when it is
    handed over, in turn: the first order goes through ordering.order, the later ones record and
    wait in C with the event it used (a stream of another context would send them back). Futhark
    must read what each producer wrote."""
    from cuda_gpu_support import SLEEP_CYCLES, slow_cupy

    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    fast, _ = both
    kind = fast.types["[]f32"]
    zeros = kind.new(np.zeros(1 << 20, np.float32))
    streams = [cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)]
    ts = torch.cuda.Stream()
    try:
        for k in range(6):
            x0 = np.random.default_rng(k).standard_normal(1 << 20, dtype=np.float32)
            want = x0 * np.float32(2.0) + np.float32(1.0)
            if k % 3 < 2:
                s = streams[k % 3]
                y = slow_cupy(cp, s, x0)
                with s:
                    h = kind.from_cuda(y)
                    still = not s.done
            else:
                with torch.cuda.stream(ts):
                    xg = torch.from_numpy(x0).to("cuda")
                    torch.cuda._sleep(1)
                    xg * 2.0 + 1.0
                    ts.synchronize()  # the copy and the kernels' first use (a lazy module load syncs) first
                    torch.cuda._sleep(SLEEP_CYCLES)
                    y = xg * 2.0 + 1.0
                    h = kind.from_cuda(y)
                    still = not ts.query()
            assert still, f"round {k}: the producer finished before the exchange: make it slower"
            got = fast.saxpy(1.0, h, zeros).numpy()
            assert np.array_equal(got, want), f"round {k}: Futhark did not wait for the producer"
            h.free()
        assert isinstance(vars(kind).get("from_cuda"), callpath.compiled.FromCuda)
    finally:
        zeros.free()


def test_a_second_export_in_c_is_ordered_and_released(both) -> None:
    """The first export makes interop's entry (with its C form); the later ones run in C."""
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    fast, _ = both
    alive = interop.exports_alive()
    n = 1 << 24
    xs = np.random.default_rng(5).standard_normal(n, dtype=np.float32)
    hx = fast.types["[]f32"].new(xs)
    for round_ in range(3):
        h = fast.saxpy(np.float32(round_ + 1), hx, hx)  # queued on Futhark's stream
        h.__dlpack__(stream=-1)  # the first export: no ordering asked, capsule dropped
        assert interop._futhark_exports[id(h)][2] is not None, "no C form: the C export did not run"
        want = (np.float32(round_ + 1) * xs + xs).astype(np.float32)
        with cp.cuda.Stream(non_blocking=True) as s:
            got = cp.asnumpy(cp.from_dlpack(h) * np.float32(1), stream=s)
            s.synchronize()
        np.testing.assert_array_equal(got, want)
        ts = torch.cuda.Stream()
        with torch.cuda.stream(ts):
            t = torch.from_dlpack(h)
            np.testing.assert_array_equal((t * 1).cpu().numpy(), want)
        del t
        h.free()
    hx.free()
    assert interop.exports_alive() == alive


def test_as_device_array_of_a_torch_tensor_reads_what_its_cai_says() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    from cuda_gpu_support import require_cuda

    require_cuda()
    from pybridge import cuda

    base = torch.arange(24, dtype=torch.float32, device="cuda")
    tensors = [base, base.reshape(4, 6), base.reshape(4, 6).t(), base.reshape(4, 6)[:, :3], base[::2], base[:0],
               base.to(torch.bool), base.to(torch.float16), base.to(torch.int64).reshape(2, 3, 4), base.to(torch.uint8),
               torch.nn.Parameter(base.clone()), base.clone().requires_grad_(True),
               torch.zeros(3, dtype=torch.bfloat16, device="cuda")]
    for t in tensors:
        def via_cai(t=t):
            return cuda.from_cai(t)

        def direct(t=t):
            return cuda.as_device_array(t)

        outcomes = []
        for make in (direct, via_cai):
            try:
                d = make()
                i = d.info
                outcomes.append(("ok", i.ptr, i.shape, i.strides, i.dtype, i.readonly, i.stream, d._owner is t))
            except Exception as e:  # noqa: BLE001 - compared: type and message
                outcomes.append((type(e).__name__, str(e)))
        assert outcomes[0] == outcomes[1], (t.dtype, tuple(t.shape), t.stride(), outcomes)


def _cuda_or_skip():
    from cuda_gpu_support import require_cuda

    require_cuda()
    from pybridge import cuda

    return cuda


def _exchanges():
    from pybridge.cuda import arrays

    arrays._compiled_exchange = None
    compiled = arrays._exchange()
    assert compiled == (callpath.compiled.cuda_import_cai, callpath.compiled.cuda_dlpack)
    return arrays, [("C", compiled), ("Python", (arrays._import_preferring_cai, arrays._dlpack_python))]


def test_the_cuda_exchange_in_c_and_in_python_agree_on_real_arrays() -> None:
    cuda = _cuda_or_skip()
    arrays, exchanges = _exchanges()
    producers = []
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    x = np.arange(4097, dtype=np.float32)
    c = cp.asarray(x)
    producers += [c, c.reshape(17, 241), c[::2], c[:0], cp.asarray(x.astype(np.uint8)), c.astype(cp.float16)]
    try:
        import torch

        t = torch.from_numpy(x).cuda()
        producers += [t, t.reshape(17, 241), t.reshape(17, 241).t(), t[:0], t.to(torch.bool)]
    except ImportError:
        pass
    try:
        from numba import cuda as nb

        producers += [nb.to_device(x), nb.to_device(x.reshape(17, 241))]
    except Exception:  # noqa: BLE001 - numba-cuda may not work with this NumPy: the others still run
        pass
    try:
        for p in producers:
            seen = []
            for name, exchange in exchanges:
                arrays._compiled_exchange = exchange
                try:
                    d = cuda.as_device_array(p)
                    i = d.info
                    back = cp.from_dlpack(d)  # DeviceArray.__dlpack__ (twice: the second in C)
                    back = cp.from_dlpack(d)
                    seen.append(("ok", i, d.owner is p, d.stream, back.data.ptr == i.ptr,
                                 cp.asnumpy(back).tobytes() if i.size else b""))
                except Exception as e:  # noqa: BLE001 - compared: type and message
                    seen.append((type(e).__name__, str(e)))
            assert seen[0] == seen[1], (type(p), seen)
    finally:
        arrays._compiled_exchange = None


@pytest.mark.parametrize("path", ["C", "Python"])
def test_a_cupy_array_still_being_written_is_waited_for(path: str) -> None:
    """CuPy writes y on a non-blocking stream behind a spinning kernel; as_device_array(y)
    (no stream given: the legacy default stream, which does not wait for a non-blocking stream by
    itself) must order it after y on the device; our kernel then reads the final y."""
    cuda = _cuda_or_skip()
    from cuda_gpu_support import Big, first_mismatch, slow_cupy

    from pybridge.demo import catalog

    arrays, exchanges = _exchanges()
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    n = 2**20
    x0 = Big(n, 5).floats()
    cs = cp.cuda.Stream(non_blocking=True)
    try:
        arrays._compiled_exchange = dict(exchanges)[path]
        # pybridge's context and saxpy's module made before the race (a module load can
        # synchronise the device, which would order y by itself)
        catalog.cuda_saxpy(1.0, cuda.zeros(n), cuda.zeros(n)).get()
        # y behind a kernel spinning tens of milliseconds, its modules loaded first (a queue of
        # matmuls finished before the exchange on the H100: nothing was raced)
        y = slow_cupy(cp, cs, x0)
        with cs:
            assert y.__cuda_array_interface__["stream"] == cs.ptr
            yd = cuda.as_device_array(y)
            assert cs.done is False, "the queue was done before the exchange: nothing was raced"
        assert yd.stream is not None and yd.stream.cai_stream == 1
        out = catalog.cuda_saxpy(1.0, yd, cuda.zeros(n))  # on the legacy default stream
        got = out.get()
    finally:
        arrays._compiled_exchange = None
    want = x0 * np.float32(2.0) + np.float32(1.0)
    assert np.array_equal(got, want), f"{path}: the default stream did not wait for CuPy's: " + first_mismatch(got, want)
