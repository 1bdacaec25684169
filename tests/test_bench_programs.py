"""pybridge bench programs: the -- == parser, the executable's output reader, and a quick run on two
real programs (c backend) whose results must equal the executable's."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pybridge.bench import cli, programs
from pybridge.bench.timing import paired_difference, whole_unit_mean
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
        consumed = sum(p.unique for p in info.inputs)  # renewed before each call after the first
        assert frees["n"] == (runs + 1) * outs + ins + runs * consumed, (frees, outs, ins, consumed)
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


def _pair_with(monkeypatch, exe, paired, runs, quick=False):
    """programs._pair on one dataset of a c program, with the executable and the paired blocks faked."""
    monkeypatch.setattr(programs, "dataset_bytes", lambda *a, **k: b"")
    monkeypatch.setattr(programs, "read_values", lambda *a, **k: [])
    monkeypatch.setattr(programs, "run_executable", exe)
    monkeypatch.setattr(programs, "run_paired", paired)

    class Lib:
        backend = "c"

    return programs._pair(None, programs.Program(Path("p.fut"), []), programs.Dataset("main", "input", "1", "#0"),
                          Path("exe"), Lib(), "programs (c)", runs, 10.0, quick=quick)


@pytest.mark.parametrize("runs", [1, 2, 5, 20, 31])
def test_pair_rotates_which_side_runs_first_and_splits_the_runs(monkeypatch, runs):
    """The executable and the pybridge / bare cffi blocks alternate in rounds, each round led by
    the other (neither always runs first after another process used the device), each asked for
    ``runs`` calls in all; pybridge - bare is the median of the block pairs' differences."""
    calls: list[tuple[str, int]] = []

    def exe(*args):
        calls.append(("exe", args[3]))
        return [10.0] * args[3], [7]

    def paired(lib, entry, values, n, budget_s=0.0, max_calls=0, block=programs.BLOCK):
        calls.append(("paired", n))
        k = len([c for c in calls if c[0] == "paired"])
        return programs.Paired([12.0] * n, [11.0] * n, [12.0 + k, 12.0], [11.0, 11.0], [7])

    r = _pair_with(monkeypatch, exe, paired, runs, quick=True)
    for name in ("exe", "paired"):
        assert sum(n for side, n in calls if side == name) == runs
    rounds = [calls[i:i + 2] for i in range(0, len(calls), 2)]
    assert all(sorted(s for s, _ in rnd) == ["exe", "paired"] for rnd in rounds)
    leaders = [rnd[0][0] for rnd in rounds]
    assert leaders == (["exe", "paired"] * 6)[:len(rounds)]
    assert r["median_us"] == 12.0 and r["exe_us"] == 10.0 and r["bare_us"] == 11.0 and r["equal"]
    # block pairs: differences 1 + k (k-th round) and 1 for every round: their median, 2 per round
    diffs = sorted([1.0 + k for k in range(1, len(rounds) + 1)] + [1.0] * len(rounds))
    assert r["over_bare_us"] == statistics.median(diffs) and r["block_pairs"] == 2 * len(rounds)
    assert r["over_bare_lo_us"] <= r["over_bare_us"] <= r["over_bare_hi_us"]


