"""Where the artefacts that ``make`` built are found.

``make`` writes into ``build/`` of the checkout; ``pip install .`` copies what users need of that
tree (``build/futhark``, ``build/cuda``, the probe program of ``build/reference``) into the
installed package as ``pybridge/_build``. Lookup order: ``$PYBRIDGE_BUILD``, the source checkout's
``build/`` (only when this package is imported from a checkout), the installed ``pybridge/_build``.
Never the current directory: loading a library runs its code, and ``./build`` may be someone
else's checkout. The tests of a checkout run against the installed package name the
checkout's ``build/`` in ``$PYBRIDGE_BUILD`` (tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = _PACKAGE_DIR


def source_checkout() -> Path | None:
    """The checkout this package is imported from (its Makefile and scripts/ beside ``pybridge/``),
    or None for an installed package (whose parent folder is site-packages)."""
    root = _PACKAGE_DIR.parent
    if (root / "Makefile").is_file() and (root / "scripts" / "install-futhark.sh").is_file():
        return root
    return None


def build_dirs() -> list[Path]:
    """Existing build directories, most specific first, without duplicates."""
    candidates: list[Path] = []
    env = os.environ.get("PYBRIDGE_BUILD")
    if env:
        candidates.extend(Path(p) for p in env.split(os.pathsep) if p)
    checkout = source_checkout()
    if checkout is not None:
        candidates.append(checkout / "build")  # imported from a clone
    candidates.append(_PACKAGE_DIR / "_build")  # installed with the libraries as package data
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


def cache_dir(*parts: str) -> Path:
    """The per-user cache (generated cffi modules, compiled user programs and CUDA C), or its
    subfolder ``parts``: ``$PYBRIDGE_CACHE``, else the platform's per-user cache folder
    (platformdirs: on Linux ``$XDG_CACHE_HOME/pybridge``, by default ``~/.cache/pybridge``).
    ``pybridge cache`` lists and clears it. It must be pybridge's own (:mod:`pybridge.ownership`):
    created and tagged when new or empty, refused (ForeignCacheError) when it holds what pybridge
    did not write; a subfolder that is a symbolic link is refused, never followed."""
    from .ownership import claim_root, real_folder

    env = os.environ.get("PYBRIDGE_CACHE")
    if env:
        root = claim_root(Path(env), f"PYBRIDGE_CACHE={env!r}")
    else:
        import platformdirs

        default = Path(platformdirs.user_cache_dir("pybridge", appauthor=False))
        root = claim_root(default, f"the default cache {str(default)!r} (set PYBRIDGE_CACHE=... to use another folder)")
    return real_folder(root, *parts)
