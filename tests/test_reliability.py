"""Issue 12: nothing a user does crashes the interpreter or silently corrupts data.

Every test runs real compiler output (tests/programs/aliasing.fut, built with .tools/bin/futhark
through pybridge.futhark.load). Calls that killed the process before the fixes run in a child
process (``run_child``), so a regression fails the test instead of taking pytest down.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pybridge.futhark as pf
from conftest import built_library, json_paths
from pybridge.futhark.build import futhark_compiler
from pybridge.futhark.manifest import ManifestError, parse_manifest

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "aliasing.fut"
TYPES = ROOT / "tests" / "reference" / "types.fut"

pytestmark = [
    pytest.mark.slow,  # left out of the quick subset (-m 'not slow')
    pytest.mark.futhark,
    pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler: run scripts/install-futhark.sh"),
]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=["c", "multicore"])
def lib(request):
    with pf.load(PROGRAM, backend=request.param) as library:
        yield library


@pytest.fixture(scope="module")
def types_lib():
    with pf.load(TYPES, backend="c") as library:
        yield library


def i32(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int32)


def run_child(code: str, backend: str = "c") -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``lib`` loaded); the caller checks it was not killed."""
    prog = f"import numpy as np, pybridge.futhark as pf\nlib = pf.load({str(PROGRAM)!r}, backend={backend!r})\n"
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", prog + textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300)


# ---------------------------------------------------------------- 3: consuming aliased values


def test_consuming_an_alias_leaves_the_original_alone(lib) -> None:
    h = lib.types["[]i32"].new(i32(0, 1, 2, 3, 4))
    r = lib.set0(lib.ident(h), 99)  # ident returns h's own memory
    np.testing.assert_array_equal(h.numpy(), i32(0, 1, 2, 3, 4))
    np.testing.assert_array_equal(r.numpy(), i32(99, 1, 2, 3, 4))


def test_consuming_one_of_two_aliased_results(lib) -> None:
    a, b = lib.twice(i32(5, 6, 7))
    c = lib.set0(a, -1)
    assert not a.valid  # the handle passed to a consuming parameter is consumed, as documented
    np.testing.assert_array_equal(b.numpy(), i32(5, 6, 7))
    np.testing.assert_array_equal(c.numpy(), i32(-1, 6, 7))


def test_consuming_a_projection_or_a_record_keeps_its_parts(lib) -> None:
    xs, ys = lib.types["[]i32"].new(i32(1, 2)), lib.types["[]i32"].new(i32(3, 4))
    p = lib.mkpair(xs, ys)
    a = p.a  # a projection shares p's memory
    np.testing.assert_array_equal(lib.set0(a, 7).numpy(), i32(7, 2))
    np.testing.assert_array_equal(p.a.numpy(), i32(1, 2))
    q = lib.bump(p)  # the record shares xs and ys
    np.testing.assert_array_equal(q.a.numpy(), i32(2, 3))
    np.testing.assert_array_equal(xs.numpy(), i32(1, 2))
    r = lib.bump({"a": xs, "b": ys})  # a record built here from live handles
    np.testing.assert_array_equal(r.a.numpy(), i32(2, 3))
    np.testing.assert_array_equal(xs.numpy(), i32(1, 2))


def test_a_sole_handle_is_consumed_without_a_copy(lib) -> None:
    h = lib.types["[]i32"].new(i32(1, 2, 3))
    alias = lib.ident(h)
    alias.free()  # the only other handle is gone: nothing to protect
    out = lib.set0(h, 0)
    assert not h.valid
    np.testing.assert_array_equal(out.numpy(), i32(0, 2, 3))


OPS = st.lists(
    st.tuples(st.sampled_from(["new", "ident", "copyof", "twice", "set0", "pair", "first", "bump", "free", "read"]), st.integers(0, 40)),
    min_size=1,
    max_size=25,
)


