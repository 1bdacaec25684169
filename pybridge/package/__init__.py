"""``pybridge package``: Futhark programs -> one platform-tagged wheel that needs neither Futhark nor a
C compiler where it is installed.

Per backend the wheel holds each program's library, manifest and source and its API-mode extension
compiled here (``binding.build_api_module``), plus a generated module (``import NAME``,
``NAME.load(backend=None)``, the entry points as functions and methods) with its ``.pyi`` stub and
``py.typed``. The wheel is written by the ``wheel`` package's ``WheelFile`` (RECORD with hashes);
its metadata require pybridge's run time only (pybridge-futhark at a compatible version, numpy, cffi).

    NAME/__init__.py, __init__.pyi, py.typed
    NAME/_futhark/package.json                       programs and files per backend
    NAME/_futhark/<backend>/lib<NAME>_<prog>_<backend>.so, .json, .fut
    NAME/_futhark/<backend>/_pybridge_<NAME>_<prog>_<backend>.<python tag>.so
"""

from __future__ import annotations

import json
import keyword
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..executables import child_env, configured, python_module_command
from .errors import PackageError

if TYPE_CHECKING:
    from .module import Program

log = logging.getLogger(__name__)

DEFAULT_BACKENDS = ("c", "multicore")
SUPPORTED_BACKENDS = ("c", "multicore", "cuda")
# The top-level modules a package's run time imports (pybridge, its dependencies and theirs): a
# package named like one would overwrite it when installed.
RUNTIME_MODULES = frozenset({"pybridge", "numpy", "cffi", "_cffi_backend", "pycparser", "platformdirs", "filelock"})
_VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?\Z")  # PEP 440, public versions


def cuda_toolkit() -> tuple[bool, str]:
    """Whether the cuda backend can be built here (``pybridge.futhark.build.cuda_toolkit``; imported
    when asked, so that ``pybridge -h`` does not load the Futhark layer)."""
    from ..futhark.build import cuda_toolkit as check

    return check()


def wheel_tag() -> str:
    """This interpreter's tag: the extensions are CPython extensions of its ABI, for this platform."""
    if sys.implementation.name != "cpython":
        raise PackageError(f"pybridge package needs CPython (the extensions are CPython's), not {sys.implementation.name}")
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}-{plat}"


def _check_args(name: str, version: str, backends: list[str], sources: list[Path], license: str, summary: str | None) -> None:
    for what, text in (("license", license), ("summary", summary or "")):
        if "\n" in text or "\r" in text:
            raise PackageError(f"{what}: must be one line (it is a metadata field), got {text!r}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
        raise PackageError(f"name: {name!r} must be a Python module name (letters, digits, _; not a keyword)")
    if name in sys.stdlib_module_names or name == "__main__":
        raise PackageError(f"name: {name!r} is a module of Python itself: `import {name}` would never reach the package; pick another name")
    if name in RUNTIME_MODULES:
        raise PackageError(f"name: {name!r} is a module the package needs at run time: installing the package would overwrite it; pick another name")
    if not _VERSION.match(version):
        raise PackageError(f"version: {version!r} is not a PEP 440 version such as 1.0 or 0.2.1")
    if not backends:
        raise PackageError("backends: expected at least one of " + ", ".join(SUPPORTED_BACKENDS))
    for b in backends:
        if b not in SUPPORTED_BACKENDS:
            raise PackageError(f"backends: {b!r} is not one of {', '.join(SUPPORTED_BACKENDS)}")
    if len(set(backends)) != len(backends):
        raise PackageError(f"backends: {backends} names one twice")
    if not sources:
        raise PackageError("sources: expected at least one .fut program")
    stems = [s.stem for s in sources]
    for s in sources:
        if s.suffix != ".fut" or not s.is_file():
            raise PackageError(f"sources: {s} is not an existing .fut file")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s.stem):
            raise PackageError(f"sources: {s.name}: the program name must be letters, digits and _ (it names files)")
    if len(set(stems)) != len(stems):
        raise PackageError(f"sources: two programs share a name: {stems}")


