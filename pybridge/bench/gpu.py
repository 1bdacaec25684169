"""What the kernel benchmarks (``bandwidth``, ``matmul``) share: is there a GPU, device timing with
the host kept ahead of the device, Futhark's cuda programs, and a plain-text table.

Device timing (``time_device``): each sample first queues a large device-to-device copy (a filler
that also evicts the inputs from L2), then records an event, queues ``inner`` calls, records a
second event; the median over samples of (elapsed / inner) is the device time per call. The filler
keeps the device busy while Python queues the calls, so the events measure the kernels and not the
host's launch overhead (without it, a 20 µs kernel behind 30 µs of Python would read 30 µs).
Events are recorded on the legacy default stream, where pybridge's operations (``stream=None``),
PyCUDA and CuPy's default stream all run.

Futhark's cuda backend runs in a context of its own, whose streams those events do not see: its
rows are wall time around call + ``futhark_context_sync`` (``time_host``), which includes one
launch and one synchronisation (some microseconds) that the event timings do not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .timing import Timing, _summary, time_host

__all__ = ["FILLER_BYTES", "format_rows", "futhark_cuda", "gpu_unavailable", "time_device", "time_host"]

# 512 MiB copied before each sample: ~0.35 ms on an H100, more than the Python overhead of the
# calls queued behind it, and ten times the L2.
FILLER_BYTES = 512 << 20


def gpu_unavailable() -> str | None:
    """None when pybridge.cuda can run kernels here, else why not (one line)."""
    try:
        from pybridge import cuda
    except Exception as e:  # noqa: BLE001 - any import failure means no GPU rows
        return f"pybridge.cuda cannot be imported ({e})"
    if not cuda.have_pycuda():
        return "PyCUDA is not installed (pip install 'pybridge[cuda]')"
    if cuda.device_count() == 0:
        return "no CUDA device found"
    return None


class _Filler:
    """A device-to-device copy of FILLER_BYTES, queued on the legacy default stream."""

    def __init__(self) -> None:
        from pybridge import cuda
        from pybridge.cuda.context import pycuda_driver

        self._drv = pycuda_driver()
        self._src = cuda.to_device(np.random.default_rng(0).random(FILLER_BYTES // 4, dtype=np.float32))
        self._dst = cuda.empty(FILLER_BYTES // 4, np.float32)

    def __call__(self) -> None:
        self._drv.memcpy_dtod_async(self._dst.ptr, self._src.ptr, FILLER_BYTES, None)


_filler: _Filler | None = None


def time_device(fn: Callable[[], Any], *, inner: int = 5, repeat: int = 15, warmup: int = 2) -> Timing:
    """Median device time per call of ``fn`` (see the module docstring)."""
    global _filler
    from pybridge import cuda

    if _filler is None:
        _filler = _Filler()
    for _ in range(warmup):
        fn()
    start, end = cuda.Event(), cuda.Event()
    samples: list[float] = []
    for _ in range(repeat):
        _filler()
        start.record(None)
        for _ in range(inner):
            fn()
        end.record(None)
        end.synchronize()
        samples.append(end.time_since(start) / 1e3 / inner)
    return _summary(samples)


@functools.lru_cache(maxsize=None)
def futhark_cuda(program: str) -> Any:
    """Futhark's ``program`` compiled with the cuda backend (build/futhark/cuda), or raises."""
    import pybridge.futhark as pf

    return pf.load(program, backend="cuda")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v == 0 or abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.1f}"
        return f"{v:.2g}"
    return "-" if v is None else str(v)


def format_rows(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain-text table of ``rows`` (dicts), columns in first-seen order unless given."""
    if columns is None:
        seen: dict[str, None] = {}
        for r in rows:
            for key in r:
                seen.setdefault(key, None)
        columns = list(seen)
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
    return "\n".join(lines)


def host_timing(fn: Callable[[], Any], sync: Callable[[], Any] | None, repeat: int = 10) -> Timing:
    """Wall time of ``fn(); sync()`` (Futhark rows, CPU rows)."""
    return time_host(fn, sync, warmup=2, repeat=repeat)
