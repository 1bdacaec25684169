"""Which programs pybridge starts and which libraries it loads (issue 31 item 2): only what the
user configured ($FUTHARK, $CC, $NVCC, PATH's absolute folders), pybridge's own install (the
checkout it is imported from, the per-user install), never a file of the current directory or of
a checkout it was not imported from. Every trap below writes a canary file when it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pybridge
from pybridge.futhark.build import futhark_compiler

ROOT = Path(__file__).resolve().parents[1]
PYBRIDGE_DIR = Path(pybridge.__file__).resolve().parent
REAL_FUTHARK = futhark_compiler()
needs_futhark = pytest.mark.skipif(REAL_FUTHARK is None, reason="no Futhark compiler: run `make` (it obtains one) or set FUTHARK=")
# Builds, child processes and a hypothesis property: about 19 s of CPU time, out of the quick subset.
pytestmark = pytest.mark.slow

# A shared library whose constructor writes the canary: loading it is running it.
TRAP_LIBRARY_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void pybridge_trap(void) {
    const char *p = getenv("PYBRIDGE_TRAP_CANARY");
    FILE *f = p ? fopen(p, "a") : NULL;
    if (f) { fputs("a library of the current directory was loaded\n", f); fclose(f); }
}
"""


def trap_program(path: Path, canary: Path) -> Path:
    """An executable that records that it ran (its own path) in ``canary`` and fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "ran $0 $*" >> "{canary}"\nexit 97\n')
    path.chmod(0o755)
    return path


def logging_wrapper(path: Path, label: str, log: Path, real: str) -> Path:
    """A Futhark compiler that the user configured: logs ``label`` and runs the real one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{label} $*" >> "{log}"\nexec "{real}" "$@"\n')
    path.chmod(0o755)
    return path


def installed_copy(site: Path, record: str | None = None) -> Path:
    """The package under test as a wheel installs it (no Makefile beside it: not a checkout),
    without libraries; ``record``: a compiler record as an old wheel shipped one, naming a path of
    the machine that built it."""
    shutil.copytree(PYBRIDGE_DIR, site / "pybridge", ignore=shutil.ignore_patterns("__pycache__", "_build"))
    if record is not None:
        (site / "pybridge" / "_build").mkdir()
        (site / "pybridge" / "_build" / "futhark-compiler.txt").write_text(record + "\n")
    return site


def user_env(tmp: Path, site: Path, **extra: str) -> dict[str, str]:
    """A user's shell: no futhark on PATH, no $FUTHARK, no $PYBRIDGE_BUILD, a fresh home."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "home"), "XDG_DATA_HOME": str(tmp / "data"), "LANG": "C.UTF-8",
           "PYBRIDGE_CACHE": str(tmp / "cache"), "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1",
           "PYBRIDGE_TRAP_CANARY": str(tmp / "canary")}
    env.update(extra)
    return env


# Run as a user would in someone else's checkout; the first line keeps the current directory off
# sys.path on 3.10 too (PYTHONSAFEPATH does it from 3.11).
CHILD_PRELUDE = "import sys\nsys.path[:] = [p for p in sys.path if p]\nimport pybridge.futhark as pf, pybridge.paths\n" \
                "assert pybridge.paths.source_checkout() is None\n"


@needs_futhark
def test_a_record_in_the_current_directory_never_chooses_the_compiler(tmp_path: Path) -> None:
    """Issue 31 item 2 as reported: with no futhark on PATH and no $FUTHARK, inside someone else's
    checkout whose build/futhark-compiler.txt names /proc/self/cwd/evil.sh, pf.load("prog.fut") of
    an installed pybridge (whose wheel named a compiler of the machine that built it) ran evil.sh,
    even though `pybridge install-futhark` had installed a compiler for this user."""
    site = installed_copy(tmp_path / "site", record="/build-machine/pybridge/.tools/bin/futhark")
    stranger = tmp_path / "stranger"
    (stranger / "build").mkdir(parents=True)
    (stranger / "build" / "futhark-compiler.txt").write_text("/proc/self/cwd/evil.sh\n")
    trap_program(stranger / "evil.sh", tmp_path / "canary")
    (stranger / "prog.fut").write_text("entry f (x: i32) : i32 = x + 1\n")
    log = tmp_path / "compiler.log"
    logging_wrapper(tmp_path / "data" / "pybridge" / "tools" / "bin" / "futhark", "per-user", log, str(REAL_FUTHARK))
    code = CHILD_PRELUDE + "with pf.load('prog.fut', backend='c', mode='abi') as lib:\n    print(lib.f(1))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=stranger, env=user_env(tmp_path, site),
                          capture_output=True, text=True, timeout=240)
    assert not (tmp_path / "canary").exists(), (tmp_path / "canary").read_text()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2"]
    assert [line.split()[:3] for line in log.read_text().splitlines()] == [["per-user", "--version"], ["per-user", "c", "--library"]]


@pytest.mark.futhark
def test_libraries_of_the_current_directory_are_never_loaded_by_name(tmp_path: Path) -> None:
    """pf.load("saxpy") in someone else's checkout loaded (ran) its build/futhark/c/libsaxpy.so."""
    manifest = pybridge.paths.find_build_file("futhark/c/saxpy.json")
    if manifest is None:
        pytest.skip("build/futhark/c/saxpy.json not built: run `make`")
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the trap library")
    site = installed_copy(tmp_path / "site")
    trap_dir = tmp_path / "stranger" / "build" / "futhark" / "c"
    trap_dir.mkdir(parents=True)
    (tmp_path / "trap.c").write_text(TRAP_LIBRARY_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(trap_dir / "libsaxpy.so"), str(tmp_path / "trap.c")], check=True)
    shutil.copy(manifest, trap_dir / "saxpy.json")
    code = CHILD_PRELUDE + ("try:\n    pf.load('saxpy', backend='c')\nexcept FileNotFoundError as e:\n    print('not found:', e)\n"
                            "print('build dirs:', pybridge.paths.build_dirs())\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "stranger", env=user_env(tmp_path, site),
                          capture_output=True, text=True, timeout=120)
    assert not (tmp_path / "canary").exists(), (tmp_path / "canary").read_text()
    assert proc.returncode == 0, proc.stderr
    assert "not found: no built Futhark library named 'saxpy'" in proc.stdout
    assert "build dirs: []" in proc.stdout


