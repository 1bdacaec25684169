"""`pybridge package --backends c,multicore,cuda` on a GPU machine: the wheel's cuda library and its
prebuilt API-mode extension load with no C compiler and no Futhark on PATH, `load()` picks cuda, every
entry point matches NumPy on every backend; with the GPU hidden (CUDA_VISIBLE_DEVICES=""), `load()`
falls back to multicore with one log line.

Futhark may be missing on the GPU machine: then the C that `futhark <backend> --library` wrote on the
development machine is compiled here (`scripts/gpu-package-check.sh generate` writes it into
build/package-gpu/, which the run carries; PYBRIDGE_PACKAGE_GENERATED names another folder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pybridge.futhark.build import futhark_compiler

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "package" / "shipdemo.fut"
GENERATED = Path(os.environ.get("PYBRIDGE_PACKAGE_GENERATED") or ROOT / "build" / "package-gpu")

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pybridge.package import build_package, cuda_toolkit

    ok, why = cuda_toolkit()
    assert ok, f"the CUDA toolkit is needed to package cuda: {why}"
    have_c = (GENERATED / "cuda" / "shipdemo.c").is_file()
    if futhark_compiler() is None and not have_c:
        pytest.fail(f"no Futhark compiler and no generated C in {GENERATED}: run scripts/gpu-package-check.sh generate first")
    tmp = tmp_path_factory.mktemp("shipcuda")
    wheel = build_package([PROGRAM], "shipdemo", "1.2.3", ["c", "multicore", "cuda"], tmp / "dist",
                          license="MIT", generated=GENERATED if have_c else None)
    assert wheel.name.endswith("-linux_x86_64.whl")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert list((site / "shipdemo" / "_futhark" / "cuda").glob("_pybridge_shipdemo_shipdemo_cuda*.so"))
    return site


def _pythonpath(site: Path) -> str:
    """The unpacked wheel, this checkout's pybridge, and whatever PYTHONPATH holds (on the GPU
    machine: cffi from .gpu-wheels, wheel and setuptools from the script)."""
    return os.pathsep.join([str(site), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


def _run_script(site: Path, expect: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    work = site.parent / "elsewhere"
    work.mkdir(exist_ok=True)
    shutil.copy2(ROOT / "tests" / "package" / "use_shipdemo.py", work / "use_shipdemo.py")
    bare_bin = work / "bin"  # PATH: the interpreter only (no cc, no futhark, no nvcc)
    bare_bin.mkdir(exist_ok=True)
    if not (bare_bin / "python").exists():
        (bare_bin / "python").symlink_to(sys.executable)
    env = {
        "PATH": str(bare_bin),
        "HOME": str(work),
        "PYTHONPATH": _pythonpath(site),
        "PYBRIDGE_CACHE": str(work / "cache"),
        "SHIPDEMO_EXPECT": expect,
        **{k: v for k, v in os.environ.items() if k.startswith(("LD_LIBRARY_PATH", "CUDA_HOME"))},
        **extra_env,
    }
    return subprocess.run([sys.executable, "use_shipdemo.py"], cwd=work, env=env, capture_output=True, text=True, timeout=600)


def test_cuda_wheel_runs_without_compilers(unpacked: Path) -> None:
    proc = _run_script(unpacked, "c,multicore,cuda;cuda", {})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    assert "RuntimeWarning" not in proc.stderr, proc.stderr


def test_without_gpu_falls_back_to_multicore_with_one_log_line(unpacked: Path) -> None:
    code = (
        "import logging, shipdemo\n"
        "logging.basicConfig(level=logging.INFO, format='LOG %(name)s %(message)s')\n"
        "lib = shipdemo.load()\n"
        "print(lib.backend, lib.mode)\n"
    )
    work = unpacked.parent
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": _pythonpath(unpacked), "HOME": str(work),
           "CUDA_VISIBLE_DEVICES": "", "PYBRIDGE_CACHE": str(work / "cache2")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["multicore", "api"], proc.stdout + proc.stderr
    logs = [ln for ln in proc.stderr.splitlines() if ln.startswith("LOG ")]
    assert len(logs) == 1 and "no usable GPU" in logs[0] and "; using multicore" in logs[0], proc.stderr
