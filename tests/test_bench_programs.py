"""pybridge bench programs: the -- == parser, the executable's output reader, and a quick run on two
real programs (c backend) whose results must equal the executable's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pybridge.bench import cli, programs
from pybridge.futhark.build import futhark_compiler

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "benchmarks" / "programs"
needs_futhark = pytest.mark.skipif(futhark_compiler() is None,
                                   reason="the Futhark compiler is not installed (scripts/install-futhark.sh, or FUTHARK=...)")


def test_parse_blocks_entries_random_literal_file_and_outputs(tmp_path):
    (tmp_path / "d.in").write_text("1 2")
    src = tmp_path / "p.fut"
    src.write_text(
        "-- ==\n-- entry: a b\n-- input { 1i32 [1, 2] } output { 3i32 }\n-- random input { [10]f32 7i64 }\n"
        "-- compiled input @ d.in\n-- script input { f 1 }\n\nentry a (x: i32) = x\n"
        "-- ==\n-- input { 5 }\nentry main (x: i32) = x\n")
    prog = programs.parse_program(src)
    got = [(d.entry, d.kind, d.text) for d in prog.datasets]
    assert got == [("a", "input", "1i32 [1, 2]"), ("b", "input", "1i32 [1, 2]"),
                   ("a", "random", "[10]f32 7i64"), ("b", "random", "[10]f32 7i64"),
                   ("a", "file", "d.in"), ("b", "file", "d.in"), ("main", "input", "5")]


def test_read_values_takes_separators_and_rejects_truncation():
    a = np.arange(3, dtype=np.int32)
    one = b"b\x02\x01 i32" + np.int64(3).tobytes() + a.tobytes()
    two = b"b\x02\x00 f64" + np.float64(2.5).tobytes()
    vals = programs.read_values(one + b"\n" + two + b"\n", "t")
    assert np.array_equal(vals[0], a) and vals[0].dtype == np.int32
    assert vals[1] == 2.5 and isinstance(vals[1], np.float64)
    with pytest.raises(ValueError):
        programs.read_values(one[:-1], "t")
    with pytest.raises(ValueError):
        programs.read_values(b"x\x02\x00 f64" + bytes(8), "t")


def test_equal_is_exact_for_integers_and_close_for_floats():
    assert programs.equal(np.float32(1.0), np.float32(1.0 + 1e-7))
    assert not programs.equal(np.float32(1.0), np.float32(1.001))
    assert not programs.equal(np.int64(3), np.int64(4))
    assert not programs.equal(np.zeros(3), np.zeros(4))


@needs_futhark
def test_bench_programs_quick_on_two_programs(tmp_path):
    out = tmp_path / "p.json"
    files = [str(PROGRAMS / "blackscholes.fut"), str(PROGRAMS / "consume.fut")]
    rc = cli.main(["programs", "--quick", "--runs", "3", "--backend", "c", *files, "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    pairs = [r for r in rows if r["benchmark"] == "programs (c)"]
    assert len(pairs) == 4 and all(r.get("skipped") is None for r in pairs), pairs
    assert all(r["equal"] is True and r["exe_us"] >= 0 and r["median_us"] > 0 for r in pairs)
    assert {r["impl"].split()[0] for r in pairs} == {"blackscholes", "consume"}
    summary = {r["impl"]: r for r in rows if r["benchmark"] == "programs summary (c)"}
    assert summary["pairs"]["size"] == 4 and summary["pairs"]["equal"] is True
    assert summary["added µs, calls < 1 ms: median"]["target"] == programs.TARGET_ADDED_MEDIAN_US
    # the bare cffi floor: measured for every pair, summarised without a target
    assert all(r["bare_us"] > 0 for r in pairs), pairs
    assert summary["bare cffi / executable, all pairs: median"]["value"] > 0
    assert "target" not in summary["bare cffi / executable, all pairs: median"]


@needs_futhark
@pytest.mark.parametrize("name,entry", [("consume", "main"), ("nbody", "main"), ("blackscholes", "price")])
def test_bare_runs_leave_nothing_behind(name: str, entry: str, monkeypatch) -> None:
    """run_bare frees every result and input it made, consumed inputs included (consume.fut's
    main consumes its first argument): each free function is counted, and nothing stays
    registered; pybridge's call then still computes."""
    import pybridge.futhark as pf

    prog = programs.parse_program(PROGRAMS / f"{name}.fut")
    ds = next(d for d in prog.datasets if d.entry == entry)
    values = programs.read_values(programs.dataset_bytes(None, prog, ds, seed=3), ds.describe())
    runs = 5
    with pf.load(PROGRAMS / f"{name}.fut", backend="c") as lib:
        info = lib.entry_points[entry].info
        frees = {"n": 0}
        for kind in {id(k): k for k in lib.types.values() if hasattr(k, "free_fn")}.values():
            def counted(ctx, p, _free=kind.free_fn):
                frees["n"] += 1
                return _free(ctx, p)
            monkeypatch.setattr(kind, "free_fn", counted)
        before = lib.live_values()
        samples = programs.run_bare(lib, entry, values, runs)
        assert len(samples) == runs and all(s > 0 for s in samples)
        assert lib.live_values() == before
        outs = sum(o.type not in ("f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool")
                   for o in info.outputs)
        ins = sum(not isinstance(v, np.generic) for v in values)
        made = 1 + runs if any(p.unique for p in info.inputs) else 1  # handles() calls: fresh inputs each run
        assert frees["n"] == (runs + 1) * outs + ins * made, (frees, outs, ins, made)
        _, results = programs.run_pybridge(lib, entry, values, 1)
        assert lib.live_values() == before and len(results) == len(info.outputs)


