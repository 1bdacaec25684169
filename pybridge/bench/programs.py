"""``pybridge bench programs``: pybridge against the Futhark compiler's own executable, on real programs.

For every ``.fut`` file given (default: benchmarks/programs/ in a checkout) and every dataset of its
``-- ==`` blocks (``input { ... }``, ``random input { [1000]f32 i64 }``, ``compiled input @ file``
where the file exists; ``-- entry: a b`` names the entry points, default ``main``), on each backend:

- the executable: ``futhark <backend> prog.fut``, then ``./prog -e entry -b -r N -t times.txt``
  with the dataset (in Futhark's binary format, made by ``futhark dataset -b``) on stdin; the runtimes
  it writes exclude parsing and printing;
- bare cffi: the same library's C entry function and ``futhark_context_sync`` called through cffi
  with nothing of pybridge's call path, its scalar results read from their cells as a caller must
  to have them (``_BareSide``; pybridge's call returns them): against the executable it shows what
  the library and the process cost, against pybridge what pybridge's call path adds;
- pybridge: the same program loaded with ``pybridge.futhark.load``, the inputs made into handles once
  (scalars passed as the NumPy scalars a loader returns), a warm-up call, then timed calls of
  ``entry(*handles)`` followed by ``lib.sync()``, the results freed outside the timed region (a
  consumed input gets a fresh handle before each call, also untimed); the handle objects of the
  previous call's results are released inside it, as a caller's next assignment releases them.
  An entry point with a scalar result synchronises before it returns (the C API's rule for reading
  one), as the bare call's one ``futhark_context_sync`` does: its calls are timed without a second
  ``lib.sync()``, which would be a sync the other two sides do not make (on cuda a driver round
  trip, about 1 µs).

The runs are split into up to six rounds that alternate the executable and the pybridge / bare
cffi blocks, so that both see the same machine load. The executable gets as many runs as
``PAIR_BUDGET_S`` buys (at least ``--runs``; a round at most ``EXE_MAX_RUNS``, and ``EXE_GROWTH``
times its most so far), as pybridge's side does, once its rounds show what a run costs
(``_exe_run_s``). Its runtimes are whole microseconds (its own resolution): its figure is their
mean within 1 µs of their median (``timing.whole_unit_mean``), which for a call near 1 µs is its
duration, where the median is that duration rounded to a whole µs (up to ±50% there);
``exe_median_us`` keeps the median.

pybridge - bare cffi, per (program, dataset): both sides call on the same input handles, in blocks
of ``BLOCK`` (5) calls of one side and then of the other, which side leads alternating
(``run_paired``); at least ``--runs`` calls each, and more while ``PAIR_BUDGET_S`` (0.6 s) lasts,
so that a short call is measured thousands of times. The figure is the median, over the block
pairs, of the difference of the two blocks' medians, with its 95% confidence interval
(``timing.paired_difference``: distribution-free, from the order statistics). Each block pair saw
the same machine within a few milliseconds, so load and clock drift cancel out, and a 500 µs
call's ±5 µs from one call to the next is not read as pybridge's: it widens the interval instead.
The block median leaves out the first call after the other side's block, which both sides pay for
(single calls in turn charged it to pybridge's longer path: matmul 64x64 read +2 µs where blocks
read +0.3 µs in the same process), and an A/A run (bare against bare, pybridge against pybridge)
reads 0 within ±0.5 µs. The interval covers the noise within one run, not what changes between
processes: matmul 64x64 read +0.2 to +2.3 µs over 7 processes, the larger figures where the call
itself ran in its slower mode (225 against 175 µs, bare cffi alike), with the library's own
instruction count the same on both sides. Every row shows its figure, interval and block pairs;
the summary's median and worst are over the rows of calls under 1 ms, the worst naming its row.

The results of both must be equal (exact for integers and bools, 1e-5 relative for floats; the
executable's binary output is read with ``pybridge.futhark.binformat``); a mismatch is reported and
counts as a failure. Per (program, dataset): executable, bare cffi and pybridge medians, the
difference to the executable (µs added per call), the ratio, and pybridge - bare cffi (above).
Summary per backend: median and worst added µs over calls under 1 ms (where a fixed cost shows),
pybridge - bare cffi median and worst over the same calls, median and worst ratio over all pairs
and over calls of 1 ms or more, against the targets (TARGET_* below; ``pybridge bench report``
shows them in BENCHMARKS.md).

On a machine without the Futhark compiler (the GPU machine), ``--prepare DIR`` (run where Futhark
is) writes the generated C and the literal datasets, and ``--prebuilt DIR`` compiles and runs them
there (random datasets drawn with NumPy as ``futhark dataset`` draws them).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..cliargs import backend_list, existing_dir, existing_file, output_dir, positive_float
from ..errors import PybridgeError
from ..executables import child_env
from .common import gpu_status, positive_int, row, show, skipped
from .timing import paired_difference, whole_unit_mean

HELP = "real programs: pybridge on resident handles vs the Futhark compiler's own executable (futhark <backend>; -r N -t)"

TARGET_ADDED_MEDIAN_US = 2.0  # median over programs, c backend
TARGET_ADDED_WORST_US = 4.0  # worst entry shape
TARGET_RATIO_LONG = 1.02  # calls of 1 ms or more
TARGET_OVER_BARE_MEDIAN_US, TARGET_OVER_BARE_WORST_US = 1.0, 2.0  # issue 34: pybridge - bare cffi, c, calls < 1 ms
TARGET_RATIO_MEDIAN_ALL, TARGET_RATIO_WORST_ALL = 1.02, 1.2  # every pair (the cuda rows' targets)
LONG_US = 1000.0
ROUNDS = 6  # the executable and the pybridge / bare cffi blocks alternate, runs split over this many rounds
PAIR_BUDGET_S = 0.6  # per (program, dataset): pybridge and bare calls beyond `runs` while this lasts (not --quick)
MAX_CALLS = 20_000  # per side
EXE_MAX_RUNS = 1000  # the executable's runs per round beyond --runs (its readings' mean then known to ~0.01 µs)
EXE_GROWTH = 10  # the executable's runs per round: at most this many times its most in one process so far
BLOCK = 5  # calls of one side in a row (run_paired)

BENCHMARK = "programs"
PRIMS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64", "bool")
_TYPE = re.compile(r"^(\[\d+\])*(" + "|".join(PRIMS) + r")$")


class ProgramError(PybridgeError, RuntimeError):
    """A program or dataset that cannot be benchmarked (reported as a skipped row)."""


@dataclass
class Dataset:
    entry: str
    kind: str  # "input", "random", "file"
    text: str  # the values, the random types, or the file path
    name: str

    def describe(self) -> str:
        return f"{self.entry}:{self.name}"


@dataclass
class Program:
    path: Path
    datasets: list[Dataset] = field(default_factory=list)


# ------------------------------------------------------------------ parsing the -- == blocks


def _braced(text: str, start: int) -> tuple[str, int]:
    """The text between the brace at ``start`` and its partner, and the index after it."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    raise ProgramError("unbalanced braces in a test block")


