"""The command line (info, demo, build) and building a user's own .fut program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pybridge.futhark as pf
from pybridge.cli import main
from pybridge.futhark.build import BuildError, build_program, futhark_compiler

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]


def test_info_lists_tools_and_builds(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for row in ("futhark compiler", "nvcc", "GPU", "PyCUDA", "CuPy", "build dirs"):
        assert row in out


def test_demo_runs_what_is_built_and_checks_it(capsys):
    rc = main(["demo", "--size", "4096"])
    out = capsys.readouterr().out
    assert "example" in out and "saxpy" in out
    assert "MISMATCH" not in out and "ERROR" not in out.replace("Error:", "")
    assert rc == 0


def test_demo_as_a_module_and_console_script():
    proc = subprocess.run([sys.executable, "-m", "pybridge", "demo", "saxpy", "--size", "100"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "saxpy" in proc.stdout


def test_build_without_compiler_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FUTHARK", str(tmp_path / "no-such-futhark"))
    monkeypatch.setenv("PATH", str(tmp_path))
    src = tmp_path / "p.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    with pytest.raises(BuildError, match="futhark-lang.org/releases"):
        build_program(src)
    assert main(["build", str(src)]) == 1


def test_build_rejects_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="source"):
        build_program(tmp_path / "missing.fut")
    src = tmp_path / "p.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    with pytest.raises(ValueError, match="backend"):
        build_program(src, backend="fortran")


@pytest.mark.futhark
@pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not on PATH (set FUTHARK=...)")
@pytest.mark.parametrize("backend", ["c", "multicore"])
def test_user_program_builds_and_loads_in_one_call(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "mine.fut"
    src.write_text("entry scale [n] (k: f64) (xs: [n]f64) : [n]f64 = map (*k) xs\n")
    with pf.load(src, backend=backend) as lib:
        assert lib.backend == backend
        np.testing.assert_array_equal(lib.scale(2.0, np.arange(4.0)).numpy(), [0, 2, 4, 6])
    # Unchanged source: served from the cache, not rebuilt.
    so = build_program(src, backend=backend)
    mtime = so.stat().st_mtime_ns
    assert build_program(src, backend=backend).stat().st_mtime_ns == mtime


def test_installed_package_ships_programs_but_no_test_data(tmp_path):
    """What `pip install .` puts in the package (setup.py's build_py): futhark/ programs and CUDA
    kernels that `make` built, of build/reference/ only the probe program (pybridge demo and bench
    run it; never the other test programs or any test double), and never the record of the compiler
    make used (a path of the machine that built it, issue 31)."""
    if not (ROOT / "build" / "futhark" / "c" / "libsaxpy.so").exists():
        pytest.skip("build/futhark/c/libsaxpy.so not built: run `make` (it obtains the Futhark compiler)")
    pytest.importorskip("setuptools", minversion="64", reason="setup.py needs setuptools >= 64 (pip install 'setuptools>=64')")
    lib_dir = tmp_path / "site"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib_dir)],
                   cwd=ROOT, check=True, capture_output=True)
    shipped = lib_dir / "pybridge" / "_build"
    assert {p.name for p in shipped.iterdir()} <= {"cuda", "futhark", "reference"}
    shipped_tests = {p.name for p in shipped.glob("reference/*/*")}
    assert shipped_tests and all(n.split(".")[0] in ("probe", "libprobe") for n in shipped_tests), shipped_tests
    assert {p.name for p in (shipped / "futhark").iterdir()} >= {"c", "multicore"}
    assert (shipped / "futhark" / "c" / "libsaxpy.so").is_file()
    code = (
        "import pybridge.futhark as pf, pybridge.paths as p\n"
        "assert [d.name for d in p.build_dirs()] == ['_build'], p.build_dirs()\n"
        "with pf.load('saxpy', backend='c') as lib:\n"
        "    assert lib.saxpy(2.0, [1.0], [1.0]).numpy().tolist() == [3.0]\n"
        "try:\n"
        "    pf.load('types')\n"
        "except FileNotFoundError as e:\n"
        "    print('NOT FOUND:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYBRIDGE_BUILD"}
    env["PYTHONPATH"] = str(lib_dir)
    env["PYTHONSAFEPATH"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "NOT FOUND: no built Futhark library named 'types'" in proc.stdout
    assert f"(looked in {shipped.resolve()})" in proc.stdout  # says where it looked
    assert "Built programs (c, multicore): " in proc.stdout and "saxpy" in proc.stdout  # what there is
    assert "pf.load('types.fut') compiles it" in proc.stdout and "make" not in proc.stdout  # nothing for a checkout


def test_test_programs_are_not_found_by_name():
    """In a checkout too: the reference programs are test data, loaded by path only."""
    with pytest.raises(FileNotFoundError, match="no built Futhark library named 'probe'"):
        pf.load("probe")


# ---------------------------------------------------------------- issue 21: the command line on a user's machine


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    import pybridge  # the child imports the same pybridge as this test, from any directory

    where = str(Path(pybridge.__file__).resolve().parents[1])
    path = os.pathsep.join([where, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pybridge", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=timeout)


def _one_line_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_version_from_the_metadata_or_the_package():
    import pybridge
    from pybridge.cli import version

    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"pybridge {version()}"
    assert version() and version()[0].isdigit()
    assert pybridge.__version__ == version() or version() != ""  # the metadata wins where installed


@pytest.mark.parametrize("args, code, needles", [
    (["demo", "saxpyy"], 2, ["unknown example 'saxpyy'", "did you mean 'saxpy'", "valid: saxpy, "]),
    (["demo", "--size", "-3"], 2, ["--size", "positive integer"]),
    (["demo", "--size", "abc"], 2, ["--size", "'abc'"]),
    (["demo", "--size", "0"], 2, ["--size"]),
    (["build", "{src}", "-o", "/dev/null"], 2, ["-o/--output", "/dev/null", "not a directory"]),
    (["build", "{cu}", "-o", "/dev/null"], 2, ["-o/--output", "not a directory"]),
    (["build", "{src}", "--backend", "fortran"], 2, ["--backend", "'fortran'", "expected one of c, multicore, cuda"]),
    (["build", "{src}", "--arch", "sm_90"], 2, ["--arch: applies to .cu sources only"]),
    (["build", "{missing_fut}"], 2, ["source", "missing.fut does not exist", "expected a Futhark program (.fut)"]),
    (["build", "{txt}"], 2, ["source", "expected a Futhark program (.fut) or CUDA C (.cu)"]),
    (["build", "{dir}"], 2, ["source"]),
    (["build"], 2, ["source"]),
    (["cache", "bogus"], 2, ["choose from 'list', 'clear', 'path'"]),
    (["cache", "clear", "--older-than", "soon"], 2, ["--older-than", "30s, 12h, 7d"]),
    (["nonsense"], 2, ["invalid choice: 'nonsense'", "'info', 'demo', 'build', 'cache', 'package', 'stubs', 'install-futhark', 'bench'"]),
    (["bench", "nope"], 2, ["invalid choice: 'nope'", "'overhead'"]),
    (["bench", "report", "{missing}"], 2, ["pybridge bench report", "missing.json"]),
    (["bench", "report", "{txt}"], 2, ["pybridge bench report"]),
    (["info", "--frobnicate"], 2, ["unrecognized arguments: --frobnicate"]),
])
def test_every_subcommand_refuses_bad_input_in_one_line(tmp_path, args, code, needles):
    (tmp_path / "ok.fut").write_text("entry f (x: i32) : i32 = x\n")
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) {}\n")
    (tmp_path / "notes.txt").write_text("not a program\n")
    subst = {"{src}": str(tmp_path / "ok.fut"), "{cu}": str(tmp_path / "k.cu"), "{missing}": str(tmp_path / "missing.json"),
             "{missing_fut}": str(tmp_path / "missing.fut"),
             "{txt}": str(tmp_path / "notes.txt"), "{dir}": str(tmp_path)}
    proc = _cli(*[subst.get(a, a) for a in args], cwd=tmp_path, env={"PYBRIDGE_CACHE": str(tmp_path / "cache")})
    _one_line_error(proc, code, *needles)


def test_build_with_a_broken_compiler_is_one_line(tmp_path):
    src = tmp_path / "ok.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    proc = _cli("build", str(src), env={"FUTHARK": str(tmp_path / "no-such-futhark"), "PATH": "/usr/bin:/bin",
                                        "PYBRIDGE_CACHE": str(tmp_path / "cache")})
    _one_line_error(proc, 1, "Futhark compiler was not found")


def test_build_program_refuses_a_file_as_output_dir(tmp_path):
    src = tmp_path / "p.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    with pytest.raises(ValueError, match="out_dir: .* not a directory"):
        build_program(src, out_dir=src)


def test_demo_refuses_a_size_that_cannot_fit_in_memory():
    from pybridge.demo.run import available_memory, memory_estimate
    from pybridge.demo import examples

    avail = available_memory()
    assert avail is not None and avail > 0
    # the estimate grows with the size and covers at least the inputs and the result
    small, big = memory_estimate(examples.get("saxpy"), 1 << 20), memory_estimate(examples.get("saxpy"), 1 << 30)
    assert small >= 12 * (1 << 20) and big == pytest.approx(small * 1024, rel=0.01)
    proc = _cli("demo", "saxpy", "--size", "1000000000", timeout=60)
    line = _one_line_error(proc, 2, "--size 1000000000 needs about", "GiB for saxpy", "of memory available",
                           "the largest size that fits is about")
    assert proc.stdout == ""  # refused up front: nothing ran
    fits = int(line.rsplit("about", 1)[1])
    assert 0 < fits < 1_000_000_000


def test_demo_with_nothing_built_exits_nonzero_and_says_why(monkeypatch, capsys):
    import pybridge.paths

    monkeypatch.setattr(pybridge.paths, "build_dirs", lambda: [])
    monkeypatch.setattr("pybridge.backends.gpu_present", lambda: (False, "no GPU in this test"))
    rc = main(["demo", "saxpy", "sum"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "not built" in out
    lines = [line for line in err.splitlines() if line.startswith("pybridge demo")]
    assert lines == ["pybridge demo: nothing ran: no Futhark library is built (run `make`) and there is no GPU (no GPU in this test)"]


def test_demo_prints_each_row_as_it_finishes():
    """Rows come out while later examples still run: read stdout line by line from a child."""
    if not (ROOT / "build" / "futhark").is_dir():
        pytest.skip("build/futhark not built: run `make`")
    import time as _time

    proc = subprocess.Popen([sys.executable, "-m", "pybridge", "demo", "saxpy", "mandelbrot", "--size", "4000000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen: list[tuple[float, str]] = []
    for line in proc.stdout:
        seen.append((_time.monotonic(), line))
    proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    t_saxpy = next(t for t, line in seen if line.startswith("saxpy"))
    t_mandel = next(t for t, line in seen if line.startswith("mandelbrot"))
    assert t_mandel - t_saxpy > 0.2, "the saxpy row came out only with the last one"


def test_cli_logs_what_it_compiles_and_quiet_hides_it(tmp_path):
    if futhark_compiler() is None:
        pytest.skip("Futhark compiler not found (set FUTHARK=)")
    src = tmp_path / "logged.fut"
    src.write_text("entry f (x: i32) : i32 = x + 2\n")
    env = {"PYBRIDGE_CACHE": str(tmp_path / "cache")}
    proc = _cli("build", str(src), "--backend", "c", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"pybridge: compiling {src} for the c backend with {futhark_compiler()} (Futhark " in proc.stderr
    assert "pybridge: compiled logged.fut in " in proc.stderr
    again = _cli("-v", "build", str(src), "--backend", "c", env=env)  # a cache hit: DEBUG only
    assert "compiling" not in again.stderr and "cached in" in again.stderr
    quiet = _cli("-q", "build", str(src), "--backend", "c", env=env)
    assert "pybridge:" not in quiet.stderr and quiet.stdout.strip().endswith("liblogged.so")


def test_library_code_logs_under_pybridge_and_prints_nothing(tmp_path, monkeypatch, caplog, capfd):
    if futhark_compiler() is None:
        pytest.skip("Futhark compiler not found (set FUTHARK=)")
    import logging

    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "quiet.fut"
    src.write_text("entry f (x: i32) : i32 = x + 3\n")
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger="pybridge"):
        with pf.load(src) as lib:
            assert lib.f(1) == 4
        with pf.load(src) as lib:
            assert lib.f(2) == 5
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    msgs = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("pybridge")]
    assert ("pybridge.futhark.build", "INFO") in {(n, lv) for n, lv, m in msgs if m.startswith("compiling")}
    assert any(n == "pybridge.futhark.binding" and lv == "INFO" and "API-mode bindings compiled" in m for n, lv, m in msgs)
    assert any(n == "pybridge.futhark.build" and lv == "DEBUG" and "cached in" in m for n, lv, m in msgs)
