"""pybridge.dask at scale, on CPU workers (the same code paths the GPU run takes, the host transport
standing in for NCCL): blocks made on the workers, one task per worker, halo exchange, broadcast and
all-reduce, the worker plugin, failures (a peer that never answers, out of memory in one block, a
replacement worker that cannot load the library, wrong chunking refused before any work), and the
benchmark's rows and outputs. The multi-GPU versions are tests/gpu/test_dask_multigpu.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import dask_and_futhark_or_skip, library_or_source  # noqa: E402

pytestmark = [pytest.mark.futhark, pytest.mark.slow]  # clusters of worker processes: about 80 s of CPU time
da, distributed = dask_and_futhark_or_skip()

import dask  # noqa: E402

import pybridge.futhark as pf  # noqa: E402

import pybridge.dask as pbd  # noqa: E402
from pybridge.demo.examples import jacobi_reference  # noqa: E402
from pybridge.dask.cluster import pin_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JACOBI = library_or_source("jacobi")
SAXPY = library_or_source("saxpy")
CHUNKY = str(ROOT / "tests" / "programs" / "chunky.fut")
NWORKERS = 3


@pytest.fixture(scope="module")
def client():
    # No work stealing (as local_cluster(devices=...) has it): blocks stay where they were placed.
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = pbd.local_cluster(n_workers=NWORKERS, threads_per_worker=1)
    with cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def comms(client):
    with pbd.Comms(client, transport="host", timeout=30) as c:
        yield c


def scheduler_keys(dask_scheduler) -> list:
    return list(dask_scheduler.tasks)


# ---------------------------------------------------------------- blocks born on the workers


def test_random_blocks_are_made_on_the_workers_in_contiguous_runs(client):
    x = pbd.random((12 * 5,), chunks=5, seed=3)
    assert all(isinstance(v, distributed.Future) for v in dict(x.__dask_graph__()).values())  # nothing from the client
    order = pbd.placement.worker_order(client)
    distributed.wait(list(dict(x.__dask_graph__()).values()))
    who = client.who_has(list(dict(x.__dask_graph__()).values()))
    for k in range(12):
        assert who[(x.name, k)] == (order[k * NWORKERS // 12],)
    got = x.compute()
    want = np.concatenate([
        np.random.default_rng(int(np.random.SeedSequence(3, spawn_key=(k,)).generate_state(2, np.uint64)[0] >> np.uint64(1)))
        .standard_normal(5, dtype=np.float32) for k in range(12)])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pbd.random((60,), chunks=5, seed=3).compute(), got)
    assert not np.array_equal(pbd.random((60,), chunks=5, seed=4).compute(), got)


def test_from_function_sees_its_block_and_its_result_is_checked(client):
    g = pbd.from_function(lambda b, xp: xp.full(b.shape, b.start[0] * 10 + b.index[1], "f4"), (10, 6), chunks=(4, 3))
    want = np.empty((10, 6), np.float32)
    for i, r0 in enumerate((0, 4, 8)):
        for j in range(2):
            want[r0 : r0 + 4, 3 * j : 3 * j + 3] = r0 * 10 + j
    np.testing.assert_array_equal(g.compute(), want)
    bad = pbd.from_function(lambda b, xp: xp.zeros(3, "f8"), (8,), chunks=4, name="pybridge-bad-block")
    with pytest.raises(ValueError, match=r"float64 array of shape \(3,\) for block \([01],\).*float32 and that block's shape is \(4,\)"):
        bad.compute()
    loaded = np.arange(12, dtype=np.float32)  # a loader reading its slice of a whole (a file, in real use)
    np.testing.assert_array_equal(pbd.from_function(lambda b, xp: loaded[b.slices], (12,), chunks=5).compute(), loaded)


# ---------------------------------------------------------------- communicators and one task per worker


def _collectives(comm, block):
    r, n = comm.rank, comm.size
    nxt = comm.exchange({(r + 1) % n: block}, {(r - 1) % n: (block.shape, block.dtype)})[(r - 1) % n]
    total = comm.allreduce(block, "sum")
    top = comm.allreduce(block, "max")
    first = comm.broadcast(block if r == 0 else None, 0, shape=block.shape, dtype=block.dtype)
    comm.barrier()
    return np.stack([nxt, total, top, first])[None]


def test_exchange_allreduce_broadcast_match_numpy(client, comms):
    x = pbd.random((NWORKERS * 4, 3), chunks=(4, 3), seed=1)
    xs = x.compute()
    out = pbd.spmd(_collectives, x, comms=comms, chunks=((1,) * NWORKERS, (4,), (4,), (3,))).compute()
    parts = xs.reshape(NWORKERS, 4, 3)
    for r in range(NWORKERS):
        np.testing.assert_array_equal(out[r, 0], parts[(r - 1) % NWORKERS])
        np.testing.assert_allclose(out[r, 1], parts.sum(axis=0, dtype=np.float32), rtol=1e-6)
        np.testing.assert_array_equal(out[r, 2], parts.max(axis=0))
        np.testing.assert_array_equal(out[r, 3], parts[0])


@pytest.mark.parametrize("rows,steps,depth", [((5, 7, 6), 4, 4), ((9, 9, 9), 1, 3), ((4, 8, 5), 3, 3)])
def test_jacobi_with_halos_equals_the_whole_grid(client, comms, rows, steps, depth):
    m = 7
    g = pbd.random((sum(rows), m), chunks=(rows, m), seed=sum(rows), distribution="random")
    jac = pbd.entry(JACOBI, "jacobi", backend="c")
    got = pbd.halo_map(jac, np.int32(steps), g, depth=depth, comms=comms).compute()
    np.testing.assert_array_equal(got, jacobi_reference(steps, g.compute()))


from pybridge.dask.transport import Communicator  # noqa: E402


class _Loopback(Communicator):
    """Rank ``rank`` of ``len(blocks)`` in one process: what each neighbour sends is read from its
    block (its first ``depth`` rows up, its last ``depth`` rows down), and what this rank sends is
    checked to be what the neighbour expects, so ``extend_rows`` is tested without workers."""

    def __init__(self, rank, blocks):
        super().__init__("loop", rank, len(blocks), 1.0)
        self.blocks = blocks

    def exchange(self, sends, recvs):
        mine = self.blocks[self.rank]
        for p, x in sends.items():
            d = x.shape[0]
            np.testing.assert_array_equal(x, mine[:d] if p == self.rank - 1 else mine[mine.shape[0] - d:])
        got = {}
        for p, (shp, dt, into) in self._receive_specs(recvs).items():
            d = shp[0]
            theirs = self.blocks[p]
            got[p] = into if into is not None else np.empty(shp, dt)
            got[p][...] = theirs[theirs.shape[0] - d:] if p == self.rank - 1 else theirs[:d]
        return got


@pytest.mark.parametrize("rows,depth", [((5, 7, 6), 4), ((3,), 2), ((4, 4), 0), ((2, 9, 3, 5), 2), ((6, 6), 6)])
def test_extend_rows_receives_into_the_extended_block(rows, depth):
    from pybridge.dask.spmd import extend_rows

    rng = np.random.default_rng(sum(rows))
    blocks = [rng.standard_normal((n, 3)).astype(np.float32) for n in rows]
    for r, block in enumerate(blocks):
        ext, top, bottom = extend_rows(_Loopback(r, blocks), block, depth)
        if depth == 0 or len(blocks) == 1:
            assert ext is block and top == bottom == 0
            continue
        want = np.concatenate(([blocks[r - 1][len(blocks[r - 1]) - depth:]] if r else [])
                              + [block] + ([blocks[r + 1][:depth]] if r < len(blocks) - 1 else []))
        np.testing.assert_array_equal(ext, want)
        assert (top, bottom) == (depth if r else 0, depth if r < len(blocks) - 1 else 0)
        assert ext.flags.c_contiguous and not np.shares_memory(ext, block)


def _into_buffers(comm, block):
    """Receive the previous rank's block into rows 1.. of a buffer, then try two bad targets."""
    r, n = comm.rank, comm.size
    buf = np.full((block.shape[0] + 1,) + block.shape[1:], -1.0, block.dtype)
    got = comm.exchange({(r + 1) % n: block}, {(r - 1) % n: buf[1:]})[(r - 1) % n]
    assert got is not None and np.shares_memory(got, buf)
    errors = []
    for bad in (buf[:, :1], [0.0]):  # not C-contiguous; not an array
        try:
            comm.exchange({}, {(r - 1) % n: bad})
        except pbd.CommsError as e:
            errors.append(str(e))
    assert len(errors) == 2, errors
    assert "must be (shape, dtype) or a C-contiguous, writable array" in errors[0], errors[0]
    return buf[None]


