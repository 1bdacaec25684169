"""Issue 22 (reliability, third round), items 2, 5, 6 and 7: restores whose parts disagree, Ctrl-C
during calls and close, two thread races, a parameter named ``self`` and build folders left behind.

Everything runs real compiler output (tests/programs/*.fut and tests/reference/types.fut through
pybridge.futhark.load). What could kill the process runs in a child (``child``): a signal there is a
failed test naming the signal, not a dead pytest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import pybridge.futhark as pf
from pybridge.futhark import callpath
from pybridge.futhark.build import futhark_compiler
from pybridge.ownership import TEMP_PREFIX

ROOT = Path(__file__).resolve().parents[1]
ALIASING = ROOT / "tests" / "programs" / "aliasing.fut"
TYPES = ROOT / "tests" / "reference" / "types.fut"

pytestmark = [
    pytest.mark.slow,  # left out of the quick subset (-m 'not slow')
    pytest.mark.futhark,
    pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler: run scripts/install-futhark.sh"),
]


def backends(*names: str) -> list:
    return [pytest.param(b, marks=[pytest.mark.gpu] if b == "cuda" else [], id=b) for b in names]


# Both call paths where the compiled one is built ("" takes the default: the compiled path).
CALL_PATHS = [pytest.param("", id="default"), pytest.param("python", id="python")] if callpath.compiled is not None \
    else [pytest.param("python", id="python")]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child interpreter: it imports the pybridge under test (installed or the
    source tree), and keeps the caller's PYTHONPATH (the GPU machine's carried wheels are there)."""
    import pybridge

    where = str(Path(pybridge.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([where, *filter(None, [os.environ.get("PYTHONPATH")])]), **extra}


def child(code: str, timeout: float = 600) -> dict:
    """Run ``code`` in a fresh interpreter; its last stdout line is JSON, returned. A signal or a
    nonzero status fails the test with the child's output."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=child_env())
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        pytest.fail(f"the child died of {signal.Signals(-proc.returncode).name}\n{out[-3000:]}")
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{out[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- 6: two thread races


@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_alias_group_checked_while_other_threads_relate_handles(backend: str) -> None:
    """shared_with_live iterates an alias group outside the context lock (the fast path asks it
    before taking the lock) while other threads join results to that group and drop them: on main
    6b64b5e this raised "Set changed size during iteration" (dozens of times in 3 s here)."""
    r = child(f"""
        import json, threading, time
        import numpy as np
        import pybridge.futhark as pf
        from pybridge.futhark import aliases
        lib = pf.load({str(ALIASING)!r}, backend={backend!r})
        h = lib.types["[]i32"].new(np.arange(3, dtype=np.int32))
        keep = [lib.ident(h) for _ in range(2000)]  # a large group: iterating it takes a while
        errors, checks, stop = [], [0], time.time() + 3
        def relate():
            while time.time() < stop:
                rs = [lib.ident(h) for _ in range(50)]  # joins 50 results, then drops them
                del rs
        def check():
            while time.time() < stop:
                try:
                    assert aliases.shared_with_live(h)  # 2000 live aliases
                except RuntimeError as e:
                    errors.append(repr(e))
        def consume():
            while time.time() < stop:
                try:
                    a = lib.ident(h)
                    out = lib.set0(a, 1)  # the fast path's own check, then a copy is consumed
                    assert h.valid and out.valid and not a.valid
                    checks[0] += 1
                except RuntimeError as e:
                    errors.append(repr(e))
        ts = [threading.Thread(target=relate) for _ in range(2)] + [threading.Thread(target=f) for f in (check, check, consume)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(json.dumps({{"errors": len(errors), "first": errors[:1], "checks": checks[0],
                          "h": h.numpy().tolist()}}))
    """)
    assert r["errors"] == 0, r
    assert r["checks"] > 0 and r["h"] == [0, 1, 2], r


@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_shape_of_a_handle_freed_while_it_waits_for_the_lock(backend: str) -> None:
    """ArrayHandle.shape checked validity before taking the lock and read the shape under it: a
    handle freed in between read freed memory (another array's shape, 1-3 in 200k on main). Made
    deterministic: this thread holds the context lock while the reader waits for it, frees the
    handle and makes another array; the reader must get InvalidHandleError."""
    r = child(f"""
        import json, threading, time
        import numpy as np
        import pybridge.futhark as pf
        lib = pf.load({str(ALIASING)!r}, backend={backend!r})
        kind = lib.types["[]i32"]
        got = []
        for _ in range(5):
            h = kind.new(np.arange(3, dtype=np.int32))
            def read():
                try:
                    got.append(list(h.shape))
                except pf.InvalidHandleError:
                    got.append("invalid")
            lib.context.lock.acquire()
            t = threading.Thread(target=read)
            t.start()
            time.sleep(0.2)  # the reader is now waiting for the lock
            h.free()
            other = kind.new(np.arange(7, dtype=np.int32))  # may reuse the freed memory
            lib.context.lock.release()
            t.join()
        print(json.dumps({{"got": got}}))
    """)
    assert r["got"] == ["invalid"] * 5, r


# ---------------------------------------------------------------- 7: `self`, build folders left behind

SELFISH = """
type rec = {self: i32, other: f32}
entry addself (self: i32) (x: i32) : i32 = self + x
entry selfrec (r: rec) : f32 = f32.i32 r.self + r.other
entry mkrec (self: i32) (other: f32) : rec = {self, other}
"""


def test_a_parameter_or_field_named_self_passes_by_keyword(tmp_path: Path) -> None:
    src = tmp_path / "selfish.fut"
    src.write_text(SELFISH)
    with pf.load(src, backend="c") as lib:
        assert lib.addself(self=2, x=3) == 5
        assert lib.addself(2, x=3) == 5
        assert lib.addself(x=3, self=4) == 7
        assert lib.selfrec({"self": 2, "other": 0.5}) == 2.5
        assert lib.selfrec(r={"self": 1, "other": 0.25}) == 1.25
        r = lib.types["rec"].new(self=5, other=1.5)
        assert lib.selfrec(r) == 6.5 and int(r.field("self")) == 5
        assert int(lib.mkrec(self=9, other=0.0)["self"]) == 9
        with pytest.raises(TypeError, match="self"):
            lib.addself(1, self=2)  # given twice: the usual binding error, naming it


def _left_folder(parent: Path, name: str, marked: bool = True) -> Path:
    """A folder as a killed build (or an interrupted removal) leaves it: pybridge's mark first."""
    from pybridge.ownership import MARK

    d = parent / name
    d.mkdir(parents=True)
    if marked:
        (d / MARK).write_text("made by pybridge\n")
    (d / "half-written.c").write_text("int x;")
    return d


def test_stale_build_folders_are_swept_but_never_one_in_use(tmp_path: Path, monkeypatch) -> None:
    """A killed build leaves its .pybridge-tmp- folder, an interrupted removal its .pybridge-trash-
    folder: the next build in that cache folder removes them, unless a build holds the folder's mark
    (a build running now, here in another thread or in another process), and never an unmarked one."""
    import threading

    from filelock import FileLock

    from pybridge.futhark import build
    from pybridge.ownership import MARK

    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "tiny.fut"
    src.write_text("entry f (x: i32) : i32 = x + 1\n")
    parent = tmp_path / "cache" / "programs" / "c"
    stale = _left_folder(parent, ".pybridge-tmp-old-000000000000-abcd1234")
    trash = _left_folder(parent, ".pybridge-trash-gone-000000000000-abcd1234")
    busy = _left_folder(parent, ".pybridge-tmp-busy-000000000000-abcd1234")
    other = _left_folder(parent, ".pybridge-tmp-other-000000000000-abcd1234")
    unmarked = _left_folder(parent, ".pybridge-tmp-mine", marked=False)
    held, release = threading.Event(), threading.Event()

    def hold_in_thread() -> None:
        with FileLock(busy / MARK):  # the build writing that folder holds its mark
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold_in_thread)
    t.start()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(other / MARK)!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held" and held.wait(30)
        so = build.build_program(src, backend="c")
        assert so.is_file()
        assert not stale.exists() and not trash.exists()
        assert busy.exists() and other.exists() and unmarked.exists()
    finally:
        release.set()
        t.join()
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in parent.iterdir() if p.name.startswith(".pybridge-")) == sorted(
        p.name for p in (busy, other, unmarked))


def test_an_interrupted_build_leaves_no_folder(tmp_path: Path) -> None:
    """SIGINT while the Futhark compiler runs: KeyboardInterrupt, and no temporary folder stays."""
    src = tmp_path / "slowish.fut"
    src.write_text("entry f (xs: []f32) : f32 = f32.sum (map (\\x -> x * 2) xs)\n")
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import pybridge.futhark.build as b
        try:
            b.build_program({str(src)!r}, backend="multicore")
        except KeyboardInterrupt:
            print("interrupted")
        else:
            print("finished")
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=child_env(PYBRIDGE_CACHE=str(cache)))
    parent = cache / "programs" / "multicore"
    import time

    deadline = time.time() + 60
    while time.time() < deadline and not (parent.is_dir() and any(p.name.startswith(TEMP_PREFIX) for p in parent.iterdir())):
        time.sleep(0.01)
    assert any(p.name.startswith(TEMP_PREFIX) for p in parent.iterdir()), "the build never started"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert out.strip() in ("interrupted", "finished"), out + err
    assert [p.name for p in parent.iterdir() if p.name.startswith(TEMP_PREFIX)] == []


