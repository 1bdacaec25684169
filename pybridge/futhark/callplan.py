"""A per-entry-point call plan: the common call, compiled once per entry point into one Python function.

The plan covers calls whose arguments are positional: scalars of the types cffi takes as they are
(Python and NumPy integers for integer parameters, Python and NumPy floats for f64, np.float32 and
floats within range for f32, bool and np.bool_ for bool) pass straight to the C call, other scalars
through the parameter's converter, and handles of the parameter's own type and library pass their
pointer. Anything else (keywords, NumPy arrays, lists, records as dicts) goes to
``EntryPoint._call_general``, which converts and checks it by the documented rules.
No check is dropped, each one moves:

- integer range: cffi checks it in the C call and raises OverflowError before anything runs; the
  plan then re-runs the parameter's converter for the error that names the parameter;
- handle validity (not freed, not consumed, context open): tested under the context lock, right
  before the C call, so a free() or consume in another thread cannot slip in between;
- a handle in a consuming position passed twice: identity test in the plan, then the general path
  raises its error;
- Futhark's error: read under the same lock as the call (in C by the shim in API mode);
- aliasing (aliases.py): a consumed handle that may share memory with another live handle goes to
  the general path, which consumes a copy; non-unique results join the non-unique handle
  arguments' alias group;
- size parameters (sizes.py): their converter always runs (it checks >= 0).

Scalar results are read from one preallocated buffer per entry point and handle results from one
preallocated cell, under the lock, so a call allocates no C memory for them.

Where the compiled extension is in use (callpath.py) and the library is in API mode, the plan is
``_callpath.Plan``: the same steps in C (_callpath.c), called through the entry point's packed
shim (shims.py). The Python plan below stays the fallback and the reference the C one is tested
against (tests/test_call_path_differential.py).
"""

from __future__ import annotations

from typing import Any, Callable

import _cffi_backend  # type: ignore[import-untyped]  # cffi's own backend (no stubs)
import numpy as np

from .aliases import AliasGroup, join, shared_with_live
from .callpath import compiled, plans_compiled
from .context import error_for_message, function_address
from .errors import InvalidHandleError
from .handles import ArrayHandle, OpaqueHandle, _PythonValue
from .kinds import ArrayKind
from .shims import packed_shim_name, shim_name
from .types import _NP_INTS, PRIMITIVES

