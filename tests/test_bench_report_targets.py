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


def test_call_path_table_judges_each_row_against_the_same_run():
    """`pybridge bench report --call-path`: ratios to the bare call of the same rows, exchange rows
    against 2 µs with the driver's and the other library's part beside them, program summaries."""
    from pybridge.bench import exchange as ex
    from pybridge.bench import overhead as ov

    fut = "exchange: Futhark handle"
    rows = [
        {"benchmark": "futhark-call (cuda)", "impl": ov.FUT_DEFAULT, "size": None, "median_us": 1.8},
        {"benchmark": "futhark-call (cuda)", "impl": ov.FUT_CFFI_API, "size": None, "median_us": 1.6},
        {"benchmark": "futhark-array-call (cuda)", "impl": "pybridge lib.saxpy(a, hx, hy).free()", "size": 1, "median_us": 9.0},
        {"benchmark": "futhark-array-call (cuda)", "impl": "bare cffi entry + free", "size": 1, "median_us": 5.0},
        {"benchmark": fut, "impl": f"{ex.PYBRIDGE_SIDE}: h.__dlpack__() (capsule dropped)", "size": 1, "median_us": 3.0},
        {"benchmark": fut, "impl": ex.DRIVER_PAIR, "size": 1, "median_us": 1.5},
        {"benchmark": fut, "impl": f"{ex.PYBRIDGE_SIDE}: from_cuda(cupy).free()", "size": 1, "median_us": 1.9},
        {"benchmark": "exchange: pybridge.cuda DeviceArray", "impl": f"{ex.PYBRIDGE_SIDE}: cuda.as_device_array(torch)",
         "size": 1, "median_us": 4.0},
        {"benchmark": "futhark-programs summary (c)", "impl": "pybridge - bare cffi µs, calls < 1 ms: median", "size": 9,
         "median_us": None, "value": 0.8, "target": 1.0, "met": True},
    ]
    lines = report.call_path_lines(rows)
    assert "| 1.12x | ≤ 1.2x | yes |" in _line(lines, "cuda scalar entry")
    assert "| 1.80x | ≤ 1.2x | **no** |" in _line(lines, "cuda array entry")
    dl = _line(lines, "h.__dlpack__()")
    assert "cuEventRecord + cuStreamWaitEvent (bare cffi) 1.50 µs" in dl and "pybridge's own part only" in dl
    assert _line(lines, "from_cuda(cupy)").endswith("| yes |")
    assert _line(lines, "as_device_array(torch)").endswith("| **no** |")
    assert "| 0.800 |" in _line(lines, "real programs on c: pybridge − bare µs, calls < 1 ms, median")
    assert "not measured" in _line(lines, "real programs on cuda: pybridge / executable, worst")


def test_the_torch_references_ask_what_pybridge_asks(monkeypatch):
    """``bench exchange`` subtracts PyTorch's own part of ``from_cuda(torch)`` and
    ``cuda.as_device_array(torch)``: its reference must ask the tensor what interop.torch_plain
    asks (no more, or the subtraction would flatter pybridge), and its answers."""
    from pybridge import interop
    from pybridge.bench import exchange as ex

    class Asked:
        def __init__(self) -> None:
            self.log: list[str] = []
            self.shape = (2, 3)

        def __getattribute__(self, name):
            if not name.startswith("_") and name != "log":
                object.__getattribute__(self, "log").append(name)
            return object.__getattribute__(self, name)

        dtype, is_cuda, requires_grad, is_sparse = "f32", True, False, False

        def is_contiguous(self):
            return True

        def is_conj(self):
            return False

        def is_neg(self):
            return False

        def numel(self):
            return 6

        def data_ptr(self):
            return 64

    Asked.__module__, Asked.__name__ = "torch", "Tensor"
    monkeypatch.setattr(interop, "_torch_dtypes", {"f32": interop.np.dtype("float32")})
    mine, reference = Asked(), Asked()
    assert interop.torch_plain(mine) == (64, (2, 3), interop.np.dtype("float32"))
    ex.torch_reads(reference)
    assert sorted(mine.log) == sorted(reference.log) and len(mine.log) == 10
    from pybridge.futhark import callpath

    if callpath.compiled is not None:  # the compiled exchange's own reads (from_cuda, as_device_array)
        in_c = Asked()
        assert callpath.compiled.torch_plain(interop, in_c) == (64, (2, 3), interop.np.dtype("float32"))
        assert in_c.log == mine.log


def test_the_worst_program_names_its_pair_and_the_library_floor():
    """The cuda worst ratio names its (program, dataset) pair with the bare call's ratio of that
    pair: a miss that the library's own call makes too is a floor, not pybridge's."""
    from pybridge.bench import programs

    def pair(exe, bare, mine):
        return {"benchmark": "futhark-programs (cuda)", "impl": f"p{exe}", "size": 1, "exe_us": exe, "bare_us": bare,
                "median_us": mine, "added_us": mine - exe, "ratio": mine / exe, "equal": True, "over_bare_us": mine - bare,
                "over_bare_lo_us": mine - bare - 0.1, "over_bare_hi_us": mine - bare + 0.1, "block_pairs": 40}

    for bare, mine, verdict in ((16.0, 17.0, "floor"), (10.5, 17.0, "**no**"), (10.2, 11.0, "yes")):
        rows = [pair(100.0, 99.0, 99.5), pair(10.0, bare, mine)]
        summary = programs.summary_rows("cuda", rows)
        (worst,) = [r for r in summary if r["impl"] == "ratio, all pairs: worst"]
        assert worst["note"].startswith(f"p10.0: bare cffi / executable {bare / 10:.3f}")
        line = _line(report.call_path_lines(rows + summary), "real programs on cuda: pybridge / executable, worst")
        assert f"| {mine / 10:.3f} |" in line and line.split("|")[-2].strip().startswith(verdict), line


def test_the_ratio_targets_are_the_gpu_backends_and_the_over_bare_targets_cs():
    """A 0.1 µs call on c reads 10x over a 1 µs cffi call, which no call path can help: the ratio
    rows carry their targets on GPU backends only, pybridge - bare its targets on c only."""
    from pybridge.bench import programs

    rows = [{"benchmark": "futhark-programs", "impl": "p", "size": 1, "exe_us": 0.13, "bare_us": 1.8, "median_us": 1.3,
             "added_us": 1.17, "ratio": 10.0, "equal": True, "over_bare_us": -0.5, "over_bare_lo_us": -0.6,
             "over_bare_hi_us": -0.4, "block_pairs": 40}]
    for backend in ("c", "multicore", "cuda"):
        summary = {r["impl"]: r for r in programs.summary_rows(backend, rows)}
        ratio = [summary["ratio, all pairs: median"], summary["ratio, all pairs: worst"]]
        over = [summary["pybridge - bare cffi µs, calls < 1 ms: median"], summary["pybridge - bare cffi µs, calls < 1 ms: worst"]]
        if backend == "cuda":
            assert all(r["target"] is not None and r["met"] is False for r in ratio)
        else:
            assert all(r.get("target") is None and r.get("met") is None for r in ratio)
        if backend == "c":
            assert all(r["target"] is not None and r["met"] is True for r in over)
        else:
            assert all(r.get("target") is None for r in over)