@pytest.mark.parametrize("exe_us", [1.0, 9.0, 170.0, 5000.0])
def test_pair_gives_the_executable_the_time_budget_of_pybridges_side(monkeypatch, exe_us):
    """Outside --quick, the executable's later rounds get as many runs as the pair budget buys at
    the speed its first round showed (a 1 µs call is read thousands of times, not --runs), and its
    figure is the whole-µs mean; the median stays in the row."""
    asked: list[int] = []

    def exe(*args):
        asked.append(args[3])
        return [exe_us] * (args[3] - 1) + [exe_us + 1.0], [7]

    def paired(lib, entry, values, n, budget_s=0.0, max_calls=0, block=programs.BLOCK):
        return programs.Paired([12.0] * n, [11.0] * n, [12.0], [11.0], [7])

    runs = 12
    r = _pair_with(monkeypatch, exe, paired, runs)
    rounds = min(programs.ROUNDS, runs // 2)
    readings: list[float] = []
    for k, n in enumerate(asked):  # each later round: the budget at the speed the runs so far showed
        if k:
            per_run_s = max(statistics.median(readings), 1.0) * 1e-6
            assert n == max(runs // rounds, min(programs.EXE_MAX_RUNS, programs.EXE_GROWTH * max(asked[:k]),
                                                int(programs.PAIR_BUDGET_S / rounds / per_run_s)))
        readings += [exe_us] * (n - 1) + [exe_us + 1.0]
    assert len(asked) == rounds and asked[0] == runs // rounds
    assert min(asked[1:]) > asked[0]  # the budget buys more runs than --runs at every speed here
    assert r["exe_runs"] == sum(asked)
    assert r["exe_us"] == whole_unit_mean(readings) and r["exe_median_us"] == exe_us
    assert r["ratio"] == 12.0 / r["exe_us"]


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 0.05), st.floats(1.0, 5000.0), st.integers(2, 40))
def test_the_executables_extra_runs_cost_about_the_pair_budget_whatever_their_untimed_part(
        startup_s, untimed_s, timed_us, runs):
    """Each run of the executable also uploads its inputs anew and frees its results, untimed (an
    80 MB input on a GPU: ~15 ms a run beside a 100 µs call), and each process starts (a GPU
    context) first: the runs beyond --runs cost about the pair budget, at most EXE_GROWTH times a
    first round's worth more while two processes' wall times have yet to show the untimed part,
    not EXE_MAX_RUNS untimed parts (seconds, up to the timeout)."""
    clock = [0.0]
    asked: list[int] = []

    def exe(*args):
        asked.append(args[3])
        clock[0] += startup_s + args[3] * (untimed_s + timed_us * 1e-6)
        return [float(round(timed_us))] * args[3], [7]

    def paired(lib, entry, values, n, budget_s=0.0, max_calls=0, block=programs.BLOCK):
        return programs.Paired([12.0] * n, [11.0] * n, [12.0], [11.0], [7])

    with pytest.MonkeyPatch.context() as m:
        m.setattr(programs, "dataset_bytes", lambda *a, **k: b"")
        m.setattr(programs, "read_values", lambda *a, **k: [])
        m.setattr(programs, "run_executable", exe)
        m.setattr(programs, "run_paired", paired)
        m.setattr(programs, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

        class Lib:
            backend = "cuda"

        programs._pair(None, programs.Program(Path("p.fut"), []), programs.Dataset("main", "input", "1", "#0"),
                       Path("exe"), Lib(), "programs (cuda)", runs, 10.0)
    run_s = untimed_s + timed_us * 1e-6
    extra_s = (sum(asked) - runs) * run_s
    assert extra_s <= programs.PAIR_BUDGET_S + programs.EXE_GROWTH * asked[0] * run_s + 1e-9, asked


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 500.0), st.integers(200, 3000), st.integers(0, 2**32 - 1),
       st.lists(st.floats(5.0, 1e4), max_size=20))
