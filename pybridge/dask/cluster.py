"""Clusters with one worker per GPU, and the per-worker device for clusters made elsewhere.

``local_cluster(devices=[0, 1])`` starts one worker process per GPU, each with its own environment
(``distributed.SpecCluster`` of ``Nanny`` workers, as dask-cuda's LocalCUDACluster does):

- ``pin="visible"`` (default): ``CUDA_VISIBLE_DEVICES`` lists the worker's GPU first, so it is device
  0 for Futhark, CuPy and pybridge.cuda alike (dask-cuda's convention; nothing else to configure);
- ``pin="index"``: every GPU stays visible and ``PYBRIDGE_DASK_DEVICE="#k"`` tells pybridge.dask
  which one this worker's contexts use.

Its scheduler does not steal work: blocks sit on their GPU on purpose, and a task moved to another
worker would drag its device inputs through the host.

Without ``devices`` it is a plain ``LocalCluster`` (CPU backends). For a cluster started some other
way, ``client.register_plugin(WorkerDevices(["#0", "#1"]))`` gives worker k (by name, else by
order of arrival) device k mod n, before its first task creates a context.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import dask
from distributed import LocalCluster, Nanny, Scheduler, SpecCluster, WorkerPlugin

from .workers import DEVICE_ENV


def _visible(devices: Sequence[int | str], k: int) -> str:
    mine = str(devices[k])
    return ",".join([mine] + [str(d) for d in devices if str(d) != mine])


def local_cluster(n_workers: int | None = None, *, devices: Sequence[int | str] | None = None,
                  pin: str = "visible", threads_per_worker: int = 1, processes: bool = True,
                  memory_limit: str | float | None = None, **kwargs: Any) -> LocalCluster | SpecCluster:
    """A local cluster: one worker per GPU in ``devices``, or ``n_workers`` CPU workers.

    ``memory_limit``: each worker's host memory limit, as Dask takes it (bytes, ``"16GiB"``,
    ``"auto"``, 0 for none). CPU workers: Dask's default (``"auto"``: the machine's memory shared
    out). GPU workers: 0 by default. Their blocks live in device memory, but Dask counts a block's
    bytes against the host limit all the same: at the machine's memory shared out, a worker
    refuses a task whose device inputs outgrow its share of *host* memory (``MemoryError``) and,
    nearer the limit, spills device blocks to disk through the host. The GPU's own memory bounds
    them instead (a block that does not fit fails with ``OutOfMemoryError``, naming it)."""
    kwargs.setdefault("dashboard_address", ":0")  # any free port: several clusters may run at once
    if devices is None:
        if memory_limit is not None:
            kwargs["memory_limit"] = memory_limit
        return LocalCluster(n_workers=n_workers or 1, threads_per_worker=threads_per_worker, processes=processes, **kwargs)
    if pin not in ("visible", "index"):
        raise ValueError(f"pin must be 'visible' or 'index', got {pin!r}")
    if n_workers is not None and n_workers != len(devices):
        raise ValueError(f"one worker per device: n_workers={n_workers} but {len(devices)} devices")
    if not processes:
        raise ValueError("one worker per GPU needs processes=True (each process has its own device environment)")
    workers = {}
    for k, d in enumerate(devices):
        env = {"CUDA_VISIBLE_DEVICES": _visible(devices, k)} if pin == "visible" else {DEVICE_ENV: f"#{d}"}
        workers[f"gpu-{k}"] = {"cls": Nanny, "options": {"nthreads": threads_per_worker, "env": env, "name": f"gpu-{k}",
                                                         "memory_limit": 0 if memory_limit is None else memory_limit}}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": kwargs.pop("dashboard_address")}}
    # No work stealing: blocks are placed on their GPU on purpose (pbd.random, pbd.spmd), and a
    # stolen task moves its device inputs through the host.
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        return SpecCluster(workers=workers, scheduler=scheduler, **kwargs)


class WorkerDevices(WorkerPlugin):
    """Sets ``PYBRIDGE_DASK_DEVICE`` in each worker process: worker k gets ``devices[k % n]``.

    Register it before the first task that creates a context (contexts are made once per worker).
    Workers that are threads of one process (``processes=False``) share one environment; use
    processes."""

    name = "pybridge-worker-devices"

    def __init__(self, devices: Sequence[str]):
        if not devices:
            raise ValueError("WorkerDevices needs at least one device ('#0', '#1', ...)")
        self.devices = [str(d) for d in devices]

    def setup(self, worker: Any) -> None:
        name = worker.name
        k = int(name) if isinstance(name, int) or str(name).isdigit() else abs(hash(worker.address))
        os.environ[DEVICE_ENV] = self.devices[k % len(self.devices)]


# ---------------------------------------------------------------- dask-cuda's CPU pins


def pin_problems(near: dict[int, set[int]], allowed: set[int]) -> dict[int, str]:
    """For each GPU, why dask-cuda's CPU pin cannot be had here ('' where it can): dask-cuda pins a
    GPU's worker to the CPUs NVML reports near that GPU (``os.sched_setaffinity``), which fails,
    with only a warning, when none of them is in the set this process may run on (a container
    limited to some cores), and half-works when only some are."""
    out = {}
    for gpu, cpus in near.items():
        usable = cpus & allowed
        if not cpus:
            out[gpu] = "NVML reports no CPUs near this GPU"
        elif not usable:
            out[gpu] = (f"none of the {len(cpus)} CPUs near it ({_ranges(cpus)}) is among the {len(allowed)} this "
                        f"process may use ({_ranges(allowed)}): sched_setaffinity fails and the worker stays unpinned")
        elif usable != cpus:
            out[gpu] = (f"only {len(usable)} of the {len(cpus)} CPUs near it may be used here ({_ranges(usable)}): "
                        f"sched_setaffinity pins to those")
        else:
            out[gpu] = ""
    return out


def _ranges(cpus: set[int]) -> str:
    xs = sorted(cpus)
    parts, start = [], None
    for i, c in enumerate(xs):
        if start is None:
            start = c
        if i + 1 == len(xs) or xs[i + 1] != c + 1:
            parts.append(f"{start}-{c}" if c != start else f"{c}")
            start = None
    return ",".join(parts)


def cpu_affinity_report() -> dict[int, str]:
    """:func:`pin_problems` for every GPU of this machine, from NVML (``pip install nvidia-ml-py``,
    which dask-cuda needs anyway) and this process's allowed CPUs."""
    import math

    import pynvml

    pynvml.nvmlInit()
    try:
        ncpu = os.cpu_count() or 1
        near = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            masks = pynvml.nvmlDeviceGetCpuAffinity(pynvml.nvmlDeviceGetHandleByIndex(i), math.ceil(ncpu / 64))
            near[i] = {64 * w + b for w, m in enumerate(masks) for b in range(64) if (int(m) >> b) & 1}
    finally:
        pynvml.nvmlShutdown()
    return pin_problems(near, set(os.sched_getaffinity(0)))