def test_exchange_receives_into_a_given_array(client, comms):
    x = pbd.random((NWORKERS * 4, 2), chunks=(4, 2), seed=2)
    xs = x.compute()
    out = pbd.spmd(_into_buffers, x, comms=comms, chunks=((1,) * NWORKERS, (5,), (2,))).compute()
    for r in range(NWORKERS):
        assert (out[r, 0] == -1).all()
        np.testing.assert_array_equal(out[r, 1:], xs.reshape(NWORKERS, 4, 2)[(r - 1) % NWORKERS])


def test_halo_tasks_record_their_phases_when_asked(client, comms):
    """The breakdown ``pybridge bench scaling`` prints for B2: each halo task's phases, recorded
    only while the workers are asked to, and summarised per run by the task that ended last."""
    from pybridge.bench.scaling import summarize_phases
    from pybridge.dask import phases

    g = pbd.random((3 * 6, 5), chunks=(6, 5), seed=4, distribution="random")
    jac = pbd.entry(JACOBI, "jacobi", backend="c")
    client.run(phases.record, True)
    try:
        t0 = time.time()
        got = pbd.halo_map(jac, np.int32(2), g, depth=2, comms=comms, sync=True).compute()
        t1 = time.time()
        recs = [r for rs in client.run(phases.take).values() for r in rs]
        assert not [r for rs in client.run(phases.take).values() for r in rs]  # taken: gone
    finally:
        client.run(phases.record, False)
    np.testing.assert_array_equal(got, jacobi_reference(2, g.compute()))
    assert sorted(r["rank"] for r in recs) == [0, 1, 2]
    for r in recs:
        for phase in ("assemble", "exchange", "compute", "trim"):
            assert r[f"{phase}_us"] >= 0 and r[f"{phase}_host_us"] >= 0
        assert t0 <= r["start"] <= r["end"] <= t1
    summary = summarize_phases([(t0, t1, recs)])
    assert summary["phase_compute_max_us"] == max(r["compute_us"] for r in recs)
    assert summary["phase_task_us"] >= summary["phase_compute_us"] and summary["phase_to_start_us"] >= 0
    pbd.halo_map(jac, np.int32(1), g, depth=1, comms=comms).compute()
    assert not [r for rs in client.run(phases.take).values() for r in rs]  # not recording: nothing kept


