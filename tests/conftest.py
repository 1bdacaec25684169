"""Shared test setup: markers that skip with a reason, and the libraries tests run against.

Futhark API tests run on the real compiler's output for the reference programs
(tests/reference/*.fut), which `make` builds into build/reference/<backend>/ for c and multicore
(`make futhark FUTHARK_BACKEND=cuda` for cuda, on a GPU machine).

Which pybridge is tested: the README's test command (`.venv/bin/pytest -rs -n auto tests`) imports the
installed package, not ./pybridge (pytest's entry point does not put the checkout on sys.path; the
tests/ folder it adds holds no package). Then the test-only outputs of the checkout (build/reference)
are found after the installed package's own pybridge/_build through $PYBRIDGE_BUILD, the compiler
this checkout's make used through $FUTHARK where the installed package finds none of its own (it
never reads a checkout's files: issue 31), and child Pythons get PYTHONSAFEPATH=1 so that a `python -c` run in the checkout imports the installed package
too (Python >= 3.11). The header names the pybridge under test and warns when the source tree was
imported while a non-editable pybridge is installed (`python -m pytest` in the checkout does that;
the GPU scripts do it on purpose); with PYBRIDGE_TEST_INSTALLED=1 (.ci/run) such a run stops at once.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

import pybridge
from pybridge.distribution import NAME as DISTRIBUTION
from pybridge.paths import find_build_file

ROOT = Path(__file__).resolve().parents[1]
PYBRIDGE_DIR = Path(pybridge.__file__).resolve().parent
FROM_SOURCE_TREE = PYBRIDGE_DIR == (ROOT / "pybridge").resolve()


def _installed_distribution() -> tuple[bool, bool]:
    """(pybridge's distribution is installed, it is an editable one); the checkout's own
    pybridge_futhark.egg-info (setuptools leaves it there) is not an installation."""
    for dist in importlib.metadata.distributions(name=DISTRIBUTION):
        if Path(str(dist.locate_file(""))).resolve() == ROOT:
            continue
        direct = dist.read_text("direct_url.json")
        return True, bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
    return False, False


def pybridge_under_test_problem() -> tuple[str, bool] | None:
    """(why this run does not test the installed package, whether that stops it), or None."""
    installed, editable = _installed_distribution()
    if not FROM_SOURCE_TREE:
        return None
    if os.environ.get("PYBRIDGE_TEST_INSTALLED") == "1":
        return "PYBRIDGE_TEST_INSTALLED=1 but pybridge was imported from the source tree", True
    if installed and not editable:
        return "a pybridge is installed (not editable) but the tests imported the source tree instead", False
    return None


if not FROM_SOURCE_TREE:
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    if "PYBRIDGE_BUILD" not in os.environ and (ROOT / "build").is_dir():
        os.environ["PYBRIDGE_BUILD"] = os.pathsep.join([str(PYBRIDGE_DIR / "_build"), str(ROOT / "build")])
    from pybridge.toolchain import RECORDED_COMPILER, futhark_compiler

    if "FUTHARK" not in os.environ and futhark_compiler() is None:
        record = ROOT / "build" / RECORDED_COMPILER
        made = record.read_text().strip() if record.is_file() else ""
        for exe in (made, str(ROOT / ".tools" / "bin" / "futhark")):
            if os.path.isabs(exe) and os.access(exe, os.X_OK):
                os.environ["FUTHARK"] = exe
                break


# The tests never write into the user's cache (platformdirs' ~/.cache/pybridge, or a $PYBRIDGE_CACHE
# of theirs): every run gets a temporary folder, removed at the end, which child processes inherit.
# PYBRIDGE_TEST_CACHE names a folder to use instead, kept between runs (warm API-mode and CUDA
# builds: quicker reruns, the GPU scripts). A test that sets PYBRIDGE_CACHE itself keeps its own.
# Under pytest-xdist (-n) the workers share the controller's folder (they inherit its environment):
# a program is built once per run, not once per worker; the cache's locks keep them apart.
_SESSION_CACHE: str | None = None
if os.environ.get("PYBRIDGE_TEST_CACHE"):
    os.environ["PYBRIDGE_CACHE"] = os.environ["PYBRIDGE_TEST_CACHE"]
elif os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("PYBRIDGE_TEST_RUN_CACHE"):
    os.environ["PYBRIDGE_CACHE"] = os.environ["PYBRIDGE_TEST_RUN_CACHE"]
else:
    _SESSION_CACHE = os.environ["PYBRIDGE_CACHE"] = tempfile.mkdtemp(prefix="pybridge-test-cache-")
    os.environ["PYBRIDGE_TEST_RUN_CACHE"] = _SESSION_CACHE

# The C extensions the tests compile (API-mode bindings above all: a generated interface program's
# is 2.4 MB of cffi C) without debug info: GCC's -g does not change the code it generates, and it
# cost about an eighth of each compile. setuptools appends $CFLAGS to Python's own flags.
if "-g0" not in os.environ.get("CFLAGS", "").split():
    os.environ["CFLAGS"] = f"{os.environ.get('CFLAGS', '')} -g0".strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


_PROBLEM = pybridge_under_test_problem()
_HOW = ("Run the README's test command, `.venv/bin/pytest -rs -n auto tests` (pytest's entry point; `python -m pytest` "
        "puts the checkout first on sys.path).")


def pytest_configure(config: pytest.Config) -> None:
    if _PROBLEM and _PROBLEM[1]:
        pytest.exit(f"{_PROBLEM[0]} ({PYBRIDGE_DIR}). {_HOW}", returncode=4)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [f"pybridge under test: {PYBRIDGE_DIR} ({'source tree' if FROM_SOURCE_TREE else 'installed package'}); "
             f"cache: {os.environ['PYBRIDGE_CACHE']}{'' if _SESSION_CACHE is None else ' (this run only)'}"]
    if _PROBLEM:
        lines.append(f"WARNING: {_PROBLEM[0]}. {_HOW}")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _PROBLEM:
        terminalreporter.write_line(f"WARNING: {_PROBLEM[0]} ({PYBRIDGE_DIR}). {_HOW}", yellow=True)


@pytest.fixture(scope="session", autouse=True)
def _hang_reports_reach_the_terminal(request: pytest.FixtureRequest) -> None:
    """A time limit of pybridge.testing.watchdog (the lifecycle machine's, per sequence) writes every
    thread's stack, then exits: to pytest's copy of the terminal's stderr, which its faulthandler
    plugin keeps (the capture would take sys.stderr's, and the exit lose them)."""
    from _pytest import faulthandler as pytest_faulthandler

    from pybridge.testing import watchdog

    key = getattr(pytest_faulthandler, "fault_handler_stderr_fd_key", None)  # pytest >= 8
    fd = request.config.stash.get(key, None) if key is not None else None
    if fd is not None:
        watchdog.report_to(fd)


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


def _utf8_text(text: str) -> str:
    """``text`` with any lone surrogate written out (\\udcff): what UTF-8 can carry."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    """A report whose captured output or failure text holds a lone surrogate (a file name that is
    not UTF-8, surrogate-escaped: tests/test_file_names.py makes one) is written with the surrogate
    escaped: pytest-xdist's workers send reports as UTF-8, and one such report ended the whole run
    with an INTERNALERROR (execnet's "strings must be utf-8 encodable") instead of reporting it."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _utf8_text(content)) for title, content in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8_text(text) != text:
            report.longrepr = _utf8_text(text)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the test modules, their imports, the items: most of the heap) is moved
    out of the GC's reach (gc.freeze) once its garbage is collected: a full collection then scans
    only what the tests made since. Tests call gc.collect() thousands of times (the lifecycle
    machine once per sequence, the DLPack and Ctrl-C tests per example): each scanned the whole
    heap, 0.2 s and more in a worker, minutes of CI in all. Garbage the tests make is still found:
    it is made after this point."""
    gc.collect()
    gc.freeze()


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


def built_library(program: str, backend: str = "c") -> Path:
    """build/reference/<backend>/lib<program>.so for a test that needs one backend's library;
    the test is skipped, saying how to build it, where it is missing."""
    found = find_build_file(Path("reference") / backend / f"lib{program}.so")
    if found is None:
        pytest.skip(f"reference/{backend}/lib{program}.so not built: run `make`")
    return found


def json_paths(node: Any, path: tuple = ()) -> list[tuple]:
    """The path (keys and indexes) of every value inside a JSON tree, depth first; the edit
    tests change the value at one of them."""
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return []
    return [p for k, v in items for p in [path + (k,), *json_paths(v, path + (k,))]]


@pytest.fixture
def have_cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    return cc


def dask_and_futhark_or_skip() -> tuple[Any, Any]:
    """(dask.array, distributed) for the pybridge.dask tests, called at module level: the module is
    skipped, saying what to install, without dask or without the Futhark compiler (which builds
    the libraries the workers load)."""
    da = pytest.importorskip("dask.array", reason="dask is not installed: pip install 'dask[array]' distributed")
    distributed = pytest.importorskip("distributed", reason="distributed is not installed: pip install 'dask[array]' distributed")
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("the Futhark compiler is not installed (scripts/install-futhark.sh or FUTHARK=...)", allow_module_level=True)
    return da, distributed


def library_or_source(program: str, backend: str = "c") -> str:
    """futhark/<program>.fut as `make` built it for ``backend``, else the source (compiled on first
    use by pybridge, cached): the pybridge.dask tests load either."""
    built = find_build_file(f"futhark/{backend}/lib{program}.so")
    return str(built) if built is not None else str(Path(__file__).resolve().parents[1] / "futhark" / f"{program}.fut")
