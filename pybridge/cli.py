"""Command line: ``pybridge info``, ``pybridge demo``, ``pybridge build prog.fut`` / ``kernels.cu``,
``pybridge cache``, ``pybridge bench``.

Bad input (an option, value, backend or file) gets one line on stderr naming the argument and what
was expected, and exit 2 (cliargs.py); a command that ran and failed exits 1, never 0; never a
traceback. Results go to stdout; pybridge's INFO log (what is compiled, with which compiler, how
long; hints such as "load it with") and progress bars go to stderr. ``-v`` adds the DEBUG log and
the traceback of an unexpected error; ``-q`` keeps only results and errors.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from . import paths
from .backends import BACKENDS
from .cliargs import (Parser, UsageError, backend, duration, existing_dir, existing_file, output_dir, positive_int,
                      verbosity_options)
from .distribution import NAME as DISTRIBUTION, install_hint

log = logging.getLogger(__name__)
_Parser = Parser  # the former name


def version() -> str:
    """The installed distribution's version, else the package's own ``__version__``."""
    from importlib import metadata

    from . import __version__

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return __version__


def _version_of(module: str) -> str | None:
    try:
        m = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(m, "VERSION_TEXT", None) or getattr(m, "__version__", "installed"))


def _gpu_description() -> str:
    from .backends import gpu_present

    ok, why = gpu_present()
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
    from .futhark.library import built_programs

    found = {f"{kind}/{b}": names for kind in ("futhark", "reference") for b, names in built_programs(kind).items()}
    for d in paths.build_dirs():
        cu = d / "cuda"
        if cu.is_dir():
            mods = sorted(p.stem for p in cu.glob("*.cubin"))
            if mods:
                found.setdefault("cuda kernels", mods)
    return found


def _tool_version(exe: str, last: bool = False) -> str:
    from .executables import child_env

    try:
        lines = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60,
                               env=child_env()).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return f"does not run ({e})"
    return (lines[-1] if last else lines[0]) if lines else "printed no version"


def cmd_info(_: argparse.Namespace) -> int:
    from .executables import configured
    from .futhark.callpath import DESCRIPTION as call_path
    from .toolchain import find_futhark, not_found_reason

    fut = find_futhark()
    nvcc = configured("NVCC", "nvcc")
    nvcc_v = _tool_version(nvcc, last=True) if nvcc else None
    rows = [
        ("pybridge", f"{version()} ({Path(__file__).parent})"),
        ("python", sys.version.split()[0]),
        ("call path", call_path),
        ("futhark compiler", f"{_tool_version(fut.path)} ({fut.path}; from {fut.origin})" if fut else
         f"not found ({not_found_reason()}): run `pybridge install-futhark`, or see https://futhark-lang.org/releases/ "
         "(or FUTHARK=...)"),
        ("nvcc", f"{nvcc_v} ({nvcc})" if nvcc else "not found (CUDA toolkit)"),
        ("GPU", _gpu_description()),
        ("PyCUDA", _version_of("pycuda") or f"not installed ({install_hint('cuda')})"),
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
                              "first, see docs/install.md); pf.load('prog.fut') still builds your own programs"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


# ---------------------------------------------------------------- demo (pybridge.demo.run)


def cmd_demo(ns: argparse.Namespace) -> int:
    from .demo import examples
    from .demo.run import run_demo

    for name in ns.examples:
        if name not in examples.EXAMPLES:
            close = difflib.get_close_matches(name, list(examples.EXAMPLES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise UsageError(f"unknown example {name!r}; {hint}valid: {', '.join(examples.EXAMPLES)}")
    return run_demo(ns.examples, ns.size, built=built_backends())


def cmd_build_cuda(ns: argparse.Namespace) -> int:
    from .cuda.compiler import CompileError, build_source, describe
    from .cuda.signature import SignatureError

    if ns.backend is not None:
        raise UsageError(f"--backend: applies to .fut sources only (expected --arch, --option, -I or -o for {ns.source})")
    try:
        built = build_source(Path(ns.source), options=ns.option, include_dirs=ns.include, arch=ns.arch)
        description = describe(built)  # reads the declarations: a bad marked comment raises here
    except CompileError as e:  # nvcc's own output once, after one line saying what failed
        print(f"pybridge build: {e.summary}" + (f"; nvcc said:\n{e.output.strip()}" if e.output.strip() else ""), file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError, SignatureError) as e:
        print(f"pybridge build: {e}", file=sys.stderr)
        return 1
    bad = [sig for sig in built.declarations.kernels.values() if isinstance(sig, Exception)]
    print(description)
    for problem in bad:  # a kernel whose declaration cannot be used: the build failed for it
        print(f"pybridge build: {str(problem).splitlines()[0]}", file=sys.stderr)
    if bad:
        return 1
    if ns.output is not None:
        out = Path(ns.output)
        out.mkdir(parents=True, exist_ok=True)
        for image in (built.cubin, built.ptx):
            shutil.copyfile(image, out / f"{built.name}{image.suffix}")
        print(f"copied to {out}/{built.name}.cubin and .ptx")
    log.info("load it with: pybridge.cuda.load_module(%r)", ns.source)
    return 0


def cmd_build(ns: argparse.Namespace) -> int:
    from .futhark.build import BuildError, build_program

    if ns.source.endswith(".cu"):
        return cmd_build_cuda(ns)
    given = [flag for flag, value in (("--arch", ns.arch), ("--option", ns.option), ("-I", ns.include)) if value]
    if given:
        raise UsageError(f"{', '.join(given)}: {'applies' if len(given) == 1 else 'apply'} to .cu sources only "
                         f"(expected --backend or -o for {ns.source})")
    try:
        so = build_program(ns.source, backend=ns.backend, out_dir=ns.output)
    except (BuildError, OSError, ValueError) as e:
        print(f"pybridge build: {e}", file=sys.stderr)
        return 1
    print(so)
    log.info("load it with: pybridge.futhark.load(%r)", str(so))
    return 0


def cmd_install_futhark(ns: argparse.Namespace) -> int:
    """The compiler builds use (the same lookup as builds and `pybridge info`); installs one only
    when none is found, or with --force."""
    from .toolchain import ToolchainError, find_futhark, install_futhark, not_found_reason, user_tools_dir

    found = find_futhark()
    if found is not None and not ns.force:
        log.info("a Futhark compiler is already found: %s (%s), from %s; nothing downloaded (--force installs one "
                 "into %s anyway)", found.path, _tool_version(found.path), found.origin, user_tools_dir())
        print(found.path)
        return 0
    if found is None and os.environ.get("FUTHARK") and not ns.force:  # an install would not be used
        print(f"pybridge install-futhark: {not_found_reason()}; fix or unset it ($FUTHARK comes before any install)",
              file=sys.stderr)
        return 1
    try:
        installed = install_futhark()
    except ToolchainError as e:
        print(f"pybridge install-futhark: {e}", file=sys.stderr)
        return 1
    used = find_futhark()
    if used is not None and used.path != installed:
        log.warning("installed %s, but builds use %s (from %s), which comes first", installed, used.path, used.origin)
    print(installed)
    return 0


# ---------------------------------------------------------------- cache (pybridge.cache)


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
    from .ownership import ForeignCacheError

    try:
        bound = cache.max_bytes()
        root = paths.cache_dir()
    except (cache.CacheSettingError, ForeignCacheError) as bad:
        raise UsageError(str(bad)) from None
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


_FUT = "a Futhark program (.fut)"


def _subcommand(sub: Any, name: str, text: str, parents: Sequence[argparse.ArgumentParser], **kw: Any) -> argparse.ArgumentParser:
    """A subcommand whose help page starts with the line ``pybridge -h`` lists for it."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text[:1].upper() + text[1:] + ".",
                                                     parents=list(parents), **kw)
    return parser


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="pybridge", description="Call Futhark programs and CUDA kernels from Python: this command shows what is "
                                            "available, runs the demo, builds and packages your programs, manages the cache "
                                            "and runs the benchmarks.")
    p.add_argument("--version", action="version", version=f"pybridge {version()}", help="print pybridge's version")
    verbosity_options(p, False)
    verbosity = Parser(add_help=False)
    verbosity_options(verbosity, argparse.SUPPRESS)
    parents = [verbosity]
    names = ["info", "demo", "build", "cache", "package", "stubs", "install-futhark", "bench"]
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(names) + "}")
    _subcommand(sub, "info", "what is available: compilers, backends built, GPU, PyCUDA, CuPy", parents).set_defaults(func=cmd_info)
    d = _subcommand(sub, "demo", "run every built example on the best backend, check against NumPy", parents)
    d.add_argument("examples", nargs="*", metavar="example", help="example names (default: all demo examples)")
    d.add_argument("--size", type=positive_int, default=None, help="problem size (default: each example's own)")
    d.set_defaults(func=cmd_demo)
    b = _subcommand(sub, "build", "compile your own .fut program (a library) or .cu file (cubin + PTX) for pybridge", parents)
    b.add_argument("source", type=existing_file(f"{_FUT} or CUDA C (.cu)", ".fut", ".cu"), help="path to prog.fut or kernels.cu")
    b.add_argument("--backend", type=backend(), default=None, metavar="{" + ",".join(BACKENDS) + "}",
                   help="Futhark backend (.fut only; default: the best this machine can build and run, "
                        "cuda where a GPU is usable, else multicore)")
    b.add_argument("-o", "--output", type=output_dir, default=None,
                   help="output directory (default: a cache keyed by source hash)")
    b.add_argument("--arch", type=_cuda_arch, default=None,
                   help="CUDA architecture (.cu only; default: this GPU's, else $CUDA_ARCH or sm_90)")
    b.add_argument("--option", action="append", default=[], metavar="FLAG",
                   help="extra nvcc flag, repeatable, e.g. --option=-DBLOCK=128 (.cu only)")
    b.add_argument("-I", "--include", action="append", default=[], metavar="DIR", type=existing_dir,
                   help="include directory (.cu only)")
    b.set_defaults(func=cmd_build)
    c = _subcommand(sub, "cache", "list (the default) or clear the build cache, or print its folder", parents)
    actions = c.add_subparsers(dest="action", metavar="{list,clear,path}")
    _subcommand(actions, "list", "list the cache's entries, their sizes and when each was last used", parents)
    clear = _subcommand(actions, "clear", "remove the cache's entries that no running process uses", parents)
    clear.add_argument("--older-than", type=duration, default=None, metavar="AGE",
                       help="only entries unused for AGE (30s, 12h, 7d, 2w; a plain number: days)")
    _subcommand(actions, "path", "print the cache's folder ($PYBRIDGE_CACHE, else the per-user cache folder)", parents)
    c.set_defaults(func=cmd_cache, action=None)
    from .package.commands import add_commands as add_package_commands

    add_package_commands(sub, parents=parents, subcommand=_subcommand)  # package, stubs
    i = sub.add_parser("install-futhark", parents=parents, help="obtain the Futhark compiler for this user (per-user data folder) unless one is found",
                       description="Print the Futhark compiler pybridge uses ($FUTHARK, PATH, the checkout pybridge is imported "
                                   "from, the per-user install); when there is none, install Debian's package into the per-user "
                                   "folder ($PYBRIDGE_TOOLS, else the user data folder).")
    i.add_argument("--force", action="store_true", help="install into the per-user folder even when a compiler is found")
    i.set_defaults(func=cmd_install_futhark)
    sub.add_parser("bench", help="benchmarks: overhead, exchange, fusion, bandwidth, matmul, all; scaling (pybridge bench -h)",
                   add_help=False)
    return p


