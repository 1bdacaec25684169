"""The multi-GPU benchmark's targets and floor rule (pybridge.bench.scaling_targets), on the figures
of a 4-GPU run (4 H200s): a miss counts as "floor" only where the same run's floor rules the target
out and the row is within 1.1x of that floor, computed from the rows."""

from __future__ import annotations

import pytest

from pybridge.bench import scaling_report
from pybridge.bench.scaling_targets import FLOOR_SLACK, judge_b0, judge_group, judge_size


def weak_rows(group: str, direct_ms: float, rows: dict[int, tuple[float, float]], peer: dict[int, float] | None = None):
    """pybridge and Dask-alone rows by worker count k: (pybridge ms, Dask alone ms); ``peer``: Dask +
    CuPy's efficiency."""
    out = []
    for k, (t, floor) in rows.items():
        out.append({"benchmark": group, "impl": f"pybridge, {k} GPUs", "workers": k, "median_us": t * 1e3,
                    "efficiency": direct_ms / t, "speedup": k * direct_ms / t, "direct_us": direct_ms * 1e3,
                    "dask_alone_us": floor * 1e3})
        out.append({"benchmark": group, "impl": f"Dask alone (same graph, no work), {k} GPUs", "workers": k,
                    "median_us": floor * 1e3})
        if peer and k in peer:
            out.append({"benchmark": group, "impl": f"Dask + CuPy, same graph, {k} GPUs", "workers": k,
                        "median_us": 1.0, "efficiency": peer[k], "speedup": k * peer[k]})
    return out


def by_impl(rows):
    return {r["impl"]: r for r in rows}


def test_weak_rows_floor_where_dask_rules_the_target_out_and_no_where_it_does_not():
    b1 = weak_rows("B1 weak saxpy×100", 96.464, {2: (109.494, 9.806), 4: (109.628, 11.023)}, peer={2: 0.95, 4: 0.95})
    judge_group(b1, "B1 weak saxpy×100", "B1")
    r2, r4 = by_impl(b1)["pybridge, 2 GPUs"], by_impl(b1)["pybridge, 4 GPUs"]
    assert r2["verdict"] == "floor" and r2["met"] is False and r4["verdict"] == "floor"
    assert "allows efficiency ≤ 0.908 (rules the target out); pybridge 1.030× that" in r2["note"]
    assert "Dask + CuPy, same graph: efficiency 0.950" in r2["note"]  # told, not a floor on weak rows
    # B2 at 4: the floor allows 0.921, above the target: a miss at 0.898 is a plain miss.
    b2 = weak_rows("B2 weak Jacobi", 127.663, {4: (142.153, 10.980)})
    judge_group(b2, "B2 weak Jacobi", "B2")
    r = by_impl(b2)["pybridge, 4 GPUs"]
    assert r["verdict"] == "no" and "allows efficiency ≤ 0.921;" in r["note"] and r["target"] == "efficiency ≥ 0.9"
    # Ruled out, but more than 1.1x the floor: no.
    b4 = weak_rows("B4 weak Mandelbrot frames", 105.423, {4: (130.975, 12.677)})
    judge_group(b4, "B4 weak Mandelbrot frames", "B4")
    r = by_impl(b4)["pybridge, 4 GPUs"]
    assert r["verdict"] == "no" and "(rules the target out); pybridge 1.109× that" in r["note"]
    # Met: yes, and no note; counts without a target are not judged.
    ok = weak_rows("B4 weak Mandelbrot frames", 340.0, {3: (352.0, 12.0), 4: (355.0, 12.7)})
    judge_group(ok, "B4 weak Mandelbrot frames", "B4")
    assert by_impl(ok)["pybridge, 4 GPUs"]["verdict"] == "yes" and by_impl(ok)["pybridge, 4 GPUs"]["note"] == ""
    assert "verdict" not in by_impl(ok)["pybridge, 3 GPUs"]


def strong_rows(direct: dict[str, float], k: int, times: dict[str, float], floor_ms: float):
    group = "B3 strong matmul"
    rows = [{"benchmark": group, "impl": "Dask alone (same graph, no work), %d GPUs" % k, "workers": k, "median_us": floor_ms * 1e3}]
    for impl, t in times.items():
        rows.append({"benchmark": group, "impl": f"{impl}, {k} GPUs", "workers": k, "median_us": t * 1e3,
                     "speedup": direct[impl] / t, "direct_us": direct[impl] * 1e3, "dask_alone_us": floor_ms * 1e3})
    return rows


