"""pybridge as a distribution: its name, the requirement a generated wheel states, and the one
install line an error message gives for each optional part.

The import name is ``pybridge``; the distribution is ``pybridge-futhark``, because the public index's
``pybridge`` is an unrelated project. ``pybridge-futhark`` is not on the public index either (yet),
so an install hint names the packages an optional part needs (``pip install pycuda``), which
resolve anywhere, rather than ``pip install 'pybridge-futhark[cuda]'``, which would not; in a
checkout, ``pip install '.[cuda]'`` installs the same (pyproject.toml's extras, which
tests/test_distribution.py keeps in step with ``EXTRAS``). docs/install.md says the same to users.
"""

from __future__ import annotations

from . import __version__

NAME = "pybridge-futhark"

# pyproject.toml's user-facing extras -> the requirements each adds (the same strings).
EXTRAS: dict[str, tuple[str, ...]] = {
    "cuda": ("pycuda>=2024.1",),
    "testing": ("hypothesis>=6.80",),
    "dask": ("dask[array]>=2024.12", "distributed>=2024.12"),
    "package": ("wheel>=0.40",),
}


def install_hint(extra: str) -> str:
    """The command that installs an optional part, e.g. ``pip install pycuda`` for "cuda"."""
    names = [r.split(">")[0].split("=")[0] for r in EXTRAS[extra]]
    return "pip install " + " ".join(f"'{n}'" if "[" in n else n for n in names)


def compatible_requirement(version: str = __version__) -> str:
    """The requirement a wheel made by ``pybridge package`` states on this pybridge: this version or
    a later compatible one (docs/versioning.md): below the next minor version while the major
    version is 0, below the next major version from 1.0 on."""
    parts = version.split(".")
    major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    upper = f"0.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"{NAME}>={version},<{upper}"