@given(ops=OPS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_call_sequences_never_change_a_live_handle(lib, ops) -> None:
    """Random programs over ident/copy/twice/set0/records: every live handle keeps its value."""
    arrays: list[tuple[object, np.ndarray]] = []
    pairs: list[tuple[object, np.ndarray, np.ndarray]] = []
    live = lambda pool: [x for x in pool if x[0].valid]  # noqa: E731
    for op, k in ops:
        la, lp = live(arrays), live(pairs)
        if op == "new" or not la:
            v = np.arange(k % 5 + 1, dtype=np.int32) + k
            arrays.append((lib.types["[]i32"].new(v), v))
        elif op == "ident":
            h, v = la[k % len(la)]
            arrays.append((lib.ident(h), v))
        elif op == "copyof":
            h, v = la[k % len(la)]
            arrays.append((lib.copyof(h), v))
        elif op == "twice":
            h, v = la[k % len(la)]
            a, b = lib.twice(h)
            arrays += [(a, v), (b, v)]
        elif op == "set0":
            h, v = la[k % len(la)]
            w = v.copy()
            w[0] = k
            arrays.append((lib.set0(h, k), w))
        elif op == "pair":
            (h1, v1), (h2, v2) = la[k % len(la)], la[(k // 3) % len(la)]
            pairs.append((lib.mkpair(h1, h2), v1, v2))
        elif op == "first" and lp:
            p, v1, _ = lp[k % len(lp)]
            arrays.append((lib.first(p), v1))
        elif op == "bump" and lp:
            p, v1, v2 = lp[k % len(lp)]
            pairs.append((lib.bump(p), v1 + 1, v2))
        elif op == "free":
            la[k % len(la)][0].free()
        for h, v in live(arrays):
            np.testing.assert_array_equal(h.numpy(), v, err_msg=f"after {op}")
        for p, v1, v2 in live(pairs):
            np.testing.assert_array_equal(p.a.numpy(), v1, err_msg=f"after {op}")
            np.testing.assert_array_equal(p.b.numpy(), v2, err_msg=f"after {op}")


# ---------------------------------------------------------------- 4: restore of bad bytes


def _check_restore(kind, data: bytes, good: bytes, read) -> None:
    try:
        h = kind.restore(data)
    except ValueError:
        return
    # Accepted: must be exactly the value the (possibly edited) bytes describe.
    assert len(data) == len(good)
    read(h)


@given(data=st.data())
@FUZZ
def test_restore_of_truncated_or_edited_record_bytes(lib, data) -> None:
    p = lib.mkpair(i32(1, 2, 3), i32(4, 5))
    good = p.store()
    kind = lib.types["pair"]
    cut = data.draw(st.integers(0, len(good)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(good) - 1), st.integers(0, 7)), max_size=3))
    b = bytearray(good[:cut] if data.draw(st.booleans()) else good)
    for at, bit in flips:
        if at < len(b):
            b[at] ^= 1 << bit
    _check_restore(kind, bytes(b), good, lambda h: (h.a.numpy(), h.b.numpy()))


@given(data=st.data())
@FUZZ
def test_restore_of_edited_sum_bytes_in_a_fresh_type(types_lib, data) -> None:
    """No store() seen before for this type object: the layout is unknown, the tag still checked."""
    good = types_lib.rect(2.0, 3.0).store()
    kind = pf.OpaqueKind(types_lib, types_lib.manifest.types["shape"])  # layout not learnt
    at = data.draw(st.integers(0, len(good) - 1))
    b = bytearray(good)
    b[at] ^= 1 << data.draw(st.integers(0, 7))
    _check_restore(kind, bytes(b[: data.draw(st.integers(1, len(b)))]), good, lambda h: (h.variant, h.payload))


def test_restore_examples(lib, types_lib) -> None:
    p = lib.mkpair(i32(1, 2, 3), i32(4, 5))
    good = p.store()
    kind = lib.types["pair"]
    with pytest.raises(pf.ValueFormatError):  # a ValueError and a FutharkError
        kind.restore(good[:-1])
    for bad, why in [(good[:-1], "truncated"), (good[:5], "truncated header"), (b"", "no bytes"), (b"x" + good[1:], "marker")]:
        with pytest.raises(ValueError, match=why):
            kind.restore(bad)
    grown = bytearray(good)
    grown[7] = 200  # first shape: 200 elements that are not there
    with pytest.raises(ValueError, match="truncated data"):
        kind.restore(bytes(grown))
    q = pickle.loads(pickle.dumps(p))
    np.testing.assert_array_equal(q.b.numpy(), i32(4, 5))
    with pytest.raises(ValueError, match="version 3"):
        kind.restore(good.replace(b"b\x02", b"b\x03", 1))
    s = bytearray(types_lib.circle(1.0).store())
    s[7] = 9  # variant tag 9 of 2
    with pytest.raises(ValueError, match="variant tag"):
        types_lib.types["shape"].restore(bytes(s))


# ---------------------------------------------------------------- 5: process-killing failures


@pytest.mark.parametrize("backend", ["c", "multicore"])
@pytest.mark.parametrize(
    "call, error",
    [
        ("lib.big(1 << 36)", "OutOfMemoryError"),  # malloc fails: segfaulted
        ("lib.big(-1)", "ProgramError"),  # negative allocation: exit(1)
        ("lib.count(-1, np.arange(3, dtype=np.int32))", "ValueError"),  # a declared size
        ("pf.load(lib.path, num_threads=10**6)", "ValueError"),  # scheduler exit
    ],
)
def test_failures_that_killed_the_process_raise(backend, call, error) -> None:
    proc = run_child(
        f"""
        try:
            {call}
        except Exception as e:
            print("raised", type(e).__name__, e)
        print("still usable:", lib.sum(np.arange(4, dtype=np.int32)))
        """,
        backend,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    assert f"raised {error}" in proc.stdout and "still usable: 6" in proc.stdout, proc.stdout + proc.stderr


def test_size_parameters_known_from_the_shipped_source() -> None:
    """make copies each .fut beside its library and setup.py ships it: nbins is known as a size
    in an installed package too (the histogram program exited the process with nbins = -1)."""
    built = ROOT / "build" / "futhark" / "c" / "libhistogram.so"
    if not built.exists():
        pytest.skip("build/futhark/c/libhistogram.so not built: run `make futhark`")
    assert built.with_name("histogram.fut").exists(), "make did not copy histogram.fut beside the library"
    setup = (ROOT / "setup.py").read_text()
    assert '"*.fut"' in setup, "setup.py does not ship the .fut sources"
    with pf.load(built) as h:
        with pytest.raises(ValueError, match="'nbins' is a size"):
            h.histogram(-1, i32(1, 2))
        np.testing.assert_array_equal(h.histogram(3, i32(0, 2, 2, 7)).numpy(), i32(1, 0, 2))


def test_num_threads_validated() -> None:
    for bad in (-1, 10**6, 2.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            pf.load(PROGRAM, backend="multicore", num_threads=bad)


# ---------------------------------------------------------------- 6: error classes and manifests


def test_size_mismatch_is_a_program_error_naming_the_arguments(lib) -> None:
    with pytest.raises(pf.ProgramError, match=r"\[n\]: xs has 3 \(axis 0\), ys has 4 \(axis 0\)"):
        lib.add(i32(1, 2, 3), i32(1, 2, 3, 4))
    np.testing.assert_array_equal(lib.add(i32(1), i32(2)).numpy(), i32(3))


def _manifest_path(lib) -> Path:
    return lib.path.with_name(lib.path.stem.removeprefix("lib") + ".json")


def test_unique_must_be_a_json_bool(lib) -> None:
    raw = json.loads(_manifest_path(lib).read_text())
    raw["entry_points"]["set0"]["inputs"][0]["unique"] = "false"
    with pytest.raises(ManifestError, match="'unique' must be true or false"):
        parse_manifest(raw)


def test_manifest_of_another_program_is_refused(lib, types_lib, tmp_path) -> None:
    other = tmp_path / "libaliasing.so"
    other.symlink_to(lib.path)
    (tmp_path / "aliasing.json").write_text(_manifest_path(types_lib).read_text())
    with pytest.raises(ManifestError, match="does not match"):
        pf.load(other)


def _mutations(draw, node, depth=0):
    """A copy of a JSON tree with one random edit: a value replaced, a key dropped, a type swapped."""
    if isinstance(node, dict) and node and depth < 8:
        key = draw(st.sampled_from(sorted(node)))
        out = dict(node)
        action = draw(st.sampled_from(["recurse", "recurse", "recurse", "drop", "replace"]))
        if action == "drop":
            del out[key]
        elif action == "replace":
            out[key] = draw(JSON_VALUES)
        else:
            out[key] = _mutations(draw, node[key], depth + 1)
        return out
    if isinstance(node, list) and node and depth < 8:
        i = draw(st.integers(0, len(node) - 1))
        out = list(node)
        out[i] = _mutations(draw, node[i], depth + 1) if draw(st.booleans()) else draw(JSON_VALUES)
        return out
    return draw(JSON_VALUES)


JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.sampled_from(["false", "true", "[]i32", "[][]f32", "i64", "x y", "futhark_free_i32_1d", ""]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.sampled_from(["name", "type", "kind"]), st.text(max_size=3), max_size=2),
)


@given(data=st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_manifests_parse_or_raise_manifest_error(lib, data) -> None:
    raw = json.loads(_manifest_path(lib).read_text())
    _parse_or_refuse(_mutations(data.draw, raw), "a random edit")


def _parse_or_refuse(raw: object, what: str) -> None:
    """parse_manifest returns or raises ManifestError; any other exception fails, naming ``what``."""
    try:
        parse_manifest(raw)
    except ManifestError:
        pass
    except Exception as e:
        raise AssertionError(f"{what}: {type(e).__name__}: {e}") from e


def _every_single_edit(raw: object):
    """Every copy of ``raw`` with one value replaced by each of a few wrong kinds, or its key
    dropped: exhaustive where a random walk rarely reaches a deep spot (a sum variant's payload)."""
    text = json.dumps(raw)  # a fresh copy per edit by json.loads: ten times quicker than copy.deepcopy
    for path in json_paths(raw):
        for value in (None, True, 0, -1, 2**63, "", "x", "f64", [], [1], {}, {"name": "x"}, "<drop>"):
            edited = json.loads(text)
            node = edited
            for k in path[:-1]:
                node = node[k]
            if value == "<drop>":
                if not isinstance(node, dict):
                    continue
                del node[path[-1]]
            else:
                node[path[-1]] = value
            yield path, value, edited


@pytest.mark.parametrize("program", ["types", "wrap"])
def test_every_single_edit_of_a_manifest_parses_or_raises_manifest_error(program) -> None:
    """types.fut has sums, records and arrays of records (a variant's payload null was a TypeError)."""
    raw = json.loads(built_library(program).with_name(f"{program}.json").read_text())
    tried = 0
    for path, value, edited in _every_single_edit(raw):
        tried += 1
        _parse_or_refuse(edited, f"{program}.json with {'/'.join(map(str, path))} = {value!r}")
    assert tried > 1000


@given(data=st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_manifests_load_or_raise_manifest_error(lib, data, tmp_path_factory) -> None:
    """Loaded against the real library: a ManifestError, or a library whose calls work or raise."""
    raw = json.loads(_manifest_path(lib).read_text())
    mutated = _mutations(data.draw, raw)
    d = tmp_path_factory.mktemp("m")
    (d / "libaliasing.so").symlink_to(lib.path)
    (d / "aliasing.json").write_text(json.dumps(mutated))
    try:
        other = pf.load(d / "libaliasing.so")
    except ManifestError:
        return
    with other:
        try:
            other.sum(i32(1, 2, 3))
        except (TypeError, ValueError, pf.FutharkError, AttributeError):
            pass


# ---------------------------------------------------------------- 7: silently wrong


def test_bool_bytes_other_than_0_1_are_read_as_numpy_reads_them(lib) -> None:
    weird = np.frombuffer(bytes([0, 2, 255, 1]), dtype=np.bool_)
    assert lib.countb(weird) == 3 == int(weird.sum())
    assert bool(lib.anyb(np.frombuffer(bytes([0, 2, 0]), dtype=np.bool_))) is True


def test_masked_arrays_are_refused(lib) -> None:
    with pytest.raises(ValueError, match="masked"):
        lib.sum(np.ma.array(i32(1, 2, 3), mask=[0, 1, 0]))
    assert lib.sum(np.ma.array(i32(1, 2, 3))) == 6  # nothing masked: its data


def test_freed_handle_has_no_shape_len_or_truth(lib) -> None:
    h = lib.types["[]i32"].new(i32(1, 2))
    assert h.shape == (2,)
    h.free()
    for probe in (lambda: h.shape, lambda: len(h), lambda: bool(h)):
        with pytest.raises(pf.InvalidHandleError):
            probe()


def test_float32_overflow_raises_but_inf_and_nan_pass(lib) -> None:
    ones = np.ones(2, np.float32)
    for big in (1e40, -1e40, np.float64(1e39), 10**400):
        with pytest.raises(OverflowError, match="'x'"):
            lib.scale(big, ones)
    assert np.isinf(lib.scale(float("inf"), ones).numpy()).all()
    assert np.isnan(lib.scale(float("nan"), ones).numpy()).all()
    np.testing.assert_array_equal(lib.scale(3.0e38, ones).numpy(), np.float32(3.0e38) * ones)


def test_asarray_copy_false_raises(lib) -> None:
    h = lib.types["[]i32"].new(i32(1, 2))
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(h, copy=False)
    np.testing.assert_array_equal(np.asarray(h), i32(1, 2))


def test_list_with_nan_is_accepted(lib) -> None:
    got = lib.scale(2.0, [1.0, float("nan")]).numpy()
    assert got[0] == 2.0 and np.isnan(got[1])
    with pytest.raises(TypeError, match="would change values"):
        lib.scale(2.0, [1e40])


# ---------------------------------------------------------------- the lifecycle machine, crash-detected


@pytest.mark.parametrize("backend", ["c", "multicore"])
def test_lifecycle_profile_has_no_crash(backend) -> None:
    """The lifecycle machine (aliasing programs, records, a second thread) in child processes:
    ``PYBRIDGE_LIFECYCLE_PROFILE=full`` runs 10,000 sequences per backend (RELIABILITY.md)."""
    from pybridge.testing.lifecycle_run import interrupts_wanted, profile_sequences, run

    # composed.fut: records, sums and arrays of both (its reads once left values to the GC)
    programs = [str(PROGRAM), str(ROOT / "tests" / "programs" / "composed.fut")]
    hist = ROOT / "build" / "futhark" / backend / "libhistogram.so"
    if hist.exists():
        programs.append(str(hist))  # nbins: a size known from the .fut shipped beside it
    n = profile_sequences()
    # A batch that hangs ends in 10 minutes with every thread's stack in the crash entry (one
    # sequence that hangs: in 5, stateful.SEQUENCE_LIMIT_S), not at CI's limit.
    summary = run(programs, backend, n, batch=max(100, n // 10), timeout=600)
    assert not summary["crashes"], json.dumps(summary["crashes"], indent=1)
    assert not summary["failures"], json.dumps(summary["failures"], indent=1)
    assert summary["sequences"] >= n, summary
    if sys.platform.startswith("linux") and interrupts_wanted():  # the Ctrl-C rule (on by default): it must have bitten
        assert summary["interrupts_landed"] > 0, summary


@pytest.mark.parametrize("backend", ["c", "multicore"])
def test_consuming_a_record_whose_fields_share_memory(backend: str) -> None:
    """mkpair(h, h) holds h's memory twice; after h itself is consumed (a copy of it), consuming the
    record in place (bump updates field a) must not change field b. Found by hypothesis in CI."""
    lib = pf.load(str(PROGRAM), backend=backend)
    try:
        h = lib.types["[]i32"].new(np.array([0], np.int32))
        p = lib.mkpair(h, h)
        lib.set0(h, 0)
        q = lib.bump(p)
        np.testing.assert_array_equal(q.a.numpy(), [1])
        np.testing.assert_array_equal(q.b.numpy(), [0])
    finally:
        lib.close()


def test_lifecycle_runner_counts_parallel_batches() -> None:
    """--jobs: batches in parallel children, each counted (Hypothesis may run a sequence or two
    beyond max_examples in a batch, so at least the number asked for)."""
    from pybridge.testing.lifecycle_run import run

    summary = run([str(PROGRAM)], "c", 9, batch=2, steps=5, jobs=3, timeout=300)
    assert (summary["batches"], summary["crashes"], summary["failures"]) == (5, [], []), summary
    assert summary["sequences"] >= 9, summary


def test_lifecycle_runner_reports_every_crashing_parallel_batch(tmp_path, monkeypatch) -> None:
    """A child killed by a signal is a crash, one per batch, even when batches run at once."""
    from pybridge.testing import lifecycle_run

    fake = tmp_path / "python-that-segfaults"
    fake.write_text("#!/bin/sh\nkill -SEGV $$\n")
    fake.chmod(0o755)
    monkeypatch.setattr(lifecycle_run.sys, "executable", str(fake))
    summary = lifecycle_run.run(["unused.fut"], "c", 6, batch=2, jobs=3)
    assert [c["status"] for c in summary["crashes"]] == [-11, -11, -11], summary
    assert summary["sequences"] == 0 and summary["failures"] == []


# ---------------------------------------------------------------- signed division overflow

DIVISION = ROOT / "tests" / "programs" / "division.fut"


def _futhark_division(x: int, y: int, bits: int) -> tuple[int, int, int, int]:
    """Futhark's /, %, //, %% (floor, mod, truncating quotient, remainder), wrapping to ``bits``
    as Futhark's interpreter does (`i32.lowest / -1 == i32.lowest`)."""
    def wrap(v: int) -> int:
        return (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
    quot = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
    return wrap(x // y), wrap(x % y), wrap(quot), wrap(x - quot * y)


@pytest.mark.parametrize("backend", ["c", "multicore"])
def test_lowest_divided_by_minus_one_wraps_instead_of_killing_the_process(backend: str) -> None:
    """x86 idiv traps on lowest / -1 (SIGFPE, the process dies): the generated C is guarded."""
    code = f"""
import pybridge.futhark as pf, numpy as np
with pf.load({str(DIVISION)!r}, backend={backend!r}) as lib:
    print([int(v) for v in lib.div32(np.int32(-2**31), np.int32(-1))])
    print([int(v) for v in lib.div64(np.int64(-2**63), np.int64(-1))])
    print(lib.div32s(np.array([-2**31, 7], np.int32), np.array([-1, -1], np.int32)).numpy().tolist())
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"status {proc.returncode}\n{proc.stderr[-2000:]}"
    assert proc.stdout.split("\n")[:3] == [
        str(list(_futhark_division(-2**31, -1, 32))),
        str(list(_futhark_division(-2**63, -1, 64))),
        str([-2**31, -7]),
    ]


@pytest.fixture(scope="module")
def division_lib():
    with pf.load(DIVISION, backend="c") as library:
        yield library


@given(x=st.integers(-2**31, 2**31 - 1), y=st.integers(-2**31, 2**31 - 1).filter(bool) | st.sampled_from([-1, 1]))
@FUZZ
def test_signed_division_matches_futhark_semantics(division_lib, x: int, y: int) -> None:
    got = [int(v) for v in division_lib.div32(np.int32(x), np.int32(y))]
    assert got == list(_futhark_division(x, y, 32))


@given(x=st.integers(-2**63, 2**63 - 1) | st.sampled_from([-2**63, -2**63 + 1, 2**63 - 1, 0]),
       y=st.integers(-2**63, 2**63 - 1).filter(bool) | st.sampled_from([-1, 1, -2**63, 2**63 - 1]))
@FUZZ
def test_signed_division_matches_futhark_semantics_64(division_lib, x: int, y: int) -> None:
    """The guard tests both operands for the quotients (lowest and -1) and swaps the divisor -1 for
    1 in the remainders: every pair, the trapping one included, gives Futhark's answer."""
    got = [int(v) for v in division_lib.div64(np.int64(x), np.int64(y))]
    assert got == list(_futhark_division(x, y, 64))
