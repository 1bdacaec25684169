"""Where the Futhark compiler is, and obtaining one for this user.

Lookup order (:func:`futhark_compiler`), the first that exists wins:

1. ``$FUTHARK`` (a name on PATH or a path; when set, nothing else is tried);
2. ``futhark`` on PATH;
3. the compiler ``make`` built the shipped libraries with, recorded in ``futhark-compiler.txt`` of a
   build directory (the checkout's ``build/``, or ``pybridge/_build`` of the installed package, see
   :mod:`pybridge.paths`);
4. the project-local install of a checkout, ``.tools/bin/futhark`` (``$PYBRIDGE_TOOLS/bin/futhark``);
5. the per-user install of ``pybridge install-futhark``: ``<user data dir>/tools/bin/futhark``, the
   user data folder being platformdirs' (``~/.local/share/pybridge`` on Linux).

:func:`install_futhark` runs ``install-futhark.sh`` (the checkout's ``scripts/``, or the copy the
package ships) with ``$PYBRIDGE_TOOLS`` pointed at the per-user folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import paths
from .errors import PybridgeError

#: The file in a build directory naming the compiler ``make`` used (written by the Makefile).
RECORDED_COMPILER = "futhark-compiler.txt"
_SCRIPT = "install-futhark.sh"


class ToolchainError(PybridgeError, RuntimeError):
    """The Futhark compiler could not be obtained; the message says why and what to do."""


def user_tools_dir() -> Path:
    """The per-user install folder of ``pybridge install-futhark`` (not created here)."""
    try:
        import platformdirs
    except ImportError:  # a --no-deps install (the GPU scripts): platformdirs' rule on Linux
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(base) / "pybridge" / "tools"
    return platformdirs.user_data_path("pybridge", appauthor=False) / "tools"


def _executable(p: Path) -> str | None:
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def _recorded() -> list[Path]:
    found = []
    for d in paths.build_dirs():
        f = d / RECORDED_COMPILER
        if f.is_file():
            text = f.read_text(errors="replace").strip()
            if text:
                found.append(Path(text))
    return found


def futhark_candidates() -> list[tuple[str, Path]]:
    """(where it comes from, path) for steps 3-5 of the lookup, in order, existing or not."""
    out = [("recorded by make", p) for p in _recorded()]
    checkout = paths.source_checkout()
    local = os.environ.get("PYBRIDGE_TOOLS") or (checkout / ".tools" if checkout else None)
    if local:
        out.append(("project-local install", Path(local) / "bin" / "futhark"))
    out.append(("per-user install", user_tools_dir() / "bin" / "futhark"))
    return out


def futhark_compiler() -> str | None:
    """The Futhark compiler to use (module docstring's order), or None."""
    exe = os.environ.get("FUTHARK")
    if exe:
        return shutil.which(exe) or (exe if Path(exe).is_file() else None)
    on_path = shutil.which("futhark")
    if on_path:
        return on_path
    for _, p in futhark_candidates():
        found = _executable(p)
        if found:
            return found
    return None


def install_script() -> Path | None:
    """install-futhark.sh: the checkout's scripts/, else the copy shipped in the package."""
    checkout = paths.source_checkout()
    for p in ([checkout / "scripts" / _SCRIPT] if checkout else []) + [paths.PACKAGE_DIR / "_scripts" / _SCRIPT]:
        if p.is_file():
            return p
    return None


def install_futhark(tools: Path | None = None) -> str:
    """Obtain the Futhark compiler into ``tools`` (default: :func:`user_tools_dir`) unless one is
    found already ($FUTHARK, PATH, that folder); its messages go to stderr. Returns its path."""
    script = install_script()
    if script is None:
        raise ToolchainError(f"{_SCRIPT} is not in this installation of pybridge; reinstall it, or get the compiler from "
                             "https://futhark-lang.org/releases/ and put its bin/ on PATH")
    target = Path(tools) if tools is not None else user_tools_dir()
    target.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYBRIDGE_TOOLS": str(target)}
    proc = subprocess.run(["bash", str(script)], env=env, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ToolchainError(f"{script} failed (exit {proc.returncode}); its messages above say why")
    return lines[-1]