# ---------------------------------------------------------------- the property, drawn


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, example, given, settings, strategies as st  # noqa: E402

import pybridge.futhark as pf  # noqa: E402
from pybridge import paths, toolchain  # noqa: E402
from pybridge.cli import main as cli_main  # noqa: E402
from pybridge.futhark.build import BuildError  # noqa: E402

REAL_CC = shutil.which("cc")
# Programs a trap stands in for: every program pybridge, or a program it starts, runs by name
# (the sysconfig name is the C compiler cffi's build runs).
TRAPPED = ("futhark", "cc", "gcc", "nvcc", "bash", "make", "as", "ld", "nvidia-smi", "evil.sh",
           str(__import__("sysconfig").get_config_var("CC") or "gcc").split()[0])
# A checkout full of traps: programs by name, in folders a relative PATH entry names, the files
# an older pybridge read (the compiler record, libraries of build/, .tools/, scripts/), a package
# named pybridge that a `python -c` child would import.
TRAP_FILES = ("bin/futhark", "bin/cc", "bin/bash", ".tools/bin/futhark", "scripts/futhark", "scripts/install-futhark.sh")
# Each example runs `pybridge info`, `pybridge install-futhark` and pf.load by name, and one of these:
STARTS = ("load", "build", "child check")


@st.composite
def settings_drawn(draw: st.DrawFn) -> dict:
    return {
        "FUTHARK": draw(st.sampled_from([None, "configured", "missing", "a name"])),
        "futhark on PATH": draw(st.booleans()),
        "relative PATH entries": draw(st.lists(st.sampled_from(["", ".", "./", "bin", ".tools/bin", "scripts"]), max_size=3)),
        "relative first": draw(st.booleans()),
        "imported from": draw(st.sampled_from(["installed package", "checkout"])),
        "checkout record": draw(st.booleans()),
        "checkout .tools": draw(st.booleans()),
        "per-user install": draw(st.booleans()),
        "CC": draw(st.sampled_from([None, "configured", "a name"])),
        "starts": draw(st.sampled_from(STARTS)),
        "install --force": draw(st.booleans()),
        "mode": draw(st.sampled_from(["abi", "abi", "auto"])),  # auto: API mode, cffi runs the C compiler
    }


def _expected(s: dict) -> str | None:
    """The label of the compiler the documented order picks (toolchain's docstring), or None."""
    if s["FUTHARK"] == "configured":
        return "FUTHARK"
    if s["FUTHARK"] == "missing":
        return None
    if s["futhark on PATH"]:
        return "PATH"
    if s["FUTHARK"] == "a name":  # $FUTHARK=futhark, not on PATH: an explicit choice is never replaced
        return None
    if s["imported from"] == "checkout" and s["checkout record"]:
        return "recorded"
    if s["imported from"] == "checkout" and s["checkout .tools"]:
        return "checkout-tools"
    return "per-user" if s["per-user install"] else None


@pytest.fixture(scope="module")
def trap_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if REAL_CC is None:
        pytest.skip("no C compiler (cc) to build the trap library")
    d = tmp_path_factory.mktemp("trap-library")
    (d / "trap.c").write_text(TRAP_LIBRARY_C)
    subprocess.run([REAL_CC, "-shared", "-fPIC", "-o", str(d / "libtrap.so"), str(d / "trap.c")], check=True)
    return d / "libtrap.so"


