"""pybridge bench programs: the -- == parser, the executable's output reader, and a quick run on two
real programs (c backend) whose results must equal the executable's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pybridge.bench import cli, programs
from pybridge.futhark.build import futhark_compiler

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
def test_bare_runs_leave_nothing_behind(name: str, entry: str) -> None:
    """run_bare frees every result and input it made, consumed inputs included (consume.fut's
    main consumes its first argument), and the entry still computes what pybridge's call does."""
    import pybridge.futhark as pf

    prog = programs.parse_program(PROGRAMS / f"{name}.fut")
    ds = next(d for d in prog.datasets if d.entry == entry)
    values = programs.read_values(programs.dataset_bytes(None, prog, ds, seed=3), ds.describe())
    with pf.load(PROGRAMS / f"{name}.fut", backend="c") as lib:
        before = lib.live_values()
        samples = programs.run_bare(lib, entry, values, 5)
        assert len(samples) == 5 and all(s > 0 for s in samples)
        assert lib.live_values() == before
        _, results = programs.run_pybridge(lib, entry, values, 1)
        assert lib.live_values() == before and len(results) == len(lib.entry_points[entry].info.outputs)


@needs_futhark
def test_prepare_then_prebuilt_runs_without_the_compiler_and_reports_targets(tmp_path, monkeypatch):
    """The GPU machine's path (--prepare here, --prebuilt there), on c: no Futhark at run time,
    random inputs from NumPy, results still equal; the report shows issue 23's targets."""
    prep = tmp_path / "prep"
    files = [str(PROGRAMS / "mandelbrot.fut"), str(PROGRAMS / "consume.fut")]
    assert cli.main(["programs", "--prepare", str(prep), "--backend", "c", *files]) == 0
    assert (prep / "c" / "mandelbrot" / "exe" / "mandelbrot.c").is_file()
    assert len(list((prep / "c" / "mandelbrot" / "data").glob("*.in"))) == 2  # literal inputs, converted
    assert not list((prep / "c" / "consume" / "data").glob("*.in"))  # random: drawn at run time
    monkeypatch.setattr("pybridge.futhark.build.futhark_compiler", lambda: None)
    out, md = tmp_path / "p.json", tmp_path / "B.md"
    rc = cli.main(["programs", "--quick", "--runs", "2", "--backend", "c", "--prebuilt", str(prep),
                   "--json", str(out), "--markdown", str(md)])
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    pairs = [r for r in rows if r["benchmark"] == "programs (c)"]
    assert len(pairs) == 4 and all(r.get("equal") is True for r in pairs), pairs
    text = md.read_text()
    assert "Real programs, c: added per call over Futhark's own executable" in text
    assert "no `pybridge bench programs --backend cuda` rows" in text


def test_random_values_follow_futhark_dataset_defaults():
    rng = np.random.default_rng(1)
    vals = programs.read_values(programs._random_value("[4][3]f32", rng) + programs._random_value("[1000]i8", rng)
                                + programs._random_value("bool", rng), "t")
    assert vals[0].shape == (4, 3) and vals[0].dtype == np.float32 and ((vals[0] >= 0) & (vals[0] < 1)).all()
    assert vals[1].dtype == np.int8 and vals[1].min() < -100 and vals[1].max() > 100
    assert isinstance(vals[2], np.bool_)


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
