"""Ctrl-C scenarios for tests/test_reliability3.py, one per child process (a crash is then a failed
test with its signal, not a dead pytest):

    python tests/interrupt_scenarios.py <scenario> <backend> [key=value ...]

A timer thread sends SIGINT to the process (``os.kill(os.getpid(), SIGINT)``, as Ctrl-C does) at a
random moment of each call; the calls' durations are measured first so that the moments spread
over the call itself and a little after it. The last stdout line is a JSON summary the test reads.
"""

from __future__ import annotations

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


def settle(ctx) -> None:
    gc.collect()
    ctx.sync()
    ctx.clear_caches()


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


if __name__ == "__main__":
    scenario, backend, *rest = sys.argv[1:]
    params = {k: int(v) for k, v in (a.split("=", 1) for a in rest)}
    print(json.dumps({"calls": calls, "consume": consume, "close": close}[scenario](backend, **params)))
