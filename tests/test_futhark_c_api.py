"""The Futhark C API as the real compiler generates it: what pybridge's layers rely on, checked on
the libraries `make` builds from tests/reference/*.fut (build/reference/<backend>/) and against
the manifests recorded from Futhark 0.25.34 in tests/reference/.

Standalone on purpose: stdlib ctypes only, no pybridge import, so these tests say what the
generated C does independently of the Python layer built on it.  The ctypes signatures are derived
from the manifest with the C API documentation's rules.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "reference"

HOST_BUILDS = [("c", "types"), ("c", "probe"), ("multicore", "types"), ("multicore", "probe")]
CUDA_BUILDS = [("cuda", "probe"), ("cuda", "types")]

# The process's own malloc/free (what the library's malloc binds to, also under sanitizers).
libc = ctypes.CDLL(None)
libc.free.argtypes = [ctypes.c_void_p]
libc.free.restype = None

PRIMS = {
    "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32, "i64": ctypes.c_int64,
    "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
    "f16": ctypes.c_uint16, "f32": ctypes.c_float, "f64": ctypes.c_double, "bool": ctypes.c_bool,
}
P = ctypes.c_void_p  # every array / opaque handle
PP = ctypes.POINTER(ctypes.c_void_p)

FUTHARK_PROGRAM_ERROR = 2
FUTHARK_OUT_OF_MEMORY = 3
# Not in the documented codes: what generated entry points return for arguments of wrong sizes.
FUTHARK_SIZE_MISMATCH = 1


def build_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("PYBRIDGE_BUILD", "").split(os.pathsep) if p]
    dirs += [ROOT / "build", Path.cwd() / "build"]
    return [d for d in dirs if d.is_dir()]


def built_dir(backend: str, program: str) -> Path | None:
    for d in build_dirs():
        if (d / "reference" / backend / f"lib{program}.so").is_file():
            return d / "reference" / backend
    return None


# ------------------------------------------------------------------ binding from the manifest
def common_api(backend: str) -> dict[str, tuple]:
    """Context/config functions of the C API: name -> (restype, argtypes)."""
    api = {
        "futhark_context_config_new": (P, []),
        "futhark_context_config_free": (None, [P]),
        "futhark_context_config_set_debugging": (None, [P, ctypes.c_int]),
        "futhark_context_config_set_profiling": (None, [P, ctypes.c_int]),
        "futhark_context_config_set_logging": (None, [P, ctypes.c_int]),
        "futhark_context_config_set_tuning_param": (ctypes.c_int, [P, ctypes.c_char_p, ctypes.c_size_t]),
        "futhark_context_config_set_cache_file": (None, [P, ctypes.c_char_p]),
        "futhark_get_tuning_param_count": (ctypes.c_int, []),
        "futhark_get_tuning_param_name": (ctypes.c_char_p, [ctypes.c_int]),
        "futhark_get_tuning_param_class": (ctypes.c_char_p, [ctypes.c_int]),
        "futhark_context_new": (P, [P]),
        "futhark_context_free": (None, [P]),
        "futhark_context_sync": (ctypes.c_int, [P]),
        "futhark_context_get_error": (P, [P]),  # malloc'd char *: caller frees
        "futhark_context_set_logging_file": (None, [P, P]),
        "futhark_context_pause_profiling": (None, [P]),
        "futhark_context_unpause_profiling": (None, [P]),
        "futhark_context_report": (P, [P]),
        "futhark_context_clear_caches": (ctypes.c_int, [P]),
    }
    if backend == "multicore":
        api["futhark_context_config_set_num_threads"] = (None, [P, ctypes.c_int])
    if backend == "cuda":
        api.update({
            "futhark_context_config_set_device": (None, [P, ctypes.c_char_p]),
            "futhark_context_config_set_unified_memory": (None, [P, ctypes.c_int]),
            "futhark_context_config_add_nvrtc_option": (None, [P, ctypes.c_char_p]),
            "futhark_context_config_set_default_thread_block_size": (None, [P, ctypes.c_int]),
            "futhark_context_config_set_default_grid_size": (None, [P, ctypes.c_int]),
            "futhark_context_config_set_default_tile_size": (None, [P, ctypes.c_int]),
            "futhark_context_config_set_default_group_size": (None, [P, ctypes.c_int]),
            "futhark_context_config_set_default_num_groups": (None, [P, ctypes.c_int]),
            "futhark_context_config_get_program": (ctypes.c_char_p, [P]),
            "futhark_context_config_set_program": (None, [P, ctypes.c_char_p]),
        })
    return api


def manifest_api(manifest: dict) -> dict[str, tuple]:
    """Every function the manifest names, with its documented C signature."""
    types = manifest["types"]
    raw = ctypes.c_uint64 if manifest["backend"] in ("cuda", "hip") else P

    def c_in(t):
        return PRIMS[t] if t in PRIMS else P

    def c_out(t):
        return ctypes.POINTER(PRIMS[t]) if t in PRIMS else PP

    api = {}
    for name, ep in manifest["entry_points"].items():
        outs = ep["outputs"] if "outputs" in ep else [ep["output"]]
        api[ep["cfun"]] = (ctypes.c_int, [P] + [c_out(o["type"]) for o in outs] + [c_in(i["type"]) for i in ep["inputs"]])
    for tname, t in types.items():
        ops = t["ops"]
        if t["kind"] == "array":
            et, r = PRIMS[t["elemtype"]], t["rank"]
            dims = [ctypes.c_int64] * r
            api[ops["new"]] = (P, [P, P] + dims)
            api[ops["new_raw"]] = (P, [P, raw] + dims)
            api[ops["free"]] = (ctypes.c_int, [P, P])
            api[ops["values"]] = (ctypes.c_int, [P, P, P])
            api[ops["values_raw"]] = (raw, [P, P])
            api[ops["shape"]] = (ctypes.POINTER(ctypes.c_int64), [P, P])
            api[ops["index"]] = (ctypes.c_int, [P, ctypes.POINTER(et), P] + dims)
            continue
        api[ops["free"]] = (ctypes.c_int, [P, P])
        api[ops["store"]] = (ctypes.c_int, [P, P, PP, ctypes.POINTER(ctypes.c_size_t)])
        api[ops["restore"]] = (P, [P, P])
        if "record" in t:
            rec = t["record"]
            api[rec["new"]] = (ctypes.c_int, [P, PP] + [c_in(f["type"]) for f in rec["fields"]])
            for f in rec["fields"]:
                api[f["project"]] = (ctypes.c_int, [P, c_out(f["type"]), P])
        if "sum" in t:
            s = t["sum"]
            api[s["variant"]] = (ctypes.c_int, [P, P])
            for v in s["variants"]:
                api[v["construct"]] = (ctypes.c_int, [P, PP] + [c_in(x) for x in v["payload"]])
                api[v["destruct"]] = (ctypes.c_int, [P] + [c_out(x) for x in v["payload"]] + [P])
        if "record_array" in t:
            ra = t["record_array"]
            api[ra["index"]] = (ctypes.c_int, [P, PP, P] + [ctypes.c_int64] * ra["rank"])
            api[ra["shape"]] = (ctypes.POINTER(ctypes.c_int64), [P, P])
            api[ra["zip"]] = (ctypes.c_int, [P, PP] + [c_in(f["type"]) for f in ra["fields"]])
            for f in ra["fields"]:
                api[f["project"]] = (ctypes.c_int, [P, c_out(f["type"]), P])
    return api


class Built:
    """One library the real compiler generated, bound with ctypes from its own manifest."""

    def __init__(self, backend: str, program: str):
        d = built_dir(backend, program)
        self.backend, self.program = backend, program
        if d is None:
            pytest.skip(f"reference/{backend}/lib{program}.so not built: run `make` (it obtains the Futhark compiler)")
        self.path = d / f"lib{program}.so"
        self.manifest_path = self.path.parent / f"{program}.json"
        self.header_path = self.path.parent / f"{program}.h"
        try:
            self.lib = ctypes.CDLL(str(self.path))
        except OSError as e:
            pytest.skip(f"cannot load {self.path}: {e}")
        self.manifest = json.loads(self.manifest_path.read_text())
        self.api = {**common_api(backend), **manifest_api(self.manifest)}
        for name, (res, args) in self.api.items():
            fn = getattr(self.lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = res, args

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def take_error(self, ctx) -> str | None:
        p = self.lib.futhark_context_get_error(ctx)
        if not p:
            return None
        s = ctypes.string_at(p).decode()
        libc.free(p)
        return s

    def context(self, **settings) -> "Context":
        return Context(self, **settings)


class Context:
    """cfg + ctx with the documented lifecycle: get_error right after new, sync before free."""

    def __init__(self, fx: Built, profiling=False, device=None, unified_memory=None, num_threads=None):
        self.fx = fx
        self.cfg = fx.futhark_context_config_new()
        assert self.cfg
        if profiling:
            fx.futhark_context_config_set_profiling(self.cfg, 1)
        if device is not None:
            fx.futhark_context_config_set_device(self.cfg, device.encode())
        if unified_memory is not None:
            fx.futhark_context_config_set_unified_memory(self.cfg, unified_memory)
        if num_threads is not None:
            fx.futhark_context_config_set_num_threads(self.cfg, num_threads)
        self.ctx = fx.futhark_context_new(self.cfg)
        assert self.ctx
        self.init_error = fx.take_error(self.ctx)

    def error(self):
        return self.fx.take_error(self.ctx)

    def sync(self):
        assert self.fx.futhark_context_sync(self.ctx) == 0, self.error()

    def close(self):
        if self.ctx:
            if self.init_error is None:
                self.fx.futhark_context_sync(self.ctx)
            self.fx.futhark_context_free(self.ctx)
            self.fx.futhark_context_config_free(self.cfg)
            self.ctx = self.cfg = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # helpers over the array API
    def new(self, typ: str, values, shape=None):
        t = self.fx.manifest["types"][typ]
        ct = PRIMS[t["elemtype"]]
        flat = list(values)
        shape = shape or [len(flat)]
        buf = (ct * max(len(flat), 1))(*flat)
        arr = getattr(self.fx, t["ops"]["new"])(self.ctx, buf, *shape)
        self._keep = getattr(self, "_keep", []) + [buf]  # new_* is asynchronous: keep until sync
        assert arr, self.error()
        return arr

    def values(self, typ: str, arr):
        t = self.fx.manifest["types"][typ]
        shape = self.shape(typ, arr)
        n = math.prod(shape)
        buf = (PRIMS[t["elemtype"]] * max(n, 1))()
        assert getattr(self.fx, t["ops"]["values"])(self.ctx, arr, buf) == 0, self.error()
        self.sync()
        return list(buf)[:n]

    def shape(self, typ: str, arr):
        t = self.fx.manifest["types"][typ]
        p = getattr(self.fx, t["ops"]["shape"])(self.ctx, arr)
        return [p[i] for i in range(t["rank"])]

    def free(self, typ: str, *handles):
        for h in handles:
            assert getattr(self.fx, self.fx.manifest["types"][typ]["ops"]["free"])(self.ctx, h) == 0

    def store(self, typ: str, obj) -> bytes:
        op = getattr(self.fx, self.fx.manifest["types"][typ]["ops"]["store"])
        p, n = ctypes.c_void_p(None), ctypes.c_size_t(0)
        assert op(self.ctx, obj, ctypes.byref(p), ctypes.byref(n)) == 0, self.error()
        self.sync()
        data = ctypes.string_at(p, n.value)
        libc.free(p)
        return data

    def restore(self, typ: str, data: bytes):
        buf = ctypes.create_string_buffer(data, len(data) + 64)  # padding: restore reads no size
        obj = getattr(self.fx, self.fx.manifest["types"][typ]["ops"]["restore"])(self.ctx, buf)
        self.sync()
        return obj


def all_manifest_functions(manifest: dict) -> set[str]:
    names = set()
    for ep in manifest["entry_points"].values():
        names.add(ep["cfun"])
    for t in manifest["types"].values():
        names.update(t["ops"].values())
        if "record" in t:
            names.add(t["record"]["new"])
            names.update(f["project"] for f in t["record"]["fields"])
        if "sum" in t:
            names.add(t["sum"]["variant"])
            for v in t["sum"]["variants"]:
                names.update((v["construct"], v["destruct"]))
        if "record_array" in t:
            ra = t["record_array"]
            names.update((ra["index"], ra["shape"], ra["zip"]))
            names.update(f["project"] for f in ra["fields"])
    return names


def f16(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", x))[0]


def from_f16(h: int) -> float:
    return struct.unpack("<e", struct.pack("<H", h))[0]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ------------------------------------------------------------------ pytest fixtures
@pytest.fixture(params=HOST_BUILDS, ids=lambda b: f"{b[0]}-{b[1]}")
def host_built(request):
    return Built(*request.param)


# The behavioural tests run on every backend; the cuda ones need a GPU.
GPU = pytest.mark.gpu


@pytest.fixture(params=["c", "multicore", pytest.param("cuda", marks=GPU)])
def probe(request):
    return Built(request.param, "probe")


@pytest.fixture(params=["c", "multicore", pytest.param("cuda", marks=GPU)])
def types_fx(request):
    return Built(request.param, "types")


# ------------------------------------------------------------------ build outputs
def assert_same_manifest(built: dict, recorded_path: Path) -> None:
    """``built`` equals the manifest recorded in ``recorded_path`` (by another compiler version),
    but for ``version`` and, where a backend's recording is borrowed, ``backend``."""
    recorded = json.loads(recorded_path.read_text())
    recorded["backend"] = built["backend"]
    built = dict(built)
    assert built.pop("version").startswith("0.") and recorded.pop("version")
    assert built == recorded


