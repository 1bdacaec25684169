"""Timing that respects asynchrony: warm up first, synchronise inside the timed region, report
medians. Futhark and CUDA calls return before the work is done, so a timer that does not sync
measures only the launch.

- ``time_host(fn, sync)``: wall clock around ``fn(); sync()`` (right for Futhark on any backend:
  its cuda backend runs on its own context and stream, which only ``futhark_context_sync`` waits for).
- ``time_cuda_events(fn, stream)``: CUDA events recorded on ``stream`` around ``fn()`` (right for
  kernels we launch; the events measure device time without host overhead).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    mean_s: float
    repeat: int

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    def __str__(self) -> str:
        return f"{fmt_seconds(self.median_s)} (min {fmt_seconds(self.min_s)}, n={self.repeat})"


def fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _summary(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), statistics.fmean(samples), len(samples))


def time_host(
    fn: Callable[[], Any],
    sync: Callable[[], Any] | None = None,
    warmup: int = 3,
    repeat: int = 20,
    min_time: float = 0.0,
) -> Timing:
    """Median wall time of ``fn(); sync()``; keeps going until ``min_time`` seconds have passed."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeat or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        samples.append(time.perf_counter() - t0)
        if len(samples) > 100 * repeat:
            break
    return _summary(samples)


def time_per_call(fn: Callable[[], Any], sync: Callable[[], Any] | None = None, calls: int = 1000, warmup: int = 100, repeat: int = 5) -> Timing:
    """Median over ``repeat`` batches of the time per call of ``calls`` back-to-back calls, one sync
    per batch: per-call overhead without a sync's cost in every sample."""
    return _summary(_batch_samples(fn, sync, calls, repeat, warmup))


def _batch_samples(fn: Callable[[], Any], sync: Callable[[], Any] | None, calls: int, repeat: int,
                   warmup: int) -> list[float]:
    """Seconds per call of ``repeat`` batches of ``calls`` calls, one sync per batch, after warm-up."""
    if calls < 1 or repeat < 1:
        raise ValueError(f"calls and repeat must be at least 1, got calls={calls}, repeat={repeat}")
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) / calls)
    return samples


def time_cuda_events(fn: Callable[[], Any], stream: Any = None, warmup: int = 3, repeat: int = 20) -> Timing:
    """Median device time of ``fn()`` between two CUDA events on ``stream`` (a PyCUDA stream, or
    None for the default stream). Needs PyCUDA."""
    import pycuda.driver as drv

    for _ in range(warmup):
        fn()
    start, end = drv.Event(), drv.Event()
    samples = []
    for _ in range(repeat):
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        samples.append(end.time_since(start) / 1e3)
    return _summary(samples)


# ------------------------------------------------------------------ pybridge bench rows