# ---------------------------------------------------------------- 5: Ctrl-C

INTERRUPTS = Path(__file__).with_name("interrupt_scenarios.py")


def interrupt_scenario(name: str, backend: str, env: dict[str, str] | None = None, **params: int) -> dict:
    args = [sys.executable, str(INTERRUPTS), name, backend, *(f"{k}={v}" for k, v in params.items())]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=child_env(**(env or {})))
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        pytest.fail(f"{name}: the process died of {signal.Signals(-proc.returncode).name}\n{out[-3000:]}")
    assert proc.returncode == 0, f"{name}: exit status {proc.returncode}\n{out[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_ctrl_c_during_calls_leaks_nothing(backend: str, seed: int) -> None:
    """SIGINT at random moments of calls returning 25 MB (fast path and keyword/general path): on
    main 6b64b5e the interrupted results leaked (rss +100 MB in 30 calls on c, invisible to
    live_values). Now each is owned or freed before the KeyboardInterrupt propagates. (On cuda
    the results live on the device: rss does not see them; the registry check still runs.)"""
    r = interrupt_scenario("calls", backend, seed=seed)
    assert r["interrupted"] > 0 and r["usable"] and r["live"] == 0, r
    if backend != "cuda":
        assert r["rss_growth"] < r["result_bytes"] // 2, r


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_ctrl_c_during_consuming_calls(backend: str, seed: int) -> None:
    """SIGINT at random moments of consuming calls (before, during and after the C call): the
    argument is consumed (invalid) or untouched; nothing leaks (main: +320 MB on c, +960 MB on
    multicore in 30 calls, arguments Futhark had consumed still valid)."""
    r = interrupt_scenario("consume", backend, seed=seed)
    assert r["interrupted"] > 0 and r["consumed"] > 0 and r["bad"] == [] and r["live"] == 0, r
    if backend != "cuda":
        assert r["rss_growth"] < r["result_bytes"] // 2, r


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_ctrl_c_during_close_then_close_again_finishes(backend: str) -> None:
    """SIGINT at random moments of close() with 20,000 live values: the second close() frees what
    the first left (main: the context was marked closed and nothing more was ever freed)."""
    r = interrupt_scenario("close", backend)
    rounds = r["rounds"]
    assert any(x["cut_short"] for x in rounds), r  # the scenario did interrupt a close midway
    for x in rounds:
        assert (x["left"], x["ctx_freed"], x["cfg_freed"], x["closed"], x["handles_valid"]) == (0, True, True, True, 0), x


