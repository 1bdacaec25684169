"""Thread scenarios against a real Futhark library (probe.fut), each run in its own process so a crash
(segfault, abort, double free) shows as a signal in the parent's test instead of killing pytest.

    python tests/thread_scenarios.py SCENARIO LIBRARY [key=value ...]

Prints one JSON line of counts and exits 0, or prints ``FAIL: ...`` lines and exits 1. Scenarios:
errors, close, exit, free_vs_pass, double_consume, stress (see each function's docstring).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

import pybridge.futhark as pf
from pybridge.futhark import InvalidHandleError, ProgramError

failures: list[str] = []
_fail_lock = threading.Lock()


def fail(msg: str) -> None:
    with _fail_lock:
        if len(failures) < 20:
            failures.append(msg)


def add(counts: Counter, key: str) -> None:
    with _fail_lock:  # `counts[key] += 1` can lose updates between threads
        counts[key] += 1


def run_threads(n: int, target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=_guard(target), args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _guard(target: Callable[[int], None]) -> Callable[[int], None]:
    def run(t: int) -> None:
        try:
            target(t)
        except BaseException as e:  # any escape is a failure of the scenario, reported with its type
            fail(f"thread {t}: unexpected {type(e).__name__}: {e}")

    return run


def expect_bounds_error(lib: Any, xs: Any, k: int, counts: Counter) -> None:
    """index_at(xs, k) with k out of bounds: a ProgramError naming this thread's own index."""
    try:
        lib.index_at(xs, k)
    except ProgramError as e:
        if f"[{k}]" not in str(e):
            fail(f"index {k}: got another call's message: {str(e)[:160]!r}")
        add(counts, "program_errors")
        return
    except pf.FutharkError as e:
        fail(f"index {k}: {type(e).__name__} instead of ProgramError: {str(e)[:160]!r}")
        return
    fail(f"index {k}: out-of-bounds call returned normally")


def scenario_errors(lib: Any, iterations: int = 300, threads: int = 6) -> dict[str, int]:
    """Concurrent failing calls: every thread gets a ProgramError with its own message."""
    xs = lib.types["[]f32"].new(np.arange(10, dtype=np.float32))
    counts: Counter = Counter()
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(iterations):
            if i % 4 == 0:
                v = lib.index_at(xs, i % 10)
                if v != i % 10:
                    fail(f"index_at(xs, {i % 10}) = {v}")
                add(counts, "ok")
            else:
                expect_bounds_error(lib, xs, 1_000_000 * (t + 1) + i, counts)

    run_threads(threads, work)
    return dict(counts, threads=threads)


