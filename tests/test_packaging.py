"""Set-up and packaging as a user meets them: the Makefile with any python3 (the distribution's
included), hardening that a failed build cannot skip, no compiler download for targets that do not
need it, where the installed package finds the compiler, and what the sdist and the wheel carry."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import pybridge
from pybridge import paths, toolchain
from pybridge.distribution import NAME as DISTRIBUTION
from pybridge.futhark.build import futhark_compiler
from pybridge.futhark.csource import MARK

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
# The distribution's interpreter where there is one (Debian's does not import `types` at start-up,
# so a script folder holding types.py shadows the standard library there), else this one.
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="make not on PATH")


def _copy_tree(dst: Path, *, with_build: bool = False) -> Path:
    """The files `make` and setup.py read, copied to ``dst`` (a checkout of the sources)."""
    dst.mkdir(parents=True)
    for name in ("Makefile", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dst / name)
    for folder in ("scripts", "futhark", "kernels_cu", "pybridge"):
        shutil.copytree(ROOT / folder, dst / folder, ignore=shutil.ignore_patterns("__pycache__", "_build", "*.egg-info"))
    (dst / "tests" / "reference").mkdir(parents=True)
    if with_build:
        shutil.copytree(ROOT / "build" / "futhark" / "c", dst / "build" / "futhark" / "c",
                        ignore=shutil.ignore_patterns(".tmp-*"))
    return dst


def _clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """A user's environment: no futhark on PATH, a fresh HOME and data folder."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "home"), "XDG_DATA_HOME": str(tmp / "data"), "LANG": "C.UTF-8"}
    env.update(extra)
    return env


# ---------------------------------------------------------------- the Makefile's Python scripts


def _makefile_python_lines() -> list[str]:
    return [line for line in (ROOT / "Makefile").read_text().splitlines() if re.search(r"\$\(PYTHON[A-Z_]*\)\s+\S*\.py", line)]


def test_every_script_make_runs_goes_through_the_isolated_interpreter() -> None:
    lines = _makefile_python_lines()
    assert len(lines) >= 2, lines  # csource.py and launcher_sidecar.py
    assert all("$(PYTHON_SCRIPT)" in line or "$$(PYTHON_SCRIPT)" in line for line in lines), lines
    assert re.search(r"^PYTHON_SCRIPT\s*:?=\s*\$\(PYTHON\) -I$", (ROOT / "Makefile").read_text(), re.M)


def _interpreters() -> list[str]:
    """The distribution's python3 and any python3.10-3.13 on PATH (each once)."""
    found = {os.path.realpath(SYSTEM_PYTHON): SYSTEM_PYTHON}
    for v in ("3.10", "3.11", "3.12", "3.13"):
        exe = shutil.which(f"python{v}")
        if exe and subprocess.run([exe, "-I", "-c", "pass"], capture_output=True).returncode == 0:  # not a dead shim
            found.setdefault(os.path.realpath(exe), exe)
    return list(found.values())