@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_plan_settles_a_call_interrupted_at_its_end(backend: str) -> None:
    """Alarms swept over a (warm) 200 MB call until 3 land in it, the handler raising
    KeyboardInterrupt (what SIGINT's default handler does), for the fast and the general path:
    nothing registered, nothing left in memory (main 6b64b5e: every interrupted result leaked)."""
    r = child(f"""
        import json, signal, numpy as np, pybridge.futhark as pf
        lib = pf.load({str(ALIASING)!r}, backend={backend!r})
        n = 200_000_000
        import time
        lib.big(n).free()  # warm-up: the first call faults the 200 MB in (30x a later call here)
        spans = []
        for _ in range(3):
            t0 = time.perf_counter(); lib.big(n).free(); spans.append(time.perf_counter() - t0)
        d = min(spans)  # what the calls below take: the alarms are swept over it
        def rss():
            lib.context.sync(); lib.context.clear_caches()
            return int(open("/proc/self/statm").read().split()[1]) * 4096
        before = rss()
        out = []
        for how in ("fast", "general"):
            hit = 0
            for k in range(40):  # alarms swept over the call's duration until 3 have landed in it
                if hit >= 3:
                    break
                signal.setitimer(signal.ITIMER_REAL, d * (0.05 + 0.9 * ((k * 7) % 20) / 20))
                signal.signal(signal.SIGALRM, lambda *a: signal.default_int_handler(signal.SIGINT, None))
                try:
                    r = lib.big(n) if how == "fast" else lib.big(n=n)
                    del r
                except KeyboardInterrupt:
                    hit += 1
                signal.setitimer(signal.ITIMER_REAL, 0)
            out.append(hit)
        print(json.dumps({{"hits": out, "live": lib.context.live_values, "grown": rss() - before, "n": n,
                          "sum": int(lib.sum(np.arange(4, dtype=np.int32)))}}))
    """)
    assert r["live"] == 0 and r["sum"] == 6 and r["grown"] < r["n"] // 2, r
    assert r["hits"][0] > 0 and r["hits"][1] > 0, r


