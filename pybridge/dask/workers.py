"""One Futhark context per library per worker process, created on first use and reused.

Dask runs many tasks, on several threads, inside each worker process. Creating a Futhark context
per task would recompile GPU kernels and reallocate device memory every time, so the first task that
needs a library in a process loads it (``pybridge.futhark.load``) and every later task of that
process reuses it. The cache key is (library path, backend, device, configuration): two entry
points of one library share one context; the same library on two devices (a process driving two
GPUs) gets two.

**Which device.** For GPU backends a worker's device is, in order: the ``device`` the
``LibraryRef`` names explicitly (the same for every worker); else the worker's
``PYBRIDGE_DASK_DEVICE`` environment variable (``"#k"``, set per worker by
``pybridge.dask.local_cluster(devices=...)`` or the ``WorkerDevices`` plugin); else Futhark's own
default, the first visible device — which, under dask-cuda (one ``CUDA_VISIBLE_DEVICES`` per
worker), is the worker's own GPU.

**Calls are serialised per context** by the slot's ``lock``, held across the argument copies,
the entry-point call, the error read and the result copy. Futhark's error message lives in the
context, so two threads failing at once could read each other's message.
TEMPORARY: the ``reliability`` branch adds one lock per Futhark context inside pybridge.futhark,
held across each call and its error read; once it lands, ``Slot.lock`` should become that lock
(or a null context) and this module's own locks can go.

No dask import here: this layer runs in any process and is tested without a cluster.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PybridgeError
from ..futhark import Library
from ..futhark import load as _load
from .refs import LibraryRef

DEVICE_ENV = "PYBRIDGE_DASK_DEVICE"


class WorkerLibraryError(PybridgeError, RuntimeError):
    """A worker could not load a library (missing or unreadable file, no GPU, wrong backend...)."""


def worker_label() -> str | None:
    """This process's Dask worker, as errors name it ("worker 'gpu-1' (tcp://...)"); None outside
    a worker's task (the threaded scheduler, a test)."""
    try:
        from distributed import get_worker

        w = get_worker()
    except (ImportError, ValueError):
        return None
    return f"worker {w.name!r} ({w.address})"


def worker_device(ref: LibraryRef) -> str | None:
    """The device this process uses for ``ref`` (see the module docstring); None on CPU backends."""
    if not ref.gpu:
        return None
    explicit = ref.options.get("device")
    if explicit is not None:
        return str(explicit)
    return os.environ.get(DEVICE_ENV) or None


def device_ordinal(device: str | None) -> int:
    """``"#k"`` -> k (the CUDA ordinal CuPy and pybridge.cuda use); None -> 0."""
    if device is None:
        return 0
    if device.startswith("#") and device[1:].isdigit():
        return int(device[1:])
    raise ValueError(f"device {device!r}: pybridge.dask places data by ordinal, so name devices as '#k'")


@dataclass
class Slot:
    """One context of this process: its library, the device it was made for (``worker_device``),
    the lock serialising calls on it, the calls made, and result handles to free at the next call
    (see blocks._HandleOwner)."""

    library: Library
    device: str | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    calls: int = 0
    pending_frees: list[Any] = field(default_factory=list)


_slots: dict[tuple[Any, ...], Slot] = {}
_slots_lock = threading.Lock()
_created = 0  # contexts this process created (a test checks "once per worker")


def _key(ref: LibraryRef, device: str | None) -> tuple[Any, ...]:
    return (ref.path, ref.backend, device, tuple(kv for kv in ref.config if kv[0] != "device"))


def worker_slot(ref: LibraryRef) -> Slot:
    """This process's library for ``ref`` with the lock that serialises calls on its context
    (``slot.library``, ``slot.lock``; ``slot.calls`` counts the calls made under that lock)."""
    global _created
    device = worker_device(ref)
    key = _key(ref, device)
    slot = _slots.get(key)  # a dict read is atomic: no global lock on the every-task path
    if slot is None or slot.library.closed:
        with _slots_lock:  # held while creating: two threads never build two contexts for one key
            slot = _slots.get(key)
            if slot is None or slot.library.closed:
                options = ref.options
                if device is not None:
                    options["device"] = device
                try:
                    slot = Slot(_load(ref.path, backend=ref.backend, **options), device)
                except Exception as e:
                    where = worker_label() or f"process {os.getpid()}"
                    on = f", device {device}" if device else ""
                    raise WorkerLibraryError(
                        f"{where} could not load {Path(ref.path).name} ({ref.backend}{on}) from {ref.path}: "
                        f"{type(e).__name__}: {e}"
                    ) from e
                _slots[key] = slot
                _created += 1
    return slot


def stats() -> dict[str, Any]:
    """What this process holds: contexts created, and per library (path, device) the tasks run."""
    return {
        "pid": os.getpid(),
        "contexts_created": _created,
        "libraries": {f"{Path(k[0]).name}@{k[2] or 'default'}": s.calls for k, s in list(_slots.items())},
    }


def close_all() -> None:
    """Close every context this process holds (a worker plugin's teardown; tests)."""
    with _slots_lock:
        slots = list(_slots.values())
        _slots.clear()
    for s in slots:
        with s.lock:
            s.library.close()