_DATASET = re.compile(r"\b(?:(compiled|script|nobench|notest)\s+)*(random\s+)?input\b\s*(@\s*(\S+)|\{)")


def parse_program(path: Path) -> Program:
    """The datasets of ``path``'s ``-- ==`` blocks, in order."""
    prog = Program(path)
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "-- ==":
            i += 1
            continue
        block: list[str] = []
        i += 1
        while i < len(lines) and lines[i].lstrip().startswith("--"):
            block.append(lines[i].lstrip()[2:])
            i += 1
        text = "\n".join(block)
        entries = ["main"]
        m = re.search(r"^\s*entry:\s*(.*)$", text, re.M)
        if m:
            entries = m.group(1).split()
            text = text[: m.start()] + text[m.end() :]
        pos, n = 0, 0
        while True:
            m = _DATASET.search(text, pos)
            if not m:
                break
            mods = m.group(0)
            if m.group(4):  # @ file
                kind, body, pos = "file", m.group(4), m.end()
                name = m.group(4)
            else:
                body, pos = _braced(text, m.end() - 1)
                kind = "random" if m.group(2) else "input"
                name = f"#{n}" if kind == "input" else " ".join(body.split())
            n += 1
            if "script" in mods.split():  # FutharkScript inputs: not supported here
                continue
            for e in entries:
                prog.datasets.append(Dataset(e, kind, " ".join(body.split()) if kind != "file" else body, name))
            # skip a following "output { ... }" (values to compare with are the executable's own)
            o = re.match(r"\s*(output|error:)\s*", text[pos:])
            if o and o.group(1) == "output" and text[pos + o.end() : pos + o.end() + 1] == "{":
                _, pos = _braced(text, pos + o.end())
    return prog


# ------------------------------------------------------------------ inputs


def _dataset_tool(futhark: str, args: list[str], stdin: bytes | None = None) -> bytes:
    proc = subprocess.run([futhark, "dataset", "-b", *args], input=stdin, capture_output=True, env=child_env())
    if proc.returncode != 0:
        raise ProgramError(f"futhark dataset {' '.join(args)} failed: {proc.stderr.decode()[-200:]}")
    return proc.stdout


def _random_value(tok: str, rng: np.random.Generator) -> bytes:
    """A random value of the type ``tok`` (``[2][3]f32``) in the binary format, drawn as ``futhark
    dataset`` draws by default (integers over their whole range, floats in [0, 1)): used where no
    Futhark compiler is installed (the GPU machine)."""
    dims = [int(d) for d in re.findall(r"\[(\d+)\]", tok)]
    elem = tok[tok.rfind("]") + 1 :] if dims else tok
    dt = np.dtype(PRIM_DTYPES[elem])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, size=dims, dtype=dt, endpoint=True)
    elif dt.kind == "f":
        a = rng.random(size=dims).astype(dt)
    else:
        a = rng.integers(0, 2, size=dims).astype(np.bool_)
    return encode(np.asarray(a), elem)


def encode(a: np.ndarray, elem: str) -> bytes:
    """One value in Futhark's binary format."""
    head = b"b\x02" + bytes([a.ndim]) + elem.rjust(4).encode()
    data = a.astype(a.dtype.newbyteorder("<")) if a.dtype.kind != "b" else a.astype(np.uint8)
    return head + np.asarray(a.shape, "<i8").tobytes() + np.ascontiguousarray(data).tobytes()


PRIM_DTYPES = {"i8": "i1", "i16": "i2", "i32": "i4", "i64": "i8", "u8": "u1", "u16": "u2", "u32": "u4", "u64": "u8",
               "f16": "f2", "f32": "f4", "f64": "f8", "bool": "?"}