@pytest.fixture(scope="module")
def probe_library() -> Path:
    from conftest import built_library

    return built_library("probe")  # found before any example moves the build folders away


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")  # API-mode modules compiled once for all examples


def _plant(cwd: Path, canary: Path, trap_library: Path) -> None:
    for name in TRAPPED:
        trap_program(cwd / name, canary)
    for rel in TRAP_FILES:
        trap_program(cwd / rel, canary)
    (cwd / "build").mkdir()
    (cwd / "build" / "futhark-compiler.txt").write_text("/proc/self/cwd/evil.sh\n")
    for backend in ("c", "multicore"):
        lib_dir = cwd / "build" / "futhark" / backend
        lib_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(trap_library, lib_dir / "libsaxpy.so")
        manifest = paths.find_build_file(f"futhark/{backend}/saxpy.json")
        if manifest is not None:
            shutil.copy(manifest, lib_dir / "saxpy.json")
    (cwd / "pybridge").mkdir()
    (cwd / "pybridge" / "__init__.py").write_text(f"open({str(canary)!r}, 'a').write('imported ./pybridge\\n')\n")
    (cwd / "auditwheel.py").write_text(f"open({str(canary)!r}, 'a').write('imported ./auditwheel.py\\n')\n")


_counter = iter(range(1 << 30))


@needs_futhark
@pytest.mark.futhark
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(s=settings_drawn())
@example(s={"FUTHARK": None, "futhark on PATH": False, "relative PATH entries": ["", "bin"], "relative first": True,
            "imported from": "installed package", "checkout record": False, "checkout .tools": False,
            "per-user install": True, "CC": None, "starts": "load", "install --force": False, "mode": "auto"})
@example(s={"FUTHARK": "a name", "futhark on PATH": False, "relative PATH entries": ["."], "relative first": True,
            "imported from": "checkout", "checkout record": True, "checkout .tools": True,
            "per-user install": True, "CC": "a name", "starts": "child check", "install --force": True, "mode": "abi"})
