"""Threads against one Futhark context (issue 12, findings 1 and 2, and the thread stress test).

Each scenario runs in a child process (tests/thread_scenarios.py), so a segfault or abort is a failed
test with its signal, not a dead pytest. Libraries: probe.fut built by the real compiler for c,
multicore and (marked gpu) cuda. Profiles: quick by default (CI); ``PYBRIDGE_STRESS=long`` runs the
long one (more rounds, threads and seconds).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pybridge.paths import find_build_file

pytestmark = [pytest.mark.futhark, pytest.mark.slow]  # slow: left out of the quick subset (-m 'not slow')

SCRIPT = Path(__file__).with_name("thread_scenarios.py")
LONG = os.environ.get("PYBRIDGE_STRESS") == "long"


def probe(backend: str) -> Path:
    p = find_build_file(f"reference/{backend}/libprobe.so")
    if p is None:
        pytest.skip(f"reference/{backend}/libprobe.so not built: run `make futhark FUTHARK_BACKEND={backend}`")
    return p


def backends(*names: str) -> list:
    return [pytest.param(b, marks=[pytest.mark.gpu] if b == "cuda" else [], id=b) for b in names]


def run_scenario(scenario: str, lib: Path, timeout: float = 300, **params: object) -> dict:
    """Run one scenario in a child; a signal, a nonzero status or a FAIL line fails the test."""
    args = [sys.executable, str(SCRIPT), scenario, str(lib), *(f"{k}={v}" for k, v in params.items())]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        pytest.fail(f"{scenario}: the process died of {signal.Signals(-proc.returncode).name}\n{out[-3000:]}")
    assert proc.returncode == 0, f"{scenario}: exit status {proc.returncode}\n{out[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_concurrent_failing_calls_get_their_own_error(backend: str) -> None:
    """Finding 1: 6 threads whose calls fail at once each get a ProgramError with their own message."""
    r = run_scenario("errors", probe(backend), iterations=2000 if LONG else 300, threads=8 if LONG else 6)
    assert r["program_errors"] >= r["threads"] * 200 and r["ok"] > 0


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_close_while_threads_call(backend: str) -> None:
    """Finding 2: close() waits for calls in flight; later calls raise InvalidHandleError."""
    r = run_scenario("close", probe(backend), rounds=200 if LONG else 30, threads=4)
    assert r["rounds"] == (200 if LONG else 30)
    assert r["invalid_after_close"] == 4 * r["rounds"]  # every thread saw the close, none crashed
    assert r["calls"] > 0


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_exit_with_daemon_thread_calling(backend: str) -> None:
    """Finding 2: the interpreter exits cleanly while a daemon thread is in the middle of calls."""
    lib = probe(backend)
    for i in range(60 if LONG else 12):
        r = run_scenario("exit", lib, timeout=120, delay_ms=float(5 + 7 * (i % 6)))
        assert r == {"exited": 1}


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_free_while_another_thread_passes_the_handle(backend: str) -> None:
    """Finding 2: free() races a call using the handle: right values or InvalidHandleError."""
    r = run_scenario("free_vs_pass", probe(backend), rounds=1000 if LONG else 150)
    assert r["invalid"] == r["rounds"]


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_two_threads_consume_one_handle(backend: str) -> None:
    """Finding 2: threads consuming one handle: one result, InvalidHandleError for the others."""
    r = run_scenario("double_consume", probe(backend), rounds=1500 if LONG else 200, threads=3)
    assert r["invalid"] == 2 * r["rounds"]


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_thread_stress(backend: str) -> None:
    """Calls, failing calls, free, consume, reads and close, mixed at random over several threads."""
    seconds, threads = (60.0, 8) if LONG else (3.0, 4)
    r = run_scenario("stress", probe(backend), timeout=seconds * 4 + 60, seconds=seconds, threads=threads)
    print(f"stress {backend}: {json.dumps(r)}")
    assert r["closes"] == 3 and r["invalid_after_close"] == 3 * threads
    assert r["ops"] > 100 and r["program_errors"] > 0


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_gil_released_during_a_long_call(backend: str) -> None:
    """A long call (and the sync it needs) holds up neither plain Python threads nor a call on
    another context; a second call on the same context waits for the first (the context lock)."""
    import threading
    import time

    import numpy as np

    import pybridge.futhark as pf

    path = probe(backend)
    with pf.load(path) as lib, pf.load(path) as other:
        xs = lib.types["[]f32"].new(np.ones(4_000_000, dtype=np.float32))
        lib.chain30(xs).free()
        lib.sync()
        t0 = time.perf_counter()
        lib.sum(lib.chain30(xs))  # a scalar result: includes the sync
        one_call = time.perf_counter() - t0
        done = threading.Event()

        def long_call() -> None:
            for _ in range(3):
                lib.sum(lib.chain30(xs))
            done.set()

        worker = threading.Thread(target=long_call)
        spins = other_calls = 0
        start = time.perf_counter()
        worker.start()
        while not done.is_set():
            spins += 1
            if spins % 1000 == 0:
                other.trivial(1)  # another context: never waits for lib's lock
                other_calls += 1
        elapsed = time.perf_counter() - start
        worker.join()
    # With the GIL held through the calls, this thread could not have run for ~3 call durations.
    assert elapsed > 2 * one_call, (elapsed, one_call)
    assert spins > 10_000 and other_calls > 10, (spins, other_calls, elapsed)
