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
  call waits for it with a deadline (no NCCL call can hang a task: on timeout the communicator is
  aborted and :class:`CommsTimeoutError` names the peers).
- ``host`` (this module): plain TCP between the worker processes (``multiprocessing.connection``,
  authenticated with the session's key), NumPy arrays; device arrays are copied to the host and
  back. It runs everywhere (CPU workers, CI), so the logic above it is tested without a GPU.
"""

from __future__ import annotations

import threading
import time
import uuid
from multiprocessing.connection import Client as _connect
from multiprocessing.connection import Connection, Listener
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import PybridgeError
from .placement import worker_order

TRANSPORTS = ("auto", "nccl", "host")
REDUCTIONS = ("sum", "prod", "max", "min")
_STATE = "_pybridge_comms"  # the attribute of the distributed Worker holding its communicators


class CommsError(PybridgeError, RuntimeError):
    """A communicator was missing, misused, or a peer failed."""


class CommsTimeoutError(PybridgeError, TimeoutError):
    """A peer did not answer in time (it died, or it is not running its part of the collective).
    Not a CommsError: a class deriving from both RuntimeError and TimeoutError cannot cross from a
    worker to the client (Dask pickles exceptions with their tracebacks, and unpickling such a class
    fails, leaving a bare Exception)."""


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
        if transport == "nccl":
            uid = self.client.run(_nccl_unique_id, workers=self.workers[:1])[self.workers[0]]
            self.client.run(_init_nccl, self.session, uid, ranks, self.timeout, workers=self.workers)
        else:
            key = uuid.uuid4().bytes
            listening = self.client.run(_listen, self.session, key, ranks, self.timeout, device, workers=self.workers)
            self.client.run(_connect_host, self.session, {ranks[w]: a for w, a in listening.items()}, workers=self.workers)
        self.transport = transport
        self.initialized = True
        return self

    def destroy(self) -> None:
        """Close the communicators (workers that died meanwhile are skipped)."""
        if not self.initialized:
            return
        alive = set(self.client.scheduler_info()["workers"])
        self.client.run(_destroy, self.session, workers=[w for w in self.workers if w in alive])
        self.initialized = False

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


def _init_nccl(session: str, uid: Any, ranks: dict[str, int], timeout: float, dask_worker: Any = None) -> None:
    from .nccl import NcclCommunicator

    _register(dask_worker, session, NcclCommunicator(session, ranks[dask_worker.address], len(ranks), uid, timeout))


def _listen(session: str, key: bytes, ranks: dict[str, int], timeout: float, device: bool,
            dask_worker: Any = None) -> tuple[str, int]:
    host = dask_worker.address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    c = HostCommunicator(session, ranks[dask_worker.address], len(ranks), key, host, timeout, device)
    _register(dask_worker, session, c)
    return c.address


def _connect_host(session: str, addresses: dict[int, tuple[str, int]], dask_worker: Any = None) -> None:
    getattr(dask_worker, _STATE)[session].peers = dict(addresses)


def _destroy(session: str, dask_worker: Any = None) -> None:
    state = getattr(dask_worker, _STATE, {})
    c = state.pop(session, None)
    if c is not None:
        c.close()


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


# ---------------------------------------------------------------- the interface, and the host transport


class Communicator:
    """What a task uses: ``rank`` and ``size``, and the collectives below (see the module docstring)."""

    transport = ""

    def __init__(self, session: str, rank: int, size: int, timeout: float):
        self.session, self.rank, self.size, self.timeout = session, rank, size, timeout

    def _check_peer(self, peer: int, what: str) -> int:
        peer = int(peer)
        if not 0 <= peer < self.size or peer == self.rank:
            raise CommsError(f"rank {self.rank}: cannot {what} rank {peer} (ranks are 0..{self.size - 1}, not itself)")
        return peer

    def _check_op(self, op: str) -> str:
        if op not in REDUCTIONS:
            raise ValueError(f"allreduce: op must be one of {REDUCTIONS}, got {op!r}")
        return op

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, tuple[Sequence[int], Any]]) -> dict[int, Any]:
        """Send ``sends[peer]`` to each peer and receive from each peer in ``recvs`` an array of the
        given (shape, dtype), all at once; returns {peer: received array}."""
        raise NotImplementedError

    def broadcast(self, x: Any, root: int = 0, *, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
        """``root``'s array on every rank (other ranks pass ``x=None`` with ``shape`` and ``dtype``)."""
        raise NotImplementedError

    def allreduce(self, x: Any, op: str = "sum") -> Any:
        """The elementwise reduction of every rank's ``x`` (same shape and dtype everywhere)."""
        raise NotImplementedError

    def barrier(self) -> None:
        self.allreduce(np.zeros(1, np.int32))

    def close(self) -> None:
        pass

    def _bcast_spec(self, x: Any, root: int, shape: Sequence[int] | None, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
        if not 0 <= root < self.size:
            raise CommsError(f"broadcast: root {root} is not a rank (0..{self.size - 1})")
        if self.rank == root:
            if x is None:
                raise CommsError(f"broadcast: rank {root} is the root and must pass the array")
            return tuple(x.shape), np.dtype(x.dtype)
        if x is not None:
            return tuple(x.shape), np.dtype(x.dtype)
        if shape is None or dtype is None:
            raise CommsError(f"broadcast: rank {self.rank} receives, so it must pass shape= and dtype= (or an array)")
        return tuple(int(s) for s in shape), np.dtype(dtype)


def _reduce(arrays: Sequence[np.ndarray], op: str) -> np.ndarray:
    fn = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    out = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        fn(out, a, out=out)
    return out


class HostCommunicator(Communicator):
    """TCP between worker processes: one listening socket per worker, one connection per ordered
    pair of ranks (made on first use), messages as (shape, dtype) then the raw bytes."""

    transport = "host"

    def __init__(self, session: str, rank: int, size: int, key: bytes, host: str, timeout: float, device: bool):
        super().__init__(session, rank, size, timeout)
        self.key, self.device = key, device
        self.listener = Listener((host, 0), authkey=key)
        self.address: tuple[str, int] = self.listener.address  # type: ignore[assignment]
        self.peers: dict[int, tuple[str, int]] = {}
        self._out: dict[int, Connection] = {}
        self._in: dict[int, Connection] = {}
        self._arrived = threading.Condition()
        self._closed = False
        threading.Thread(target=self._accept, name=f"pybridge-comms-{session[:8]}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self.listener.accept()
                peer = conn.recv()  # the connecting rank introduces itself
            except Exception:  # noqa: BLE001 - closed listener, or a client that failed authentication
                if self._closed:
                    return
                continue
            with self._arrived:
                self._in[int(peer)] = conn
                self._arrived.notify_all()

    def _deadline_error(self, what: str, peer: int) -> CommsTimeoutError:
        return CommsTimeoutError(
            f"rank {self.rank} of session {self.session[:8]}: no {what} from rank {peer} within {self.timeout:g} s "
            f"(did its worker die, or is it not running its part?)"
        )

    def _incoming(self, peer: int, deadline: float) -> Connection:
        with self._arrived:
            while peer not in self._in:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise self._deadline_error("connection", peer)
                self._arrived.wait(min(left, 1.0))
            return self._in[peer]

    def _outgoing(self, peer: int) -> Connection:
        conn = self._out.get(peer)
        if conn is None:
            if peer not in self.peers:
                raise CommsError(f"rank {self.rank}: no address for rank {peer} (the session is not fully initialised)")
            conn = _connect(self.peers[peer], authkey=self.key)
            conn.send(self.rank)
            self._out[peer] = conn
        return conn

    def _send(self, peer: int, x: np.ndarray) -> None:
        conn = self._outgoing(peer)
        conn.send((x.shape, x.dtype.str))
        conn.send_bytes(memoryview(x).cast("B") if x.size else b"")

    def _recv(self, peer: int, shape: tuple[int, ...], dtype: np.dtype, deadline: float) -> np.ndarray:
        conn = self._incoming(peer, deadline)
        if not conn.poll(max(0.0, deadline - time.monotonic())):
            raise self._deadline_error("data", peer)
        got_shape, got_dtype = conn.recv()
        if tuple(got_shape) != tuple(shape) or np.dtype(got_dtype) != dtype:
            raise CommsError(f"rank {self.rank}: rank {peer} sent a {np.dtype(got_dtype)} array of shape {tuple(got_shape)}, "
                             f"but {dtype} of shape {tuple(shape)} was expected")
        return np.frombuffer(conn.recv_bytes(), dtype).reshape(shape).copy()  # copy: a writable array

    def _host(self, x: Any) -> np.ndarray:
        from .blocks import to_host_array

        return np.ascontiguousarray(to_host_array(x))

    def _out_array(self, x: np.ndarray) -> Any:
        if not self.device:
            return x
        from .blocks import to_device_array

        return to_device_array(x)

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, tuple[Sequence[int], Any]]) -> dict[int, Any]:
        deadline = time.monotonic() + self.timeout
        outgoing = {self._check_peer(p, "send to"): self._host(x) for p, x in sends.items()}
        expected = {self._check_peer(p, "receive from"): (tuple(int(s) for s in shp), np.dtype(dt)) for p, (shp, dt) in recvs.items()}
        errors: list[BaseException] = []

        def send_all() -> None:
            try:
                for p, x in outgoing.items():
                    self._send(p, x)
            except BaseException as e:  # noqa: BLE001 - reported by the calling thread
                errors.append(e)

        sender = threading.Thread(target=send_all, daemon=True)  # sends run beside the receives: no order deadlocks
        sender.start()
        got = {p: self._recv(p, shp, dt, deadline) for p, (shp, dt) in expected.items()}
        sender.join(max(0.0, deadline - time.monotonic()))
        if sender.is_alive():
            raise self._deadline_error("acceptance of the data sent", next(iter(outgoing)))
        if errors:
            raise CommsError(f"rank {self.rank}: sending failed: {errors[0]}") from errors[0]
        return {p: self._out_array(x) for p, x in got.items()}

    def broadcast(self, x: Any, root: int = 0, *, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
        shp, dt = self._bcast_spec(x, root, shape, dtype)
        if self.size == 1:
            return x
        if self.rank == root:
            self.exchange({p: x for p in range(self.size) if p != root}, {})
            return x
        return self.exchange({}, {root: (shp, dt)})[root]

    def allreduce(self, x: Any, op: str = "sum") -> Any:
        op = self._check_op(op)
        mine = self._host(x)
        if self.size > 1:
            if self.rank == 0:  # rank 0 reduces in rank order (the same result on every run), then sends it out
                parts = self.exchange({}, {p: (mine.shape, mine.dtype) for p in range(1, self.size)})
                total = _reduce([mine] + [self._host(parts[p]) for p in range(1, self.size)], op)
                self.exchange({p: total for p in range(1, self.size)}, {})
            else:
                self.exchange({0: mine}, {})
                total = self._host(self.exchange({}, {0: (mine.shape, mine.dtype)})[0])
        else:
            total = mine.copy()
        return self._out_array(total)

    def close(self) -> None:
        self._closed = True
        for conn in list(self._out.values()) + list(self._in.values()):
            conn.close()
        try:
            self.listener.close()
        except OSError:
            pass

