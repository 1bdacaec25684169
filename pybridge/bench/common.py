"""What the ``pybridge bench`` subcommands share: rows, the libraries they time, the GPU probe."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..cliargs import positive_int  # noqa: F401 - the bench modules' argparse type, imported from here
from ..paths import find_build_file


def show(text: str) -> None:
    """Print ``text`` to stdout. When the reader has gone (``pybridge bench ... | head``), printing
    stops quietly and the run goes on, so that its --json / --markdown files are still written."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # a wrapper without a descriptor
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open: it is stdout now
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)  # later prints (and the flush at exit) go nowhere
        os.close(devnull)


def row(benchmark: str, impl: str, size: int | None, stats: dict[str, float] | None, **extra: Any) -> dict[str, Any]:
    """One result row: {"benchmark", "impl", "size", "median_us", "min_us", "iqr_us", ...}."""
    out: dict[str, Any] = {"benchmark": benchmark, "impl": impl, "size": size, "median_us": None}
    if stats:
        out.update(stats)
    out.update(extra)
    return out


def skipped(benchmark: str, impl: str, reason: str, size: int | None = None) -> dict[str, Any]:
    """A row that could not run here, with the reason (kept in tables, JSON and BENCHMARKS.md)."""
    return {"benchmark": benchmark, "impl": impl, "size": size, "median_us": None, "skipped": reason}


def gpu_status() -> tuple[bool, str]:
    """(usable, why not): an NVIDIA driver with a device, and PyCUDA for pybridge.cuda."""
    try:
        from ..backends import gpu_present

        present, why = gpu_present()
    except Exception as e:  # noqa: BLE001
        return False, f"GPU probe failed: {e}"
    if not present:
        return False, f"no GPU here ({why})"
    return True, ""


def pycuda_status() -> tuple[bool, str]:
    try:
        import pycuda.driver  # noqa: F401
    except ImportError as e:
        return False, f"PyCUDA not installed ({e})"
    return True, ""


def probe_library(backend: str) -> Path | None:
    """tests/reference/probe.fut as `make` built it for ``backend`` (in a checkout), or None."""
    return find_build_file(f"reference/{backend}/libprobe.so")


def optional(module: str) -> tuple[Any, str]:
    """(module, "") or (None, why it is missing)."""
    import importlib

    try:
        return importlib.import_module(module), ""
    except Exception as e:  # noqa: BLE001 - a broken install is "missing" for a benchmark
        return None, f"{module} not importable ({type(e).__name__}: {str(e)[:80]})"


def cuda_sync() -> Any:
    """A function that synchronises the primary context (pybridge.cuda's, CuPy's, PyTorch's)."""
    from ..cuda import _driver
    from ..cuda.context import ensure_context

    ensure_context()
    fn = _driver._fn("cuCtxSynchronize")

    def sync() -> None:
        _driver.check(fn(), "cuCtxSynchronize")

    return sync
