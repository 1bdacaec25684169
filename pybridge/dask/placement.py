"""Which worker holds which block: workers in a fixed order (their rank), blocks in contiguous runs.

A worker's rank is its place in the cluster's workers sorted by name (``gpu-0``, ``gpu-1``, ... for
``local_cluster(devices=...)``; 0, 1, ... under dask-cuda), so rank k is the worker of GPU k on
both. Block k of n goes to rank ``k * w // n``: neighbouring blocks share a worker, and only the
blocks at the ends of a worker's run have neighbours elsewhere (what a halo exchange crosses).
"""

from __future__ import annotations

import re
from typing import Any, Sequence


def _name_key(name: Any) -> tuple[Any, ...]:
    """Names sort with their numbers as numbers: gpu-2 before gpu-10."""
    parts = re.split(r"(\d+)", str(name))
    return tuple(int(p) if p.isdigit() else p for p in parts)


def worker_order(client: Any, workers: Sequence[str] | None = None) -> list[str]:
    """The workers' addresses by rank (see the module docstring); ``workers`` limits them to those
    named (addresses or worker names), kept in rank order."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    ranked = sorted(info, key=lambda addr: _name_key(info[addr].get("name", addr)))
    if workers is None:
        return ranked
    wanted = [str(w) for w in workers]
    by_name = {str(info[a].get("name")): a for a in ranked}
    chosen = set()
    for w in wanted:
        addr = w if w in info else by_name.get(w)
        if addr is None:
            raise ValueError(f"no worker {w!r} in the cluster; its workers are {[str(info[a].get('name', a)) for a in ranked]}")
        chosen.add(addr)
    return [a for a in ranked if a in chosen]


def block_owner(k: int, nblocks: int, nworkers: int) -> int:
    """The rank that holds block ``k`` of ``nblocks`` (contiguous runs, as even as they divide)."""
    if nworkers < 1:
        raise ValueError("the cluster has no workers")
    return k * nworkers // nblocks
