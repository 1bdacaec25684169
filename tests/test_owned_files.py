"""Issue 31, items 1, 3, 7 and 10: pybridge writes and deletes only in folders it made and marked.

The property (hypothesis): decoys -- a user's files and folders, folders named like pybridge's
temporaries (``.cache.tmp/``, ``.git.tmpobjects/``, ``.pybridge-tmp-notes/`` without pybridge's
mark), look-alike entries (``programs/2024/thesis/``, ``programs/c/thesis-0123456789ab/``,
``ffi/libmine.so``), symbolic links to folders outside, a cache subfolder replaced by a link to a
folder holding a whole pybridge entry -- are planted beside and inside every folder the commands
touch (``pybridge build -o``, ``pf.load("x.fut")``, ``pybridge cache clear [--older-than]``, the size
bound after a build, ``cuda.build_source``, ``pybridge stubs`` and ``package``); the commands run;
every decoy and everything the links point to is still there byte for byte, and nothing new lies
beside the outputs. A foreign cache root is refused by every command in one line.

Then one regression test per item, written the way the bug was found; each fails on the code before
its fix. CUDA C is compiled by a stand-in for nvcc in the property (what is checked is where files
go, not what nvcc makes: the same on machines without the toolkit); the real nvcc compiles the
carriage-return case where it is installed.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pybridge
from pybridge import cache as pcache
from pybridge.cli import main
from pybridge.futhark.build import futhark_compiler
from pybridge.ownership import MARK, TAG

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.slow,  # builds through a hypothesis property: about 19 s of CPU time
    pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains one) or set FUTHARK="),
]

WHERE = str(Path(pybridge.__file__).resolve().parents[1])
PROGRAM = "entry f (x: i64) : i64 = x + 7\n"
KERNEL = ('#include "scale.cuh"\n'
          'extern "C" __global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= SCALE; }\n')
OUTPUTS = {"p.c", "p.h", "p.json", "p.fut", "libp.so", ".source-hash"}  # what `pybridge build p.fut -o DIR` writes
DAY = 86400.0

# A stand-in for nvcc: what the CUDA cache stores does not depend on the compiler's bytes.
STAND_IN_NVCC = '''\
import os, re, sys
args = sys.argv[1:]
if "--version" in args:
    print("nvcc: a test stand-in\\nCuda compilation tools, release 0.0, V0.0.0")
elif "-MM" in args:
    src = args[-1]
    dirs = [a[2:] for a in args if a.startswith("-I")]
    deps = [os.path.join(d, n) for n in re.findall(r'#include "([^"]+)"', open(src).read()) for d in dirs
            if os.path.exists(os.path.join(d, n))]
    print("source.o: " + " ".join([src, *deps]))
else:
    with open(args[args.index("-o") + 1], "wb") as f:
        f.write(b"\\x7fELF stand-in cubin" if "--cubin" in args else b"// stand-in PTX\\n")
'''


def child_env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYBRIDGE_CACHE_MAX_BYTES"}
    path = os.pathsep.join([WHERE, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**env, "PYTHONPATH": path, "PYBRIDGE_CACHE": str(cache), **extra}


def run_pybridge(args: list[str], cache: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pybridge", "-q", *args], cwd=cwd, env=child_env(cache, **extra),
                          capture_output=True, text=True, timeout=600)


LOAD = textwrap.dedent("""
    import sys
    import pybridge.futhark as pf
    try:
        lib = pf.load(sys.argv[1], backend="c")
    except Exception as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        raise SystemExit(3)
    assert lib.f(1) == 8, lib.f(1)
    print(lib.mode)
