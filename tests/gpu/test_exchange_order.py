"""Exchanges between Futhark's cuda backend and CuPy / PyTorch / numba / pybridge.cuda, raced.

Issue 23: an exchange orders the consumer after the producer on the device (a CUDA event, see
pybridge.ordering and pybridge.futhark.gpustream), not by blocking the host. Each test here makes
the producer slow on purpose (Futhark's ``spin`` entry point, tens of milliseconds of dependent
arithmetic per element; a queue of matmuls on a CuPy or PyTorch stream), hands the result over at
once, and checks

* that pybridge's side returned while the producer was still running (no host sync: the
  producer's stream is still busy when the exchange returns), and
* that what the consumer read is the finished result (the data must be complete when read).

A consumer that did not wait would read the memory before the producer wrote it: the reference is
computed beforehand with another seed kept alive, so stale memory cannot hold the right values.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import pybridge.futhark as pf
from cuda_gpu_support import SLEEP_CYCLES, slow_cupy, spin
from pybridge.futhark.gpustream import futhark_stream

pytestmark = pytest.mark.gpu

K, N = 400_000, 2**22  # spin: dependent steps per element, elements (tens of ms on an H100)
NOT_READY = 600  # CUDA_ERROR_NOT_READY


PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def _cuda_program(name: str) -> pf.Library:
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip(f"no Futhark compiler to build tests/programs/{name}.fut for cuda (set FUTHARK)")
    lib = pf.load(PROGRAMS / f"{name}.fut", backend="cuda")
    if futhark_stream(lib) is None:
        pytest.fail(f"{name}: no pybridge_cuda_stream accessor (csource.py did not run?)")
    return lib


@pytest.fixture(scope="module")
def probe() -> Iterator[pf.Library]:
    """spin (slow on purpose) and saxpy."""
    lib = _cuda_program("spin")
    yield lib
    if not os.environ.get("PYBRIDGE_TEST_NO_CLOSE"):  # diagnosis: leave a broken context to exit
        lib.close()


def _busy(stream: int) -> bool:
    cu = ctypes.CDLL("libcuda.so.1")
    rc = cu.cuStreamQuery(ctypes.c_void_p(stream))
    assert rc in (0, NOT_READY), f"cuStreamQuery: CUDA error {rc}"
    return rc == NOT_READY


class Race:
    """A Futhark result still being computed, and what it will be once done."""

    def __init__(self, lib: pf.Library, seed: float):
        self.reference = lib.spin(K, seed, N)  # kept alive: the racing result cannot reuse its memory
        self.want = self.reference.numpy()
        self.stream = futhark_stream(lib).stream
        self.handle = lib.spin(K, seed, N)
        assert _busy(self.stream), "spin finished before the exchange: raise K"

    def check(self, got: np.ndarray, what: str) -> None:
        got = np.asarray(got).reshape(-1)
        bad = np.flatnonzero(got != self.want)
        assert bad.size == 0, f"{what}: {bad.size} of {got.size} elements differ (first at {bad[0]}: {got[bad[0]]} != {self.want[bad[0]]}): the consumer did not wait"


def _cupy() -> Any:
    return pytest.importorskip("cupy", reason="CuPy is not installed")


def _torch() -> Any:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


# ------------------------------------------------------------------ Futhark -> consumer


def test_cai_names_futharks_stream_and_does_not_block(probe: pf.Library) -> None:
    race = Race(probe, 0.125)
    cai = race.handle.__cuda_array_interface__
    assert cai["stream"] == race.stream and cai["version"] == 3
    assert _busy(race.stream), "the export waited for Futhark's stream"
    probe.sync()
    race.check(race.handle.numpy(), "numpy()")


def test_dlpack_export_orders_on_the_device(probe: pf.Library) -> None:
    cp = _cupy()
    s = cp.cuda.Stream(non_blocking=True)  # before the race: CuPy's first use may initialise the device
    race = Race(probe, 0.25)
    capsule = race.handle.__dlpack__(stream=s.ptr)
    assert _busy(race.stream), "__dlpack__ waited for Futhark's stream on the host"
    del capsule
    assert not s.done, "the consumer's stream does not wait for Futhark's"
    probe.sync()


CONSUMERS = ["cupy cai", "cupy dlpack", "torch cai", "torch dlpack", "torch dlpack default stream", "numba cai",
             "pybridge.cuda"]


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_a_consumer_reads_a_result_still_being_computed(probe: pf.Library, consumer: str) -> None:
    race = Race(probe, 0.5 + CONSUMERS.index(consumer))  # a seed of its own: no earlier test's values
    h = race.handle
    if consumer.startswith("cupy"):
        cp = _cupy()
        with cp.cuda.Stream(non_blocking=True) as s:
            x = cp.asarray(h) if consumer == "cupy cai" else cp.from_dlpack(h)
            got = cp.asnumpy(x * np.float32(1), stream=s)
            s.synchronize()
    elif consumer.startswith("torch"):
        torch = _torch()
        ts = torch.cuda.Stream() if "default" not in consumer else torch.cuda.default_stream()
        with torch.cuda.stream(ts):
            t = torch.as_tensor(h, device="cuda") if consumer == "torch cai" else torch.from_dlpack(h)
            got = (t * 1).cpu().numpy()
    elif consumer == "numba cai":
        nb = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
        got = nb.as_cuda_array(h).copy_to_host()
    else:
        from pybridge import cuda
        from pybridge.demo import catalog

        s = cuda.Stream(non_blocking=True)
        d = cuda.as_device_array(h)
        got = catalog.cuda_saxpy(1.0, d, cuda.zeros(N), stream=s).get()
    race.check(got, consumer)


# ------------------------------------------------------------------ producer -> Futhark


@pytest.mark.parametrize("producer", ["cupy", "torch side stream", "torch default stream", "pybridge.cuda"])
def test_futhark_reads_a_producer_still_computing(probe: pf.Library, producer: str) -> None:
    """The producer's stream is current when from_cuda reads its CAI (CuPy and PyTorch name the
    current stream as the producer's), as in a pipeline that hands each result on at once."""
    rng = np.random.default_rng(len(producer))
    x0 = rng.standard_normal(N, dtype=np.float32)
    want = x0 * np.float32(2.0) + np.float32(1.0)
    zeros = probe.types["[]f32"].new(np.zeros(N, np.float32))
    kind = probe.types["[]f32"]
    if producer == "cupy":
        cp = _cupy()
        s = cp.cuda.Stream(non_blocking=True)
        y = slow_cupy(cp, s, x0)
        with s:
            assert not s.done, "the producer finished before the exchange: make it slower"
            hy = kind.from_cuda(y)
            still = not s.done
    elif producer.startswith("torch"):
        torch = _torch()
        ts = torch.cuda.Stream() if "side" in producer else torch.cuda.default_stream()
        with torch.cuda.stream(ts):
            xg = torch.from_numpy(x0).to("cuda")
            torch.cuda._sleep(1)
            xg * 2.0 + 1.0
            ts.synchronize()  # the copy and the kernels' first use (a lazy module load syncs) first
            torch.cuda._sleep(SLEEP_CYCLES)  # a spinning kernel (what PyTorch's own stream tests use)
            y = xg * 2.0 + 1.0
            assert not ts.query(), "the producer finished before the exchange: make it slower"
            hy = kind.from_cuda(y)
            still = not ts.query()
    else:
        from pybridge import cuda
        from pybridge.demo import catalog

        cp = _cupy()
        s = cuda.Stream(non_blocking=True)
        xd, ones = cuda.to_device(x0), cuda.to_device(np.ones(N, np.float32))
        catalog.cuda_saxpy(2.0, xd, ones, stream=s)  # the kernel's first use (its module load) first
        s.synchronize()
        spin(cp, cp.cuda.ExternalStream(s.handle))  # tens of ms queued on s
        y = catalog.cuda_saxpy(2.0, xd, ones, stream=s)
        assert not s.query(), "the producer finished before the exchange: make it slower"
        hy = kind.from_cuda(y)
        still = not s.query()
    assert still, f"from_cuda waited for the {producer} stream on the host"
    got = probe.saxpy(1.0, hy, zeros).numpy()  # 1 * y + 0 == y exactly
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{producer}: {bad.size} elements differ: Futhark did not wait for the producer"


