"""Futhark configuration and context: creation, sync, errors, report, deterministic close.

Lifetime rules from docs/c-api.rst that this layer enforces:
- a configuration outlives its context and is used for one context only;
- ``futhark_context_get_error`` right after ``futhark_context_new`` says whether creation failed;
- ``futhark_context_sync`` before ``futhark_context_free`` (futhark-ffi skipped this);
- every value is freed before its context; host buffers given to the asynchronous ``new``/``values``
  functions stay alive until the next sync.
"""

from __future__ import annotations

import atexit
import json
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .callpath import compiled
from .errors import FutharkError, InvalidHandleError, error_for


MAX_THREADS = 1024  # num_threads above this is refused (RELIABILITY.md: the scheduler exits)


@dataclass
class Config:
    """Context configuration; every field maps to one ``futhark_context_config_*`` call."""

    debugging: bool = False
    logging: bool = False
    profiling: bool = False
    tuning: Mapping[str, int] = field(default_factory=dict)
    cache_file: str | None = None
    num_threads: int | None = None  # multicore
    device: str | None = None  # GPU backends: name substring or "#k"
    unified_memory: int | None = None  # cuda/hip: 0 never, 1 always, 2 if supported (cuda default)
    platform: str | None = None  # opencl
    nvrtc_options: tuple[str, ...] = ()  # cuda
    default_thread_block_size: int | None = None
    default_grid_size: int | None = None
    default_tile_size: int | None = None

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "Config":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown Futhark configuration option(s) {unknown}; known: {sorted(known)}")
        return cls(**kwargs)


class _PythonState:
    """The pure-Python storage of _State (the compiled path's is ``_callpath.State``)."""

    open: bool
    lock: Any
    values: dict[int, tuple[Callable[[Any, Any], int], Any]]

    def _free_listed(self) -> None:
        """close()'s first step in the compiled registry (``_callpath.State``); here ``values``
        is the whole registry."""


class _State(compiled.State if compiled is not None else _PythonState):  # type: ignore[misc]
    """What the context's finaliser needs, kept apart from the Context so handles can share it.

    ``lock`` is the context's one lock (docs/DESIGN.md, "Threads"): every C call on the context is
    made under it together with the checks before it (open, handle still live) and the error read
    after it. Reentrant, because a handle's ``__del__`` may run in a thread that already holds it."""

    def __init__(self, ffi: Any, lib: Any, cfg: Any, ctx: Any):
        self.ffi, self.lib, self.cfg, self.ctx = ffi, lib, cfg, ctx
        self.open = True
        self.ctx_freed = self.cfg_freed = False  # close() done up to there (it may be interrupted)
        # threading.RLock, or the compiled path's lock of the same rules (taken there without a call)
        self.lock = compiled.Lock() if compiled is not None else threading.RLock()
        # id(handle) -> (free function, pointer) for every live value, so close() can free them. The
        # compiled call path registers its results with the pointer as an address (an int).
        self.values = {}
        if compiled is not None:
            self._raw_ctx = int(ffi.cast("uintptr_t", ctx))  # what the compiled path calls with
        _open_states.add(self)

    def free_orphan(self, key: int) -> None:
        """Free the value registered under ``key``, whose handle is gone: a new handle at the same
        address is about to register (keys are ``id(handle)``, unique only among live objects).
        A Ctrl-C surfacing at the first instruction of a handle's ``__del__`` makes Python skip
        the body (the interrupt is reported as ignored), which leaves the entry behind; before,
        the new handle's entry replaced it and the value was never freed (RELIABILITY.md,
        "Ctrl-C"). The caller holds ``lock``, before the C call whose result the new handle takes.
        As in Value._release: unregistered, then freed, no call in between."""
        values = self.values
        if self.open and key in values:
            free, ptr = values[key]
            if type(ptr) is int:  # registered by the compiled path: an address (cast while still registered)
                ptr = self.ffi.cast("void *", ptr)
            del values[key]
            free(self.ctx, ptr)

    def close(self, timeout: float = -1) -> bool:
        """Free values, sync, free the context and its configuration, once, after the calls in
        flight finish. With a timeout (interpreter exit) a call that does not finish in time leaves
        the C objects alive (the process is ending) and only marks the context closed."""
        if timeout < 0:
            with self.lock:  # not acquire() then try: an interrupt between them would keep the lock
                return self._close_locked()
        try:  # acquire() inside it, for the same reason; the handler as in callplan.py's plans
            if not self.lock.acquire(timeout=timeout):
                self.open = False
                return False
            done = self._close_locked()
        except BaseException:
            try:
                self.lock.release()
            except RuntimeError:  # acquire() was interrupted while it waited: not held
                pass
            raise
        self.lock.release()
        return done

    def _close_locked(self) -> bool:
        # Resumable (RELIABILITY.md, "Ctrl-C"): a KeyboardInterrupt is raised only at the end of
        # a call, so each value leaves the registry right before the C call that frees it, and
        # each C object is marked gone right before its free: a close() cut short is finished
        # by the next close() (or the finaliser), never freeing anything twice.
        self.open = False
        self._free_listed()  # the values registered in C (_callpath.c, "registry"), then the rest
        values = self.values
        for key, (free, ptr) in list(values.items()):
            if key in values:
                if type(ptr) is int:  # the compiled path's address; cast before the entry goes
                    ptr = self.ffi.cast("void *", ptr)
                del values[key]
                free(self.ctx, ptr)
        if not self.ctx_freed:
            self.lib.futhark_context_sync(self.ctx)
            self.ctx_freed = True
            self.lib.futhark_context_free(self.ctx)
        if not self.cfg_freed:
            self.cfg_freed = True
            self.lib.futhark_context_config_free(self.cfg)
        return True


