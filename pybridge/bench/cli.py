"""``pybridge bench <subcommand>``: one command for every benchmark.

Subcommands are modules of this package exposing ``HELP``, ``add_arguments(parser)`` and
``run(args) -> list[dict]`` (rows with "benchmark", "impl", "size", "median_us", ...); they are
imported only when run, so a missing optional one (``bandwidth``, ``matmul``) is reported, not fatal.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from ..cliargs import existing_file, output_file
from . import report

SUBCOMMANDS = ("overhead", "exchange", "fusion", "bandwidth", "matmul")
# Run only when asked (not by `all`): scaling starts Dask clusters and needs dask and distributed;
# programs compiles every program twice (executable and library) and takes minutes.
EXTRA_SUBCOMMANDS = ("scaling", "programs")
_HELP = {
    "overhead": "per-call host overhead of Futhark calls and CUDA launches vs their floors",
    "exchange": "zero-copy exchange with CuPy / PyTorch / numba vs the copying path",
    "fusion": "the fusion curve: a chain of N elementwise ops",
    "bandwidth": "saxpy / sum / scan bandwidth vs device copy (pybridge.bench.bandwidth)",
    "matmul": "matmul vs cuBLAS (pybridge.bench.matmul)",
    "programs": "real programs: pybridge vs the Futhark compiler's own executable (pybridge.bench.programs)",
    "scaling": "strong/weak scaling over 1..N Dask workers or GPUs (pybridge.bench.scaling; needs dask and distributed)",
}


def _module(name: str) -> tuple[Any, str]:
    try:
        return importlib.import_module(f"pybridge.bench.{name}"), ""
    except ImportError as e:
        return None, f"pybridge.bench.{name} is missing in this installation ({e})"


DESCRIPTION = (
    "Run a benchmark and print its table of median times: per-call overhead, zero-copy exchange, "
    "fusion, bandwidth and matmul (each also run by `all`), scaling and real programs on their own; "
    "report redraws tables from saved runs. --json keeps the rows, --png draws them, --markdown "
    "writes BENCHMARKS.md. Without a GPU the GPU rows are skipped, each with the reason."
)


def build_parser(parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
                 parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """The parser of ``pybridge bench``; ``parents`` add options to every subcommand (-v/-q)."""
    p = parser_class(prog="pybridge bench", description=DESCRIPTION)
    sub = p.add_subparsers(dest="subcommand", required=True, metavar="{" + ",".join([*SUBCOMMANDS, "all", *EXTRA_SUBCOMMANDS, "report"]) + "}")

    def outputs(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--json", metavar="FILE", type=output_file, help="write the rows (and run metadata) as JSON")
        sp.add_argument("--png", metavar="FILE", type=output_file, help="draw the rows (needs matplotlib)")
        sp.add_argument("--markdown", metavar="FILE", type=output_file, help="(re)generate BENCHMARKS.md: targets, figures, tables")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--quick", action="store_true", help="reduced sizes and repeats (CI, CPU-only machines)")
        outputs(sp)

    def add(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text.replace("%", "%%"), description=text.replace("%", "%%"),  # argparse formats help with %
                              parents=list(parents))

    for name in SUBCOMMANDS + EXTRA_SUBCOMMANDS:
        mod, why = _module(name)
        sp = add(name, getattr(mod, "HELP", None) or _HELP[name] + ("" if mod else f" [{why}]"))
        common(sp)
        if mod is not None:
            mod.add_arguments(sp)
        sp.set_defaults(modules=[name])
    a = add("all", "every subcommand above but scaling and programs, in turn (each with its default options)")
    common(a)
    a.set_defaults(modules=list(SUBCOMMANDS))
    r = add("report", "table / PNG / BENCHMARKS.md from earlier --json files (runs nothing)")
    r.add_argument("inputs", nargs="+", metavar="JSON", type=existing_file("a JSON file written by --json"),
                   help="files written by --json (rows are merged in order)")
    r.add_argument("--command", metavar="TEXT",
                   help="the command that made the runs, for BENCHMARKS.md's header (default: the first file's)")
    r.add_argument("--call-path", action="store_true",
                   help="print only the call path's table: each figure beside the bare call of the same run, and its target")
    outputs(r)
    r.set_defaults(modules=[])
    return p


def main(argv: Sequence[str] | None = None, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(build_parser(parser_class).parse_args(argv), argv)


def run(ns: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the parsed ``pybridge bench`` command ``ns`` (``argv``: its arguments, for the metadata)."""
    rows: list[dict[str, Any]] = []
    failed = 0
    meta = None
    if ns.subcommand == "report":
        try:
            rows, meta = report.read_json(ns.inputs)
            if ns.command:
                meta["command"] = ns.command
        except (OSError, ValueError) as e:
            print(f"pybridge bench report: {e}", file=sys.stderr)
            return 2
        if ns.call_path:
            print("\n".join(report.call_path_lines(rows)))
            return 0
    for name in ns.modules:
        mod, why = _module(name)
        if mod is None:
            print(f"pybridge bench {name}: {why}", file=sys.stderr)
            rows.append({"benchmark": name, "impl": "all", "size": None, "median_us": None, "skipped": why})
            continue
        args = ns
        if ns.subcommand == "all":  # each module's own defaults, with the common flags
            sp = argparse.ArgumentParser()
            mod.add_arguments(sp)
            args = sp.parse_args([])
            args.quick = ns.quick
        try:
            got = mod.run(args)
        except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others' rows
            failed += 1
            msg = f"{type(e).__name__}: {e}"
            print(f"pybridge bench {name} failed: {msg}", file=sys.stderr)
            got = [{"benchmark": name, "impl": "all", "size": None, "median_us": None, "skipped": f"failed: {msg}"}]
        failed += sum(r.get("equal") is False for r in got)  # results unlike the reference's (programs)
        rows += got
    report.print_table(rows)
    meta = meta or report.machine_meta("pybridge bench " + " ".join(shlex.quote(a) for a in argv))
    if ns.json:
        report.write_json(ns.json, rows, meta)
    png_problem = None
    if ns.png:
        png_problem = report.write_png(ns.png, rows)
        if png_problem:
            print(png_problem, file=sys.stderr)
    if ns.markdown:
        report.write_markdown(ns.markdown, rows, meta, ns.png if ns.png and not png_problem else None)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
