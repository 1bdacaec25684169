"""How pybridge finds and starts other programs: only ones the user configured (a ``$CC``-style
variable, PATH's absolute folders) or pybridge's own install, never a file of the current directory.

An empty or relative PATH entry (``::``, ``.``, ``bin``) names a folder relative to wherever the
process happens to run, so it is skipped, as Go's ``exec.LookPath`` does since 1.19: a ``cc`` or
``futhark`` lying in someone else's checkout never runs because the user ran Python there. A
program named by a path (``$CC=/opt/gcc/bin/gcc``, or ``./cc``: the user's explicit choice) is taken
as given, made absolute. Children get the same PATH without such entries (:func:`child_env`), so
what they start by name (gcc's assembler, nvcc's host compiler, futhark's cc) is found the same
way. docs/DESIGN.md ("What pybridge runs") lists every program pybridge starts.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder this pybridge is imported from


def safe_path(path: str | None = None) -> str:
    """``path`` (default $PATH) without its empty and relative entries."""
    raw = os.environ.get("PATH", os.defpath) if path is None else path
    return os.pathsep.join(p for p in raw.split(os.pathsep) if os.path.isabs(p))


def find(name: str) -> str | None:
    """The program ``name`` in PATH's absolute folders, or None. A name with a slash is a path the
    caller chose: returned absolute if it is an executable file."""
    if os.sep in name:
        p = os.path.abspath(name)
        return p if os.path.isfile(p) and os.access(p, os.X_OK) else None
    return shutil.which(name, path=safe_path())


def configured(variable: str, default: str) -> str | None:
    """The program ``$variable`` names (a name on PATH or a path), else ``default`` on PATH; None
    when the one chosen is not there (an explicit choice is never replaced by another)."""
    return find(os.environ.get(variable) or default)


def child_env(env: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment for a child process: ``env`` (default os.environ) plus ``extra``, its PATH
    without empty or relative entries."""
    out = {**(os.environ if env is None else env), **extra}
    out["PATH"] = safe_path(out.get("PATH", os.defpath))
    return out


def python_command(code: str, *args: str) -> list[str]:
    """``sys.executable`` running ``code`` with this pybridge first on sys.path and the current
    directory off it (``python -c`` and ``-m`` put it first: a ``pybridge/`` or ``auditwheel.py``
    there would be imported instead)."""
    root = str(PACKAGE_ROOT)
    prelude = f"import sys; sys.path[:] = [p for p in sys.path if p]\nif {root!r} not in sys.path: sys.path.insert(0, {root!r})\n"
    return [sys.executable, "-c", prelude + code, *args]


def python_module_command(module: str, *args: str) -> list[str]:
    """``python -m module args`` as :func:`python_command` runs code."""
    return python_command(f"import runpy; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)", *args)