@pytest.mark.parametrize("mode", ["api", "abi"])
@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_ctrl_c_at_every_check_point(backend: str, mode: str) -> None:
    """A KeyboardInterrupt at each moment Python checks for a signal (the start of a Python
    function, the end of a built-in's call), in turn, of general-path calls with NumPy arguments
    and dicts, consuming calls (a temporary, a handle, a copy), new, zip, field, restore, numpy(),
    failing calls (fast and general path) and close(); afterwards no lock held, nothing registered
    that no handle owns, no memory left in use, a consumed argument invalid or unchanged, and the
    next failure reports its own message. On main 1bdbe02: SIGSEGV (a call interrupted before it
    ran freed its never-written result cell); with the fixes one by one undone: the context lock
    left held after a failed call (fast path), values from NumPy arguments lost, a failed call's
    message reported by the next failure."""
    r = interrupt_scenario("checkpoints", backend, mode=mode)
    assert r["problems"] == [], r["problems"][:20]
    # The compiled call path (issue 34) has fewer check points: its plans, free and finaliser run
    # no Python code (864 in API mode, 869 in ABI mode when it came in, against 1000+ and 900+).
    floor = 800 if callpath.compiled is not None else 1000 if mode == "api" else 900
    assert sum(r["points"].values()) > floor, r["points"]


@pytest.mark.parametrize("mode", ["api", "abi"])
@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_ctrl_c_at_random_moments_of_general_path_calls(backend: str, mode: str) -> None:
    """1500 general-path calls (NumPy arguments, dicts, consuming calls of NumPy arrays and handles,
    failing calls) with SIGALRM raising KeyboardInterrupt at a random moment of each, and a call from
    a second thread after each (it must finish within 10 s: no lock left held). Afterwards nothing
    registered, memory back, the context usable. On main 1bdbe02: SIGSEGV within a few hundred
    calls."""
    r = interrupt_scenario("general", backend, mode=mode)
    assert r["interrupted"] > 200 and r["stuck"] == 0 and r["errors"] == [] and r["usable"], r
    assert r["rss_growth"] < 4 << 20, r


@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_memory_after_many_interrupted_calls_comes_back(backend: str) -> None:
    """400 calls of 1-6 MB (general path, fast path, consuming) with SIGALRM at a random moment of
    each (about half land): nothing stays registered, and after ``clear_caches()`` and glibc's
    ``malloc_trim(0)`` malloc holds and rss shows no more than before (RELIABILITY.md, "Memory
    after many calls"). Before csource.py's "clear-caches-frees-host-blocks" 33 MB stayed: the
    blocks of 1 MiB and more in Futhark's free list, which clear_caches kept (issue 31's "33 MB
    after 6,000 SIGINTs, 8 MB explained")."""
    r = interrupt_scenario("memory", backend, rounds=400)
    assert r["interrupted"] > 100 and r["live"] == 0, r
    assert r["cached"] > 8 << 20, r  # the calls did leave blocks in the free list: the case is exercised
    assert r["malloc_growth"] < 1 << 20 and r["rss_growth"] < 4 << 20, r


@pytest.mark.parametrize("path", CALL_PATHS)
@pytest.mark.parametrize("backend", backends("c", "multicore"))
def test_a_value_whose_handle_lost_its_finaliser_is_freed_when_its_key_is_reused(backend: str, path: str) -> None:
    """A Ctrl-C at the first instruction of a live handle's __del__ makes Python skip the body,
    which leaves the value registered under the dead handle's id; a new handle at that address
    (new(), a call plan's result, a general-path result, a record result) frees it before taking
    the key. Found by 12,000 interrupted calls on multicore (2 such values of 1.2 and 3.2 MB, one
    the address had already been reused for: a 6 MB rise after clear_caches and malloc_trim); before
    context.py's free_orphan, every case here left its 1-2 MB allocated for good. On the compiled
    path the finaliser is C (an interrupt in each of its lock waits leaves the same state) and a
    plan's result frees the orphan in C (_callpath.c, free_orphan)."""
    r = interrupt_scenario("orphan", backend, env={callpath.ENV: path})
    assert r["usable"], r
    for how, case in r["cases"].items():
        assert case["orphaned"] == 1 and case["reused"] and case["live"] == 0, (how, case)
        assert case["malloc_growth"] < 1 << 19, (how, case)


