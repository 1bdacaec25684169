"""Where the artefacts that ``make`` built are found.

``make`` writes into ``build/`` of the checkout; ``pip install .`` copies that tree into the installed
package as ``pybridge/_build``. Lookup order: ``$PYBRIDGE_BUILD``, the source checkout's ``build/``,
the installed ``pybridge/_build``, then ``./build`` of the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def build_dirs() -> list[Path]:
    """Existing build directories, most specific first, without duplicates."""
    candidates: list[Path] = []
    env = os.environ.get("PYBRIDGE_BUILD")
    if env:
        candidates.extend(Path(p) for p in env.split(os.pathsep) if p)
    candidates.append(_PACKAGE_DIR.parent / "build")  # running from a clone
    candidates.append(_PACKAGE_DIR / "_build")  # installed with the libraries as package data
    candidates.append(Path.cwd() / "build")
    seen: set[Path] = set()
    found: list[Path] = []
    for c in candidates:
        r = c.resolve()
        if r.is_dir() and r not in seen:
            seen.add(r)
            found.append(r)
    return found


def find_build_file(relative: str | os.PathLike[str]) -> Path | None:
    """First ``<build dir>/<relative>`` that exists, or None."""
    for d in build_dirs():
        p = d / relative
        if p.exists():
            return p
    return None


def cache_dir() -> Path:
    """A writable per-user cache (generated cffi modules, compiled user programs and CUDA C):
    ``$PYBRIDGE_CACHE``, else the platform's per-user cache folder (platformdirs: on Linux
    ``$XDG_CACHE_HOME/pybridge``, by default ``~/.cache/pybridge``). ``pybridge cache`` lists and
    clears it."""
    env = os.environ.get("PYBRIDGE_CACHE")
    if env:
        d = Path(env)
    else:
        import platformdirs

        d = Path(platformdirs.user_cache_dir("pybridge", appauthor=False))
    d.mkdir(parents=True, exist_ok=True)
    return d
