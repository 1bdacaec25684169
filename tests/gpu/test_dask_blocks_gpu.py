"""What one pybridge.dask task does with device blocks, without a cluster: a Futhark result comes
back as a CuPy view of Futhark's memory (no copy) on the worker's device, ordered after the call on
the task's own stream whether or not the task synchronised, freed when the view dies (at once, or by
the next call when the view dies while another thread holds the context); an empty result is an
empty CuPy array; a result that is its argument keeps that block alive; a consumed parameter gets a
copy, the block left as it was. Needs CuPy and `make futhark FUTHARK_BACKEND=cuda`
(build/futhark/cuda/libsaxpy.so); two GPUs for the pin="index" case, the Futhark compiler for
tests/programs/aliasing.fut.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from conftest import GPU_OK  # noqa: E402

if GPU_OK:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    pytest.importorskip("dask.array", reason="dask is not installed: pip install 'dask[array]' distributed")

import pybridge.dask as pbd  # noqa: E402
from pybridge.dask.blocks import call_entry  # noqa: E402
from pybridge.dask.workers import worker_slot  # noqa: E402
from pybridge.paths import find_build_file  # noqa: E402


def saxpy_entry(name: str):
    so = find_build_file("futhark/cuda/libsaxpy.so")
    if so is None:
        pytest.skip("build/futhark/cuda/libsaxpy.so not built: make futhark FUTHARK_BACKEND=cuda")
    return pbd.entry(str(so), name, backend="cuda", unified_memory=0)


@pytest.mark.parametrize("sync", [True, False])
def test_a_result_is_a_view_of_futharks_memory_ordered_after_the_call(sync):
    entry = saxpy_entry("saxpy_iter")
    lib = worker_slot(entry.library).library
    n = 1 << 24
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    X, Y = cupy.asarray(x), cupy.asarray(y)
    before = lib.live_values()
    # 200 rounds over 64 MiB: long enough that a view read before the call ends would see old data
    out = call_entry(entry, (np.int32(200), np.float32(0.5), X, Y), sync=sync)
    total = float(out.sum())  # read at once, on CuPy's stream
    want = y.copy()
    for _ in range(200):
        want = np.float32(0.5) * x + want
    assert isinstance(out, cupy.ndarray) and out.shape == (n,) and out.dtype == np.float32
    assert out.data.device_id == 0
    np.testing.assert_allclose(cupy.asnumpy(out), want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(total, want.sum(dtype=np.float64), rtol=1e-3)
    assert lib.live_values() == before + 1  # the result, held by the view
    ptr = out.data.ptr
    view = out[1:]  # a view of the view keeps Futhark's memory alive too
    del out
    gc.collect()
    assert lib.live_values() == before + 1 and view.data.ptr == ptr + 4
    del view
    gc.collect()
    assert lib.live_values() == before  # the last view gone: the Futhark value is freed


def test_a_view_that_dies_while_another_thread_calls_is_freed_by_the_next_call():
    entry = saxpy_entry("saxpy")
    slot = worker_slot(entry.library)
    lib = slot.library
    x = cupy.arange(1024, dtype=cupy.float32)
    before = lib.live_values()
    out = call_entry(entry, (np.float32(2), x, x), sync=True)
    assert lib.live_values() == before + 1
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with slot.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(30)
        del out
        gc.collect()
        assert len(slot.pending_frees) == 1 and lib.live_values() == before + 1  # not freed under another's lock
    finally:
        release.set()
        t.join(30)
    again = call_entry(entry, (np.float32(2), x, x), sync=True)  # frees what was left first
    assert slot.pending_frees == [] and lib.live_values() == before + 1
    np.testing.assert_array_equal(cupy.asnumpy(again), 3 * np.arange(1024, dtype=np.float32))


def test_an_empty_result_is_an_empty_cupy_array():
    entry = saxpy_entry("saxpy")
    lib = worker_slot(entry.library).library
    e = cupy.empty(0, dtype=cupy.float32)
    before = lib.live_values()
    for sync in (True, False):
        out = call_entry(entry, (np.float32(2), e, e), sync=sync)
        assert isinstance(out, cupy.ndarray) and out.shape == (0,) and out.dtype == np.float32
    assert lib.live_values() == before  # nothing kept for it


def test_results_are_ordered_on_the_tasks_own_stream():
    entry = saxpy_entry("saxpy_iter")
    n = 1 << 24
    x = cupy.ones(n, dtype=cupy.float32)
    with cupy.cuda.Stream(non_blocking=True) as s:  # not the legacy stream: the wait must be on this one
        out = call_entry(entry, (np.int32(300), np.float32(1), x, x), sync=False)
        total = float(out.sum())
    assert s.ptr != 0
    assert total == pytest.approx(301.0 * n)


@pytest.mark.parametrize("n", [1024, 0])
@pytest.mark.parametrize("sync", [True, False])
def test_results_live_on_the_workers_device_under_pin_index(monkeypatch, n, sync):
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs: the worker's device must differ from the thread's current one")
    k = cupy.cuda.runtime.getDeviceCount() - 1
    monkeypatch.setenv("PYBRIDGE_DASK_DEVICE", f"#{k}")  # what local_cluster(pin="index") gives worker k
    entry = saxpy_entry("saxpy")
    with cupy.cuda.Device(k):
        x = cupy.arange(n, dtype=cupy.float32)
    assert cupy.cuda.runtime.getDevice() == 0
    out = call_entry(entry, (np.float32(2), x, x), sync=sync)
    assert out.shape == (n,) and out.data.device_id == k
    with cupy.cuda.Device(k):
        np.testing.assert_array_equal(cupy.asnumpy(out), 3 * np.arange(n, dtype=np.float32))


def aliasing_entry(name: str):
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("tests/programs/aliasing.fut needs the Futhark compiler here (carry .carry-futhark)")
    from pathlib import Path

    return pbd.entry(str(Path(__file__).resolve().parents[1] / "programs" / "aliasing.fut"), name,
                     backend="cuda", unified_memory=0)


def test_a_result_that_is_its_argument_keeps_the_block_alive():
    ident = aliasing_entry("ident")
    n = 1 << 20
    block = cupy.arange(n, dtype=cupy.int32)
    ptr = block.data.ptr
    out = call_entry(ident, (block,), sync=True)
    if out.data.ptr != ptr:
        pytest.skip("Futhark's cuda backend copied the argument here: no block memory to keep alive")
    del block  # Dask releases the input block; the result still views its memory
    gc.collect()
    fill = [cupy.full(n, -1, dtype=cupy.int32) for _ in range(4)]  # CuPy's pool would hand its memory out again
    cupy.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), np.arange(n, dtype=np.int32))
    del fill


def test_a_consumed_parameter_gets_a_copy_and_the_block_is_unchanged():
    set0 = aliasing_entry("set0")
    block = cupy.arange(10, dtype=cupy.int32)
    for sync in (True, False):
        out = call_entry(set0, (block, np.int32(7)), sync=sync)
        np.testing.assert_array_equal(cupy.asnumpy(out), [7, 1, 2, 3, 4, 5, 6, 7, 8, 9])
        np.testing.assert_array_equal(cupy.asnumpy(block), np.arange(10, dtype=np.int32))  # Dask's block as it was