def test_no_module_is_imported_by_a_call() -> None:
    """An import that a KeyboardInterrupt cuts short can leave CPython's import lock held (3.11's
    importlib takes it before its try), and then every other thread that imports waits for good:
    a call must import nothing, the first one included (main 1bdbe02 imported numpy.ma there)."""
    r = child(f"""
        import json, sys
        import numpy as np
        import pybridge.futhark as pf
        lib = pf.load({str(TYPES)!r}, backend="c")
        before = set(sys.modules)
        xs = np.arange(4, dtype=np.float32)
        lib.points(xs, xs).free()
        r = lib.fill(np.zeros(3, np.int32), 7); r.numpy(); r[1]; r.shape; r.free()
        lib.sum_points({{"x": xs, "y": [1.0, 2.0, 3.0, 4.0]}}).numpy()
        z = lib.types["[]point"].zip(x=xs, y=xs); z.field("x").numpy(); z[0]; len(z)
        lib.types["[]point"].restore(z.store())
        lib.types["point"].new(x=1.0, y=2.0)
        lib.ranks(np.ones((2, 2)), np.ones((1, 2, 3), np.uint8), [True, False])
        c = lib.circle(1.0); c.variant; c.payload; lib.area(("rect", (2.0, 3.0)))
        lib.prims(1, 2, 3, 4, 5, 6, 7, 8, np.float16(1), np.float32(2), 3.0, True)
        for bad in (lambda: lib.checked_div(1, 0), lambda: lib.points(xs, xs[:2])):
            try:
                bad()
            except pf.FutharkError:
                pass
        lib.close()
        print(json.dumps(sorted(set(sys.modules) - before)))
    """)
    assert r == [], r


# ---------------------------------------------------------------- 2: restores whose parts disagree

COMPOSED = ROOT / "tests" / "programs" / "composed.fut"

# Shared by the child processes below: re-encode components in Futhark's binary value format.
ENCODE = """
import numpy as np, struct, pickle, json
import pybridge.futhark as pf
from pybridge.futhark import binformat
def parts(data):
    return [(c.type, c.shape, np.frombuffer(data, binformat.ELEMENT_TYPES[c.type.encode()],
             count=int(np.prod(c.shape, dtype=np.int64)) if c.rank else 1, offset=c.data_offset).reshape(c.shape).copy())
            for c in binformat.read_values(data, "test", bools=False)]
def encode(ps):
    out = b""
    for ty, shape, arr in ps:
        out += b"b" + bytes([2, len(shape)]) + ty.encode() + struct.pack(f"<{len(shape)}q", *shape)
        out += np.ascontiguousarray(arr, binformat.ELEMENT_TYPES[ty.encode()]).tobytes()
    return out
def refused(kind, data, *words):
    try:
        kind.restore(data)
    except pf.ValueFormatError as e:
        assert all(w in str(e) for w in words), (str(e), words)
        return str(e)
    raise AssertionError(f"accepted: {kind.name}")
"""


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_restore_refuses_parts_that_disagree(backend: str) -> None:
    """Issue 22, finding 2, each case: lengths of an array of records or sums that disagree, tags
    out of range (top level, in arrays, nested where active) and pickle.loads of such bytes give
    ValueFormatError naming the part; an inner tag or a bool where no active variant reaches is
    what Futhark may leave there, and restores. On main 6b64b5e the length cases were accepted
    (indexing then read past the buffer: SIGSEGV)."""
    r = child(ENCODE + f"""
lib = pf.load({str(COMPOSED)!r}, backend={backend!r})
T = lib.types
out = {{}}
# []point: x of 1000 elements, y of 1 (the issue: 3*10^8 and 1)
(tx, _, x), (ty, _, y) = parts(lib.pts(np.ones(3, np.float32), np.ones(3, np.float32)).store())
out["pts"] = refused(T["[]point"], encode([(tx, (1000,), np.ones(1000)), (ty, (1,), np.ones(1))]), "disagree", "y")
# []shape: tags of 5, payloads of 1
(t0, _, _), (t1, _, _), (t2, _, _) = parts(lib.shapes(np.array([1., -1.])).store())
out["shapes"] = refused(T["[]shape"], encode([(t0, (5,), np.zeros(5)), (t1, (1,), np.ones(1)), (t2, (1,), np.ones(1))]), "disagree")
# []shape: a tag 7 of 2 variants
ps = parts(lib.shapes(np.array([1., -1., 2.])).store())
ps[0][2][1] = 7
out["shape_tag"] = refused(T["[]shape"], encode(ps), "variant tag 7")
# []nested: element 0 is #a (inner tag active), element 1 is #b (inner tag inactive)
good = lib.nests(np.array([0, 1, 2], np.int32)).store()
ps = parts(good)
assert ps[0][2].tolist() == [0, 1, 2], ps[0][2]
ps[1][2][0] = 9  # the active inner tag of element 0
out["inner_active"] = refused(T["[]nested"], encode(ps), "variant tag 9")
ps = parts(good)
ps[1][2][1] = 9  # element 1 is #b: its inner tag slot is not read
h = T["[]nested"].restore(encode(ps))
out["inner_inactive"] = int(lib.use_nests(h))
ps = parts(good)
ps[0][2][2] = -1
out["outer_negative"] = refused(T["[]nested"], encode(ps), "variant tag -1")
# nested (a scalar sum) with an active inner tag out of range
ps = parts(lib.nest(0).store())
ps[1][2][()] = 5
out["nest_inner"] = refused(T["nested"], encode(ps), "variant tag 5")
# []flag: a bool byte 2 where the variant is #off (inactive) restores; where #on, refused
ps = parts(lib.flags(4).store())  # tags on, off, on, off
ps[2][2][1] = 2
out["bool_inactive"] = int(lib.use_flags(T["[]flag"].restore(encode(ps))))
ps[2][2][0] = 2
out["bool_active"] = refused(T["[]flag"], encode(ps), "bool")
# [][]point: inner dimension disagrees
(a, s, x), (b, _, y) = parts(lib.mat(3).store())
out["mat"] = refused(T["[][]point"], encode([(a, (3, 2), x), (b, (3, 1), y[:, :1])]), "disagree")
# []rec2: the nested sum's tags shorter than the rest
ps = parts(lib.r2s(4).store())
ps[3] = (ps[3][0], (2,), ps[3][2][:2])
out["r2s"] = refused(T["[]rec2"], encode(ps), "disagree")
# pickle.loads of tampered bytes takes the same path
p = lib.pts(np.ones(3, np.float32), np.ones(3, np.float32))
good = p.store()
(tx, _, x), (ty, _, y) = parts(good)
bad = encode([(tx, (5,), np.ones(5)), (ty, (1,), y[:1])])  # 6 elements, as 3 + 3: the same length
assert len(bad) == len(good)
blob = pickle.dumps(p).replace(good, bad)
try:
    pickle.loads(blob)
    out["pickle"] = "accepted"
except pf.ValueFormatError as e:
    out["pickle"] = str(e)
print(json.dumps(out))
""")
    for k in ("pts", "shapes", "mat", "r2s"):
        assert "disagree" in r[k], r
    assert "y" in r["pts"] and "variant tag 9" in r["inner_active"], r
    assert r["inner_inactive"] == 1 + 1 + 100, r  # #a -> 1, #b 1 -> 1, #c -> 100
    assert r["bool_inactive"] == 1 + 1 + 0 + 3, r  # #on true, #off 1, #on false, #off 3
    assert "disagree" in r["pickle"], r