""")


def run_load(cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LOAD, "p.fut"], cwd=cwd, env=child_env(cache),
                          capture_output=True, text=True, timeout=600)


def state(path: Path) -> dict[str, tuple[object, ...]]:
    """Everything at and under ``path``, no link followed: type, bytes or link target, mtime."""
    out: dict[str, tuple[object, ...]] = {}

    def visit(p: Path, rel: str) -> None:
        st_ = os.lstat(p)
        if stat.S_ISLNK(st_.st_mode):
            out[rel] = ("link", os.readlink(p), st_.st_mtime_ns)
        elif stat.S_ISDIR(st_.st_mode):
            out[rel] = ("dir", st_.st_mtime_ns)
            for name in sorted(os.listdir(p)):
                visit(p / name, f"{rel}/{name}")
        else:
            out[rel] = ("file", p.read_bytes(), st_.st_mtime_ns)

    if os.path.lexists(path):
        visit(path, ".")
    return out


def age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


@dataclass
class World:
    base: Path
    work: Path  # the user's folder: the programs, the current directory of every command
    cache: Path
    snapshot: Path  # the cache as built once: restored before each example
    nvcc: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """A cache holding one program entry with its API-mode bindings (built by a process that has
    exited: nothing is in use) and one CUDA entry; a copy of it to restore."""
    base = tmp_path_factory.mktemp("owned")
    work = base / "work"
    work.mkdir()
    (work / "p.fut").write_text(PROGRAM)
    (work / "k.cu").write_text(KERNEL)
    (work / "scale.cuh").write_text("#define SCALE 2.0f\n")
    nvcc = base / "tools" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(f"#!{sys.executable}\n{STAND_IN_NVCC}")
    nvcc.chmod(0o755)
    w = World(base, work, base / "cache", base / "snapshot", nvcc)
    loaded = run_load(w.cache, work)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "api", loaded.stderr
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYBRIDGE_CACHE", str(w.cache))
        mp.setenv("NVCC", str(nvcc))
        _build_cuda(w)
    shutil.copytree(w.cache, w.snapshot, symlinks=True)
    return w


def _build_cuda(w: World) -> None:
    from pybridge.cuda.compiler import build_source

    build_source(w.work / "k.cu", arch="sm_90")


def restore(w: World, root: str) -> None:
    """The cache as pybridge made it ("pybridge"), as an older pybridge left it (no tag, no marks:
    "legacy"), or an empty folder of the user's ("foreign": the decoys fill it)."""
    for d in (w.cache, w.base / "elsewhere"):
        if os.path.lexists(d):
            shutil.rmtree(d)
    for p in w.work.iterdir():
        if p.name not in ("p.fut", "k.cu", "scale.cuh"):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (w.base / "elsewhere").mkdir()
    if root == "foreign":
        w.cache.mkdir()
        return
    shutil.copytree(w.snapshot, w.cache, symlinks=True)
    if root == "legacy":
        for p in [w.cache / TAG, *w.cache.rglob(MARK)]:
            p.unlink(missing_ok=True)


# ---------------------------------------------------------------- the property

# Names a user may well have, many shaped like pybridge's own (none carrying its mark).
NAMES = [".cache.tmp", ".git.tmpobjects", ".data.tmp-backup", ".out.lock", ".p.lock", ".pybridge-tmp-notes",
         ".pybridge-trash-old", ".pybridge-tmp-p-0123456789ab-x", "thesis-0123456789ab", "2024", "libmine.so",
         "_pybridge_mine.py", "notes.txt", "out.tmp", ".p-0123456789ab.users", "cuda-12.4", "x" * 200, "a\rb", " ", "-o"]
# Where decoys go: beside and inside every folder a command writes or deletes in.
PLACES = ["work", "work/out", "work/dist", "work/stubs", "cache", "cache/programs", "cache/programs/c", "cache/cuda",
          "cache/cuda/direct", "cache/ffi"]
# What pybridge itself names in each place (a decoy there would be an output, not a decoy).
OWN = {"work": {"p.fut", "k.cu", "scale.cuh", "out", "dist", "stubs"}, "work/out": OUTPUTS, "work/stubs": {"p.pyi"},
       "cache": {"programs", "cuda", "ffi", "bench", TAG}, "cache/programs": {"c"}, "cache/cuda": {"direct"}}
HIJACKABLE = ["cache/programs", "cache/programs/c", "cache/cuda", "cache/ffi"]
COMMANDS = ["build -o", "load", "clear", "clear --older-than", "bound", "cuda", "stubs", "list", "package"]

decoy = st.tuples(
    st.sampled_from(PLACES),
    st.sampled_from(NAMES) | st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=12),
    st.sampled_from(["file", "dir", "link to a folder", "link to a file", "dangling link"]),
    st.booleans(),  # two days old (stale for every sweep and --older-than)
)


