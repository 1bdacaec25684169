"""C shims for API mode: one C function per entry point that makes the call, the sync the C API
requires before scalar results may be read, and the error read, in one crossing from Python.

    int pybridge_call_<cfun>(struct futhark_context *ctx, int sync, char **err, <outs>, <ins>);

The caller holds the context lock (docs/DESIGN.md, "Threads"); cffi releases the GIL for the whole
shim, so a long call or sync blocks no other Python thread. ``*err`` receives Futhark's message
(malloc'd, the caller frees it) when the return code is nonzero.

Each entry point also gets a packed shim, of one C signature for all of them, which the compiled
call path (_callpath.c) calls through its address:

    int pybridge_packed_<cfun>(struct futhark_context *ctx, int sync, char **err, void **outs,
                               const void *ins);

``outs[k]`` points at the k-th result's storage, ``ins`` at an array of ``pybridge_slot`` unions
(one per input, the member of the input's C type set; _callpath.c declares the same union).
"""

from __future__ import annotations

from .cdef import CDefBuilder
from .manifest import Manifest
from .types import PRIMITIVES

PREFIX = "pybridge_call_"
PACKED_PREFIX = "pybridge_packed_"

# The union _callpath.c writes each input into: the member named by the input's C type.
_SLOT = """typedef union {
  int8_t i8; int16_t i16; int32_t i32; int64_t i64;
  uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
  float f32; double f64; bool b; void *p;
} pybridge_slot;
"""
_SLOT_MEMBER = {"int8_t": "i8", "int16_t": "i16", "int32_t": "i32", "int64_t": "i64", "uint8_t": "u8",
                "uint16_t": "u16", "uint32_t": "u32", "uint64_t": "u64", "float": "f32", "double": "f64",
                "bool": "b"}


def shim_name(cfun: str) -> str:
    return PREFIX + cfun


def packed_shim_name(cfun: str) -> str:
    return PACKED_PREFIX + cfun


def shims_for(manifest: Manifest) -> tuple[str, str]:
    """(cdef declarations, C source) of the shims of every entry point in ``manifest``."""
    b = CDefBuilder(manifest)
    decls, defs = [], [_SLOT]
    for e in manifest.entry_points.values():
        outs = [f"{b.out_param(o.type)}out{i}" for i, o in enumerate(e.outputs)]
        ins = [f"{b.in_param(p.type, p.unique)} in{i}" for i, p in enumerate(e.inputs)]
        params = ", ".join(["struct futhark_context *ctx", "int sync", "char **err", *outs, *ins])
        args = ", ".join(["ctx", *(f"out{i}" for i in range(len(outs))), *(f"in{i}" for i in range(len(ins)))])
        head = f"int {shim_name(e.cfun)}({params})"
        decls.append(head + ";")
        defs.append(
            f"{head} {{\n"
            f"  int rc = {e.cfun}({args});\n"
            "  if (rc == 0 && sync) rc = futhark_context_sync(ctx);\n"
            "  if (rc != 0) *err = futhark_context_get_error(ctx);\n"
            "  return rc;\n"
            "}"
        )
        # The packed shim: the same call, its arguments read from the slots.
        packed = (f"int {packed_shim_name(e.cfun)}(struct futhark_context *ctx, int sync, char **err, "
                  "void **outs, const void *ins)")
        decls.append(packed + ";")
        outs_p = [f"({b.out_param(o.type)})outs[{i}]" for i, o in enumerate(e.outputs)]
        ins_p = [f"slots[{i}].{_SLOT_MEMBER[b.c_type(p.type)]}" if p.type in PRIMITIVES
                 else f"({b.in_param(p.type, p.unique)})slots[{i}].p" for i, p in enumerate(e.inputs)]
        defs.append(
            f"{packed} {{\n"
            "  const pybridge_slot *slots = (const pybridge_slot *)ins;\n"
            "  (void)slots;\n"
            f"  int rc = {e.cfun}({', '.join(['ctx', *outs_p, *ins_p])});\n"
            "  if (rc == 0 && sync) rc = futhark_context_sync(ctx);\n"
            "  if (rc != 0) *err = futhark_context_get_error(ctx);\n"
            "  return rc;\n"
            "}"
        )
    return "\n".join(decls) + "\n", "\n".join(defs) + "\n"
