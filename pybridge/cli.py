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
        ("futhark compiler", f"{fut_v} ({fut})" if fut else "not found: https://futhark-lang.org/releases/ (or FUTHARK=...)"),
        ("nvcc", f"{nvcc_v} ({nvcc})" if nvcc else "not found (CUDA toolkit)"),
        ("GPU", _gpu_description()),
        ("PyCUDA", _version_of("pycuda") or "not installed (pip install 'pybridge[cuda]')"),
        ("CuPy", _version_of("cupy") or "not installed"),
        ("PyTorch", _version_of("torch") or "not installed"),
        ("build dirs", ", ".join(map(str, paths.build_dirs())) or "none (run make)"),
    ]
    for kind, names in built_backends().items():
        rows.append((f"built {kind}", ", ".join(names)))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


# ---------------------------------------------------------------- demo


def _best_backends() -> list[str]:
    from .futhark.library import _gpu_present

    order = ["multicore", "c"]
    if _gpu_present()[0]:
        order.insert(0, "cuda")
    return order


def _run_futhark_example(ex: Any, libs: dict[Path, Any], size: int | None) -> tuple[str, str, str, str]:
    from . import bench, examples
    from . import futhark as pf

    for backend in _best_backends():
        found = examples.find_library(ex, backend)
        if found:
            break
    else:
        return ("-", "not built", "-", "run `make` (it obtains the Futhark compiler) to build futhark/*.fut")
    src, path = found
    where = f"{src.kind}:{src.library}/{backend}"
    try:
        lib = libs.get(path) or libs.setdefault(path, pf.load(path))
        fn = lib.entry_points[src.entry]
        args = ex.inputs(size)
        if ex.make_bad_inputs is not None:  # the example demonstrates an error
            bad = ex.make_bad_inputs(__import__("numpy").random.default_rng(0), 4)
            try:
                fn(*bad)
                return (where, "NO ERROR", "-", "expected a Futhark program error")
            except pf.ProgramError as e:
                ok = ex.error_substring is None or ex.error_substring in str(e)
                return (where, "ok" if ok else "WRONG ERROR", "-", str(e).splitlines()[0])
        # Keep inputs in Futhark between calls (the fast path), then time call + sync.
        handles = [lib.types[p.type].new(a) if p.type.startswith("[") else a for p, a in zip(fn.entry.inputs, args)]
        result = fn(*handles)
        check = ex.check(args, result, source=src)
        t = bench.time_host(lambda: fn(*handles), lib.sync, warmup=2, repeat=10)
        return (where, "ok" if check.ok else "MISMATCH", str(t), "" if check.ok else check.message[:60])
    except Exception as e:  # the demo reports, it does not crash
        return (where, "ERROR", "-", f"{type(e).__name__}: {str(e).splitlines()[0][:70]}")


def _cuda_call(ex: Any, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """(callable ``run(out)`` running the example's kernels on device-resident inputs, writing into
    ``out`` or a new array when None; result converter). The catalog's operations take the
    example's logical inputs (see examples.py)."""
    import numpy as np

    from . import cuda
    from .cuda import catalog

    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    op = ex.cuda_op
    get = lambda r: r.get()  # noqa: E731
    if op == "saxpy":
        return (lambda out: catalog.cuda_saxpy(*dev, out)), get
    if op == "sum":
        return (lambda out: catalog.cuda_sum(dev[0], out)), (lambda r: r.get()[0])
    if op == "scan":
        return (lambda out: catalog.cuda_scan(dev[0], out)), get
    if op == "matmul":
        return (lambda out: catalog.cuda_matmul(dev[0], dev[1], out)), get
    if op == "histogram":
        nbins, xs = dev
        return (lambda out: catalog.cuda_histogram(xs, int(nbins), out)), get
    if op == "mandelbrot":
        return (lambda out: catalog.cuda_mandelbrot(*dev, out=out)), get
    if op == "chain":
        nops = int(ex.params["nops"])
        return (lambda out: catalog.cuda_chain(dev[0], nops, out)), get
    raise KeyError(f"no CUDA operation {op!r}")


def _run_cuda_example(ex: Any, size: int | None) -> tuple[str, str, str, str] | None:
    if not ex.cuda_op:
        return None
    where = f"kernels_cu:{ex.cuda_op}"
    try:
        from . import bench, cuda

        if not cuda.have_pycuda():
            return (where, "skipped", "-", "PyCUDA not installed (pip install 'pybridge[cuda]')")
        import pycuda.driver as drv

        args = ex.inputs(size)
        run, convert = _cuda_call(ex, args)
        result = run(None)
        check = ex.check(args, convert(result))
        # Timed writing into that result: data and outputs stay on the device, as they should in
        # a loop (an allocation per call costs a cuMemAlloc and a synchronising cuMemFree).
        t = bench.time_host(lambda: run(result), drv.Context.synchronize, warmup=2, repeat=10)
        return (where, "ok" if check.ok else "MISMATCH", str(t), "" if check.ok else check.message[:60])
    except Exception as e:  # the demo reports, it does not crash
        return (where, "ERROR", "-", f"{type(e).__name__}: {str(e).splitlines()[0][:70]}")


def cmd_demo(ns: argparse.Namespace) -> int:
    from . import examples
    from .futhark.library import _gpu_present

    gpu, why = _gpu_present()
    names = ns.examples or list(examples.DEMO_EXAMPLES)
    libs: dict[Path, Any] = {}
    rows = [("example", "ran on", "result", "time/call (median)", "note")]
    bad = 0
    for name in names:
        ex = examples.get(name)
        r = _run_futhark_example(ex, libs, ns.size)
        rows.append((name, *r))
        bad += r[1] not in ("ok", "skipped", "not built")
        if gpu:
            c = _run_cuda_example(ex, ns.size)
            if c:
                rows.append(("", *c))
                bad += c[1] not in ("ok", "skipped")
    for lib in libs.values():
        lib.close()
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\nTimes: call + device sync, after warm-up, inputs resident (Futhark handles; device arrays "
          "for kernels_cu, writing into a reused out=).")
    built = built_backends()
    if not any(k.startswith("futhark/") for k in built):
        print("\nNo Futhark library was built, so no Futhark example ran. `make` obtains the Futhark "
              "compiler (scripts/install-futhark.sh) and builds futhark/*.fut.")
    if not gpu:
        print(f"No GPU here ({why}): CUDA kernels and the cuda backend were not run. On a machine "
              "with an NVIDIA GPU: `make cuda` and `pip install 'pybridge[cuda]'`.")
    return 1 if bad else 0


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
