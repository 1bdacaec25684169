"""Ctrl-C scenarios for tests/test_reliability3.py, one per child process (a crash is then a failed
test with its signal, not a dead pytest):

    python tests/interrupt_scenarios.py <scenario> <backend> [key=value ...]

A timer thread sends SIGINT to the process (``os.kill(os.getpid(), SIGINT)``, as Ctrl-C does) at a
random moment of each call; the calls' durations are measured first so that the moments spread
over the call itself and a little after it. The last stdout line is a JSON summary the test reads.
"""

from __future__ import annotations

import _imp  # lock_held(): CPython's import lock
import ctypes
import gc
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

import pybridge.futhark as pf
from pybridge.futhark import callpath
from pybridge.testing.alarm import Alarm

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def interrupted(fn, delay: float) -> tuple[bool, object]:
    """Run ``fn()`` with a SIGINT sent after ``delay`` seconds: (interrupted?, result or None). The
    signal always lands inside this function (it waits for the timer, then for the handler)."""
    t = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    out = None
    try:
        t.start()
        out = fn()
        t.join()
        time.sleep(0.005)  # the handler runs at the end of this call at the latest
        return False, out
    except KeyboardInterrupt:
        t.join()
        return True, None


def duration(fn, ctx) -> float:
    """The shortest of three warm runs of ``fn()`` (its result freed), in seconds."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn().free()
        ctx.sync()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-4)


def _malloc_trim() -> None:
    """Give glibc's free heap memory back to the system (its arenas keep what was freed)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def settle(ctx) -> None:
    """Memory back to what values hold: the GC run, Futhark's free list (clear_caches) and glibc's
    free heap memory (malloc_trim) given back. Without the trim a freed 25 MB block may stay in
    glibc's heap (its mmap threshold rises to the size of a freed mapped block): rss then shows it
    though nothing leaked (RELIABILITY.md, "Memory after many calls")."""
    gc.collect()
    ctx.sync()
    ctx.clear_caches()
    _malloc_trim()


def calls(backend: str, rounds: int = 30, seed: int = 0, n: int = 25_000_000) -> dict:
    """Calls with a large result (aliasing.fut big n: n bytes), fast path and general path:
    afterwards no value is registered but those held, and memory is back where it was."""
    rng = random.Random(seed)
    lib = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend)
    ctx = lib.context
    d = duration(lambda: lib.big(n), ctx)
    settle(ctx)
    base, base_live = rss(), ctx.live_values
    hits = 0
    for i in range(rounds):
        general = i % 2 == 1  # a keyword call takes the general path
        fn = (lambda: lib.big(n=n)) if general else (lambda: lib.big(n))
        hit, out = interrupted(fn, rng.uniform(0, 1.5 * d))
        hits += hit
        del out
    settle(ctx)
    grown = rss() - base
    h = lib.big(16)  # still usable
    ok = h.shape == (16,)
    return {"rounds": rounds, "interrupted": hits, "call_s": d, "rss_growth": grown, "result_bytes": n,
            "live": ctx.live_values - base_live - 1, "usable": ok}


def consume(backend: str, rounds: int = 30, seed: int = 0, n: int = 10_000_000) -> dict:
    """Consuming calls (types.fut fill: *[]i32 overwritten in place) interrupted at random: the
    argument is either consumed (invalid) or untouched (valid, its data unchanged)."""
    rng = random.Random(seed)
    lib = pf.load(ROOT / "tests" / "reference" / "types.fut", backend=backend)
    ctx = lib.context
    kind = lib.types["[]i32"]
    data = np.zeros(n, np.int32)
    d = duration(lambda: lib.fill(kind.new(data), 7), ctx)
    settle(ctx)
    base, base_live = rss(), ctx.live_values
    hits = consumed = kept = 0
    bad: list[str] = []
    for i in range(rounds):
        x = kind.new(data)
        how = i % 3  # fast path, keyword (general path), handle inside the general path's checks
        call = [lambda: lib.fill(x, 7), lambda: lib.fill(xs=x, v=7), lambda: lib.fill(x, np.int32(7))][how]
        pre = 0.3 * d  # some signals land before the call starts

        def fn():
            time.sleep(pre)
            return call()

        hit, out = interrupted(fn, rng.uniform(0, pre + 1.5 * d))
        hits += hit
        if out is not None and x.valid:
            bad.append(f"round {i}: the call returned but its consumed argument is still valid")
        if x.valid:
            kept += 1
            if int(x.numpy()[0]) != 0 or int(x.numpy()[-1]) != 0:
                bad.append(f"round {i}: a valid argument shows data the call wrote")
            x.free()
        else:
            consumed += 1
        del out, x
    settle(ctx)
    return {"rounds": rounds, "interrupted": hits, "consumed": consumed, "kept": kept, "bad": bad,
            "rss_growth": rss() - base, "result_bytes": 4 * n, "live": ctx.live_values - base_live}


