"""Where the Futhark compiler is, and obtaining one for this user.

One lookup (:func:`find_futhark`) serves builds, ``pybridge info`` and ``pybridge install-futhark``;
the first that exists wins:

1. ``$FUTHARK`` (a name on PATH or a path; when set, nothing else is tried);
2. ``futhark`` on PATH (its absolute folders only, :mod:`pybridge.executables`);
3. the checkout this pybridge is imported from, and only then: the compiler its own ``make``
   recorded in ``build/futhark-compiler.txt``, then its ``.tools/bin/futhark``;
4. the install folder of ``pybridge install-futhark`` (and of ``make``): ``$PYBRIDGE_TOOLS``, else
   the per-user ``<user data dir>/tools`` (platformdirs: ``~/.local/share/pybridge/tools`` on Linux).

Nothing of the current directory and nothing an installed wheel records takes part: a file there
would choose which program runs.

:func:`install_futhark` runs ``install-futhark.sh --force`` (the checkout's ``scripts/``, or the copy
the package ships) into the install folder, only when the lookup finds nothing or when asked to.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import executables, paths
from .errors import PybridgeError

#: The file in a checkout's build directory naming the compiler ``make`` used (written by the Makefile).
RECORDED_COMPILER = "futhark-compiler.txt"
_SCRIPT = "install-futhark.sh"


class ToolchainError(PybridgeError, RuntimeError):
    """The Futhark compiler could not be obtained; the message says why and what to do."""


@dataclass(frozen=True)
class FoundCompiler:
    """A Futhark compiler and where the lookup found it (``origin``, words for a person)."""

    path: str
    origin: str


def user_tools_dir() -> Path:
    """The install folder of ``pybridge install-futhark``: ``$PYBRIDGE_TOOLS``, else the per-user
    one (not created here)."""
    if os.environ.get("PYBRIDGE_TOOLS"):
        return Path(os.environ["PYBRIDGE_TOOLS"]).absolute()
    try:
        import platformdirs
    except ImportError:  # a --no-deps install (the GPU scripts): platformdirs' rule on Linux
        base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(base) / "pybridge" / "tools"
    return platformdirs.user_data_path("pybridge", appauthor=False) / "tools"


def _checkout_compilers() -> list[FoundCompiler]:
    """Step 3: the checkout this package is imported from (none for an installed package)."""
    checkout = paths.source_checkout()
    if checkout is None:
        return []
    found = []
    record = checkout / "build" / RECORDED_COMPILER
    try:
        text = record.read_text(errors="replace").strip()
    except OSError:
        text = ""
    if os.path.isabs(text):  # the Makefile writes an absolute path; anything else is not its record
        found.append(FoundCompiler(text, f"the record of this checkout's make ({record})"))
    found.append(FoundCompiler(str(checkout / ".tools" / "bin" / "futhark"), f"this checkout's .tools ({checkout})"))
    return found


def find_futhark() -> FoundCompiler | None:
    """The Futhark compiler to use (the module docstring's order), or None."""
    explicit = os.environ.get("FUTHARK")
    if explicit:
        exe = executables.find(explicit)
        return FoundCompiler(exe, "$FUTHARK") if exe else None
    on_path = executables.find("futhark")
    if on_path:
        return FoundCompiler(on_path, "PATH")
    where = "$PYBRIDGE_TOOLS" if os.environ.get("PYBRIDGE_TOOLS") else "the per-user install of `pybridge install-futhark`"
    for candidate in [*_checkout_compilers(), FoundCompiler(str(user_tools_dir() / "bin" / "futhark"), where)]:
        if executables.find(candidate.path):
            return candidate
    return None


def futhark_compiler() -> str | None:
    """The path of :func:`find_futhark`'s compiler, or None."""
    found = find_futhark()
    return found.path if found else None


def not_found_reason() -> str:
    """Why :func:`find_futhark` found nothing, in one sentence."""
    explicit = os.environ.get("FUTHARK")
    if explicit:
        return f"$FUTHARK names {explicit!r}, which is not an executable file or a program on PATH"
    return (f"no `futhark` on PATH{', in this checkout' if paths.source_checkout() else ''} "
            f"or in {user_tools_dir()}")


def install_script() -> Path | None:
    """install-futhark.sh: the checkout's scripts/, else the copy shipped in the package."""
    checkout = paths.source_checkout()
    for p in ([checkout / "scripts" / _SCRIPT] if checkout else []) + [paths.PACKAGE_DIR / "_scripts" / _SCRIPT]:
        if p.is_file():
            return p
    return None


def install_futhark(tools: Path | None = None) -> str:
    """Install the Futhark compiler into ``tools`` (default: :func:`user_tools_dir`) with
    install-futhark.sh, whatever the lookup finds (the caller asks it first); the script's messages
    go to stderr. Returns the installed compiler's path."""
    script = install_script()
    if script is None:
        raise ToolchainError(f"{_SCRIPT} is not in this installation of pybridge; reinstall it, or get the compiler from "
                             "https://futhark-lang.org/releases/ and put its bin/ on PATH")
    bash = executables.find("bash")
    if bash is None:
        raise ToolchainError(f"{_SCRIPT} needs bash, which is not on PATH")
    target = Path(tools) if tools is not None else user_tools_dir()
    target.mkdir(parents=True, exist_ok=True)
    env = executables.child_env(PYBRIDGE_TOOLS=str(target))
    proc = subprocess.run([bash, str(script), "--force"], env=env, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ToolchainError(f"{script} failed (exit {proc.returncode}); its messages above say why")
    return lines[-1]
