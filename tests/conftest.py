"""Shared test setup: markers that skip with a reason, and the libraries tests run against.

Futhark API tests run on every available *source* of the reference programs (tests/reference/*.fut):
the conformance fixtures (C libraries implementing the documented API, built by `make fixtures`) and,
where the real compiler ran (`make futhark`), the real compiler's output. Same tests, both sources.
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
    """pytest params (fixture or real output, per backend) for one reference program; the missing
    ones are kept as skipped params so the report says what did not run and why."""
    params = []
    for kind in ("fixtures", "reference"):
        for b in backends:
            rel = Path(kind) / b / f"lib{program}.so"
            marks = []
            if kind == "reference":
                marks.append(pytest.mark.futhark)
            if b in ("cuda", "hip", "opencl"):
                marks.append(pytest.mark.gpu)
            found = find_build_file(rel)
            manifest = Path(__file__).parent / "reference" / f"{program}.{b}.json"
            if found is None and kind == "fixtures" and not manifest.exists():
                marks.append(pytest.mark.skip(reason=f"no {b} fixture for {program}: tests/reference has no "
                                                     f"{manifest.name} (fixtures follow manifests a real compiler wrote)"))
            elif found is None:
                how = "make fixtures" if kind == "fixtures" else f"make futhark FUTHARK_BACKEND={b} (needs the Futhark compiler)"
                marks.append(pytest.mark.skip(reason=f"{rel} not built: run `{how}`"))
            params.append(pytest.param(found, id=f"{kind}-{b}", marks=marks))
    return params


@pytest.fixture
def have_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    return cc
