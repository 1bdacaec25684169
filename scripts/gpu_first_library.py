"""Why `pybridge bench overhead`'s "pybridge (default mode)" row costs more than its "api mode" row
on cuda (issue 34: 2.76 against 1.95 µs on the H100, both API mode).

The two rows differ in three ways only: the default row's library is loaded first (its CUDA context
is the process's first), it is measured first (right after loading), and it is measured while it is
the only library (the api row's library is the third). This separates them, each library measured
in alternation with the other so that both see the same machine:

  A: pf.load(probe) (default mode), B: pf.load(probe, mode="api"), loaded in that order;
  rounds of A, B, A, B (pybridge trivial(1)) and of the bare cffi entry + sync on each context;
  then a third library C, and A, B, C again; then B closed, and A, C.

Reading it: A slower than B in every round, bare cffi too -> the first CUDA context costs more in
the driver (not pybridge); A slower only in pybridge's rows -> something of pybridge's differs per
library; only the first round slow -> the order (warm-up), which the bench must not take as a cost.

Run on the GPU machine from the checkout, after `python3 setup.py -q build_ext --inplace`:
    python3 scripts/gpu_first_library.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pybridge.futhark as pf  # noqa: E402
from pybridge import cudriver  # noqa: E402
from pybridge.bench.common import probe_library  # noqa: E402
from pybridge.bench.timing import measure  # noqa: E402
from pybridge.futhark import callpath  # noqa: E402

CALLS, REPEAT = 3000, 9


def bare(lib: pf.Library):
    fn, sync, ctx, out = lib.lib.futhark_entry_trivial, lib.lib.futhark_context_sync, lib.context.ptr, lib.ffi.new("int32_t *")

    def call() -> None:
        fn(ctx, out, 1)
        sync(ctx)

    return call


def us(fn) -> float:
    return measure(fn, calls=CALLS, repeat=REPEAT)["median_us"]


def rounds(libs: dict[str, pf.Library], n: int = 3) -> None:
    for r in range(n):
        cells = []
        for name, lib in libs.items():
            cells.append(f"{name} pybridge {us(lambda lib=lib: lib.trivial(1)):.2f}")
            cells.append(f"{name} bare {us(bare(lib)):.2f}")
        print(f"  round {r}: " + "  ".join(cells), flush=True)


def main() -> None:
    so = probe_library("cuda")
    if so is None:
        sys.exit("no build/reference/cuda/libprobe.so (carry build/reference/cuda)")
    print(f"call path: {callpath.DESCRIPTION}")
    print(f"current CUDA context before loading: {cudriver.current_context():#x}")
    a = pf.load(so)
    print(f"A loaded (mode {a.mode}); current context {cudriver.current_context():#x}")
    print("A alone, measured first:")
    rounds({"A": a}, 2)
    b = pf.load(so, mode="api")
    print(f"B loaded (mode {b.mode}); current context {cudriver.current_context():#x}")
    print("A and B alternating:")
    rounds({"A": a, "B": b})
    print("B and A alternating (B first):")
    rounds({"B": b, "A": a})
    c = pf.load(so, mode="api")
    print("A, B, C alternating:")
    rounds({"A": a, "B": b, "C": c}, 2)
    b.close()
    print("B closed; A and C alternating:")
    rounds({"A": a, "C": c}, 2)
    a.close()
    c.close()


if __name__ == "__main__":
    main()