def test_manifest_matches_the_recorded_one_of_another_version(host_built):
    """The compiler used here (0.25.32) writes the manifest recorded from 0.25.34, but for `version`."""
    ref = REFERENCE / f"{host_built.program}.{host_built.backend}.json"
    if not ref.exists():
        ref = REFERENCE / f"{host_built.program}.c.json"  # multicore's manifest differs only in backend
    assert_same_manifest(host_built.manifest, ref)


def test_exports_every_manifest_function_and_the_context_api(host_built):
    wanted = all_manifest_functions(host_built.manifest) | set(common_api(host_built.backend))
    missing = sorted(n for n in wanted if not hasattr(host_built.lib, n))
    assert not missing


def test_header_declares_every_function(host_built):
    header = host_built.header_path.read_text()
    wanted = all_manifest_functions(host_built.manifest) | set(common_api(host_built.backend))
    declared = set(re.findall(r"\b(futhark_\w+)\s*\(", header))
    assert wanted <= declared, sorted(wanted - declared)
    assert f"#define FUTHARK_BACKEND_{host_built.backend}" in header


def test_tuning_params_follow_the_manifest(host_built):
    fx = host_built
    params = sorted({p for ep in fx.manifest["entry_points"].values() for p in ep["tuning_params"]})
    n = fx.futhark_get_tuning_param_count()
    assert sorted(fx.futhark_get_tuning_param_name(i).decode() for i in range(n)) == params
    cfg = fx.futhark_context_config_new()
    try:
        assert fx.futhark_context_config_set_tuning_param(cfg, b"no_such_param", 64) != 0
        for p in params:
            assert fx.futhark_context_config_set_tuning_param(cfg, p.encode(), 64) == 0
    finally:
        fx.futhark_context_config_free(cfg)