@pytest.mark.parametrize("python", _interpreters())
def test_make_scripts_run_isolated_and_stdlib_only(tmp_path: Path, python: str) -> None:
    """-I (as make runs them) and -S (no site-packages: the standard library only, and no module
    imported at start-up that would hide a shadowed one)."""
    c = tmp_path / "prog.c"
    c.write_text("static void host_alloc(struct futhark_context* ctx,\n    *mem_out = malloc(size);\n")
    csource = str(ROOT / "pybridge/futhark/csource.py")
    r = subprocess.run([python, "-I", "-S", csource, str(c)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"csource: {c}:" in r.stdout
    # The control: run as a plain script, its folder's types.py shadows the standard library's.
    unsafe = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}  # conftest sets it for children
    r = subprocess.run([python, "-S", csource, str(c)], cwd=tmp_path, capture_output=True, text=True, env=unsafe)
    assert r.returncode != 0 and "pybridge/futhark/types.py" in r.stderr
    out = tmp_path / "saxpy.launchers.json"
    r = subprocess.run([python, "-I", "-S", str(ROOT / "pybridge/cuda/launcher_sidecar.py"),
                        str(ROOT / "kernels_cu/saxpy.cu"), str(out)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["source"] == "saxpy.cu"


# ---------------------------------------------------------------- hardening cannot be skipped


@needs_make
@pytest.mark.futhark
@pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler (make obtains it)")
def test_a_failed_hardening_leaves_no_c_and_the_next_make_hardens(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path / "src")
    target = "build/futhark/c/libsaxpy.so"
    env = _clean_env(tmp_path)
    first = subprocess.run([MAKE, f"FUTHARK={futhark_compiler()}", "PYTHON=false", target], cwd=tree,
                           capture_output=True, text=True, env=env)
    assert first.returncode != 0
    c_dir = tree / "build" / "futhark" / "c"
    assert not (c_dir / "saxpy.c").exists() and not (c_dir / "libsaxpy.so").exists(), sorted(os.listdir(c_dir))
    second = subprocess.run([MAKE, f"FUTHARK={futhark_compiler()}", f"PYTHON={SYSTEM_PYTHON}", target], cwd=tree,
                            capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (c_dir / "saxpy.c").read_text().startswith(MARK)
    assert (c_dir / "libsaxpy.so").is_file()
    assert not [p for p in c_dir.iterdir() if p.name.startswith(".tmp-")]


@needs_make
@pytest.mark.futhark
@pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler (make obtains it)")
def test_carried_c_is_rebuilt_without_a_compiler(tmp_path: Path) -> None:
    """FUTHARK=/bin/true (the GPU machine: nvcc, no Futhark) re-hardens and compiles the C carried
    in build/, and refuses a program that has none."""
    tree = _copy_tree(tmp_path / "src")
    env = _clean_env(tmp_path)
    target = "build/futhark/c/libsaxpy.so"
    r = subprocess.run([MAKE, f"FUTHARK={futhark_compiler()}", f"PYTHON={SYSTEM_PYTHON}", target], cwd=tree,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    c_dir = tree / "build" / "futhark" / "c"
    (c_dir / "libsaxpy.so").unlink()
    os.utime(tree / "futhark" / "saxpy.fut")  # newer than the carried C: the generation step runs
    r = subprocess.run([MAKE, "FUTHARK=/bin/true", f"PYTHON={SYSTEM_PYTHON}", target], cwd=tree,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (c_dir / "saxpy.c").read_text().startswith(MARK) and (c_dir / "libsaxpy.so").is_file()
    r = subprocess.run([MAKE, "FUTHARK=/bin/true", f"PYTHON={SYSTEM_PYTHON}", "build/futhark/c/libdot.so"], cwd=tree,
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "wrote no dot.c and there is no carried" in r.stderr
    assert not (c_dir / "dot.c").exists()


def test_the_built_libraries_were_made_from_hardened_c() -> None:
    # what make built (build/package-gpu holds raw C that `pybridge package` hardens when it builds)
    built = sorted(c for d in ("futhark", "reference") for c in (ROOT / "build" / d).glob("*/*.c"))
    if not built:
        pytest.skip("nothing built: run `make`")
    cpu = [c for c in built if c.parent.name in ("c", "multicore")]
    assert cpu and all(c.read_text()[: len(MARK)] == MARK for c in cpu), [str(c) for c in cpu if not c.read_text().startswith(MARK)]


# ---------------------------------------------------------------- no download unless needed


def _stub_installer(tree: Path) -> Path:
    """scripts/install-futhark.sh replaced by one that records each download attempt and fails."""
    marker = tree / "download-attempted"
    script = tree / "scripts" / "install-futhark.sh"
    script.write_text(f'#!/bin/sh\ncase " $* " in *" --find-only "*) exit 1;; esac\necho "$*" >> {marker}\n'
                      'echo "install-futhark: stub: no compiler" >&2\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return marker


@needs_make
def test_targets_that_need_no_compiler_never_download_it(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path / "src")
    marker = _stub_installer(tree)
    env = _clean_env(tmp_path)
    for goal in (["clean"], ["info"], ["cuda-if-available", "NVCC=/nonexistent/nvcc"]):
        r = subprocess.run([MAKE, *goal], cwd=tree, capture_output=True, text=True, env=env)
        assert r.returncode == 0, (goal, r.stdout + r.stderr)
        assert not marker.exists(), goal
    r = subprocess.run([MAKE, "NVCC=/nonexistent/nvcc"], cwd=tree, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert marker.read_text().count("--log") == 1  # looked up once, for the Futhark part
    assert "skipped futhark/*.fut" in r.stdout and "stub: no compiler" in r.stderr
    r = subprocess.run([MAKE, "futhark"], cwd=tree, capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "no Futhark compiler" in r.stderr


def test_install_script_find_only_never_downloads(tmp_path: Path) -> None:
    """Run as the installed package ships it (no checkout around it), from a folder holding a
    `futhark` that a relative PATH entry would find: never looked at, never run."""
    script = tmp_path / "pybridge" / "_scripts" / "install-futhark.sh"
    script.parent.mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "install-futhark.sh", script)
    here = tmp_path / "stranger"
    canary = tmp_path / "canary"
    trap = here / "futhark"
    trap.parent.mkdir()
    trap.write_text(f"#!/bin/sh\necho ran > {canary}\necho 'Futhark 0.25.99'\n")
    trap.chmod(0o755)
    env = _clean_env(tmp_path, PATH=".::/usr/bin:/bin")
    r = subprocess.run(["bash", str(script), "--find-only"], capture_output=True, text=True, env=env, cwd=here, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert "no Futhark compiler found" in r.stderr and not canary.exists()
    assert not (tmp_path / "data").exists()  # the per-user folder, where it would install: untouched
    user = _fake_futhark(tmp_path / "data" / "pybridge" / "tools" / "bin" / "futhark")  # install-futhark's folder
    r = subprocess.run(["bash", str(script), "--find-only"], capture_output=True, text=True, env=env, cwd=here, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == [str(user)] and not canary.exists()
    for bad, message in ((["--bogus"], "unknown argument '--bogus'"), (["--find-only", "--force"], "exclude each other")):
        r = subprocess.run(["bash", str(script), *bad], capture_output=True, text=True, env=env)
        assert r.returncode == 2 and message in r.stderr


# ---------------------------------------------------------------- where the compiler is found


def _fake_futhark(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Futhark 0.25.32'\n")
    path.chmod(0o755)
    return path


def test_compiler_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$FUTHARK, PATH, the checkout pybridge is imported from (its make record, its .tools), the
    per-user install; builds, `pybridge info` and `pybridge install-futhark` share it."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in ("FUTHARK", "PYBRIDGE_TOOLS", "PYBRIDGE_BUILD"):
        monkeypatch.delenv(var, raising=False)
    checkout = tmp_path / "checkout"
    (checkout / "build").mkdir(parents=True)
    monkeypatch.setattr(paths, "source_checkout", lambda: checkout)
    assert toolchain.find_futhark() is None
    assert "no `futhark` on PATH, in this checkout or in " in toolchain.not_found_reason()
    user = _fake_futhark(tmp_path / "data" / "pybridge" / "tools" / "bin" / "futhark")
    assert toolchain.user_tools_dir() == tmp_path / "data" / "pybridge" / "tools"
    assert toolchain.find_futhark() == toolchain.FoundCompiler(str(user), "the per-user install of `pybridge install-futhark`")
    monkeypatch.setenv("PYBRIDGE_TOOLS", str(tmp_path / "elsewhere"))  # moves the install folder
    assert toolchain.find_futhark() is None
    monkeypatch.delenv("PYBRIDGE_TOOLS")
    local = _fake_futhark(checkout / ".tools" / "bin" / "futhark")
    assert toolchain.futhark_compiler() == str(local)
    assert toolchain.find_futhark().origin == f"this checkout's .tools ({checkout})"  # type: ignore[union-attr]
    recorded = _fake_futhark(tmp_path / "made" / "futhark")
    (checkout / "build" / toolchain.RECORDED_COMPILER).write_text(f"{recorded}\n")
    assert toolchain.futhark_compiler() == str(recorded)
    (checkout / "build" / toolchain.RECORDED_COMPILER).write_text("made/futhark\n")  # relative: not make's record
    assert toolchain.futhark_compiler() == str(local)
    monkeypatch.setattr(paths, "source_checkout", lambda: None)  # an installed package: no checkout
    assert toolchain.futhark_compiler() == str(user)
    on_path = _fake_futhark(tmp_path / "empty" / "futhark")
    assert toolchain.find_futhark() == toolchain.FoundCompiler(str(on_path), "PATH")
    monkeypatch.setenv("PATH", f".:{tmp_path / 'nothing'}")  # a relative entry never counts
    monkeypatch.chdir(tmp_path / "empty")
    assert toolchain.futhark_compiler() == str(user)
    explicit = _fake_futhark(tmp_path / "mine" / "futhark")
    monkeypatch.setenv("FUTHARK", str(explicit))
    assert toolchain.find_futhark() == toolchain.FoundCompiler(str(explicit), "$FUTHARK")
    monkeypatch.setenv("FUTHARK", str(tmp_path / "missing"))
    assert toolchain.futhark_compiler() is None  # an explicit choice that does not exist is not replaced
    assert "$FUTHARK names" in toolchain.not_found_reason()


def test_a_recorded_compiler_that_is_gone_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for var in ("FUTHARK", "PYBRIDGE_TOOLS"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / toolchain.RECORDED_COMPILER).write_text(str(tmp_path / "deleted-checkout" / "futhark"))
    monkeypatch.setattr(paths, "source_checkout", lambda: tmp_path)
    user = _fake_futhark(tmp_path / "data" / "pybridge" / "tools" / "bin" / "futhark")
    assert toolchain.futhark_compiler() == str(user)


def _stub_install_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """install-futhark.sh replaced by one that logs how it was called (no download in a test)."""
    log = tmp_path / "installer.log"
    stub = tmp_path / "stub" / "install-futhark.sh"
    stub.parent.mkdir()
    stub.write_text(f'echo "$* PYBRIDGE_TOOLS=$PYBRIDGE_TOOLS" >> "{log}"\necho "$PYBRIDGE_TOOLS/bin/futhark"\n')
    monkeypatch.setattr(toolchain, "install_script", lambda: stub)
    return log


def test_install_futhark_names_the_compiler_found_and_downloads_only_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: `pybridge install-futhark` said no compiler was found and downloaded 24 MB while
    `pybridge info` used one. Now it names the one the shared lookup finds, and installs into the
    per-user folder only with --force, or when there is none."""
    from pybridge.cli import main

    log = _stub_install_script(tmp_path, monkeypatch)
    on_path = _fake_futhark(tmp_path / "bin" / "futhark")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    for var in ("FUTHARK", "PYBRIDGE_TOOLS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(paths, "source_checkout", lambda: None)  # as installed
    per_user = tmp_path / "data" / "pybridge" / "tools"
    assert main(["install-futhark"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(on_path)] and not log.exists()
    assert f"a Futhark compiler is already found: {on_path} (Futhark 0.25.32), from PATH; nothing downloaded" in err
    assert main(["info"]) == 0
    assert f"Futhark 0.25.32 ({on_path}; from PATH)" in capsys.readouterr().out
    assert main(["install-futhark", "--force"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(per_user / "bin" / "futhark")]
    assert log.read_text() == f"--force PYBRIDGE_TOOLS={per_user}\n"
    assert per_user.is_dir()
    assert f"builds use {on_path} (from PATH), which comes first" in err
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # none found: it installs without being asked
    assert main(["install-futhark"]) == 0
    assert log.read_text().count("--force") == 2
    monkeypatch.setenv("FUTHARK", str(tmp_path / "typo"))  # an install would not be used: say so instead
    assert main(["install-futhark"]) == 1
    assert "$FUTHARK names" in capsys.readouterr().err and log.read_text().count("--force") == 2


def test_installed_layout_is_not_mistaken_for_a_checkout() -> None:
    checkout = paths.source_checkout()
    here = Path(pybridge.__file__).resolve().parent
    if checkout is None:  # the installed package: site-packages/build is never a build directory
        assert here.parent / "build" not in paths.build_dirs() or os.environ.get("PYBRIDGE_BUILD")
        assert (here / "_scripts" / "install-futhark.sh").is_file()
    else:
        assert (checkout / "Makefile").is_file() and checkout == here.parent


# ---------------------------------------------------------------- metadata, sdist, wheel


def _setuptools_at_least_64() -> None:
    pytest.importorskip("setuptools", minversion="64", reason="setup.py needs setuptools >= 64 (pip install 'setuptools>=64')")


def test_one_version_source_and_the_metadata_users_expect() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', text, re.M) and not re.search(r'^version\s*=\s*"', text, re.M)
    assert 'version = { attr = "pybridge.__version__" }' in text
    assert "version=" not in (ROOT / "setup.py").read_text()
    assert re.search(r'^license = \{ text = "MIT" \}', text, re.M) and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "pybridge contributors" in (ROOT / "LICENSE").read_text()
    testing = re.search(r"^testing = \[(.*)\]", text, re.M)
    assert testing and re.findall(r'"([a-z-]+)', testing.group(1)) == ["hypothesis"]
    try:
        import importlib.metadata as md

        installed = md.version(DISTRIBUTION)
    except Exception:  # noqa: BLE001 - not installed (the source tree): nothing more to compare
        return
    if paths.source_checkout() is None:
        assert installed == pybridge.__version__


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tarfile.TarFile:
    _setuptools_at_least_64()
    out = tmp_path_factory.mktemp("sdist")
    r = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (archive,) = out.glob("pybridge[-_]futhark-*.tar.gz")  # setuptools >= 69.3 writes the normalised name
    return tarfile.open(archive)


def test_the_sdist_has_what_make_needs_and_no_build_output(sdist: tarfile.TarFile) -> None:
    names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in ("Makefile", "setup.py", "pyproject.toml", "LICENSE", "README.md", "futhark/saxpy.fut",
                   "kernels_cu/saxpy.cu", "kernels_cu/common.cuh", "scripts/install-futhark.sh", "tests/conftest.py",
                   "tests/reference/probe.fut", "docs/DESIGN.md", "pybridge/futhark/csource.py"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("build/", ".tools/")) or n.endswith(".so") or "__pycache__" in n]


def _wheel(tree: Path, out: Path, env: dict[str, str]) -> zipfile.ZipFile:
    r = subprocess.run([sys.executable, "setup.py", "-q", "bdist_wheel", "--dist-dir", str(out)], cwd=tree,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("*.whl")
    return zipfile.ZipFile(whl)


def _build_machine_paths(wheel: zipfile.ZipFile, *paths: str) -> list[tuple[str, str]]:
    """(member, path) for every member of ``wheel`` whose bytes name one of ``paths``."""
    return [(name, p) for name in wheel.namelist() for p in paths if p.encode() in wheel.read(name)]


@pytest.mark.futhark
def test_the_wheel_is_platform_tagged_and_never_carries_a_stale_library(tmp_path: Path) -> None:
    _setuptools_at_least_64()
    if not (ROOT / "build" / "futhark" / "c" / "libdot.so").is_file():
        pytest.skip("build/futhark/c not built: run `make`")
    tree = _copy_tree(tmp_path / "src", with_build=True)
    (tree / "build" / toolchain.RECORDED_COMPILER).write_text(f"{tree}/.tools/bin/futhark\n")  # as make writes it
    nvcc = shutil.which("nvcc")
    if nvcc and MAKE:  # one CUDA output too: nvcc's -lineinfo would write the build folder into it
        r = subprocess.run([MAKE, "build/cuda/saxpy.ptx", f"NVCC={nvcc}"], cwd=tree, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    env = {**os.environ, "PYBRIDGE_NO_MAKE": "1"}
    first = _wheel(tree, tmp_path / "w1", env)
    # Issue 33: no path of the machine that built it (the compiler record named one).
    assert not [n for n in first.namelist() if n.endswith(toolchain.RECORDED_COMPILER)]
    compiler = futhark_compiler()
    machine = {str(tree), str(ROOT), os.path.realpath(ROOT), *([str(Path(compiler).parent)] if compiler else [])}
    assert _build_machine_paths(first, *machine) == []
    assert ("pybridge/_build/cuda/saxpy.ptx" in first.namelist()) == bool(nvcc and MAKE)
    # The compiled call path built (CI requires it): one abi3 wheel for CPython 3.10 and later.
    assert Path(first.filename).name.endswith("-cp310-abi3-linux_x86_64.whl"), first.filename
    assert "pybridge/futhark/_callpath.abi3.so" in first.namelist()
    assert "pybridge/_build/futhark/c/libdot.so" in first.namelist()
    assert "pybridge/_scripts/install-futhark.sh" in first.namelist()
    assert not [n for n in first.namelist() if ".data/purelib/" in n]  # installed into platlib
    (tree / "build" / "futhark" / "c" / "libdot.so").unlink()  # as `rm -rf build/futhark` does to all
    second = _wheel(tree, tmp_path / "w2", env)
    assert "pybridge/_build/futhark/c/libdot.so" not in second.namelist()
    assert "pybridge/_build/futhark/c/libsaxpy.so" in second.namelist()


def test_no_libraries_fails_the_install_visibly_unless_allowed(tmp_path: Path) -> None:
    _setuptools_at_least_64()
    tree = _copy_tree(tmp_path / "src")
    env = {**os.environ, "PYBRIDGE_NO_MAKE": "1"}
    lib = tmp_path / "lib"
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=tree,
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    assert "no compiled libraries" in r.stderr and "Run `make` first" in r.stderr
    env["PYBRIDGE_ALLOW_NO_LIBRARIES"] = "1"
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=tree,
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "WARNING: pybridge: no compiled libraries" in r.stderr
    info = subprocess.run([sys.executable, "-m", "pybridge", "info"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(lib), "PYTHONSAFEPATH": "1",
                               "PYBRIDGE_BUILD": str(tmp_path / "none")})
    assert info.returncode == 0, info.stderr
    assert str(lib) in info.stdout
    assert re.search(r"^built +nothing: no compiled libraries here", info.stdout, re.M), info.stdout


def test_per_user_folder_without_platformdirs_follows_its_linux_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --no-deps install (the GPU scripts) may lack platformdirs: the lookup must not raise."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = tmp_path / "data" / "pybridge" / "tools"
    assert toolchain.user_tools_dir() == expected  # platformdirs' answer
    monkeypatch.setitem(sys.modules, "platformdirs", None)  # import platformdirs now raises ImportError
    assert toolchain.user_tools_dir() == expected
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert toolchain.user_tools_dir() == tmp_path / "home" / ".local" / "share" / "pybridge" / "tools"
