"""pybridge.dask over 2 and 4 GPUs: NCCL collectives between GPUs inside tasks, halo
exchange GPU to GPU, blocks made on and kept on each GPU, the worker plugin, dask-cuda's
LocalCUDACluster, and failures (one GPU out of memory, a worker killed mid-graph, a peer that
never answers). Each test needs 2 or 4 GPUs and skips with the reason on fewer. The CPU versions of
the same logic are tests/test_dask_scale.py. Needs CuPy with NCCL, dask + distributed and the cuda
libraries (`make futhark FUTHARK_BACKEND=cuda`: jacobi, matmul, saxpy).
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from conftest import GPU_OK  # noqa: E402

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the device machines; workers inherit it

if GPU_OK:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    da = pytest.importorskip("dask.array", reason="dask is not installed: pip install '.[dask]'")
    distributed = pytest.importorskip("distributed", reason="distributed is not installed: pip install '.[dask]'")

import pybridge.dask as pbd  # noqa: E402
from pybridge.dask import phases  # noqa: E402
from pybridge.demo.examples import jacobi_reference  # noqa: E402
import pybridge.futhark as pf  # noqa: E402
from pybridge.paths import find_build_file  # noqa: E402


def ngpus() -> int:
    return int(cupy.cuda.runtime.getDeviceCount())


def need(k: int) -> None:
    if ngpus() < k:
        pytest.skip(f"needs {k} GPUs; this machine has {ngpus()}")


def cuda_entry(prog: str, name: str):
    so = find_build_file(f"futhark/cuda/lib{prog}.so")
    if so is None:
        pytest.skip(f"build/futhark/cuda/lib{prog}.so not built: make futhark FUTHARK_BACKEND=cuda")
    return pbd.entry(str(so), name, backend="cuda", unified_memory=0)  # plain device memory: no paging


@pytest.fixture(scope="module")
def client():
    need(2)
    with pbd.local_cluster(devices=list(range(min(ngpus(), 4))), threads_per_worker=1) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def workers(client, k: int) -> list[str]:
    need(k)
    return pbd.placement.worker_order(client)[:k]


def _collectives(comm, block):
    r, n = comm.rank, comm.size
    assert isinstance(block, cupy.ndarray)
    nxt = comm.exchange({(r + 1) % n: block}, {(r - 1) % n: (block.shape, block.dtype)})[(r - 1) % n]
    # the same received into rows 1.. of a bigger device array (what halo_map does), which keeps row 0
    into = cupy.full((block.shape[0] + 1,) + block.shape[1:], -1, block.dtype)
    got = comm.exchange({(r + 1) % n: block}, {(r - 1) % n: into[1:]})[(r - 1) % n]
    assert got.data.ptr == into[1:].data.ptr and bool((into[0] == -1).all()) and bool((into[1:] == nxt).all())
    try:  # host memory: refused, naming what NCCL needs
        comm.exchange({}, {(r - 1) % n: np.empty(block.shape, block.dtype)})
        raise AssertionError("NCCL received into host memory")
    except pbd.CommsError as e:
        assert "only into a CuPy array on this worker's GPU" in str(e), e
    total = comm.allreduce(block, "sum")
    first = comm.broadcast(block if r == 0 else None, 0, shape=block.shape, dtype=block.dtype)
    return cupy.stack([nxt, total, first])[None]


@pytest.mark.parametrize("k", [2, 4])
def test_nccl_exchange_allreduce_broadcast_between_gpus(client, k):
    ws = workers(client, k)
    x = pbd.random((k * 1000, 64), chunks=(1000, 64), seed=k, device=True, workers=ws)
    with pbd.Comms(client, workers=ws, transport="nccl") as comms:
        assert comms.transport == "nccl"
        out = pbd.spmd(_collectives, x, comms=comms, chunks=((1,) * k, (3,), (1000,), (64,)))
        got = pbd.to_host(out).compute()
    parts = pbd.to_host(x).compute().reshape(k, 1000, 64)
    for r in range(k):
        np.testing.assert_array_equal(got[r, 0], parts[(r - 1) % k])
        np.testing.assert_allclose(got[r, 1], parts.sum(axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[r, 2], parts[0])


def _where(comm, block):
    return np.array([[int(isinstance(block, cupy.ndarray)), int(block.device.id),
                      int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0])]])


@pytest.mark.parametrize("k", [2, 4])
def test_blocks_are_made_on_their_own_gpu_and_stay_there(client, k):
    ws = workers(client, k)
    x = pbd.random((k * 4096,), chunks=4096, seed=1, device=True, workers=ws)
    assert isinstance(x._meta, cupy.ndarray)
    got = pbd.spmd(_where, x, chunks=((1,) * k, (3,)), meta=np.empty((0, 0))).compute()
    assert got[:, 0].all() and (got[:, 1] == 0).all()  # CuPy blocks on each worker's device 0 ...
    assert sorted(got[:, 2]) == list(range(k))  # ... which is a different physical GPU per worker


@pytest.mark.parametrize("k", [2, 4])
def test_jacobi_halos_over_nccl_equal_the_whole_grid(client, k):
    ws = workers(client, k)
    jac = cuda_entry("jacobi", "jacobi")
    rows, m, steps = 64, 48, 10
    g = pbd.random((k * rows, m), chunks=(rows, m), seed=11, distribution="random", device=True, workers=ws)
    with pbd.Comms(client, workers=ws, transport="nccl") as comms:
        client.run(phases.record, True, workers=ws)  # the breakdown the benchmark prints, from CUDA events
        try:
            out = pbd.halo_map(jac, np.int32(steps), g, depth=steps, comms=comms)
            assert isinstance(out._meta, cupy.ndarray)
            got = pbd.to_host(out).compute()
            recs = [r for rs in client.run(phases.take, workers=ws).values() for r in rs]
        finally:
            client.run(phases.record, False, workers=ws)
    np.testing.assert_allclose(got, jacobi_reference(steps, pbd.to_host(g).compute()), rtol=1e-6, atol=1e-6)
    assert sorted(r["rank"] for r in recs) == list(range(k))
    assert all(r["copy_us"] > 0 and r["compute_us"] > 0 and r["exchange_us"] >= 0 for r in recs), recs


def test_plugin_loads_once_per_gpu_and_tasks_reuse_it(client):
    ws = workers(client, 2)
    saxpy = cuda_entry("saxpy", "saxpy_iter")
    client.run(pbd.close_all)
    client.register_plugin(pbd.PybridgeWorker([saxpy]))
    try:
        made = {w: s["contexts_created"] for w, s in client.run(pbd.worker_state).items()}
        x = pbd.random((2 * 2**20,), chunks=2**20, seed=2, device=True, workers=ws)
        out = pbd.spmd(lambda c, b: pbd.blocks.call_entry(saxpy, (np.int32(5), np.float32(1.5), b, b)), x)
        host = pbd.to_host(x).compute()
        want = host
        for _ in range(5):
            want = np.float32(1.5) * host + want
        np.testing.assert_allclose(pbd.to_host(out).compute(), want, rtol=1e-5)
        assert {w: s["contexts_created"] for w, s in client.run(pbd.worker_state).items()} == made
    finally:
        client.unregister_worker_plugin(pbd.PybridgeWorker.name)


def test_one_gpu_out_of_memory_names_the_block_and_worker(client):
    """Block 1's product is 2^18 x 2^18 f32 (256 GiB): plain device memory (unified_memory=0) runs
    out on that GPU only; the error names the block and the worker, and every worker still works."""
    need(2)
    mm = cuda_entry("matmul", "matmul")
    big = 2**18
    a = da.from_array(np.ones((big + 3, 1), np.float32), chunks=((1, big, 1, 1), (1,)))
    b = cupy.ones((1, big), np.float32)
    out = pbd.map_blocks(mm, pbd.to_device(a), b)
    with pytest.raises(pf.OutOfMemoryError) as info:
        out.sum().compute()
    assert info.value.block == (1, 0) and info.value.worker.startswith("worker ")
    assert "matmul failed on block (1, 0) of (4, 1)" in str(info.value)
    small = da.from_array(np.ones((8, 4), np.float32), chunks=(2, 4))
    ok = pbd.map_blocks(mm, pbd.to_device(small), cupy.ones((4, 3), np.float32))
    np.testing.assert_array_equal(pbd.to_host(ok).compute(), np.full((8, 3), 4, np.float32))


def test_a_gpu_worker_killed_mid_graph_is_replaced_and_the_result_is_right():
    need(2)
    jac = cuda_entry("jacobi", "jacobi")
    with pbd.local_cluster(devices=[0, 1], threads_per_worker=1) as cluster, distributed.Client(cluster) as c:
        g = pbd.random((24 * 1024, 1024), chunks=(1024, 1024), seed=5, distribution="random", device=True)
        graph = pbd.map_blocks(jac, np.int32(20_000), g)  # each block ~0.2 s: the kill lands mid-graph
        pids = c.run(os.getpid)
        fut = c.compute(pbd.to_host(graph), retries=2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(c.processing().values()):
            time.sleep(0.05)
        time.sleep(1.0)
        assert not fut.done(), "the graph finished before the kill: make the blocks slower"
        os.kill(pids[next(iter(pids))], signal.SIGKILL)
        got = fut.result(timeout=300)
        c.wait_for_workers(2, timeout=120)
        again = c.compute(pbd.to_host(pbd.map_blocks(jac, np.int32(20_000), g)), sync=True)
    np.testing.assert_array_equal(got, again)


def test_dask_cuda_local_cuda_cluster_runs_pybridge_and_reports_pins(capsys):
    need(2)
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is not installed (pip install dask-cuda nvidia-ml-py)")
    jac = cuda_entry("jacobi", "jacobi")
    with dask_cuda.LocalCUDACluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        ws = pbd.placement.worker_order(c)
        assert [c.scheduler_info()["workers"][w]["name"] for w in ws] == [0, 1]
        g = pbd.random((2 * 64, 40), chunks=(64, 40), seed=3, distribution="random", device=True)
        with pbd.Comms(c, transport="nccl") as comms:
            got = pbd.to_host(pbd.halo_map(jac, np.int32(6), g, depth=6, comms=comms)).compute()
        np.testing.assert_allclose(got, jacobi_reference(6, pbd.to_host(g).compute()), rtol=1e-6, atol=1e-6)
        pinned = c.run(lambda: sorted(os.sched_getaffinity(0)))
    report = pbd.cpu_affinity_report()
    with capsys.disabled():
        for gpu, why in report.items():
            print(f"\ndask-cuda CPU pin, GPU {gpu}: {why or 'satisfiable (all CPUs near it are usable)'}")
        for w, cpus in pinned.items():
            print(f"worker {w}: runs on {len(cpus)} CPUs ({cpus[0]}..{cpus[-1]})")
    assert set(report) == set(range(ngpus()))


def _silent_rank_one(comm, block):
    if comm.rank == 0:
        comm.exchange({}, {1: ((1,), np.float32)})
    return block


def test_a_peer_that_never_answers_times_out_over_nccl():
    """Last, on its own cluster: rank 0 waits for rank 1, which never sends. Within the timeout
    (never a hang: the 4-GPU run once hung here in NCCL) rank 0's NCCL is aborted and
    CommsTimeoutError names rank 1; the workers are unharmed: a new Comms works at once."""
    need(2)
    with pbd.local_cluster(devices=[0, 1], threads_per_worker=1) as cluster, distributed.Client(cluster) as c:
        x = pbd.random((2,), chunks=1, device=True)
        comms = pbd.Comms(c, transport="nccl", timeout=3).init()
        t0 = time.monotonic()
        with pytest.raises(pbd.CommsTimeoutError, match=r"NCCL send/recv with rank\(s\) \[1\] did not finish within 3 s"):
            pbd.spmd(_silent_rank_one, x, comms=comms).compute()
        assert time.monotonic() - t0 < 40
        comms.destroy()
        with pbd.Comms(c, transport="nccl", timeout=30) as again:
            got = pbd.to_host(pbd.spmd(_collectives, x, comms=again, chunks=((1, 1), (3,), (1,)))).compute()
        xs = pbd.to_host(x).compute()
        np.testing.assert_allclose(got[:, 1, 0], np.full(2, xs.sum(), np.float32), rtol=1e-6)  # the all-reduce
        np.testing.assert_array_equal(got[:, 0, 0], xs[::-1])  # each received the other's block