def dataset_bytes(futhark: str | None, prog: Program, ds: Dataset, seed: int = 0, prepared: Path | None = None) -> bytes:
    """The dataset in Futhark's binary value format: by ``futhark dataset``, or, without a Futhark
    compiler, from ``prepared`` (literal values, converted by ``--prepare``) and NumPy (random ones)."""
    if futhark is None:
        if ds.kind == "random" and all(_TYPE.match(t) for t in ds.text.split()):
            rng = np.random.default_rng(seed)
            return b"".join(_random_value(t, rng) for t in ds.text.split())
        f = prepared / dataset_file(ds) if prepared is not None else None
        if f is None or not f.is_file():
            raise ProgramError(f"no Futhark compiler here and no prepared file for dataset {ds.describe()}")
        return f.read_bytes()
    if ds.kind == "file":
        f = prog.path.parent / ds.text
        if not f.is_file():
            raise ProgramError(f"input file {ds.text} not found beside {prog.path.name}")
        data = f.read_bytes()
        return data if data[:1] == b"b" else _dataset_tool(futhark, [], data)
    if ds.kind == "input":
        return _dataset_tool(futhark, [], ds.text.encode()) if ds.text.strip() else b""
    out = b""
    for k, tok in enumerate(ds.text.split()):
        if _TYPE.match(tok):
            out += _dataset_tool(futhark, ["-s", str(seed + k), "-g", tok])
        else:  # a literal among random values, e.g. 100i64
            out += _dataset_tool(futhark, [], tok.encode())
    return out


def read_values(data: bytes, what: str) -> list[Any]:
    """The values of a binary-format byte string (the executable separates them with newlines):
    NumPy arrays, and NumPy scalars for rank 0. Every length is checked by ``binformat``."""
    from ..futhark.binformat import ELEMENT_TYPES, HEADER
    from ..futhark.binformat import read_values as components

    out: list[Any] = []
    pos, end = 0, len(data)
    while True:
        while pos < end and data[pos] in b" \t\r\n":
            pos += 1
        if pos == end:
            return out
        if end - pos < HEADER:
            raise ValueError(f"{what}: truncated value at byte {pos}")
        rank = data[pos + 2]
        shape = np.frombuffer(data, "<i8", count=rank, offset=pos + HEADER) if rank else ()
        dt = ELEMENT_TYPES.get(bytes(data[pos + 3 : pos + 7]))
        if dt is None or any(s < 0 for s in shape):
            raise ValueError(f"{what}: not a binary Futhark value at byte {pos}")
        count = int(np.prod(shape, dtype=object)) if rank else 1
        size = HEADER + 8 * rank + count * dt.itemsize
        (c,) = components(data[pos : pos + size], f"{what} value {len(out)}")  # checks the lengths
        chunk = data[pos : pos + size]
        a = np.frombuffer(chunk, dt, count=count, offset=c.data_offset)
        a = a.astype(np.bool_) if c.type == "bool" else a.astype(dt.newbyteorder("="))  # a copy, native order
        out.append(a.reshape(c.shape) if c.rank else a[0])
        pos += size


def equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(np.array_equal(a, b))


# ------------------------------------------------------------------ the two sides


