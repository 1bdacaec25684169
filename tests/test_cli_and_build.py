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
    run it; never the other test programs or any test double), and the compiler make used."""
    if not (ROOT / "build" / "futhark" / "c" / "libsaxpy.so").exists():
        pytest.skip("build/futhark/c/libsaxpy.so not built: run `make` (it obtains the Futhark compiler)")
    pytest.importorskip("setuptools", minversion="64", reason="setup.py needs setuptools >= 64 (pip install '.[test]')")
    lib_dir = tmp_path / "site"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib_dir)],
                   cwd=ROOT, check=True, capture_output=True)
    shipped = lib_dir / "pybridge" / "_build"
    assert {p.name for p in shipped.iterdir()} <= {"cuda", "futhark", "reference", "futhark-compiler.txt"}
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
    assert "futhark/c/libtypes.so" in proc.stdout  # says where it looked


def test_test_programs_are_not_found_by_name():
    """In a checkout too: the reference programs are test data, loaded by path only."""
    with pytest.raises(FileNotFoundError, match="no built Futhark library named 'probe'"):
        pf.load("probe")
