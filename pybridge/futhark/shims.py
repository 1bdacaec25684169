"""C shims for API mode: one C function per entry point that makes the call, the sync the C API
requires before scalar results may be read, and the error read, in one crossing from Python.

    int pybridge_call_<cfun>(struct futhark_context *ctx, int sync, char **err, <outs>, <ins>);

The caller holds the context lock (docs/DESIGN.md, "Threads"); cffi releases the GIL for the whole
shim, so a long call or sync blocks no other Python thread. ``*err`` receives Futhark's message
(malloc'd, the caller frees it) when the return code is nonzero.
"""

from __future__ import annotations

from .cdef import CDefBuilder
from .manifest import Manifest

PREFIX = "pybridge_call_"


def shim_name(cfun: str) -> str:
    return PREFIX + cfun


def shims_for(manifest: Manifest) -> tuple[str, str]:
    """(cdef declarations, C source) of the shims of every entry point in ``manifest``."""
    b = CDefBuilder(manifest)
    decls, defs = [], []
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
    return "\n".join(decls) + "\n", "\n".join(defs) + "\n"