def compile_executable(futhark: str, src: Path, backend: str, work: Path) -> Path:
    """``futhark <backend> prog.fut`` into ``work`` (the source folder is copied: imports and data)."""
    dst = work / backend / src.parent.name
    if not dst.exists():
        shutil.copytree(src.parent, dst, ignore=shutil.ignore_patterns("*.c", "*.so", "data", "__pycache__"))
    exe = dst / src.stem
    # futhark runs the C compiler ($CC, else cc) itself: by PATH's absolute folders only
    proc = subprocess.run([futhark, backend, "-o", str(exe), str(dst / src.name)], capture_output=True, text=True,
                          env=child_env())
    if proc.returncode != 0:
        raise ProgramError(f"futhark {backend} {src.name} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return exe


GPU_BACKENDS = ("cuda", "opencl", "hip")


def run_executable(exe: Path, entry: str, data: bytes, runs: int, timeout: float,
                   cache_file: Path | None = None) -> tuple[list[float], list[Any]]:
    """(runtimes in µs, result values) of ``runs`` runs of ``entry``; ``cache_file``: the GPU
    backends' kernel cache (``--cache-file``), so that later rounds do not compile the kernels again."""
    with tempfile.TemporaryDirectory(prefix="pb-exe-") as tmp:
        times = Path(tmp) / "times.txt"
        extra = ["--cache-file", str(cache_file)] if cache_file is not None else []
        proc = subprocess.run([str(exe), "-e", entry, "-b", "-r", str(runs), "-t", str(times), *extra], input=data,
                              capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise ProgramError(f"{exe.name} -e {entry} exited {proc.returncode}: {proc.stderr.decode()[-300:]}")
        runtimes = [float(x) for x in times.read_text().split()]
    if not runtimes:
        raise ProgramError(f"{exe.name} wrote no runtimes")
    return runtimes, read_values(proc.stdout, f"{exe.name} output")


def _input_handles(lib: Any, info: Any, values: list[Any]) -> list[Any]:
    """The dataset's values as the entry takes them: arrays as new handles, scalars as they are."""
    from ..futhark.types import PRIMITIVES

    return [v if p.type in PRIMITIVES else lib.types[p.type].new(v) for p, v in zip(info.inputs, values)]


def _renew_consumed(lib: Any, info: Any, values: list[Any], held: list[Any], fresh: list[int]) -> None:
    """Before every call after the first: each input the last call consumed (positions ``fresh``)
    is freed (all the C API allows; a no-op where pybridge already marked it consumed) and replaced
    by a fresh handle, whose upload (asynchronous on GPU backends) finishes here, untimed."""
    if not fresh:
        return
    for i in fresh:
        held[i].free()
        held[i] = lib.types[info.inputs[i].type].new(values[i])
    lib.sync()


def _check_printable(entry: str, info: Any, values: list[Any]) -> None:
    from ..futhark.types import PRIMITIVES

    if len(values) != len(info.inputs):
        raise ProgramError(f"{entry} takes {len(info.inputs)} values, the dataset has {len(values)}")
    for p in list(info.inputs) + list(info.outputs):
        if p.type not in PRIMITIVES and not p.type.startswith("[]"):
            raise ProgramError(f"{entry} takes or returns the opaque type {p.type} (the executable cannot print it)")


def _consumed(info: Any) -> list[int]:
    from ..futhark.types import PRIMITIVES

    return [i for i, p in enumerate(info.inputs) if p.unique and p.type not in PRIMITIVES]


def _synced() -> None:
    """In place of lib.sync() after a call that synchronised before returning (a scalar result)."""


class _Inputs:
    """A dataset's inputs as an entry point takes them (arrays as handles, scalars as they are),
    shared by the calls made on them: before every call after the first, the inputs the previous
    one consumed are renewed (untimed)."""

    def __init__(self, lib: Any, entry: str, values: list[Any]) -> None:
        self.lib, self.values, self.info = lib, values, lib.entry_points[entry].info
        _check_printable(entry, self.info, values)
        self.fresh = _consumed(self.info)
        self.handles = _input_handles(lib, self.info, values)
        self.used = False

    def ready(self) -> list[Any]:
        if self.used:
            _renew_consumed(self.lib, self.info, self.values, self.handles, self.fresh)
        self.used = True
        return self.handles

    def close(self) -> None:
        for h in self.handles:
            if hasattr(h, "free"):
                h.free()  # the last call's consumed inputs: freed already or consumed in C, freed now


class _PybridgeSide:
    """pybridge's timed call on resident handles (the module's docstring says what is timed)."""

    def __init__(self, lib: Any, entry: str, inputs: _Inputs) -> None:
        from ..futhark.types import PRIMITIVES

        self.ep, self.inputs = lib.entry_points[entry], inputs
        # A scalar result: the call has synchronised already (see the module's docstring).
        self.sync = _synced if any(o.type in PRIMITIVES for o in self.ep.info.outputs) else lib.sync
        self.last: Any = None  # the previous call's result handles (freed), dropped in the next timed call
        self.results: list[Any] = []

    def call(self, keep: bool = False) -> float:
        """One call in µs: consumed inputs renewed before it and results freed after it, untimed;
        ``keep``: its results, as NumPy, in ``self.results``."""
        args = self.inputs.ready()
        t0 = time.perf_counter()
        out = self.ep(*args)
        self.last = out  # releases the previous results' handle objects: pybridge's cost, timed
        self.sync()
        t1 = time.perf_counter()
        outs = out if isinstance(out, tuple) else (out,)
        if keep:
            self.results = [o.numpy() if hasattr(o, "numpy") else o for o in outs]
        for o in outs:
            if hasattr(o, "free"):
                o.free()
        return (t1 - t0) * 1e6


class _BareSide:
    """The same library's entry point called through cffi with nothing of pybridge's call path:
    the C entry function and ``futhark_context_sync``, timed as pybridge's call is (the same inputs
    and renewal of consumed ones, untimed; results freed untimed)."""

    def __init__(self, lib: Any, entry: str, inputs: _Inputs) -> None:
        from ..futhark.types import PRIMITIVES

        ep = lib.entry_points[entry]
        self.lib, self.info, self.inputs = lib, ep.info, inputs
        info = self.info
        self.fn, self.sync = getattr(lib.lib, info.cfun), lib.lib.futhark_context_sync
        self.ctx = lib.context._state.ctx
        self.cells = [lib.codec.out_cell(o.type) for o in info.outputs]
        self.frees = [(cell, lib.types[o.type].free_fn) for cell, o in zip(self.cells, info.outputs) if o.type not in PRIMITIVES]
        # scalar results read, as a caller must to have them (pybridge's call returns them)
        self.reads = [cell for cell, o in zip(self.cells, info.outputs) if o.type in PRIMITIVES]
        # scalars as the C call takes them (the entry's converters: f16 passes as its bits), once
        self.scalars = {i: ep._convs[i](v) for i, (p, v) in enumerate(zip(info.inputs, inputs.handles)) if p.type in PRIMITIVES}

    def call(self) -> float:
        held = self.inputs.ready()  # kept alive while their pointers are passed
        ctx, sync = self.ctx, self.sync
        args = [ctx, *self.cells, *(self.scalars[i] if i in self.scalars else h._ptr for i, h in enumerate(held))]
        reads = self.reads
        t0 = time.perf_counter()
        rc = self.fn(*args)
        rc = rc or sync(ctx)
        if not rc:
            [cell[0] for cell in reads]  # noqa: B018 - the values a caller reads; pybridge returns them
        t1 = time.perf_counter()
        if rc:
            raise self.lib.context.error(rc, self.info.cfun)
        for cell, free in self.frees:
            free(ctx, cell[0])
        return (t1 - t0) * 1e6


def run_pybridge(lib: Any, entry: str, values: list[Any], runs: int) -> tuple[list[float], list[Any]]:
    """(per-call µs, results as NumPy) of ``runs`` timed calls on resident handles, after a warm-up."""
    inputs = _Inputs(lib, entry, values)
    try:
        side = _PybridgeSide(lib, entry, inputs)
        side.call()  # warm-up
        samples = [side.call(keep=k == runs - 1) for k in range(runs)]
        return samples, side.results
    finally:
        inputs.close()


def run_bare(lib: Any, entry: str, values: list[Any], runs: int) -> list[float]:
    """Per-call µs of ``runs`` bare cffi calls (``_BareSide``), after a warm-up. Against the
    executable it shows what the library and the process cost, against pybridge what pybridge's
    call path adds."""
    inputs = _Inputs(lib, entry, values)
    try:
        side = _BareSide(lib, entry, inputs)
        side.call()  # warm-up
        return [side.call() for _ in range(runs)]
    finally:
        inputs.close()


@dataclass
class Paired:
    """What :func:`run_paired` measured: every call's µs per side, each block's median per side
    (``py_blocks[k]`` and ``bare_blocks[k]`` are neighbours in time), pybridge's results."""

    py_us: list[float] = field(default_factory=list)
    bare_us: list[float] | None = field(default_factory=list)
    py_blocks: list[float] = field(default_factory=list)
    bare_blocks: list[float] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)


def run_paired(lib: Any, entry: str, values: list[Any], calls: int, budget_s: float = 0.0, max_calls: int = 0,
               block: int = BLOCK) -> Paired:
    """pybridge and bare cffi in turn on the same input handles, in blocks of ``block`` calls of
    one side then ``block`` of the other, which side goes first alternating, after a warm-up of
    both: at least ``calls`` calls per side, more while ``budget_s`` seconds last (at most
    ``max_calls``), whole block pairs only. A block pair's two medians saw the same machine and
    the same memory, so their difference is what pybridge adds to the call
    (timing.paired_difference over the pairs); a block's median leaves out its first call, which
    follows the other side's calls (single calls in turn made both sides pay for the switch,
    pybridge's longer path more: matmul 64x64 +2 µs against +0.3 µs in blocks, the same
    process). Where the bare call cannot be made (the floor column only): pybridge's calls alone."""
    out = Paired()
    inputs = _Inputs(lib, entry, values)
    try:
        py = _PybridgeSide(lib, entry, inputs)
        bare: _BareSide | None
        try:
            bare = _BareSide(lib, entry, inputs)
            bare.call()
        except Exception:  # noqa: BLE001 - the floor column only: the comparison stands without it
            bare, out.bare_us = None, None
        py.call()
        start = time.perf_counter()
        while len(out.py_us) < calls or (len(out.py_us) < max_calls and time.perf_counter() - start < budget_s):
            if bare is None:
                out.py_us.append(py.call())
                continue
            first_py = len(out.py_blocks) % 2 == 0
            for side in ((py, bare) if first_py else (bare, py)):
                got = [side.call() for _ in range(block)]
                if side is py:
                    out.py_us += got
                    out.py_blocks.append(statistics.median(got))
                else:
                    assert out.bare_us is not None
                    out.bare_us += got
                    out.bare_blocks.append(statistics.median(got))
        py.call(keep=True)  # the results compared with the executable's (untimed)
        py.last = None
        out.results = py.results
        return out
    finally:
        inputs.close()


# ------------------------------------------------------------------ prepared C (for a machine without Futhark)


def dataset_file(ds: Dataset) -> str:
    import hashlib

    return f"{ds.entry}-{hashlib.sha1(f'{ds.kind}:{ds.text}'.encode()).hexdigest()[:12]}.in"


def prepare(futhark: str, files: list[Path], backend: str, out: Path) -> list[dict[str, Any]]:
    """Write what a machine without the Futhark compiler needs to run this comparison (``--prebuilt``):
    per program, the executable's C (``futhark <backend>`` with CC=true), the library's C (hardened,
    as ``pybridge build`` makes it) and every non-random dataset in the binary format. Random
    datasets are drawn there with NumPy."""
    from ..futhark.csource import harden_file

    rows = []
    for f in files:
        f = Path(f).resolve()
        d = out / backend / f.stem
        try:
            prog = parse_program(f)
            (d / "exe").mkdir(parents=True, exist_ok=True)
            (d / "lib").mkdir(parents=True, exist_ok=True)
            (d / "data").mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, d / f.name)
            env = child_env(CC="true")  # the C only: compiled where the GPU is
            for cmd in ([futhark, backend, "-o", str(d / "exe" / f.stem), str(f)],
                        [futhark, backend, "--library", "-o", str(d / "lib" / f.stem), str(f)]):
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    raise ProgramError(f"{' '.join(cmd)} failed: {proc.stderr[-300:]}")
            (d / "exe" / f.stem).unlink(missing_ok=True)
            harden_file(d / "lib" / f"{f.stem}.c")
            for ds in prog.datasets:
                if ds.kind != "random" or not all(_TYPE.match(t) for t in ds.text.split()):
                    (d / "data" / dataset_file(ds)).write_bytes(dataset_bytes(futhark, prog, ds))
            rows.append(row(f"{BENCHMARK} prepare ({backend})", f.stem, None, None, note=str(d)))
        except (ProgramError, OSError) as e:
            rows.append(skipped(f"{BENCHMARK} prepare ({backend})", f.stem, f"{type(e).__name__}: {str(e)[:300]}"))
    return rows


