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

import argparse
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..distribution import install_hint
from .common import positive_int, show
from .timing import Timing, _summary, time_host

__all__ = ["FILLER_BYTES", "add_size_arguments", "format_rows", "futhark_cuda", "gpu_unavailable", "main_for", "mark_target", "run_gpu_or_cpu", "time_device", "time_host",
           "with_share"]

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
        return f"PyCUDA is not installed ({install_hint('cuda')})"
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


def with_share(rows: list[dict[str, Any]], metric: str, is_reference: Callable[[dict[str, Any]], bool],
               column: str) -> list[dict[str, Any]]:
    """Sets ``column`` of every row to 100 * metric / the reference row's metric at the same size."""
    ref = {r["size"]: r[metric] for r in rows if is_reference(r)}
    for r in rows:
        if r["size"] in ref:
            r[column] = 100.0 * r[metric] / ref[r["size"]]
    return rows


def add_size_arguments(parser: argparse.ArgumentParser, what: str, metavar: str, gpu_sizes: Sequence[int],
                       cpu_sizes: Sequence[int], repeat: int) -> None:
    """--sizes, --repeat and --no-futhark, as run_gpu_or_cpu reads them."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", metavar=metavar, default=None,
                        help=f"{what} (default {' '.join(map(str, gpu_sizes))}; "
                        f"without a GPU {' '.join(map(str, cpu_sizes))})")
    parser.add_argument("--repeat", type=positive_int, default=repeat, help="timed samples per row (median reported)")
    parser.add_argument("--no-futhark", action="store_true", help="leave out Futhark's rows")


def run_gpu_or_cpu(args: argparse.Namespace, gpu_rows: Callable[[list[int], int, bool], list[dict[str, Any]]],
                   cpu_rows: Callable[[list[int], int], list[dict[str, Any]]], gpu_sizes: Sequence[int],
                   cpu_sizes: Sequence[int]) -> list[dict[str, Any]]:
    """The GPU rows, or without a GPU a line saying why and the (smaller) CPU rows. ``args.quick``
    (``pybridge bench --quick``): the CPU sizes and at most 3 samples, GPU or not."""
    quick = bool(getattr(args, "quick", False))
    repeat = min(args.repeat, 3) if quick else args.repeat
    reason = gpu_unavailable()
    if reason is not None:
        show(f"no GPU: {reason}; GPU rows skipped, NumPy (CPU) rows only")
        return cpu_rows(list(args.sizes or cpu_sizes), repeat)
    return gpu_rows(list(args.sizes or (cpu_sizes if quick else gpu_sizes)), repeat, not args.no_futhark)


def mark_target(rows: list[dict[str, Any]], column: str, bound: float,
                applies: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """For pybridge's own rows where the target ``applies``: ``pct_of_reference`` (``column``) and
    ``target_met`` (>= ``bound``), which BENCHMARKS.md's target table reads."""
    for r in rows:
        if r["impl"].startswith("pybridge") and not math.isnan(r.get(column, math.nan)) and applies(r):
            r["pct_of_reference"] = round(r[column], 1)
            r["target_met"] = r[column] >= bound
    return rows


def main_for(module: Any, columns: Sequence[str], sort_key: Callable[[dict[str, Any]], Any],
             argv: list[str] | None = None) -> None:
    """``python -m pybridge.bench.<module>``: parse ``module``'s arguments, run it, print the table."""
    name = module.__spec__.name if getattr(module, "__spec__", None) else module.__name__  # not "__main__"
    parser = argparse.ArgumentParser(prog=f"python -m {name}", description=module.HELP)
    module.add_arguments(parser)
    rows = module.run(parser.parse_args(argv))
    show(format_rows(sorted(rows, key=sort_key), columns))