def test_multicore_num_threads():
    fx = Built("multicore", "types")
    with fx.context(num_threads=3) as c:
        assert c.init_error is None
        out = ctypes.c_int32()
        assert fx.futhark_entry_checked_div(c.ctx, ctypes.byref(out), 7, 2) == 0
        c.sync()
        assert out.value == 3


# ------------------------------------------------------------------ probe.fut
def test_trivial_and_saxpy(probe):
    with probe.context() as c:
        out = ctypes.c_int32()
        assert probe.futhark_entry_trivial(c.ctx, ctypes.byref(out), 41) == 0
        c.sync()
        assert out.value == 42
        xs, ys = c.new("[]f32", [1, 2, 3, 4]), c.new("[]f32", [10, 20, 30, 40])
        res = ctypes.c_void_p()
        assert probe.futhark_entry_saxpy(c.ctx, ctypes.byref(res), 2.0, xs, ys) == 0
        c.sync()
        assert c.shape("[]f32", res) == [4]
        assert c.values("[]f32", res) == [12, 24, 36, 48]
        c.free("[]f32", xs, ys, res)


def test_saxpy_size_mismatch_returns_1_with_a_message(probe):
    with probe.context() as c:
        xs, ys = c.new("[]f32", [1, 2, 3]), c.new("[]f32", [1, 2])
        res = ctypes.c_void_p()
        assert probe.futhark_entry_saxpy(c.ctx, ctypes.byref(res), 2.0, xs, ys) == FUTHARK_SIZE_MISMATCH
        assert not res.value, "on error the out-parameter is not touched"
        assert "invalid sizes" in c.error()
        c.free("[]f32", xs, ys)


