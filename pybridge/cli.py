"""Command line: ``pybridge info``, ``pybridge demo``, ``pybridge build prog.fut`` / ``kernels.cu``."""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from . import paths


def _version_of(module: str) -> str | None:
    try:
        m = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(m, "VERSION_TEXT", None) or getattr(m, "__version__", "installed"))


def _gpu_description() -> str:
    from .futhark.library import _gpu_present

    ok, why = _gpu_present()
    if not ok:
        return f"none ({why})"
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(name, 256, dev)
    ver = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(ver))
    return f"{name.value.decode()} (CUDA driver API {ver.value // 1000}.{ver.value % 1000 // 10})"


def built_backends() -> dict[str, list[str]]:
    """'futhark/c' -> [program names] for every build directory found."""
    found: dict[str, list[str]] = {}
    for d in paths.build_dirs():
        for kind in ("futhark", "reference"):
            for b in sorted((d / kind).glob("*")) if (d / kind).is_dir() else ():
                libs = sorted(p.stem.removeprefix("lib") for p in b.glob("lib*.so"))
                if libs:
                    found.setdefault(f"{kind}/{b.name}", libs)
        cu = d / "cuda"
        if cu.is_dir():
            mods = sorted(p.stem for p in cu.glob("*.cubin"))
            if mods:
                found.setdefault("cuda kernels", mods)
    return found


def cmd_info(_: argparse.Namespace) -> int:
    from .futhark.build import futhark_compiler

    fut = futhark_compiler()
    fut_v = subprocess.run([fut, "--version"], capture_output=True, text=True).stdout.splitlines()[0] if fut else None
    nvcc = shutil.which("nvcc")
    nvcc_v = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1] if nvcc else None
    rows = [
        ("pybridge", f"{sys.modules['pybridge'].__version__} ({Path(__file__).parent})"),
        ("python", sys.version.split()[0]),
        ("futhark compiler", f"{fut_v} ({fut})" if fut else "not found: run `pybridge install-futhark`, or see https://futhark-lang.org/releases/ (or FUTHARK=...)"),
        ("nvcc", f"{nvcc_v} ({nvcc})" if nvcc else "not found (CUDA toolkit)"),
        ("GPU", _gpu_description()),
        ("PyCUDA", _version_of("pycuda") or "not installed (pip install 'pybridge[cuda]')"),
        ("CuPy", _version_of("cupy") or "not installed"),
        ("PyTorch", _version_of("torch") or "not installed"),
        ("build dirs", ", ".join(map(str, paths.build_dirs())) or "none"),
    ]
    built = built_backends()
    for kind, names in built.items():
        rows.append((f"built {kind}", ", ".join(names)))
    if not built:
        rows.append(("built", "nothing: no compiled libraries here (this pybridge was installed without running `make` "
                              "first, see README); pf.load('prog.fut') still builds your own programs"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


# ---------------------------------------------------------------- demo (pybridge.demo.run)


def _best_backends() -> list[str]:
    from .futhark.library import _gpu_present

    order = ["multicore", "c"]
    if _gpu_present()[0]:
        order.insert(0, "cuda")
    return order


def cmd_demo(ns: argparse.Namespace) -> int:
    from .demo.run import run_demo

    return run_demo(ns.examples, ns.size, best_backends=_best_backends(), built=built_backends())


def cmd_build_cuda(ns: argparse.Namespace) -> int:
    from .cuda.compiler import CompileError, build_source, describe
    from .cuda.signature import SignatureError

    try:
        built = build_source(Path(ns.source), options=ns.option, include_dirs=ns.include, arch=ns.arch)
        description = describe(built)  # reads the declarations: a bad marked comment raises here
    except (CompileError, FileNotFoundError, ValueError, TypeError, SignatureError) as e:
        print(f"pybridge build: {e}", file=sys.stderr)
        return 1
    print(description)
    if ns.output:
        out = Path(ns.output)
        out.mkdir(parents=True, exist_ok=True)
        for image in (built.cubin, built.ptx):
            shutil.copyfile(image, out / f"{built.name}{image.suffix}")
        print(f"copied to {out}/{built.name}.cubin and .ptx")
    print(f"load it with: pybridge.cuda.load_module({ns.source!r})", file=sys.stderr)
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    from .futhark.build import BuildError, build_program

    if ns.source.endswith(".cu"):
        return cmd_build_cuda(ns)
    if ns.option or ns.include or ns.arch:
        print("pybridge build: --arch, --option and -I apply to .cu sources", file=sys.stderr)
        return 1

    try:
        so = build_program(ns.source, backend=ns.backend, out_dir=ns.output)
    except (BuildError, FileNotFoundError, ValueError) as e:
        print(f"pybridge build: {e}", file=sys.stderr)
        return 1
    print(so)
    print(f"load it with: pybridge.futhark.load({str(so)!r})", file=sys.stderr)
    return 0


def cmd_install_futhark(_: argparse.Namespace) -> int:
    from .toolchain import ToolchainError, install_futhark

    try:
        print(install_futhark())
    except ToolchainError as e:
        print(f"pybridge install-futhark: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pybridge", description="Call Futhark programs and CUDA kernels from Python.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="what is available: compilers, backends built, GPU, PyCUDA, CuPy").set_defaults(func=cmd_info)
    d = sub.add_parser("demo", help="run every built example on the best backend, check against NumPy")
    d.add_argument("examples", nargs="*", help="example names (default: all demo examples)")
    d.add_argument("--size", type=int, default=None, help="problem size (default: each example's own)")
    d.set_defaults(func=cmd_demo)
    b = sub.add_parser("build", help="compile your own .fut program (a library) or .cu file (cubin + PTX) for pybridge")
    b.add_argument("source", help="path to prog.fut or kernels.cu")
    b.add_argument("--backend", default="c", choices=["c", "multicore", "cuda", "opencl", "hip", "ispc"],
                   help="Futhark backend (.fut only)")
    b.add_argument("-o", "--output", default=None, help="output directory (default: a cache keyed by source hash)")
    b.add_argument("--arch", default=None, help="CUDA architecture (.cu only; default: this GPU's, else $CUDA_ARCH or sm_90)")
    b.add_argument("--option", action="append", default=[], metavar="FLAG",
                   help="extra nvcc flag, repeatable, e.g. --option=-DBLOCK=128 (.cu only)")
    b.add_argument("-I", "--include", action="append", default=[], metavar="DIR", help="include directory (.cu only)")
    b.set_defaults(func=cmd_build)
    sub.add_parser("install-futhark", help="obtain the Futhark compiler for this user (per-user data folder) unless one is found"
                   ).set_defaults(func=cmd_install_futhark)
    sub.add_parser("bench", help="benchmarks: overhead, exchange, fusion, bandwidth, matmul, all; scaling (pybridge bench -h)",
                   add_help=False)
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["bench"]:  # its own parser (subcommands are imported lazily)
        from .bench.cli import main as bench_main

        return bench_main(args[1:])
    ns = p.parse_args(args)
    return int(ns.func(ns))


if __name__ == "__main__":
    raise SystemExit(main())
