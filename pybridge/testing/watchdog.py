"""Time limits that show where a run hung: when one passes, every thread's stack is written and the
process exits with status 1, so that a hang (a lock an interrupt left held, a Futhark wait that
never ends) ends a test run, naming the place, instead of stopping it.

    token = start(300)      # or: with limit(300): ...
    ...
    stop(token)

faulthandler does the work: its timer runs in a C thread, so it fires even while the hung thread
holds the GIL, which a Python watchdog thread could not. It has one timer per process, so limits
nest here (the earliest deadline is the one armed); a timer armed by other code (pytest's
``faulthandler_timeout``) is replaced while a limit is on. The stacks go to ``report_to``'s file
(default: standard error at the moment a limit starts); under pytest, whose capture would swallow
them, tests/conftest.py points it at pytest's own copy of the terminal's stderr.
"""

from __future__ import annotations

import faulthandler
import itertools
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator

_deadlines: dict[int, float] = {}  # token -> time.monotonic() deadline, for the limits now on
_tokens = itertools.count(1)
_report: IO[str] | int | None = None  # None: sys.stderr


def report_to(file: IO[str] | int | None) -> None:
    """Where the stacks go when a limit passes (a file or a file descriptor; None: sys.stderr)."""
    global _report
    _report = file
    _arm()


def _arm() -> None:
    if not _deadlines:
        faulthandler.cancel_dump_traceback_later()
        return
    left = max(0.001, min(_deadlines.values()) - time.monotonic())
    faulthandler.dump_traceback_later(left, exit=True, file=sys.stderr if _report is None else _report)


def start(seconds: float) -> int:
    """Start a limit of ``seconds``; the token stops it."""
    if not seconds > 0:
        raise ValueError(f"a time limit must be positive, got {seconds!r}")
    token = next(_tokens)
    _deadlines[token] = time.monotonic() + seconds
    _arm()
    return token


def stop(token: int) -> None:
    """Stop a limit (idempotent); the next earliest one, if any, is armed again."""
    if _deadlines.pop(token, None) is not None:
        _arm()


@contextmanager
def limit(seconds: float) -> Iterator[None]:
    token = start(seconds)
    try:
        yield
    finally:
        stop(token)


__all__ = ["limit", "report_to", "start", "stop"]
