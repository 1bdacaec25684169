"""pybridge.dask on real Futhark programs (c and multicore backends): blocks, tied sizes, tree
reductions, one context per worker, threads, program errors naming their chunk, and a worker killed
mid-computation. Needs dask + distributed (``pip install 'dask[array]' distributed``) and the Futhark compiler
(the libraries are compiled from futhark/*.fut and tests/programs/*.fut on first use, cached).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import dask_and_futhark_or_skip, library_or_source  # noqa: E402

pytestmark = [pytest.mark.futhark, pytest.mark.slow]  # slow: left out of the quick subset (-m 'not slow')
da, distributed = dask_and_futhark_or_skip()

import dask  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import pybridge.futhark as pf  # noqa: E402
from pybridge.dask import blocks, workers  # noqa: E402

import pybridge.dask as pbd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHUNKY = ROOT / "tests" / "programs" / "chunky.fut"
BACKENDS = ["c", "multicore"]


def ref(prog: str, name: str, backend: str = "c", **config):
    path = str(CHUNKY) if prog == "chunky" else library_or_source(prog, backend)
    return pbd.entry(path, name, backend=backend, **config)


def chunked(a: np.ndarray, chunks) -> "da.Array":
    return da.from_array(a, chunks=chunks)


def run_threads(fn, n: int) -> None:
    """fn(0) ... fn(n-1), each on its own thread, all joined."""
    ts = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def getenv(name: str) -> str | None:
    return os.environ.get(name)  # run on a worker: its environment (os.environ.get would carry ours)


def unsetenv(name: str) -> None:
    os.environ.pop(name, None)


@pytest.fixture(scope="module")
def client():
    # A Client given a cluster does not close it: close both, or the worker processes outlive the module.
    with pbd.local_cluster(n_workers=2, threads_per_worker=2, processes=True) as cluster, distributed.Client(cluster) as c:
        yield c


# ---------------------------------------------------------------- on a process cluster


@pytest.mark.parametrize("backend", BACKENDS)
def test_saxpy_blocks_match_numpy_on_a_cluster(client, backend):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(10_001).astype(np.float32), rng.standard_normal(10_001).astype(np.float32)
    out = pbd.map_blocks(ref("saxpy", "saxpy", backend), np.float32(3.0), chunked(x, 1000), chunked(y, 1000))
    assert out.chunks == ((1000,) * 10 + (1,),) and out.dtype == np.float32
    again = pbd.map_blocks(ref("saxpy", "saxpy", backend), np.float32(-1.0), out, chunked(y, 1000))  # chained
    got, got2 = client.compute([out, again], sync=True)
    np.testing.assert_array_equal(got, np.float32(3.0) * x + y)
    np.testing.assert_array_equal(got2, np.float32(-1.0) * got + y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dot_tree_reduction_with_another_entry_as_combine(client, backend):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(50_000).astype(np.float32), rng.standard_normal(50_000).astype(np.float32)
    total = pbd.reduction(ref("dot", "dot", backend), chunked(x, 1000), chunked(y, 1000),
                          combine=ref("dot", "sum", backend), split_every=4)
    assert total.shape == () and total.dtype == np.float32
    got = client.compute(total, sync=True)
    exact = np.dot(x.astype(np.float64), y.astype(np.float64))
    bound = 50_000 * np.finfo(np.float32).eps * np.sum(np.abs(x.astype(np.float64) * y))
    assert abs(float(got) - exact) <= bound


def test_sum_combines_with_itself_by_default(client):
    x = np.arange(1, 1001, dtype=np.float32)
    total = pbd.reduction(ref("dot", "sum"), chunked(x, 70))  # 15 blocks: two tree levels at 8
    assert float(client.compute(total, sync=True)) == 500500.0


def test_histogram_partials_combined_by_an_entry_of_another_library(client):
    rng = np.random.default_rng(3)
    xs = rng.integers(-3, 40, 20_000, dtype=np.int32)  # out-of-range values are ignored by the entry
    hist = pbd.reduction(ref("histogram", "histogram"), 32, chunked(xs, 3000), combine=ref("chunky", "add_rows"))
    assert hist.shape == (32,)  # from the result type [nbins]i32 and nbins = 32
    expected = np.bincount(xs[(xs >= 0) & (xs < 32)], minlength=32).astype(np.int32)
    np.testing.assert_array_equal(client.compute(hist, sync=True), expected)


def test_matmul_row_blocks_against_a_whole_matrix(client):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((300, 40)).astype(np.float32), rng.standard_normal((40, 25)).astype(np.float32)
    c = pbd.map_blocks(ref("matmul", "matmul"), chunked(a, (64, 40)), b)
    assert c.chunks == ((64, 64, 64, 64, 44), (25,))  # rows from a, columns from b's p
    np.testing.assert_allclose(client.compute(c, sync=True), a @ b, rtol=1e-4, atol=1e-4)


def test_one_context_per_library_per_worker(client):
    client.run(workers.close_all)  # a clean count (the module's earlier tests used these workers)
    before = client.run(lambda: workers.stats()["contexts_created"])
    x = np.ones(4000, np.float32)
    out = pbd.map_blocks(ref("saxpy", "saxpy"), np.float32(2.0), chunked(x, 100), chunked(x, 100))  # 40 tasks
    np.testing.assert_array_equal(client.compute(out, sync=True), np.full(4000, 3, np.float32))
    after = client.run(workers.stats)
    made = {w: s["contexts_created"] - before[w] for w, s in after.items()}
    calls = sum(n for s in after.values() for k, n in s["libraries"].items() if k.startswith("libsaxpy"))
    assert calls == 40  # every block ran exactly once ...
    assert all(m <= 1 for m in made.values()) and sum(made.values()) >= 1  # ... on one context per worker


def test_program_error_names_the_chunk(client):
    x = np.arange(400, dtype=np.float64)
    x[250] = -1.0  # in block 2 of 4
    out = pbd.map_blocks(ref("chunky", "checked_sqrt"), chunked(x, 100))
    with pytest.raises(pf.ProgramError) as info:
        client.compute(out, sync=True)
    msg = str(info.value)
    assert "checked_sqrt failed on block (2,) of (4,)" in msg and "elements 200:300" in msg
    assert "Assertion" in msg or "assert" in msg.lower()
    assert info.value.block == (2,) and info.value.entry == "checked_sqrt"
    with pytest.raises(pf.ProgramError, match=r"block \(2,\)"):  # retries re-run it; it fails alike
        client.compute(out, retries=2).result()
    # The failing block left its worker's context usable.
    ok = pbd.map_blocks(ref("chunky", "checked_sqrt"), chunked(np.abs(x), 100))
    np.testing.assert_allclose(client.compute(ok, sync=True), np.sqrt(np.abs(x)))


def test_the_graph_travels_as_its_description_and_culls_to_the_blocks_asked_for(client):
    """map_blocks's layer is written out where it runs (the scheduler), not on the client; asking
    for some blocks culls it to those."""
    from pybridge.dask.graph import BlockCalls

    x = chunked(np.arange(4000, dtype=np.float32), 10)  # 400 blocks
    out = pbd.map_blocks(ref("saxpy", "saxpy"), 2.0, x, x, name="cull-me")
    layer = out.__dask_graph__().layers["cull-me"]
    assert isinstance(layer, BlockCalls) and len(layer) == 400 and len(pickle.dumps(layer)) < 4000
    np.testing.assert_array_equal(client.compute(out[1205:1230], sync=True), 3 * np.arange(1205, 1230, dtype=np.float32))
    np.testing.assert_array_equal(client.compute(out, sync=True), 3 * np.arange(4000, dtype=np.float32))
    assert not layer.is_materialized()  # the client never wrote the 400 tasks out
    culled = out.__dask_graph__().cull({("cull-me", 120), ("cull-me", 122)})
    (kept,) = [v for v in culled.layers.values() if isinstance(v, BlockCalls)]
    assert sorted(kept) == [("cull-me", 120), ("cull-me", 122)]
    assert kept.get_dependencies(("cull-me", 122), set()) == {(x.name, 122)}


def test_killed_worker_is_replaced_and_its_tasks_rerun():
    """A worker killed while it runs a block: the nanny starts a new process, the lost blocks run
    again, the result is right. Robust on a loaded machine: the kill waits (generously) for a
    worker that is busy after a first block finished anywhere, asking only the scheduler; and
    there is work left then by construction (36 blocks of ~0.15 s on 2 workers, the first done
    after one block's time), however slowly the machine runs them."""
    spin = ref("chunky", "spin")
    x = np.linspace(0, 1, 36 * 2000, dtype=np.float32)
    iters = 20_000  # ~0.15 s per block of 2000 on an idle machine
    with pbd.local_cluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, distributed.Client(cluster) as c:
        pids = c.run(os.getpid)
        graph = pbd.map_blocks(spin, np.int32(iters), chunked(x, 2000))
        fut = c.compute(graph, retries=2)
        deadline = time.monotonic() + 300  # a wait, not a timing: it costs nothing when the machine is quick
        victim = None
        while victim is None and time.monotonic() < deadline:
            finished = c.run_on_scheduler(_tasks_in_memory, graph.name)
            busy = [w for w, tasks in c.processing().items() if tasks]
            if finished and busy:
                victim = busy[0]
            else:
                time.sleep(0.02)
        assert victim is not None, "no worker was busy after a first block finished within 300 s"
        left = 36 - c.run_on_scheduler(_tasks_in_memory, graph.name)
        assert left > 0 and not fut.done(), "every block finished before the kill: make the blocks slower"
        os.kill(pids[victim], signal.SIGKILL)
        got = fut.result(timeout=600)
        c.wait_for_workers(2, timeout=300)
        new_pids = set(c.run(os.getpid).values())
    assert pids[victim] not in new_pids and len(new_pids) == 2  # replaced by a fresh process
    lib = pf.load(spin.library.path, backend="c")
    np.testing.assert_array_equal(got, lib.spin(np.int32(iters), x).numpy())


def _tasks_in_memory(name: str, dask_scheduler=None) -> int:
    """Blocks of ``name`` finished so far (asked of the scheduler: no worker round trip)."""
    return sum(1 for k, ts in dask_scheduler.tasks.items() if isinstance(k, tuple) and k[0] == name and ts.state == "memory")


# ---------------------------------------------------------------- threads, in this process


def test_threaded_scheduler_shares_one_context_and_serialises_calls():
    workers.close_all()
    before = workers.stats()["contexts_created"]
    x = np.arange(60_000, dtype=np.float32)
    out = pbd.map_blocks(ref("saxpy", "saxpy", "multicore"), np.float32(0.5), chunked(x, 1000), chunked(x, 1000))
    with dask.config.set(scheduler="threads", num_workers=4):
        got = out.compute()
    np.testing.assert_array_equal(got, np.float32(0.5) * x + x)
    assert workers.stats()["contexts_created"] == before + 1


def test_worker_slot_is_created_once_under_racing_threads():
    workers.close_all()
    r = ref("saxpy", "saxpy").library
    before = workers.stats()["contexts_created"]
    barrier = threading.Barrier(8)
    seen = []

    def grab():
        barrier.wait()
        seen.append(workers.worker_slot(r).library)

    run_threads(lambda _k: grab(), 8)
    assert len({id(lib) for lib in seen}) == 1 and workers.stats()["contexts_created"] == before + 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=7),
    a=st.floats(-4, 4, allow_nan=False, width=32),
)
def test_any_chunking_gives_numpy_saxpy(sizes, a):
    n = sum(sizes)
    x = np.arange(n, dtype=np.float32) / 7
    y = np.cos(np.arange(n, dtype=np.float32))
    chunks = (tuple(sizes),)
    out = pbd.map_blocks(ref("saxpy", "saxpy"), np.float32(a), chunked(x, chunks), chunked(y, chunks))
    with dask.config.set(scheduler="threads"):
        np.testing.assert_array_equal(out.compute(), np.float32(a) * x + y)
    total = pbd.reduction(ref("dot", "sum"), chunked(x, chunks), split_every=3)
    with dask.config.set(scheduler="threads"):
        np.testing.assert_allclose(total.compute(), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------- the tied-size rule and bad input


def test_tied_sizes_must_be_chunked_alike():
    x = np.ones(100, np.float32)
    with pytest.raises(ValueError, match=r"parameters 'xs' \(axis 0\) and 'ys' \(axis 0\) share the size n"):
        pbd.map_blocks(ref("saxpy", "saxpy"), 1.0, chunked(x, 50), chunked(x, (30, 70)))


def test_untied_axes_may_differ_but_block_counts_may_not():
    xs, ys = np.ones((6, 2), np.float32), np.ones((6, 5), np.float32)
    out = pbd.map_blocks(ref("chunky", "add_first"), chunked(xs, (3, 2)), chunked(ys, (3, 5)))
    assert out.chunks == ((3, 3),)  # [n]f32 from 2-d blocks: the one-block trailing axis is dropped
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(out.compute(), np.full(6, 7, np.float32))
    with pytest.raises(ValueError, match=r"'xs' \(axis 0\) and 'ys' \(axis 0\) share the size n"):
        pbd.map_blocks(ref("chunky", "add_first"), chunked(xs, (3, 2)), chunked(ys, (2, 5)))
    with pytest.raises(ValueError, match="same number of blocks"):
        pbd.map_blocks(ref("chunky", "add_first"), chunked(xs, (3, 2)), chunked(ys, (3, 1)))


def test_a_chunked_size_tied_to_a_whole_array_must_be_one_chunk():
    a, b = np.ones((8, 6), np.float32), np.ones((6, 4), np.float32)
    with pytest.raises(ValueError, match=r"'a' \(axis 1\) shares the size m with the whole array 'b'"):
        pbd.map_blocks(ref("matmul", "matmul"), chunked(a, (4, 3)), b)


def test_without_the_source_all_chunks_must_match(tmp_path):
    so = Path(library_or_source("saxpy", "c"))
    if so.suffix == ".fut":
        so = Path(pf.load(str(so), backend="c").path)
    for f in (so, so.with_name("saxpy.json")):
        shutil.copy2(f, tmp_path / f.name)
    bare = pbd.entry(str(tmp_path / so.name), "saxpy", backend="c")
    x = np.ones(100, np.float32)
    with pytest.raises(ValueError, match="source is not available"):
        pbd.map_blocks(bare, 1.0, chunked(x, 50), chunked(x, (30, 70)))
    out = pbd.map_blocks(bare, 1.0, chunked(x, 50), chunked(x, 50))
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(out.compute(), np.full(100, 2, np.float32))


def test_bad_arguments_are_named_on_the_client():
    s = ref("saxpy", "saxpy")
    x = chunked(np.ones(10, np.float32), 5)
    with pytest.raises(TypeError, match=r"parameter 'xs': expected dtype float32 .* got float64"):
        pbd.map_blocks(s, 1.0, x.astype(np.float64), x)
    with pytest.raises(TypeError, match=r"parameter 'a' is a scalar \(f32\)"):
        pbd.map_blocks(s, x, x, x)
    with pytest.raises(TypeError, match=r"takes 3 argument\(s\), got 2"):
        pbd.map_blocks(s, 1.0, x)
    with pytest.raises(TypeError, match="expected a 1-d array"):
        pbd.map_blocks(s, 1.0, chunked(np.ones((2, 5), np.float32), 1), x)
    with pytest.raises(TypeError, match="no argument is a dask array"):
        pbd.map_blocks(s, 1.0, np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(KeyError, match="no entry point 'saxpyy'"):
        pbd.entry(library_or_source("saxpy", "c"), "saxpyy", backend="c")
    with pytest.raises(TypeError, match="unknown Futhark configuration"):
        pbd.entry(library_or_source("saxpy", "c"), "saxpy", backend="c", nthreads=2)


def test_result_kinds_that_do_not_make_blocks_are_refused():
    x = chunked(np.ones(10, np.float32), 5)
    with pytest.raises(TypeError, match="use pybridge.dask.reduction"):
        pbd.map_blocks(ref("dot", "sum"), x)
    with pytest.raises(TypeError, match="opaque type"):
        pbd.map_blocks(ref("stats", "stats"), chunked(np.ones(10), 5))
    with pytest.raises(TypeError, match=r"cannot combine partials.*pass combine="):
        pbd.reduction(ref("dot", "dot"), x, x)  # dot takes two arrays: it cannot combine its partials
    with pytest.raises(ValueError, match="split_every"):
        pbd.reduction(ref("dot", "sum"), x, split_every=1)


def test_entry_from_a_loaded_library_keeps_its_options():
    lib = pf.load(library_or_source("saxpy", "multicore"), backend="multicore", num_threads=2)
    r = pbd.entry(lib.saxpy)
    assert r.library.options == {"num_threads": 2} and r.library.backend == "multicore"
    x = chunked(np.arange(10, dtype=np.float32), 4)
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(pbd.map_blocks(r, 2.0, x, x).compute(), 3 * np.arange(10, dtype=np.float32))
    lib.close()


def test_each_task_carries_its_block_not_the_grid():
    """A task names its block and elements itself (written in when the graph is built), so it is
    the same size in a graph of 4 blocks as in one of 400 (what the scheduler ships per task), and
    an error names the block under the local schedulers too."""
    from distributed.protocol import pickle as dpickle

    r = ref("chunky", "checked_sqrt")
    small = pbd.map_blocks(r, chunked(np.ones(40), 10), name="g-a")
    large = pbd.map_blocks(r, chunked(np.ones(4000), 10), name="g-b")
    sizes = [len(dpickle.dumps(dict(g.__dask_graph__())[(g.name, 2)])) for g in (small, large)]
    assert sizes[1] - sizes[0] < 8, sizes  # the count of blocks is a number; the grid would be 400 more
    x = np.arange(40, dtype=np.float64)
    x[25] = -1.0  # block 2 of 4
    for scheduler in ("sync", "threads"):
        with dask.config.set(scheduler=scheduler), pytest.raises(pf.ProgramError) as info:
            pbd.map_blocks(r, chunked(x, 10)).compute()
        assert "checked_sqrt failed on block (2,) of (4,) (elements 20:30)" in str(info.value) and info.value.block == (2,)


def test_given_chunks_must_give_one_block_per_call():
    x = chunked(np.ones(10, np.float32), 5)
    with pytest.raises(ValueError, match=r"chunks=\(\(10,\),\) gives the result \(1,\) blocks, but the arguments are split \(2,\)"):
        pbd.map_blocks(ref("saxpy", "saxpy"), 1.0, x, x, chunks=((10,),))
    out = pbd.map_blocks(ref("saxpy", "saxpy"), 1.0, x, x, chunks=((5, 5),))
    with dask.config.set(scheduler="sync"):
        np.testing.assert_array_equal(out.compute(), np.full(10, 2, np.float32))


def test_map_blocks_under_dask_array_expressions():
    """With Dask's array expressions switched on (``array.query-planning``, read once at import):
    the same results, and an error still names its block."""
    import subprocess
    import sys

    code = """
import sys
import dask, numpy as np, dask.array as da
import pybridge.dask as pbd
import pybridge.futhark as pf
saxpy, sqrt = pbd.entry(sys.argv[1], "saxpy", backend="c"), pbd.entry(sys.argv[2], "checked_sqrt", backend="c")
assert da._array_expr_enabled()
x = da.arange(10, chunks=3, dtype=np.float32)
with dask.config.set(scheduler="sync"):
    np.testing.assert_array_equal((pbd.map_blocks(saxpy, np.float32(2), x, x) + 1).compute(), 3 * np.arange(10) + 1)
    y = np.arange(40.0); y[25] = -1
    try:
        pbd.map_blocks(sqrt, da.from_array(y, chunks=10)).compute()
    except pf.ProgramError as e:
        assert e.block == (2,) and "elements 20:30" in str(e), str(e)
        print("ok")
"""
    env = {**os.environ, "DASK_ARRAY__QUERY_PLANNING": "True", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, library_or_source("saxpy", "c"), str(CHUNKY)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ---------------------------------------------------------------- the task functions alone


def test_block_error_keeps_its_class_and_survives_pickling():
    r = ref("chunky", "checked_sqrt")
    with pytest.raises(pf.ProgramError) as info:
        blocks.call_entry(r, (np.array([1.0, -1.0]),), block=(3, 1), nblocks=(5, 2))
    e = pickle.loads(pickle.dumps(info.value))  # as distributed sends it to the client
    assert type(e) is pf.ProgramError and e.block == (3, 1) and e.entry == "checked_sqrt"
    assert str(e).startswith("checked_sqrt failed on block (3, 1) of (5, 2): ") and e.code == 2


def test_local_cluster_pins_one_device_per_worker_by_environment():
    """Also: GPU workers have no host memory limit unless given one (their blocks are in device
    memory, which Dask would count against a share of host memory)."""
    for pin, var, want, limit in (("visible", "CUDA_VISIBLE_DEVICES", {"0,1", "1,0"}, None),
                                  ("index", pbd.DEVICE_ENV, {"#0", "#1"}, "3GiB")):
        with pbd.local_cluster(devices=[0, 1], pin=pin, memory_limit=limit) as cluster, distributed.Client(cluster) as c:
            assert set(c.run(getenv, var).values()) == want
            limits = {w["memory_limit"] for w in c.scheduler_info()["workers"].values()}
            assert limits == ({0} if limit is None else {3 * 2**30})
    with pytest.raises(ValueError, match="one worker per device"):
        pbd.local_cluster(3, devices=[0, 1])


def test_worker_devices_plugin_sets_each_workers_device(client):
    client.register_plugin(pbd.WorkerDevices(["#0", "#1"]))
    got = client.run(getenv, pbd.DEVICE_ENV)
    assert sorted(got.values()) == ["#0", "#1"]
    client.run(unsetenv, pbd.DEVICE_ENV)  # CPU backends ignore it; leave the workers clean


def test_worker_device_resolution_order(monkeypatch):
    from pybridge.dask.refs import LibraryRef

    gpu = LibraryRef("/x/libp.so", "cuda")
    monkeypatch.delenv(pbd.DEVICE_ENV, raising=False)
    assert workers.worker_device(gpu) is None  # Futhark's default: the first visible device
    monkeypatch.setenv(pbd.DEVICE_ENV, "#1")
    assert workers.worker_device(gpu) == "#1" and workers.device_ordinal("#1") == 1
    assert workers.worker_device(LibraryRef("/x/libp.so", "cuda", (("device", "#0"),))) == "#0"
    assert workers.worker_device(LibraryRef("/x/libp.so", "c")) is None
    with pytest.raises(ValueError, match="'#k'"):
        workers.device_ordinal("NVIDIA H200")


# ---------------------------------------------------------------- CUDA kernels: the graph (no GPU needed)

SAXPY_CU = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"


def test_kernel_inputs_outputs_and_derived_sizes():
    k = pbd.kernel("saxpy", SAXPY_CU)
    assert [p.name for p in k.inputs()] == ["a", "x", "y"] and [p.name for p in k.outputs()] == ["out"]
    assert k.derived_sizes() == {"n": "x"}
    with pytest.raises(ValueError, match="no output"):
        pbd.kernel("reduce", "sum_final(const float* partials[m], int64 m)")


def test_map_kernel_graph_has_the_blocks_of_its_inputs():
    x = chunked(np.ones(1000, np.float32), 300)
    out = pbd.map_kernel(pbd.kernel("saxpy", SAXPY_CU), 2.0, x, x)
    assert out.chunks == x.chunks and out.dtype == np.float32 and out.name.startswith("pybridge-cuda-saxpy")
    partial = pbd.kernel("reduce", "sum_partial(const float* x[n], float* partials[min((n + 255) / 256, 1024)], int64 n)")
    sums = pbd.map_kernel(partial, x)
    assert sums.chunks == ((2, 2, 2, 1),)  # per block: ceil(300/256), ..., ceil(100/256)
    with pytest.raises(TypeError, match=r"pass \['a', 'x', 'y'\]"):
        pbd.map_kernel(pbd.kernel("saxpy", SAXPY_CU), x, x)
    with pytest.raises(TypeError, match="parameter 'x' is const float\\* x\\[n\\], got dtype float64"):
        pbd.map_kernel(pbd.kernel("saxpy", SAXPY_CU), 2.0, x.astype(np.float64), x)
    with pytest.raises(ValueError, match="must be chunked alike"):
        pbd.map_kernel(pbd.kernel("saxpy", SAXPY_CU), 2.0, x, x.rechunk(250))
    with pytest.raises(ValueError, match="out='nope' is not an output"):
        pbd.map_kernel(pbd.kernel("saxpy", SAXPY_CU), 2.0, x, x, out="nope")


def test_import_without_dask_says_how_to_install():
    import subprocess
    import sys

    code = "import sys; sys.modules['dask'] = None; sys.modules['dask.array'] = None\nimport pybridge.dask"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "pip install 'dask[array]' distributed" in proc.stderr


def test_a_scattered_whole_argument_is_not_shipped_with_each_graph():
    """matmul's whole B given as pbd.scatter(client, b): the graph names a future (a few bytes),
    and every block gets the whole B; as a plain NumPy array it is in the graph itself."""
    import pickle

    from distributed import Client

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 32), dtype=np.float32), rng.standard_normal((32, 16), dtype=np.float32)
    with pbd.local_cluster(n_workers=1) as cluster, Client(cluster) as client:
        mm = ref("matmul", "matmul")
        bw = pbd.scatter(client, b)
        assert bw.shape == (32, 16) and bw.dtype == np.float32 and bw.ndim == 2
        out = pbd.map_blocks(mm, chunked(a, (16, 32)), bw, name="mm-scattered")
        assert out.name == "mm-scattered"
        np.testing.assert_allclose(out.compute(), a @ b, rtol=1e-5, atol=1e-5)
        graph = dict(out.__dask_graph__())
        assert b.tobytes() not in pickle.dumps(graph), "the whole array went into the graph"
        plain = dict(pbd.map_blocks(mm, chunked(a, (16, 32)), b).__dask_graph__())
        assert b.tobytes() in pickle.dumps(plain)  # the check above can see it
        with pytest.raises(TypeError, match="expected a 2-d array"):
            pbd.map_blocks(mm, chunked(a, (16, 32)), pbd.scatter(client, b[0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_failures_each_read_their_own_error(backend):
    """Calls and error reads on one context from 8 threads: every failure names its own block and
    carries Futhark's message; every success is right (the per-context lock at work)."""
    r = ref("chunky", "checked_sqrt", backend)
    errors: dict[int, Exception] = {}
    results: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(8)

    def work(k: int) -> None:
        x = np.full(5000, float(k), np.float64)
        if k % 2:
            x[k] = -1.0
        barrier.wait()
        for _ in range(20):
            try:
                results[k] = blocks.call_entry(r, (x,), block=(k,), nblocks=(8,))
            except pf.ProgramError as e:
                errors[k] = e

    run_threads(work, 8)
    assert sorted(errors) == [1, 3, 5, 7] and sorted(results) == [0, 2, 4, 6]
    for k, e in errors.items():
        assert str(e).startswith(f"checked_sqrt failed on block ({k},) of (8,): ") and "Assertion" in str(e)
    for k, v in results.items():
        np.testing.assert_array_equal(v, np.sqrt(np.full(5000, float(k))))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.lists(st.integers(1, 9), min_size=1, max_size=5))
def test_tied_rule_accepts_exactly_equal_chunks(cx, cy):
    n = sum(cx)
    cy = cy[:-1] + [n - sum(cy[:-1])] if sum(cy[:-1]) < n else [n]  # any chunking of the same length
    x = np.zeros(n, np.float32)
    call = lambda: pbd.map_blocks(ref("saxpy", "saxpy"), 1.0, chunked(x, (tuple(cx),)), chunked(x, (tuple(cy),)))  # noqa: E731
    if tuple(cx) == tuple(cy):
        assert call().chunks == (tuple(cx),)
    else:
        with pytest.raises(ValueError, match="'xs' .* and 'ys' .* share the size n"):
            call()