@pytest.mark.parametrize("backend", backends("c", "cuda"))
def test_reading_a_composed_value_leaves_no_value_behind_without_the_gc(backend: str) -> None:
    """Found by the lifecycle machine on composed.fut: ``numpy()`` of an array of sums built its
    nested lists with a closure that called itself, a reference cycle holding the array's element
    handles until the cyclic GC ran; the library kept a value allocated for a nondeterministic time
    (a "leak" at teardown, and Hypothesis's FlakyStrategyDefinition). With the GC off, every value
    a read makes is gone when the read returns."""
    r = child(f"""
import gc, json, numpy as np
import pybridge.futhark as pf
gc.disable()
lib = pf.load({str(COMPOSED)!r}, backend={backend!r})
made = {{
    "[]shape": lambda: lib.shapes(np.array([1., -1., 2.])),
    "[]nested": lambda: lib.nests(np.array([0, 1, 2], np.int32)),
    "[]flag": lambda: lib.flags(3),
    "[]rec2": lambda: lib.r2s(3),
    "[][]point": lambda: lib.mat(2),
    "[](i32, shape)": lambda: lib.tups(3),
    "[]arrsum2": lambda: lib.asums(3, 2),
    "rec2": lambda: lib.r2(1),
    "nested": lambda: lib.nest(0),
}}
left = {{}}
for name, make in made.items():
    h = make()
    before = lib.live_values()
    h.numpy()
    after_read = lib.live_values() - before
    h.free()
    left[name] = [after_read, lib.live_values()]
print(json.dumps(left))
""")
    assert all(v == [0, 0] for v in r.values()), r


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_restore_of_independently_drawn_parts_never_crashes(backend: str) -> None:
    """Hypothesis, in a child (a crash is a failure with its signal): for each composed type, the
    components a real store() has, each with an independently drawn length and drawn tag bytes.
    Accepted means consistent: every array's components agree in their outer length (checked from
    the drawn shapes, not by the code under test), and reading and computing on it works."""
    r = child(ENCODE + f"""
from hypothesis import given, settings, HealthCheck, strategies as st
lib = pf.load({str(COMPOSED)!r}, backend={backend!r})
T = lib.types
samples = {{
    "[]point": (lib.pts(np.ones(3, np.float32), np.ones(3, np.float32)), 1, lib.use_pts),
    "[]shape": (lib.shapes(np.array([1., -1., 2.])), 1, lib.use_shapes),
    "[]nested": (lib.nests(np.array([0, 1, 2], np.int32)), 1, lib.use_nests),
    "[]flag": (lib.flags(3), 1, lib.use_flags),
    "[]rec2": (lib.r2s(3), 1, lib.use_r2s),
    "[][]point": (lib.mat(2), 2, lib.use_mat),
    "nested": (lib.nest(0), 0, None),
    "rec2": (lib.r2(1), 0, None),
    "arrsum": (lib.asum(2), 0, None),
    "[](i32, shape)": (lib.tups(3), 1, None),
}}
stats = {{"accepted": 0, "refused": 0}}
for name, (h, rank, use) in samples.items():
    base = parts(h.store())

    @given(data=st.data())
    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def fuzz(data):
        ps = []
        outer = data.draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)) if rank else []
        for ty, shape, arr in base:
            dims = [d if data.draw(st.integers(0, 3)) else data.draw(st.integers(0, 4)) for d in outer] + \\
                   [data.draw(st.integers(0, 3)) for _ in shape[rank:]]
            n = int(np.prod(dims, dtype=np.int64)) if dims else 1
            dt = binformat.ELEMENT_TYPES[ty.encode()]
            if ty in ("  i8", "bool"):
                vals = np.array(data.draw(st.lists(st.integers(-2, 4), min_size=n, max_size=n)), np.int8).view(dt)
            else:
                vals = np.arange(n).astype(dt)
            ps.append((ty, tuple(dims), vals.reshape(dims)))
        try:
            v = T[name].restore(encode(ps))
        except pf.ValueFormatError:
            stats["refused"] += 1
            return
        stats["accepted"] += 1
        if rank:
            assert len({{p[1][:rank] for p in ps}}) == 1, ("accepted disagreeing lengths", [p[1] for p in ps])
        v.numpy()  # every element read through Futhark
        if use is not None:
            use(v)
        assert T[name].restore(v.store()).numpy() is not None
    fuzz()
print(json.dumps(stats))
""")
    assert r["accepted"] > 50 and r["refused"] > 50, r


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_every_value_futhark_stores_restores(backend: str) -> None:
    """Round trips: whatever Futhark stores (inactive payloads included) restores to the same bytes."""
    r = child(f"""
import json, numpy as np, pybridge.futhark as pf
lib = pf.load({str(COMPOSED)!r}, backend={backend!r})
tl = pf.load({str(TYPES)!r}, backend={backend!r})
vals = [lib.pts(np.arange(5, dtype=np.float32), np.ones(5, np.float32)), lib.pts(np.zeros(0, np.float32), np.zeros(0, np.float32)),
        lib.shapes(np.array([1., -1., 2., -3.])), lib.shapes(np.zeros(0))]
vals += [lib.nest(k) for k in range(3)] + [lib.nests(np.array(ks, np.int32)) for ks in ([0, 1, 2, 2, 1, 0], [], [2], [1, 1])]
vals += [lib.asum(n) for n in (0, 1, 5)] + [lib.asums(n, m) for n, m in ((0, 0), (3, 0), (4, 2))]
vals += [lib.flags(n) for n in (0, 1, 7)] + [lib.r2(3), lib.r2s(0), lib.r2s(4), lib.tups(3), lib.mat(0), lib.mat(3)]
vals += [tl.make_point(1, 2), tl.circle(1.5), tl.rect(2, 3), tl.points(np.ones(3, np.float32), np.ones(3, np.float32))]
n = 0
for h in vals:
    b = h.store()
    for kind in (h.otype, pf.OpaqueKind(h.library, h.library.manifest.types[h.type_name])):  # learnt layout or not
        assert kind.restore(b).store() == b, h.type_name
        n += 1
print(json.dumps({{"round_trips": n}}))
""")
    assert r["round_trips"] >= 60, r


