"""Compile a user's ``.fut`` program into a loadable library: one call or one command.

    pybridge build myprog.fut --backend multicore        # command line
    lib = pybridge.futhark.load("myprog.fut", backend="c")  # from Python: builds if needed, loads

Runs ``futhark <backend> --library`` and the C compiler with the link flags each backend needs
(cuda: -lcuda -lcudart -lnvrtc, as measured with Futhark 0.25.34). Outputs are cached by a hash of
the source, backend and compiler, so an unchanged program is not rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..paths import cache_dir

LINK_FLAGS = {
    "c": ["-lm"],
    "multicore": ["-lm", "-lpthread"],
    "ispc": ["-lm", "-lpthread"],
    "cuda": ["-lcuda", "-lcudart", "-lnvrtc", "-lm"],
    "hip": ["-lamdhip64", "-lhiprtc", "-lm"],
    "opencl": ["-lOpenCL", "-lm"],
}

INSTALL_HINT = (
    "Run scripts/install-futhark.sh in a pybridge checkout (Debian/Ubuntu x86-64), or get the Futhark compiler from the official release tarball at https://futhark-lang.org/releases/ "
    "(unpack it and put its bin/ on PATH), or set FUTHARK=/path/to/futhark."
)


class BuildError(RuntimeError):
    """The Futhark compiler or the C compiler failed; the message holds their output."""


# Where scripts/install-futhark.sh puts the compiler in a checkout (or $PYBRIDGE_TOOLS).
_LOCAL_TOOLS = Path(__file__).resolve().parents[2] / ".tools"


def futhark_compiler() -> str | None:
    """$FUTHARK, else ``futhark`` on PATH, else the project-local install (.tools/bin/futhark)."""
    exe = os.environ.get("FUTHARK")
    if exe:
        return shutil.which(exe) or (exe if Path(exe).is_file() else None)
    local = Path(os.environ.get("PYBRIDGE_TOOLS") or _LOCAL_TOOLS) / "bin" / "futhark"
    return shutil.which("futhark") or (str(local) if local.is_file() else None)


def cuda_home() -> Path:
    """The CUDA toolkit: $CUDA_HOME, else where nvcc is, else /usr/local/cuda."""
    nvcc = shutil.which(os.environ.get("NVCC", "nvcc"))
    return Path(os.environ.get("CUDA_HOME") or (Path(nvcc).resolve().parent.parent if nvcc else "/usr/local/cuda"))


def _cuda_dirs() -> tuple[list[str], list[str]]:
    home = cuda_home()
    lib = home / "lib64"
    return [f"-I{home / 'include'}"], [f"-L{lib}", f"-Wl,-rpath,{lib}"]


def build_program(
    source: str | os.PathLike[str],
    backend: str = "c",
    out_dir: str | os.PathLike[str] | None = None,
    futhark: str | None = None,
    cc: str | None = None,
) -> Path:
    """Compile ``source`` for ``backend``; return the path of ``lib<prog>.so`` (manifest beside it)."""
    src = Path(source).resolve()
    if not src.is_file():
        raise FileNotFoundError(f"source: {src} does not exist")
    if backend not in LINK_FLAGS:
        raise ValueError(f"backend: expected one of {sorted(LINK_FLAGS)}, got {backend!r}")
    compiler = futhark or futhark_compiler()
    if compiler is None:
        raise BuildError(f"the Futhark compiler was not found. {INSTALL_HINT}")
    cc = cc or os.environ.get("CC", "cc")
    stem = src.stem
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(src.read_bytes() + f"\0{backend}\0{version}".encode()).hexdigest()[:12]
    out = Path(out_dir) if out_dir else cache_dir() / "programs" / backend / f"{stem}-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    so = out / f"lib{stem}.so"
    stamp = out / ".source-hash"
    if so.exists() and stamp.exists() and stamp.read_text() == digest:
        return so
    _run([compiler, backend, "--library", "-o", str(out / stem), str(src)], "futhark")
    cflags, ldflags = _cuda_dirs() if backend == "cuda" else ([], [])
    if backend == "cuda":
        _cuda13_compat(out / f"{stem}.c", Path(cflags[0][2:]) / "cuda.h")
    _run([cc, "-O3", "-fPIC", "-shared", *cflags, "-o", str(so), str(out / f"{stem}.c"), *ldflags, *LINK_FLAGS[backend]], "C compiler")
    shutil.copy2(src, out / src.name)  # keep the source beside the library (Library.source_path)
    stamp.write_text(digest)
    return so


def _cuda13_compat(c_file: Path, cuda_h: Path) -> None:
    """Futhark before 0.25.34 emits CUDA 12's cuCtxCreate(&ctx, 0, dev); CUDA 13 renamed it to the
    4-argument cuCtxCreate_v4. Rewrite that one call when the headers are CUDA 13's."""
    try:
        if "cuCtxCreate_v4" not in cuda_h.read_text(errors="replace").split("define cuCtxCreate ", 1)[-1][:40]:
            return
    except OSError:
        return
    text = c_file.read_text()
    c_file.write_text(text.replace("cuCtxCreate(&ctx->cu_ctx, 0, ctx->dev)", "cuCtxCreate(&ctx->cu_ctx, NULL, 0, ctx->dev)"))


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise BuildError(f"{what} not found: {cmd[0]}") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
