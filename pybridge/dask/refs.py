"""Picklable references to a Futhark library and one of its entry points.

A cffi library and its context cannot cross processes, so the graph Dask ships to its workers holds
these small descriptions instead; each worker turns them into its own library (``workers.py``).
The client reads only the manifest (and the ``.fut`` source, for size names), never a context.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..futhark import Library
from ..futhark.manifest import EntryInfo, Manifest, load_manifest

GPU_BACKENDS = ("cuda", "hip", "opencl")


def _frozen(config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable, picklable copy of ``pf.load`` keyword options (tuning dicts become tuples)."""
    out = []
    for k, v in sorted(config.items()):
        if isinstance(v, Mapping):
            v = tuple(sorted(v.items()))
        elif isinstance(v, list):
            v = tuple(v)
        out.append((k, v))
    return tuple(out)


def _thawed(config: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: (dict(v) if k == "tuning" else v) for k, v in config}


@dataclass(frozen=True)
class LibraryRef:
    """Which library to load in a worker: a small picklable description, never the library itself
    (a cffi library and its context cannot cross processes)."""

    path: str  # absolute path of lib<prog>.so; its <prog>.json sits beside it
    backend: str
    config: tuple[tuple[str, Any], ...] = ()  # pf.load options (num_threads, device, tuning, ...)

    @classmethod
    def of(cls, library: Library) -> "LibraryRef":
        """The reference that loads ``library`` again, with its configuration, in another process."""
        from dataclasses import fields

        cfg = library.context.config
        defaults = type(cfg)()
        options = {f.name: getattr(cfg, f.name) for f in fields(cfg) if getattr(cfg, f.name) != getattr(defaults, f.name)}
        return cls(str(library.path), library.backend, _frozen(options))

    @classmethod
    def find(cls, name_or_path: str | os.PathLike[str], backend: str | None = None, **config: Any) -> "LibraryRef":
        """Resolve a library name, ``lib<prog>.so``, ``<prog>.json`` or ``.fut`` (compiled here, on
        the client, once) to an absolute path that the workers load."""
        from ..futhark.library import resolve

        if str(name_or_path).endswith(".fut"):
            from ..futhark.build import build_program

            so = build_program(name_or_path, backend=backend)  # default: as pf.load's (backends.py)
        else:
            so, _ = resolve(name_or_path, backend)
        so = Path(so).resolve()
        manifest = load_manifest(so.with_name(f"{so.stem.removeprefix('lib')}.json"))
        if backend and manifest.backend != backend:
            raise ValueError(f"{so.name} was compiled for the {manifest.backend} backend, not {backend}")
        from ..futhark.context import Config

        Config.from_kwargs(**config)  # unknown options fail here, on the client, not in every task
        return cls(str(so), manifest.backend, _frozen(config))

    @property
    def manifest_path(self) -> Path:
        p = Path(self.path)
        return p.with_name(f"{p.stem.removeprefix('lib')}.json")

    @property
    def options(self) -> dict[str, Any]:
        return _thawed(self.config)

    @property
    def gpu(self) -> bool:
        return self.backend in GPU_BACKENDS


_manifests: dict[str, Manifest] = {}


def manifest_of(ref: LibraryRef) -> Manifest:
    """The library's manifest (read once per process; no context is created)."""
    m = _manifests.get(ref.path)
    if m is None:
        m = _manifests.setdefault(ref.path, load_manifest(ref.manifest_path))
    return m



@dataclass(frozen=True)
class EntryRef:
    """One entry point of a library, as the workers will call it."""

    library: LibraryRef
    name: str

    @property
    def info(self) -> EntryInfo:
        eps = manifest_of(self.library).entry_points
        if self.name not in eps:
            raise KeyError(f"{Path(self.library.path).name} has no entry point {self.name!r}; it has {sorted(eps)}")
        return eps[self.name]

    def __str__(self) -> str:
        return f"{self.name} ({Path(self.library.path).name}, {self.library.backend})"