def close(backend: str, rounds: int = 8, seed: int = 0, values: int = 20_000) -> dict:
    """close() interrupted at a random moment while it frees many values; a second close() finishes:
    nothing stays registered, the C context is freed, handles are invalid, memory is given back."""
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        lib = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend)
        kind = lib.types["[]i32"]
        chunk = np.ones(4096, np.int32)
        hs = [kind.new(chunk) for _ in range(values)]
        lib.context.sync()
        probe = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend)
        ps = [probe.types["[]i32"].new(chunk) for _ in range(values)]
        t0 = time.perf_counter()
        probe.close()
        d = time.perf_counter() - t0
        del ps, probe
        hit, _ = interrupted(lib.close, rng.uniform(0, 0.5 * d))
        state = lib.context._state
        left_after_interrupt = len(state.values)
        cut_short = bool(left_after_interrupt) or not getattr(state, "cfg_freed", True)
        lib.close()
        gc.collect()
        out.append({"interrupted": hit, "cut_short": cut_short, "left_after_interrupt": left_after_interrupt, "left": len(state.values),
                    "ctx_freed": getattr(state, "ctx_freed", None), "cfg_freed": getattr(state, "cfg_freed", None), "closed": lib.context.closed,
                    "handles_valid": sum(h.valid for h in hs)})
        del hs, lib
        gc.collect()
    return {"rounds": out, "values": values}


# ---------------------------------------------------------------- every check point, in turn

MB = 1 << 20


class _Mallinfo(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


_mallinfo2 = ctypes.CDLL(None).mallinfo2
_mallinfo2.restype = _Mallinfo


def malloced() -> int:
    """Bytes malloc has handed out and not taken back (glibc's mallinfo2: heap and mapped chunks)."""
    m = _mallinfo2()
    return m.uordblks + m.hblkhd


class CheckPoint:
    """A profile function raising KeyboardInterrupt at the k-th check point it sees. Python checks
    for a signal at the start of a Python function and at the end of a call of a built-in (cffi's
    API-mode functions and C methods included): the 'call' and 'c_return' events. Raising there is
    what a Ctrl-C arriving just before does. Python turns the profile function off once it raises."""

    # The Python finaliser's code (the pure-Python path's); the compiled path's runs no Python frame.
    DEL_CODE = getattr(pf.handles.Value.__del__, "__code__", None)

    def __init__(self, k: int):
        self.k, self.seen, self.skipped = k, 0, False

    def __call__(self, frame, event: str, arg) -> None:
        if event not in ("call", "c_return"):
            return
        if self.seen == self.k:
            if event == "call" and frame.f_code is self.DEL_CODE:
                # A finaliser's own start: Python drops an exception raised there, the method's
                # body never runs (RELIABILITY.md, "Ctrl-C": not covered). Skipped, counted.
                self.skipped = True
                self.k += 1
            else:
                sys.setprofile(None)
                raise KeyboardInterrupt
        self.seen += 1


def at_check_point(fn, k: int) -> CheckPoint:
    """Run ``fn()`` with a KeyboardInterrupt at its k-th check point (none if it has fewer); its
    result, if any, is dropped."""
    point = CheckPoint(k)
    try:
        sys.setprofile(point)
        try:
            fn()
        finally:
            sys.setprofile(None)
    except (KeyboardInterrupt, pf.FutharkError):
        pass
    return point


def lock_free(lock, timeout: float = 5) -> bool:
    """Another thread takes ``lock`` within ``timeout`` seconds (and releases it)."""
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=timeout) and (lock.release() or True)))
    t.start()
    t.join(timeout + 5)
    return got == [True]


