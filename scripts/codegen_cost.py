#!/usr/bin/env python3
"""What pybridge's C hardening and a library's compile flags cost, measured with Futhark's own
executable (issue 23): `futhark c prog.fut`'s C, built several ways, each linked at several code
offsets, all run interleaved with the executable's own timer (-r N -t), ratios to the first variant.

    PYTHONPATH=. python3 scripts/codegen_cost.py benchmarks/programs/kmeans.fut --dataset 1
    PYTHONPATH=. python3 scripts/codegen_cost.py benchmarks/programs/*.fut --variants exe,exe-hardened,lib-hardened

Why the offsets: the code layout alone (where the hot loops fall relative to 32/64-byte lines)
moved some of these programs by +-5-10% between builds that differ in nothing that runs (kmeans:
0.94-1.07 over 8 offsets). A variant is linked after 0, 16, ..., 112 bytes of padding, and the
ratio reported is the mean over the offsets; a cost that shows at every offset is the code's, one
that comes and goes is the layout's.

Variants (--variants, comma-separated; the first is the reference):
  exe              the C as `futhark c` writes it, built as futhark builds it (cc -O3 -std=c99, PIE)
  exe-hardened     the same C through pybridge.futhark.csource.harden
  lib, lib-hardened   shared library code (cc -O3 -fPIC, main renamed, run from a small launcher)
  lib-hardened-nsi    ... with -fno-semantic-interposition (pybridge's LIB_CFLAGS)
Timing: the trimmed mean (middle half) of each variant's runs per offset, so that the executable's
whole-microsecond timer does not hide differences in short runs."""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pybridge.bench.programs import dataset_bytes, parse_program
from pybridge.futhark.build import futhark_compiler
from pybridge.futhark.csource import harden

VARIANTS = {
    "exe": (False, "exe", []),
    "exe-hardened": (True, "exe", []),
    "lib": (False, "lib", []),
    "lib-hardened": (True, "lib", []),
    "lib-nsi": (False, "lib", ["-fno-semantic-interposition"]),
    "lib-hardened-nsi": (True, "lib", ["-fno-semantic-interposition"]),
}
MAIN = '-Dmain=__attribute__((visibility("default"))) pybridge_exe_main'
LAUNCHER = "int pybridge_exe_main(int, char **);\nint main(int c, char **v) { return pybridge_exe_main(c, v); }\n"


def build(fut: Path, names: list[str], offsets: list[int], work: Path, cc: str) -> dict[tuple[str, int], Path]:
    futhark = futhark_compiler()
    if futhark is None:
        sys.exit("no Futhark compiler (FUTHARK=...)")
    subprocess.run([futhark, "c", "-o", str(work / fut.stem), str(fut)], check=True, env={**os.environ, "CC": "true"})
    raw = (work / f"{fut.stem}.c").read_text()
    (work / "hardened.c").write_text(harden(raw)[0])
    (work / "launcher.c").write_text(LAUNCHER)
    pads = {}
    for k in offsets:
        s = work / f"pad{k}.s"
        s.write_text(f"\t.text\n{f'	.skip {k}' if k else ''}\n\t.section .note.GNU-stack,\"\",@progbits\n")
        subprocess.run([cc, "-c", "-o", str(s.with_suffix(".o")), str(s)], check=True)
        pads[k] = s.with_suffix(".o")
    exes = {}
    for name in names:
        hardened, kind, flags = VARIANTS[name]
        c = work / ("hardened.c" if hardened else f"{fut.stem}.c")
        o = work / f"{name}.o"
        if kind == "exe":
            subprocess.run([cc, "-O3", "-std=c99", *flags, "-c", "-o", str(o), str(c)], check=True)
        else:
            subprocess.run([cc, "-O3", "-fPIC", *flags, MAIN, "-c", "-o", str(o), str(c)], check=True)
        for k in offsets:
            exe = work / f"{name}.{k}"
            if kind == "exe":
                subprocess.run([cc, "-o", str(exe), str(pads[k]), str(o), "-lm"], check=True)
            else:
                so = work / f"lib{name}.{k}.so"
                subprocess.run([cc, "-shared", "-o", str(so), str(pads[k]), str(o), "-lm"], check=True)
                subprocess.run([cc, "-O2", "-o", str(exe), str(work / "launcher.c"), str(so), f"-Wl,-rpath,{work}"], check=True)
            exes[(name, k)] = exe
    return exes


def trimmed_mean(xs: list[float]) -> float:
    xs = sorted(xs)
    k = len(xs) // 4
    return statistics.fmean(xs[k : len(xs) - k])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("programs", nargs="+", type=Path)
    ap.add_argument("--dataset", type=int, default=None, help="index of the -- == dataset (default: every one)")
    ap.add_argument("--variants", default="exe,exe-hardened,lib-hardened,lib-hardened-nsi")
    ap.add_argument("--offsets", default="0,16,32,48,64,80,96,112")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (each runs every build once)")
    ap.add_argument("--runs", type=int, default=3, help="-r of each executable run")
    ap.add_argument("--min-us", type=float, default=20.0, help="skip datasets faster than this (no codegen signal)")
    args = ap.parse_args()
    names = args.variants.split(",")
    offsets = [int(x) for x in args.offsets.split(",")]
    cc = os.environ.get("CC", "cc")
    futhark = futhark_compiler()
    print(f"{'program dataset':<46} {'µs':>9}  " + "  ".join(f"{n:>16}" for n in names[1:]))
    for fut in args.programs:
        prog = parse_program(fut.resolve())
        with tempfile.TemporaryDirectory(prefix="pb-codegen-") as tmp:
            work = Path(tmp)
            exes = build(fut.resolve(), names, offsets, work, cc)
            datasets = prog.datasets if args.dataset is None else [prog.datasets[args.dataset]]
            for ds in datasets:
                data = dataset_bytes(futhark, prog, ds)

                def run(exe: Path, n: int) -> list[float]:
                    t = work / "times"
                    subprocess.run([str(exe), "-e", ds.entry, "-b", "-r", str(n), "-t", str(t)], input=data, check=True,
                                   stdout=subprocess.DEVNULL)
                    return [float(x) for x in t.read_text().split()]

                if statistics.median(run(exes[(names[0], 0)], 5)) < args.min_us:
                    continue
                times: dict[tuple[str, int], list[float]] = {key: [] for key in exes}
                for _ in range(args.rounds):
                    order = list(exes)
                    random.shuffle(order)
                    for key in order:
                        times[key] += run(exes[key], args.runs)
                ref = {k: trimmed_mean(times[(names[0], k)]) for k in offsets}
                cols = []
                for name in names[1:]:
                    ratios = [trimmed_mean(times[(name, k)]) / ref[k] for k in offsets]
                    cols.append(f"{statistics.fmean(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
                print(f"{(fut.stem + ' ' + ds.describe())[:46]:<46} {statistics.fmean(ref.values()):>9.1f}  " + "  ".join(f"{c:>16}" for c in cols),
                      flush=True)


if __name__ == "__main__":
    main()
