"""Timing that respects asynchrony: warm up first, synchronise inside the timed region, report
medians. Futhark and CUDA calls return before the work is done, so a timer that does not sync
measures only the launch.

- ``time_host(fn, sync)``: wall clock around ``fn(); sync()`` (right for Futhark on any backend:
  its cuda backend runs on its own context and stream, which only ``futhark_context_sync`` waits for).
- ``time_cuda_events(fn, stream)``: CUDA events recorded on ``stream`` around ``fn()`` (right for
  kernels we launch; the events measure device time without host overhead).
"""

from __future__ import annotations

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
    return _summary(samples)


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