def operations(lib, alias) -> dict:
    """name -> a function making (the operation to interrupt, the consumed argument or None, other
    handles it made). Arguments of 1 MB, so that a value left in memory shows in malloced()."""
    n = MB // 4
    xs, zeros = np.ones(n, np.float32), np.zeros(n, np.int32)
    pts = lib.points(xs, xs)
    blob = pts.store()

    def fill_handle():
        h = lib.types["[]i32"].new(zeros)
        return (lambda: lib.fill(h, 7)), h, []

    def set0_shared():
        h = alias.types["[]i32"].new(zeros)
        other = alias.ident(h)  # shares h's memory: set0 consumes a copy
        return (lambda: alias.set0(h, 7)), h, [other]

    plain = {
        "points(ndarray, ndarray)": lambda: lib.points(xs, xs),
        "fill(ndarray): consumes a temporary": lambda: lib.fill(zeros, 7),
        "sum_points({x: ndarray, y: ndarray})": lambda: lib.sum_points({"x": xs, "y": xs}),
        "[]f32.new(ndarray)": lambda: lib.types["[]f32"].new(xs),
        "[]point.zip(x=ndarray, y=ndarray)": lambda: lib.types["[]point"].zip(x=xs, y=xs),
        "[]point.field('x')": lambda: pts.field("x"),
        "[]point.restore": lambda: lib.types["[]point"].restore(blob),
        "numpy() of a field": lambda: pts.field("y").numpy(),
        "checked_div(1, 0): fails (fast path)": lambda: lib.checked_div(1, 0),
        "points of unequal lengths: fails (general path)": lambda: lib.points(xs, xs[:3]),
    }
    ops = {name: (lambda fn=fn: (fn, None, [])) for name, fn in plain.items()}
    ops["fill(handle): consumes it"] = fill_handle
    ops["set0(handle shared): consumes a copy"] = set0_shared
    return ops, pts


def checkpoints(backend: str, mode: str = "api") -> dict:
    """Each operation with a KeyboardInterrupt at each of its check points in turn (and close()
    with live values). After each: no lock left held (the context's: another thread takes it;
    CPython's import lock), no value registered that no handle owns, no memory left in use, a
    consumed argument invalid or unchanged, and the next failure reports its own message."""
    lib = pf.load(ROOT / "tests" / "reference" / "types.fut", backend=backend, mode=mode)
    alias = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend, mode=mode)
    ops, pts = operations(lib, alias)
    report = {"mode": lib.mode, "points": {}, "skipped": 0, "problems": []}

    def settled(collect: bool = False) -> int:
        if collect:
            gc.collect()
        for l in (lib, alias):
            l.context.sync()
            try:
                l.context.clear_caches()  # fails while a failed call's message is left pending
            except pf.FutharkError as e:
                report["problems"].append(f"a failed call's message was left pending: {e}")
        return malloced()

    def left(consumed, held: list, base: int) -> tuple[int, int]:
        """(values registered that no handle owns, bytes left in use); a full collection first
        only when there seem to be some (gc.collect() is slow), so that cycles are not counted."""
        for collect in (False, True):
            live = lib.live_values() + alias.live_values() - 1 - sum(h.valid for h in [consumed, *held] if h is not None)
            grown = settled(collect) - base
            if not live and grown <= MB // 2:
                break
        return live, grown

    def check(name: str, k: int, base: int, consumed, held: list) -> None:
        bad = report["problems"]
        if _imp.lock_held() or lib.context.lock._is_owned() or alias.context.lock._is_owned():
            bad.append(f"{name}, point {k}: a lock is left held")
        if consumed is not None and consumed.valid and consumed.numpy().any():
            bad.append(f"{name}, point {k}: the consumed argument is valid but changed")
        live, grown = left(consumed, held, base)
        if live:
            bad.append(f"{name}, point {k}: {live} value(s) registered that no handle owns")
        if grown > MB // 2:
            bad.append(f"{name}, point {k}: {grown / MB:.1f} MB left in use")
        try:
            lib.checked_div(1, 0)
        except pf.ProgramError as e:
            if "b != 0" not in str(e):
                bad.append(f"{name}, point {k}: the next failure reported another message: {e}")

    for name, make in ops.items():
        fn, consumed, held = make()
        total = at_check_point(fn, 1 << 60).seen
        del fn, consumed, held
        for k in range(total + 1):
            fn, consumed, held = make()
            base = settled(collect=k == 0) + sum(MB for h in [consumed, *held] if h is not None)
            point = at_check_point(fn, k)
            report["skipped"] += point.skipped
            check(name, k, base, consumed, held)
            for h in [consumed, *held]:
                if h is not None:
                    h.free()
            del fn, consumed, held
        report["points"][name] = total + 1
        if not lock_free(lib.context.lock) or not lock_free(alias.context.lock):  # from another thread too
            report["problems"].append(f"{name}: another thread cannot take the context lock")
    report["points"]["close()"] = close_at_check_points(backend, mode, report)
    return report