def test_sum_and_stats_record(probe):
    with probe.context() as c:
        xs = c.new("[]f32", [0.5, 1.5, 2.0])
        out = ctypes.c_float()
        assert probe.futhark_entry_sum(c.ctx, ctypes.byref(out), xs) == 0
        c.sync()
        assert out.value == 4.0
        ds = c.new("[]f64", [1.0, 2.0, 3.0, 4.0])
        st = ctypes.c_void_p()
        assert probe.futhark_entry_stats(c.ctx, ctypes.byref(st), ds) == 0
        mean, sd = ctypes.c_double(), ctypes.c_double()
        assert probe.futhark_project_opaque_stats_mean(c.ctx, ctypes.byref(mean), st) == 0
        assert probe.futhark_project_opaque_stats_sd(c.ctx, ctypes.byref(sd), st) == 0
        c.sync()
        assert mean.value == 2.5 and sd.value == pytest.approx(math.sqrt(1.25))
        made = ctypes.c_void_p()
        assert probe.futhark_new_opaque_stats(c.ctx, ctypes.byref(made), 2.5, math.sqrt(1.25)) == 0
        assert c.store("stats", made) == c.store("stats", st)
        c.free("[]f32", xs)
        c.free("[]f64", ds)
        c.free("stats", st, made)


def test_index_at_out_of_bounds(probe):
    with probe.context() as c:
        xs = c.new("[]f32", [1, 2, 3, 4])
        out = ctypes.c_float(-1.0)
        assert probe.futhark_entry_index_at(c.ctx, ctypes.byref(out), xs, 10) == FUTHARK_PROGRAM_ERROR
        assert probe.futhark_context_sync(c.ctx) == 0
        msg = c.error()
        assert re.fullmatch(r"Error: Index \[10\] out of bounds for array of shape \[4\]\.\n\n"
                            r"Backtrace:\n-> #0  (tests/reference/)?probe\.fut:\d+:\d+-\d+\n", msg), msg
        assert c.error() is None, "get_error returns NULL until a new error"
        assert out.value == -1.0, "on error the out-parameter is not touched"
        assert probe.futhark_entry_index_at(c.ctx, ctypes.byref(out), xs, 3) == 0
        c.sync()
        assert out.value == 4.0
        c.free("[]f32", xs)