def compile_prepared(d: Path, backend: str) -> tuple[Program, Path, Path]:
    """(program, executable, library) from a ``--prepare`` folder, compiled here."""
    from ..futhark.build import LINK_FLAGS, _cuda13_compat, _cuda_dirs, _run, c_compiler, compile_library

    srcs = sorted(d.glob("*.fut"))
    if not srcs:
        raise ProgramError(f"{d}: no .fut source (not a --prepare folder)")
    stem = srcs[0].stem
    prog = parse_program(srcs[0])
    exe_c, exe = d / "exe" / f"{stem}.c", d / "exe" / stem
    cflags, ldflags = _cuda_dirs() if backend == "cuda" else ([], [])
    if backend == "cuda":
        _cuda13_compat(exe_c, Path(cflags[0][2:]) / "cuda.h")
    cc = c_compiler()  # with the flags futhark <backend> uses for its executables
    _run([cc, "-O3", "-std=c99", *cflags, "-o", str(exe), str(exe_c), *ldflags, *LINK_FLAGS[backend]], "C compiler")
    so = compile_library(d / "lib" / f"{stem}.c", backend, d / "lib" / f"lib{stem}.so")
    return prog, exe, so


# ------------------------------------------------------------------ the subcommand


def default_programs() -> list[Path]:
    here = Path(__file__).resolve().parents[2] / "benchmarks" / "programs"
    return sorted(here.glob("*.fut")) if here.is_dir() else []


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", type=lambda t: Path(existing_file("a Futhark program (.fut)", ".fut")(t)),
                   metavar="prog.fut", help=".fut files with -- == datasets (default: benchmarks/programs/*.fut)")
    p.add_argument("--backend", type=_backend_choice, default=None,
                   help="c, multicore, cuda (comma-separated), or all (every backend present; default: c, and cuda too with a GPU)")
    p.add_argument("--runs", type=positive_int, default=None, help="timed runs per dataset (default 50, --quick 5); pybridge and bare cffi: at least this many calls each")
    p.add_argument("--timeout", type=positive_float, default=300.0, help="seconds per executable run")
    p.add_argument("--prepare", metavar="DIR", type=lambda t: Path(output_dir(t)),
                   help="only write the C and the literal datasets into DIR, for a machine without Futhark (default backend cuda)")
    p.add_argument("--prebuilt", metavar="DIR", type=lambda t: Path(existing_dir(t)),
                   help="compile and run what --prepare wrote in DIR (no Futhark compiler needed; random inputs from NumPy)")


