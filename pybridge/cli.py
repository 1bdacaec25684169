"""Command line: ``pybridge info``, ``pybridge demo``, ``pybridge build prog.fut`` / ``kernels.cu``,
``pybridge cache``, ``pybridge bench``.

Bad input gets one line on stderr naming the argument and what was expected (exit 2; 1 when a
command ran and failed), never a traceback; ``-v`` adds the traceback of an unexpected error and
the DEBUG log, ``-q`` keeps only warnings and errors (the default shows pybridge's INFO log: what
is compiled, with which compiler, how long).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn, Sequence

from . import paths
from .bench.common import positive_int
from .errors import PybridgeError

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


class UsageError(PybridgeError, ValueError):
    """Bad input found after parsing: one line, exit 2."""


def version() -> str:
    """The installed distribution's version, else the package's own ``__version__``."""
    from importlib import metadata

    from . import __version__

    try:
        return metadata.version("pybridge")
    except metadata.PackageNotFoundError:
        return __version__


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


def _tool_version(exe: str, last: bool = False) -> str:
    try:
        lines = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return f"does not run ({e})"
    return (lines[-1] if last else lines[0]) if lines else "printed no version"


def cmd_info(_: argparse.Namespace) -> int:
    from .futhark.build import futhark_compiler

    fut = futhark_compiler()
    fut_v = _tool_version(fut) if fut else None
    nvcc = shutil.which("nvcc")
    nvcc_v = _tool_version(nvcc, last=True) if nvcc else None
    rows = [
        ("pybridge", f"{version()} ({Path(__file__).parent})"),
        ("python", sys.version.split()[0]),
        ("call path", __import__("pybridge.futhark.callpath", fromlist=["DESCRIPTION"]).DESCRIPTION),
        ("futhark compiler", f"{fut_v} ({fut})" if fut else "not found: run `pybridge install-futhark`, or see https://futhark-lang.org/releases/ (or FUTHARK=...)"),
        ("nvcc", f"{nvcc_v} ({nvcc})" if nvcc else "not found (CUDA toolkit)"),
        ("GPU", _gpu_description()),
        ("PyCUDA", _version_of("pycuda") or "not installed (pip install 'pybridge[cuda]')"),
        ("CuPy", _version_of("cupy") or "not installed"),
        ("PyTorch", _version_of("torch") or "not installed"),
        ("build dirs", ", ".join(map(str, paths.build_dirs())) or "none (run make)"),
        ("cache", f"{paths.cache_dir()} (pybridge cache)"),
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
    from .demo import examples
    from .demo.run import run_demo

    for name in ns.examples:
        if name not in examples.EXAMPLES:
            close = difflib.get_close_matches(name, list(examples.EXAMPLES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UsageError(f"unknown example {name!r}; {hint}valid: {', '.join(examples.EXAMPLES)}")
    return run_demo(ns.examples, ns.size, best_backends=_best_backends(), built=built_backends())


def _output_dir(value: str | None) -> Path | None:
    if value is None:
        return None
    out = Path(value)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o/--output: {value} exists and is not a directory (expected a directory to write into)")
    return out


def cmd_build_cuda(ns: argparse.Namespace) -> int:
    from .cuda.compiler import CompileError, build_source, describe
    from .cuda.signature import SignatureError

    out = _output_dir(ns.output)
    try:
        built = build_source(Path(ns.source), options=ns.option, include_dirs=ns.include, arch=ns.arch)
        description = describe(built)  # reads the declarations: a bad marked comment raises here
    except (CompileError, OSError, ValueError, TypeError, SignatureError) as e:
        print(f"pybridge build: {e}", file=sys.stderr)
        return 1
    print(description)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for image in (built.cubin, built.ptx):
            shutil.copyfile(image, out / f"{built.name}{image.suffix}")
        print(f"copied to {out}/{built.name}.cubin and .ptx")
    print(f"load it with: pybridge.cuda.load_module({ns.source!r})", file=sys.stderr)
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    from .futhark.build import BuildError, build_program

    if not ns.source.endswith((".fut", ".cu")):
        raise UsageError(f"source: expected a Futhark program (.fut) or CUDA C (.cu), got {ns.source!r}")
    if not Path(ns.source).is_file():
        raise UsageError(f"source: {ns.source} is not a file")
    if ns.source.endswith(".cu"):
        return cmd_build_cuda(ns)
    if ns.option or ns.include or ns.arch:
        raise UsageError("--arch, --option and -I apply to .cu sources")
    out = _output_dir(ns.output)
    try:
        so = build_program(ns.source, backend=ns.backend, out_dir=out)
    except (BuildError, OSError, ValueError) as e:
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


# ---------------------------------------------------------------- cache (pybridge.cache)

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def _duration(text: str) -> float:
    m = _DURATION.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30s, 12h, 7d or 2w (a plain number: days), got {text!r}")
    return float(m[1]) * _SECONDS[m[2].lower()]


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _ago(t: float) -> str:
    s = max(0.0, time.time() - t)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def cmd_cache(ns: argparse.Namespace) -> int:
    from . import cache

    try:
        bound = cache.max_bytes()
    except cache.CacheSettingError as bad:
        raise UsageError(str(bad)) from None
    root = paths.cache_dir()
    if ns.action == "clear":
        removed, kept = cache.clear(older_than=ns.older_than)
        print(f"removed {len(removed)} entries ({_human(sum(e.size for e in removed))}) from {root}")
        if kept:
            print(f"kept {len(kept)} in use (being built, or loaded by a running process)")
        return 0
    if ns.action == "path":
        print(root)
        return 0
    found = cache.entries()
    if found:
        width = max(len(e.name) for e in found)
        for entry in sorted(found, key=lambda x: x.name):
            print(f"{entry.kind:<8} {entry.name:<{width}}  {_human(entry.size):>10}  used {_ago(entry.last_used)}")
    total = sum(e.size for e in found)
    limit = _human(bound) if bound else "none"
    print(f"{len(found)} entries, {_human(total)} in {root} (bound {limit}: PYBRIDGE_CACHE_MAX_BYTES)")
    return 0


def _setup_logging(level: int) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pybridge: %(message)s"))
    root = logging.getLogger("pybridge")
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pybridge", description="Call Futhark programs and CUDA kernels from Python.")
    p.add_argument("--version", action="version", version=f"pybridge {version()}")
    verbosity = _Parser(add_help=False)
    for parser, default in ((p, 0), (verbosity, argparse.SUPPRESS)):
        parser.add_argument("-v", "--verbose", action="store_const", const=1, dest="verbosity", default=default,
                            help="also the DEBUG log (cache hits) and the traceback of an unexpected error")
        parser.add_argument("-q", "--quiet", action="store_const", const=-1, dest="verbosity", default=default,
                            help="only warnings and errors (not what is compiled)")
    sub = p.add_subparsers(dest="command", required=True, metavar="{info,demo,build,cache,package,stubs,install-futhark,bench}")
    sub.add_parser("info", parents=[verbosity], help="what is available: compilers, backends built, GPU, PyCUDA, CuPy").set_defaults(func=cmd_info)
    d = sub.add_parser("demo", parents=[verbosity], help="run every built example on the best backend, check against NumPy")
    d.add_argument("examples", nargs="*", help="example names (default: all demo examples)")
    d.add_argument("--size", type=positive_int, default=None, help="problem size (default: each example's own)")
    d.set_defaults(func=cmd_demo)
    b = sub.add_parser("build", parents=[verbosity], help="compile your own .fut program (a library) or .cu file (cubin + PTX) for pybridge")
    b.add_argument("source", help="path to prog.fut or kernels.cu")
    b.add_argument("--backend", default="c", choices=["c", "multicore", "cuda", "opencl", "hip", "ispc"],
                   help="Futhark backend (.fut only)")
    b.add_argument("-o", "--output", default=None, help="output directory (default: a cache keyed by source hash)")
    b.add_argument("--arch", default=None, help="CUDA architecture (.cu only; default: this GPU's, else $CUDA_ARCH or sm_90)")
    b.add_argument("--option", action="append", default=[], metavar="FLAG",
                   help="extra nvcc flag, repeatable, e.g. --option=-DBLOCK=128 (.cu only)")
    b.add_argument("-I", "--include", action="append", default=[], metavar="DIR", help="include directory (.cu only)")
    b.set_defaults(func=cmd_build)
    c = sub.add_parser("cache", parents=[verbosity], help="list (default) or clear the build cache; `path` prints its folder")
    c.add_argument("action", nargs="?", default="list", choices=["list", "clear", "path"])
    c.add_argument("--older-than", type=_duration, default=None, metavar="AGE",
                   help="clear: only entries unused for AGE (30s, 12h, 7d, 2w; a plain number: days)")
    c.set_defaults(func=cmd_cache)
    from .package.commands import add_commands as add_package_commands

    add_package_commands(sub, parents=[verbosity])  # package, stubs
    sub.add_parser("install-futhark", parents=[verbosity], help="obtain the Futhark compiler for this user (per-user data folder) unless one is found"
                   ).set_defaults(func=cmd_install_futhark)
    sub.add_parser("bench", help="benchmarks: overhead, exchange, fusion, bandwidth, matmul, all; scaling (pybridge bench -h)",
                   add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    p = build_parser()
    lead = 0  # global options before the subcommand
    while lead < len(args) and args[lead] in ("-v", "--verbose", "-q", "--quiet"):
        lead += 1
    if args[lead:lead + 1] == ["bench"]:  # its own parser (subcommands are imported lazily)
        from .bench.cli import main as bench_main

        level = _level(args[:lead].count("-v") + args[:lead].count("--verbose") - args[:lead].count("-q") - args[:lead].count("--quiet"))
        return _guarded(lambda: bench_main(args[lead + 1:], parser_class=_Parser), "pybridge bench", level)
    ns = p.parse_args(args)
    return _guarded(lambda: int(ns.func(ns)), f"pybridge {ns.command}", _level(ns.verbosity))


def _level(verbosity: int) -> int:
    return logging.DEBUG if verbosity > 0 else logging.WARNING if verbosity < 0 else logging.INFO


def _guarded(run: Any, prog: str, level: int) -> int:
    """Run a command with the log on stderr; bad input and failures as one line, not a traceback."""
    handler = _setup_logging(level)
    try:
        return int(run())
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line; -v shows the traceback
        if level <= logging.DEBUG:
            log.exception("%s failed", prog)
        text = " ".join(str(e).split()) or "(no message)"
        print(f"{prog}: {type(e).__name__}: {text[:400]}" + ("" if level <= logging.DEBUG else " (-v for the traceback)"),
              file=sys.stderr)
        return 1
    finally:
        logging.getLogger("pybridge").removeHandler(handler)
        sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
