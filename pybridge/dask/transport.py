"""The communicator interface of :mod:`pybridge.dask.comms` and its host transport: TCP between
worker processes (``multiprocessing.connection``, authenticated with the session's key), NumPy
arrays; device arrays are copied to the host and back. It runs everywhere (CPU workers, CI), so the
logic above it is tested without a GPU; :mod:`.nccl` is the GPU-to-GPU transport.
"""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Client as _connect
from multiprocessing.connection import Connection, Listener
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import PybridgeError

REDUCTIONS = ("sum", "prod", "max", "min")


class CommsError(PybridgeError, RuntimeError):
    """A communicator was missing, misused, or a peer failed."""


class CommsTimeoutError(PybridgeError, TimeoutError):
    """A peer did not answer in time (it died, or it is not running its part of the collective).
    Not a CommsError: a class deriving from both RuntimeError and TimeoutError cannot cross from a
    worker to the client (Dask pickles exceptions with their tracebacks, and unpickling such a class
    fails, leaving a bare Exception)."""


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

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, Any]) -> dict[int, Any]:
        """Send ``sends[peer]`` to each peer and receive from each peer in ``recvs`` an array, all at
        once; returns {peer: received array}. ``recvs[peer]`` is (shape, dtype) for a new array, or
        an array to receive into (C-contiguous, writable; on the NCCL transport a device array on
        this worker's GPU): a halo lands where it is used, without a copy."""
        raise NotImplementedError

    def _receive_specs(self, recvs: Mapping[int, Any]) -> dict[int, tuple[tuple[int, ...], np.dtype, Any]]:
        """{peer: (shape, dtype, the array to receive into or None)}, each checked."""
        out = {}
        for p, spec in recvs.items():
            peer = self._check_peer(p, "receive from")
            flags = getattr(spec, "flags", None)
            if isinstance(spec, (tuple, list)) and len(spec) == 2:
                shp, dt = spec
                out[peer] = (tuple(int(s) for s in shp), np.dtype(dt), None)
            elif flags is not None and flags.c_contiguous and getattr(flags, "writeable", True):  # CuPy's flags have no writeable
                out[peer] = (tuple(spec.shape), np.dtype(spec.dtype), spec)
            else:
                raise CommsError(f"rank {self.rank}: recvs[{peer}] must be (shape, dtype) or a C-contiguous, writable array "
                                 f"to receive into, got " + (f"a {type(spec).__name__} that is not" if flags is not None else repr(spec)))
        return out

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
        conn.send_bytes(x.reshape(-1).view(np.uint8).data if x.size else b"")  # the array's bytes, no copy

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

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, Any]) -> dict[int, Any]:
        deadline = time.monotonic() + self.timeout
        outgoing = {self._check_peer(p, "send to"): self._host(x) for p, x in sends.items()}
        expected = self._receive_specs(recvs)
        errors: list[BaseException] = []

        def send_all() -> None:
            try:
                for p, x in outgoing.items():
                    self._send(p, x)
            except BaseException as e:  # noqa: BLE001 - reported by the calling thread
                errors.append(e)

        sender = threading.Thread(target=send_all, daemon=True)  # sends run beside the receives: no order deadlocks
        sender.start()
        got = {p: self._recv(p, shp, dt, deadline) for p, (shp, dt, _) in expected.items()}
        sender.join(max(0.0, deadline - time.monotonic()))
        if sender.is_alive():
            raise self._deadline_error("acceptance of the data sent", next(iter(outgoing)))
        if errors:
            raise CommsError(f"rank {self.rank}: sending failed: {errors[0]}") from errors[0]
        return {p: self._deliver(x, expected[p][2]) for p, x in got.items()}

    def _deliver(self, x: np.ndarray, into: Any) -> Any:
        """A received array as the caller asked for it: written into ``into``, or a new array."""
        if into is None:
            return self._out_array(x)
        if isinstance(into, np.ndarray):
            into[...] = x
        else:  # a device array: copied up
            from .blocks import array_module

            into[...] = array_module(into).asarray(x)
        return into

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

