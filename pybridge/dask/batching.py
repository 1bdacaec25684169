"""Dask's message batching between the client and the scheduler, turned off for graphs of few long tasks.

    client = distributed.Client(pbd.local_cluster(devices=[0, 1, 2, 3]))
    pbd.low_latency(client)

distributed batches the messages of each connection: the client sends the scheduler at most one
message per 10 ms, the scheduler its client one per 2 ms (``BatchedSend``; the intervals are fixed
in distributed's code, not configurable). Under thousands of small tasks that saves messages. A
``pbd.spmd`` graph is the other shape: one long task per GPU, ending at about the same time, so
the first rank's result is reported at once and the others wait out the 2 ms; and a graph submitted
within 10 ms of the client's previous message (the release of the last step's result, in a loop)
waits for the rest of it. ``low_latency`` sets this client's two intervals to 0 (send at once;
messages queued meanwhile still go together). The scheduler's connections to workers keep theirs:
turning those off slowed graphs of 256 small tasks by a fifth on four H100s (docs/DESIGN.md).

The setting lives on the connection: a client that reconnects gets Dask's intervals back (call
``low_latency`` again).
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def _scheduler_side(client_id: str, interval: float, dask_scheduler: Any = None) -> bool:
    comm = dask_scheduler.client_comms.get(client_id)
    if comm is None:
        return False
    comm.interval = interval
    return True


def _not_known(client: Any) -> RuntimeError:
    return RuntimeError(f"low_latency: the scheduler does not know client {client.id!r} (disconnected?)")


def low_latency(client: Any, interval: float = 0.0) -> Any:
    """Messages between ``client`` and its scheduler sent without batching delay (``interval``
    seconds at most between sends instead of Dask's 10 ms and 2 ms; 0: at once). See the module
    docstring for when it pays. On an asynchronous client, await it: ``await pbd.low_latency(client)``."""
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(f"low_latency: interval must be a number of seconds, got {type(interval).__name__}")
    seconds = float(interval)
    if math.isnan(seconds) or not 0 <= seconds <= 1:
        raise ValueError(f"low_latency: interval must be from 0 to 1 seconds, got {interval!r}")
    if not (hasattr(client, "run_on_scheduler") and hasattr(client, "scheduler_comm")):
        raise TypeError(f"low_latency: client must be a distributed.Client, got {type(client).__name__}")
    stream = client.scheduler_comm
    if getattr(client, "status", None) != "running" or not hasattr(stream, "interval") or stream.closed():
        raise TypeError(f"low_latency: client must be a connected distributed.Client; this one is "
                        f"{getattr(client, 'status', 'not connected')}")
    if getattr(client, "asynchronous", False):
        async def both_sides() -> None:
            if not await client.run_on_scheduler(_scheduler_side, client.id, seconds):
                raise _not_known(client)
            client.scheduler_comm.interval = seconds

        return both_sides()
    if not client.run_on_scheduler(_scheduler_side, client.id, seconds):
        raise _not_known(client)
    client.scheduler_comm.interval = seconds  # read again: the connection the scheduler's side is on
    return None