def scenario_close(path: str, rounds: int = 40, threads: int = 4) -> dict[str, int]:
    """close() while other threads call: calls before it succeed, calls after it raise
    InvalidHandleError; nothing else."""
    counts: Counter = Counter()
    rng = random.Random(1)
    for _ in range(rounds):
        lib = pf.load(path)
        xs = lib.types["[]f32"].new(np.arange(1000, dtype=np.float32))
        go = threading.Barrier(threads + 1)

        def work(t: int) -> None:
            go.wait()
            i = 0
            while True:
                i += 1
                try:
                    if i % 3 == 0:
                        lib.saxpy(2.0, xs, xs).free()
                    elif i % 3 == 1:
                        if lib.trivial(i) != i + 1:
                            fail("trivial returned a wrong value")
                    else:
                        expect_bounds_error(lib, xs, 10_000 + i, counts)
                    add(counts, "calls")
                except InvalidHandleError:
                    add(counts, "invalid_after_close")
                    return

        workers = [threading.Thread(target=_guard(work), args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        go.wait()
        time.sleep(rng.uniform(0, 0.01))
        lib.close()
        for w in workers:
            w.join()
        add(counts, "rounds")
    return dict(counts)


def scenario_exit(path: str, delay_ms: float = 20.0) -> dict[str, int]:
    """Interpreter exit with a daemon thread still calling (the parent checks the exit status)."""
    lib = pf.load(path)
    xs = lib.types["[]f32"].new(np.arange(1000, dtype=np.float32))

    def work() -> None:
        i = 0
        while True:
            i += 1
            try:
                lib.saxpy(2.0, xs, xs)  # results freed by the garbage collector, also at exit
                try:
                    lib.index_at(xs, 5000 + i)
                except ProgramError:
                    pass
            except InvalidHandleError:
                return  # the context was closed at exit: expected

    threading.Thread(target=work, daemon=True).start()
    time.sleep(delay_ms / 1000)
    return {"exited": 1}


def scenario_free_vs_pass(lib: Any, rounds: int = 200) -> dict[str, int]:
    """free() of a handle another thread is passing in: the call succeeds with right values or raises
    InvalidHandleError."""
    counts: Counter = Counter()
    rng = random.Random(2)
    x = np.arange(2000, dtype=np.float32)
    for _ in range(rounds):
        h = lib.types["[]f32"].new(x)
        go = threading.Barrier(2)

        def caller(t: int) -> None:
            go.wait()
            while True:
                try:
                    r = lib.saxpy(2.0, h, h)
                except InvalidHandleError:
                    add(counts, "invalid")
                    return
                got = r.numpy()
                if not np.array_equal(got, 3 * x):
                    fail("saxpy on a concurrently freed handle gave wrong values")
                add(counts, "calls")

        def freer(t: int) -> None:
            go.wait()
            time.sleep(rng.uniform(0, 0.002))
            h.free()

        run_threads(2, lambda t: (caller if t == 0 else freer)(t))
        add(counts, "rounds")
    return dict(counts)


def scenario_double_consume(lib: Any, rounds: int = 300, threads: int = 3) -> dict[str, int]:
    """Several threads consume one handle at once: exactly one gets the right result, the others an
    InvalidHandleError."""
    counts: Counter = Counter()
    x = np.arange(1000, dtype=np.float32)
    want = x.copy()
    want[0] += 1
    for _ in range(rounds):
        h = lib.types["[]f32"].new(x)
        go = threading.Barrier(threads)
        results: list[Any] = []

        def consume(t: int) -> None:
            go.wait()
            try:
                results.append(lib.bump(h))
            except InvalidHandleError:
                add(counts, "invalid")

        run_threads(threads, consume)
        if len(results) != 1:
            fail(f"{len(results)} of {threads} threads consumed the same handle")
        for r in results:
            if not np.array_equal(r.numpy(), want):
                fail("bump of a concurrently consumed handle gave wrong values")
            r.free()
        if h.valid:
            fail("a consumed handle still says valid")
        add(counts, "rounds")
    return dict(counts)


def scenario_stress(path: str, seconds: float = 3.0, threads: int = 6, close_rounds: int = 3) -> dict[str, int]:
    """Random mix per thread (calls on own and shared handles, failing calls, free, consume, reads,
    new), with a close() while the threads run at the end of each round."""
    counts: Counter = Counter()
    n = 257
    base = np.arange(n, dtype=np.float32)
    want_sum = float(base.sum())
    for rnd in range(close_rounds):
        lib = pf.load(path)
        f32 = lib.types["[]f32"]
        shared = [f32.new(base) for _ in range(8)]

        def work(t: int) -> None:
            rng = random.Random(1000 * rnd + t)
            own = f32.new(base)
            k = 0
            while True:
                k += 1
                try:
                    op = rng.randrange(9)
                    if op == 0:
                        if lib.trivial(k) != k + 1:
                            fail("trivial gave a wrong value")
                    elif op == 1:
                        r = lib.saxpy(2.0, own, own)
                        if k % 8 == 0 and not np.array_equal(r.numpy(), 3 * base):
                            fail("saxpy on an own handle gave wrong values")
                        if rng.random() < 0.5:
                            r.free()
                    elif op == 2:
                        expect_bounds_error(lib, own, 2**40 + 1000 * t + k % 997, counts)
                    elif op == 3:
                        try:
                            lib.saxpy(1.0, rng.choice(shared), base).free()
                        except InvalidHandleError:
                            add(counts, "shared_invalid")
                    elif op == 4:
                        i = rng.randrange(len(shared))
                        shared[i].free()  # other threads may be passing it in right now
                        shared[i] = f32.new(base)
                    elif op == 5:
                        try:
                            i = rng.randrange(len(shared))
                            shared[i] = lib.bump(shared[i])
                        except InvalidHandleError:
                            add(counts, "shared_invalid")
                    elif op == 6:
                        own.free()
                        own = f32.new(base)
                    elif op == 7:
                        try:
                            a = rng.choice(shared).numpy()
                            if a.shape != (n,):
                                fail(f"a shared handle read back with shape {a.shape}")
                        except InvalidHandleError:
                            add(counts, "shared_invalid")
                    else:
                        s = lib.sum(own)
                        if abs(s - want_sum) > 1e-3 * want_sum:
                            fail(f"sum gave {s}, expected {want_sum}")
                    add(counts, "ops")
                except InvalidHandleError:
                    if lib.closed:
                        add(counts, "invalid_after_close")
                        return
                    raise

        workers = [threading.Thread(target=_guard(work), args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        time.sleep(seconds / close_rounds)
        lib.close()  # while the threads still run: each ends at its first InvalidHandleError
        for w in workers:
            w.join()
        add(counts, "closes")
    return dict(counts, threads=threads)


def main(argv: list[str]) -> int:
    scenario, path, *rest = argv
    kwargs = {k: float(v) if "." in v else int(v) for k, v in (a.split("=", 1) for a in rest)}
    if scenario in ("close", "stress", "exit"):
        result = globals()[f"scenario_{scenario}"](path, **kwargs)
    else:
        lib = pf.load(path)
        result = globals()[f"scenario_{scenario}"](lib, **kwargs)
        lib.close()
    for f in failures:
        print("FAIL:", f)
    print(json.dumps(result))
    sys.stdout.flush()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