# ------------------------------------------------------------------ work that may still fail

@pytest.fixture(scope="module")
def parerr() -> Iterator[pf.Library]:
    lib = _cuda_program("parerr")
    yield lib
    lib.close()


@pytest.mark.parametrize("via", ["cai", "dlpack"])
def test_an_export_of_work_that_may_fail_raises_its_error(parerr: pf.Library, via: str) -> None:
    """gather's kernel checks its indices: its failure is known only at the next sync, so the
    export syncs (and raises) instead of handing on the data of a failed computation."""
    xs = parerr.types["[]i64"].new(np.arange(10, dtype=np.int64))
    bad = parerr.gather(xs, np.array([1, 2, 99], np.int64))
    with pytest.raises(pf.ProgramError, match="out of bounds|Index"):
        bad.__cuda_array_interface__ if via == "cai" else bad.__dlpack__(stream=1)
    good = parerr.gather(xs, np.array([3, 1, 4], np.int64))
    cai = good.__cuda_array_interface__
    assert cai["stream"] is None, "work that may fail was handed on unsynced"
    assert good.numpy().tolist() == [3, 1, 4]
    ok = parerr.pmap(parerr.types["[]f64"].new(np.ones(4)))  # no check in the kernel: no sync needed
    assert ok.__cuda_array_interface__["stream"] == futhark_stream(parerr).stream


def test_a_failed_sync_leaves_no_context_current() -> None:
    """futhark_context_sync returned a kernel's failure with its context still pushed on the
    thread; once that context was freed, the next Futhark context's free aborted the process
    (csource.py, "sync-pops-context"). Here: fail, free, then another context works and closes."""
    from pybridge.interop import current_context

    before = current_context()
    lib = _cuda_program("parerr")
    xs = lib.types["[]i64"].new(np.arange(10, dtype=np.int64))
    with pytest.raises(pf.ProgramError):
        lib.gather(xs, np.array([99], np.int64)).numpy()
    assert current_context() == before, "the failed sync left Futhark's context current"
    lib.close()
    other = _cuda_program("spin")
    assert other.saxpy(2.0, np.ones(3, np.float32), np.ones(3, np.float32)).numpy().tolist() == [3.0, 3.0, 3.0]
    other.close()