def _backend_choice(text: str) -> str:
    return text if text == "all" else ",".join(backend_list(("c", "multicore", "cuda"))(text))


def backends(choice: str | None) -> list[str]:
    gpu, _ = gpu_status()
    if choice in (None, ""):
        return ["c", "cuda"] if gpu else ["c"]
    if choice == "all":
        return ["c", "multicore"] + (["cuda"] if gpu else [])
    return [b.strip() for b in choice.split(",") if b.strip()]


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..futhark.build import INSTALL_HINT, futhark_compiler

    quick = getattr(args, "quick", False)
    runs = getattr(args, "runs", None) or (5 if quick else 50)
    files = list(getattr(args, "files", None) or default_programs())
    chosen = backends(getattr(args, "backend", None))
    timeout = getattr(args, "timeout", 300.0)
    prepared_dir = getattr(args, "prepare", None)
    prebuilt = getattr(args, "prebuilt", None)
    futhark = None if prebuilt else futhark_compiler()
    if futhark is None and not prebuilt:
        return [skipped(BENCHMARK, "all", f"no Futhark compiler: {INSTALL_HINT} (or run --prebuilt DIR from --prepare)")]
    if not files and not prebuilt:
        return [skipped(BENCHMARK, "all", "no .fut files given and no benchmarks/programs/ here")]
    if prepared_dir:
        assert futhark is not None
        out: list[dict[str, Any]] = []
        for backend in backends(getattr(args, "backend", None) or "cuda") if getattr(args, "backend", None) != "all" else ["c", "multicore", "cuda"]:
            out += prepare(futhark, files, backend, Path(prepared_dir))
        return out
    rows: list[dict[str, Any]] = []
    gpu, why = gpu_status()
    with tempfile.TemporaryDirectory(prefix="pb-programs-") as tmp:
        for backend in chosen:
            if backend == "cuda" and not gpu:
                rows.append(skipped(f"{BENCHMARK} (cuda)", "all", why))
                continue
            if prebuilt:
                dirs = sorted(p for p in (Path(prebuilt) / backend).glob("*") if p.is_dir()) if not getattr(args, "files", None) \
                    else [Path(prebuilt) / backend / Path(f).stem for f in files]
                got = _prebuilt_rows(dirs, backend, runs, quick, timeout)
            else:
                assert futhark is not None
                got = _backend_rows(futhark, files, backend, runs, quick, timeout, Path(tmp))
            rows += got + summary_rows(backend, got)
    show(format_table(rows))
    return rows