_open_states: "weakref.WeakSet[_State]" = weakref.WeakSet()
EXIT_WAIT_S = 5.0  # how long interpreter exit waits for a call in flight before leaving the context


@atexit.register
def _close_at_exit() -> None:
    """Close every context before the interpreter finalises, while daemon threads still run Python:
    a thread calling in then gets InvalidHandleError instead of a freed context, and nothing is left
    for finalisers that would run after daemon threads are frozen (perhaps holding a lock)."""
    for state in list(_open_states):
        state.close(timeout=EXIT_WAIT_S)


def function_address(ffi: Any, lib: Any, name: str) -> int:
    """The address of C function ``name`` of ``lib`` (API mode: a function of the module; ABI
    mode: already a function pointer), for the compiled call path to call."""
    fn = getattr(lib, name)
    return int(ffi.cast("uintptr_t", fn if isinstance(fn, ffi.CData) else ffi.addressof(lib, name)))


def error_for_message(code: int, message: str, function: str) -> FutharkError:
    """The exception for a failed call given Futhark's message ("" when it left none)."""
    return error_for(code, (message or f"{function} failed with code {code} (no message from Futhark)").rstrip("\n"), function)


class Context:
    """One Futhark context. Use ``with`` or ``close()`` for deterministic release."""

    def __init__(self, ffi: Any, lib: Any, backend: str, config: Config, tuning_names: set[str]):
        self.ffi, self.lib, self.backend, self.config = ffi, lib, backend, config
        self.gpu = backend in ("cuda", "hip", "opencl")
        cfg = lib.futhark_context_config_new()
        if cfg == ffi.NULL:
            raise FutharkError("futhark_context_config_new returned NULL")
        try:
            self._apply(cfg, config, tuning_names)
        except BaseException:
            lib.futhark_context_config_free(cfg)
            raise
        previous = None
        if backend == "cuda":
            from ..interop import current_context

            previous = current_context()
        ctx = lib.futhark_context_new(cfg)
        if previous is not None:
            from ..interop import restore_current_context

            restore_current_context(previous)
        err = lib.futhark_context_get_error(ctx) if ctx != ffi.NULL else ffi.NULL
        if ctx == ffi.NULL or err != ffi.NULL:
            msg = self._take_string(err) if err != ffi.NULL else "futhark_context_new returned NULL"
            if ctx != ffi.NULL:
                lib.futhark_context_free(ctx)
            lib.futhark_context_config_free(cfg)
            raise FutharkError(f"could not create the Futhark context: {msg}", None, "futhark_context_new")
        self._state = _State(ffi, lib, cfg, ctx)
        self._sync_fn = lib.futhark_context_sync
        self._pending_host: list[Any] = []  # host buffers of in-flight async copies (GPU backends)
        self.lock = self._state.lock
        # atexit=False: _close_at_exit closes at exit, with a bound on the wait.
        self._finalizer = weakref.finalize(self, _State.close, self._state)
        self._finalizer.atexit = False
        if compiled is not None:  # Context.sync in C, as the instance's own attribute (same behaviour)
            self.sync = compiled.Sync(self._state, weakref.ref(self), self._pending_host,
                                      function_address(ffi, lib, "futhark_context_sync"))

    # -- configuration
    def _apply(self, cfg: Any, c: Config, tuning_names: set[str]) -> None:
        lib = self.lib

        def need(fn: str, option: str) -> Any:
            f = getattr(lib, fn, None)
            if f is None:
                raise TypeError(f"option {option!r} is not supported by the {self.backend} backend")
            return f

        lib.futhark_context_config_set_debugging(cfg, int(c.debugging))
        lib.futhark_context_config_set_logging(cfg, int(c.logging))
        lib.futhark_context_config_set_profiling(cfg, int(c.profiling))
        if c.cache_file is not None:
            self._cache_file = self.ffi.new("char[]", str(c.cache_file).encode())  # kept alive
            lib.futhark_context_config_set_cache_file(cfg, self._cache_file)
        for name, value in dict(c.tuning).items():
            if tuning_names and name not in tuning_names:
                raise ValueError(f"tuning: unknown parameter {name!r}; this library has {sorted(tuning_names)}")
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"tuning: value for {name!r} must be a non-negative int, got {value!r}")
            if lib.futhark_context_config_set_tuning_param(cfg, name.encode(), value) != 0:
                raise ValueError(f"tuning: the library rejected parameter {name!r}")
        if c.num_threads is not None:
            n = c.num_threads
            # Futhark's scheduler exit()s when it cannot create a worker thread (10**6 of them).
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_THREADS:
                raise ValueError(f"num_threads must be an int in [0, {MAX_THREADS}] (0: one per core), got {n!r}")
            need("futhark_context_config_set_num_threads", "num_threads")(cfg, n)
        if c.device is not None:
            need("futhark_context_config_set_device", "device")(cfg, str(c.device).encode())
        if c.unified_memory is not None:
            if c.unified_memory not in (0, 1, 2):
                raise ValueError("unified_memory must be 0 (never), 1 (always) or 2 (if supported)")
            need("futhark_context_config_set_unified_memory", "unified_memory")(cfg, c.unified_memory)
        if c.platform is not None:
            need("futhark_context_config_set_platform", "platform")(cfg, str(c.platform).encode())
        for opt in c.nvrtc_options:
            need("futhark_context_config_add_nvrtc_option", "nvrtc_options")(cfg, opt.encode())
        for option in ("default_thread_block_size", "default_grid_size", "default_tile_size"):
            value = getattr(c, option)
            if value is not None:
                need(f"futhark_context_config_set_{option}", option)(cfg, int(value))

    # -- basic state
    @property
    def ptr(self) -> Any:
        """The ``struct futhark_context *``; raises once the context is closed."""
        s = self._state
        if not s.open:
            raise InvalidHandleError("the Futhark context is closed")
        return s.ctx

    @property
    def closed(self) -> bool:
        return not self._state.open

    def _take_string(self, p: Any) -> str:
        """Copy a malloc'd C string and free it, as the API asks of the caller."""
        try:
            return self.ffi.string(p).decode(errors="replace")
        finally:
            self.lib.free(p)

    def last_error(self) -> str | None:
        """Take Futhark's pending error message. Callers hold ``lock`` since the failed call:
        ``futhark_context_get_error`` is not thread-safe (Futhark 0.25)."""
        with self.lock:
            p = self.lib.futhark_context_get_error(self.ptr)
            return None if p == self.ffi.NULL else self._take_string(p)

    def drop_error(self) -> None:
        """Discard Futhark's pending message, if any. Futhark keeps the first message until it is
        taken (``set_error``), so one a Ctrl-C left unread would be reported for the next failure.
        Callers hold ``lock``; the context is open."""
        p = self.lib.futhark_context_get_error(self._state.ctx)
        if p != self.ffi.NULL:
            self.lib.free(p)

    def error(self, code: int | None, function: str) -> FutharkError:
        """The exception for a failed call, with Futhark's own message."""
        failed = f"failed with code {code}" if code is not None else "returned NULL"
        msg = self.last_error() or f"{function} {failed} (no message from Futhark)"
        return error_for(code, msg.rstrip("\n"), function)

    def error_from(self, code: int, message_ptr: Any, function: str) -> FutharkError:
        """The exception for a failed call whose message a C shim already took (API mode)."""
        return error_for_message(code, self._take_string(message_ptr) if message_ptr != self.ffi.NULL else "", function)

    def check(self, code: int, function: str) -> None:
        if code != 0:
            raise self.error(code, function)

    # -- API
    def sync(self) -> None:
        """Wait for all outstanding work; errors of asynchronous work surface here. The GIL is
        released while it waits (cffi); other threads' calls on this context wait for the lock."""
        s = self._state  # (Context.ptr and the library's attribute, inlined: issue 23)
        with s.lock:
            if not s.open:
                raise InvalidHandleError("the Futhark context is closed")
            rc = self._sync_fn(s.ctx)
            if self._pending_host:
                self._pending_host.clear()
            if rc != 0:
                raise self.error(rc, "futhark_context_sync")

    def keep_until_sync(self, buffer: Any) -> None:
        """Hold a host buffer that an asynchronous copy reads or writes until the next sync."""
        if self.gpu:
            self._pending_host.append(buffer)  # list.append: atomic under the GIL
            if len(self._pending_host) > 1024:  # bound the memory an unsynced loop can pin
                self.sync()

    def report(self) -> dict[str, Any]:
        """``futhark_context_report`` parsed from JSON (debug and profiling information)."""
        with self.lock:
            p = self.lib.futhark_context_report(self.ptr)
            if p == self.ffi.NULL:
                raise self.error(None, "futhark_context_report")
            text = self._take_string(p)
        try:
            return dict(json.loads(text))
        except (json.JSONDecodeError, TypeError, ValueError):
            return {"text": text}

    def clear_caches(self) -> None:
        with self.lock:
            self.check(self.lib.futhark_context_clear_caches(self.ptr), "futhark_context_clear_caches")

    def pause_profiling(self) -> None:
        with self.lock:
            self.lib.futhark_context_pause_profiling(self.ptr)

    def unpause_profiling(self) -> None:
        with self.lock:
            self.lib.futhark_context_unpause_profiling(self.ptr)

    # -- value registry (used by handles.py)
    def register(self, handle: object, free: Callable[[Any, Any], int], ptr: Any) -> None:
        self._state.values[id(handle)] = (free, ptr)

    def unregister(self, handle: object) -> None:
        self._state.values.pop(id(handle), None)

    @property
    def live_values(self) -> int:
        return len(self._state.values)

    def close(self) -> None:
        """Wait for calls in flight, then free remaining values, sync, free the context and the
        configuration. Later calls on it or its handles raise InvalidHandleError."""
        self._state.close()  # finishes a close() that a KeyboardInterrupt cut short
        self._finalizer.detach()
        self._pending_host.clear()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
