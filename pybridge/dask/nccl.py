"""The NCCL transport of :mod:`pybridge.dask.comms` (the host one is :mod:`.transport`): CuPy's ``cupy.cuda.nccl`` on device arrays.

Every call queues its NCCL work on the calling thread's current CuPy stream (so it follows the
kernels that made its inputs, Futhark's included: their CuPy views make that stream wait) and then
waits for the stream with a deadline, polling: a peer that never joins cannot hang the task. On
timeout the communicator is aborted (NCCL's own way out of a stuck collective) and the session is
unusable; make a new one. Send, receive and broadcast move raw bytes, so any dtype goes; allreduce
needs a dtype NCCL reduces.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import numpy as np

from .transport import CommsError, CommsTimeoutError, Communicator
from .workers import DEVICE_ENV, device_ordinal

_REDUCE_TYPES = {
    "int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
}
_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}


class NcclCommunicator(Communicator):
    transport = "nccl"

    def __init__(self, session: str, rank: int, size: int, uid: Any, timeout: float):
        import cupy
        from cupy.cuda import nccl

        super().__init__(session, rank, size, timeout)
        self.cupy, self.nccl = cupy, nccl
        self.device = device_ordinal(os.environ.get(DEVICE_ENV) or None)
        with cupy.cuda.Device(self.device):
            self.comm = nccl.NcclCommunicator(size, uid, rank)  # collective: every rank is in client.run
        self.aborted = False

    # -- helpers

    def _device_array(self, x: Any) -> Any:
        cp = self.cupy
        return cp.ascontiguousarray(cp.asarray(x))  # a host array is copied in; a device one is used as is

    def _wait(self, what: str, peers: Sequence[int]) -> None:
        stream = self.cupy.cuda.get_current_stream()
        deadline = time.monotonic() + self.timeout
        pause = 1e-5
        while not stream.done:
            if time.monotonic() > deadline:
                self.comm.abort()
                self.aborted = True
                raise CommsTimeoutError(
                    f"rank {self.rank} of session {self.session[:8]}: NCCL {what} with rank(s) {list(peers)} did not "
                    f"finish within {self.timeout:g} s (a peer died or is not running its part); the communicator "
                    f"was aborted: make a new Comms"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)
        self.comm.check_async_error()

    def _usable(self) -> None:
        if self.aborted:
            raise CommsError(f"session {self.session[:8]}: this NCCL communicator was aborted after a timeout; make a new Comms")

    # -- the interface

    def exchange(self, sends: Mapping[int, Any], recvs: Mapping[int, tuple[Sequence[int], Any]]) -> dict[int, Any]:
        self._usable()
        cp, nccl = self.cupy, self.nccl
        with cp.cuda.Device(self.device):
            outgoing = {self._check_peer(p, "send to"): self._device_array(x) for p, x in sends.items()}
            incoming = {self._check_peer(p, "receive from"): cp.empty(tuple(int(s) for s in shp), np.dtype(dt))
                        for p, (shp, dt) in recvs.items()}
            stream = cp.cuda.get_current_stream().ptr
            nccl.groupStart()  # one group: NCCL pairs the sends and receives whatever their order
            try:
                for p, x in outgoing.items():
                    self.comm.send(x.data.ptr, x.nbytes, nccl.NCCL_UINT8, p, stream)
                for p, y in incoming.items():
                    self.comm.recv(y.data.ptr, y.nbytes, nccl.NCCL_UINT8, p, stream)
            finally:
                nccl.groupEnd()
            self._wait("send/recv", sorted(set(outgoing) | set(incoming)))
        return incoming

    def broadcast(self, x: Any, root: int = 0, *, shape: Sequence[int] | None = None, dtype: Any = None) -> Any:
        self._usable()
        shp, dt = self._bcast_spec(x, root, shape, dtype)
        cp, nccl = self.cupy, self.nccl
        with cp.cuda.Device(self.device):
            buf = self._device_array(x) if x is not None else cp.empty(shp, dt)
            self.comm.bcast(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, root, cp.cuda.get_current_stream().ptr)
            self._wait("broadcast", [root])
        return buf

    def allreduce(self, x: Any, op: str = "sum") -> Any:
        self._usable()
        op = self._check_op(op)
        cp, nccl = self.cupy, self.nccl
        kind = _REDUCE_TYPES.get(np.dtype(x.dtype).name)
        if kind is None:
            raise CommsError(f"allreduce: NCCL does not reduce {np.dtype(x.dtype)}; use one of {sorted(_REDUCE_TYPES)}")
        with cp.cuda.Device(self.device):
            src = self._device_array(x)
            out = cp.empty_like(src)
            self.comm.allReduce(src.data.ptr, out.data.ptr, src.size, getattr(nccl, kind), getattr(nccl, _OPS[op]),
                                cp.cuda.get_current_stream().ptr)
            self._wait("allreduce", [r for r in range(self.size) if r != self.rank])
        return out

    def close(self) -> None:
        if not self.aborted:
            self.comm.destroy()