def plant(w: World, decoys: list[tuple[str, str, str, bool]]) -> list[Path]:
    planted: list[Path] = []
    for i, (place, name, kind, old) in enumerate(decoys):
        folder = w.base / place
        path = folder / name
        if name in (".", "..") or name in OWN.get(place, ()) or os.path.lexists(path) or len(os.fsencode(name)) > 255:
            continue
        if folder.is_symlink():
            continue  # a hijacked folder: the user's, behind the link
        folder.mkdir(parents=True, exist_ok=True)
        target = w.base / "elsewhere" / f"target-{i}"
        if kind == "file":
            path.write_bytes(f"user data {i}\n".encode() * (i + 1))
        elif kind == "dir":
            (path / ".hidden.tmp").mkdir(parents=True)
            (path / "chapter1.tex").write_text(f"thesis {i}\n")
            (path / ".hidden.tmp" / "object").write_bytes(bytes(range(i + 3)))
            (path / ".source-hash").write_text("not a digest\n")
        elif kind == "link to a folder":
            (target / "bin").mkdir(parents=True)
            (target / "bin" / "nvcc").write_text("#!/bin/sh\n")
            (target / "lib64").mkdir()
            (target / "lib64" / "libcudart.so").write_bytes(b"\x7fELF user")
            path.symlink_to(target)
        elif kind == "link to a file":
            target.write_text(f"precious {i}\n")
            path.symlink_to(target)
        else:
            path.symlink_to(w.base / "elsewhere" / f"missing-{i}")
        if old:
            for p in [*(sorted(path.rglob("*")) if kind == "dir" else []), path]:
                age(p, 2 * DAY)
        planted.append(path)
    return planted


def hijack(w: World, place: str) -> Path:
    """Replace a folder of the cache by a link to a folder of the user's that holds a copy of it
    (a whole, marked pybridge entry included: the strongest bait) and a toolkit's folders."""
    folder = w.base / place
    target = w.base / "elsewhere" / f"hijacked-{place.replace('/', '-')}"
    shutil.copytree(folder, target, symlinks=True)
    for sub in ("bin", "include", "lib64"):
        (target / sub).mkdir(exist_ok=True)
        (target / sub / "keep").write_text(sub)
    shutil.rmtree(folder)
    folder.symlink_to(target)
    return target


def run_command(w: World, command: str) -> tuple[int, str]:
    """Run one command; (exit status, what it said on stderr)."""
    if command == "build -o":
        proc = run_pybridge(["build", "p.fut", "--backend", "c", "-o", "out"], w.cache, w.work)
    elif command == "load":
        proc = run_load(w.cache, w.work)
    elif command == "bound":  # the bound after a build, with a 1-byte PYBRIDGE_CACHE_MAX_BYTES
        proc = run_pybridge(["build", "p.fut", "--backend", "c"], w.cache, w.work, PYBRIDGE_CACHE_MAX_BYTES="1")
    elif command == "stubs":
        (w.work / "stubs").mkdir(exist_ok=True)  # stubs writes a file into a folder the user has
        proc = run_pybridge(["stubs", "p.fut", "-o", "stubs/p.pyi"], w.cache, w.work)
    elif command == "package":
        proc = run_pybridge(["package", "p.fut", "--name", "ownedpkg", "--backends", "c", "-o", "dist"], w.cache, w.work)
    else:  # in this process, which uses no entry: clear and the size bound can remove every one
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                if command == "cuda":
                    _build_cuda(w)
                    code = 0
                else:
                    code = main({"clear": ["cache", "clear"], "clear --older-than": ["cache", "clear", "--older-than", "1d"],
                                 "list": ["cache"]}[command])
            except pybridge.PybridgeError as e:
                print(f"{type(e).__name__}: {e}", file=err)
                code = 1
        return code, err.getvalue()
    return proc.returncode, proc.stderr


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(root=st.sampled_from(["pybridge"] * 4 + ["legacy", "foreign"]),
       decoys=st.lists(decoy, min_size=1, max_size=12),
       hijacked=st.sampled_from([None] * 6 + HIJACKABLE),
       commands=st.lists(st.sampled_from(COMMANDS), min_size=1, max_size=3))
