"""Benchmarks: ``pybridge bench <subcommand>``. Timing helpers live in ``timing`` and are re-exported
here, so ``from pybridge import bench; bench.time_host(...)`` keeps working."""

from .timing import Timing, fmt_seconds, time_cuda_events, time_host, time_per_call

__all__ = ["Timing", "fmt_seconds", "time_cuda_events", "time_host", "time_per_call"]