def summarize(samples_s: list[float]) -> dict[str, float]:
    """median / min / interquartile range in microseconds (what every ``pybridge bench`` row holds)."""
    xs = sorted(samples_s)
    if len(xs) >= 4:
        q = statistics.quantiles(xs, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = xs[-1] - xs[0]
    return {"median_us": statistics.median(xs) * 1e6, "min_us": xs[0] * 1e6, "iqr_us": iqr * 1e6,
            "samples": len(xs)}


def measure(fn: Callable[[], Any], sync: Callable[[], Any] | None = None, *, calls: int = 1000,
            repeat: int = 7, warmup: int | None = None) -> dict[str, float]:
    """Per-call time of ``fn`` over ``repeat`` batches of ``calls`` back-to-back calls, one
    ``sync()`` per batch inside the timed region (asynchronous work is counted, one sync's cost is
    spread over the batch). Warm-up: ``warmup`` calls (default calls // 10 + 3) and a sync."""
    return summarize(_batch_samples(fn, sync, calls, repeat, calls // 10 + 3 if warmup is None else warmup))


def measure_interleaved(fns: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]], *, calls: int = 1000,
                        repeat: int = 7, warmup: int | None = None) -> dict[str, dict[str, float]]:
    """:func:`measure` of several ``(fn, sync)`` at once, their batches taken in turn (round ``r``
    starts at the ``r``-th one): rows compared with each other (pybridge against the bare call) see
    the same machine, where measuring one after the other lets a drift in clocks or load between
    them pass for a difference. Warm-up as :func:`measure`, for each before any is timed."""
    if calls < 1 or repeat < 1:
        raise ValueError(f"calls and repeat must be at least 1, got calls={calls}, repeat={repeat}")
    names = list(fns)
    for fn, sync in fns.values():
        _batch_samples(fn, sync, calls, 1, calls // 10 + 3 if warmup is None else warmup)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            fn, sync = fns[name]
            samples[name] += _batch_samples(fn, sync, calls, 1, 0)
    return {name: summarize(samples[name]) for name in names}


def whole_unit_mean(readings: list[float], unit: float = 1.0) -> float:
    """What a timer that counts whole units (of ``unit``) says a call lasts: the mean of its
    readings that lie within one unit of their median (the median itself where none does). A call
    of D units reads floor(D) or ceil(D) as the timer's phase falls (random from run to run), in
    proportions whose mean is D; their median is D rounded to a whole unit (a 1.3 µs call reads 1,
    a 30% error), the mean is not. Readings further out (a run preempted) are left out, as a
    median leaves them out. For a call spread over many units this is a local mean around the
    median."""
    if not readings:
        raise ValueError("whole_unit_mean needs at least one reading")
    med = statistics.median(readings)
    near = [x for x in readings if abs(x - med) <= unit]
    return statistics.fmean(near) if near else med  # none: an even count, its middle two far apart


def paired_difference(a: list[float], b: list[float]) -> dict[str, float]:
    """``a - b`` from samples taken in pairs (``a[k]`` and ``b[k]`` one right after the other, the
    order alternating): the median of the paired differences, its 95% confidence interval and
    their interquartile range, in the samples' unit. Pairing cancels what moves both (load, clocks,
    a cache); the median of the differences is what one side adds, not the spread of one call, and
    the interval says how well it is known. The interval is distribution-free: the order statistics
    ``d[m]`` and ``d[n-1-m]`` for the largest ``m`` with P(B <= m) <= 2.5%, B ~ binomial(n, 1/2)
    the count of differences below the true median (below 6 pairs: the whole range, which then
    covers less than 95%)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired samples of equal, non-zero length needed, got {len(a)} and {len(b)}")
    d = sorted(x - y for x, y in zip(a, b))
    n = len(d)
    m, below, log_all = 0, 0.0, math.lgamma(n + 1) - n * math.log(2)
    for k in range(n // 2):
        below += math.exp(log_all - math.lgamma(k + 1) - math.lgamma(n - k + 1))  # P(B <= k)
        if below > 0.025:
            break
        m = k
    q = statistics.quantiles(d, n=4) if n >= 4 else [d[0], 0.0, d[-1]]
    return {"median": statistics.median(d), "lo": d[m], "hi": d[n - 1 - m], "iqr": q[2] - q[0], "pairs": n}


class Progress:
    """A one-line progress bar on stderr (long runs): ``with Progress(n, "overhead") as p: p.step()``.

    Drawn only where a person watches: stderr is a terminal (a log file gets no ``\\r`` lines) and
    pybridge's log shows INFO (``pybridge -q`` hides it, as it hides the log)."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        import logging
        import sys

        self.total, self.label, self.done = max(total, 1), label, 0
        self.stream = sys.stderr
        watched = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled and watched and logging.getLogger("pybridge").isEnabledFor(logging.INFO)

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.enabled:
            width = 24
            filled = width * self.done // self.total
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                              f"{self.done}/{self.total} {what[:40]:<40}")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (len(self.label) + 75) + "\r")
            self.stream.flush()
