"""Is a gap between pybridge and Futhark's executable in the library's code? One program, three
builds called through pybridge, beside the executable, alternated in 4 rounds of 15 runs:

- ``lib``: the hardened library, as `pybridge bench programs --prebuilt` builds it;
- ``unhardened``: the same program's `futhark <backend> --library` C without csource.py;
- ``exe C as lib``: the executable's own C (`futhark <backend> prog.fut`, main() included) compiled
  as a library, with the library's manifest and header beside it.

Prepare on the machine with Futhark (the first as for `pybridge bench programs --prebuilt`):

    FUTHARK=.tools/bin/futhark python3 -m pybridge bench programs --prepare PREP --backend cuda
    python3 benchmarks/programs_build_variants.py --setup PREP cuda nbody kmeans   # needs futhark

then, where the GPU is: ``python3 benchmarks/programs_build_variants.py PREP cuda nbody kmeans``.
On 2026-11-26 (H100) the three builds took the same time within noise (BENCHMARKS.md notes).
"""

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from pybridge.bench import programs as P


def setup(prep: Path, backend: str, name: str) -> None:
    d = prep / backend / name
    x = d / "variants"
    (x / "unh").mkdir(parents=True, exist_ok=True)
    (x / "exelib").mkdir(parents=True, exist_ok=True)
    shutil.copy(d / "exe" / f"{name}.c", x / "exelib")
    for ext in ("json", "h"):
        shutil.copy(d / "lib" / f"{name}.{ext}", x / "exelib")
    futhark = os.environ.get("FUTHARK", "futhark")
    subprocess.run([futhark, backend, "--library", "-o", str(x / "unh" / name), str(d / f"{name}.fut")],
                   check=True, env={**os.environ, "CC": "true"})


def run(prep: Path, backend: str, name: str) -> None:
    import pybridge.futhark as pf
    from pybridge.futhark.build import compile_library

    d = prep / backend / name
    x = d / "variants"
    prog, exe, so = P.compile_prepared(d, backend)
    libs = {
        "lib": pf.load(so),
        "unhardened": pf.load(compile_library(x / "unh" / f"{name}.c", backend, x / "unh" / f"lib{name}.so")),
        "exe C as lib": pf.load(compile_library(x / "exelib" / f"{name}.c", backend, x / "exelib" / f"lib{name}.so")),
    }
    for ds in prog.datasets:
        data = P.dataset_bytes(None, prog, ds, prepared=d / "data")
        values = P.read_values(data, ds.describe())
        res: dict[str, list[float]] = {}
        for _ in range(4):
            res.setdefault("exe", []).extend(P.run_executable(exe, ds.entry, data, 15, 100)[0])
            for key, lib in libs.items():
                res.setdefault(key, []).extend(P.run_pybridge(lib, ds.entry, values, 15)[0])
        print(f"{name} {ds.describe()[:24]:24} " + "  ".join(f"{k} {statistics.median(v):7.1f}" for k, v in res.items()),
              flush=True)
    for lib in libs.values():
        lib.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    do_setup = args[:1] == ["--setup"]
    prep, backend, names = Path(args[do_setup]), args[do_setup + 1], args[do_setup + 2:]
    for n in names:
        (setup if do_setup else run)(prep, backend, n)