def close_at_check_points(backend: str, mode: str, report: dict) -> int:
    """close() of a context with three 1 MB values, interrupted at each check point; a second
    close() finishes: nothing registered, the C objects freed, the memory given back."""
    def fresh():
        lib = pf.load(ROOT / "tests" / "reference" / "types.fut", backend=backend, mode=mode)
        return lib, [lib.types["[]f32"].new(np.ones(MB // 4, np.float32)) for _ in range(3)]

    lib, hs = fresh()
    total = at_check_point(lib.close, 1 << 60).seen
    for k in range(total + 1):
        base = malloced()
        lib, hs = fresh()
        point = at_check_point(lib.close, k)
        report["skipped"] += point.skipped
        if lib.context.lock._is_owned() or not lock_free(lib.context.lock):
            report["problems"].append(f"close(), point {k}: the context lock is left held")
        lib.close()
        state = lib.context._state
        if state.values or not (state.ctx_freed and state.cfg_freed) or any(h.valid for h in hs):
            report["problems"].append(f"close(), point {k}: the second close() did not finish")
        del lib, hs, state
        if malloced() - base > MB // 2:
            gc.collect()
        if malloced() - base > MB // 2:
            report["problems"].append(f"close(), point {k}: {(malloced() - base) / MB:.1f} MB left in use")
    return total + 1


# ---------------------------------------------------------------- the general path, at random moments


def interrupted_at(alarm: Alarm, fn, us: float):
    """(interrupted?, result or None) of ``fn()`` with the alarm ``us`` microseconds in."""
    try:
        alarm.arm(us)
        try:
            return False, fn()
        finally:
            alarm.disarm()
    except KeyboardInterrupt:
        return True, None


def general(backend: str, rounds: int = 1500, seed: int = 0, mode: str = "api") -> dict:
    """General-path calls (NumPy arguments converted into temporaries, records given as dicts,
    consuming calls of NumPy arrays and of handles, failing calls) with SIGALRM raising
    KeyboardInterrupt at a random moment of each; a second thread makes a call after each (a lock
    left held would make it wait: it must finish within 10 s). Afterwards: nothing registered but
    what is held, memory back, the context usable."""
    rng = random.Random(seed)
    lib = pf.load(ROOT / "tests" / "reference" / "types.fut", backend=backend, mode=mode)
    ctx, i32 = lib.context, lib.types["[]i32"]
    n = 1 << 14
    xs, zeros = np.ones(n, np.float32), np.zeros(n, np.int32)

    def consume_handle():
        h = i32.new(zeros)
        try:
            return lib.fill(h, 7)
        finally:
            if h.valid and h.numpy().any():
                raise AssertionError("a valid consumed argument shows data the call wrote")
            h.free()

    calls = [lambda: lib.points(xs, xs), lambda: lib.fill(zeros, 7), lambda: lib.fill(xs=zeros, v=7),
             lambda: lib.sum_points({"x": xs, "y": xs}), lambda: lib.ranks(np.ones((3, 4)), np.ones((2, 3, 4), np.uint8), zeros > 0),
             lambda: lib.points(xs, xs[:5]), consume_handle]
    durations = []
    for fn in calls:
        t0 = time.perf_counter()
        try:
            fn()
        except pf.FutharkError:
            pass
        durations.append(time.perf_counter() - t0)
    alarm = Alarm()
    signal.signal(signal.SIGALRM, alarm.handler)
    settle(ctx)
    base, hits, stuck, errors = rss(), 0, 0, []
    for i in range(rounds):
        j = rng.randrange(len(calls))
        try:
            hit, out = interrupted_at(alarm, calls[j], rng.uniform(1, 1.5e6 * durations[j]))
        except pf.FutharkError:
            hit, out = False, None
        except AssertionError as e:
            hit, out = True, None
            errors.append(f"round {i}: {e}")
        hits += hit
        del out
        if ctx.live_values:
            errors.append(f"round {i}: {ctx.live_values} value(s) registered that no handle owns")
        worker = threading.Thread(target=lambda: lib.points(xs[:3], xs[:3]).free(), daemon=True)
        worker.start()
        worker.join(10)
        stuck += worker.is_alive()
        if worker.is_alive() or _imp.lock_held():
            break
    settle(ctx)
    return {"rounds": rounds, "interrupted": hits, "stuck": stuck, "errors": errors[:10],
            "rss_growth": rss() - base, "usable": int(lib.checked_div(6, 3)) == 2}


# ---------------------------------------------------------------- memory after many interrupted calls


def memory(backend: str, rounds: int = 600, seed: int = 0, trace: int = 0, kmax: int = 6 * MB, interrupts: int = 1) -> dict:
    """Calls of 1 MB to ``kmax`` bytes (general path with NumPy arguments, fast path with handles,
    consuming calls) with SIGALRM at a random moment of each, then what stays, step by step
    (RELIABILITY.md, "Memory after many calls"): after the calls, after glibc's ``malloc_trim(0)``,
    after ``clear_caches()``, after both; each as growth of rss, of the bytes malloc has handed out
    (``malloced``), of the free bytes its arenas keep, and (``trace=1``) of the Python heap
    (tracemalloc). ``cached``: ``malloced`` after the calls, which clear_caches then gives back
    (Futhark's free list of blocks >= 1 MiB, which 0.25.32's clear_caches kept on c and multicore).
    ``interrupts=0``: the same calls uninterrupted (the comparison)."""
    import tracemalloc

    rng = random.Random(seed)
    lib = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend)
    ctx, i32 = lib.context, lib.types["[]i32"]

    def call(c: int, k: int):
        if c == 0:
            return lib.big(k)  # a result of k bytes
        if c == 1:
            return lib.scale(np.float32(2), np.ones(k // 4, np.float32))  # general path: a temporary and a result
        if c == 2:
            h = i32.new(np.zeros(k // 4, np.int32))
            return lib.add(h, h)  # fast path with handles
        return lib.set0(i32.new(np.zeros(k // 4, np.int32)), 1)  # consumed

    def one():
        c, k = rng.randrange(4), rng.randrange(MB, kmax)
        return lambda: call(c, k)

    def state() -> dict:
        gc.collect()
        ctx.sync()
        m = _mallinfo2()
        return {"rss": rss(), "malloced": m.uordblks + m.hblkhd, "arena_free": m.fordblks,
                "python": tracemalloc.get_traced_memory()[0] if trace else 0}

    alarm = Alarm()
    signal.signal(signal.SIGALRM, alarm.handler)
    for _ in range(40):  # warm: code paths, NumPy's and pybridge's caches
        one()()
    settle(ctx)
    if trace:
        tracemalloc.start()
    base, base_live = state(), ctx.live_values
    hits = 0
    for _ in range(rounds):
        fn = one()
        t0 = time.perf_counter()
        fn()  # its duration, for the moment of the interrupt
        d = time.perf_counter() - t0
        us = rng.uniform(1, 1.2e6 * d)
        hit, out = interrupted_at(alarm, fn, us) if interrupts else (False, fn())
        hits += hit
        del out
    steps = {"calls": state()}
    _malloc_trim()
    steps["malloc_trim"] = state()
    ctx.clear_caches()
    steps["clear_caches"] = state()
    _malloc_trim()
    steps["both"] = state()
    growth = {step: {k: v - base[k] for k, v in s.items()} for step, s in steps.items()}
    return {"rounds": rounds, "interrupted": hits, "live": ctx.live_values - base_live, "growth": growth,
            "cached": growth["calls"]["malloced"], "malloc_growth": growth["both"]["malloced"],
            "rss_growth": growth["both"]["rss"]}


# ---------------------------------------------------------------- a finaliser cut short at its start


def _skip_del_once(frame, event: str, arg) -> None:
    """A profile function: a KeyboardInterrupt at the first instruction of a handle's __del__, what
    a Ctrl-C arriving just before does (CheckPoint's 'call' event); Python reports it as ignored
    and skips the method's body."""
    if event == "call" and frame.f_code is pf.handles.Value.__del__.__code__:
        sys.setprofile(None)
        raise KeyboardInterrupt


def orphan(backend: str, tries: int = 500) -> dict:
    """A live handle dropped with its __del__ cut short at the start leaves its 1 MB value
    registered (an orphan); a new handle made at the same address (Python reuses it at once, in
    practice) must free that value, not take over its entry, for each way a handle is made: new()
    (ArrayHandle.__init__), an entry point's array result (call plan; general path: ArrayHandle.__init__
    through Codec.take) and its record result (call plan, an OpaqueHandle holding the only
    references to two 1 MB arrays), and a plan's result (an address in the registry on the compiled
    path) whose key new() takes. Before context.py's free_orphan the value was never freed."""
    lib = pf.load(ROOT / "tests" / "programs" / "aliasing.fut", backend=backend)
    ctx, i32 = lib.context, lib.types["[]i32"]
    data = np.ones(MB // 4, np.int32)
    held = i32.new(data)

    def pair():
        a, b = i32.new(data), i32.new(data)
        p = lib.mkpair(a, b)
        a.free()
        b.free()
        return p

    new, fast = (lambda: i32.new(data)), (lambda: lib.add(held, held))
    # how -> (what makes the orphan, what makes the handles that may take its address)
    makers = {"new": (new, new), "fast path": (fast, fast), "general path": (lambda: lib.add(data, data),) * 2,
              "record (fast path)": (pair, pair), "fast path, then new()": (fast, new)}
    out = {}
    for how, (first, make) in makers.items():
        settle(ctx)
        base, live = malloced(), ctx.live_values
        h = first()
        address = id(h)
        if callpath.compiled is None:
            sys.setprofile(_skip_del_once)
            try:
                del h  # __del__ cut short: "Exception ignored in ... Value.__del__" on stderr
            finally:
                sys.setprofile(None)
        else:  # the C finaliser has no first instruction to interrupt; a Ctrl-C in each of its two
            # lock waits leaves the same state: the handle gone, its value registered. Made so here.
            h._status = "lost by a finaliser that was interrupted twice"
            del h
        orphaned = ctx.live_values - live
        others, reused = [], False
        for _ in range(tries):  # handles until one takes the address (the others keep theirs)
            x = make()
            others.append(x)
            if address not in ctx._state.values or id(x) == address:  # taken (perhaps by a handle made inside make())
                reused = True
                break
        for x in others:
            x.free()
        del x, others
        settle(ctx)
        out[how] = {"orphaned": orphaned, "reused": reused, "live": ctx.live_values - live,
                    "malloc_growth": malloced() - base}
    return {"cases": out, "usable": int(lib.sum(held)) == MB // 4}


if __name__ == "__main__":
    # Ctrl-C as Python sets it up in a terminal: a runner started in the background without job
    # control (`nohup cmd &` from a script) leaves SIGINT ignored, and Python then keeps it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    scenario, backend, *rest = sys.argv[1:]
    params = {k: int(v) if v.isdigit() else v for k, v in (a.split("=", 1) for a in rest)}
    scenarios = {"calls": calls, "consume": consume, "close": close, "checkpoints": checkpoints, "general": general,
                 "memory": memory, "orphan": orphan}
    print(json.dumps(scenarios[scenario](backend, **params)))