def _cuda_arch(text: str) -> str:
    """argparse type of --arch: sm_90, compute_90, 90 (cuda.compiler.normalize_arch)."""
    from .cuda.compiler import normalize_arch

    try:
        normalize_arch(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("arch: ")) from None
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pybridge ARGS`` in this process; the exit status (2: refused arguments, -h: 0)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        run, prog, level = _parse_command(args)
    except SystemExit as e:  # argparse's -h, --version and refusals (their text is printed already)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    return _guarded(run, prog, level)


def _parse_command(args: list[str]) -> tuple[Any, str, int]:
    """(the command to run, its name, its log level) for ``args``; SystemExit when refused."""
    lead = 0  # global options before the subcommand
    while lead < len(args) and args[lead] in ("-v", "--verbose", "-q", "--quiet"):
        lead += 1
    if args[lead:lead + 1] == ["bench"]:  # its own parser (its subcommands are imported only for it)
        from .bench import cli as bench_cli

        verbosity = Parser(add_help=False)
        verbosity_options(verbosity, False)
        top = verbosity.parse_args(args[:lead])
        bench_parents = Parser(add_help=False)
        verbosity_options(bench_parents, argparse.SUPPRESS)
        ns = _parse(bench_cli.build_parser(Parser, parents=[bench_parents]), args[lead + 1:], top, "subcommand")
        return (lambda: bench_cli.run(ns, args[lead + 1:])), "pybridge bench", _level(ns)
    ns = _parse(build_parser(), args, argparse.Namespace(), "command", "action")
    return (lambda: int(ns.func(ns))), f"pybridge {ns.command}", _level(ns)


