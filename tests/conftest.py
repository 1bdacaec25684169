"""Shared test setup: markers that skip with a reason, and the libraries tests run against.

Futhark API tests run on the real compiler's output for the reference programs
(tests/reference/*.fut), which `make` builds into build/reference/<backend>/ for c and multicore
(`make futhark FUTHARK_BACKEND=cuda` for cuda, on a GPU machine).
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from pybridge.paths import find_build_file

ROOT = Path(__file__).resolve().parents[1]


def gpu_available() -> tuple[bool, str]:
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no NVIDIA driver (libcuda.so.1) on this machine"
    n = ctypes.c_int(0)
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
        return False, "the NVIDIA driver reports no usable GPU"
    return True, ""


GPU_OK, GPU_WHY = gpu_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if GPU_OK:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {GPU_WHY}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def library_sources(program: str, backends: tuple[str, ...] = ("c", "multicore", "cuda")) -> list:
    """pytest params (one per backend) for one reference program's library; the unbuilt ones are
    kept as skipped params so the report says what did not run and why (.ci/run fails on those)."""
    params = []
    for b in backends:
        rel = Path("reference") / b / f"lib{program}.so"
        marks = [pytest.mark.futhark]
        if b in ("cuda", "hip", "opencl"):
            marks.append(pytest.mark.gpu)
        found = find_build_file(rel)
        if found is None and (GPU_OK or b not in ("cuda", "hip", "opencl")):  # else: the gpu skip
            how = "make" if b in ("c", "multicore") else f"make futhark FUTHARK_BACKEND={b}"
            marks.append(pytest.mark.skip(reason=f"{rel} not built: run `{how}` (it obtains the Futhark compiler)"))
        params.append(pytest.param(found, id=b, marks=marks))
    return params


@pytest.fixture
def have_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    return cc