@pytest.mark.parametrize("backend", backends("c", "multicore", "cuda"))
def test_an_inactive_bool_slot_holds_any_byte_also_beside_unsigned_payloads(backend: str) -> None:
    """Found in CI (a generated interface, both host backends): a sum whose variants hold a bool and
    a [][][]u16 was refused on restore when Futhark had left a byte other than 0 or 1 in the
    inactive bool slot. Futhark stores the u16 payload as i16 (no signedness in its core types;
    u16 and i16 payloads even share a slot), so the layout derived from the manifest did not match
    and the check fell back to "every bool 0 or 1". Here the inactive bool byte is set to 0x5a as
    Futhark may leave it: restore must take it; an active bool of 0x5a is still refused."""
    r = child(f"""
import json, pybridge.futhark as pf
from pybridge.futhark import binformat, ValueFormatError
lib = pf.load({str(COMPOSED)!r}, backend={backend!r})
out = {{"accepted": 0, "refused": 0}}
for entry, k, active in (("usum", 0, True), ("usum", 1, False), ("usum", 2, False),
                         ("mixed", 0, False), ("mixed", 1, False), ("mixed", 2, True)):
    h = getattr(lib, entry)(k)
    b = bytearray(h.store())
    comp = next(c for c in binformat.read_values(bytes(b), "t", bools=False) if c.type == "bool")
    b[comp.data_offset] = 0x5A
    try:
        g = h.otype.restore(bytes(b))
    except ValueFormatError as e:
        assert active and "neither 0 nor 1" in str(e), (entry, k, str(e))
        out["refused"] += 1
        continue
    assert not active, (entry, k)
    assert g.variant == h.variant and g.store() == bytes(b), (entry, k)
    out["accepted"] += 1
print(json.dumps(out))
""")
    assert r == {"accepted": 4, "refused": 2}, r