def test_array_index_function(probe):
    with probe.context() as c:
        xs = c.new("[]f32", [1, 2, 3])
        v = ctypes.c_float()
        assert probe.futhark_index_f32_1d(c.ctx, ctypes.byref(v), xs, 2) == 0
        c.sync()
        assert v.value == 3.0
        assert probe.futhark_index_f32_1d(c.ctx, ctypes.byref(v), xs, 3) != 0
        assert "out of bounds" in c.error()
        assert probe.futhark_index_f32_1d(c.ctx, ctypes.byref(v), xs, -1) != 0
        c.error()
        c.free("[]f32", xs)


def test_bump_consumes_and_reuses_storage(probe):
    with probe.context() as c:
        xs = c.new("[]f32", [1, 2, 3])
        res = ctypes.c_void_p()
        assert probe.futhark_entry_bump(c.ctx, ctypes.byref(res), xs) == 0
        c.sync()
        assert c.values("[]f32", res) == [2, 2, 3]
        assert probe.futhark_values_raw_f32_1d(c.ctx, res) == probe.futhark_values_raw_f32_1d(c.ctx, xs)
        c.free("[]f32", xs, res)  # the consumed input must still be freed
        empty = c.new("[]f32", [])
        assert probe.futhark_entry_bump(c.ctx, ctypes.byref(res), empty) == FUTHARK_PROGRAM_ERROR
        assert c.error().startswith("Error: Index [0] out of bounds for array of shape [0].")
        c.free("[]f32", empty)


def test_pair_bool_and_f16(probe):
    with probe.context() as c:
        a, b, h = ctypes.c_float(), ctypes.c_bool(), ctypes.c_uint16()
        assert probe.futhark_entry_pair(c.ctx, ctypes.byref(a), ctypes.byref(b), ctypes.byref(h), 1.5, True, f16(0.75)) == 0
        c.sync()
        assert (a.value, b.value, from_f16(h.value)) == (3.0, False, 1.5)


def test_chains_compute_the_op(probe):
    def op(k, x):
        return f32(f32(x * f32(1.0001)) + f32(f32(k) * f32(0.001)))

    with probe.context() as c:
        xs = c.new("[]f32", [0.0, 1.0, -2.5])
        for k in (1, 2, 4, 8, 16, 30):
            res = ctypes.c_void_p()
            assert getattr(probe, f"futhark_entry_chain{k}")(c.ctx, ctypes.byref(res), xs) == 0
            want = []
            for x in (0.0, 1.0, -2.5):
                for j in range(1, k + 1):
                    x = op(j, x)
                want.append(x)
            if probe.backend == "cuda":  # NVRTC contracts x*a + b into one FMA: one rounding fewer per op
                np.testing.assert_allclose(c.values("[]f32", res), want, rtol=1e-6 * k)
            else:
                assert c.values("[]f32", res) == want
            c.free("[]f32", res)
        c.free("[]f32", xs)


def test_new_raw_wraps_caller_memory(probe):
    if probe.backend == "cuda":
        pytest.skip("host pointers: the cuda variant is test_cuda_probe_memory")
    with probe.context() as c:
        buf = (ctypes.c_float * 3)(1, 2, 3)
        arr = probe.futhark_new_raw_f32_1d(c.ctx, ctypes.addressof(buf), 3)
        assert arr
        assert probe.futhark_values_raw_f32_1d(c.ctx, arr) == ctypes.addressof(buf)
        buf[1] = 20.0  # no copy was made
        assert c.values("[]f32", arr) == [1, 20, 3]
        c.free("[]f32", arr)  # does not free buf
        assert list(buf) == [1, 20, 3]


def test_report_and_profiling(probe):
    with probe.context(profiling=True) as c:
        out = ctypes.c_int32()
        assert probe.futhark_entry_trivial(c.ctx, ctypes.byref(out), 1) == 0
        probe.futhark_context_pause_profiling(c.ctx)
        assert probe.futhark_entry_trivial(c.ctx, ctypes.byref(out), 2) == 0
        probe.futhark_context_unpause_profiling(c.ctx)
        c.sync()
        p = probe.futhark_context_report(c.ctx)
        report = json.loads(ctypes.string_at(p).decode())
        libc.free(p)
        assert set(report) >= {"memory", "events"}
        # Host backends record no events; GPU backends record their kernels and copies (0.25.32's
        # cuda events carry name, details and provenance; no start/end, as seen on the H100).
        for e in report["events"]:
            assert {"name", "details", "provenance"} <= set(e), e
        assert probe.futhark_context_clear_caches(c.ctx) == 0


