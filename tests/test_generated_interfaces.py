"""Generated interfaces on the real compiler (issue 11, item 4).

Hypothesis draws entry points (tests/interface_gen.py: names from Futhark's identifier grammar, every
primitive type, arrays of rank 1-3 with empty dimensions, tuples, records, sums, arrays of records,
arrays of sums, unique parameters and results) as identity / projection / construction programs;
they are compiled in batches, loaded, and every drawn value (NaN payloads, infinities, -0.0, f16
included) must come back bit for bit, through positional calls, keyword calls (Python spellings and
exact Futhark names), record dicts in either spelling, and result handles passed back in.

Profiles (environment):
    PYBRIDGE_GEN_PROFILE=ci|full|cuda  ci (default): 90 entry points per backend, about a minute; full:
                                        550 per backend; cuda: 220
    PYBRIDGE_GEN_BACKENDS=c,multicore  comma-separated; cuda/opencl/hip are marked gpu
    PYBRIDGE_GEN_SEED=<int>            reproduce a run (each run prints its seed)
    PYBRIDGE_GEN_PREBUILT=<dir>        use the entry points and the C that
                                        `python tests/test_generated_interfaces.py emit <dir> <backend>`
                                        wrote (for a machine with nvcc but no futhark: the H100)

One known difference, asserted as such: an f32 *scalar* crosses cffi as a C double, so a signalling
NaN comes back quiet (the quiet bit set, sign and payload kept); f32 arrays, f16 and f64 scalars are
exact.
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, seed, settings, strategies as st

import pybridge.futhark as pf
from pybridge.futhark.build import build_program, compile_library, futhark_compiler
from pybridge.futhark.handles import ArrayHandle, OpaqueHandle, Value

import interface_gen as g

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')


@dataclass(frozen=True)
class Profile:
    programs: int  # compiler runs per backend
    entries: int  # entry points per program
    rounds: int  # hypothesis examples (value draws) per entry point


PROFILES = {
    "ci": Profile(programs=2, entries=45, rounds=4),
    "full": Profile(programs=10, entries=55, rounds=6),
    "cuda": Profile(programs=4, entries=55, rounds=4),  # fits one 6-minute call on the H100
}
PROFILE_NAME = os.environ.get("PYBRIDGE_GEN_PROFILE", "ci")
PROFILE = PROFILES[PROFILE_NAME]
BACKENDS = [b.strip() for b in os.environ.get("PYBRIDGE_GEN_BACKENDS", "c,multicore").split(",") if b.strip()]
SEED = int(os.environ.get("PYBRIDGE_GEN_SEED") or random.randrange(2**32))
PREBUILT = os.environ.get("PYBRIDGE_GEN_PREBUILT")
QUIET_F32 = np.uint32(0x00400000)


def _backend_param(b: str) -> Any:
    marks = [pytest.mark.futhark]
    if b in ("cuda", "opencl", "hip"):
        marks.append(pytest.mark.gpu)
    return pytest.param(b, id=b, marks=marks)


# ---------------------------------------------------------------- drawing signatures


def collect_entries(n: int, at_seed: int) -> list[g.Entry]:
    """``n`` entry points drawn by hypothesis (generate phase only: nothing fails here). Hypothesis
    starts from the simplest examples; three times as many are drawn and ``n`` picked at random."""
    got: list[g.Entry] = []

    @seed(at_seed)
    @settings(max_examples=3 * n, database=None, phases=[Phase.generate], deadline=None, suppress_health_check=list(HealthCheck))
    @given(g.entry_name.flatmap(g.entry_point))
    def collect(e: g.Entry) -> None:
        got.append(e)

    collect()
    return g.unique_names(random.Random(at_seed).sample(got, min(n, len(got))))


# ---------------------------------------------------------------- values in


def spelled(lib: pf.Library, type_name: str, value: Any, draw: Any) -> Any:
    """``value`` as an argument: record dicts keyed, per field, by the exact Futhark name or the
    Python spelling (drawn), recursively."""
    info = lib.manifest.types.get(type_name)
    if info is None or not isinstance(info, pf.manifest.OpaqueInfo):
        return value
    if info.sum is not None:
        variant = next(v for v in info.sum.variants if v.name == value[0])
        return (value[0], tuple(spelled(lib, t, p, draw) for t, p in zip(variant.payload, value[1])))
    fields = info.record.fields if info.record else info.record_array.fields if info.record_array else None
    if fields is None:
        return value
    kind = lib.types[type_name]
    if isinstance(value, tuple):
        return tuple(spelled(lib, f.type, value[int(f.name)], draw) for f in sorted(fields, key=lambda f: int(f.name)))
    return {
        (py if draw(st.booleans()) else f.name): spelled(lib, f.type, value[f.name], draw)
        for f, py in zip(fields, kind.python_fields)
    }


# ---------------------------------------------------------------- values out


def read(x: Any) -> Any:
    """A result as plain data (like pybridge.futhark.to_numpy, arrays of sums element by element);
    handles made on the way are freed, ``x`` itself is not."""
    if isinstance(x, ArrayHandle):
        return x.numpy()
    if isinstance(x, OpaqueHandle):
        info = x.otype.info
        if info.sum is not None:
            return (x.variant, tuple(_read_free(p) for p in x.payload))
        if info.opaque_array is not None:
            return [_read_free(x[i]) for i in range(x.shape[0])]
        if info.record_array is not None:
            return {n: _read_free(x.field(n)) for n in x.field_names}
        if x.is_tuple:
            return tuple(_read_free(x.field(n)) for n in x.field_names)
        return {n: _read_free(x.field(n)) for n in x.field_names}
    if isinstance(x, tuple):
        return tuple(read(v) for v in x)
    return x


def _read_free(x: Any) -> Any:
    try:
        return read(x)
    finally:
        if isinstance(x, Value):
            x.free()


def _free(x: Any) -> None:
    if isinstance(x, Value):
        x.free()
    elif isinstance(x, tuple):
        for v in x:
            _free(v)


def assert_same(expected: Any, got: Any, where: str, scalar_f32_quiet: bool = True) -> None:
    """Bit-for-bit equality (floats compared by their bits), recursively."""
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: expected an array, got {type(got).__name__}"
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape), f"{where}: {got.dtype}{got.shape} != {expected.dtype}{expected.shape}"
        if expected.dtype.kind == "f":
            bits = g.BITS[{2: "f16", 4: "f32", 8: "f64"}[expected.dtype.itemsize]]
            bad = np.flatnonzero(expected.view(bits) != got.view(bits))
            assert not bad.size, f"{where}: bits differ at flat index {bad[:5]}: {expected.ravel()[bad[:5]]} -> {got.ravel()[bad[:5]]}"
        else:
            np.testing.assert_array_equal(got, expected, err_msg=where, strict=True)
    elif isinstance(expected, np.generic):
        assert isinstance(got, np.generic) and got.dtype == expected.dtype, f"{where}: expected {expected.dtype} {expected!r}, got {type(got).__name__} {got!r}"
        if expected.dtype.kind == "f":
            bits = g.BITS[{2: "f16", 4: "f32", 8: "f64"}[expected.dtype.itemsize]]
            want = np.array(expected).view(bits)
            if expected.dtype == np.float32 and scalar_f32_quiet and np.isnan(expected):
                want = want | QUIET_F32  # through a C double: a signalling NaN is quieted
            assert np.array(got).view(bits) == want, f"{where}: {expected!r} ({int(want):#x}) came back as {got!r} ({int(np.array(got).view(bits)):#x})"
        else:
            assert got == expected, f"{where}: {expected!r} came back as {got!r}"
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), f"{where}: fields {sorted(expected)} != {got if not isinstance(got, dict) else sorted(got)}"
        for k in expected:
            assert_same(expected[k], got[k], f"{where}.{k}")
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected), f"{where}: expected {type(expected).__name__} of {len(expected)}, got {got!r}"
        for i, (e, v) in enumerate(zip(expected, got)):
            assert_same(e, v, f"{where}[{i}]")
    else:
        assert got == expected, f"{where}: {expected!r} != {got!r}"


# ---------------------------------------------------------------- one entry point


def _splits(t: g.Type, unique: bool = False) -> bool:
    """A tuple result comes back as several results: Futhark 0.25 splits a top-level tuple, unless
    it is unique (``*(a, b)`` stays one opaque value)."""
    return isinstance(t, g.Record) and t.reads_as_tuple and not unique


def _field(value: Any, t: g.Record, name: str) -> Any:
    return value[int(name)] if t.reads_as_tuple else value[name]


def draw_call(e: g.Entry, draw: Any, backend: str) -> tuple[list[Any], tuple[Any, ...]]:
    """(arguments in Futhark's plain form, expected results)."""
    if e.kind == "identity":
        args = [draw(g.value_of(p.type)) for p in e.params]
        kept = [(p, a) for p, a in zip(e.params, args) if not p.ignored]
        if len(kept) == 1 and _splits(kept[0][0].type, kept[0][0].unique):
            return args, tuple(kept[0][1])
        return args, tuple(a for _, a in kept)
    if e.kind == "projection":
        r = e.params[0].type
        v = draw(g.value_of(r))
        out, t = v, r
        for name in e.path:
            out, t = _field(out, t, name), dict(t.fields)[name]  # type: ignore[union-attr]
        return [v], tuple(out) if _splits(t) else (out,)
    built = e.built
    if isinstance(built, g.Record):
        v = draw(g.value_of(built))
        args = [_field(v, built, n) for n, _ in built.fields]
        return args, tuple(v) if _splits(built) else (v,)
    if isinstance(built, g.Sum):
        name, payload = draw(g.value_of(built))
        args: list[Any] = [np.int8([n for n, _ in built.variants].index(name))]
        for vn, ps in built.variants:
            args += list(payload) if vn == name else [draw(g.value_of(p)) for p in ps]
        return args, ((name, payload),)
    if isinstance(built, g.RecordArray):
        cols = draw(g.value_of(built))
        # Empty outer dimensions included on multicore too: the hang they caused in Futhark 0.25.32's
        # context free is fixed in the generated C (test_futhark_multicore_free_after_empty_nested_map).
        args = []
        for path, _ in g._leaves(built.elem):
            c = cols
            for k in path:
                c = c[k]
            args.append(c)
        return args, (cols,)
    assert isinstance(built, g.SumArray)
    elems = draw(g.value_of(built))
    names = [n for n, _ in built.elem.variants]
    args = [np.array([names.index(n) for n, _ in elems], np.int8)]
    for vn, ps in built.elem.variants:
        for j, p in enumerate(ps):
            col = np.zeros(len(elems), g.DTYPES[p.name])  # type: ignore[union-attr]
            for i, (n, payload) in enumerate(elems):
                if n == vn:
                    col[i] = payload[j]
            args.append(col)
    return args, (elems,)


def check_entry(lib: pf.Library, e: g.Entry, draw: Any, counts: Counter) -> None:
    ep = lib.entry(e.name)
    note(f"backend {lib.backend}, entry point:\n{e.fut()}")
    info = ep.info
    assert len(info.inputs) == len(e.params)
    plain, expected = draw_call(e, draw, lib.backend)
    args = [spelled(lib, i.type, a, draw) for i, a in zip(info.inputs, plain)]
    before = [a.copy() if isinstance(a, np.ndarray) else None for a in args]
    n_out = len(info.outputs)

    def outputs(res: Any) -> tuple[Any, ...]:
        return res if n_out != 1 else (res,)

    # 1. positional
    first = outputs(ep(*args))
    assert_same(expected, tuple(read(r) for r in first), f"{e.name}(positional)")
    for a, b in zip(args, before):  # NumPy input is never changed, consumed parameter or not
        if b is not None:
            assert_same(b, a, f"{e.name}: argument after the call")
    counts["calls"] += 1

    # 2. keywords: the signature's Python spellings, or the exact Futhark name where unambiguous
    pynames = list(inspect.signature(ep).parameters)
    futnames = [i.name for i in info.inputs]
    kwargs = {}
    for py, fut, a in zip(pynames, futnames, args):
        exact_ok = futnames.count(fut) == 1 and fut != py
        kwargs[fut if exact_ok and draw(st.booleans()) else py] = a
    res = outputs(ep(**kwargs))
    assert_same(expected, tuple(read(r) for r in res), f"{e.name}(keywords {list(kwargs)})")
    _free(res)
    counts["calls"] += 1

    # 3. identity: the result handles go back in (consumed where the parameter is unique)
    if e.kind == "identity":
        kept = [i for i, p in enumerate(e.params) if not p.ignored]
        again = list(args)
        if len(kept) == 1 and n_out != 1:
            again[kept[0]] = first  # a split tuple goes back in as a tuple of handles
        else:
            for i, r in zip(kept, first):
                again[i] = r
        res = outputs(ep(*again))
        assert_same(expected, tuple(read(r) for r in res), f"{e.name}(result handles passed back)")
        _free(res)
        counts["calls"] += 1
        if not (len(kept) == 1 and n_out != 1):
            for i, r in zip(kept, first):
                if isinstance(r, Value):
                    assert r.valid != e.params[i].unique, f"{e.name}: handle for {e.params[i].name!r} valid={r.valid}"
                    counts["consumed" if e.params[i].unique else "reused"] += 1
    _free(first)


# ---------------------------------------------------------------- the test


def emit(out: Path, backend: str) -> None:
    """Draw the entry points and run futhark here; the C compiler runs where the test runs."""
    out.mkdir(parents=True, exist_ok=True)
    entries = collect_entries(PROFILE.programs * PROFILE.entries, SEED)
    (out / "entries.pkl").write_bytes(pickle.dumps(((PROFILE.programs, PROFILE.entries, PROFILE.rounds), SEED, entries)))
    compiler = futhark_compiler()
    assert compiler, "the Futhark compiler is not installed (scripts/install-futhark.sh)"
    for k in range(PROFILE.programs):
        src = out / f"gen{k}.fut"
        src.write_text(g.program(entries[k * PROFILE.entries:(k + 1) * PROFILE.entries]))
        subprocess.run([compiler, backend, "--library", "-w", "-o", str(out / f"gen{k}"), str(src)], check=True)
    print(f"{len(entries)} entry points in {PROFILE.programs} programs for {backend} (seed {SEED}) in {out}")


def build_generated(chunk: list[g.Entry], k: int, backend: str, tmp_path: Path) -> Path:
    """The library of program ``k`` (``chunk``): compiled from the source, or from the C that
    ``emit`` wrote (PYBRIDGE_GEN_PREBUILT)."""
    src = tmp_path / f"gen{k}.fut"
    src.write_text(g.program(chunk))
    if not PREBUILT:
        return build_program(src, backend=backend, out_dir=tmp_path / f"{backend}{k}")
    prebuilt = Path(PREBUILT) / f"gen{k}"
    (tmp_path / f"{backend}{k}").mkdir()
    so = tmp_path / f"{backend}{k}" / f"libgen{k}.so"
    for ext in (".c", ".h", ".json"):
        shutil.copy(prebuilt.with_suffix(ext), so.with_name(f"gen{k}{ext}"))
    assert json.loads(so.with_name(f"gen{k}.json").read_text())["backend"] == backend, f"{prebuilt}.json is not for {backend}"
    compile_library(so.with_name(f"gen{k}.c"), backend, so)
    return so


def prebuilt_entries() -> tuple[Profile, int, list[g.Entry]]:
    """(profile, seed, entry points) of PYBRIDGE_GEN_PREBUILT's ``emit`` run."""
    sizes, seed_, entries = pickle.loads((Path(PREBUILT) / "entries.pkl").read_bytes())
    return Profile(*sizes), seed_, entries


def _needs_compiler() -> Any:
    return pytest.mark.skipif(futhark_compiler() is None and not PREBUILT,
                              reason="the Futhark compiler is not installed (scripts/install-futhark.sh)")


@_needs_compiler()
@pytest.mark.parametrize("backend", [_backend_param(b) for b in BACKENDS])
def test_generated_interfaces_round_trip(backend, tmp_path, capsys):
    t0 = time.perf_counter()
    if PREBUILT:
        profile, seed_, entries = prebuilt_entries()
    else:
        profile, seed_, entries = PROFILE, SEED, collect_entries(PROFILE.programs * PROFILE.entries, SEED)
    counts: Counter = Counter()
    compile_s = 0.0
    for k in range(profile.programs):
        chunk = entries[k * profile.entries:(k + 1) * profile.entries]
        src = tmp_path / f"gen{k}.fut"
        t = time.perf_counter()
        so = build_generated(chunk, k, backend, tmp_path)
        compile_s += time.perf_counter() - t
        with pf.load(so, backend=backend) as lib:
            for j, e in enumerate(chunk):
                counts[e.kind] += 1

                @seed(seed_ + 1000 * k + j)
                @settings(max_examples=profile.rounds, database=None, deadline=None,
                          suppress_health_check=list(HealthCheck))
                @given(st.data())
                def check(data: st.DataObject) -> None:
                    check_entry(lib, e, data.draw, counts)

                try:
                    check()
                except Exception as exc:
                    raise AssertionError(
                        f"PYBRIDGE_GEN_SEED={seed_} PYBRIDGE_GEN_PROFILE={PROFILE_NAME}: entry point {e.name!r} "
                        f"of {src} (backend {backend}) failed: {exc}"
                    ) from exc
    with capsys.disabled():
        print(f"\n[generated interfaces] backend={backend} profile={PROFILE_NAME} seed={seed_}: "
              f"{len(entries)} entry points in {profile.programs} programs "
              f"({counts['identity']} identity, {counts['projection']} projection, {counts['construction']} construction), "
              f"{counts['calls']} calls, {counts['consumed']} handles consumed, {counts['reused']} reused; "
              f"compile {compile_s:.0f} s, total {time.perf_counter() - t0:.0f} s")
    assert len(entries) == profile.programs * profile.entries


_HANG = """
import numpy as np, pybridge.futhark as pf
lib = pf.load({src!r}, backend="multicore")
lib.two(np.zeros((0, 3), np.int32)).free()
lib.close()
print("closed")
"""


@pytest.mark.futhark
@pytest.mark.skipif(futhark_compiler() is None, reason="the Futhark compiler is not installed (scripts/install-futhark.sh)")
def test_futhark_multicore_free_after_empty_nested_map(tmp_path):
    """Futhark 0.25.32 multicore bug: after map (map f) over an array with an empty outer dimension,
    futhark_context_free waited forever for a subtask left in the main worker's queue (reproduced in
    plain C too). Fixed in the generated C by pybridge.futhark.csource ("multicore-free-hang")."""
    src = tmp_path / "nested.fut"
    src.write_text("entry two (a: [][]i32) : [][]i32 = map (map (+1)) a\n")
    build_program(src, backend="multicore")  # outside the timeout: only the close is timed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        out = subprocess.run([sys.executable, "-c", _HANG.format(src=str(src))], capture_output=True, text=True, timeout=30, env=env)
    except subprocess.TimeoutExpired:
        out = None
    assert out is not None and out.stdout.strip() == "closed", "futhark_context_free did not return within 30 s"


if __name__ == "__main__":  # python tests/test_generated_interfaces.py emit <dir> <backend>
    if len(sys.argv) != 4 or sys.argv[1] != "emit":
        sys.exit("usage: python tests/test_generated_interfaces.py emit <dir> <backend>")
    emit(Path(sys.argv[2]), sys.argv[3])
