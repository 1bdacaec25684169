"""Per-call overhead of a Futhark entry point from Python, and the cost of converting NumPy data on
every call instead of keeping it in Futhark.

Rows (probe.fut's `trivial : i32 -> i32` and `saxpy`, c backend unless --backend):
- raw cffi call: the C function alone through the ABI-mode binding (the floor for ABI mode);
- pybridge abi / api: a full `lib.trivial(x)` (argument checks, error check, scalar sync);
- futhark-ffi (baseline, when installed and the generated C is at hand): `fut.trivial(x)`;
- saxpy with NumPy in and out on every call vs with handles kept in Futhark.

    python benchmarks/bench_call_overhead.py [--backend c] [--n 100000]
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import pybridge.futhark as pf
from pybridge import bench
from pybridge.paths import find_build_file


def probe_library(backend: str) -> Path:
    for kind in ("reference", "fixtures"):
        p = find_build_file(f"{kind}/{backend}/libprobe.so")
        if p is not None:
            return p
    raise SystemExit(f"no probe library for {backend}: run `make fixtures` (or `make futhark` with the compiler)")


def futhark_ffi_module(so: Path):
    """Build probe with futhark-ffi (it compiles the generated C itself); None if impossible."""
    if importlib.util.find_spec("futhark_ffi") is None:
        return None, "futhark-ffi not installed (pip install futhark-ffi)"
    c_src = so.with_name("probe.c")
    if not c_src.exists():
        return None, "no generated probe.c (fixture library): futhark-ffi needs the compiler's C output"
    tmp = Path(tempfile.mkdtemp(prefix="ffi-baseline-"))
    for ext in ("c", "h", "json"):
        shutil.copy(so.with_name(f"probe.{ext}"), tmp)
    # `python -m futhark_ffi.build probe` does nothing in futhark-ffi 0.16 (no __main__ guard), so call main().
    code = "import sys; sys.argv=['build','probe']; import futhark_ffi.build as b; b.main()"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"futhark-ffi build failed: {proc.stderr[-200:]}"
    sys.path.insert(0, str(tmp))
    from futhark_ffi import Futhark

    return Futhark(importlib.import_module("_probe")), "futhark-ffi 0.16 (cffi API mode over the whole generated C)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="c")
    ap.add_argument("--n", type=int, default=100_000, help="saxpy length")
    ap.add_argument("--calls", type=int, default=20_000)
    ns = ap.parse_args()
    so = probe_library(ns.backend)
    rows: list[tuple[str, bench.Timing]] = []

    abi = pf.load(so)
    raw_fn, ctx, out = abi.lib.futhark_entry_trivial, abi.context.ptr, abi.ffi.new("int32_t *")
    rows.append(("raw cffi ABI call (floor)", bench.time_per_call(lambda: raw_fn(ctx, out, 1), calls=ns.calls)))
    rows.append(("pybridge abi: lib.trivial(1)", bench.time_per_call(lambda: abi.trivial(1), calls=ns.calls)))
    api_note = ""
    try:
        api = pf.load(so, mode="api")
        rows.append(("pybridge api: lib.trivial(1)", bench.time_per_call(lambda: api.trivial(1), calls=ns.calls)))
        raw_api, actx, aout = api.lib.futhark_entry_trivial, api.context.ptr, api.ffi.new("int32_t *")
        rows.append(("raw cffi API call (floor)", bench.time_per_call(lambda: raw_api(actx, aout, 1), calls=ns.calls)))
    except Exception as e:  # no header / no compiler
        api_note = f"api mode unavailable: {e}"
    fut, ffi_note = futhark_ffi_module(so)
    if fut is not None:
        rows.append(("futhark-ffi: fut.trivial(1)", bench.time_per_call(lambda: fut.trivial(1), calls=ns.calls)))

    x = np.random.default_rng(0).random(ns.n, dtype=np.float32)
    y = np.random.default_rng(1).random(ns.n, dtype=np.float32)
    rows.append((f"saxpy n={ns.n}: NumPy in, NumPy out each call",
                 bench.time_host(lambda: abi.saxpy(2.0, x, y).numpy(), warmup=5, repeat=200)))
    hx, hy = abi.types["[]f32"].new(x), abi.types["[]f32"].new(y)
    rows.append((f"saxpy n={ns.n}: handles kept in Futhark",
                 bench.time_host(lambda: abi.saxpy(2.0, hx, hy).free(), abi.sync, warmup=5, repeat=200)))
    if fut is not None:
        rows.append((f"saxpy n={ns.n}: futhark-ffi NumPy in/out",
                     bench.time_host(lambda: fut.from_futhark(fut.saxpy(2.0, x, y)), warmup=5, repeat=200)))

    print(f"library: {so} (backend {abi.backend}, {'real compiler output' if 'reference' in str(so) else 'conformance fixture'})")
    if api_note:
        print(api_note)
    print(f"baseline: {ffi_note}")
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  median per call")
    for name, t in rows:
        print(f"{name:<{width}}  {bench.fmt_seconds(t.median_s)}")
    abi.close()


if __name__ == "__main__":
    main()