def test_commands_touch_nothing_but_their_own(world: World, monkeypatch: pytest.MonkeyPatch, root: str,
                                              decoys: list[tuple[str, str, str, bool]], hijacked: str | None,
                                              commands: list[str]) -> None:
    w = world
    monkeypatch.setenv("PYBRIDGE_CACHE", str(w.cache))
    monkeypatch.setenv("NVCC", str(w.nvcc))
    monkeypatch.delenv("PYBRIDGE_CACHE_MAX_BYTES", raising=False)
    restore(w, root)
    if root == "foreign":
        decoys = [("cache", "notes.txt", "file", False), *decoys]  # a folder of the user's is never empty
    if root == "foreign":
        hijacked = None  # all of it is the user's already
    if hijacked is not None:
        hijack(w, hijacked)
    planted = plant(w, decoys)
    before = {p: state(p) for p in planted}
    elsewhere = state(w.base / "elsewhere")
    work_names = set(os.listdir(w.work))
    event(f"root: {root}, hijacked: {hijacked}")
    for command in commands:
        code, err = run_command(w, command)
        event(f"{command}: {'ran' if code == 0 else 'refused'}")
        said = err.strip().splitlines()
        if command == "load":
            said = said[-1:]  # the exception's message (a RuntimeWarning may come first: API mode, then ABI, refused)
        if root == "foreign":  # refused, in one line naming the variable
            assert code != 0 and len(said) == 1 and "PYBRIDGE_CACHE=" in said[0], (command, err)
        elif code != 0:  # a refusal is the only failure allowed, in one line saying why
            assert len(said) == 1, (command, err)
            assert ("symbolic link" in said[0] and hijacked) or (root == "legacy" and "PYBRIDGE_CACHE=" in said[0]), (command, err)
    assert {p: state(p) for p in planted} == before
    assert state(w.base / "elsewhere") == elsewhere
    # Beside the outputs nothing new: no lock, no temporary folder, no copy.
    assert set(os.listdir(w.work)) <= work_names | {"out", "dist", "stubs"}
    for place, own in (("out", OUTPUTS), ("stubs", {"p.pyi"})):
        if (w.work / place).is_dir():
            assert set(os.listdir(w.work / place)) <= own | {p.name for p in planted}
    if (w.work / "dist").is_dir():
        assert all(n.endswith(".whl") or w.work / "dist" / n in planted for n in os.listdir(w.work / "dist"))


# ---------------------------------------------------------------- item 1: `build -o` and its neighbours


def test_build_o_leaves_the_folders_beside_its_output_alone(world: World) -> None:
    """Found: `pybridge build prog.fut -o out` swept DIR's parent (here the current directory) and
    removed every hidden folder with `.tmp` in its name older than a minute, and left `.out.lock`."""
    w = world
    restore(w, "pybridge")
    neighbours = []
    for name in (".cache.tmp", ".git.tmpobjects", ".data.tmp-backup", ".out.tmp"):
        (w.work / name / "objects").mkdir(parents=True)
        (w.work / name / "objects" / "pack").write_bytes(os.urandom(64))
        for p in (w.work / name / "objects" / "pack", w.work / name / "objects", w.work / name):
            age(p, DAY)
        neighbours.append(w.work / name)
    (w.work / "out").mkdir()
    (w.work / "out" / ".keep.tmp").mkdir()
    age(w.work / "out" / ".keep.tmp", DAY)
    neighbours.append(w.work / "out" / ".keep.tmp")
    before = {p: state(p) for p in neighbours}
    names = set(os.listdir(w.work))
    for out in ("out", str(w.work / "out")):  # relative and absolute
        proc = run_pybridge(["build", "p.fut", "--backend", "c", "-o", out], w.cache, w.work)
        assert proc.returncode == 0, proc.stderr
    assert {p: state(p) for p in neighbours} == before
    assert set(os.listdir(w.work)) == names  # no .out.lock, nothing else
    assert set(os.listdir(w.work / "out")) == OUTPUTS | {".keep.tmp"}


# ---------------------------------------------------------------- item 3: whose cache


def _users_things(folder: Path) -> None:
    """What the issue found deleted: a toolkit reached through a link, a thesis, a library."""
    for sub in ("bin", "include", "lib64"):
        (folder / "cuda-12.4" / sub).mkdir(parents=True)
        (folder / "cuda-12.4" / sub / f"{sub}.file").write_text(sub)
    os.symlink("cuda-12.4", folder / "cuda")
    (folder / "programs" / "2024" / "thesis").mkdir(parents=True)
    (folder / "programs" / "2024" / "thesis" / "main.tex").write_text("\\chapter{One}\n")
    (folder / "ffi").mkdir(exist_ok=True)
    (folder / "ffi" / "libmine.so").write_bytes(b"\x7fELF mine")


