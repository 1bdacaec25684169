"""BENCHMARKS.md's target rows for Dask read `pybridge bench scaling --gpus 1` rows: the figure
beside the miss says what Dask alone (the same graph doing no work) reaches, so a reader sees the
floor that no task can beat."""

from __future__ import annotations

from pybridge.bench import report


def _rows(dask_us: float, floor_us: float, cupy_us: float, direct_us: float = 1000.0) -> list[dict]:
    rows = [{"benchmark": "saxpy strong", "impl": "direct (no Dask, 1 device)", "size": 1, "median_us": direct_us}]
    for label, t in (("dask 1 GPU", dask_us), ("Dask + CuPy, same graph, 1 GPU", cupy_us),
                     ("Dask alone (blocks passed through), 1 GPU", floor_us)):
        rows.append({"benchmark": "saxpy strong", "impl": label, "size": 1, "median_us": t,
                     "speedup_vs_direct": direct_us / t})
    return rows


def _line(lines: list[str], words: str) -> str:
    (line,) = [x for x in lines if words in x]
    return line


def test_dask_rows_name_the_floor_and_judge_both_targets():
    lines = report.target_lines(_rows(dask_us=20_000, floor_us=16_000, cupy_us=18_000))
    direct = _line(lines, "≥ 0.8 of one direct call")
    assert "saxpy 0.05 of direct (Dask alone, no work: 0.06)" in direct and "**no**" in direct
    assert "saxpy: 0.05 (needs 0.8)" in direct
    peer = _line(lines, "faster than Dask + CuPy")
    assert "saxpy 20.0 vs 18.0 ms" in peer and "1.11× Dask + CuPy" in peer

    lines = report.target_lines(_rows(dask_us=1100, floor_us=900, cupy_us=1200))
    assert "| yes |" in _line(lines, "≥ 0.8 of one direct call")
    assert "| yes |" in _line(lines, "faster than Dask + CuPy")


def test_dask_rows_absent_say_how_to_measure_them():
    line = _line(report.target_lines([]), "≥ 0.8 of one direct call")
    assert "not measured here (pybridge bench scaling --gpus 1)" in line and "| – |" in line