def _backend_rows(futhark: str, files: list[Path], backend: str, runs: int, quick: bool, timeout: float,
                  work: Path) -> list[dict[str, Any]]:
    import pybridge.futhark as pf

    b = f"{BENCHMARK} ({backend})"
    rows: list[dict[str, Any]] = []
    for f in files:
        f = Path(f).resolve()
        try:
            prog = parse_program(f)
            if not prog.datasets:
                raise ProgramError("no datasets in a -- == block")
            exe = compile_executable(futhark, f, backend, work)
            lib = pf.load(f, backend=backend, **_lib_cache(exe, backend))
        except (ProgramError, OSError, subprocess.SubprocessError, Exception) as e:  # noqa: BLE001 - one bad program
            rows.append(skipped(b, f.stem, f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        try:
            for ds in prog.datasets[:2] if quick else prog.datasets:
                rows.append(_pair(futhark, prog, ds, exe, lib, b, runs, timeout, quick=quick))
        finally:
            lib.close()
    return rows


def _lib_cache(exe: Path, backend: str) -> dict[str, Any]:
    """The library's kernel cache on GPU backends (the executable has its own): NVRTC runs once."""
    return {"cache_file": str(exe.with_name(exe.name + ".lib-kernels"))} if backend in GPU_BACKENDS else {}


def _prebuilt_rows(dirs: list[Path], backend: str, runs: int, quick: bool, timeout: float) -> list[dict[str, Any]]:
    import pybridge.futhark as pf

    b = f"{BENCHMARK} ({backend})"
    rows: list[dict[str, Any]] = []
    if not dirs:
        return [skipped(b, "all", f"nothing prepared for {backend} (pybridge bench programs --prepare DIR --backend {backend})")]
    for d in dirs:
        try:
            prog, exe, so = compile_prepared(d, backend)
            lib = pf.load(so, **_lib_cache(exe, backend))
        except Exception as e:  # noqa: BLE001 - one bad program
            rows.append(skipped(b, d.name, f"{type(e).__name__}: {str(e)[:300]}"))
            continue
        try:
            for ds in prog.datasets[:2] if quick else prog.datasets:
                rows.append(_pair(None, prog, ds, exe, lib, b, runs, timeout, d / "data", quick=quick))
        finally:
            lib.close()
    return rows


def _pair(futhark: str | None, prog: Program, ds: Dataset, exe: Path, lib: Any, b: str, runs: int,
          timeout: float, prepared: Path | None = None, quick: bool = False) -> dict[str, Any]:
    impl = f"{prog.path.stem} {ds.describe()}"
    try:
        data = dataset_bytes(futhark, prog, ds, prepared=prepared)
        values = read_values(data, ds.describe())
        exe_us: list[float] = []
        py_us: list[float] = []
        bare_us: list[float] | None = []
        py_blocks: list[float] = []
        bare_blocks: list[float] = []
        exe_out: list[Any] = []
        py_out: list[Any] = []
        cache = exe.with_name(exe.name + ".kernels") if lib.backend in GPU_BACKENDS else None

        walls: list[tuple[int, float]] = []  # (runs, wall seconds) of each executable process

        def executable(n: int) -> None:
            nonlocal exe_out
            if exe_us and budget:  # as many runs as pybridge's time budget buys, at most EXE_MAX_RUNS a round
                # and EXE_GROWTH times its most so far: the readings leave out each run's untimed part
                # (its inputs uploaded anew), which only processes of different run counts show
                n = max(n, min(EXE_MAX_RUNS, EXE_GROWTH * max(walls)[0],
                               int(budget / rounds / _exe_run_s(exe_us, walls))))
            start = time.perf_counter()
            got, exe_out = run_executable(exe, ds.entry, data, n, timeout, cache)
            walls.append((n, time.perf_counter() - start))
            exe_us.extend(got)

        def pybridge_and_bare(n: int) -> None:
            nonlocal py_out, bare_us
            got = run_paired(lib, ds.entry, values, n, budget / rounds, MAX_CALLS // rounds)
            py_out = got.results
            py_us.extend(got.py_us)
            py_blocks.extend(got.py_blocks)
            bare_blocks.extend(got.bare_blocks)
            if got.bare_us is None or bare_us is None:
                bare_us = None
            else:
                bare_us.extend(got.bare_us)

        # Alternate the executable and the pybridge / bare blocks in rounds, each starting with the other:
        # on a shared or throttling machine both see the same load, and neither always runs first
        # after another process used the device (a GPU's first calls after a context switch run
        # slower).
        sides = [executable, pybridge_and_bare]
        rounds = max(1, min(ROUNDS, runs // 2))
        budget = 0.0 if quick else PAIR_BUDGET_S
        for k in range(rounds):
            n = runs // rounds + (1 if k < runs % rounds else 0)
            for side in sides[k % 2:] + sides[:k % 2]:
                side(n)
    except (ProgramError, subprocess.SubprocessError, ValueError, TypeError, OSError) as e:
        return skipped(b, impl, f"{type(e).__name__}: {str(e)[:300]}")
    except Exception as e:  # noqa: BLE001 - a Futhark error in one dataset must not stop the others
        return skipped(b, impl, f"{type(e).__name__}: {str(e)[:300]}")
    same = len(exe_out) == len(py_out) and all(equal(x, y) for x, y in zip(exe_out, py_out))
    exe_med, py_med = whole_unit_mean(exe_us), statistics.median(py_us)  # exe: whole µs readings
    bare_med = statistics.median(bare_us) if bare_us else None
    over: dict[str, Any] = {}
    if bare_us and py_blocks:
        d = paired_difference(py_blocks, bare_blocks)
        over = {"over_bare_us": d["median"], "over_bare_lo_us": d["lo"], "over_bare_hi_us": d["hi"],
                "over_bare_iqr_us": d["iqr"], "block_pairs": d["pairs"]}
    return row(b, impl, None, {"median_us": py_med, "min_us": min(py_us), "samples": len(py_us)},
               exe_us=exe_med, exe_median_us=statistics.median(exe_us), exe_min_us=min(exe_us), exe_runs=len(exe_us),
               added_us=py_med - exe_med, bare_us=bare_med, **over,
               ratio=py_med / exe_med if exe_med > 0 else None, equal=same,
               note=("" if same else "RESULTS DIFFER from the executable's"))


def _exe_run_s(exe_us: list[float], walls: list[tuple[int, float]]) -> float:
    """Seconds one more run of the executable costs: its timed part (the median reading, at least
    1 µs), or what two of its processes' wall times say a run costs with its untimed part (the
    results freed, the inputs restored, the runtime written), where that is more; the process's
    start (a GPU context: most of a small process's wall time) cancels out in the difference."""
    per_run = max(statistics.median(exe_us), 1.0) * 1e-6
    (n0, w0), (n1, w1) = min(walls), max(walls)
    if n1 > n0:
        per_run = max(per_run, (w1 - w0) / (n1 - n0))
    return per_run


def over_bare(r: dict[str, Any]) -> float:
    """A row's pybridge - bare cffi µs: the median of its paired differences (rows written before
    the pairs existed: the difference of the two medians)."""
    return float(r["over_bare_us"]) if r.get("over_bare_us") is not None else float(r["median_us"] - r["bare_us"])


def _over_bare_text(r: dict[str, Any]) -> str:
    """``+0.52 [+0.31, +0.70] n=900``: the median over block pairs, its 95% interval, the block pairs."""
    if r.get("over_bare_us") is None:
        return "–" if r.get("bare_us") is None else f"{over_bare(r):+.2f} (medians)"
    return f"{r['over_bare_us']:+.2f} [{r['over_bare_lo_us']:+.2f}, {r['over_bare_hi_us']:+.2f}] n={r['block_pairs']}"


def summary_rows(backend: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median / worst added µs (calls < 1 ms) and ratio (calls >= 1 ms), against the targets."""
    done = [r for r in rows if r.get("exe_us") is not None]
    b = f"{BENCHMARK} summary ({backend})"
    if not done:
        return [skipped(b, "all", "no (program, dataset) pair ran")]
    short = [r["added_us"] for r in done if r["exe_us"] < LONG_US]
    long = [r["ratio"] for r in done if r["exe_us"] >= LONG_US and r["ratio"] is not None]
    unequal = sum(not r["equal"] for r in done)
    out = [row(b, "pairs", len(done), None, note=f"{len(done) - unequal} of {len(done)} equal to the executable's results",
               equal=unequal == 0)]
    if short:
        med, worst = statistics.median(short), max(short)
        out.append(row(b, "added µs, calls < 1 ms: median", len(short), None, value=med, target=TARGET_ADDED_MEDIAN_US,
                       met=med <= TARGET_ADDED_MEDIAN_US if backend == "c" else None))
        out.append(row(b, "added µs, calls < 1 ms: worst", len(short), None, value=worst, target=TARGET_ADDED_WORST_US,
                       met=worst <= TARGET_ADDED_WORST_US if backend == "c" else None))
    bare = [r["bare_us"] / r["exe_us"] for r in done if r.get("bare_us") is not None and r["exe_us"] > 0]
    if bare:  # no target: where the library itself stands against the executable
        out.append(row(b, "bare cffi / executable, all pairs: median", len(bare), None, value=statistics.median(bare)))
        gaps = [(over_bare(r), r) for r in done if r.get("bare_us") is not None and r["exe_us"] < LONG_US]
        if gaps:
            worst, at = max(gaps, key=lambda g: g[0])
            for what, value, target, note in (
                    ("median", statistics.median(g for g, _ in gaps), TARGET_OVER_BARE_MEDIAN_US, ""),
                    ("worst", worst, TARGET_OVER_BARE_WORST_US, f"{at['impl']}: {_over_bare_text(at)}")):
                goal = {"target": target, "met": value <= target} if backend == "c" else {}
                out.append(row(b, f"pybridge - bare cffi µs, calls < 1 ms: {what}", len(gaps), None, value=value,
                               note=note, **goal))
    ratios = [r["ratio"] for r in done if r["ratio"] is not None]
    if ratios:  # the GPU targets, over every pair (on c a call of 0.1 µs reads 10x over a 1 µs cffi call)
        gpu = backend in GPU_BACKENDS
        out.append(row(b, "ratio, all pairs: median", len(ratios), None, value=statistics.median(ratios),
                       **({"target": TARGET_RATIO_MEDIAN_ALL, "met": statistics.median(ratios) <= TARGET_RATIO_MEDIAN_ALL}
                          if gpu else {})))
        at = max((r for r in done if r["ratio"] is not None), key=lambda r: r["ratio"])
        floor: dict[str, Any] = {}
        if at.get("bare_us") is not None and at["exe_us"] > 0:  # the library's own call, same pair, same run
            floor = {"floor_ratio": at["bare_us"] / at["exe_us"], "over_floor_ratio": at["median_us"] / at["bare_us"]}
        note = at["impl"] + ("" if not floor else f": bare cffi / executable {floor['floor_ratio']:.3f}, "
                             f"pybridge / bare {floor['over_floor_ratio']:.3f}, pybridge - bare {_over_bare_text(at)} µs")
        out.append(row(b, "ratio, all pairs: worst", len(ratios), None, value=at["ratio"], note=note,
                       **({"target": TARGET_RATIO_WORST_ALL, "met": at["ratio"] <= TARGET_RATIO_WORST_ALL} if gpu else {}),
                       **floor))
    if long:
        med, worst = statistics.median(long), max(long)
        out.append(row(b, "ratio, calls >= 1 ms: median", len(long), None, value=med, target=TARGET_RATIO_LONG,
                       met=med <= TARGET_RATIO_LONG))
        out.append(row(b, "ratio, calls >= 1 ms: worst", len(long), None, value=worst, target=TARGET_RATIO_LONG,
                       met=worst <= TARGET_RATIO_LONG))
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    """The comparison as plain text (also what BENCHMARKS.md shows)."""
    lines = [f"{'program dataset':<44} {'exe µs':>10} {'bare cffi µs':>12} {'pybridge µs':>12} {'added µs':>9} {'ratio':>7}  "
             f"equal  {'pybridge - bare µs [95% interval] blocks':<40}"]
    for r in rows:
        if r.get("exe_us") is not None:
            bare = r.get("bare_us")  # absent in JSON written before the column existed
            lines.append(f"{r['impl'][:44]:<44} {r['exe_us']:>10.2f} {'–' if bare is None else format(bare, '.2f'):>12} "
                         f"{r['median_us']:>12.2f} {r['added_us']:>9.2f} "
                         f"{'–' if r['ratio'] is None else format(r['ratio'], '7.3f'):>7}  {'yes' if r['equal'] else 'NO ':<5}  "
                         f"{_over_bare_text(r)}")
        elif r.get("value") is not None:
            met = r.get("met")
            target = "" if r.get("target") is None else f", target {r['target']}"
            lines.append(f"  {r['benchmark']}: {r['impl']} = {r['value']:.3f} (n={r['size']}{target}"
                         f"{'' if met is None else ', met' if met else ', MISSED'}){': ' + r['note'] if r.get('note') else ''}")
        elif r.get("skipped"):
            lines.append(f"{r['impl'][:44]:<44} skipped: {r['skipped'][:120]}")
    return "\n".join(lines)