def test_a_foreign_cache_root_is_refused_by_every_command(world: World, tmp_path: Path) -> None:
    """Found: `pybridge cache clear` trusted whatever $PYBRIDGE_CACHE named and deleted in it."""
    restore(world, "pybridge")
    mine = tmp_path / "my folder"
    _users_things(mine)
    for p in mine.rglob("*"):
        age(p, 30 * DAY)
    before = state(mine)
    for args in (["cache", "clear"], ["cache", "clear", "--older-than", "1d"], ["cache"], ["build", "p.fut", "--backend", "c"],
                 ["build", "p.fut", "--backend", "c", "-o", "out"]):
        proc = run_pybridge(args, mine, world.work)
        said = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(said) == 1, (args, proc.stderr)
        assert "PYBRIDGE_CACHE=" in said[0] and "my folder" in said[0] and "not pybridge's cache" in said[0], said
    loaded = run_load(mine, world.work)
    assert loaded.returncode == 3 and "ForeignCacheError" in loaded.stderr and "PYBRIDGE_CACHE=" in loaded.stderr
    assert state(mine) == before
    assert not (world.work / "out").exists()


def test_clear_and_the_bound_never_follow_a_link_nor_take_a_look_alike(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same things inside pybridge's own cache: clear and the size bound remove pybridge's
    entries only (the link `cuda -> cuda-12.4` is not descended into)."""
    w = world
    monkeypatch.setenv("PYBRIDGE_CACHE", str(w.cache))
    for remove in (lambda: pcache.clear(), lambda: pcache.enforce_bound(1)):
        restore(w, "pybridge")
        shutil.rmtree(w.cache / "cuda")
        _users_things(w.cache)
        theirs = [w.cache / n for n in ("cuda-12.4", "cuda", "programs/2024", "ffi/libmine.so")]
        before = {p: state(p) for p in theirs}
        removed = remove()
        removed = removed[0] if isinstance(removed, tuple) else removed
        assert sorted(e.kind for e in removed) == ["ffi", "program"], removed  # the entry and its bindings
        assert {p: state(p) for p in theirs} == before


# ---------------------------------------------------------------- item 7: whole or absent


def _broken_entries(w: World) -> list[str]:
    """The entries of the cache that are there but not whole (by the files each must have)."""
    broken = []
    for e in (w.cache / "programs" / "c").iterdir():
        if not e.name.startswith(".") and e.is_dir():
            if not all((e / f).is_file() for f in OUTPUTS) or len((e / ".source-hash").read_text()) != 12:
                broken.append(str(e))
    for e in (w.cache / "cuda").iterdir():
        if len(e.name) == 40 and e.is_dir():
            if not all((e / f).is_file() for f in ("module.cubin", "module.ptx", "source.cu", "entry.json")):
                broken.append(str(e))
    return broken


def test_a_clear_interrupted_at_any_removal_leaves_entries_whole_or_absent(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: Ctrl-C between two unlinks of `pybridge cache clear` left libprog.so and the stamp
    without prog.json (or prog.h), and every later load trusted it. Here Ctrl-C lands at each
    removal step in turn (the k-th unlink or rmdir), until clear finishes without one."""
    w = world
    monkeypatch.setenv("PYBRIDGE_CACHE", str(w.cache))
    monkeypatch.setenv("NVCC", str(w.nvcc))
    real_unlink, real_rmdir = os.unlink, os.rmdir
    k = 0
    while True:
        k += 1
        restore(w, "pybridge")
        steps = 0

        def step(real):  # type: ignore[no-untyped-def]
            def removal(*args, **kwargs):  # type: ignore[no-untyped-def]
                nonlocal steps
                steps += 1
                if steps == k:
                    raise KeyboardInterrupt
                return real(*args, **kwargs)
            return removal

        with monkeypatch.context() as m:
            m.setattr(os, "unlink", step(real_unlink))
            m.setattr(os, "rmdir", step(real_rmdir))
            try:
                pcache.clear()
                finished = True
            except KeyboardInterrupt:
                finished = False
        assert _broken_entries(w) == [], f"interrupted at removal {k}"
        pcache.clear()  # the next clear finishes the job: the trash goes too
        assert pcache.entries() == []
        assert [p.name for d in (w.cache / "programs" / "c", w.cache / "cuda") for p in d.iterdir()
                if p.name.startswith(".pybridge-")] == []
        if finished:
            break
    assert k > 5  # the interruptions really landed inside the removal


@pytest.mark.parametrize("lost", [["p.json"], ["p.h"]])
def test_a_half_entry_is_built_again_not_trusted(world: World, lost: list[str]) -> None:
    """An entry an older pybridge's interrupted clear left: the library and the stamp, without its
    manifest (every load raised FileNotFoundError) or its header (loads fell back to ABI mode,
    skipping the header check). A load finds it incomplete and builds it again."""
    w = world
    restore(w, "legacy")  # as the older pybridge left it: no marks
    (entry,) = [e for e in (w.cache / "programs" / "c").iterdir() if not e.name.startswith(".")]
    for name in lost:
        (entry / name).unlink()
    loaded = run_load(w.cache, w.work)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "api", loaded.stderr
    assert _broken_entries(w) == []


# ---------------------------------------------------------------- item 10: a carriage return


def test_a_carriage_return_in_the_cache_path_builds_and_loads(world: World, tmp_path: Path) -> None:
    """Found: PYBRIDGE_CACHE holding a carriage return made every build fail with a GCC internal
    compiler error on __FILE__ (the C compiler was given the cache's path of the C file)."""
    odd = tmp_path / "my\rcache"
    loaded = run_load(odd, world.work)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "api", loaded.stderr
    built = run_pybridge(["build", "p.fut", "--backend", "c", "-o", str(tmp_path / "out")], odd, world.work)
    assert built.returncode == 0, built.stderr
    assert set(os.listdir(tmp_path / "out")) == OUTPUTS


@pytest.mark.skipif(shutil.which(os.environ.get("NVCC", "nvcc")) is None, reason="nvcc not on PATH")
def test_a_carriage_return_in_the_cache_path_compiles_cuda(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the CUDA cache with the real nvcc: its make rule of the includes split the
    temporary source's path at the carriage return."""
    from pybridge.cuda.compiler import build_source

    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "my\rcache"))
    built = build_source(world.work / "k.cu", arch="sm_90")
    assert built.cubin.read_bytes()[:4] == b"\x7fELF" and built.directory.parent == tmp_path / "my\rcache" / "cuda"


