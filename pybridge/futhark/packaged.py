"""Run-time side of a package made by ``pybridge package``: pick a backend, load its libraries with
their prebuilt API-mode extensions (no Futhark, no C compiler).

A package's ``_futhark/package.json`` lists its programs and backends; for each (program, backend)
``_futhark/<backend>/`` holds ``lib<file>.so``, ``<file>.json``, ``<file>.fut`` and the extension
``<module>.<python tag>.so``. The generated module keeps one ``Package`` (as ``__pybridge__``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Mapping

from ..backends import choose_backend
from .entry import EntryPoint
from .library import Library, load

FORMAT = 1


def read_index(root: Path) -> dict[str, Any]:
    """The package's index (``_futhark/package.json``), checked for the fields ``load_programs`` uses."""
    path = root / "package.json"
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"{path}: cannot read the package index ({e}); reinstall the package") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("backends"), dict):
        raise ValueError(f"{path}: not a pybridge package index of format {FORMAT}")
    return index


def load_programs(
    root: str | os.PathLike[str], name: str, backend: str | None = None, **config: Any
) -> tuple[str, dict[str, Library]]:
    """(backend, program -> Library) for the package whose ``_futhark`` folder is ``root``."""
    base = Path(root)
    index = read_index(base)
    backends: Mapping[str, Any] = index["backends"]
    chosen = choose_backend(list(backends), backend, logging.getLogger(name), name)
    libs: dict[str, Library] = {}
    try:
        for program, files in backends[chosen].items():
            folder = base / chosen
            libs[program] = load(folder / files["library"], backend=chosen, api_module=folder / files["api_module"], **config)
    except BaseException:
        for lib in libs.values():
            lib.close()
        raise
    return chosen, libs


class Package:
    """The run time of one generated module, kept there as ``__pybridge__``: no Futhark name starts
    with two underscores, so no entry point, parameter or field hides what the module's functions
    reach through it (docs/DESIGN.md, "Names in generated code")."""

    def __init__(self, module: str, init_file: str, entries: Mapping[str, tuple[str, str]]):
        """``module``: the module's name (its logger too); ``init_file``: its ``__file__``;
        ``entries``: Python spelling -> (program, Futhark name) of every entry point."""
        self.name = module
        self.root = Path(init_file).resolve().parent / "_futhark"
        self.entries = dict(entries)
        self._lock = threading.Lock()
        self._default: tuple[dict[str, Library], dict[str, EntryPoint]] | None = None

    def load(self, backend: str | None = None, **config: Any) -> tuple[str, dict[str, Library], dict[str, EntryPoint]]:
        """(backend, program -> Library, Python spelling -> bound entry point)."""
        chosen, libs = load_programs(self.root, self.name, backend, **config)
        return chosen, libs, {py: libs[program].entry_points[exact] for py, (program, exact) in self.entries.items()}

    def default(self) -> dict[str, EntryPoint]:
        """The entry points the module functions call: the best backend present, loaded at first
        use (and again if its libraries were closed)."""
        with self._lock:
            if self._default is None or any(lib.closed for lib in self._default[0].values()):
                _, libs, bound = self.load()
                self._default = (libs, bound)
            return self._default[1]

    @staticmethod
    def mode(libraries: Mapping[str, Library]) -> str:
        """The mode of a package's libraries: "api" when each has its fast (API) mode, else "abi"."""
        return "api" if all(lib.mode == "api" for lib in libraries.values()) else "abi"
