"""The ``pybridge package`` and ``pybridge stubs`` subcommands (registered by cli.py)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def add_commands(sub: Any, parents: Any = (), subcommand: Any = None) -> None:
    """Add ``package`` and ``stubs`` to the subparsers ``sub`` of the pybridge command (``parents``:
    shared options; ``subcommand(sub, name, help, parents)``: how cli.py adds a subcommand)."""
    from ..backends import BACKENDS
    from ..cliargs import backend, backend_list, existing_dir, existing_file, output_dir, output_file
    from . import SUPPORTED_BACKENDS

    def add(name: str, text: str) -> Any:
        if subcommand is not None:
            return subcommand(sub, name, text, list(parents))
        return sub.add_parser(name, help=text, description=text, parents=list(parents))

    fut = existing_file("a Futhark program (.fut)", ".fut")
    p = add("package", "ship .fut programs as a wheel: compiled libraries, prebuilt fast mode, typed module")
    p.add_argument("sources", nargs="+", metavar="prog.fut", type=fut, help="Futhark programs (their entry points all go into one module)")
    p.add_argument("--name", required=True, help="the distribution and module name (import NAME)")
    p.add_argument("--version", default="0.1.0", help="the package's version (PEP 440; default 0.1.0)")
    p.add_argument("--backends", type=backend_list(SUPPORTED_BACKENDS), default=None,
                   help=f"comma-separated, of {','.join(SUPPORTED_BACKENDS)} "
                        "(default: c,multicore, and cuda where the CUDA toolkit is present)")
    p.add_argument("--license", default="UNKNOWN", help="the License metadata field, e.g. MIT or 'BSD-3-Clause'")
    p.add_argument("--summary", default=None, help="one-line Summary metadata field")
    p.add_argument("-o", "--output", type=output_dir, default="dist", help="folder for the wheel (default dist/)")
    p.add_argument("--manylinux", action="store_true",
                   help="tag the wheel manylinux_X_Y where `auditwheel show` agrees (default: linux_<arch>)")
    p.add_argument("--generated", type=existing_dir, default=None, metavar="DIR",
                   help="compile DIR/<backend>/<prog>.c (.h, .json), which futhark <backend> --library wrote elsewhere, "
                        "instead of running Futhark here (e.g. on a machine with nvcc but no Futhark)")
    p.set_defaults(func=cmd_package)
    s = add("stubs", "write a .pyi of a .fut program's entry points for editors and type checkers")
    s.add_argument("source", metavar="prog.fut", type=fut, help="the Futhark program")
    s.add_argument("-o", "--output", type=output_file, default=None, help="the .pyi to write (default: prog.pyi beside prog.fut)")
    s.add_argument("--backend", type=backend(), default="c", metavar="{" + ",".join(BACKENDS) + "}",
                   help="backend to compile with to read the manifest (default c: the quickest to build)")
    s.set_defaults(func=cmd_stubs)


def cmd_package(ns: argparse.Namespace) -> int:
    from ..cliargs import UsageError
    from ..futhark.build import BuildError
    from ..futhark.manifest import ManifestError
    from . import DEFAULT_BACKENDS, PackageError, _check_args, build_package

    try:  # the arguments, before anything is compiled: a bad one is a usage error (exit 2)
        _check_args(ns.name, ns.version, ns.backends or list(DEFAULT_BACKENDS), [Path(s) for s in ns.sources], ns.license, ns.summary)
    except PackageError as e:
        raise UsageError(str(e)) from None
    try:
        wheel = build_package(ns.sources, ns.name, ns.version, ns.backends, ns.output, ns.license, ns.summary, ns.generated, ns.manylinux)
    except (PackageError, BuildError, ManifestError, FileNotFoundError) as e:
        print(f"pybridge package: {e}", file=sys.stderr)
        return 1
    print(wheel)
    log.info("install it with: pip install %s", wheel)
    return 0


def cmd_stubs(ns: argparse.Namespace) -> int:
    from ..futhark.build import BuildError, build_program
    from ..futhark.manifest import ManifestError, load_manifest
    from ..futhark.stubs import write_library_stub

    src = Path(ns.source)
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
