"""The NCCL transport of :mod:`pybridge.dask.comms` (the host one is :mod:`.transport`): CuPy's ``cupy.cuda.nccl`` on device arrays.

Every call queues its NCCL work on the calling thread's current CuPy stream (so it follows the
kernels that made its inputs, Futhark's included: their CuPy views make that stream wait) and
waits for it. No NCCL call can hang a task (:mod:`.deadlines`): the calls that may block on the
host (``ncclCommInitRank``, ``ncclGroupEnd`` connecting to a peer, ``ncclCommDestroy``) run on a
helper thread waited on with the deadline, and the device work is waited for by polling an event,
checking ``ncclCommGetAsyncError`` as it goes. When the deadline passes the communicator is
aborted (``ncclCommAbort``: NCCL's own way out of a stuck collective) and :class:`CommsTimeoutError`
names the peers; the session is unusable after that: make a new one.

At initialisation every rank also exchanges a few bytes with every other rank and joins one
all-reduce, so NCCL's connections (made lazily, at first use, since NCCL 2.22) are made while every
rank is known to be there, and ``NCCL_RUNTIME_CONNECT=0`` (unless set) asks NCCL to connect its
collectives then too: a peer that dies later leaves a kernel waiting on the device, which the
deadline aborts, rather than a host thread inside a connection handshake.

Send, receive and broadcast move raw bytes, so any dtype goes; allreduce needs a dtype NCCL reduces.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import deadlines
from .transport import CommsError, CommsTimeoutError, Communicator
from .workers import DEVICE_ENV, device_ordinal

_REDUCE_TYPES = {
    "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
}
_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
#: Seconds ``close`` waits for ``ncclCommDestroy`` before aborting instead.
DESTROY_WITHIN = 20.0


class NcclCommunicator(Communicator):
    transport = "nccl"

    def __init__(self, session: str, rank: int, size: int, uid: Any, timeout: float):
        import cupy
        from cupy.cuda import nccl

        super().__init__(session, rank, size, timeout)
        self.cupy, self.nccl = cupy, nccl
        self.device = device_ordinal(os.environ.get(DEVICE_ENV) or None)
        self.aborted = False
        self.comm: Any = None
        os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")  # read by NCCL at its first initialisation in this process
        others = [r for r in range(size) if r != rank]
        deadline = time.monotonic() + timeout

        def make() -> Any:
            with cupy.cuda.Device(self.device):  # NCCL binds the communicator to the current device
                return nccl.NcclCommunicator(size, uid, rank)

        try:
            self.comm = deadlines.call_by(deadline, make, name=f"pybridge-nccl-init-{session[:8]}")
        except deadlines.Expired:
            raise CommsTimeoutError(
                f"rank {rank} of session {session[:8]}: NCCL initialisation did not complete within {timeout:g} s: "
                f"rank(s) {others} did not all join (a worker died, or its part of Comms.init did not run)"
            ) from None
        except Exception as e:  # noqa: BLE001 - NCCL's own error, said as ours
            raise CommsError(f"rank {rank} of session {session[:8]}: NCCL initialisation failed: {type(e).__name__}: {e}") from e
        if size > 1:  # connect to every peer now, while all are known to be there (see the module docstring)
            with cupy.cuda.Device(self.device):
                one = cupy.zeros(1, np.uint8)
                self.exchange({p: one for p in others}, {p: ((1,), np.uint8) for p in others})
                self.barrier()

    # -- waiting with a deadline

    def _timeout_error(self, what: str, peers: Sequence[int]) -> CommsTimeoutError:
        self._abort()
        return CommsTimeoutError(
            f"rank {self.rank} of session {self.session[:8]}: NCCL {what} with rank(s) {list(peers)} did not "
            f"finish within {self.timeout:g} s (a peer died or is not running its part); the communicator "
            f"was aborted: make a new Comms"
        )

    def _abort(self) -> None:
        self.aborted = True
        if self.comm is not None and not deadlines.abort_within(self.comm.abort):
            import logging

            logging.getLogger(__name__).warning("session %s rank %d: ncclCommAbort did not return within %g s",
                                                self.session[:8], self.rank, deadlines.ABORT_GRACE)

    def _failed(self, what: str, peers: Sequence[int], e: Exception) -> CommsError:
        self._abort()
        # CuPy's NcclError knows codes 0-5 only: a remote error (6) reaches us as a KeyError
        return CommsError(f"rank {self.rank} of session {self.session[:8]}: NCCL {what} with rank(s) {list(peers)} "
                          f"failed ({type(e).__name__}: {e}); the communicator was aborted: make a new Comms")

    def _check_async(self, what: str, peers: Sequence[int]) -> None:
        try:
            self.comm.check_async_error()  # ncclCommGetAsyncError: a peer's or the network's failure
        except Exception as e:  # noqa: BLE001 - any report means this communicator failed
            raise self._failed(what, peers, e) from None

    def _run(self, what: str, peers: Sequence[int], enqueue: Callable[[int], None]) -> None:
        """``enqueue(stream)`` on a helper thread (it may block the host while NCCL connects),
        then wait for the work it queued on the current stream; both within the timeout."""
        if self.aborted:
            raise CommsError(f"session {self.session[:8]}: this NCCL communicator was aborted after a failure; make a new Comms")
        cp = self.cupy
        deadline = time.monotonic() + self.timeout
        stream = cp.cuda.get_current_stream()

        def issue() -> None:
            with cp.cuda.Device(self.device):
                enqueue(stream.ptr)

        try:
            deadlines.call_by(deadline, issue, name=f"pybridge-nccl-{what}")
        except deadlines.Expired:
            raise self._timeout_error(what, peers) from None
        except Exception as e:  # noqa: BLE001 - NCCL refused or failed the call
            raise self._failed(what, peers, e) from None
        done = cp.cuda.Event(block=False, disable_timing=True)
        done.record(stream)
        try:
            deadlines.wait_until(lambda: done.done, deadline, check=lambda: self._check_async(what, peers))
        except deadlines.Expired:
            raise self._timeout_error(what, peers) from None

    def _device_array(self, x: Any) -> Any:
        cp = self.cupy
        return cp.ascontiguousarray(cp.asarray(x))  # a host array is copied in; a device one is used as is

    def _receiving(self, peer: int, into: Any) -> Any:
        """``into`` checked to be memory NCCL can write on this GPU (a device array on it)."""
        cp = self.cupy
        if not isinstance(into, cp.ndarray) or into.device.id != self.device:
            where = f"GPU {into.device.id}" if isinstance(into, cp.ndarray) else f"a {type(into).__name__}"
            raise CommsError(f"rank {self.rank}: NCCL receives rank {peer}'s data only into a CuPy array on this worker's "
                             f"GPU {self.device}, got {where}")
        return into

    # -- the interface

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, Any]) -> dict[int, Any]:
        cp, nccl = self.cupy, self.nccl
        with cp.cuda.Device(self.device):
            outgoing = {self._check_peer(p, "send to"): self._device_array(x) for p, x in sends.items()}
            incoming = {p: cp.empty(shp, dt) if into is None else self._receiving(p, into)
                        for p, (shp, dt, into) in self._receive_specs(recvs).items()}

            def enqueue(stream: int) -> None:
                nccl.groupStart()  # one group: NCCL pairs the sends and receives whatever their order
                try:
                    for p, x in outgoing.items():
                        self.comm.send(x.data.ptr, x.nbytes, nccl.NCCL_UINT8, p, stream)
                    for p, y in incoming.items():
                        self.comm.recv(y.data.ptr, y.nbytes, nccl.NCCL_UINT8, p, stream)
                finally:
                    nccl.groupEnd()

            self._run("send/recv", sorted(set(outgoing) | set(incoming)), enqueue)
        return incoming

    def broadcast(self, x: Any, root: int = 0, *, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
        shp, dt = self._bcast_spec(x, root, shape, dtype)
        cp, nccl = self.cupy, self.nccl
        with cp.cuda.Device(self.device):
            buf = self._device_array(x) if x is not None else cp.empty(shp, dt)
            self._run("broadcast", [root] if root != self.rank else [r for r in range(self.size) if r != root],
                      lambda stream: self.comm.bcast(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, root, stream))
        return buf

    def allreduce(self, x: Any, op: str = "sum") -> Any:
        op = self._check_op(op)
        cp, nccl = self.cupy, self.nccl
        kind = _REDUCE_TYPES.get(np.dtype(x.dtype).name)
        if kind is None:
            raise CommsError(f"allreduce: NCCL does not reduce {np.dtype(x.dtype)}; use one of {sorted(_REDUCE_TYPES)}")
        with cp.cuda.Device(self.device):
            src = self._device_array(x)
            out = cp.empty_like(src)
            self._run("allreduce", [r for r in range(self.size) if r != self.rank],
                      lambda stream: self.comm.allReduce(src.data.ptr, out.data.ptr, src.size, getattr(nccl, kind),
                                                         getattr(nccl, _OPS[op]), stream))
        return out

    def close(self) -> None:
        """Destroy the communicator; one whose destroy does not return (a peer gone mid-way) is
        aborted instead. After an abort there is nothing left to free."""
        if self.aborted or self.comm is None:
            return
        comm, self.comm = self.comm, None
        try:
            deadlines.call_by(time.monotonic() + min(self.timeout, DESTROY_WITHIN), comm.destroy, name="pybridge-nccl-destroy")
        except deadlines.Expired:
            self.aborted = True
            deadlines.abort_within(comm.abort)
        except Exception:  # noqa: BLE001 - closing: nothing to act on
            pass
