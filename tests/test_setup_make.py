"""`pip install .` with nothing built runs `make` itself (setup.py's ensure_make_outputs): make's
output reaches stderr line by line while it runs (what `pip install -v .` shows), a failure ends with
make's last lines under one message, and without a terminal the line meant for it is skipped.
Stand-in Makefiles: what is tested is setup.py's handling of make, not the real build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.skipif(shutil.which("make") is None, reason="make not on PATH"),
    pytest.mark.skipif(sys.platform != "linux", reason="setup.py's make step is Linux's"),
]


def _tree(dst: Path, makefile: str) -> Path:
    """The files setup.py reads, with ``makefile`` as the Makefile and nothing built."""
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dst / name)
    shutil.copytree(ROOT / "pybridge", dst / "pybridge", ignore=shutil.ignore_patterns("__pycache__", "_build"))
    (dst / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "install-futhark.sh", dst / "scripts" / "install-futhark.sh")
    (dst / "Makefile").write_text(makefile)
    return dst


def _build_py(tree: Path) -> subprocess.Popen[str]:
    pytest.importorskip("setuptools", minversion="64", reason="setup.py needs setuptools >= 64")
    env = {k: v for k, v in os.environ.items() if k not in ("PYBRIDGE_NO_MAKE", "PYBRIDGE_ALLOW_NO_LIBRARIES")}
    # A new session has no controlling terminal: the /dev/tty line must be skipped, not fail the build.
    return subprocess.Popen([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tree / "lib")], cwd=tree,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


WAITS_FOR_GO = """all:
\t@echo "[1/2] step one"
\t@n=0; while [ ! -e go ] && [ $$n -lt 600 ]; do sleep 0.05; n=$$((n + 1)); done
\t@echo "[2/2] step two"
\t@mkdir -p build/futhark/c && echo x > build/futhark/c/libfake.so
"""


def test_makes_lines_arrive_while_it_runs(tmp_path: Path) -> None:
    """make's second step waits for a file this test writes only after reading the first step's line
    from setup.py's stderr: were the output held until make ended, the line would never come."""
    tree = _tree(tmp_path, WAITS_FOR_GO)
    proc = _build_py(tree)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 25
    for line in proc.stderr:
        seen.append(line)
        if "[1/2] step one" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    else:
        pytest.fail("make's first line never came:\n" + "".join(seen))
    assert not (tree / "build").exists(), "make had finished before its first line arrived"
    (tree / "go").touch()
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, "".join(seen) + rest
    assert "[2/2] step two" in rest
    assert (tree / "lib" / "pybridge" / "_build" / "futhark" / "c" / "libfake.so").is_file()  # and shipped


FAILS = """all:
\t@for i in $$(seq 1 80); do echo "line $$i"; done
\t@echo "the error" >&2; false
"""


def test_a_failed_make_ends_with_its_last_lines_once_streamed(tmp_path: Path) -> None:
    tree = _tree(tmp_path, FAILS)
    proc = _build_py(tree)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    head, sep, message = err.partition("pybridge: `make` failed (exit 2)")
    assert sep, err[-3000:]
    assert all(f"line {i}\n" in head for i in range(1, 81)) and "the error" in head  # streamed, in full
    assert "line 60\n" not in message and "line 75\n" in message and "the error" in message  # then the end only
    assert "Traceback" not in err