@needs_futhark
@pytest.mark.parametrize("name,entry,scalar_result", [("blackscholes", "price", True), ("kmeans", "main", True),
                                                      ("nbody", "main", False)])
def test_pybridge_runs_sync_once_per_call(name: str, entry: str, scalar_result: bool) -> None:
    """pybridge's timed call makes the one sync the bare call makes: the entry point's own where it
    returns a scalar (the C API syncs before one is read), else lib.sync() after it."""
    import pybridge.futhark as pf

    prog = programs.parse_program(PROGRAMS / f"{name}.fut")
    ds = next(d for d in prog.datasets if d.entry == entry)
    values = programs.read_values(programs.dataset_bytes(None, prog, ds, seed=3), ds.describe())
    with pf.load(PROGRAMS / f"{name}.fut", backend="c") as lib:
        calls = {"sync": 0}
        real = lib.sync

        def counted() -> None:
            calls["sync"] += 1
            real()

        lib.sync = counted
        programs.run_pybridge(lib, entry, values, 3)
        assert calls["sync"] == (0 if scalar_result else 4), calls


@needs_futhark
def test_bare_run_passes_an_f16_scalar_as_the_c_call_takes_it(tmp_path) -> None:
    """Found by review: run_bare passed an f16 scalar as a float where the C parameter is its
    uint16_t bits (TypeError), which dropped the whole (program, dataset) pair."""
    src = tmp_path / "half.fut"
    src.write_text("-- ==\n-- input { 1.5f16 [1f32, 2f32, 3f32] }\n"
                   "entry main (a: f16) (xs: []f32) : []f32 = map (\\x -> x + f32.f16 a) xs\n")
    rc = cli.main(["programs", "--quick", "--runs", "2", "--backend", "c", str(src), "--json", str(tmp_path / "o.json")])
    rows = [r for r in json.loads((tmp_path / "o.json").read_text())["rows"] if r["benchmark"] == "programs (c)"]
    assert rc == 0 and len(rows) == 1 and rows[0].get("skipped") is None, rows
    assert rows[0]["equal"] is True and rows[0]["bare_us"] > 0


def test_a_closed_stdout_still_writes_the_json(tmp_path):
    """`pybridge bench ... | head` closed the pipe while the table was printed: the run lost its
    --json file (seen on the GPU machine: a cuda programs run of 3 minutes gone). Printing stops,
    the files are still written, and the exit status is not a failure."""
    import subprocess
    import sys

    rows = [{"benchmark": "t", "impl": f"row {i}", "size": None, "median_us": float(i)} for i in range(3000)]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"meta": {}, "rows": rows}))
    out = tmp_path / "out.json"
    proc = subprocess.Popen([sys.executable, "-m", "pybridge", "bench", "report", str(src), "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes, as head does after its lines
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-500:]
    assert len(json.loads(out.read_text())["rows"]) == 3000


@pytest.mark.parametrize("runs", [1, 2, 5, 20, 31])
def test_pair_rotates_which_side_runs_first_and_splits_the_runs(monkeypatch, runs):
    """The executable, pybridge and the bare cffi call alternate in rounds, each round led by the
    next side (none always runs first after another process used the device), and every side makes
    exactly ``runs`` timed calls."""
    calls: list[tuple[str, int]] = []

    def fake(name, value):
        def side(*args):
            n = args[3]  # every side takes its number of runs fourth
            calls.append((name, n))
            return ([value] * n, [7]) if name != "bare" else [value] * n
        return side

    monkeypatch.setattr(programs, "dataset_bytes", lambda *a, **k: b"")
    monkeypatch.setattr(programs, "read_values", lambda *a, **k: [])
    monkeypatch.setattr(programs, "run_executable", fake("exe", 10.0))
    monkeypatch.setattr(programs, "run_pybridge", fake("pybridge", 12.0))
    monkeypatch.setattr(programs, "run_bare", fake("bare", 11.0))

    class Lib:
        backend = "c"

    prog = programs.Program(Path("p.fut"), [])
    ds = programs.Dataset("main", "input", "1", "#0")
    r = programs._pair(None, prog, ds, Path("exe"), Lib(), "programs (c)", runs, 10.0)
    for name in ("exe", "pybridge", "bare"):
        assert sum(n for side, n in calls if side == name) == runs
    rounds = [calls[i:i + 3] for i in range(0, len(calls), 3)]
    assert all(sorted(s for s, _ in rnd) == ["bare", "exe", "pybridge"] for rnd in rounds)
    leaders = [rnd[0][0] for rnd in rounds]
    assert leaders == (["exe", "pybridge", "bare"] * 2)[:len(rounds)]
    if len(rounds) >= 3:
        assert set(leaders) == {"exe", "pybridge", "bare"}
    assert r["median_us"] == 12.0 and r["exe_us"] == 10.0 and r["bare_us"] == 11.0 and r["equal"]