# ------------------------------------------------------------------ types.fut
def test_prims(types_fx):
    fx = types_fx
    with fx.context() as c:
        outs = [t() for t in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint8,
                              ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint16, ctypes.c_float,
                              ctypes.c_double, ctypes.c_bool)]
        ins = [127, 1, 2, 3, 255, 5, 6, 2**64 - 1, f16(1.5), 2.5, 3.5, True]
        assert fx.futhark_entry_prims(c.ctx, *[ctypes.byref(o) for o in outs], *ins) == 0
        c.sync()
        got = [o.value for o in outs]
        assert got[:8] == [-128, 2, 3, 4, 0, 6, 7, 0]
        assert from_f16(got[8]) == 2.5 and got[9:] == [3.5, 4.5, False]


def test_ranks(types_fx):
    fx = types_fx
    with fx.context() as c:
        a = c.new("[][]f64", [1, 2, 3, 4, 5, 6], [2, 3])
        b = c.new("[][][]u8", [250, 251, 252, 253, 254, 255, 0, 1], [2, 2, 2])
        bl = c.new("[]bool", [True, False])
        ra, rb, rc = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        assert fx.futhark_entry_ranks(c.ctx, ctypes.byref(ra), ctypes.byref(rb), ctypes.byref(rc), a, b, bl) == 0
        c.sync()
        assert c.shape("[][]f64", ra) == [2, 3] and c.values("[][]f64", ra) == [2, 4, 6, 8, 10, 12]
        assert c.shape("[][][]u8", rb) == [2, 2, 2] and c.values("[][][]u8", rb) == [251, 252, 253, 254, 255, 0, 1, 2]
        assert c.values("[]bool", rc) == [False, True]
        v = ctypes.c_double()
        assert fx.futhark_index_f64_2d(c.ctx, ctypes.byref(v), a, 1, 2) == 0
        c.sync()
        assert v.value == 6.0
        assert fx.futhark_index_f64_2d(c.ctx, ctypes.byref(v), a, 2, 0) != 0
        c.error()
        c.free("[][]f64", a, ra)
        c.free("[][][]u8", b, rb)
        c.free("[]bool", bl, rc)


def test_records_and_tuples(types_fx):
    fx = types_fx
    with fx.context() as c:
        p = ctypes.c_void_p()
        assert fx.futhark_entry_make_point(c.ctx, ctypes.byref(p), 3.0, 4.0) == 0
        n, x = ctypes.c_float(), ctypes.c_float()
        assert fx.futhark_entry_norm(c.ctx, ctypes.byref(n), p) == 0
        assert fx.futhark_project_opaque_point_x(c.ctx, ctypes.byref(x), p) == 0
        c.sync()
        assert (n.value, x.value) == (5.0, 3.0)
        t = ctypes.c_void_p()
        assert fx.futhark_new_opaque_tup2_f32_i32(c.ctx, ctypes.byref(t), 1.5, 4) == 0
        r, i = ctypes.c_float(), ctypes.c_int32()
        assert fx.futhark_entry_pair_in(c.ctx, ctypes.byref(r), t) == 0
        assert fx.futhark_project_opaque_tup2_f32_i32_1(c.ctx, ctypes.byref(i), t) == 0
        c.sync()
        assert (r.value, i.value) == (6.0, 4)
        arr = ctypes.c_void_p()
        assert fx.futhark_entry_pair_out(c.ctx, ctypes.byref(r), ctypes.byref(arr), 7.0) == 0
        c.sync()
        assert r.value == 7.0 and c.values("[]i32", arr) == [1, 2]
        c.free("point", p)
        c.free("(f32, i32)", t)
        c.free("[]i32", arr)


def test_sum_type(types_fx):
    fx = types_fx
    with fx.context() as c:
        circ, rect = ctypes.c_void_p(), ctypes.c_void_p()
        assert fx.futhark_entry_circle(c.ctx, ctypes.byref(circ), 2.0) == 0
        assert fx.futhark_new_opaque_shape_rect(c.ctx, ctypes.byref(rect), 2.0, 3.0) == 0
        assert fx.futhark_variant_opaque_shape(c.ctx, circ) == 0  # manifest order: circle, rect
        assert fx.futhark_variant_opaque_shape(c.ctx, rect) == 1
        a = ctypes.c_double()
        assert fx.futhark_entry_area(c.ctx, ctypes.byref(a), circ) == 0
        c.sync()
        assert a.value == pytest.approx(3.14159 * 4)
        assert fx.futhark_entry_area(c.ctx, ctypes.byref(a), rect) == 0
        c.sync()
        assert a.value == 6.0
        w, h = ctypes.c_double(), ctypes.c_double()
        assert fx.futhark_destruct_opaque_shape_rect(c.ctx, ctypes.byref(w), ctypes.byref(h), rect) == 0
        assert (w.value, h.value) == (2.0, 3.0)
        assert fx.futhark_destruct_opaque_shape_circle(c.ctx, ctypes.byref(w), circ) == 0 and w.value == 2.0
        c.free("shape", circ, rect)


