"""pybridge.bench.bandwidth and .matmul in their CPU form (the GPU form runs in scripts/gpu_kernels.sh):
the module interface `pybridge bench` dispatches to, the rows' keys and shares, the table."""

from __future__ import annotations

import argparse

import pytest

from pybridge.bench import bandwidth, gpu, matmul


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "gpu_unavailable", lambda: "test: no GPU wanted")


@pytest.mark.parametrize("module, sizes, metric, share", [
    (bandwidth, ["10", "12"], "GB/s", "% of copy"),
    (matmul, ["16", "33"], "TFLOP/s", "% of cuBLAS"),
])
def test_cpu_rows(no_gpu: None, capsys: pytest.CaptureFixture[str], module, sizes, metric, share) -> None:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    assert isinstance(module.HELP, str) and module.HELP
    rows = module.run(parser.parse_args(["--sizes", *sizes, "--repeat", "2"]))
    assert "no GPU: test: no GPU wanted" in capsys.readouterr().out
    assert rows, "no rows"
    for r in rows:
        assert {"benchmark", "impl", "size", "median_us", metric, share} <= set(r)
        assert r["median_us"] > 0 and r[metric] > 0
    if module is bandwidth:
        assert {r["benchmark"] for r in rows} == {f"bandwidth: {op}" for op in ("copy", "saxpy", "sum", "scan")}
        assert all(r["% of copy"] == pytest.approx(100.0) for r in rows if r["op"] == "copy")
    else:
        assert all(r["rel err"] < 1e-5 for r in rows)  # NumPy's float32 product against float64
    module.main(["--sizes", sizes[0], "--repeat", "1"])
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("no GPU") and "impl" in table[1] and set(table[2]) <= {"-", " "}


def test_shares_and_table() -> None:
    rows = [{"size": 1, "impl": "ref", "x": 2.0}, {"size": 1, "impl": "b", "x": 1.0}, {"size": 2, "impl": "b", "x": 5.0}]
    gpu.with_share(rows, "x", lambda r: r["impl"] == "ref", "%")
    assert [r.get("%") for r in rows] == [100.0, 50.0, None]
    text = gpu.format_rows(rows, ["impl", "size", "x", "%"])
    assert text.splitlines()[0].split() == ["impl", "size", "x", "%"] and text.splitlines()[-1].split()[-1] == "-"


def test_through_pybridge_bench(no_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    """`pybridge bench bandwidth|matmul --quick` dispatches to these modules."""
    from pybridge.bench import cli

    assert cli.main(["bandwidth", "--quick", "--sizes", "10"]) == 0
    assert cli.main(["matmul", "--quick", "--sizes", "8"]) == 0
    out = capsys.readouterr().out
    assert "% of copy" in out and "% of cuBLAS" in out


def test_target_marks() -> None:
    rows = [{"impl": "pybridge Kernel", "size": 2048, "%": 80.0}, {"impl": "pybridge launcher", "size": 2048, "%": 70.0},
            {"impl": "cuBLAS", "size": 2048, "%": 100.0}, {"impl": "pybridge Kernel", "size": 64, "%": 10.0}]
    gpu.mark_target(rows, "%", 75.0, lambda r: r["size"] >= 2048)
    assert [r.get("target_met") for r in rows] == [True, False, None, None]
    assert rows[0]["pct_of_reference"] == 80.0
