"""The build cache (pybridge.cache, `pybridge cache`): its folder, listing, clearing, and a size
bound that holds under concurrent builds and never removes an entry in use."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pybridge
import pybridge.futhark as pf
from pybridge import cache
from pybridge.cli import main
from pybridge.futhark.build import build_program, futhark_compiler
from pybridge.paths import cache_dir

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

needs_futhark = [
    pytest.mark.futhark,
    pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains one) or set FUTHARK="),
]
WHERE = str(Path(pybridge.__file__).resolve().parents[1])


def _program(folder: Path, name: str, k: int) -> Path:
    src = folder / f"{name}.fut"
    src.write_text(f"entry f (x: i64) : i64 = x + {k}\n")
    return src


def _child_env(cache: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([WHERE, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "PYBRIDGE_CACHE": str(cache), **extra}


def test_cache_dir_is_per_user_and_honours_the_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("PYBRIDGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert cache_dir() == tmp_path / "xdg" / "pybridge"
    import platformdirs

    assert cache_dir() == Path(platformdirs.user_cache_dir("pybridge", appauthor=False))
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" and cache_dir().is_dir()


@pytest.mark.parametrize("text, expected", [("0", 0), ("123", 123), ("2K", 2048), ("1.5M", 1572864),
                                            ("2G", 2 << 30), ("2GiB", 2 << 30), ("10mb", 10 << 20)])
def test_sizes(text, expected):
    assert cache.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "-1", "lots", "1X", "1e9", "nan"])
def test_a_bad_bound_is_refused_in_one_line(bad, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("PYBRIDGE_CACHE_MAX_BYTES", bad)
    if not bad.strip():
        assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES  # unset in effect
        return
    with pytest.raises(cache.CacheSettingError, match="PYBRIDGE_CACHE_MAX_BYTES"):
        cache.max_bytes()
    assert main(["cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PYBRIDGE_CACHE_MAX_BYTES" in err[0] and "Traceback" not in err[0]


def test_list_and_clear_an_empty_or_foreign_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path))
    assert main(["cache"]) == 0  # empty: pybridge's from now on (tagged)
    assert "0 entries, 0 B" in capsys.readouterr().out
    (tmp_path / "programs" / "c").mkdir(parents=True)
    (tmp_path / "programs" / "stray-file").write_text("x")  # not an entry: ignored, never a crash
    (tmp_path / "ffi").mkdir()
    (tmp_path / "ffi" / "notes.txt").write_text("x")
    assert main(["cache"]) == 0
    assert "0 entries, 0 B" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert (tmp_path / "programs" / "stray-file").exists() and (tmp_path / "ffi" / "notes.txt").exists()
    # A folder of the user's, not pybridge's: refused in one line, nothing touched.
    (tmp_path / "CACHEDIR.TAG").unlink()
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PYBRIDGE_CACHE=" in err[0] and "not pybridge's cache" in err[0]
    assert (tmp_path / "programs" / "stray-file").exists() and (tmp_path / "ffi" / "notes.txt").exists()


class TestWithPrograms:
    pytestmark = needs_futhark

    def test_list_clear_older_than_and_in_use(self, tmp_path, monkeypatch, capsys):
        monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
        old, new, used = (_program(tmp_path, n, k) for k, n in enumerate(["old", "new", "used"]))
        # old and new built by another process (which exits: not in use)
        code = f"import pybridge.futhark as pf\nfor p in {[str(old), str(new)]!r}: pf.load(p, backend='c').close()\n"
        subprocess.run([sys.executable, "-c", code], env=_child_env(tmp_path / "cache"), check=True, timeout=300)
        lib = pf.load(used, backend="c")  # this process uses it
        names = {e.name.split("/")[-1].split("-")[0] for e in cache.entries() if e.kind == "program"}
        assert names == {"old", "new", "used"}
        assert main(["cache"]) == 0
        out = capsys.readouterr().out
        assert "programs/c/old-" in out and "ffi/_pybridge_api_used_" in out and "bound 2.0 GiB" in out
        # --older-than: make "old" a week old; only it goes
        week = time.time() - 8 * 86400
        old_entry = next(e for e in cache.entries() if "/old-" in e.name)
        for f in [old_entry.path, *old_entry.path.iterdir()]:
            os.utime(f, (week, week))
        assert main(["cache", "clear", "--older-than", "7d"]) == 0
        assert "removed 1 entries" in capsys.readouterr().out
        assert not old_entry.path.exists()
        # clear: everything but what this process uses
        assert main(["cache", "clear"]) == 0
        assert "kept 1 in use" in capsys.readouterr().out
        left = [e.name for e in cache.entries() if e.kind == "program"]
        assert len(left) == 1 and "/used-" in left[0]
        assert lib.f(1) == 3  # still works: nothing it needs was removed
        lib.close()
        # loading again after a clear rebuilds what is missing (its bindings were removed)
        with pf.load(new, backend="c") as again:
            assert again.f(1) == 2

    def test_a_killed_user_does_not_pin_its_entry(self, tmp_path):
        src = _program(tmp_path, "victim", 5)
        env = _child_env(tmp_path / "cache")
        code = "import sys, pybridge.futhark as pf\nlib = pf.load(sys.argv[1], backend='c'); print('ready', flush=True)\nsys.stdin.read()\n"
        child = subprocess.Popen([sys.executable, "-c", code, str(src)], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        root = tmp_path / "cache"
        removed, kept = cache.clear(root=root)
        assert [e.kind for e in kept] == ["program"]  # a live process uses it
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        removed, kept = cache.clear(root=root)
        assert kept == [] and any(e.kind == "program" for e in removed)
        left = [p.name for p in (root / "programs" / "c").iterdir()]
        assert len(left) == 1 and left[0].endswith(".lock"), left  # its users folder went with it; the lock stays

    def test_bound_holds_under_concurrent_builds_and_spares_entries_in_use(self, tmp_path, monkeypatch):
        """Three processes build and load two programs each at once under a bound smaller than
        what they build; each keeps its libraries, waits until told, then checks every file it
        loaded is still there and calls them. Meanwhile the bound removes only entries no process
        uses. When all have exited, the next build brings the cache within the bound."""
        root = tmp_path / "cache"
        bound = 1_500_000  # about two program entries with their bindings
        env = _child_env(root, PYBRIDGE_CACHE_MAX_BYTES=str(bound))
        go = tmp_path / "go"
        code = textwrap.dedent("""
            import sys, time, pathlib, pybridge.futhark as pf
            go = pathlib.Path(sys.argv[1])
            libs = [pf.load(p, backend="c") for p in sys.argv[2:]]
            print("ready", flush=True)
            while not go.exists():
                time.sleep(0.05)
            for k, lib in enumerate(libs):
                assert lib.path.exists(), lib.path
                assert lib.f(10) == 10 + int(pathlib.Path(sys.argv[2 + k]).stem.split("_")[1])
            print("ok", flush=True)
        """)
        children = []
        for i in range(3):
            progs = [str(_program(tmp_path, f"p{i}{j}_{3 * i + j}", 3 * i + j)) for j in range(2)]
            children.append(subprocess.Popen([sys.executable, "-c", code, str(go), *progs], env=env,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for c in children:
            assert c.stdout is not None
            line = c.stdout.readline().strip()
            assert line == "ready", c.stderr.read() if c.stderr else ""
        # all six entries are in use now: a bound enforced from here removes none of them
        monkeypatch.setenv("PYBRIDGE_CACHE", str(root))
        before = {e.path for e in cache.entries() if e.kind == "program"}
        assert len(before) == 6
        cache.enforce_bound(bound)
        assert {e.path for e in cache.entries() if e.kind == "program"} == before
        go.write_text("go")
        for c in children:
            out, err = c.communicate(timeout=300)
            assert c.returncode == 0 and out.strip() == "ok", err
        # everyone exited: the next build brings the cache within its bound, least recently used first
        monkeypatch.setenv("PYBRIDGE_CACHE_MAX_BYTES", str(bound))
        last = build_program(_program(tmp_path, "last_99", 99), backend="c")
        total = sum(e.size for e in cache.entries())
        assert total <= bound, [(e.name, e.size) for e in cache.entries()]
        assert last.exists()  # the entry just built (in use by this process) stays