# ---------------------------------------------------------------- adopting an older pybridge's cache


def test_a_cache_of_an_older_pybridge_is_adopted_only_if_all_of_it_is_pybridges(world: World, monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    """Older pybridge wrote no tag: its default cache (~/.cache/pybridge) is adopted when every
    path in it has a shape pybridge writes, else refused like any foreign folder."""
    w = world
    monkeypatch.delenv("PYBRIDGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    import platformdirs

    default = Path(platformdirs.user_cache_dir("pybridge", appauthor=False))
    restore(w, "legacy")
    shutil.copytree(w.cache, default, symlinks=True)
    (default / "ffi" / "notes.txt").write_text("mine")
    with pytest.raises(pybridge.PybridgeError, match="the default cache .*not pybridge's cache.*ffi/notes.txt"):
        pcache.entries()
    assert not (default / TAG).exists()
    (default / "ffi" / "notes.txt").unlink()
    assert sorted(e.kind for e in pcache.entries()) == ["cuda", "ffi", "program"]
    assert (default / TAG).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")


def test_a_sweep_while_a_temporary_folder_is_being_marked_leaves_it(tmp_path, monkeypatch):
    """A sweep in another process runs at the moment a build writes its folder's mark (the CI race:
    the folder was removed between the mark and its lock, and the build failed FileNotFoundError).
    The folder is locked before it is marked, so the sweep leaves it."""
    from pybridge import ownership

    write_text = Path.write_text
    swept = []

    def write_then_sweep(self, *a, **kw):
        n = write_text(self, *a, **kw)
        if self.name == ownership.MARK and self.parent.name.startswith(ownership.TEMP_PREFIX):
            script = f"from pathlib import Path; from pybridge.ownership import sweep; sweep(Path({str(self.parent.parent)!r}))"
            subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
            swept.append((self.parent, self.exists()))  # what the sweep left
        return n

    monkeypatch.setattr(Path, "write_text", write_then_sweep)
    with ownership.temporary_folder(tmp_path, "race") as tmp:
        assert swept == [(tmp, True)] and (tmp / ownership.MARK).is_file()
        (tmp / "built.so").write_bytes(b"x")
    assert not tmp.exists()  # removed by its own build afterwards
