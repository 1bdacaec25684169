"""The build cache of user programs (issue 11, item 5), on the real compiler.

- The cache key covers every file a program imports, transitively (relative imports and lib/
  packages), so editing an imported module rebuilds.
- Loading one new program from several threads and several processes at once never fails: builds
  are serialised by a file lock and published by atomic renames (before, 15-20% of such loads failed
  with "file too short" / "invalid ELF header" from a half-written library).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pybridge.futhark as pf
from pybridge.futhark.build import build_program, futhark_compiler, source_files
from pybridge.ownership import TEMP_PREFIX, TRASH_PREFIX

pytestmark = [
    pytest.mark.slow,  # left out of the quick subset (-m 'not slow')
    pytest.mark.futhark,
    pytest.mark.skipif(futhark_compiler() is None, reason="the Futhark compiler is not installed (scripts/install-futhark.sh)"),
]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def program(tmp_path, monkeypatch):
    """main.fut importing a sibling module and a lib/ package, which imports its own neighbour."""
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    _write(tmp_path / "lib/github.com/someone/pkg/inner.fut", "def inner_k : i32 = 100\n")
    _write(tmp_path / "lib/github.com/someone/pkg/outer.fut", """\
        import "inner"
        def outer_k : i32 = inner_k + 10
    """)
    _write(tmp_path / "helpers/consts.fut", "def k : i32 = 1\n")
    return _write(tmp_path / "main.fut", """\
        -- import "commented_out" is not an import
        import "helpers/consts"
        import "lib/github.com/someone/pkg/outer"
        entry f (x: i32) : i32 = x + k + outer_k
    """)


def test_source_files_follow_imports_transitively(program):
    root = program.parent
    assert source_files(program) == [
        program.resolve(),
        (root / "helpers/consts.fut").resolve(),
        (root / "lib/github.com/someone/pkg/outer.fut").resolve(),
        (root / "lib/github.com/someone/pkg/inner.fut").resolve(),
    ]


def test_editing_an_imported_module_rebuilds(program):
    root = program.parent
    with pf.load(program, backend="c") as lib:
        assert lib.f(0) == 111
    _write(root / "helpers/consts.fut", "def k : i32 = 2\n")
    with pf.load(program, backend="c") as lib:
        assert lib.f(0) == 112
    _write(root / "lib/github.com/someone/pkg/inner.fut", "def inner_k : i32 = 300\n")  # two imports deep
    with pf.load(program, backend="c") as lib:
        assert lib.f(0) == 312
    # Unchanged sources: the cached library is reused, not rebuilt.
    so = build_program(program, backend="c")
    assert build_program(program, backend="c") == so and so.stat().st_mtime_ns == build_program(program, backend="c").stat().st_mtime_ns


_CHILD = """
import os, sys, time
from pathlib import Path
import pybridge.futhark as pf
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)
with pf.load(sys.argv[1], backend="c", mode=sys.argv[3]) as lib:
    print(int(lib.g(41)))
"""


def test_threads_and_processes_load_one_fresh_program_at_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYBRIDGE_CACHE", str(cache))
    src = _write(tmp_path / "fresh.fut", f"entry g (x: i32) : i32 = x + 1 -- {time.time_ns()}\n")
    go = tmp_path / "go"
    env = {**os.environ, "PYBRIDGE_CACHE": str(cache)}
    children = [
        # two children bind in cffi's API mode (a compiled extension, also generated at once)
        subprocess.Popen([sys.executable, "-c", _CHILD, str(src), str(go), mode], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for mode in ("abi", "abi", "api", "api")
    ]
    barrier = threading.Barrier(8)
    results: list[object] = [None] * 8

    def load(i: int) -> None:
        barrier.wait()
        try:
            with pf.load(src, backend="c") as lib:
                results[i] = int(lib.g(41))
        except Exception as e:  # reported below with the others
            results[i] = e

    threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
    go.touch()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [c.communicate(timeout=300) for c in children]
    assert results == [42] * 8
    for c, (out, err) in zip(children, outs):
        assert c.returncode == 0 and out.strip() == "42", err
    # One published build, no leftovers of the others.
    built = sorted(p.name for p in (cache / "programs" / "c").iterdir())
    assert len([n for n in built if not n.startswith(".")]) == 1, built
    assert not [n for n in built if n.startswith((TEMP_PREFIX, TRASH_PREFIX))], built
