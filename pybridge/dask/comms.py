"""Communicators between the workers of a Dask cluster, used inside tasks (as raft-dask's comms are).

    comms = pbd.Comms(client).init()          # "nccl" where every worker has a GPU and NCCL, else "host"
    out = pbd.spmd(step, x, comms=comms)      # step(comm, block) runs once per worker, block = its part
    ...
    comms.destroy()                            # or: with pbd.Comms(client) as comms: ...

How (raft-dask's scheme): the client names a session; for NCCL one worker makes the unique id and
``client.run`` builds a communicator on every worker at once (NCCL's initialisation is collective);
each worker keeps its communicator on its ``Worker`` object under the session; a task gets only the
session id (a few bytes) and looks the communicator up with :func:`comm`. Tasks that talk must run
at the same time, one per worker: ``pbd.spmd`` submits them so (``workers=[w]``, ``pure=False``).

A communicator (``rank``, ``size``) offers what a task needs to reach another worker's data:
``exchange`` (sends to and receives from any peers, grouped so no order can deadlock),
``broadcast``, ``allreduce`` and ``barrier``. Two transports, one interface:

- ``nccl`` (:mod:`.nccl`): CuPy's ``cupy.cuda.nccl`` on device arrays; GPU to GPU over NVLink or
  PCIe, never through the host. Work is queued on the task thread's current CuPy stream, and each
  call, the initialisation and the destruction included, waits with a deadline (no NCCL call can
  hang a task or a worker: on timeout the communicator is aborted and :class:`CommsTimeoutError`
  names the peers).
- ``host`` (:mod:`.transport`): plain TCP between the worker processes (``multiprocessing.connection``,
  authenticated with the session's key), NumPy arrays; device arrays are copied to the host and
  back. It runs everywhere (CPU workers, CI), so the logic above it is tested without a GPU.
"""

from __future__ import annotations

import uuid
from typing import Any, Sequence

from .placement import worker_order
from .transport import REDUCTIONS, CommsError, CommsTimeoutError, Communicator, HostCommunicator

__all__ = ["Comms", "CommsError", "CommsTimeoutError", "Communicator", "REDUCTIONS", "comm", "destroy_all"]

TRANSPORTS = ("auto", "nccl", "host")
_STATE = "_pybridge_comms"  # the attribute of the distributed Worker holding its communicators


# ---------------------------------------------------------------- the client side


class Comms:
    """One communicator per worker of ``client`` (or of ``workers``), ranked as ``placement`` ranks
    them. ``timeout``: seconds any one call inside a task may wait for its peers."""

    def __init__(self, client: Any = None, *, transport: str = "auto", workers: Sequence[str] | None = None,
                 timeout: float = 120.0, device: bool | None = None):
        from distributed import default_client

        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        self.client = client or default_client()
        self.requested = transport
        self.transport: str | None = None
        self.device = device
        self.timeout = float(timeout)
        self.workers = worker_order(self.client, workers)
        self.session = uuid.uuid4().hex
        self.initialized = False

    @property
    def size(self) -> int:
        return len(self.workers)

    def rank_of(self, address: str) -> int:
        return self.workers.index(address)

    def init(self) -> "Comms":
        """Build the communicators on the workers (NCCL: collectively, all at once)."""
        if self.initialized:
            return self
        if not self.workers:
            raise CommsError("the cluster has no workers to connect")
        probes = self.client.run(_probe, workers=self.workers)
        nccl_everywhere = all(p["nccl"] for p in probes.values())
        transport = self.requested
        if transport == "auto":
            transport = "nccl" if nccl_everywhere else "host"
        if transport == "nccl" and not nccl_everywhere:
            why = {w: p["why"] for w, p in probes.items() if not p["nccl"]}
            raise CommsError(f"transport='nccl' needs CuPy with NCCL and a GPU on every worker; not on: {why}")
        device = transport == "nccl" if self.device is None else self.device
        ranks = {w: r for r, w in enumerate(self.workers)}
        try:
            if transport == "nccl":
                uid = self.client.run(_nccl_unique_id, workers=self.workers[:1])[self.workers[0]]
                # every rank at once (NCCL's initialisation is collective), each bounded by the timeout
                self.client.run(_init_nccl, self.session, uid, ranks, self.timeout, workers=self.workers)
            else:
                key = uuid.uuid4().bytes
                listening = self.client.run(_listen, self.session, key, ranks, self.timeout, device, workers=self.workers)
                self.client.run(_connect_host, self.session, {ranks[w]: a for w, a in listening.items()}, workers=self.workers)
        except BaseException:
            self._close_on_workers()  # the ranks that did start close theirs
            raise
        self.transport = transport
        self.initialized = True
        return self

    def destroy(self) -> None:
        """Close the communicators (workers that died meanwhile are skipped)."""
        if not self.initialized:
            return
        self._close_on_workers()
        self.initialized = False

    def _close_on_workers(self) -> None:
        alive = set(self.client.scheduler_info(n_workers=-1)["workers"])
        try:
            self.client.run(_destroy, self.session, workers=[w for w in self.workers if w in alive])
        except Exception:  # noqa: BLE001 - a worker that died meanwhile took its communicator with it
            pass

    def __enter__(self) -> "Comms":
        return self.init()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"Comms({self.transport or self.requested}, {self.size} workers, session {self.session[:8]})"


