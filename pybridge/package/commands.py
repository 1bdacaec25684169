"""The ``pybridge package`` and ``pybridge stubs`` subcommands (registered by cli.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_commands(sub: Any, parents: Any = ()) -> None:
    """Add ``package`` and ``stubs`` to the subparsers ``sub`` of the pybridge command (``parents``: shared options)."""
    p = sub.add_parser("package", parents=list(parents), help="ship .fut programs as a wheel: compiled libraries, prebuilt fast mode, typed module")
    p.add_argument("sources", nargs="+", metavar="prog.fut", help="Futhark programs (their entry points all go into one module)")
    p.add_argument("--name", required=True, help="the distribution and module name (import NAME)")
    p.add_argument("--version", default="0.1.0", help="the package's version (PEP 440; default 0.1.0)")
    p.add_argument("--backends", default=None,
                   help="comma-separated: c,multicore,cuda (default: c,multicore, and cuda where the CUDA toolkit is present)")
    p.add_argument("--license", default="UNKNOWN", help="the License metadata field, e.g. MIT or 'BSD-3-Clause'")
    p.add_argument("--summary", default=None, help="one-line Summary metadata field")
    p.add_argument("-o", "--output", default="dist", help="folder for the wheel (default dist/)")
    p.add_argument("--manylinux", action="store_true",
                   help="tag the wheel manylinux_X_Y where `auditwheel show` agrees (default: linux_<arch>)")
    p.add_argument("--generated", default=None, metavar="DIR",
                   help="compile DIR/<backend>/<prog>.c (.h, .json), which futhark <backend> --library wrote elsewhere, "
                        "instead of running Futhark here (e.g. on a machine with nvcc but no Futhark)")
    p.set_defaults(func=cmd_package)
    s = sub.add_parser("stubs", parents=list(parents), help="write a .pyi of a .fut program's entry points for editors and type checkers")
    s.add_argument("source", metavar="prog.fut")
    s.add_argument("-o", "--output", default=None, help="the .pyi to write (default: prog.pyi beside prog.fut)")
    s.add_argument("--backend", default="c", help="backend to compile with to read the manifest (default c)")
    s.set_defaults(func=cmd_stubs)


def cmd_package(ns: argparse.Namespace) -> int:
    from ..futhark.build import BuildError
    from ..futhark.manifest import ManifestError
    from . import PackageError, build_package

    backends = [b.strip() for b in ns.backends.split(",") if b.strip()] if ns.backends is not None else None
    try:
        wheel = build_package(ns.sources, ns.name, ns.version, backends, ns.output, ns.license, ns.summary, ns.generated, ns.manylinux)
    except (PackageError, BuildError, ManifestError, FileNotFoundError) as e:
        print(f"pybridge package: {e}", file=sys.stderr)
        return 1
    print(wheel)
    print(f"install it with: pip install {wheel}", file=sys.stderr)
    return 0


def cmd_stubs(ns: argparse.Namespace) -> int:
    from ..futhark.build import BuildError, build_program
    from ..futhark.manifest import ManifestError, load_manifest
    from ..futhark.stubs import write_library_stub

    src = Path(ns.source)
    if src.suffix != ".fut":
        print(f"pybridge stubs: {src}: expected a .fut program", file=sys.stderr)
        return 1
    try:
        so = build_program(src, backend=ns.backend)
        manifest = load_manifest(so.with_name(f"{src.stem}.json"))
    except (BuildError, ManifestError, FileNotFoundError, ValueError) as e:
        print(f"pybridge stubs: {e}", file=sys.stderr)
        return 1
    out = Path(ns.output) if ns.output else src.with_suffix(".pyi")
    write_library_stub(src, manifest, out)
    print(out)
    return 0
