"""Run-time side of a package made by ``pybridge package``: pick a backend, load its libraries with
their prebuilt API-mode extensions (no Futhark, no C compiler).

A package's ``_futhark/package.json`` lists its programs and backends; for each (program, backend)
``_futhark/<backend>/`` holds ``lib<file>.so``, ``<file>.json``, ``<file>.fut`` and the extension
``<module>.<python tag>.so``. The generated module calls ``load_programs``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from ..backends import choose_backend
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