def _probe() -> dict[str, Any]:
    try:
        import cupy
        from cupy.cuda import nccl

        if not nccl.available:
            return {"nccl": False, "why": "CuPy was built without NCCL"}
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return {"nccl": False, "why": "no GPU visible"}
    except Exception as e:  # noqa: BLE001 - any failure means: not this transport
        return {"nccl": False, "why": f"{type(e).__name__}: {e}"}
    return {"nccl": True, "why": ""}


def _nccl_unique_id() -> Any:
    from cupy.cuda import nccl

    return nccl.get_unique_id()


def _worker() -> Any:
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        raise CommsError("pybridge.dask communicators live on Dask workers: call comm() inside a task") from None


def _register(worker: Any, session: str, communicator: "Communicator") -> None:
    state = getattr(worker, _STATE, None)
    if state is None:
        state = {}
        setattr(worker, _STATE, state)
    state[session] = communicator


async def _off_the_event_loop(call: Any, *args: Any) -> Any:
    """``call(*args)`` on a thread: ``client.run`` runs plain functions on the worker's event loop,
    which a blocking NCCL call would stall (heartbeats, other tasks' messages)."""
    import asyncio
    import functools

    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(call, *args))


async def _init_nccl(session: str, uid: Any, ranks: dict[str, int], timeout: float, dask_worker: Any = None) -> None:
    from .nccl import NcclCommunicator

    c = await _off_the_event_loop(NcclCommunicator, session, ranks[dask_worker.address], len(ranks), uid, timeout)
    _register(dask_worker, session, c)


def _listen(session: str, key: bytes, ranks: dict[str, int], timeout: float, device: bool,
            dask_worker: Any = None) -> tuple[str, int]:
    host = dask_worker.address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    c = HostCommunicator(session, ranks[dask_worker.address], len(ranks), key, host, timeout, device)
    _register(dask_worker, session, c)
    return c.address


def _connect_host(session: str, addresses: dict[int, tuple[str, int]], dask_worker: Any = None) -> None:
    getattr(dask_worker, _STATE)[session].peers = dict(addresses)


async def _destroy(session: str, dask_worker: Any = None) -> None:
    state = getattr(dask_worker, _STATE, {})
    c = state.pop(session, None)
    if c is not None:
        await _off_the_event_loop(c.close)


def destroy_all(worker: Any) -> None:
    """Close every communicator a worker holds (the worker plugin's teardown)."""
    for c in list(getattr(worker, _STATE, {}).values()):
        c.close()
    setattr(worker, _STATE, {})


def comm(session: Any) -> "Communicator":
    """This worker's communicator of a session (a :class:`Comms` or its ``session`` id)."""
    sid = session.session if isinstance(session, Comms) else str(session)
    w = _worker()
    c = getattr(w, _STATE, {}).get(sid)
    if c is None:
        raise CommsError(
            f"worker {w.name!r} ({w.address}) has no communicator of session {sid[:8]}: it joined after "
            f"Comms.init (a replacement for a worker that died?) or the session was destroyed; make a new Comms"
        )
    return c