def test_only_configured_programs_run_whatever_the_current_directory_holds(
        s: dict, trap_library: Path, probe_library: Path, shared_cache: Path, tmp_path_factory: pytest.TempPathFactory,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The second property of issue 31: draw where compilers are configured (and where they are not)
    and run every path that starts a program from a current directory full of traps. No trap ever
    runs, and the compiler that runs is the one the documented lookup order picks."""
    tmp = tmp_path_factory.mktemp("what-runs")
    cwd, canary, log = tmp / "stranger", tmp / "canary", tmp / "ran.log"
    _plant(cwd, canary, trap_library)
    compilers = {
        "FUTHARK": tmp / "env" / "futhark",
        "PATH": tmp / "pathbin" / "futhark",
        "recorded": tmp / "checkout" / "made" / "futhark",
        "checkout-tools": tmp / "checkout" / ".tools" / "bin" / "futhark",
        "per-user": tmp / "data" / "pybridge" / "tools" / "bin" / "futhark",
    }
    wanted = {"FUTHARK": s["FUTHARK"] == "configured", "PATH": s["futhark on PATH"], "recorded": s["checkout record"],
              "checkout-tools": s["checkout .tools"], "per-user": s["per-user install"]}
    for label, path in compilers.items():
        if wanted[label]:
            logging_wrapper(path, label, log, str(REAL_FUTHARK))
    (tmp / "checkout" / "build").mkdir(parents=True)
    if s["checkout record"]:
        (tmp / "checkout" / "build" / "futhark-compiler.txt").write_text(f"{compilers['recorded']}\n")
    logging_wrapper(tmp / "cc" / "cc", "cc", log, str(REAL_CC))
    stub = tmp / "stub" / "install-futhark.sh"  # the network step, stubbed: logs and names a compiler
    stub.parent.mkdir()
    stub.write_text(f'echo "installer $*" >> "{log}"\necho "{compilers["per-user"]}"\n')
    absolute = [str(tmp / "pathbin")] if s["futhark on PATH"] else []
    absolute += ["/usr/bin", "/bin"]
    relative = s["relative PATH entries"]
    path = ":".join(relative + absolute if s["relative first"] else absolute + relative)
    expected = _expected(s)
    event(f"{s['starts']}: {expected or 'no compiler'}")
    src = cwd / "prog.fut"
    src.write_text(f"-- example {next(_counter)}\nentry f (x: i32) : i32 = x + 1\n")  # new text: a real build

    with pytest.MonkeyPatch.context() as mp:
        for var in ("FUTHARK", "CC", "NVCC", "PYBRIDGE_BUILD", "PYBRIDGE_TOOLS", "CUDA_HOME"):
            mp.delenv(var, raising=False)
        mp.setenv("PATH", path)
        mp.setenv("HOME", str(tmp / "home"))
        mp.setenv("XDG_DATA_HOME", str(tmp / "data"))
        mp.setenv("PYBRIDGE_CACHE", str(shared_cache))
        mp.setenv("PYBRIDGE_TRAP_CANARY", str(canary))
        if s["FUTHARK"] is not None:
            mp.setenv("FUTHARK", {"configured": str(compilers["FUTHARK"]), "missing": str(tmp / "nowhere" / "futhark"),
                                  "a name": "futhark"}[s["FUTHARK"]])
        if s["CC"] is not None:
            mp.setenv("CC", str(tmp / "cc" / "cc") if s["CC"] == "configured" else "cc")
        checkout = tmp / "checkout" if s["imported from"] == "checkout" else None
        mp.setattr(paths, "source_checkout", lambda: checkout)
        mp.setattr(toolchain, "install_script", lambda: stub)
        mp.chdir(cwd)

        assert toolchain.futhark_compiler() == (str(compilers[expected]) if expected else None), s
        capsys.readouterr()
        starts = s["starts"]
        if starts == "load":
            if expected is None:
                with pytest.raises(BuildError, match="the Futhark compiler was not found"):
                    pf.load("prog.fut")
            else:
                with pf.load("prog.fut", mode=s["mode"]) as lib:
                    assert lib.f(1) == 2
        elif starts == "build":
            assert cli_main(["build", "prog.fut"]) == (1 if expected is None else 0)
        else:  # a child Python: this pybridge, never ./pybridge
            ok, why = pf.check_in_subprocess(str(probe_library), backend="c")
            assert ok, why
        capsys.readouterr()

        assert cli_main(["info"]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("futhark compiler"))
        assert (f"({compilers[expected]}; from " in row) if expected else ("not found" in row), row

        force = s["install --force"]
        should_install = force or (expected is None and s["FUTHARK"] is None)
        rc = cli_main(["install-futhark", *(["--force"] if force else [])])
        out = capsys.readouterr().out.split()
        if should_install:
            assert rc == 0 and out == [str(compilers["per-user"])]
        elif expected is None:  # $FUTHARK names nothing there: an install would not be used
            assert rc == 1 and out == []
        else:
            assert rc == 0 and out == [str(compilers[expected])]

        try:
            lib = pf.load("saxpy", backend="c")
        except FileNotFoundError:
            pass
        else:
            assert not lib.path.resolve().is_relative_to(cwd.resolve()), lib.path
            lib.close()

    assert not canary.exists(), canary.read_text()
    ran = log.read_text().splitlines() if log.exists() else []
    compiles = [line.split()[0] for line in ran if " --library " in f" {line} "]
    if starts in ("load", "build"):
        assert compiles == ([expected] if expected else []), ran
        if expected and s["CC"] == "configured":
            assert any(line.startswith("cc ") for line in ran), ran
    assert all(line.split()[0] in (expected, "cc", "installer") for line in ran), (expected, ran)
    assert [line for line in ran if line.startswith("installer")] == (["installer --force"] if should_install else []), ran
    shutil.rmtree(tmp, ignore_errors=True)


def test_python_children_never_import_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -c` and `python -m` put the current directory first on sys.path: a pybridge/ or an
    auditwheel.py of someone else's checkout ran in the children that `pybridge package
    --manylinux`, pf.check_in_subprocess and the lifecycle runner start."""
    pytest.importorskip("auditwheel")
    from pybridge.errors import PybridgeError
    from pybridge.package import manylinux_tag
    from pybridge.testing.lifecycle_run import _run_child

    canary = tmp_path / "canary"
    stranger = tmp_path / "stranger"
    (stranger / "pybridge").mkdir(parents=True)
    for trap in (stranger / "pybridge" / "__init__.py", stranger / "auditwheel.py"):
        trap.write_text(f"open({str(canary)!r}, 'a').write('imported {trap.relative_to(stranger)}\\n')\nraise SystemExit(97)\n")
    wheel = tmp_path / "empty-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.chdir(stranger)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)  # conftest sets it for children; users do not
    with pytest.raises(PybridgeError, match="File is not a zip file"):
        manylinux_tag(wheel)  # auditwheel's own refusal of an empty file, not the trap's exit
    outcome = _run_child([str(tmp_path / "no-such-library.so")], "c", 1, 1, timeout=120)
    assert "failure" in outcome and "no-such-library.so" in outcome["failure"]["output"], outcome  # this pybridge's error
    ok, why = pf.check_in_subprocess("no-such-library.so")  # fails in the child's pf.load, having imported this pybridge
    assert not ok and "FileNotFoundError" in why
    assert not canary.exists(), canary.read_text()
