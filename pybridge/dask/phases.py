"""Where a task's time goes, phase by phase, when a worker is asked to record it (``pybridge bench
scaling`` asks, for B2's halo tasks, in runs apart from the timed ones).

    client.run(phases.record, True)     # the workers keep a record of every halo task from now on
    ...                                  # run graphs
    got = client.run(phases.take)        # {worker: [record, ...]}; the records are dropped there
    client.run(phases.record, False)

A record has, for each phase, its device time (``<phase>_us``: CUDA events on the task thread's
current CuPy stream, which Futhark's work is ordered on; host clocks for host blocks) and its host
time (``<phase>_host_us``), the task's wall-clock start and end (``time.time()``, comparable between
the worker processes of one machine and with the client's), its process, and what the task adds
(its rank). ``pbd.map_blocks`` tasks record their start and end only. When not recording, a task
pays one global read (``clock`` returns None).
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

#: Records kept per worker process (the oldest are dropped): enough for a few runs of a row.
KEEP = 256

_records: deque[dict[str, Any]] | None = None


def record(on: bool) -> None:
    """Start (``True``, with no records) or stop (``False``, records dropped) recording in this process."""
    global _records
    _records = deque(maxlen=KEEP) if on else None


def take() -> list[dict[str, Any]]:
    """The records made since the last ``take`` (or ``record(True)``), removed."""
    if _records is None:
        return []
    out = list(_records)
    _records.clear()
    return out


class PhaseClock:
    """Marks between phases: ``mark(name)`` ends the phase called ``name``."""

    def __init__(self, device: bool):
        self.start = time.time()
        self.device = device
        self.names: list[str] = []
        self.host = [time.perf_counter()]
        self.events: list[Any] = []
        self.spans: list[tuple[str, Any, Any]] = []
        if device:
            import cupy

            self._cupy = cupy
            self.events.append(self._event())

    def _event(self) -> Any:
        e = self._cupy.cuda.Event()
        e.record(self._cupy.cuda.get_current_stream())
        return e

    def span(self, name: str, start: Any, end: Any) -> None:
        """A device interval timed apart from the marks (work on another stream): two CUDA events
        (made with timing on)."""
        self.spans.append((name, start, end))

    def mark(self, name: str) -> None:
        self.names.append(name)
        self.host.append(time.perf_counter())
        if self.device:
            self.events.append(self._event())

    def finish(self, **info: Any) -> None:
        """Kept as a record (waiting for the device work marked, so the events can be read)."""
        out: dict[str, Any] = dict(info)
        if self.device:
            self.events[-1].synchronize()
        for i, name in enumerate(self.names):
            out[f"{name}_host_us"] = (self.host[i + 1] - self.host[i]) * 1e6
            if self.device:
                out[f"{name}_us"] = self._cupy.cuda.get_elapsed_time(self.events[i], self.events[i + 1]) * 1e3
            else:
                out[f"{name}_us"] = out[f"{name}_host_us"]
        for name, a, b in self.spans:
            b.synchronize()
            out[f"{name}_us"] = self._cupy.cuda.get_elapsed_time(a, b) * 1e3
        out["start"], out["end"], out["pid"] = self.start, time.time(), os.getpid()
        if _records is not None:
            _records.append(out)


def clock(device: bool) -> PhaseClock | None:
    """A clock when this process records, else None."""
    return PhaseClock(device) if _records is not None else None