_PAYLOAD_PRIMS = ("bool", "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f16", "f32", "f64")
_LITERAL = {"bool": "true", "f16": "1f16", "f32": "1f32", "f64": "1f64"}


@st.composite
def _sum_types(draw):
    """A sum type's variants: each a list of payloads (a primitive, or an array of rank 1-2 of one)."""
    payload = st.tuples(st.sampled_from(_PAYLOAD_PRIMS), st.integers(0, 2))
    return draw(st.lists(st.lists(payload, max_size=3), min_size=2, max_size=4))


def _sum_program(sums: list) -> str:
    """One .fut with type s<i> per drawn sum and an entry mk<i> (k: i32) making variant k (clamped)."""
    lines = []
    for i, variants in enumerate(sums):
        cons = []
        values = []
        for j, ps in enumerate(variants):
            types = " ".join(f"({'[]' * r}{t})" for t, r in ps)
            cons.append(f"#v{j} {types}".rstrip())
            lits = " ".join("(" + "[" * r + _LITERAL.get(t, f"1{t}") + "]" * r + ")" for t, r in ps)
            values.append(f"#v{j} {lits}".rstrip())
        lines.append(f"type~ s{i} = {' | '.join(cons)}")
        body = values[-1]
        for j in reversed(range(len(values) - 1)):
            body = f"if k == {j} then {values[j]} else {body}"
        lines.append(f"entry mk{i} (k: i32) : s{i} = {body}")
    return "\n".join(lines) + "\n"


# Each example compiles one program (a few seconds): no shrinking, which would compile dozens.
@pytest.mark.parametrize("backend", backends("c", "cuda"))
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(sums=st.lists(_sum_types(), min_size=4, max_size=8))
# Found by this test: Futhark shares scalar payload slots between variants, never array ones.
@example(sums=[[[("bool", 1)], [("bool", 1)]], [[("u16", 0)], [("i16", 0)], [("bool", 0)]],
               [[("i32", 1), ("i32", 1)], [("i32", 1)]], [[("u8", 2)], [("bool", 0), ("f16", 0)], []]])
def test_drawn_sums_derived_layout_is_what_futhark_stores(backend, sums, tmp_path_factory) -> None:
    """The layout restorecheck derives from the manifest, against the real compiler's stores, for
    drawn sums of every primitive (signed, unsigned, bool, floats) and arrays of them: equal in
    Futhark's core types, so restore checks what an active variant reaches; and a stray byte in a
    bool slot no active variant reaches (what Futhark may leave there, inactive arrays included:
    Futhark keeps their elements) restores, while one an active variant reaches is refused."""
    from pybridge.futhark import ValueFormatError, binformat, restorecheck

    src = tmp_path_factory.mktemp("sums") / "sums.fut"
    src.write_text(_sum_program(sums))
    with pf.load(src, backend=backend) as lib:
        for i, variants in enumerate(sums):
            kind = lib.types[f"s{i}"]
            derived = kind.structure()
            assert derived is not None, src.read_text()
            layout = [(r, restorecheck.core_type(t)) for r, t, _ in derived[0]]
            for k in range(len(variants)):
                h = getattr(lib, f"mk{i}")(k)
                raw = h.store()
                comps = binformat.read_values(raw, "t", bools=False)
                assert [(c.rank, restorecheck.core_type(c.type)) for c in comps] == layout, (src.read_text(), i, k)
                active = {idx for node in derived[1].variants[k][1] for idx in _leaves(node)}
                for idx, c in enumerate(comps):
                    if c.type != "bool" or (c.rank and not np.prod(c.shape)):
                        continue  # not a bool, or no element to set
                    b = bytearray(raw)
                    b[c.data_offset] = 0x5A
                    if idx in active:
                        with pytest.raises(ValueFormatError, match="neither 0 nor 1"):
                            kind.restore(bytes(b))
                    else:
                        assert kind.restore(bytes(b)).store() == bytes(b)


def _leaves(node) -> list[int]:
    from pybridge.futhark import restorecheck

    if isinstance(node, restorecheck.Leaf):
        return [node.index]
    if isinstance(node, restorecheck.Record):
        return [i for _, f in node.fields for i in _leaves(f)]
    if isinstance(node, restorecheck.Array):
        return list(node.indices)
    return [node.tag] + [i for _, ps in node.variants for p in ps for i in _leaves(p)]