def test_wrong_chunking_is_refused_before_any_task(client, comms):
    before = set(client.run_on_scheduler(scheduler_keys))
    lazy = da.ones((12, 4), chunks=(2, 4), dtype=np.float32)  # 6 blocks for 3 workers
    jac = pbd.entry(JACOBI, "jacobi", backend="c")
    with pytest.raises(ValueError, match=r"argument 1 has chunks .* one block per worker of the communicator: 3 along axis 0.*rechunk\(\(4, -1,\)\)"):
        pbd.halo_map(jac, np.int32(1), lazy, depth=1, comms=comms)
    with pytest.raises(ValueError, match="1 along any other"):
        pbd.spmd(lambda c, b: b, da.ones((6, 4), chunks=(2, 2)), comms=comms)
    with pytest.raises(ValueError, match=r"depth 3 is more rows than the smallest block has \(2"):
        pbd.halo_map(jac, np.int32(1), da.ones((6, 4), chunks=(2, 4), dtype=np.float32), depth=3, comms=comms)
    with pytest.raises(TypeError, match="expected dtype float32"):
        pbd.halo_map(jac, np.int32(1), da.ones((6, 4), chunks=(2, 4)), depth=1, comms=comms)
    assert not set(client.run_on_scheduler(scheduler_keys)) - before  # nothing was submitted