def build_package(
    sources: list[str | os.PathLike[str]],
    name: str,
    version: str = "0.1.0",
    backends: list[str] | None = None,
    out_dir: str | os.PathLike[str] = "dist",
    license: str = "UNKNOWN",
    summary: str | None = None,
    generated: str | os.PathLike[str] | None = None,
    manylinux: bool = False,
) -> Path:
    """Compile ``sources`` for ``backends`` (default c and multicore, and cuda where its toolkit is
    present) and write the wheel into ``out_dir``; return its path.

    ``generated``: a folder holding ``<backend>/<prog>.c, .h, .json`` that ``futhark <backend>
    --library`` wrote on another machine; those are compiled here instead of running Futhark (for a
    machine with the CUDA toolkit but no Futhark compiler).
    ``manylinux``: tag the wheel with the manylinux tag ``auditwheel show`` finds it consistent with
    (an error where it finds none), instead of ``linux_<arch>``."""
    from ..futhark.binding import build_api_module
    from ..futhark.build import build_program, cuda_home
    from ..futhark.cdef import cdef_for
    from ..futhark.manifest import load_manifest
    from ..futhark.shims import shims_for
    from .module import Program, module_source, module_stub, plan
    from .wheel import write_wheel

    srcs = [Path(s) for s in sources]
    if backends is None:
        backends = list(DEFAULT_BACKENDS)
        ok, why = cuda_toolkit()
        if ok:
            backends.append("cuda")
        else:
            log.info("cuda left out: %s", why)
    elif "cuda" in backends:
        ok, why = cuda_toolkit()
        if not ok:
            raise PackageError(f"backends: cuda needs the CUDA toolkit at packaging time: {why}")
    _check_args(name, version, backends, srcs, license, summary)
    tag = wheel_tag()
    with tempfile.TemporaryDirectory(prefix="pybridge-package-") as tmp:
        pkg = Path(tmp) / "pkg" / name  # only this goes into the wheel
        index: dict[str, dict[str, dict[str, str]]] = {}
        programs: list[Program] = []
        for b in backends:
            folder = pkg / "_futhark" / b
            folder.mkdir(parents=True)
            index[b] = {}
            for src in srcs:
                stem = src.stem
                pre = Path(generated) / b / f"{stem}.c" if generated is not None else None
                built = _compile_generated(pre, b, Path(tmp) / "generated") if pre is not None and pre.is_file() else build_program(src, backend=b)
                file = f"{name}_{stem}_{b}"
                so = folder / f"lib{file}.so"
                shutil.copyfile(built, so)
                shutil.copyfile(built.with_name(f"{stem}.json"), folder / f"{file}.json")
                shutil.copyfile(src, folder / f"{file}.fut")
                manifest = load_manifest(folder / f"{file}.json")
                shim_cdef, shim_source = shims_for(manifest)
                try:
                    ext = build_api_module(
                        f"_pybridge_{file}",
                        cdef_for(manifest),
                        so,
                        built.with_name(f"{stem}.h"),
                        folder,
                        [str(cuda_home() / "include")] if b == "cuda" else [],
                        shim_cdef,
                        shim_source,
                    )
                except Exception as e:  # cffi / setuptools: no C compiler, compile or link error
                    raise PackageError(f"{stem}.fut ({b}): cannot compile the fast-mode (API) extension: {type(e).__name__}: {e}") from e
                index[b][stem] = {"library": so.name, "api_module": ext.name}
                if b == backends[0]:
                    programs.append(Program(stem, manifest, src.read_text(errors="replace")))
            if b == backends[0]:
                plan(programs)  # clashing entry points: said before the other backends compile
        _check_same_interface(programs, backends, pkg)
        text = summary or f"Futhark program{'s' if len(srcs) > 1 else ''} {', '.join(s.name for s in srcs)}, packaged with pybridge"
        (pkg / "_futhark" / "package.json").write_text(
            json.dumps({"format": 1, "name": name, "version": version, "backends": index}, indent=1) + "\n"
        )
        (pkg / "__init__.py").write_text(module_source(name, version, text, programs, backends), encoding="utf-8")
        (pkg / "__init__.pyi").write_text(module_stub(name, version, programs, backends), encoding="utf-8")
        (pkg / "py.typed").write_text("")
        wheel = write_wheel(pkg, version, tag, Path(tmp) / "wheel", license=license, summary=text)
        if manylinux:
            plat = manylinux_tag(wheel)
            tag = f"{tag.rsplit('-', 1)[0]}-{plat}"
            wheel = write_wheel(pkg, version, tag, Path(tmp) / "wheel", license=license, summary=text)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        target = Path(out_dir) / wheel.name
        shutil.move(str(wheel), str(target))
        return target


def manylinux_tag(wheel: Path) -> str:
    """The platform tag ``auditwheel show`` finds ``wheel`` consistent with, if it is a manylinux
    (or musllinux) one; PackageError with auditwheel's words otherwise."""
    # Not `python -m auditwheel`: that imports an auditwheel.py of the current directory first.
    proc = subprocess.run(python_module_command("auditwheel", "show", str(wheel)), capture_output=True, text=True,
                          env=child_env())
    if proc.returncode != 0 and "No module named auditwheel" in proc.stderr:
        raise PackageError("manylinux: needs auditwheel (pip install auditwheel)")
    text = " ".join(proc.stdout.split())
    m = re.search(r'consistent with the following platform tag: "((?:many|musl)linux_[0-9a-z_]+)"', text)
    if m is None:
        raise PackageError(f"manylinux: auditwheel finds no manylinux tag for this wheel: {text or proc.stderr.strip()}")
    return m.group(1)


def _compile_generated(c_file: Path, backend: str, work: Path) -> Path:
    """``lib<prog>.so`` (with .h and .json beside it) from C that Futhark generated elsewhere."""
    from ..futhark.build import compile_library
    from ..futhark.csource import harden_file

    out = work / backend
    out.mkdir(parents=True, exist_ok=True)
    for suffix in (".c", ".h", ".json"):
        f = c_file.with_suffix(suffix)
        if not f.is_file():
            raise PackageError(f"generated: {f} is missing (futhark {backend} --library writes .c, .h and .json)")
        shutil.copyfile(f, out / f.name)
    harden_file(out / c_file.name)  # idempotent: C that pybridge already hardened is unchanged
    log.info("compiling %s generated elsewhere", c_file)
    return compile_library(out / c_file.name, backend, out / f"lib{c_file.stem}.so")


def _check_same_interface(programs: "list[Program]", backends: list[str], pkg: Path) -> None:
    """Every backend's manifest must declare the same entry points (the module and stub are one)."""
    from ..futhark.manifest import Manifest, load_manifest

    def signature(m: Manifest) -> dict[str, tuple[list[str], list[str]]]:
        return {n: ([i.type for i in e.inputs], [o.type for o in e.outputs]) for n, e in m.entry_points.items()}

    for b in backends[1:]:
        for prog in programs:
            other = load_manifest(pkg / "_futhark" / b / f"{pkg.name}_{prog.name}_{b}.json")
            if signature(other) != signature(prog.manifest):
                raise PackageError(f"{prog.name}.fut: the {b} build declares other entry points than the {backends[0]} build")


__all__ = ["PackageError", "build_package", "cuda_toolkit", "wheel_tag"]