def test_array_of_records(types_fx):
    fx = types_fx
    with fx.context() as c:
        xs, ys = c.new("[]f32", [1, 2, 3]), c.new("[]f32", [10, 20, 30])
        ps = ctypes.c_void_p()
        assert fx.futhark_entry_points(c.ctx, ctypes.byref(ps), xs, ys) == 0
        assert fx.futhark_shape_opaque_arr1d_point(c.ctx, ps)[0] == 3
        s, px, one, yarr = ctypes.c_void_p(), ctypes.c_float(), ctypes.c_void_p(), ctypes.c_void_p()
        assert fx.futhark_entry_sum_points(c.ctx, ctypes.byref(s), ps) == 0
        assert fx.futhark_project_opaque_point_x(c.ctx, ctypes.byref(px), s) == 0
        c.sync()
        assert px.value == 6.0
        assert fx.futhark_index_opaque_arr1d_point(c.ctx, ctypes.byref(one), ps, 1) == 0
        assert fx.futhark_project_opaque_point_y(c.ctx, ctypes.byref(px), one) == 0
        c.sync()
        assert px.value == 20.0
        assert fx.futhark_index_opaque_arr1d_point(c.ctx, ctypes.byref(one), ps, 3) != 0
        assert "out of bounds" in c.error()
        assert fx.futhark_project_opaque_arr1d_point_y(c.ctx, ctypes.byref(yarr), ps) == 0
        assert c.values("[]f32", yarr) == [10, 20, 30]
        zipped = ctypes.c_void_p()
        assert fx.futhark_zip_opaque_arr1d_point(c.ctx, ctypes.byref(zipped), xs, yarr) == 0
        assert c.store("[]point", zipped) == c.store("[]point", ps)
        short = c.new("[]f32", [1])
        bad = ctypes.c_void_p()
        assert fx.futhark_zip_opaque_arr1d_point(c.ctx, ctypes.byref(bad), xs, short) != 0
        assert c.error() is not None and not bad.value
        assert fx.futhark_entry_points(c.ctx, ctypes.byref(bad), xs, short) == FUTHARK_SIZE_MISMATCH
        assert "invalid sizes" in c.error()
        c.free("[]f32", xs, ys, yarr, short)
        c.free("[]point", ps, zipped)
        c.free("point", s, one)


def test_fill_consumes_its_input(types_fx):
    fx = types_fx
    with fx.context() as c:
        xs = c.new("[]i32", [1, 2, 3, 4])
        out = ctypes.c_void_p()
        assert fx.futhark_entry_fill(c.ctx, ctypes.byref(out), xs, 7) == 0
        c.sync()
        assert c.values("[]i32", out) == [7, 7, 7, 7]
        c.free("[]i32", xs, out)  # the consumed input must still be freed


def test_checked_div_failure_then_success(types_fx):
    fx = types_fx
    with fx.context() as c:
        out = ctypes.c_int32(123)
        assert fx.futhark_entry_checked_div(c.ctx, ctypes.byref(out), 7, 0) == FUTHARK_PROGRAM_ERROR
        assert fx.futhark_context_sync(c.ctx) == 0
        msg = c.error()
        assert re.fullmatch(r"Error: Assertion is false: \(b != 0\)\n\n"
                            r"Backtrace:\n-> #0  (tests/reference/)?types\.fut:\d+:\d+-\d+\n", msg), msg
        assert out.value == 123
        assert fx.futhark_entry_checked_div(c.ctx, ctypes.byref(out), -7, 2) == 0
        c.sync()
        assert out.value == -4  # Futhark's `/` rounds towards negative infinity
        assert c.error() is None