def test_strong_rows_weigh_the_no_work_floor_and_cublas_and_the_kernel_against_cublas():
    direct = {"pybridge kernel": 213.245, "pybridge Futhark": 771.435, "Dask + CuPy (cuBLAS), same graph": 162.907}
    rows = strong_rows(direct, 2, {"pybridge kernel": 117.152, "pybridge Futhark": 401.321,
                                   "Dask + CuPy (cuBLAS), same graph": 93.178}, 9.550)
    rows += strong_rows(direct, 4, {"pybridge kernel": 66.499, "pybridge Futhark": 208.186,
                                    "Dask + CuPy (cuBLAS), same graph": 54.165}, 11.286)
    rows += strong_rows(direct, 3, {"pybridge kernel": 120.0, "Dask + CuPy (cuBLAS), same graph": 66.934}, 11.515)
    judge_group(rows, "B3 strong matmul", "B3")
    got = by_impl(rows)
    k2 = got["pybridge kernel, 2 GPUs"]
    assert k2["verdict"] == "floor" and k2["vs cuBLAS"] == pytest.approx(117.152 / 93.178)
    assert k2["target"] == "speedup ≥ 1.9; ≤ 1.3× cuBLAS"
    assert "allows speedup ≤ 1.836 (rules the target out)" in k2["note"]
    assert "Dask + CuPy (cuBLAS), same graph: speedup 1.748 (rules the target out)" in k2["note"]
    assert got["pybridge kernel, 4 GPUs"]["verdict"] == "floor"
    assert got["pybridge Futhark, 2 GPUs"]["verdict"] == "yes" and got["pybridge Futhark, 4 GPUs"]["verdict"] == "yes"
    k3 = got["pybridge kernel, 3 GPUs"]  # no speedup target at 3; 1.79x cuBLAS's time: no, with no floor to appeal to
    assert k3["verdict"] == "no" and k3["target"] == "≤ 1.3× cuBLAS" and "1.79× the time of Dask + cuBLAS" in k3["note"]


def test_b0_floor_where_plain_dask_misses_the_fixed_target_itself():
    fit = {"fixed_ms": 11.16, "per_task_ms": 0.561, "worst_ratio": 1.13, "worst_tasks": 256,
           "plain_fixed_ms": 11.10, "plain_per_task_ms": 0.492}
    judge_b0(fit)
    assert fit["verdict"] == "no" and "worst 1.130× plain Dask, at 256 tasks" in fit["note"]
    assert "fixed: plain Dask's own 11.100 ms misses ≤ 10 ms; pybridge 1.005× that" in fit["note"]
    fit.update(worst_ratio=1.04)
    judge_b0(fit)
    assert fit["verdict"] == "floor" and fit["met"] is False
    fit.update(fixed_ms=12.5)  # more than 1.1x plain Dask's fixed cost
    judge_b0(fit)
    assert fit["verdict"] == "no"
    fit.update(fixed_ms=9.0, plain_fixed_ms=9.5)
    judge_b0(fit)
    assert fit["verdict"] == "yes" and fit["met"] is True and fit["note"] == ""


def test_size_rows_and_the_section_prints_each_verdict():
    r = {"benchmark": "size saxpy", "impl": "pybridge weak, 4294967296 elements over 4 GPUs", "workers": 4,
         "median_us": 30000.0, "configuration_s": 12.0, "target": "completes, each configuration under a minute"}
    judge_size(r)
    assert r["verdict"] == "yes"
    slow = dict(r, configuration_s=75.0)
    judge_size(slow)
    assert slow["verdict"] == "no"
    b2 = weak_rows("B2 weak Jacobi", 127.663, {4: (142.153, 10.980)})
    b1 = weak_rows("B1 weak saxpy×100", 96.464, {2: (109.494, 9.806)})
    judge_group(b2, "B2 weak Jacobi", "B2")
    judge_group(b1, "B1 weak saxpy×100", "B1")
    lines = scaling_report.target_lines([r, slow] + b1 + b2)
    text = "\n".join(lines)
    assert "| B1 weak saxpy×100: pybridge, 2 GPUs | efficiency ≥ 0.95 | 109.49 ms, efficiency 0.88, speedup 1.76 | floor |" in text
    assert "| B2 weak Jacobi: pybridge, 4 GPUs | efficiency ≥ 0.9 | 142.15 ms, efficiency 0.90, speedup 3.59 | **no** |" in text
    assert "| 30.0 ms per run, 75.0 s in all | **no** |" in text and "| 30.0 ms per run, 12.0 s in all | yes |" in text
    assert FLOOR_SLACK == 1.1


def test_a_run_over_fewer_gpus_judges_only_the_counts_it_measured(tmp_path):
    """Over 1..2 GPUs, B2's target (set at 4 GPUs) is not judged: its line gives the figures at 2
    and says why, instead of "not measured"; a group not run at all still says "not measured"."""
    b2 = weak_rows("B2 weak Jacobi", 127.663, {1: (135.0, 6.5), 2: (139.0, 9.7)})
    b1 = weak_rows("B1 weak saxpy×100", 96.464, {1: (100.0, 6.8), 2: (101.0, 9.8)})
    judge_group(b2, "B2 weak Jacobi", "B2")
    judge_group(b1, "B1 weak saxpy×100", "B1")
    assert all("verdict" not in r for r in b2)
    text = "\n".join(scaling_report.target_lines(b1 + b2))
    assert "| B1 weak saxpy×100: pybridge, 2 GPUs | efficiency ≥ 0.95 | 101.00 ms, efficiency 0.96, speedup 1.91 | yes |" in text
    assert ("| B2 | efficiency ≥ 0.90 at 4 GPUs | pybridge, 2 GPUs: 139.00 ms, efficiency 0.92, speedup 1.84 | – | "
            "not judged: no target at the counts measured (1, 2) |") in text
    assert "| B4 | efficiency ≥ 0.90 at 4 GPUs | not measured in this run | – |  |" in text
    section = tmp_path / "multi-gpu.md"
    scaling_report.write_section(str(section), b1 + b2, {"gpu": True, "counts": [1, 2], "label": "2x H100, 2026-11-27, commit abc1234"}, None)
    assert section.read_text().splitlines()[2] == "**Run:** 2x H100, 2026-11-27, commit abc1234."
