"""Manifests of compiler versions other than the one used here (0.25.32): the ones a real Futhark
0.25.34 wrote (tests/reference/<prog>.<backend>.json) and one in the form of Futhark 0.26.1 and newer
(tests/reference/probe.c.0.26.json: probe.c.json rewritten by the documented 0.26 rules, a single
``output`` per entry point, a tuple result as one opaque, ``attributes``/``doc`` keys). Parsing and
the cffi declarations need no compiler; loading 0.25.34's against the libraries built here does.
"""

from __future__ import annotations

import json
from pathlib import Path

import cffi
import pytest

from conftest import library_sources
from pybridge.futhark.cdef import cdef_for
from pybridge.futhark.manifest import ArrayInfo, OpaqueInfo, load_manifest

REFERENCE = Path(__file__).resolve().parent / "reference"
RECORDED = sorted(p.name for p in REFERENCE.glob("*.json") if p.name.count(".") == 2)  # <prog>.<backend>.json


def test_the_recorded_manifests_are_there():
    assert RECORDED == ["probe.c.json", "probe.cuda.json", "types.c.json", "types.cuda.json", "types.multicore.json"]


@pytest.mark.parametrize("name", RECORDED + ["probe.c.0.26.json"])
def test_every_entry_point_and_type_is_read(name):
    raw = json.loads((REFERENCE / name).read_text())
    m = load_manifest(REFERENCE / name)
    assert m.backend == raw["backend"]
    assert set(m.entry_points) == set(raw["entry_points"])
    assert set(m.types) == set(raw["types"])
    for ep_name, ep in raw["entry_points"].items():
        got = m.entry_points[ep_name]
        outs = ep["outputs"] if "outputs" in ep else [ep["output"]]
        assert [o.type for o in got.outputs] == [o["type"] for o in outs]
        assert [(i.name, i.type, i.unique) for i in got.inputs] == [(i["name"], i["type"], i["unique"]) for i in ep["inputs"]]
        assert got.single_output == ("output" in ep)
    for t_name, t in raw["types"].items():
        assert isinstance(m.types[t_name], ArrayInfo if t["kind"] == "array" else OpaqueInfo)


@pytest.mark.parametrize("name", RECORDED + ["probe.c.0.26.json"])
def test_cffi_declarations_parse(name):
    """The cdef pybridge binds with declares every function the manifest names, and cffi accepts it."""
    m = load_manifest(REFERENCE / name)
    cdef = cdef_for(m)
    cffi.FFI().cdef(cdef)
    for ep in m.entry_points.values():
        assert f" {ep.cfun}(" in cdef


def test_0_26_tuple_result_is_one_opaque_with_numbered_fields():
    m = load_manifest(REFERENCE / "probe.c.0.26.json")
    pair = m.entry_points["pair"]
    assert pair.single_output and [o.type for o in pair.outputs] == ["(f32, bool, f16)"]
    tup = m.types["(f32, bool, f16)"]
    assert [f.name for f in tup.record.fields] == ["0", "1", "2"]
    assert [f.type for f in tup.record.fields] == ["f32", "bool", "f16"]
    assert m.entry_points["saxpy"].doc == "entry point saxpy" and m.entry_points["saxpy"].attributes == ()


@pytest.mark.parametrize("program", ["probe", "types"])
@pytest.mark.parametrize("types_so", library_sources("types", ("c",)))
def test_recorded_0_25_34_manifest_binds_the_library_built_here(program, types_so, tmp_path):
    """0.25.34's manifest drives a 0.25.32 library: copy the library beside the recorded manifest."""
    import pybridge.futhark as pf

    built = types_so.with_name(f"lib{program}.so")  # build/reference/c/
    (tmp_path / f"lib{program}.so").write_bytes(built.read_bytes())
    (tmp_path / f"{program}.json").write_text((REFERENCE / f"{program}.c.json").read_text())
    with pf.load(tmp_path / f"{program}.json") as lib:
        assert lib.manifest.version.startswith("0.25.34")
        if program == "probe":
            assert lib.trivial(41) == 42
        else:
            assert lib.checked_div(9, 2) == 4