def _where(comm, block):
    return np.array([[comm.rank, comm.size, int(block[0]), os.getpid()]], np.int64)


def test_spmd_over_fewer_blocks_than_workers_runs_where_the_blocks_are(client, comms):
    """4 GPUs and 2 blocks: without a communicator, 2 tasks, each on the worker holding its block
    (the others stay free); a communicator must span exactly the workers that hold the blocks."""
    order = pbd.placement.worker_order(client)
    pids = client.run(os.getpid)
    for nb, ws in ((2, order[:2]), (2, order[1:]), (5, order)):  # fewer, elsewhere, more blocks than workers
        x = pbd.from_function(lambda b, xp: xp.full(b.shape, b.index[0], np.int64), (nb * 3,), chunks=3,
                              dtype=np.int64, workers=ws)
        got = pbd.spmd(_where, x, chunks=((1,) * nb, (4,)), dtype=np.int64, meta=np.empty((0, 0), np.int64)).compute()
        holders = client.who_has([f for f in distributed.futures_of(x)])
        np.testing.assert_array_equal(got[:, :3], [[k, nb, k] for k in range(nb)])
        assert list(got[:, 3]) == [pids[holders[(x.name, k)][0]] for k in range(nb)]
    two = pbd.random((2 * 4,), chunks=4, seed=7, workers=order[:2])
    with pytest.raises(ValueError, match=r"one block per worker of the communicator: 3 along axis 0.*"
                                         r"make the Comms over the workers that hold them"):
        pbd.spmd(_collectives, two, comms=comms)
    with pbd.Comms(client, transport="host", workers=order[:2], timeout=30) as pair:
        out = pbd.spmd(_collectives, two, comms=pair, chunks=((1, 1), (4,), (4,))).compute()
    parts = two.compute().reshape(2, 4)
    np.testing.assert_array_equal(out[0, 0], parts[1])  # rank 0 received rank 1's block
    np.testing.assert_allclose(out[1, 1], parts.sum(axis=0), rtol=1e-6)


def _silent_rank_one(comm, block):
    if comm.rank == 1:
        return block  # never takes part
    if comm.rank == 0:
        comm.exchange({}, {1: ((1,), np.float32)})
    return block


def test_a_peer_that_never_answers_times_out_naming_it(client):
    x = pbd.random((NWORKERS,), chunks=1, seed=0)
    with pbd.Comms(client, transport="host", timeout=1.5) as quick:
        out = pbd.spmd(_silent_rank_one, x, comms=quick)
        with pytest.raises(pbd.CommsTimeoutError, match=r"rank 0 of session .*no connection from rank 1 within 1.5 s"):
            out.compute()


def test_comm_outside_a_task_and_bad_peers_are_clear_errors(client, comms):
    with pytest.raises(pbd.CommsError, match="inside a task"):
        pbd.comm(comms)

    def bad(comm, block):
        comm.exchange({comm.rank: block}, {})

    with pytest.raises(pbd.CommsError, match=r"cannot send to rank \d \(ranks are 0..2, not itself\)"):
        pbd.spmd(bad, pbd.random((NWORKERS,), chunks=1), comms=comms).compute()
    with pytest.raises(ValueError, match="transport must be one of"):
        pbd.Comms(client, transport="ucx")


# ---------------------------------------------------------------- resident state


def test_plugin_loads_libraries_once_and_teardown_closes_them(client):
    saxpy = pbd.entry(SAXPY, "saxpy_iter", backend="c")
    client.run(pbd.close_all)
    client.register_plugin(pbd.PybridgeWorker([saxpy]))
    try:
        state = client.run(pbd.worker_state)
        assert all(s["contexts_created"] >= 1 and any(k.startswith("libsaxpy") for k in s["libraries"]) for s in state.values())
        made = {w: s["contexts_created"] for w, s in state.items()}
        x = pbd.random((NWORKERS * 8,), chunks=8, seed=2)
        out = pbd.map_blocks(saxpy, np.int32(3), np.float32(2.0), x, x)
        xs = x.compute()
        want = xs
        for _ in range(3):
            want = np.float32(2.0) * xs + want
        np.testing.assert_array_equal(out.compute(), want)
        assert {w: s["contexts_created"] for w, s in client.run(pbd.worker_state).items()} == made  # no new context
    finally:
        client.unregister_worker_plugin(pbd.PybridgeWorker.name)
    assert all(not s["libraries"] for s in client.run(pbd.worker_state).values())  # teardown closed them