def test_store_restore_round_trips(types_fx):
    fx = types_fx
    with fx.context() as c:
        objs = {}
        objs["point"] = ctypes.c_void_p()
        assert fx.futhark_new_opaque_point(c.ctx, ctypes.byref(objs["point"]), 1.0, -2.0) == 0
        objs["(f32, i32)"] = ctypes.c_void_p()
        assert fx.futhark_new_opaque_tup2_f32_i32(c.ctx, ctypes.byref(objs["(f32, i32)"]), 0.5, -9) == 0
        objs["shape"] = ctypes.c_void_p()
        assert fx.futhark_entry_rect(c.ctx, ctypes.byref(objs["shape"]), 2.0, 5.0) == 0
        xs, ys = c.new("[]f32", [1, 2]), c.new("[]f32", [3, 4])
        objs["[]point"] = ctypes.c_void_p()
        assert fx.futhark_zip_opaque_arr1d_point(c.ctx, ctypes.byref(objs["[]point"]), xs, ys) == 0
        for typ, obj in objs.items():
            data = c.store(typ, obj)
            # Futhark's binary value format, one value per component.
            assert data[:2] == b"b\x02"
            # The other two modes of store: size only, and into the caller's buffer.
            op = getattr(fx, fx.manifest["types"][typ]["ops"]["store"])
            n = ctypes.c_size_t()
            assert op(c.ctx, obj, None, ctypes.byref(n)) == 0 and n.value == len(data)
            buf = ctypes.create_string_buffer(n.value)
            p = ctypes.c_void_p(ctypes.addressof(buf))
            assert op(c.ctx, obj, ctypes.byref(p), ctypes.byref(n)) == 0
            c.sync()
            assert buf.raw == data
            back = c.restore(typ, data)
            assert back, c.error()
            assert c.store(typ, back) == data
            c.free(typ, back)
        # A []point restores to the same field values.
        pts = c.restore("[]point", c.store("[]point", objs["[]point"]))
        xarr = ctypes.c_void_p()
        assert fx.futhark_project_opaque_arr1d_point_x(c.ctx, ctypes.byref(xarr), pts) == 0
        assert c.values("[]f32", xarr) == [1, 2]
        c.free("[]f32", xarr)
        c.free("[]point", pts)
        for typ, obj in objs.items():
            c.free(typ, obj)
        c.free("[]f32", xs, ys)


def test_restore_returns_null_without_a_message_and_trusts_sum_tags(types_fx):
    """What pybridge's restore must make up for: the runtime says nothing about bad bytes, and a sum
    whose tag names no variant restores."""
    fx = types_fx
    with fx.context() as c:
        for typ in ("point", "(f32, i32)", "shape", "[]point"):
            assert not c.restore(typ, b"this is not a Futhark value at all"), typ
            assert c.error() is None, typ
        p = ctypes.c_void_p()
        assert fx.futhark_new_opaque_point(c.ctx, ctypes.byref(p), 1.0, 2.0) == 0
        data = c.store("point", p)
        assert not c.restore("(f32, i32)", data)  # second component is f32, not i32
        assert not c.restore("shape", data)
        assert not c.restore("point", data[: len(data) // 2])
        assert c.error() is None
        circ = ctypes.c_void_p()
        assert fx.futhark_entry_circle(c.ctx, ctypes.byref(circ), 1.0) == 0
        bad_tag = bytearray(c.store("shape", circ))
        assert bytes(bad_tag[:7]) == b"b\x02\x00  i8"
        bad_tag[7] = 5  # the i8 tag: no variant 5
        odd = c.restore("shape", bytes(bad_tag))
        assert odd and fx.futhark_variant_opaque_shape(c.ctx, odd) == 5
        c.free("point", p)
        c.free("shape", circ, odd)


# ------------------------------------------------------------------ cuda (needs a GPU)
@pytest.fixture(params=CUDA_BUILDS, ids=lambda b: f"{b[0]}-{b[1]}")
def cuda_built(request):
    return Built(*request.param)


@pytest.mark.gpu
def test_cuda_exports_and_manifest(cuda_built):
    fx = cuda_built
    assert_same_manifest(fx.manifest, REFERENCE / f"{fx.program}.cuda.json")
    wanted = all_manifest_functions(fx.manifest) | set(common_api("cuda"))
    assert not sorted(n for n in wanted if not hasattr(fx.lib, n))


@pytest.mark.gpu
@pytest.mark.parametrize("unified", [None, 0, 1])
def test_cuda_probe_memory(unified):
    fx = Built("cuda", "probe")
    with fx.context(unified_memory=unified) as c:
        assert c.init_error is None, c.init_error
        xs, ys = c.new("[]f32", [1, 2, 3]), c.new("[]f32", [1, 1, 1])
        res = ctypes.c_void_p()
        assert fx.futhark_entry_saxpy(c.ctx, ctypes.byref(res), 2.0, xs, ys) == 0
        c.sync()
        assert c.values("[]f32", res) == [3, 5, 7]
        assert fx.futhark_values_raw_f32_1d(c.ctx, res) != 0  # a CUdeviceptr
        out = ctypes.c_float()
        # A failed bounds check surfaces from the entry point or, asynchronously, from the next sync.
        rc = fx.futhark_entry_index_at(c.ctx, ctypes.byref(out), xs, 10)
        rc = rc or fx.futhark_context_sync(c.ctx)
        assert rc == FUTHARK_PROGRAM_ERROR
        assert c.error().startswith("Error: Index [10] out of bounds for array of shape [3].")
        # new_raw over the library's own device pointer: wraps, does not copy, does not free.
        raw = fx.futhark_new_raw_f32_1d(c.ctx, fx.futhark_values_raw_f32_1d(c.ctx, res), 3)
        assert raw and c.values("[]f32", raw) == [3, 5, 7]
        c.free("[]f32", raw)
        assert c.values("[]f32", res) == [3, 5, 7]
        c.free("[]f32", xs, ys, res)
