"""Waiting with a deadline on calls that have none of their own (NCCL's blocking calls).

A blocking NCCL communicator can block its caller for ever: ``ncclCommInitRank`` until every rank
joins, ``ncclGroupEnd`` while it connects to a peer that never answers, a stream sync behind a
kernel waiting for that peer. CuPy's ``cupy.cuda.nccl`` offers only blocking communicators (no
``ncclConfig_t``), so :mod:`.nccl` runs each such call on a helper thread and waits here, with a
deadline, on the task's thread; on the deadline it aborts the communicator (``ncclCommAbort``:
NCCL's way out of a stuck communicator, which stops kernels waiting for a peer and sets the flag its
host-side waits check; itself run bounded) and raises. The helper threads are daemons: one that NCCL
never releases cannot keep the worker process alive, and the task has its error either way.

No NCCL, CuPy or dask here: the functions take plain callables and are tested on CPU.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

#: Seconds an abort may take before it is given up on (the communicator is unusable either way).
ABORT_GRACE = 10.0


class Expired(Exception):
    """The deadline passed before the call finished (the caller turns it into its own error)."""


def call_by(deadline: float, call: Callable[[], Any], name: str = "pybridge-bounded") -> Any:
    """``call()`` on a daemon thread; its result (or its exception) if it finishes before
    ``deadline`` (a ``time.monotonic()`` instant), else :class:`Expired` (the call is left running)."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        raise Expired
    if "error" in box:
        raise box["error"]
    return box.get("value")


def wait_until(is_done: Callable[[], bool], deadline: float, check: Callable[[], None] | None = None,
               check_every: float = 0.05) -> None:
    """Poll ``is_done()`` until it is true, sleeping 10 µs doubling to 1 ms between polls (a wait of
    a few milliseconds costs about one poll); ``check()`` every ``check_every`` seconds raises on
    an error reported meanwhile. :class:`Expired` at ``deadline``."""
    pause = 1e-5
    next_check = time.monotonic() + check_every
    while not is_done():
        now = time.monotonic()
        if now > deadline:
            raise Expired
        if check is not None and now >= next_check:
            check()
            next_check = now + check_every
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)
    if check is not None:
        check()


def abort_within(abort: Callable[[], Any], grace: float = ABORT_GRACE) -> bool:
    """Run ``abort()`` (on a daemon thread, so an abort that itself hangs cannot hang the caller);
    whether it finished within ``grace`` seconds. Its exceptions are swallowed: after an abort the
    communicator is unusable whatever it reported."""
    try:
        call_by(time.monotonic() + grace, abort, name="pybridge-abort")
    except Expired:
        return False
    except Exception:  # noqa: BLE001
        pass
    return True