# The exact types an argument may have to skip its converter: cffi takes them as they are, with the
# value the converter would give, and checks an integer's range itself (OverflowError: the plan
# then runs the converter for the error that names the parameter). NumPy scalars are what loaders
# return (issue 23). Not here: f32 from a float or np.float64 (a finite value beyond f32's range
# must raise, cffi would pass inf: tested inline), f16 (passed as its bits), bool for numbers and
# numbers for bool (refused by the converter).
_INTS = frozenset({int}) | _NP_INTS
_PASS: dict[str, frozenset[type]] = {
    **{name: _INTS for name in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")},
    "f64": frozenset({float, np.float64, np.float32, np.float16}),
    "f32": frozenset({np.float32, np.float16}),
    "bool": frozenset({bool, np.bool_}),
}
_F32_MAX = float(np.finfo(np.float32).max)

# The type codes of _callpath.c (its enum, in this order).
CODES = {name: i for i, name in enumerate(("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
                                           "bool", "array", "opaque"))}



def configure_compiled(**replace: Any) -> bool:
    """Give the compiled path the Python objects it uses (once, at import). ``replace`` swaps some
    of them (by ``_callpath.configure``'s parameter names): tests inject a difference with it to
    show that the differential test sees one (tests/test_call_path_differential.py). Returns
    whether the compiled path reads and writes alias groups through their slots (else getattr)."""
    parts = {"invalid_handle": InvalidHandleError, "join": join, "shared": shared_with_live,
             "error_for_message": error_for_message, "release": _PythonValue._release,
             "register": _PythonValue._register,
             "numpy_ints": tuple(_INTS - {int}), "f64": np.float64, "f32": np.float32, "f16": np.float16,
             "bool": np.bool_, "f32_max": _F32_MAX, "alias_group": AliasGroup}
    unknown = set(replace) - set(parts)
    if unknown:
        raise TypeError(f"configure_compiled: unknown parts {sorted(unknown)}")
    return bool(compiled.configure(*{**parts, **replace}.values()))


def numpy_scalar_layouts() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Tell the compiled path which NumPy scalars it may read and make in place (_callpath.c,
    numpy_scalars: it checks each against a sample made by NumPy). Returns the type codes it took
    for arguments read and for results made."""
    entries = []

    def sample(dtype: np.dtype) -> tuple[Any, bytes]:
        a = np.frombuffer(bytes(range(0x41, 0x41 + dtype.itemsize)), dtype)  # no NaN in any float type
        return a[0], a.tobytes()

    for name, code in CODES.items():  # results: the type indexing the result's buffer gives
        prim = PRIMITIVES.get(name)
        if prim is not None and name != "bool":
            entries.append((code, prim.dtype.type, *sample(prim.dtype), True))
    for t in sorted(_NP_INTS, key=lambda t: t.__name__):  # arguments: NumPy integers, np.float32, np.bool_
        d = np.dtype(t)
        entries.append((CODES[f"{'i' if d.kind == 'i' else 'u'}{8 * d.itemsize}"], t, *sample(d), False))
    entries.append((CODES["f32"], np.float32, *sample(np.dtype(np.float32)), False))
    flags = np.array([True, False])
    entries.append((CODES["bool"], np.bool_, flags[0], b"\x01", False))
    singletons = flags[0] is np.array([True])[0] and flags[1] is np.array([False])[0]
    return compiled.numpy_scalars(tuple(entries), *((flags[0], flags[1]) if singletons else (None, None)))


def cffi_pointer_layout() -> bool:
    """Tell the compiled path whether it may read a cffi pointer object's address where cffi keeps
    it (_callpath.c, cffi_layout: checked on pointers cffi made here by a cast and by reading a
    cell, as Futhark's results arrive); where not, it asks ``ffi.cast`` for it. cffi's backend
    makes the types: an FFI would import its C parser, which ``import pybridge.futhark`` does not."""
    assert compiled is not None
    struct_ptr = _cffi_backend.new_pointer_type(_cffi_backend.new_struct_type("struct pybridge_layout_probe"))
    address = 0x5EED_0000_1234_5678
    made = _cffi_backend.cast(struct_ptr, address)
    cell = _cffi_backend.newp(_cffi_backend.new_pointer_type(struct_ptr), None)
    cell[0] = made
    void_ptr = _cffi_backend.cast(_cffi_backend.new_pointer_type(_cffi_backend.new_void_type()), address)
    samples = tuple((p, _cffi_backend.typeof(p)) for p in (made, cell[0], void_ptr))
    return bool(compiled.cffi_layout(samples, address))


if compiled is not None:
    # _callpath.c's pass sets are _PASS's (its f32 rule is the plan's, spelled out there).
    assert _PASS["f64"] == {float, np.float64, np.float32, np.float16} and _PASS["bool"] == {bool, np.bool_}
    configure_compiled()
    numpy_scalar_layouts()
    cffi_pointer_layout()


def compiled_plan(ep: Any) -> Any:
    """``ep``'s plan in C (a ``_callpath.Plan``, called with the arguments alone), or None where the
    Python plan must serve: no extension (or PYBRIDGE_CALL_PATH=python), ABI mode (no shims), a
    prebuilt module without packed shims, or more than _callpath.MAX_ARGS inputs or outputs."""
    lib, info = ep.library, ep.info
    if not plans_compiled() or lib.mode != "api" or max(len(info.inputs), len(info.outputs)) > compiled.MAX_ARGS:
        return None
    ffi = lib.ffi
    try:
        shim = function_address(ffi, lib.lib, packed_shim_name(info.cfun))
    except (AttributeError, ffi.error):  # a module built before packed shims existed
        return None
    inputs = []
    for i, p in enumerate(info.inputs):
        prim = PRIMITIVES.get(p.type)
        what = f"{ep.name}: parameter {p.name!r}"
        if prim is not None:
            # As the Python plan's `exact`; 2: a size, which passes as it is when it is an int or
            # NumPy integer >= 0 within i64 (what its converter would return it as), else converted.
            size = p.name in ep._sizes.size_params
            fast = 2 if size and prim.name == "i64" else int(not size and prim.name in _PASS)
            inputs.append((CODES[prim.name], fast, ep._convs[i], None, None, what, None, False))
            continue
        kind = lib.types[p.type]
        array = isinstance(kind, ArrayKind)
        by = f"entry point {ep.name!r} (parameter {p.name!r})" if p.unique else None
        inputs.append((CODES["array" if array else "opaque"], 0, None, kind, ArrayHandle if array else OpaqueHandle,
                       what, by, not p.unique))
    outputs = []
    for o in info.outputs:
        prim = PRIMITIVES.get(o.type)
        if prim is not None:
            buf = np.zeros(1, dtype=prim.dtype)  # f16: its bits, read as float16
            outputs.append((CODES[prim.name], None, None, None, None, buf, buf.ctypes.data, False))
            continue
        kind = lib.types[o.type]
        array = isinstance(kind, ArrayKind)
        free = function_address(ffi, lib.lib, kind.info.ops["free"])
        outputs.append((CODES["array" if array else "opaque"], kind, ArrayHandle if array else OpaqueHandle,
                        kind.free_fn, free, None, None, not o.unique))
    sync = any(o.type in PRIMITIVES for o in info.outputs)  # scalar results: the C API asks for a sync
    return compiled.Plan(ep, lib.context._state, shim, sync, info.cfun, tuple(inputs), tuple(outputs))


def compile_plan(ep: Any) -> Callable[..., Any]:
    """The fast ``__call__`` of ``ep`` (an ``entry.EntryPoint``, the layer above): its compiled
    plan (a function of the arguments alone) where there is one, else a Python function of
    ``self, *args, **kwargs``."""
    plan = compiled_plan(ep)
    if plan is not None:
        return plan  # type: ignore[no-any-return]
    lib, info = ep.library, ep.info
    ffi, state = lib.ffi, lib.context._state
    api = lib.mode == "api"
    sync = any(o.type in PRIMITIVES for o in info.outputs)  # scalar results: the C API asks for a sync
    env: dict[str, Any] = {
        "state": state, "acquire": state.lock.acquire, "release": state.lock.release,
        "lib": lib,
        "closed": lambda: InvalidHandleError("the Futhark context is closed"),
        "ArrayHandle": ArrayHandle, "OpaqueHandle": OpaqueHandle, "join": join, "shared": shared_with_live,
    }
    n = len(info.inputs)
    args = [f"a{i}" for i in range(n)]
    pre: list[str] = []  # before the lock: type tests and conversions (fallback to the general path)
    live: list[str] = []  # under the lock: handle validity
    c_args: list[str] = []
    handles: list[int] = []
    for i, p in enumerate(info.inputs):
        prim = PRIMITIVES.get(p.type)
        if prim is not None:
            exact = None if p.name in ep._sizes.size_params else _PASS.get(prim.name)
            env[f"conv{i}"] = ep._convs[i]
            if exact is None:
                pre.append(f"a{i} = conv{i}(a{i})")
            else:
                env[f"T{i}"] = exact
                if prim.name == "f32":  # np.float32 as it is; a float or np.float64 within f32's range as a float
                    env["F32"], env["F64"], env["F32_MAX"] = np.float32, np.float64, _F32_MAX
                    # A float is compared as it is (no float() call: issue 23); NaN fails both tests.
                    pre += [f"if (t := type(a{i})) is not F32:",
                            "    if t is float:",
                            f"        if not -F32_MAX <= a{i} <= F32_MAX: a{i} = conv{i}(a{i})  # NaN, inf, out of range: the rule",
                            f"    elif t is F64 and -F32_MAX <= a{i} <= F32_MAX: a{i} = float(a{i})",
                            f"    else: a{i} = conv{i}(a{i})  # other types, and np.float64 NaN, inf, out of range: the rule"]
                else:
                    pre.append(f"if type(a{i}) not in T{i}: a{i} = conv{i}(a{i})")
            c_args.append(f"a{i}")
            continue
        kind = lib.types[p.type]
        env[f"K{i}"] = kind
        htype, kattr = ("ArrayHandle", "atype") if isinstance(kind, ArrayKind) else ("OpaqueHandle", "otype")
        pre.append(f"if type(a{i}) is not {htype} or a{i}.{kattr} is not K{i}: return self._call_general(args)")
        env[f"W{i}"] = f"{ep.name}: parameter {p.name!r}"
        live.append(f"if a{i}._status is not None: a{i}._live_ptr(W{i})  # raises InvalidHandleError naming the parameter")
        c_args.append(f"a{i}._ptr")
        handles.append(i)
    consumed = [i for i in handles if info.inputs[i].unique]
    for i in consumed:  # the same handle twice where one is consumed: the general path's error
        for j in handles:
            if j != i:
                pre.append(f"if a{i} is a{j}: return self._call_general(args)")
        # shared with another live handle: the general path consumes a copy
        pre.append(f"if a{i}._aliases is not None and shared(a{i}): return self._call_general(args)")
    outs: list[str] = []
    results: list[str] = []
    shells: list[str] = []  # under the lock, before the call: an empty handle object per handle result
    fill: list[str] = []  # right after a successful call: the shells take the results (no call in between)
    env["new"], env["ctxo"], env["values"], env["orphan"] = object.__new__, lib.context, state.values, state.free_orphan
    for k, o in enumerate(info.outputs):
        prim = PRIMITIVES.get(o.type)
        if prim is not None:
            buf = np.zeros(1, dtype=prim.dtype)
            env[f"buf{k}"] = buf
            env[f"out{k}"] = ffi.from_buffer(f"{prim.ctype}[]", buf)  # f16: its bits, read as float16
            results.append(f"buf{k}[0]")
        else:
            kind = lib.types[o.type]
            env[f"out{k}"] = lib.codec.out_cell(o.type)
            env[f"RK{k}"], env[f"F{k}"] = kind, kind.free_fn
            array = isinstance(kind, ArrayKind)
            env[f"HT{k}"] = ArrayHandle if array else OpaqueHandle
            # A key already taken is a dead handle's whose __del__ an interrupt skipped: its value
            # is freed here, before the C call (context.py, free_orphan).
            shells.append(f"h{k} = new(HT{k}); k{k} = id(h{k})")
            shells.append(f"if k{k} in values: orphan(k{k})")
            # ArrayHandle/OpaqueHandle.__init__ spelled out as attribute stores, registered last.
            fill.append(
                f"p = out{k}[0]; " + (f"h{k}.atype = RK{k}; h{k}._shape = None; " if array else f"h{k}.otype = RK{k}; ")
                + f"h{k}.library = lib; h{k}._ctx = ctxo; h{k}._ptr = p; h{k}._free_fn = F{k}; h{k}._status = None; "
                f"h{k}._keep = None; h{k}._aliases = None; values[k{k}] = (F{k}, p)"
            )
            results.append(f"h{k}")
        outs.append(f"out{k}")
    consume = [f"a{i}._mark_consumed({f'entry point {ep.name!r} (parameter {info.inputs[i].name!r})'!r})"
               for i in consumed]
    handle_outs = [k for k, o in enumerate(info.outputs) if o.type not in PRIMITIVES]
    if api:
        env["shim"] = getattr(lib.lib, shim_name(info.cfun))
        env["err"] = ffi.new("char **")
        env["NULL"] = ffi.NULL
        call = f"rc = shim(state.ctx, {int(sync)}, err, {', '.join(outs + c_args)})"
        check = [f"if rc: m = err[0]; err[0] = NULL; raise self._explained(lib.context.error_from(rc, m, {info.cfun!r}), args)"]
    else:
        env["fn"] = ep._fn
        env["sync"] = lib.lib.futhark_context_sync
        env["get_error"] = lib.lib.futhark_context_get_error
        call = f"rc = fn(state.ctx, {', '.join(outs + c_args)})"
        # The message taken by a C call at once: Futhark keeps the first one until it is taken.
        check = [f"if rc: m = get_error(state.ctx); raise self._explained(lib.context.error_from(rc, m, {info.cfun!r}), args)"]
        if sync:
            check += ["rc = sync(state.ctx)",
                      "if rc: m = get_error(state.ctx); raise lib.context.error_from(rc, m, 'futhark_context_sync')"]
    env["settle"] = _settler(lib, [env[f"out{k}"] for k in handle_outs], [env[f"F{k}"] for k in handle_outs],
                             [f"entry point {ep.name!r} (parameter {info.inputs[i].name!r})" for i in consumed],
                             env.get("err"))
    ret = results[0] if len(results) == 1 else "(" + ", ".join(results) + ",)"
    # Non-unique handle results may alias the non-unique handle arguments and each other.
    shared_outs = [k for k, o in enumerate(info.outputs) if not o.unique and o.type not in PRIMITIVES]
    shared_ins = [i for i in handles if not info.inputs[i].unique]
    link: list[str] = []
    if shared_outs and len(shared_outs) + len(shared_ins) > 1:
        outs_h = [f"h{k}" for k in shared_outs]
        general = f"join([{', '.join([f'a{i}' for i in shared_ins] + outs_h)}])"
        if shared_ins:
            # The common case, inlined: the handle arguments are already on one group's root (from
            # an earlier call) and the results are new, so the results join that group. Else join().
            same = "".join(f" and a{i}._aliases is g" for i in shared_ins[1:])
            link += [f"g = a{shared_ins[0]}._aliases",
                     f"if g is not None and g.parent is None{same}:",
                     f"    {' = '.join(f'{o}._aliases' for o in outs_h)} = g; g.live += {len(outs_h)}",
                     "else:",
                     f"    {general}"]
        else:
            link.append(general)
    unpack = f"{', '.join(args)}, = args" if n else "pass"
    shell_args = "(" + "".join(f"h{k}, " for k in range(len(info.outputs)) if info.outputs[k].type not in PRIMITIVES) + ")"
    consumed_args = "(" + "".join(f"a{i}, " for i in consumed) + ")"
    # Ctrl-C (RELIABILITY.md): a KeyboardInterrupt surfaces at the first check after the C call, the
    # end of its own CALL instruction, before `rc` is stored. `settle` then finishes the bookkeeping
    # (results owned or freed, consumed arguments invalid and freed) before it propagates. The
    # shells take the results with attribute stores only: no call, so no check, in between.
    lines = [
        "def __call__(self, /, *args, **kwargs):",  # positional-only: a parameter may be named self
        f"    if kwargs or len(args) != {n}: return self._call_general(self._bind(args, kwargs))",
        f"    {unpack}",
        *(f"    {line}" for line in pre),
        # acquire() inside the try: an interrupt at its end (lock taken) then still releases it;
        # one while it waits raises without the lock (release() then says so: RuntimeError).
        "    try:",
        "        acquire()",
        "        if not state.open: raise closed()",
        *(f"        {line}" for line in live),
        *(f"        {line}" for line in shells),
        "        rc = None",
        "        try:",
        f"            {call}",
        *(["            if not rc:"] + [f"                {line}" for line in fill] if fill else []),
        *(f"            {line}" for line in consume),
        "        except BaseException as e:",
        "            if rc is None and type(e) is OverflowError:",  # only cffi's argument conversion raises it: name the parameter
        "                self._convert_scalars(args)",
        "                raise",
        f"            settle(rc, {shell_args}, {consumed_args})",
        "            raise",
        *(f"        {line}" for line in check),
        *(f"        {line}" for line in link),
        f"        res = {ret}",
        # release() is the first call here: a Ctrl-C arriving while this handles another error (a
        # failed call's) surfaces at the end of the first call, which must not come before it.
        # RuntimeError: acquire() failed, which it does only while it waits (this thread held none).
        "    except BaseException:",
        "        try:",
        "            release()",
        "        except RuntimeError:",  # acquire() failed: not this thread's lock
        "            pass",
        "        raise",
        "    release()",
        "    return res",
    ]
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<pybridge call plan for {info.name}>", "exec"), env)
    fn = env["__call__"]
    fn.plan_source = source  # for reading and debugging: print(type(ep).__call__.plan_source)
    return fn


def _settler(lib: Any, cells: list[Any], frees: list[Any], consumed_by: list[str], err: Any) -> Callable[..., None]:
    """The bookkeeping a call plan finishes when an exception (a KeyboardInterrupt from Ctrl-C, or
    whatever a signal handler raises) cuts it short after the C call ran. ``rc`` is None when the
    call's return code was lost (the exception came at the end of the call's own instruction), else
    the code. Results their shells did not take are freed (nobody will see them); consumed arguments
    are marked consumed, which frees them (idempotent). Runs under the context lock.

    ``cells``/``frees``: the out cell and free function of each handle result; ``err``: the API-mode
    shim's message cell (NULL unless a call failed and its message was not taken yet), or None in
    ABI mode, where a failed call leaves its message pending in the context."""
    state, ffi = lib.context._state, lib.ffi

    def settle(rc: int | None, shells: tuple[Any, ...], args: tuple[Any, ...]) -> None:
        # A failed call's message is taken here if it was not yet (Futhark keeps the first until
        # taken; a message left in the shim's cell would make a later settle read a failure).
        if err is not None:
            msg = err[0]
            err[0] = ffi.NULL
        else:
            msg = lib.lib.futhark_context_get_error(state.ctx)
        if msg != ffi.NULL:
            lib.lib.free(msg)
        if rc is None:
            rc = 0 if msg == ffi.NULL else 1
        if rc == 0:
            for h, cell, free in zip(shells, cells, frees):
                if id(h) not in state.values:  # not taken by its shell
                    free(state.ctx, cell[0])
        for a, by in zip(args, consumed_by):
            a._mark_consumed(by)

    return settle