def test_whole_unit_mean_reads_a_sub_microsecond_duration_through_a_whole_microsecond_timer(d, n, seed, outliers):
    """A call of d µs timed by a clock of whole µs at a random phase, run after run, plus preempted
    runs far out: the estimate is d within a few standard errors (the median is d rounded, up to 0.5
    off); the outliers change nothing beyond that (below 2% of the readings)."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0.0, 1.0, n)
    readings = list(np.floor(start + d) - np.floor(start))
    outliers = outliers[: max(0, n // 50 - 1)]
    readings += [float(np.floor(d + o)) for o in outliers]
    est = whole_unit_mean(readings)
    assert abs(est - d) <= 5 * 0.5 / np.sqrt(n) + 2 * len(outliers) / n + 1e-9, (est, d)


def test_a_run_of_the_executable_costs_what_its_processes_wall_times_say_where_that_is_more():
    """The start of a process (a GPU context, most of a small one's wall time) cancels out; a run
    whose untimed part (results freed, inputs restored) dwarfs its timed part is costed by it."""
    assert programs._exe_run_s([1.0] * 5, [(2, 0.5)]) == 1e-6  # one process: the readings alone
    assert programs._exe_run_s([1.0] * 5, [(2, 0.5), (1002, 0.6)]) == pytest.approx(1e-4)
    assert programs._exe_run_s([300.0] * 5, [(2, 0.5), (1002, 0.6)]) == pytest.approx(3e-4)
    assert programs._exe_run_s([0.0] * 5, [(2, 0.5), (2, 0.4)]) == 1e-6  # the same run counts: no difference to take


def test_whole_unit_mean_refuses_no_readings_and_takes_any_few():
    with pytest.raises(ValueError, match="at least one reading"):
        whole_unit_mean([])
    # an even count with a gap wider than the window around the middle (the mean median's window is empty)
    assert whole_unit_mean([0.0, 5.0]) == 2.5 and whole_unit_mean([7.0]) == 7.0
    assert whole_unit_mean([1.0, 2.0, 2.0, 1.0, 40.0]) == 1.5


# ---------------------------------------------------------------- pybridge - bare: blocks in turn, paired


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=300).flatmap(
    lambda a: st.tuples(st.just(a), st.lists(st.floats(-1e6, 1e6), min_size=len(a), max_size=len(a)))),
       st.floats(-1e3, 1e3))
def test_paired_difference_is_the_median_of_differences_inside_its_interval(ab, shift) -> None:
    a, b = ab
    d = paired_difference(a, b)
    diffs = sorted(x - y for x, y in zip(a, b))
    assert d["median"] == statistics.median(diffs) and d["pairs"] == len(a)
    assert d["lo"] <= d["median"] <= d["hi"] and d["lo"] in diffs and d["hi"] in diffs
    moved = paired_difference([x + shift for x in a], b)  # a constant added to one side moves it all
    for k in ("median", "lo", "hi"):
        assert moved[k] == pytest.approx(d[k] + shift, abs=1e-6 * (1 + abs(d[k]) + abs(shift)))


@pytest.mark.parametrize("n, rank", [(6, 1), (10, 2), (20, 6), (50, 18), (100, 40)])
def test_paired_difference_interval_is_the_binomial_one(n: int, rank: int) -> None:
    """The 95% interval of a median: order statistics ``rank`` and ``n + 1 - rank`` (1-based), as
    the binomial(n, 1/2) tables give them."""
    d = paired_difference([float(i) for i in range(n)], [0.0] * n)
    assert (d["lo"], d["hi"]) == (rank - 1, n - rank)
    with pytest.raises(ValueError):
        paired_difference([1.0], [])


class _Side:
    """A fake side: ``base`` µs, plus ``switch`` µs on a call right after the other side's."""

    last: list[str] = [""]

    def __init__(self, name: str, base: float, switch: float) -> None:
        self.name, self.base, self.switch, self.results, self.last_out = name, base, switch, [], None

    def call(self, keep: bool = False) -> float:
        cost = self.base + (self.switch if _Side.last[0] not in ("", self.name) else 0.0)
        _Side.last[0] = self.name
        return cost


@pytest.mark.parametrize("block, expected", [(1, None), (5, 1.0)])
def test_blocks_leave_out_what_a_switch_between_sides_costs(monkeypatch, block: int, expected: float | None) -> None:
    """pybridge 1 µs over bare, and the first call after the other side's calls 3 µs (pybridge's)
    or 1 µs (bare) dearer: single calls in turn read the switch as pybridge's (2 µs); in blocks of
    5 the median of each block leaves the switch out (1 µs). Blocks alternate which side leads."""
    _Side.last[0] = ""
    order: list[str] = []
    py, bare = _Side("py", 11.0, 3.0), _Side("bare", 10.0, 1.0)

    def record(side: _Side) -> _Side:
        real = side.call

        def call(keep: bool = False) -> float:
            order.append(side.name)
            return real(keep)

        side.call = call  # type: ignore[method-assign]
        return side

    class Inputs:
        def __init__(self, *a: object) -> None: ...
        def close(self) -> None: ...

    monkeypatch.setattr(programs, "_Inputs", Inputs)
    monkeypatch.setattr(programs, "_PybridgeSide", lambda *a: record(py))
    monkeypatch.setattr(programs, "_BareSide", lambda *a: record(bare))
    got = programs.run_paired(None, "main", [], 40, block=block)
    assert len(got.py_us) == len(got.bare_us) == 40 and len(got.py_blocks) == 40 // block
    d = paired_difference(got.py_blocks, got.bare_blocks)
    assert d["median"] == (2.0 if expected is None else expected)
    pattern = [s for k in range(40 // block) for s in (["py"] * block + ["bare"] * block)[::1 if k % 2 == 0 else -1]]
    assert order == ["bare", "py", *pattern, "py"]  # warm-ups, the blocks, the untimed call for the results


@needs_futhark
def test_paired_runs_share_inputs_renew_consumed_ones_and_leave_nothing_behind(monkeypatch) -> None:
    """run_paired on consume.fut (its first argument consumed): both sides call on the same
    handles, a consumed one renewed before every call; pybridge's results equal the executable's
    reference (NumPy here), nothing stays registered; without a bare call, pybridge's alone."""
    import pybridge.futhark as pf

    prog = programs.parse_program(PROGRAMS / "consume.fut")
    ds = prog.datasets[0]
    values = programs.read_values(programs.dataset_bytes(None, prog, ds, seed=3), ds.describe())
    with pf.load(PROGRAMS / "consume.fut", backend="c") as lib:
        before = lib.live_values()
        got = programs.run_paired(lib, ds.entry, values, 10, block=5)
        assert len(got.py_us) == len(got.bare_us) == 10 and len(got.py_blocks) == len(got.bare_blocks) == 2
        assert lib.live_values() == before
        ref = values[0].copy()
        np.add.at(ref, np.abs(values[1]) % len(ref), 1)  # consume.fut: counts of |xs| % m added to counts
        np.testing.assert_array_equal(got.results[0], ref)

        def broken(*a: object) -> None:
            raise RuntimeError("no bare call here")

        monkeypatch.setattr(programs, "_BareSide", broken)
        alone = programs.run_paired(lib, ds.entry, values, 4)
        assert alone.bare_us is None and len(alone.py_us) == 4 and not alone.py_blocks
        assert lib.live_values() == before