def _parse(parser: argparse.ArgumentParser, args: list[str], ns: argparse.Namespace, *levels: str) -> argparse.Namespace:
    """``parser.parse_args``, with an unknown option refused by the subcommand it was given to
    (argparse reports it as the top-level command's, pointing at the wrong help page)."""
    ns, extra = parser.parse_known_args(args, ns)
    if extra:
        used = parser
        for name in (getattr(ns, k, None) for k in levels):
            if name:
                used = _subparser(used, name) or used
        takes = sorted({max(a.option_strings, key=len) for a in used._actions if a.option_strings})
        raise SystemExit(_refuse(used.prog, f"unrecognized arguments: {' '.join(extra)} (expected only the options "
                                            f"{', '.join(takes)}; see {used.prog} -h)"))
    return ns


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    """The subcommand ``name`` of ``parser`` (argparse keeps its subparsers in a private action)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return None


def _level(ns: argparse.Namespace) -> int:
    if ns.verbose and ns.quiet:
        raise SystemExit(_refuse("pybridge", "-v/--verbose and -q/--quiet: expected one of them, not both"))
    return logging.DEBUG if ns.verbose else logging.ERROR if ns.quiet else logging.INFO


def _refuse(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _guarded(run: Any, prog: str, level: int) -> int:
    """Run a command with the log on stderr; bad input and failures as one line, not a traceback."""
    handler = _setup_logging(level)
    try:
        with warnings.catch_warnings():
            if level > logging.WARNING:  # -q: Python warnings are silenced with the log
                warnings.simplefilter("ignore")
            return int(run())
    except UsageError as e:
        return _refuse(prog, str(e))
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