# ---------------------------------------------------------------- failures


def test_out_of_memory_in_one_block_names_the_block_and_worker(client):
    xs = np.arange(16, dtype=np.int64)
    xs[8] = 2**58  # block 2 asks for 2**61 bytes
    alloc = pbd.entry(CHUNKY, "alloc_first", backend="c")
    out = pbd.map_blocks(alloc, da.from_array(xs, chunks=4))
    with pytest.raises(pf.OutOfMemoryError) as info:
        out.compute()
    assert info.value.block == (2,) and info.value.worker.startswith("worker ")
    assert "alloc_first failed on block (2,) of (4,) (elements 8:12) on worker" in str(info.value)
    good = np.arange(16, dtype=np.int64)  # every worker still works
    got = pbd.map_blocks(alloc, da.from_array(good, chunks=4)).compute()
    np.testing.assert_array_equal(got, np.concatenate([b + b[0] * (b[0] - 1) // 2 for b in good.reshape(4, 4)]))


def test_a_worker_killed_mid_graph_then_a_new_one_that_cannot_load_the_library(tmp_path):
    so = Path(pf.load(CHUNKY, backend="c").path)
    for f in (so, so.with_name("chunky.json"), so.with_name("chunky.fut")):
        if f.exists():
            shutil.copy2(f, tmp_path / f.name)
    spin = pbd.entry(str(tmp_path / so.name), "spin", backend="c")
    x = np.linspace(0, 1, 16 * 2000, dtype=np.float32)
    with pbd.local_cluster(n_workers=2, threads_per_worker=1) as cluster, distributed.Client(cluster) as c:
        pids = c.run(os.getpid)
        fut = c.compute(pbd.map_blocks(spin, np.int32(20_000), da.from_array(x, chunks=2000)), retries=1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                any(n for n in libs.values()) for libs in c.run(lambda: pbd.stats()["libraries"]).values()):
            time.sleep(0.02)  # until both workers have loaded the library
        (tmp_path / so.name).unlink()  # gone: a worker started from now on cannot load it
        victim = next(iter(pids))
        os.kill(pids[victim], signal.SIGKILL)
        try:
            got = fut.result(timeout=120)  # no hang: either the survivor did the work ...
            np.testing.assert_array_equal(got, pf.load(str(so), backend="c").spin(np.int32(20_000), x).numpy())
        except pbd.WorkerLibraryError as e:  # ... or a block landed on the replacement, which says why
            assert so.name in str(e) and "could not load" in str(e)
        # A worker that joins now (the nanny's replacement, or one the cluster adds) finds no file.
        cluster.scale(3)
        fresh: list = []
        deadline = time.monotonic() + 60
        while not fresh and time.monotonic() < deadline:
            fresh = [w for w, pid in c.run(os.getpid).items() if pid not in pids.values()]
            time.sleep(0.2)
        assert fresh, "no new worker joined"
        pinned = c.submit(pbd.blocks.call_entry, spin, (np.int32(1), x[:10]), workers=fresh, pure=False)
        with pytest.raises(pbd.WorkerLibraryError, match=rf"worker .* could not load {so.name} \(c\) from .*{so.name}: "):
            pinned.result(timeout=60)


def test_cpu_pin_problems_say_which_gpu_and_why():
    got = pin_problems({0: {0, 1, 2, 3}, 1: {64, 65}, 2: {2, 3, 64}, 3: set()}, allowed=set(range(8)))
    assert got[0] == ""
    assert "none of the 2 CPUs near it (64-65) is among the 8 this process may use (0-7)" in got[1]
    assert got[2].startswith("only 2 of the 3 CPUs near it may be used here (2-3)")
    assert "no CPUs" in got[3]


# ---------------------------------------------------------------- the benchmark


def test_scaling_benchmark_rows_section_and_plot(client, tmp_path):
    """The benchmark's CPU run on the module's cluster (its first 2 workers): the rows, the
    targets judged, the section and plot, and the rows it appends as it goes rebuilding the same
    section (what a run cut short leaves)."""
    import argparse

    from pybridge.bench import scaling, scaling_report

    p = argparse.ArgumentParser()
    scaling.add_arguments(p)
    args = p.parse_args(["--workers", "2", "--rows", "B0,B2,B3", "--section", str(tmp_path / "s.md"),
                         "--plot", str(tmp_path / "s.png"), "--rows-out", str(tmp_path / "rows.jsonl")])
    args.quick = True
    rows = scaling.run(args, client=client)
    assert not [r for r in rows if r.get("skipped")], [r["skipped"] for r in rows if r.get("skipped")]
    groups = {r["benchmark"] for r in rows}
    assert groups == {"B0 overhead", "B2 weak Jacobi", "B3 strong matmul", "B3 broadcast of B"}
    fit = [r for r in rows if r["impl"].startswith("fit")][0]
    assert fit["per_task_ms"] is not None and fit["target"] == scaling.TARGETS["B0"] and isinstance(fit["met"], bool)
    assert fit["smallest_ms"] > 0 and fit["plain_smallest_ms"] > 0
    for impl in ("pybridge", "plain", "peer"):  # where B0's time goes: in the graph, and each task alone
        assert fit[f"in_graph_{impl}_task_us"] > 0 and 0 < fit[f"in_graph_{impl}_busy"] < 2
    assert all(fit[f"worker_{name}_us"] > 0 for name in ("pybridge", "pybridge_nosync", "entry", "peer", "plain"))
    b2 = [r for r in rows if r["benchmark"] == "B2 weak Jacobi" and r["workers"] == 2 and not r["impl"].startswith("direct")]
    assert all(r["phase_task_us"] > 0 and r["phase_to_start_us"] > 0 for r in b2) and len(b2) == 2
    assert [r["phase_exchange_us"] > 0 and r["phase_compute_max_us"] > 0 for r in b2 if r["impl"].startswith("pybridge")] == [True]
    judged = [r for r in rows if r["workers"] == 2 and r["impl"].startswith("pybridge")]
    assert judged and all("met" in r for r in judged if r["benchmark"] == "B3 strong matmul")
    for r in rows:
        if r["impl"].startswith(("pybridge", "Dask")) and r["benchmark"] != "B0 overhead":
            assert r["median_us"] > 0 and r["samples"] == 2 and r["submit_us"] > 0  # --quick: 2 timed runs after the warm-up
    text = (tmp_path / "s.md").read_text()
    assert text.startswith("## Multi-GPU") and "| B3 strong matmul: pybridge Futhark, 2 workers | speedup ≥ 1.9 |" in text
    assert "| B1 | efficiency ≥ 0.95 at 2 GPUs, ≥ 0.90 at 4 | not measured in this run |" in text
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    again, meta = scaling_report.read_rows(str(tmp_path / "rows.jsonl"))
    assert [r["impl"] for r in again] == [r["impl"] for r in rows] and meta["counts"] == [2]
    cut = tmp_path / "cut.jsonl"  # a run killed mid-line: what was written still makes a section
    cut.write_text((tmp_path / "rows.jsonl").read_text()[:-40])
    partial, _ = scaling_report.read_rows(str(cut))
    assert 0 < len(partial) < len(rows) + 1
    assert client.run(pbd.worker_state)  # the module's cluster is left working


def test_a_failed_group_and_a_spent_budget_are_reported_and_the_run_goes_on(client, monkeypatch, tmp_path):
    import argparse

    from pybridge.bench import scaling

    def broken(*args):
        raise RuntimeError("the GPU caught fire")

    monkeypatch.setitem(scaling.GROUPS, "B2", broken)
    p = argparse.ArgumentParser()
    scaling.add_arguments(p)
    args = p.parse_args(["--workers", "2", "--rows", "B2,B0", "--section", str(tmp_path / "s.md")])
    args.quick = True
    rows = scaling.run(args, client=client)
    assert [r["skipped"] for r in rows if r.get("skipped")] == ["failed: RuntimeError: the GPU caught fire"]
    assert any(r["impl"].startswith("fit") for r in rows)  # B0 still ran
    assert "| B2 | efficiency ≥ 0.90 at 4 GPUs | not measured in this run | – | failed: RuntimeError" in (tmp_path / "s.md").read_text()
    args = p.parse_args(["--workers", "2", "--rows", "B0", "--budget", "0.001"])
    args.quick = True
    time.sleep(0.01)
    rows = scaling.run(args, client=client)
    assert len(rows) == 1 and rows[0]["skipped"].startswith("out of time")
    # A library that is not there (not built on the GPU machine): its rows say why, the rest run.
    real = scaling._library
    monkeypatch.setattr(scaling, "_library", lambda prog, backend: "/nonexistent/libjacobi.so" if prog == "jacobi" else real(prog, backend))
    monkeypatch.setitem(scaling.GROUPS, "B2", scaling._group_b2)
    args = p.parse_args(["--workers", "2", "--rows", "B2", "--section", str(tmp_path / "t.md")])
    args.quick = True
    rows = scaling.run(args, client=client)
    assert len(rows) == 1 and "the jacobi entry point is not available here" in rows[0]["skipped"]
    assert "- `jacobi`: " in (tmp_path / "t.md").read_text()


def test_recorded_tasks_are_summarised_per_run():
    from pybridge.bench.scaling import summarize_phases, summarize_tasks

    runs = [(10.0, 10.010, [{"pid": 1, "start": 10.001, "end": 10.003, "compute_us": 5.0},
                            {"pid": 1, "start": 10.004, "end": 10.006, "compute_us": 7.0},
                            {"pid": 2, "start": 10.002, "end": 10.009, "compute_us": 6.0}])]
    got = summarize_tasks(runs)
    assert got["task_us"] == pytest.approx(2000.0) and got["busy"] == pytest.approx(0.7)
    ph = summarize_phases(runs)  # the task that ended last is pid 2's
    assert ph["phase_compute_us"] == 6.0 and ph["phase_compute_max_us"] == 7.0
    assert ph["phase_to_start_us"] == pytest.approx(4000.0) and ph["phase_start_skew_us"] == pytest.approx(3000.0)
    assert ph["phase_after_us"] == pytest.approx(1000.0) and ph["phase_run_us"] == pytest.approx(10000.0)
    assert summarize_tasks([]) == {} and summarize_phases([]) == {}


def test_b0_fit_is_not_bent_by_one_noisy_count():
    from pybridge.bench.scaling import fit_overhead

    fixed, per = fit_overhead({4: 0.006, 16: 0.018, 64: 0.066, 256: 0.258})
    assert fixed == pytest.approx(0.002) and per == pytest.approx(0.001)
    fixed, per = fit_overhead({4: 0.006, 16: 0.018, 64: 0.066, 256: 0.400})  # one slow count
    assert per == pytest.approx(0.001) and fixed == pytest.approx(0.002)  # least squares: 1.6 ms/task, fixed -13 ms
    fixed, per = fit_overhead({4: 0.030, 16: 0.018, 64: 0.066, 256: 0.258})  # or the smallest
    assert per == pytest.approx(0.001) and fixed == pytest.approx(0.002)
    assert fit_overhead({8: 0.02}) == (0.02, 0.0)


# ---------------------------------------------------------------- NCCL's deadlines, without a GPU


def test_a_blocked_call_expires_and_an_abort_releases_it():
    from pybridge.dask import deadlines

    assert deadlines.call_by(time.monotonic() + 5, lambda: 7) == 7
    with pytest.raises(ZeroDivisionError):
        deadlines.call_by(time.monotonic() + 5, lambda: 1 / 0)
    released = threading.Event()
    returned = threading.Event()

    def stuck() -> None:  # a blocking NCCL call: returns only once the communicator is aborted
        released.wait()
        returned.set()

    t0 = time.monotonic()
    with pytest.raises(deadlines.Expired):
        deadlines.call_by(t0 + 0.3, stuck)
    assert 0.25 < time.monotonic() - t0 < 5
    assert deadlines.abort_within(released.set) and returned.wait(5)
    assert not deadlines.abort_within(lambda: time.sleep(30), grace=0.2)  # an abort that hangs is given up on
    checks = []
    with pytest.raises(deadlines.Expired):
        deadlines.wait_until(lambda: False, time.monotonic() + 0.3, check=lambda: checks.append(1), check_every=0.05)
    assert len(checks) >= 2
    with pytest.raises(RuntimeError, match="peer failed"):
        deadlines.wait_until(lambda: False, time.monotonic() + 5, check=lambda: (_ for _ in ()).throw(RuntimeError("peer failed")),
                             check_every=0.01)


class _FakeNccl:
    """cupy and cupy.cuda.nccl as NcclCommunicator uses them, for one rank whose peers never run
    their part: in ``mode`` "connect" ncclGroupEnd blocks (NCCL connecting to a silent peer), in
    "device" the queued work never completes (a kernel waiting for the peer's data); both until
    the communicator is aborted. The initialisation's warm-up completes."""

    def __init__(self, mode: str):
        import types

        self.mode, self.warm, self.aborted = mode, True, threading.Event()
        fake = self

        class Arr:
            def __init__(self, a):
                self.a = np.ascontiguousarray(a)
                self.data = types.SimpleNamespace(ptr=self.a.ctypes.data)
                self.nbytes, self.size, self.dtype, self.shape = self.a.nbytes, self.a.size, self.a.dtype, self.a.shape

        class Event:
            def __init__(self, **kw):
                self.warm = fake.warm

            def record(self, stream):
                pass

            @property
            def done(self):
                return self.warm or fake.mode != "device" or fake.aborted.is_set()

        class Comm:
            def __init__(self, size, uid, rank):
                pass

            def send(self, *a):
                pass

            recv = bcast = allReduce = send

            def check_async_error(self):
                pass

            def abort(self):
                fake.aborted.set()

            def destroy(self):
                pass

        def group_end():
            if not fake.warm and fake.mode == "connect":
                fake.aborted.wait()

        cuda = types.SimpleNamespace(
            Device=lambda n: contextlib.nullcontext(), get_current_stream=lambda: types.SimpleNamespace(ptr=0),
            Event=Event)
        self.cupy = types.SimpleNamespace(
            cuda=cuda, zeros=lambda n, dt: Arr(np.zeros(n, dt)), empty=lambda s, dt: Arr(np.empty(s, dt)),
            asarray=lambda x: x if isinstance(x, Arr) else Arr(np.asarray(x)), ascontiguousarray=lambda x: x,
            empty_like=lambda x: Arr(np.empty_like(x.a)))
        self.nccl = types.SimpleNamespace(NcclCommunicator=Comm, groupStart=lambda: None, groupEnd=group_end,
                                          NCCL_UINT8=0, NCCL_INT32=1, NCCL_FLOAT32=2, NCCL_SUM=0, NcclError=RuntimeError)
        cuda.nccl = self.nccl


@pytest.mark.parametrize("mode", ["connect", "device"])
def test_an_nccl_peer_that_never_answers_times_out_and_aborts(monkeypatch, mode):
    """What hung on the GPU machine: a peer that never runs its part must give CommsTimeoutError
    naming it within the timeout, the communicator aborted, never a hang."""
    import sys

    from pybridge.dask.nccl import NcclCommunicator

    fake = _FakeNccl(mode)
    monkeypatch.setitem(sys.modules, "cupy", fake.cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake.cupy.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", fake.nccl)
    c = NcclCommunicator("f" * 32, 0, 3, uid=None, timeout=0.5)
    fake.warm = False
    t0 = time.monotonic()
    with pytest.raises(pbd.CommsTimeoutError, match=r"rank 0 of session ffffffff: NCCL send/recv with rank\(s\) \[1, 2\] "
                                                    r"did not finish within 0.5 s .* was aborted"):
        c.exchange({1: np.ones(4, np.float32)}, {2: ((4,), np.float32)})
    assert time.monotonic() - t0 < 5 and fake.aborted.is_set() and c.aborted
    with pytest.raises(pbd.CommsError, match="aborted after a failure; make a new Comms"):
        c.allreduce(np.ones(2, np.float32))
    c.close()  # nothing left to free: no hang, no second abort
