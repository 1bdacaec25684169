/* pybridge.futhark._callpath: the per-call path of pybridge.futhark in compiled code (issue 34).
 *
 * It mirrors, and must behave exactly as, the pure-Python fallback (tests/test_call_path_differential.py
 * runs both on generated programs and the lifecycle machine):
 *   Lock        - the context's reentrant lock (threading.RLock's rules)
 *   State       - the storage of context._State: open flag, lock, value registry, raw context pointer
 *   Value,
 *   ArrayBase,
 *   OpaqueBase  - the storage and lifetime of handles: handles._PythonValue (ptr, free, _release,
 *                 _mark_consumed, __del__), _PythonArray (atype, _shape), _PythonOpaque (otype)
 *   Plan        - one entry point's call plan: callplan.compile_plan's function
 *   Sync        - Context.sync
 *   RawNew      - ArrayKind.new_raw / from_cuda's wrap of a device pointer (kinds.py)
 *   order_streams - ordering.EventSlot.try_order's two driver calls
 *   dlpack_capsule - interop._export_keyed's capsule (a DLManagedTensor owning a reference to its owner)
 *
 * Built against the stable ABI (Py_LIMITED_API 3.10): one binary serves CPython 3.10 and later.
 * The entry point is reached through its packed shim (shims.py: int shim(ctx, sync, char **err,
 * void **outs, const pybridge_slot *ins)), so one C signature calls every entry point.
 *
 * Ctrl-C (RELIABILITY.md): a KeyboardInterrupt is raised only where Python code runs. Between the
 * lock and the end of the bookkeeping after the C call (results registered, consumed arguments
 * freed) this file runs no Python code that can raise into it, so a plan never needs the Python
 * plan's `settle`.
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef Py_XSETREF /* not in the limited API before 3.12's */
#define Py_XSETREF(op, op2) do { PyObject *_py_tmp = (PyObject *)(op); (op) = (op2); Py_XDECREF(_py_tmp); } while (0)
#endif

#define MAX_ARGS 64 /* entry points with more inputs or outputs keep the Python plan */

typedef union {
    int8_t i8; int16_t i16; int32_t i32; int64_t i64;
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
    float f32; double f64; bool b; void *p;
} pybridge_slot;

typedef int (*shim_fn)(void *ctx, int sync, char **err, void **outs, const pybridge_slot *ins);
typedef int (*free_fn_c)(void *ctx, void *value);

/* Type codes shared with callplan.py (CODES). */
enum { C_I8, C_I16, C_I32, C_I64, C_U8, C_U16, C_U32, C_U64, C_F16, C_F32, C_F64, C_BOOL, C_ARRAY, C_OPAQUE };

/* ------------------------------------------------------------------ configured once (configure()) */

static PyObject *InvalidHandleError, *join_fn, *shared_fn, *error_for_message, *py_release, *py_register, *np_int_types;
static PyObject *np_float64, *np_float32, *np_float16, *np_bool;
static double f32_max;
static PyObject *s_freed, *s_live, *s_parent, *s_acquire, *s_release, *s_describe, *s_error, *s_free, *s_state,
    *s_ctx, *s_closed, *s_live_ptr, *s_pointer, *s_ffi, *s_cast, *s_uintptr, *s_closed_msg, *s_general, *s_bind,
    *s_convert_scalars, *s_explained, *s_voidp;
static long exports_alive; /* DLPack capsules made here whose consumer has not released them */

static PyTypeObject *StateType, *ValueType, *ArrayBaseType, *OpaqueBaseType, *PlanType;

/* ------------------------------------------------------------------ Lock */

/* A reentrant lock, as threading.RLock (same rules: owner thread and count, interruptible wait,
 * RuntimeError when a thread releases what it does not hold), whose acquire and release the call
 * path takes in a few instructions instead of a method call each. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    unsigned long owner, count;
} LockObject;

/* 1 taken, 0 not within the timeout, -1 exception (a signal handler raised while waiting). */
static int lock_take(LockObject *L, PY_TIMEOUT_T timeout_us) {
    unsigned long me = PyThread_get_thread_ident();
    if (L->count > 0 && L->owner == me) {
        L->count++;
        return 1;
    }
    if (!PyThread_acquire_lock(L->lock, 0)) {
        if (timeout_us == 0) return 0;
        PyLockStatus r;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            r = PyThread_acquire_lock_timed(L->lock, timeout_us, 1);
            Py_END_ALLOW_THREADS
            if (r != PY_LOCK_INTR) break;
            if (Py_MakePendingCalls() < 0) return -1; /* Ctrl-C while waiting: raised, not held */
            /* a timed wait starts again in full: the waits here are the interpreter-exit bound */
        }
        if (r != PY_LOCK_ACQUIRED) return 0;
    }
    L->owner = me;
    L->count = 1;
    return 1;
}

static int lock_give(LockObject *L) {
    if (L->count == 0 || L->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
        return -1;
    }
    if (--L->count == 0) {
        L->owner = 0;
        PyThread_release_lock(L->lock);
    }
    return 0;
}

static PyObject *lock_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ":Lock")) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    LockObject *L = (LockObject *)alloc(type, 0);
    if (L == NULL) return NULL;
    L->lock = PyThread_allocate_lock();
    if (L->lock == NULL) {
        Py_DECREF(L);
        return PyErr_NoMemory();
    }
    return (PyObject *)L;
}

static void lock_dealloc(LockObject *L) {
    PyTypeObject *tp = Py_TYPE(L);
    if (L->lock != NULL) {
        if (L->count > 0) PyThread_release_lock(L->lock);
        PyThread_free_lock(L->lock);
    }
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(L);
    Py_DECREF(tp);
}

static PyObject *lock_acquire(LockObject *L, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pd:acquire", kwlist, &blocking, &timeout)) return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    PY_TIMEOUT_T us = !blocking ? 0 : timeout < 0 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
    if (blocking && timeout > 0 && us == 0) us = 1;
    int r = lock_take(L, us);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *lock_enter(LockObject *L, PyObject *unused) {
    int r = lock_take(L, -1);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static PyObject *lock_release(LockObject *L, PyObject *unused) {
    if (lock_give(L) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *lock_exit(LockObject *L, PyObject *args) { return lock_release(L, NULL); }

static PyObject *lock_is_owned(LockObject *L, PyObject *unused) {
    return PyBool_FromLong(L->count > 0 && L->owner == PyThread_get_thread_ident());
}

static PyObject *lock_repr(LockObject *L) {
    return PyUnicode_FromFormat("<%s pybridge.futhark._callpath.Lock owner=%lu count=%lu>",
                                L->count ? "locked" : "unlocked", L->owner, L->count);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool, as threading.RLock.acquire"},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "Release once; RuntimeError if this thread does not hold it."},
    {"__enter__", (PyCFunction)lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)lock_exit, METH_VARARGS, NULL},
    {"_is_owned", (PyCFunction)lock_is_owned, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot lock_slots[] = {
    {Py_tp_dealloc, lock_dealloc},
    {Py_tp_new, lock_new},
    {Py_tp_methods, lock_methods},
    {Py_tp_repr, lock_repr},
    {Py_tp_doc, "A reentrant lock with threading.RLock's rules, taken from C without a method call."},
    {0, NULL},
};

static PyType_Spec lock_spec = {"pybridge.futhark._callpath.Lock", sizeof(LockObject), 0, Py_TPFLAGS_DEFAULT, lock_slots};
static PyTypeObject *LockType;

/* ------------------------------------------------------------------ State */

/* The registry (docs/DESIGN.md, "Compiled call path"). Every live value is registered with its
 * context's state, so that close() frees what is left and a value is freed once, by the handle that
 * owns it. A value registered in C (a plan's or RawNew's result, a handle's _register()) is on the
 * state's list: two links in its handle, no allocation and no dictionary operation. `values`
 * (id(handle) -> (free function, pointer or address)) holds the rest: values the Python plans
 * registered, and entries whose handle died registered (an interrupt kept its finaliser from the
 * lock), which free_orphan frees when a new handle takes that id and close() frees otherwise.
 * Python code sees one registry: reading `state.values` first moves every listed value into the
 * dictionary (state_flush), each entry as its registration in Python would have written it. */
struct ValueObject;

typedef struct { /* a handle type of the context's library, as State._native gave it */
    PyObject *free_fn, *ctype; /* its cffi free function and the cffi type of its pointers */
    free_fn_c free_c;          /* the free function's address */
} Native;

typedef struct {
    PyObject_HEAD
    char open;
    PyObject *lock, *values;
    PyObject *acquire, *release; /* the lock's bound methods */
    unsigned long long raw_ctx;
    struct ValueObject *listed; /* the values registered on the list (most recent first) */
    Py_ssize_t n_listed;
    Native *natives;
    Py_ssize_t n_natives;
} StateObject;

static int state_flush(StateObject *s);

static int state_lock(StateObject *s) {
    if (s->lock != NULL && Py_TYPE(s->lock) == LockType) return lock_take((LockObject *)s->lock, -1) < 0 ? -1 : 0;
    if (s->acquire == NULL) {
        if (s->lock == NULL) {
            PyErr_SetString(PyExc_AttributeError, "lock");
            return -1;
        }
        s->acquire = PyObject_GetAttr(s->lock, s_acquire);
        if (s->acquire == NULL) return -1;
        s->release = PyObject_GetAttr(s->lock, s_release);
        if (s->release == NULL) {
            Py_CLEAR(s->acquire);
            return -1;
        }
    }
    PyObject *r = PyObject_CallNoArgs(s->acquire);
    if (r == NULL) return -1; /* interrupted while waiting: not held */
    Py_DECREF(r);
    return 0;
}

/* Release the lock, keeping an exception that is on its way out. */
static void state_unlock(StateObject *s) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (Py_TYPE(s->lock) == LockType) {
        if (lock_give((LockObject *)s->lock) < 0) PyErr_Clear(); /* held here: cannot fail */
        PyErr_Restore(t, v, tb);
        return;
    }
    PyObject *r = PyObject_CallNoArgs(s->release);
    if (r == NULL) {
        if (t != NULL) PyErr_Clear(); /* the exception in flight wins, as `with` chains it */
        else return;
    } else {
        Py_DECREF(r);
    }
    PyErr_Restore(t, v, tb);
}

static PyObject *state_get_lock(StateObject *s, void *c) {
    if (s->lock == NULL) {
        PyErr_SetString(PyExc_AttributeError, "lock");
        return NULL;
    }
    Py_INCREF(s->lock);
    return s->lock;
}

static int state_set_lock(StateObject *s, PyObject *v, void *c) {
    Py_XINCREF(v);
    Py_XSETREF(s->lock, v);
    Py_CLEAR(s->acquire);
    Py_CLEAR(s->release);
    return 0;
}

/* `values`: the whole registry as a dictionary (the listed values moved into it first). */
static PyObject *state_get_values(StateObject *s, void *c) {
    if (s->values == NULL) {
        PyErr_SetString(PyExc_AttributeError, "values");
        return NULL;
    }
    if (state_flush(s) < 0) return NULL;
    Py_INCREF(s->values);
    return s->values;
}

static int state_set_values(StateObject *s, PyObject *v, void *c) {
    if (v == NULL || !PyDict_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "State.values must be a dict");
        return -1;
    }
    if (s->values != NULL && state_flush(s) < 0) return -1; /* the listed values belong to the old one */
    Py_INCREF(v);
    Py_XSETREF(s->values, v);
    return 0;
}

/* State._native(free_function, free_address, pointer_type): a handle type of this context's
 * library (kinds.py, at load): a handle registered from Python whose free function is this one is
 * freed through the address, and its pointer, when it is of this type, is read where cffi keeps it
 * (cffi_layout). */
static PyObject *state_native(StateObject *s, PyObject *args) {
    PyObject *free_fn, *addr, *ctype;
    if (!PyArg_ParseTuple(args, "OOO:_native", &free_fn, &addr, &ctype)) return NULL;
    void *f = PyLong_AsVoidPtr(addr);
    if (f == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_native: null free function");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < s->n_natives; i++)
        if (s->natives[i].free_fn == free_fn) Py_RETURN_NONE; /* the first one stays */
    Native *n = PyMem_Realloc(s->natives, (size_t)(s->n_natives + 1) * sizeof(Native));
    if (n == NULL) return PyErr_NoMemory();
    s->natives = n;
    Py_INCREF(free_fn);
    Py_INCREF(ctype);
    n[s->n_natives].free_fn = free_fn;
    n[s->n_natives].ctype = ctype;
    n[s->n_natives].free_c = (free_fn_c)f;
    s->n_natives++;
    Py_RETURN_NONE;
}

static Native *state_find_native(StateObject *s, PyObject *free_fn) {
    for (Py_ssize_t i = 0; i < s->n_natives; i++)
        if (s->natives[i].free_fn == free_fn) return &s->natives[i];
    return NULL;
}

static void list_forget_all(StateObject *s);

static int state_clear(StateObject *s) {
    list_forget_all(s); /* none: a listed handle holds its state */
    Py_CLEAR(s->lock);
    Py_CLEAR(s->values);
    Py_CLEAR(s->acquire);
    Py_CLEAR(s->release);
    for (Py_ssize_t i = 0; i < s->n_natives; i++) {
        Py_CLEAR(s->natives[i].free_fn);
        Py_CLEAR(s->natives[i].ctype);
    }
    PyMem_Free(s->natives);
    s->natives = NULL;
    s->n_natives = 0;
    return 0;
}

static void state_dealloc(StateObject *s) {
    PyTypeObject *tp = Py_TYPE(s);
    state_clear(s);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(s);
    Py_DECREF(tp);
}

static PyMemberDef state_members[] = {
    {"open", T_BOOL, offsetof(StateObject, open), 0, "False once close() began"},
    {"_raw_ctx", T_ULONGLONG, offsetof(StateObject, raw_ctx), 0, "the struct futhark_context * as an address"},
    {"_listed", T_PYSSIZET, offsetof(StateObject, n_listed), READONLY, "values registered on the list, not yet in `values`"},
    {NULL},
};

static PyGetSetDef state_getset[] = {
    {"lock", (getter)state_get_lock, (setter)state_set_lock, "the context's one lock", NULL},
    {"values", (getter)state_get_values, (setter)state_set_values,
     "the registry: id(handle) -> (free function, pointer or address), every registered value", NULL},
    {NULL},
};

static PyObject *state_free_listed(StateObject *s, PyObject *unused);

static PyMethodDef state_methods[] = {
    {"_native", (PyCFunction)state_native, METH_VARARGS, "Learn a handle type's free function address and pointer type."},
    {"_free_listed", (PyCFunction)state_free_listed, METH_NOARGS, "close(): free the values registered on the list."},
    {NULL},
};

static PyType_Slot state_slots[] = {
    {Py_tp_dealloc, state_dealloc},
    {Py_tp_members, state_members},
    {Py_tp_getset, state_getset},
    {Py_tp_methods, state_methods},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_doc, "Storage of a Futhark context's shared state (context._State subclasses it)."},
    {0, NULL},
};

static PyType_Spec state_spec = {"pybridge.futhark._callpath.State", sizeof(StateObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, state_slots};

/* ------------------------------------------------------------------ Value */

typedef struct ValueObject {
    PyObject_HEAD
    PyObject *library, *ctx, *ptr, *status, *free_fn, *keep, *aliases, *kind, *shape, *weakreflist;
    StateObject *state; /* ctx._state when it is a State (else the Python release runs) */
    void *raw;          /* the value's address, when known (has_raw) */
    int has_raw;
    free_fn_c free_c; /* the free function, when known */
    int listed;       /* on its state's list (registered there): LISTED_ADDRESS or LISTED_POINTER */
    struct ValueObject *prev, *next; /* its neighbours on that list */
} ValueObject;

/* How a listed value's entry reads once moved into `values`: (free function, address), as a plan
 * registers its results, or (free function, pointer object), as Python registration does. */
enum { LISTED_ADDRESS = 1, LISTED_POINTER = 2 };

#define IS_STATE(o) (PyObject_TypeCheck((o), StateType))

/* cffi pointer objects read in place: a cffi cdata is its object header, its type (a cffi ctype),
 * then, for a pointer, the pointer itself (cffi's CDataObject). cffi_layout() checks this on the
 * cffi in use, at import (callplan.py); where it does not hold, cdata_type stays NULL and the
 * address is found by ffi.cast as before. */
static PyTypeObject *cdata_type;
#define CDATA_CTYPE(o) (*(PyObject **)((char *)(o) + sizeof(PyObject)))
#define CDATA_POINTER(o) (*(void **)((char *)(o) + sizeof(PyObject) + sizeof(PyObject *)))

static void list_add(StateObject *s, ValueObject *h, int form) {
    h->listed = form;
    h->prev = NULL;
    h->next = s->listed;
    if (s->listed != NULL) s->listed->prev = h;
    s->listed = h;
    s->n_listed++;
}

static void list_remove(ValueObject *h) { /* h is on its state's list */
    StateObject *s = h->state;
    if (h->prev != NULL) h->prev->next = h->next;
    else s->listed = h->next;
    if (h->next != NULL) h->next->prev = h->prev;
    h->prev = h->next = NULL;
    h->listed = 0;
    s->n_listed--;
}

static void list_forget_all(StateObject *s) {
    while (s->listed != NULL) list_remove(s->listed);
}

/* Move a listed value's registration into `values`: 0, or -1 with an exception (still listed). */
static int list_to_dict(ValueObject *h) {
    StateObject *s = h->state;
    if (s->values == NULL) {
        PyErr_SetString(PyExc_AttributeError, "values");
        return -1;
    }
    PyObject *key = PyLong_FromVoidPtr(h), *where = NULL, *entry = NULL;
    if (key == NULL) return -1;
    if (h->listed == LISTED_ADDRESS || h->ptr == NULL) {
        where = PyLong_FromVoidPtr(h->raw);
    } else {
        Py_INCREF(h->ptr);
        where = h->ptr;
    }
    entry = where == NULL ? NULL : PyTuple_Pack(2, h->free_fn ? h->free_fn : Py_None, where);
    int r = entry == NULL ? -1 : 0;
    /* still listed after those allocations (a collection they start may run a finaliser that frees it) */
    if (r == 0 && h->listed) {
        r = PyDict_SetItem(s->values, key, entry);
        if (r == 0) list_remove(h);
    }
    Py_DECREF(key);
    Py_XDECREF(where);
    Py_XDECREF(entry);
    return r;
}

static int state_flush(StateObject *s) {
    while (s->listed != NULL)
        if (list_to_dict(s->listed) < 0) return -1;
    return 0;
}

/* A handle that dies registered (its finaliser could not take the lock: interrupted while it
 * waited): its entry goes into `values`, where free_orphan or close() frees the value. */
static void list_orphan(ValueObject *h) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (list_to_dict(h) < 0) { /* no memory for the entry: the value is left to the context's free */
        list_remove(h);
        PyErr_WriteUnraisable(NULL);
    }
    PyErr_Restore(t, v, tb);
}

/* A handle registered from Python holds cffi objects: its pointer and its free function. Where its
 * state knows its type (State._native) a plan passes the address read from the pointer object
 * (cffi_layout) and the free calls the function by its address, as for a plan's result. */
static void value_native(ValueObject *self) {
    StateObject *s = self->state;
    Native *n = s != NULL && self->free_fn != NULL ? state_find_native(s, self->free_fn) : NULL;
    if (n == NULL) return;
    if (self->free_c == NULL) self->free_c = n->free_c;
    if (!self->has_raw && self->ptr != NULL && Py_TYPE(self->ptr) == cdata_type && CDATA_CTYPE(self->ptr) == n->ctype) {
        self->raw = CDATA_POINTER(self->ptr);
        self->has_raw = 1;
    }
}

static PyObject *value_describe(ValueObject *self) { return PyObject_CallMethodObjArgs((PyObject *)self, s_describe, NULL); }

/* The cffi pointer object: made from the address when the handle was made here. */
static PyObject *value_get__ptr(ValueObject *self, void *c) {
    if (self->ptr == NULL) {
        if (!self->has_raw || self->kind == NULL) {
            PyErr_SetString(PyExc_AttributeError, "_ptr");
            return NULL;
        }
        PyObject *addr = PyLong_FromVoidPtr(self->raw);
        if (addr == NULL) return NULL;
        PyObject *p = PyObject_CallMethodObjArgs(self->kind, s_pointer, addr, NULL);
        Py_DECREF(addr);
        if (p == NULL) return NULL;
        self->ptr = p;
    }
    Py_INCREF(self->ptr);
    return self->ptr;
}

static int value_set__ptr(ValueObject *self, PyObject *v, void *c) {
    if (self->listed && list_to_dict(self) < 0) return -1; /* its entry keeps the pointer it had */
    Py_XINCREF(v);
    Py_XSETREF(self->ptr, v);
    self->has_raw = 0; /* found again from the new object when a plan needs it */
    return 0;
}

static PyObject *value_get__ctx(ValueObject *self, void *c) {
    if (self->ctx == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_ctx");
        return NULL;
    }
    Py_INCREF(self->ctx);
    return self->ctx;
}

static int value_set__ctx(ValueObject *self, PyObject *v, void *c) {
    if (self->listed && list_to_dict(self) < 0) return -1; /* registered with the context it had */
    Py_CLEAR(self->state);
    if (v != NULL) {
        PyObject *st = PyObject_GetAttr(v, s_state);
        if (st == NULL) {
            PyErr_Clear(); /* a context without shared state: the Python release handles it */
        } else if (IS_STATE(st)) {
            self->state = (StateObject *)st;
        } else {
            Py_DECREF(st);
        }
    }
    Py_XINCREF(v);
    Py_XSETREF(self->ctx, v);
    return 0;
}

static int value_set__free_fn(ValueObject *self, PyObject *v, void *c) {
    if (self->listed && list_to_dict(self) < 0) return -1;
    Py_XINCREF(v);
    Py_XSETREF(self->free_fn, v);
    self->free_c = NULL;
    return 0;
}

static PyObject *value_get__free_fn(ValueObject *self, void *c) {
    if (self->free_fn == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_free_fn");
        return NULL;
    }
    Py_INCREF(self->free_fn);
    return self->free_fn;
}

static int state_closed(ValueObject *self) { /* 1 closed, 0 open, -1 error */
    if (self->state != NULL) return !self->state->open;
    if (self->ctx == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_ctx");
        return -1;
    }
    PyObject *r = PyObject_GetAttr(self->ctx, s_closed);
    if (r == NULL) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* Value.ptr: the C pointer; InvalidHandleError after free/consume/close. */
static PyObject *value_get_ptr(ValueObject *self, void *c) {
    if (self->status == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_status");
        return NULL;
    }
    if (self->status != Py_None) {
        PyObject *d = value_describe(self);
        if (d == NULL) return NULL;
        PyObject *m = PyUnicode_FromFormat("%S was %S", d, self->status);
        Py_DECREF(d);
        if (m != NULL) {
            PyErr_SetObject(InvalidHandleError, m);
            Py_DECREF(m);
        }
        return NULL;
    }
    int closed = state_closed(self);
    if (closed < 0) return NULL;
    if (closed) {
        PyObject *d = value_describe(self);
        if (d == NULL) return NULL;
        PyObject *m = PyUnicode_FromFormat("%S belongs to a closed Futhark context", d);
        Py_DECREF(d);
        if (m != NULL) {
            PyErr_SetObject(InvalidHandleError, m);
            Py_DECREF(m);
        }
        return NULL;
    }
    return value_get__ptr(self, NULL);
}

/* The value's address for a C call (cached). */
static int value_raw(ValueObject *self, void **out) {
    if (!self->has_raw) value_native(self);
    if (!self->has_raw) {
        if (self->ptr == NULL || self->library == NULL) {
            PyErr_SetString(PyExc_AttributeError, "_ptr");
            return -1;
        }
        PyObject *ffi = PyObject_GetAttr(self->library, s_ffi);
        if (ffi == NULL) return -1;
        PyObject *c = PyObject_CallMethodObjArgs(ffi, s_cast, s_uintptr, self->ptr, NULL);
        Py_DECREF(ffi);
        if (c == NULL) return -1;
        PyObject *n = PyNumber_Long(c);
        Py_DECREF(c);
        if (n == NULL) return -1;
        void *p = PyLong_AsVoidPtr(n);
        Py_DECREF(n);
        if (p == NULL && PyErr_Occurred()) return -1;
        self->raw = p;
        self->has_raw = 1;
    }
    *out = self->raw;
    return 0;
}

/* aliases.AliasGroup's `live` and `parent`, read and written through their slot descriptors: what
 * getattr and setattr do for a class that keeps object's attribute access and defines them in
 * __slots__ (configure checks both), without the type look-up; any other group object: getattr. */
static PyTypeObject *alias_type;
static PyObject *alias_live, *alias_parent; /* the descriptors */
static descrgetfunc alias_get;
static descrsetfunc alias_set;

static PyObject *group_get(PyObject *g, PyObject *name) {
    if (Py_TYPE(g) == alias_type) return alias_get(name == s_live ? alias_live : alias_parent, g, (PyObject *)alias_type);
    return PyObject_GetAttr(g, name);
}

static int group_set_live(PyObject *g, PyObject *v) {
    if (Py_TYPE(g) == alias_type) return alias_set(alias_live, g, v);
    return PyObject_SetAttr(g, s_live, v);
}

static int alias_drop(PyObject *g) { /* g.live -= 1 */
    PyObject *live = group_get(g, s_live);
    if (live == NULL) return -1;
    long n = PyLong_AsLong(live);
    Py_DECREF(live);
    if (n == -1 && PyErr_Occurred()) return -1;
    PyObject *nl = PyLong_FromLong(n - 1);
    if (nl == NULL) return -1;
    int r = group_set_live(g, nl);
    Py_DECREF(nl);
    return r;
}

/* The C free of the value; -1 with an exception (Futhark's, from ctx.error(rc, "free")). Lock held. */
static int value_free_now(ValueObject *self) {
    StateObject *s = self->state;
    long rc;
    if (self->free_c == NULL || !self->has_raw) value_native(self);
    if (self->free_c != NULL && self->has_raw) {
        int r;
        void *ctx = (void *)(uintptr_t)s->raw_ctx, *raw = self->raw;
        free_fn_c f = self->free_c;
        Py_BEGIN_ALLOW_THREADS
        r = f(ctx, raw);
        Py_END_ALLOW_THREADS
        rc = r;
    } else {
        PyObject *cptr = PyObject_GetAttr((PyObject *)s, s_ctx);
        if (cptr == NULL) return -1;
        PyObject *p = value_get__ptr(self, NULL);
        if (p == NULL) {
            Py_DECREF(cptr);
            return -1;
        }
        PyObject *r = self->free_fn ? PyObject_CallFunctionObjArgs(self->free_fn, cptr, p, NULL) : NULL;
        if (self->free_fn == NULL) PyErr_SetString(PyExc_AttributeError, "_free_fn");
        Py_DECREF(cptr);
        Py_DECREF(p);
        if (r == NULL) return -1;
        rc = PyLong_AsLong(r);
        Py_DECREF(r);
        if (rc == -1 && PyErr_Occurred()) return -1;
    }
    if (rc != 0) {
        PyObject *e = PyObject_CallMethod(self->ctx, "error", "lO", rc, s_free);
        if (e == NULL) return -1;
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
        return -1;
    }
    return 0;
}

/* Value._release with the lock held (or taken here when `locked` is 0). Mirrors handles.py. */
static int value_release_impl(ValueObject *self, PyObject *status, int locked) {
    StateObject *s = self->state;
    if (s == NULL) { /* a context whose state is not a State: the Python release */
        PyObject *r = PyObject_CallFunctionObjArgs(py_release, (PyObject *)self, status, NULL);
        if (r == NULL) return -1;
        Py_DECREF(r);
        return 0;
    }
    if (!s->open) { /* close() freed the C value; never wait for a lock at interpreter exit */
        int t = self->status == NULL ? 0 : PyObject_IsTrue(self->status);
        if (t < 0) return -1;
        if (!t) {
            Py_INCREF(status);
            Py_XSETREF(self->status, status);
        }
        Py_INCREF(Py_None);
        Py_XSETREF(self->keep, Py_None);
        return 0;
    }
    if (!locked && state_lock(s) < 0) return -1;
    int rc = 0;
    if (self->status == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_status");
        rc = -1;
        goto out;
    }
    if (self->status != Py_None) goto out;
    /* From here to the free no Python code runs that could raise a KeyboardInterrupt into it. */
    Py_INCREF(status);
    Py_XSETREF(self->status, status);
    if (self->aliases != NULL && self->aliases != Py_None && alias_drop(self->aliases) < 0) rc = -1;
    if (rc == 0 && s->open && self->listed) {
        list_remove(self);
        if (value_free_now(self) < 0) rc = -1;
    } else if (rc == 0 && s->open) {
        PyObject *key = PyLong_FromVoidPtr(self);
        int has = key == NULL ? -1 : PyDict_Contains(s->values, key);
        if (has > 0) {
            has = PyDict_DelItem(s->values, key) < 0 ? -1 : 1;
            if (has > 0 && value_free_now(self) < 0) has = -1;
        }
        Py_XDECREF(key);
        if (has < 0) rc = -1;
    }
    { /* finally: after the free (the owner outlives the value) */
        PyObject *t, *v, *tb, *old = self->keep;
        PyErr_Fetch(&t, &v, &tb);
        Py_INCREF(Py_None);
        self->keep = Py_None;
        Py_XDECREF(old);
        PyErr_Restore(t, v, tb);
    }
out:
    if (!locked) state_unlock(s);
    return rc;
}

static PyObject *value_free(ValueObject *self, PyObject *unused) {
    if (value_release_impl(self, s_freed, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *value__release(ValueObject *self, PyObject *status) {
    if (value_release_impl(self, status, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static int free_orphan(StateObject *s, PyObject *key);

/* Value._register: enter this handle's value in its context's registry, Value.__init__'s last
 * step (handles._PythonValue._register is the Python): first the value of a dead handle
 * registered under this handle's id is freed (context._State.free_orphan; such entries are only in
 * `values`, so an empty one needs no look-up). */
static PyObject *value__register(ValueObject *self, PyObject *unused) {
    StateObject *s = self->state;
    if (s == NULL) return PyObject_CallFunctionObjArgs(py_register, (PyObject *)self, NULL);
    if (s->values == NULL || self->free_fn == NULL || (self->ptr == NULL && !self->has_raw)) {
        PyErr_SetString(PyExc_AttributeError, s->values == NULL ? "values" : self->free_fn == NULL ? "_free_fn" : "_ptr");
        return NULL;
    }
    if (self->listed) Py_RETURN_NONE;
    if (PyDict_Size(s->values) > 0) {
        PyObject *key = PyLong_FromVoidPtr(self);
        if (key == NULL) return NULL;
        int r = s->open ? free_orphan(s, key) : 0;
        Py_DECREF(key);
        if (r < 0) return NULL;
    }
    value_native(self);
    list_add(s, self, self->ptr != NULL ? LISTED_POINTER : LISTED_ADDRESS);
    Py_RETURN_NONE;
}

/* State._free_listed(): close()'s free of the listed values (lock held, `open` False), as it frees
 * the entries of `values`: each leaves the registry right before the call that frees it, the
 * return code unread. A value freed by address or by a cffi function runs no Python code, so an
 * interrupt surfaces after the last of those; Python code (a pointer object made, a free function
 * written in Python) may raise one, which leaves the rest listed for the next close(). */
static PyObject *state_free_listed(StateObject *s, PyObject *unused) {
    PyObject *ctx = NULL;
    while (s->listed != NULL) {
        ValueObject *h = s->listed;
        value_native(h);
        if (h->free_c != NULL && h->has_raw) {
            void *c = (void *)(uintptr_t)s->raw_ctx, *raw = h->raw;
            free_fn_c f = h->free_c;
            list_remove(h);
            Py_BEGIN_ALLOW_THREADS
            f(c, raw);
            Py_END_ALLOW_THREADS
            continue;
        }
        Py_INCREF(h); /* through the Python code below */
        PyObject *fn = h->free_fn, *p = NULL, *r = NULL;
        Py_XINCREF(fn);
        if (fn == NULL) PyErr_SetString(PyExc_AttributeError, "_free_fn");
        else if (ctx == NULL) ctx = PyObject_GetAttr((PyObject *)s, s_ctx);
        if (fn != NULL && ctx != NULL) p = value_get__ptr(h, NULL);
        if (p != NULL && h->listed) {
            list_remove(h);
            r = PyObject_CallFunctionObjArgs(fn, ctx, p, NULL);
        } else if (p != NULL) { /* released while its pointer object was made */
            Py_INCREF(Py_None);
            r = Py_None;
        }
        Py_XDECREF(p);
        Py_XDECREF(fn);
        Py_DECREF(h);
        if (r == NULL) {
            Py_XDECREF(ctx);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_XDECREF(ctx);
    Py_RETURN_NONE;
}

static PyObject *consumed_status(PyObject *by) { return PyUnicode_FromFormat("consumed by %S", by); }

static PyObject *value__mark_consumed(ValueObject *self, PyObject *by) {
    PyObject *st = consumed_status(by);
    if (st == NULL) return NULL;
    int r = value_release_impl(self, st, 0);
    Py_DECREF(st);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* __del__: as handles._PythonValue.__del__. */
static void value_finalize(PyObject *o) {
    ValueObject *self = (ValueObject *)o;
    if (self->status != Py_None) return; /* released (or never made whole) */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (value_release_impl(self, s_freed, 0) < 0) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
        } else { /* a Ctrl-C at the start left the value untouched: free it now, then report */
            PyObject *t2, *v2, *tb2;
            PyErr_Fetch(&t2, &v2, &tb2);
            if (self->status == Py_None && value_release_impl(self, s_freed, 0) < 0) {
                if (PyErr_ExceptionMatches(PyExc_Exception)) {
                    PyErr_Clear();
                    PyErr_Restore(t2, v2, tb2);
                } else {
                    Py_XDECREF(t2);
                    Py_XDECREF(v2);
                    Py_XDECREF(tb2);
                }
            } else {
                PyErr_Restore(t2, v2, tb2);
            }
            PyErr_WriteUnraisable(o);
        }
    }
    PyErr_Restore(t, v, tb);
}

static int value_traverse(ValueObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->library);
    Py_VISIT(self->ctx);
    Py_VISIT(self->ptr);
    Py_VISIT(self->status);
    Py_VISIT(self->free_fn);
    Py_VISIT(self->keep);
    Py_VISIT(self->aliases);
    Py_VISIT(self->kind);
    Py_VISIT(self->shape);
    Py_VISIT((PyObject *)self->state);
    return 0;
}

static int value_clear(ValueObject *self) {
    if (self->listed) list_orphan(self);
    Py_CLEAR(self->library);
    Py_CLEAR(self->ctx);
    Py_CLEAR(self->ptr);
    Py_CLEAR(self->status);
    Py_CLEAR(self->free_fn);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->aliases);
    Py_CLEAR(self->kind);
    Py_CLEAR(self->shape);
    Py_CLEAR(self->state);
    return 0;
}

static void value_dealloc(ValueObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    value_clear(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyMemberDef value_members[] = {
    {"library", T_OBJECT_EX, offsetof(ValueObject, library), 0, NULL},
    {"_status", T_OBJECT_EX, offsetof(ValueObject, status), 0, "None while live; else why it is unusable"},
    {"_keep", T_OBJECT_EX, offsetof(ValueObject, keep), 0, "an object that must outlive the value"},
    {"_aliases", T_OBJECT_EX, offsetof(ValueObject, aliases), 0, "handles that may share memory (aliases.py)"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ValueObject, weakreflist), READONLY, NULL},
    {NULL},
};

static PyGetSetDef value_getset[] = {
    {"_ptr", (getter)value_get__ptr, (setter)value_set__ptr, NULL, NULL},
    {"_ctx", (getter)value_get__ctx, (setter)value_set__ctx, NULL, NULL},
    {"_free_fn", (getter)value_get__free_fn, (setter)value_set__free_fn, NULL, NULL},
    {"ptr", (getter)value_get_ptr, NULL, "The C pointer; raises InvalidHandleError after free/consume/close.", NULL},
    {NULL},
};

static PyMethodDef value_methods[] = {
    {"free", (PyCFunction)value_free, METH_NOARGS, "Release this reference now. Idempotent."},
    {"_release", (PyCFunction)value__release, METH_O, NULL},
    {"_mark_consumed", (PyCFunction)value__mark_consumed, METH_O, NULL},
    {"_register", (PyCFunction)value__register, METH_NOARGS, "Enter this value in its context's registry (Value.__init__)."},
    {NULL},
};

static PyType_Slot value_slots[] = {
    {Py_tp_dealloc, value_dealloc},
    {Py_tp_traverse, value_traverse},
    {Py_tp_clear, value_clear},
    {Py_tp_finalize, value_finalize},
    {Py_tp_members, value_members},
    {Py_tp_getset, value_getset},
    {Py_tp_methods, value_methods},
    {Py_tp_doc, "Storage and lifetime of a handle (handles.Value subclasses it)."},
    {0, NULL},
};

static PyType_Spec value_spec = {"pybridge.futhark._callpath.Value", sizeof(ValueObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_FINALIZE,
                                 value_slots};

static PyMemberDef array_members[] = {
    {"atype", T_OBJECT_EX, offsetof(ValueObject, kind), 0, "the kinds.ArrayKind of this array's type"},
    {"_shape", T_OBJECT_EX, offsetof(ValueObject, shape), 0, NULL},
    {NULL},
};
static PyObject *array_dlpack(ValueObject *self, PyObject *args, PyObject *kw);
static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
     "DLPack export, no copy (interop.futhark_dlpack; its common case here)."},
    {NULL},
};
static PyType_Slot array_slots[] = {{Py_tp_members, array_members}, {Py_tp_methods, array_methods}, {0, NULL}};
static PyType_Spec array_spec = {"pybridge.futhark._callpath.ArrayBase", sizeof(ValueObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, array_slots};

static PyMemberDef opaque_members[] = {
    {"otype", T_OBJECT_EX, offsetof(ValueObject, kind), 0, "the kinds.OpaqueKind of this value's type"},
    {NULL},
};
static PyType_Slot opaque_slots[] = {{Py_tp_members, opaque_members}, {0, NULL}};
static PyType_Spec opaque_spec = {"pybridge.futhark._callpath.OpaqueBase", sizeof(ValueObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, opaque_slots};

/* ------------------------------------------------------------------ Plan */

typedef struct {
    int code, fast;
    PyObject *conv, *kind, *htype, *what, *consumed_by;
    PyObject *consumed; /* the status a consumed argument gets, made with the plan: the call makes no
                         * object for it, and no Python code (str() of `consumed_by`) runs there */
    int shared;
} InSpec;

typedef struct {
    int code;
    PyObject *kind, *htype, *free_fn, *buf;
    free_fn_c free_c;
    char *buf_data;
    int shared;
} OutSpec;

typedef struct {
    PyObject_HEAD
    PyObject *ep, *library, *ctx, *cfun;
    StateObject *state;
    shim_fn shim;
    int sync;
    Py_ssize_t n_in, n_out;
    InSpec *ins;
    OutSpec *outs;
} PlanObject;

static const Py_ssize_t slot_size[] = {1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 1};

static int plan_traverse(PlanObject *p, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->ep);
    Py_VISIT(p->library);
    Py_VISIT(p->ctx);
    Py_VISIT(p->cfun);
    Py_VISIT((PyObject *)p->state);
    for (Py_ssize_t i = 0; p->ins && i < p->n_in; i++) {
        Py_VISIT(p->ins[i].conv);
        Py_VISIT(p->ins[i].kind);
        Py_VISIT(p->ins[i].htype);
        Py_VISIT(p->ins[i].what);
        Py_VISIT(p->ins[i].consumed_by);
        Py_VISIT(p->ins[i].consumed);
    }
    for (Py_ssize_t k = 0; p->outs && k < p->n_out; k++) {
        Py_VISIT(p->outs[k].kind);
        Py_VISIT(p->outs[k].htype);
        Py_VISIT(p->outs[k].free_fn);
        Py_VISIT(p->outs[k].buf);
    }
    return 0;
}

static int plan_clear(PlanObject *p) {
    Py_CLEAR(p->ep);
    Py_CLEAR(p->library);
    Py_CLEAR(p->ctx);
    Py_CLEAR(p->cfun);
    Py_CLEAR(p->state);
    for (Py_ssize_t i = 0; p->ins && i < p->n_in; i++) {
        Py_CLEAR(p->ins[i].conv);
        Py_CLEAR(p->ins[i].kind);
        Py_CLEAR(p->ins[i].htype);
        Py_CLEAR(p->ins[i].what);
        Py_CLEAR(p->ins[i].consumed_by);
        Py_CLEAR(p->ins[i].consumed);
    }
    for (Py_ssize_t k = 0; p->outs && k < p->n_out; k++) {
        Py_CLEAR(p->outs[k].kind);
        Py_CLEAR(p->outs[k].htype);
        Py_CLEAR(p->outs[k].free_fn);
        Py_CLEAR(p->outs[k].buf);
    }
    return 0;
}

static void plan_dealloc(PlanObject *p) {
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    plan_clear(p);
    PyMem_Free(p->ins);
    PyMem_Free(p->outs);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(p);
    Py_DECREF(tp);
}

static PyObject *none_to_null(PyObject *o) {
    if (o == Py_None) return NULL;
    Py_INCREF(o);
    return o;
}

/* Plan(ep, state, shim_address, sync, cfun, inputs, outputs): see callplan.compiled_plan. */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *ep, *state, *shim_addr, *cfun, *inputs, *outputs;
    int sync;
    if (!PyArg_ParseTuple(args, "OOOpUO!O!:Plan", &ep, &state, &shim_addr, &sync, &cfun, &PyTuple_Type, &inputs,
                          &PyTuple_Type, &outputs))
        return NULL;
    if (!IS_STATE(state)) {
        PyErr_SetString(PyExc_TypeError, "Plan: state must be a _callpath.State");
        return NULL;
    }
    Py_ssize_t n_in = PyTuple_Size(inputs), n_out = PyTuple_Size(outputs);
    if (n_in > MAX_ARGS || n_out > MAX_ARGS) {
        PyErr_SetString(PyExc_ValueError, "Plan: too many inputs or outputs");
        return NULL;
    }
    void *shim = PyLong_AsVoidPtr(shim_addr);
    if (shim == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Plan: null shim");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    PlanObject *p = (PlanObject *)alloc(type, 0);
    if (p == NULL) return NULL;
    p->ins = PyMem_Calloc(n_in ? n_in : 1, sizeof(InSpec));
    p->outs = PyMem_Calloc(n_out ? n_out : 1, sizeof(OutSpec));
    if (p->ins == NULL || p->outs == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    p->n_in = n_in;
    p->n_out = n_out;
    Py_INCREF(ep);
    p->ep = ep;
    Py_INCREF(state);
    p->state = (StateObject *)state;
    p->library = PyObject_GetAttrString(ep, "library");
    p->ctx = p->library ? PyObject_GetAttrString(p->library, "context") : NULL;
    if (p->ctx == NULL) goto fail;
    Py_INCREF(cfun);
    p->cfun = cfun;
    p->shim = (shim_fn)shim;
    p->sync = sync;
    for (Py_ssize_t i = 0; i < n_in; i++) {
        InSpec *s = &p->ins[i];
        PyObject *conv, *kind, *htype, *what, *by;
        if (!PyArg_ParseTuple(PyTuple_GetItem(inputs, i), "iiOOOOOp:input", &s->code, &s->fast, &conv, &kind, &htype,
                              &what, &by, &s->shared))
            goto fail;
        if (s->code < 0 || s->code > C_OPAQUE) {
            PyErr_SetString(PyExc_ValueError, "Plan: bad input code");
            goto fail;
        }
        s->conv = none_to_null(conv);
        s->kind = none_to_null(kind);
        s->htype = none_to_null(htype);
        s->what = none_to_null(what);
        s->consumed_by = none_to_null(by);
        if (s->consumed_by != NULL && (s->consumed = consumed_status(s->consumed_by)) == NULL) goto fail;
        if (s->code >= C_ARRAY && (s->htype == NULL || !PyType_Check(s->htype))) {
            PyErr_SetString(PyExc_TypeError, "Plan: a handle input needs its handle type");
            goto fail;
        }
    }
    for (Py_ssize_t k = 0; k < n_out; k++) {
        OutSpec *o = &p->outs[k];
        PyObject *kind, *htype, *free_fn, *free_addr, *buf, *buf_addr;
        if (!PyArg_ParseTuple(PyTuple_GetItem(outputs, k), "iOOOOOOp:output", &o->code, &kind, &htype, &free_fn,
                              &free_addr, &buf, &buf_addr, &o->shared))
            goto fail;
        if (o->code < 0 || o->code > C_OPAQUE) {
            PyErr_SetString(PyExc_ValueError, "Plan: bad output code");
            goto fail;
        }
        o->kind = none_to_null(kind);
        o->htype = none_to_null(htype);
        o->free_fn = none_to_null(free_fn);
        o->buf = none_to_null(buf);
        if (o->code >= C_ARRAY) {
            o->free_c = (free_fn_c)PyLong_AsVoidPtr(free_addr);
            if (o->free_c == NULL || o->htype == NULL || !PyType_Check(o->htype)) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Plan: a handle output needs its type and free");
                goto fail;
            }
        } else {
            o->buf_data = PyLong_AsVoidPtr(buf_addr);
            if (o->buf_data == NULL || o->buf == NULL) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Plan: a scalar output needs its buffer");
                goto fail;
            }
        }
    }
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

/* NumPy scalars read and made in place: a NumPy scalar is its object header followed by its value
 * (numpy/arrayscalars.h: PyArrayScalar_VAL), and a new one is its type's tp_alloc with the value
 * written there (PyArrayScalar_New, PyArrayScalar_ASSIGN), as NumPy's own indexing makes it. The
 * C API would need NumPy's headers, which use more than the stable ABI, so numpy_scalars() checks
 * the layout on this NumPy at import (callplan.configure_compiled): a type that fails the check keeps
 * the calls into NumPy (__index__, __float__, indexing the result buffer). */
#define NP_VALUE(o) ((char *)(o) + sizeof(PyObject))
#define NP_READ_MAX 16
static struct {
    PyTypeObject *type;
    int code; /* the value's C type, as the Plan's codes */
} np_read[NP_READ_MAX];  /* exact NumPy scalar types whose value is read in place */
static int n_np_read;
static PyTypeObject *np_read_f32, *np_read_bool; /* np.float32 and np.bool_ when read in place: tested first */
static PyTypeObject *np_made[C_BOOL + 1]; /* per result code: the type made in place (NULL: index the buffer) */
static allocfunc np_alloc[C_BOOL + 1];
static PyObject *np_true, *np_false;      /* the bool results (NumPy's singletons) */

/* The C type code of v's value when v is a NumPy integer read in place, else -1. */
static int np_int_code(PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
    for (int i = 0; i < n_np_read; i++)
        if (np_read[i].type == t) return np_read[i].code;
    return -1;
}

static int in_tuple(PyObject *t, PyObject *type) {
    Py_ssize_t n = PyTuple_Size(t);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyTuple_GetItem(t, i) == type) return 1;
    return 0;
}

/* Whether v's exact type is one cffi takes as it is for `code` (callplan._PASS; f32 is apart). */
static int passes(int code, PyObject *v) {
    PyObject *t = (PyObject *)Py_TYPE(v);
    switch (code) {
    case C_I8: case C_I16: case C_I32: case C_I64: case C_U8: case C_U16: case C_U32: case C_U64:
        return PyLong_CheckExact(v) || np_int_code(v) >= 0 || in_tuple(np_int_types, t);
    case C_F64:
        return PyFloat_CheckExact(v) || t == np_float64 || t == np_float32 || t == np_float16;
    case C_BOOL:
        return PyBool_Check(v) || t == np_bool;
    default:
        return 0;
    }
}

/* An integer into the slot of `code` (an integer code, or f16's bits): 0, or 1 when out of range.
 * x: the value when ovf is 0; ovf > 0: above LLONG_MAX (u: the value, when has_u: it fits 64 bits
 * unsigned), ovf < 0: below LLONG_MIN. */
static int int_to_slot(int code, long long x, int ovf, int has_u, unsigned long long u, pybridge_slot *s) {
    if (code == C_U64) {
        if (ovf > 0) {
            if (!has_u) return 1;
            s->u64 = u;
            return 0;
        }
        s->u64 = (uint64_t)x;
        return ovf < 0 || x < 0;
    }
    int bad = ovf != 0;
    switch (code) {
    case C_I8: bad |= x < INT8_MIN || x > INT8_MAX; s->i8 = (int8_t)x; break;
    case C_I16: bad |= x < INT16_MIN || x > INT16_MAX; s->i16 = (int16_t)x; break;
    case C_I32: bad |= x < INT32_MIN || x > INT32_MAX; s->i32 = (int32_t)x; break;
    case C_I64: s->i64 = (int64_t)x; break;
    case C_U8: bad |= x < 0 || x > UINT8_MAX; s->u8 = (uint8_t)x; break;
    case C_U16: case C_F16: bad |= x < 0 || x > UINT16_MAX; s->u16 = (uint16_t)x; break;
    case C_U32: bad |= x < 0 || x > UINT32_MAX; s->u32 = (uint32_t)x; break;
    }
    return bad;
}

/* The value of a NumPy integer scalar read in place (np_code's `code`) into the slot of `code`. */
static int np_int_to_slot(int code, int from, const char *p, pybridge_slot *s) {
    long long x = 0;
    switch (from) {
    case C_I8: x = *(const int8_t *)p; break;
    case C_I16: x = *(const int16_t *)p; break;
    case C_I32: x = *(const int32_t *)p; break;
    case C_I64: x = *(const int64_t *)p; break;
    case C_U8: x = *(const uint8_t *)p; break;
    case C_U16: x = *(const uint16_t *)p; break;
    case C_U32: x = *(const uint32_t *)p; break;
    case C_U64: {
        uint64_t u = *(const uint64_t *)p;
        if (u > (uint64_t)LLONG_MAX) return int_to_slot(code, 0, 1, 1, u, s);
        x = (long long)u;
        break;
    }
    }
    return int_to_slot(code, x, 0, 0, 0, s);
}

/* v (an accepted type, or a converter's result) into a slot as cffi converts it: 0, 1 for an
 * integer out of range (cffi's OverflowError), -1 for another error. A NumPy scalar's value is read
 * in place (np_code), giving what its __index__ / __float__ would. */
static int to_slot(int code, PyObject *v, pybridge_slot *s) {
    if (code <= C_F16) {
        int from = PyLong_CheckExact(v) ? -1 : np_int_code(v);
        if (from >= 0) return np_int_to_slot(code, from, NP_VALUE(v), s);
        PyObject *n = PyNumber_Index(v);
        if (n == NULL) return -1;
        int ovf = 0, has_u = 0;
        unsigned long long u = 0;
        long long x = PyLong_AsLongLongAndOverflow(n, &ovf);
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(n);
            return -1;
        }
        if (code == C_U64 && ovf > 0) {
            u = PyLong_AsUnsignedLongLong(n);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) PyErr_Clear();
            else has_u = 1;
        }
        Py_DECREF(n);
        return int_to_slot(code, x, ovf, has_u, u, s);
    }
    if (code == C_F32 || code == C_F64) {
        double d;
        if (Py_TYPE(v) == np_read_f32) {
            /* as float(v): widened (a signalling NaN made quiet, as by NumPy's __float__), then narrowed */
            volatile double w = *(const float *)NP_VALUE(v);
            d = w;
        } else {
            d = PyFloat_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) return -1;
        }
        if (code == C_F32) s->f32 = (float)d;
        else s->f64 = d;
        return 0;
    }
    if (Py_TYPE(v) == np_read_bool) { /* np.bool_ */
        s->b = *(const uint8_t *)NP_VALUE(v) != 0;
        return 0;
    }
    int t = PyObject_IsTrue(v); /* bool and np.bool_ only reach here */
    if (t < 0) return -1;
    s->b = t;
    return 0;
}

/* A scalar result of `code` from its C value: the NumPy scalar that indexing its buffer gives. */
static PyObject *scalar_result(OutSpec *o, const pybridge_slot *value) {
    if (o->code == C_BOOL && np_true != NULL) {
        PyObject *r = *(const uint8_t *)value ? np_true : np_false;
        Py_INCREF(r);
        return r;
    }
    if (np_made[o->code] != NULL) {
        PyObject *r = np_alloc[o->code](np_made[o->code], 0);
        if (r != NULL) memcpy(NP_VALUE(r), value, slot_size[o->code]);
        return r;
    }
    memcpy(o->buf_data, value, slot_size[o->code]);
    return PySequence_GetItem(o->buf, 0);
}

/* context._State.free_orphan: free the value registered under `key`, whose handle is gone (a
 * __del__ that an interrupt cut short left it; a new handle at the same address is about to
 * register). The pointer is made while the entry is still registered, then the entry goes and the
 * free follows with no Python code in between (cffi's cast and call run none). Lock held. */
static int free_orphan(StateObject *s, PyObject *key) {
    PyObject *entry = PyDict_GetItemWithError(s->values, key);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(entry) || PyTuple_Size(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "a registry entry is (free function, pointer)");
        return -1;
    }
    PyObject *free_obj = PyTuple_GetItem(entry, 0), *ptr = PyTuple_GetItem(entry, 1), *ctx = NULL;
    Py_INCREF(free_obj);
    if (PyLong_CheckExact(ptr)) { /* registered by a plan: an address */
        PyObject *ffi = PyObject_GetAttr((PyObject *)s, s_ffi);
        ptr = ffi == NULL ? NULL : PyObject_CallMethodObjArgs(ffi, s_cast, s_voidp, ptr, NULL);
        Py_XDECREF(ffi);
    } else {
        Py_INCREF(ptr);
    }
    if (ptr != NULL) ctx = PyObject_GetAttr((PyObject *)s, s_ctx);
    int rc = -1;
    if (ctx != NULL && PyDict_DelItem(s->values, key) == 0) {
        PyObject *r = PyObject_CallFunctionObjArgs(free_obj, ctx, ptr, NULL);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(free_obj);
    Py_XDECREF(ptr);
    Py_XDECREF(ctx);
    return rc;
}

/* A handle owning a result (ArrayHandle/OpaqueHandle.__init__ as attribute stores, registered
 * last, on the state's list, after freeing an orphan registered under its id); NULL with the
 * value freed if it cannot be made. Lock held. */
static PyObject *make_handle(StateObject *state, PyObject *library, PyObject *ctx, OutSpec *o, void *raw) {
    PyTypeObject *ht = (PyTypeObject *)o->htype;
    allocfunc alloc = (allocfunc)PyType_GetSlot(ht, Py_tp_alloc);
    ValueObject *h = (ValueObject *)alloc(ht, 0);
    PyObject *key = NULL;
    if (h == NULL) goto fail;
    Py_INCREF(o->kind);
    h->kind = o->kind;
    if (o->code == C_ARRAY) {
        Py_INCREF(Py_None);
        h->shape = Py_None;
    }
    Py_INCREF(library);
    h->library = library;
    Py_INCREF(ctx);
    h->ctx = ctx;
    Py_INCREF(state);
    h->state = state;
    h->raw = raw;
    h->has_raw = 1;
    Py_INCREF(o->free_fn);
    h->free_fn = o->free_fn;
    h->free_c = o->free_c;
    Py_INCREF(Py_None);
    h->status = Py_None;
    Py_INCREF(Py_None);
    h->keep = Py_None;
    Py_INCREF(Py_None);
    h->aliases = Py_None;
    if (state->values == NULL) {
        PyErr_SetString(PyExc_AttributeError, "values");
        goto fail;
    }
    if (state->open && PyDict_Size(state->values) > 0) { /* orphans are only there */
        key = PyLong_FromVoidPtr(h);
        if (key == NULL || free_orphan(state, key) < 0) goto fail;
        Py_CLEAR(key);
    }
    list_add(state, h, LISTED_ADDRESS); /* last: the registry says which handle owns a value */
    return (PyObject *)h;
fail: { /* nobody will see this value: free it, and leave the handle nothing to free */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        o->free_c((void *)(uintptr_t)state->raw_ctx, raw);
        if (h != NULL) {
            Py_INCREF(s_freed);
            Py_XSETREF(h->status, s_freed);
        }
        PyErr_Restore(t, v, tb);
    }
    Py_XDECREF(h);
    Py_XDECREF(key);
    return NULL;
}

static PyObject *take_result(PlanObject *p, OutSpec *o, void *raw) {
    return make_handle(p->state, p->library, p->ctx, o, raw);
}

static PyObject *call_general(PlanObject *p, PyObject *values) {
    return PyObject_CallMethodObjArgs(p->ep, s_general, values, NULL);
}

/* Non-unique handle results join the non-unique handle arguments' alias group (callplan.py). */
static int link_results(PlanObject *p, PyObject **a, PyObject **res) {
    PyObject *ins[MAX_ARGS], *outs[MAX_ARGS];
    Py_ssize_t ni = 0, no = 0;
    for (Py_ssize_t k = 0; k < p->n_out; k++)
        if (p->outs[k].code >= C_ARRAY && p->outs[k].shared) outs[no++] = res[k];
    if (no == 0) return 0;
    for (Py_ssize_t i = 0; i < p->n_in; i++)
        if (p->ins[i].code >= C_ARRAY && p->ins[i].shared) ins[ni++] = a[i];
    if (no + ni < 2) return 0;
    if (ni > 0) { /* the common case, inlined: the arguments on one group's root already */
        PyObject *g = ((ValueObject *)ins[0])->aliases;
        int same = g != NULL && g != Py_None;
        for (Py_ssize_t i = 1; same && i < ni; i++) same = ((ValueObject *)ins[i])->aliases == g;
        if (same) {
            PyObject *parent = group_get(g, s_parent);
            if (parent == NULL) return -1;
            same = parent == Py_None;
            Py_DECREF(parent);
        }
        if (same) {
            PyObject *live = group_get(g, s_live);
            if (live == NULL) return -1;
            PyObject *add = PyLong_FromSsize_t(no), *nl = add ? PyNumber_Add(live, add) : NULL;
            Py_DECREF(live);
            Py_XDECREF(add);
            if (nl == NULL) return -1;
            for (Py_ssize_t k = 0; k < no; k++) {
                Py_INCREF(g);
                Py_XSETREF(((ValueObject *)outs[k])->aliases, g);
            }
            int r = group_set_live(g, nl);
            Py_DECREF(nl);
            return r;
        }
    }
    PyObject *list = PyList_New(ni + no);
    if (list == NULL) return -1;
    for (Py_ssize_t i = 0; i < ni; i++) {
        Py_INCREF(ins[i]);
        PyList_SetItem(list, i, ins[i]);
    }
    for (Py_ssize_t k = 0; k < no; k++) {
        Py_INCREF(outs[k]);
        PyList_SetItem(list, ni + k, outs[k]);
    }
    PyObject *r = PyObject_CallFunctionObjArgs(join_fn, list, NULL);
    Py_DECREF(list);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* Futhark's error for a failed call: the message taken (and freed) here, the exception built by
 * context.error_for_message, then EntryPoint._explained. */
static void raise_failed(PlanObject *p, int rc, char *msg, PyObject *args) {
    PyObject *text;
    if (msg != NULL) {
        text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
        free(msg);
    } else {
        text = PyUnicode_FromString("");
    }
    if (text == NULL) return;
    PyObject *e = PyObject_CallFunction(error_for_message, "iOO", rc, text, p->cfun);
    Py_DECREF(text);
    if (e == NULL) return;
    PyObject *x = PyObject_CallMethodObjArgs(p->ep, s_explained, e, args, NULL);
    Py_DECREF(e);
    if (x == NULL) return;
    PyErr_SetObject((PyObject *)Py_TYPE(x), x);
    Py_DECREF(x);
}

static PyObject *plan_call(PlanObject *p, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_Size(args);
    if ((kwargs != NULL && PyDict_Size(kwargs) > 0) || n != p->n_in) {
        PyObject *kw = kwargs ? kwargs : PyDict_New();
        if (kw == NULL) return NULL;
        PyObject *bound = PyObject_CallMethodObjArgs(p->ep, s_bind, args, kw, NULL);
        if (kwargs == NULL) Py_DECREF(kw);
        if (bound == NULL) return NULL;
        PyObject *r = call_general(p, bound);
        Py_DECREF(bound);
        return r;
    }
    PyObject *a[MAX_ARGS];         /* the arguments, after their converters (owned) */
    PyObject *res[MAX_ARGS];       /* results (owned) */
    pybridge_slot in_slots[MAX_ARGS], out_slots[MAX_ARGS];
    void *out_ptrs[MAX_ARGS];
    Py_ssize_t n_a = 0, n_res = 0, i, k;
    PyObject *ret = NULL;
    StateObject *s = p->state;
    int locked = 0;

    /* Before the lock: type tests and conversions, in parameter order (the Python plan's `pre`). */
    for (i = 0; i < n; i++, n_a++) {
        PyObject *v = PyTuple_GetItem(args, i);
        InSpec *in = &p->ins[i];
        if (in->code >= C_ARRAY) {
            if ((PyObject *)Py_TYPE(v) != in->htype || ((ValueObject *)v)->kind != in->kind) goto general;
            Py_INCREF(v);
        } else if (in->fast == 2) {
            /* a size (i64): an integer >= 0 as it is, which is what its converter returns it as;
             * anything else through the converter (its value or its error) */
            pybridge_slot size;
            int r = PyLong_CheckExact(v) || np_int_code(v) >= 0 ? to_slot(C_I64, v, &size) : 1;
            if (r < 0) PyErr_Clear();
            if (r == 0 && size.i64 >= 0) {
                Py_INCREF(v);
            } else {
                v = PyObject_CallFunctionObjArgs(in->conv, v, NULL);
                if (v == NULL) goto done;
            }
        } else if (!in->fast) {
            v = PyObject_CallFunctionObjArgs(in->conv, v, NULL);
            if (v == NULL) goto done;
        } else if (in->code == C_F32) {
            /* np.float32 as it is; a float or np.float64 within f32's range as a float */
            PyObject *t = (PyObject *)Py_TYPE(v);
            if (t == np_float32) {
                Py_INCREF(v);
            } else if (t == (PyObject *)&PyFloat_Type || t == np_float64) {
                double d = PyFloat_AsDouble(v);
                if (d == -1.0 && PyErr_Occurred()) goto done;
                if (-f32_max <= d && d <= f32_max) { /* NaN fails both tests */
                    Py_INCREF(v);
                } else {
                    v = PyObject_CallFunctionObjArgs(in->conv, v, NULL);
                    if (v == NULL) goto done;
                }
            } else {
                v = PyObject_CallFunctionObjArgs(in->conv, v, NULL);
                if (v == NULL) goto done;
            }
        } else if (passes(in->code, v)) {
            Py_INCREF(v);
        } else {
            v = PyObject_CallFunctionObjArgs(in->conv, v, NULL);
            if (v == NULL) goto done;
        }
        a[i] = v;
    }
    for (i = 0; i < n; i++) { /* consumed handles: passed twice, or sharing memory with a live one */
        if (p->ins[i].consumed_by == NULL) continue;
        for (Py_ssize_t j = 0; j < n; j++)
            if (j != i && p->ins[j].code >= C_ARRAY && a[j] == a[i]) goto general;
        PyObject *g = ((ValueObject *)a[i])->aliases;
        if (g != NULL && g != Py_None) {
            PyObject *r = PyObject_CallFunctionObjArgs(shared_fn, a[i], NULL);
            if (r == NULL) goto done;
            int t = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (t < 0) goto done;
            if (t) goto general;
        }
    }

    if (state_lock(s) < 0) goto done;
    locked = 1;
    if (!s->open) {
        PyErr_SetObject(InvalidHandleError, s_closed_msg);
        goto done;
    }
    for (i = 0; i < n; i++) { /* still live: another thread may have freed or consumed it */
        InSpec *in = &p->ins[i];
        if (in->code < C_ARRAY) continue;
        ValueObject *h = (ValueObject *)a[i];
        if (h->status != Py_None) {
            PyObject *r = PyObject_CallMethodObjArgs((PyObject *)h, s_live_ptr, in->what, NULL);
            if (r == NULL) goto done;
            Py_DECREF(r);
        }
        if (value_raw(h, &in_slots[i].p) < 0) goto done;
    }
    for (i = 0; i < n; i++) {
        int code = p->ins[i].code;
        if (code >= C_ARRAY) continue;
        int r = to_slot(code, a[i], &in_slots[i]);
        if (r < 0) goto done;
        if (r > 0) { /* out of range (cffi's OverflowError): the converters' error names the parameter */
            PyObject *x = PyObject_CallMethodObjArgs(p->ep, s_convert_scalars, args, NULL);
            if (x != NULL) {
                Py_DECREF(x);
                PyErr_Format(PyExc_OverflowError, "%U: an argument is out of range for its C type", p->cfun);
            }
            goto done;
        }
    }
    for (k = 0; k < p->n_out; k++) out_ptrs[k] = &out_slots[k];

    char *err = NULL;
    int rc;
    {
        void *ctx = (void *)(uintptr_t)s->raw_ctx;
        shim_fn shim = p->shim;
        int sync = p->sync;
        Py_BEGIN_ALLOW_THREADS
        rc = shim(ctx, sync, &err, out_ptrs, in_slots);
        Py_END_ALLOW_THREADS
    }
    /* The bookkeeping runs whatever happens next: results owned, consumed arguments freed. */
    int failed = 0;
    if (rc == 0) {
        for (k = 0; k < p->n_out; k++) {
            OutSpec *o = &p->outs[k];
            res[k] = NULL;
            if (o->code < C_ARRAY) continue;
            if (failed) { /* an earlier result could not be made: free this one */
                o->free_c((void *)(uintptr_t)s->raw_ctx, out_slots[k].p);
                continue;
            }
            res[k] = take_result(p, o, out_slots[k].p);
            if (res[k] == NULL) failed = 1;
        }
        n_res = p->n_out;
    }
    for (i = 0; i < n; i++) {
        InSpec *in = &p->ins[i];
        if (in->consumed_by == NULL) continue;
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        int r = value_release_impl((ValueObject *)a[i], in->consumed, 1);
        if (t != NULL) { /* the first error wins */
            if (r < 0) PyErr_Clear();
            PyErr_Restore(t, v, tb);
        } else if (r < 0) {
            failed = 1;
        }
    }
    if (rc != 0) {
        if (failed) {
            free(err);
        } else {
            raise_failed(p, rc, err, args);
        }
        goto done;
    }
    if (failed) goto done;
    if (link_results(p, a, res) < 0) goto done;
    for (k = 0; k < p->n_out; k++) {
        OutSpec *o = &p->outs[k];
        if (o->code >= C_ARRAY) continue;
        res[k] = scalar_result(o, &out_slots[k]);
        if (res[k] == NULL) goto done;
    }
    if (p->n_out == 1) {
        ret = res[0];
        res[0] = NULL;
    } else {
        ret = PyTuple_New(p->n_out);
        if (ret == NULL) goto done;
        for (k = 0; k < p->n_out; k++) {
            PyTuple_SetItem(ret, k, res[k]);
            res[k] = NULL;
        }
    }
done:
    if (locked) state_unlock(s);
    for (k = 0; k < n_res; k++) Py_XDECREF(res[k]);
    for (i = 0; i < n_a; i++) Py_DECREF(a[i]);
    return ret;
general:
    for (i = 0; i < n_a; i++) Py_DECREF(a[i]);
    return call_general(p, args);
}

static PyType_Slot plan_slots[] = {
    {Py_tp_dealloc, plan_dealloc},
    {Py_tp_traverse, plan_traverse},
    {Py_tp_clear, plan_clear},
    {Py_tp_call, plan_call},
    {Py_tp_new, plan_new},
    {Py_tp_doc, "One entry point's call plan in C (callplan.py's compiled function, mirrored)."},
    {0, NULL},
};

static PyType_Spec plan_spec = {"pybridge.futhark._callpath.Plan", sizeof(PlanObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, plan_slots};

/* ------------------------------------------------------------------ RawNew */

/* ArrayKind's new_raw for a plain request (an int address, a shape of `rank` non-negative ints):
 * the lock, the open check, Futhark's new_raw with the GIL released, the handle made and
 * registered as a plan's result is (make_handle), the owner kept (kinds.py mirrors it in Python). */
#define RAW_MAX_RANK 8

typedef struct {
    PyObject_HEAD
    StateObject *state;
    PyObject *library, *ctx, *what;
    OutSpec out;
    void *fn;
    int rank;
} RawNewObject;

static int rawnew_traverse(RawNewObject *r, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(r));
    Py_VISIT((PyObject *)r->state);
    Py_VISIT(r->library);
    Py_VISIT(r->ctx);
    Py_VISIT(r->what);
    Py_VISIT(r->out.kind);
    Py_VISIT(r->out.htype);
    Py_VISIT(r->out.free_fn);
    return 0;
}

static int rawnew_clear(RawNewObject *r) {
    Py_CLEAR(r->state);
    Py_CLEAR(r->library);
    Py_CLEAR(r->ctx);
    Py_CLEAR(r->what);
    Py_CLEAR(r->out.kind);
    Py_CLEAR(r->out.htype);
    Py_CLEAR(r->out.free_fn);
    return 0;
}

static void rawnew_dealloc(RawNewObject *r) {
    PyTypeObject *tp = Py_TYPE(r);
    PyObject_GC_UnTrack(r);
    rawnew_clear(r);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(r);
    Py_DECREF(tp);
}

/* RawNew(state, library, kind, handle_type, new_raw_address, free_function, free_address, rank, what) */
static PyObject *rawnew_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *state, *library, *kind, *htype, *fn_addr, *free_fn, *free_addr, *what;
    int rank;
    if (!PyArg_ParseTuple(args, "OOOO!OOOiU:RawNew", &state, &library, &kind, &PyType_Type, &htype, &fn_addr, &free_fn,
                          &free_addr, &rank, &what))
        return NULL;
    if (!IS_STATE(state)) {
        PyErr_SetString(PyExc_TypeError, "RawNew: state must be a _callpath.State");
        return NULL;
    }
    if (rank < 1 || rank > RAW_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "RawNew: rank %d is not in 1..%d", rank, RAW_MAX_RANK);
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(fn_addr), *free_c = fn ? PyLong_AsVoidPtr(free_addr) : NULL;
    if (fn == NULL || free_c == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "RawNew: null function");
        return NULL;
    }
    PyObject *ctx = PyObject_GetAttrString(library, "context");
    if (ctx == NULL) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    RawNewObject *r = (RawNewObject *)alloc(type, 0);
    if (r == NULL) {
        Py_DECREF(ctx);
        return NULL;
    }
    r->ctx = ctx;
    Py_INCREF(state);
    r->state = (StateObject *)state;
    Py_INCREF(library);
    r->library = library;
    Py_INCREF(what);
    r->what = what;
    r->out.code = C_ARRAY;
    Py_INCREF(kind);
    r->out.kind = kind;
    Py_INCREF(htype);
    r->out.htype = htype;
    Py_INCREF(free_fn);
    r->out.free_fn = free_fn;
    r->out.free_c = (free_fn_c)free_c;
    r->fn = fn;
    r->rank = rank;
    return (PyObject *)r;
}

typedef void *(*raw_fn1)(void *, uint64_t, int64_t);
typedef void *(*raw_fn2)(void *, uint64_t, int64_t, int64_t);
typedef void *(*raw_fn3)(void *, uint64_t, int64_t, int64_t, int64_t);
typedef void *(*raw_fn4)(void *, uint64_t, int64_t, int64_t, int64_t, int64_t);
typedef void *(*raw_fn5)(void *, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void *(*raw_fn6)(void *, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void *(*raw_fn7)(void *, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
typedef void *(*raw_fn8)(void *, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);

static void *raw_call(void *fn, int rank, void *ctx, uint64_t data, const int64_t *d) {
    switch (rank) {
    case 1: return ((raw_fn1)fn)(ctx, data, d[0]);
    case 2: return ((raw_fn2)fn)(ctx, data, d[0], d[1]);
    case 3: return ((raw_fn3)fn)(ctx, data, d[0], d[1], d[2]);
    case 4: return ((raw_fn4)fn)(ctx, data, d[0], d[1], d[2], d[3]);
    case 5: return ((raw_fn5)fn)(ctx, data, d[0], d[1], d[2], d[3], d[4]);
    case 6: return ((raw_fn6)fn)(ctx, data, d[0], d[1], d[2], d[3], d[4], d[5]);
    case 7: return ((raw_fn7)fn)(ctx, data, d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
    default: return ((raw_fn8)fn)(ctx, data, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
    }
}

/* new_raw(data, shape) under the lock with `owner` kept: the handle, or NULL with Python's error
 * (a TypeError for a shape that is not `rank` non-negative ints). shape: a tuple. */
static PyObject *rawnew_make(RawNewObject *r, uint64_t data, PyObject *shape, PyObject *owner) {
    int64_t dims[RAW_MAX_RANK];
    if (PyTuple_Size(shape) != r->rank) {
        PyErr_Format(PyExc_TypeError, "RawNew: a shape of %d dimensions was expected", r->rank);
        return NULL;
    }
    for (int i = 0; i < r->rank; i++) {
        PyObject *d = PyTuple_GetItem(shape, i);
        dims[i] = PyLong_Check(d) ? PyLong_AsLongLong(d) : -1;
        if (dims[i] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "RawNew: a shape of non-negative ints was expected");
            return NULL;
        }
    }
    StateObject *s = r->state;
    if (state_lock(s) < 0) return NULL;
    PyObject *h = NULL;
    if (!s->open) {
        PyErr_SetObject(InvalidHandleError, s_closed_msg);
        goto out;
    }
    void *raw;
    {
        void *ctx = (void *)(uintptr_t)s->raw_ctx, *fn = r->fn;
        int rank = r->rank;
        Py_BEGIN_ALLOW_THREADS
        raw = raw_call(fn, rank, ctx, data, dims);
        Py_END_ALLOW_THREADS
    }
    if (raw == NULL) { /* Futhark's error, read under the lock: ctx.error(None, what) as new_value */
        PyObject *e = PyObject_CallMethod(r->ctx, "error", "OO", Py_None, r->what);
        if (e != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(e), e);
            Py_DECREF(e);
        }
        goto out;
    }
    h = make_handle(s, r->library, r->ctx, &r->out, raw);
    if (h != NULL) {
        Py_INCREF(owner);
        Py_XSETREF(((ValueObject *)h)->keep, owner);
    }
out:
    state_unlock(s);
    return h;
}

/* (address, shape, owner) -> the handle. The caller (kinds.py) passes what it checked: an int
 * address and a tuple of `rank` non-negative ints; anything else is a TypeError here. */
static PyObject *rawnew_call(RawNewObject *r, PyObject *args, PyObject *kw) {
    PyObject *addr, *shape, *owner;
    if (kw != NULL && PyDict_Size(kw) != 0) {
        PyErr_SetString(PyExc_TypeError, "RawNew takes no keywords");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O:RawNew", &PyLong_Type, &addr, &PyTuple_Type, &shape, &owner)) return NULL;
    uint64_t data = PyLong_AsUnsignedLongLong(addr);
    if (data == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    return rawnew_make(r, data, shape, owner);
}

static PyType_Slot rawnew_slots[] = {
    {Py_tp_dealloc, rawnew_dealloc},
    {Py_tp_traverse, rawnew_traverse},
    {Py_tp_clear, rawnew_clear},
    {Py_tp_call, rawnew_call},
    {Py_tp_new, rawnew_new},
    {Py_tp_doc, "ArrayKind.new_raw in C for an int address and a checked shape (kinds.py)."},
    {0, NULL},
};

static PyType_Spec rawnew_spec = {"pybridge.futhark._callpath.RawNew", sizeof(RawNewObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, rawnew_slots};

/* ------------------------------------------------------------------ stream order */

/* ordering.EventSlot.try_order's two driver calls: cuEventRecord(event, producer), then, if that
 * worked, cuStreamWaitEvent(waiter, event, 0). The GIL stays held across both, so no other thread
 * records the event in between (the Python path holds the slot's lock for that). 0 when both
 * worked, else (record's code, wait's code). */
typedef int (*record_fn)(uintptr_t, uintptr_t);
typedef int (*wait_fn)(uintptr_t, uintptr_t, unsigned int);

/* The two calls: record's code, and in *wrc the wait's (0 when the record failed: no wait made). */
static int record_then_wait(record_fn record, wait_fn wait, uintptr_t event, uintptr_t waiter, uintptr_t producer,
                            int *wrc) {
    int rc = record(event, producer);
    *wrc = rc == 0 ? wait(waiter, event, 0) : 0;
    return rc;
}

static PyObject *order_streams(PyObject *m, PyObject *args) {
    unsigned long long record, wait, event, waiter, producer;
    if (!PyArg_ParseTuple(args, "KKKKK:order_streams", &record, &wait, &event, &waiter, &producer)) return NULL;
    if (!record || !wait) {
        PyErr_SetString(PyExc_ValueError, "order_streams: null driver function");
        return NULL;
    }
    int wrc, rc = record_then_wait((record_fn)(uintptr_t)record, (wait_fn)(uintptr_t)wait, (uintptr_t)event,
                                   (uintptr_t)waiter, (uintptr_t)producer, &wrc);
    if (rc == 0 && wrc == 0) return PyLong_FromLong(0);
    return Py_BuildValue("(ii)", rc, wrc);
}

/* ------------------------------------------------------------------ Sync */

/* Context.sync in C (context.py's method, mirrored): the lock, the open check, the sync with the
 * GIL released, the host buffers kept until it dropped, Futhark's error raised by ctx.error(). It
 * holds the context through a weak reference: the context holds it. */
typedef struct {
    PyObject_HEAD
    StateObject *state;
    PyObject *ctx_ref, *pending;
    int (*sync)(void *);
} SyncObject;

static PyObject *sync_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *state, *ref, *pending, *addr;
    if (!PyArg_ParseTuple(args, "OOO!O:Sync", &state, &ref, &PyList_Type, &pending, &addr)) return NULL;
    if (!IS_STATE(state)) {
        PyErr_SetString(PyExc_TypeError, "Sync: state must be a _callpath.State");
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(addr);
    if (fn == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Sync: null function");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    SyncObject *y = (SyncObject *)alloc(type, 0);
    if (y == NULL) return NULL;
    Py_INCREF(state);
    y->state = (StateObject *)state;
    Py_INCREF(ref);
    y->ctx_ref = ref;
    Py_INCREF(pending);
    y->pending = pending;
    y->sync = (int (*)(void *))fn;
    return (PyObject *)y;
}

static void sync_dealloc(SyncObject *y) {
    PyTypeObject *tp = Py_TYPE(y);
    Py_CLEAR(y->state);
    Py_CLEAR(y->ctx_ref);
    Py_CLEAR(y->pending);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(y);
    Py_DECREF(tp);
}

static PyObject *sync_call(SyncObject *y, PyObject *args, PyObject *kw) {
    if (PyTuple_Size(args) != 0 || (kw != NULL && PyDict_Size(kw) != 0)) {
        PyErr_SetString(PyExc_TypeError, "sync() takes no arguments");
        return NULL;
    }
    StateObject *s = y->state;
    if (state_lock(s) < 0) return NULL;
    PyObject *ret = NULL;
    if (!s->open) {
        PyErr_SetObject(InvalidHandleError, s_closed_msg);
        goto out;
    }
    int rc;
    {
        void *ctx = (void *)(uintptr_t)s->raw_ctx;
        int (*fn)(void *) = y->sync;
        Py_BEGIN_ALLOW_THREADS
        rc = fn(ctx);
        Py_END_ALLOW_THREADS
    }
    if (PyList_Size(y->pending) > 0 && PyList_SetSlice(y->pending, 0, PY_SSIZE_T_MAX, NULL) < 0) goto out;
    if (rc != 0) {
        PyObject *ctx = PyObject_CallNoArgs(y->ctx_ref);
        if (ctx == NULL) goto out;
        PyObject *e = ctx == Py_None ? NULL : PyObject_CallMethod(ctx, "error", "is", rc, "futhark_context_sync");
        if (ctx == Py_None) PyErr_SetObject(InvalidHandleError, s_closed_msg);
        Py_DECREF(ctx);
        if (e != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(e), e);
            Py_DECREF(e);
        }
        goto out;
    }
    Py_INCREF(Py_None);
    ret = Py_None;
out:
    state_unlock(s);
    return ret;
}

static PyType_Slot sync_slots[] = {
    {Py_tp_dealloc, sync_dealloc},
    {Py_tp_call, sync_call},
    {Py_tp_new, sync_new},
    {Py_tp_doc, "Context.sync in C: wait for all outstanding work; errors of asynchronous work surface here."},
    {0, NULL},
};

static PyType_Spec sync_spec = {"pybridge.futhark._callpath.Sync", sizeof(SyncObject), 0, Py_TPFLAGS_DEFAULT, sync_slots};

/* ------------------------------------------------------------------ DLPack */

typedef struct {
    int32_t device_type, device_id;
} DLDevice;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
    uint32_t major, minor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* One allocation: the managed tensor, then shape and strides. manager_ctx is the owner (a reference). */
static void release_owner(void *owner, void *block) {
    PyGILState_STATE g = PyGILState_Ensure(); /* the consumer may call the deleter from any thread */
    Py_XDECREF((PyObject *)owner);
    exports_alive--;
    PyGILState_Release(g);
    free(block);
}

static void legacy_deleter(DLManagedTensor *m) {
    if (m != NULL) release_owner(m->manager_ctx, m);
}
static void versioned_deleter(DLManagedTensorVersioned *m) {
    if (m != NULL) release_owner(m->manager_ctx, m);
}

static void capsule_destructor(PyObject *capsule) {
    /* never consumed: it still owns the tensor (a consumed one was renamed "used_...") */
    if (PyCapsule_IsValid(capsule, "dltensor")) {
        legacy_deleter((DLManagedTensor *)PyCapsule_GetPointer(capsule, "dltensor"));
    } else if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
        versioned_deleter((DLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    }
}

static PyObject *make_capsule(PyObject *ptr_o, PyObject *shape, int code, int bits, int device_type, int device_id,
                              int versioned, int readonly, PyObject *owner) {
    void *data = PyLong_AsVoidPtr(ptr_o);
    if (data == NULL && PyErr_Occurred()) return NULL;
    Py_ssize_t ndim = PyTuple_Size(shape);
    size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
    head = (head + 7) & ~(size_t)7;
    char *block = malloc(head + 2 * (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
    if (block == NULL) return PyErr_NoMemory();
    int64_t *dims = (int64_t *)(block + head), *steps = dims + (ndim ? ndim : 1);
    for (Py_ssize_t i = 0; i < ndim; i++) {
        dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
        if (dims[i] == -1 && PyErr_Occurred()) {
            free(block);
            return NULL;
        }
    }
    int64_t step = 1; /* C order, in elements (interop.c_contiguous_strides) */
    for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
        steps[i] = step;
        step *= dims[i] > 1 ? dims[i] : 1;
    }
    DLTensor *t;
    if (versioned) {
        DLManagedTensorVersioned *mv = (DLManagedTensorVersioned *)block;
        memset(mv, 0, sizeof *mv);
        mv->major = 1;
        mv->minor = 0;
        mv->manager_ctx = owner;
        mv->deleter = versioned_deleter;
        mv->flags = readonly ? 1 : 0;
        t = &mv->dl_tensor;
    } else {
        DLManagedTensor *ml = (DLManagedTensor *)block;
        memset(ml, 0, sizeof *ml);
        ml->manager_ctx = owner;
        ml->deleter = legacy_deleter;
        t = &ml->dl_tensor;
    }
    t->data = data;
    t->device.device_type = device_type;
    t->device.device_id = device_id;
    t->ndim = (int32_t)ndim;
    t->dtype.code = (uint8_t)code;
    t->dtype.bits = (uint8_t)bits;
    t->dtype.lanes = 1;
    t->shape = dims;
    t->strides = steps;
    t->byte_offset = 0;
    Py_INCREF(owner);
    exports_alive++;
    PyObject *cap = PyCapsule_New(block, versioned ? "dltensor_versioned" : "dltensor", capsule_destructor);
    if (cap == NULL) {
        exports_alive--;
        Py_DECREF(owner);
        free(block);
    }
    return cap;
}

/* dlpack_capsule(ptr, shape, code, bits, device_type, device_id, versioned, readonly, owner) */
static PyObject *dlpack_capsule(PyObject *m, PyObject *args) {
    PyObject *ptr_o, *shape, *owner;
    int code, bits, device_type, device_id, versioned, readonly;
    if (!PyArg_ParseTuple(args, "OO!iiiippO:dlpack_capsule", &ptr_o, &PyTuple_Type, &shape, &code, &bits,
                          &device_type, &device_id, &versioned, &readonly, &owner))
        return NULL;
    return make_capsule(ptr_o, shape, code, bits, device_type, device_id, versioned, readonly, owner);
}

/* ArrayBase.__dlpack__: interop.futhark_dlpack's common case in C, for a handle exported before
 * (interop._futhark_export's entry carries what it needs: the export state in C form). Anything
 * else (a first export, a freed handle, keywords with other values, a failed driver call) goes
 * to futhark_dlpack itself, which raises the errors. */
static PyObject *futhark_exports, *futhark_dlpack_py, *s_stream, *s_max_version, *s_dl_device, *s_copy;

static PyObject *array_dlpack_slow(PyObject *self, PyObject *args, PyObject *kw) {
    if (futhark_dlpack_py == NULL) { /* the first export of the process: interop configures this module */
        PyObject *interop = PyImport_ImportModule("pybridge.interop");
        PyObject *r = interop ? PyObject_CallMethod(interop, "_compiled_path", NULL) : NULL;
        Py_XDECREF(interop);
        if (r == NULL) return NULL;
        Py_DECREF(r);
        if (futhark_dlpack_py == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "__dlpack__: pybridge.interop did not configure the compiled path");
            return NULL;
        }
    }
    Py_ssize_t n = args ? PyTuple_Size(args) : 0;
    PyObject *full = PyTuple_New(n + 1);
    if (full == NULL) return NULL;
    Py_INCREF(self);
    PyTuple_SetItem(full, 0, self);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GetItem(args, i);
        Py_INCREF(a);
        PyTuple_SetItem(full, i + 1, a);
    }
    PyObject *r = PyObject_Call(futhark_dlpack_py, full, kw);
    Py_DECREF(full);
    return r;
}

static PyObject *array_dlpack(ValueObject *self, PyObject *args, PyObject *kw) {
    PyObject *stream = Py_None, *max_version = Py_None;
    if (futhark_exports == NULL || PyTuple_Size(args) != 0) return array_dlpack_slow((PyObject *)self, args, kw);
    if (kw != NULL) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            if (k == s_stream || PyUnicode_Compare(k, s_stream) == 0) stream = v;
            else if (k == s_max_version || PyUnicode_Compare(k, s_max_version) == 0) max_version = v;
            else if ((k == s_dl_device || PyUnicode_Compare(k, s_dl_device) == 0) && v == Py_None) continue;
            else if ((k == s_copy || PyUnicode_Compare(k, s_copy) == 0) && (v == Py_None || v == Py_False)) continue;
            else return array_dlpack_slow((PyObject *)self, args, kw);
        }
    }
    long long consumer = 1; /* None: the legacy default stream */
    if (stream != Py_None) {
        if (!PyLong_CheckExact(stream)) return array_dlpack_slow((PyObject *)self, args, kw);
        consumer = PyLong_AsLongLong(stream);
        if (consumer == 0 || (consumer == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return array_dlpack_slow((PyObject *)self, args, kw);
        }
    }
    int versioned = 0;
    if (max_version != Py_None) {
        if (!PyTuple_CheckExact(max_version) || PyTuple_Size(max_version) != 2) return array_dlpack_slow((PyObject *)self, args, kw);
        PyObject *ma = PyTuple_GetItem(max_version, 0), *mi = PyTuple_GetItem(max_version, 1);
        if (!PyLong_CheckExact(ma) || !PyLong_CheckExact(mi)) return array_dlpack_slow((PyObject *)self, args, kw);
        long major = PyLong_AsLong(ma), minor = PyLong_AsLong(mi);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return array_dlpack_slow((PyObject *)self, args, kw);
        }
        versioned = major > 1 || (major == 1 && minor >= 0);
    }
    if (self->status != Py_None || self->state == NULL || !self->state->open)
        return array_dlpack_slow((PyObject *)self, args, kw);
    PyObject *key = PyLong_FromVoidPtr(self);
    if (key == NULL) return NULL;
    PyObject *entry = PyDict_GetItemWithError(futhark_exports, key); /* borrowed */
    Py_DECREF(key);
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        return array_dlpack_slow((PyObject *)self, args, kw);
    }
    /* entry: (weak reference, export state, C state or None) */
    if (!PyTuple_Check(entry) || PyTuple_Size(entry) != 3) return array_dlpack_slow((PyObject *)self, args, kw);
    PyObject *ref = PyTuple_GetItem(entry, 0), *cs = PyTuple_GetItem(entry, 2);
    PyObject *alive = PyObject_CallNoArgs(ref);
    if (alive == NULL) return NULL;
    Py_DECREF(alive); /* the handle itself is alive: the test is of identity */
    if (alive != (PyObject *)self || !PyTuple_Check(cs) || PyTuple_Size(cs) != 8)
        return array_dlpack_slow((PyObject *)self, args, kw);
    /* C state: (ptr, shape, code, bits, device type, device id, producer stream or None,
     *           (cuEventRecord, cuStreamWaitEvent, event, Futhark's stream) or None) */
    PyObject *producer = PyTuple_GetItem(cs, 6), *order = PyTuple_GetItem(cs, 7);
    if (producer != Py_None && consumer != -1) {
        unsigned long long record, wait, event, fstream;
        if (!PyArg_ParseTuple(order, "KKKK", &record, &wait, &event, &fstream)) return NULL;
        if ((unsigned long long)consumer != fstream) { /* gpustream.FutharkStream.signal */
            int rc = ((record_fn)(uintptr_t)record)((uintptr_t)event, (uintptr_t)fstream), wrc = 0;
            if (rc == 0) wrc = ((wait_fn)(uintptr_t)wait)((uintptr_t)consumer, (uintptr_t)event, 0);
            if (rc != 0 || wrc != 0) return array_dlpack_slow((PyObject *)self, args, kw); /* raises */
        }
    }
    int code = (int)PyLong_AsLong(PyTuple_GetItem(cs, 2)), bits = (int)PyLong_AsLong(PyTuple_GetItem(cs, 3));
    int dtype_ = (int)PyLong_AsLong(PyTuple_GetItem(cs, 4)), did = (int)PyLong_AsLong(PyTuple_GetItem(cs, 5));
    if (PyErr_Occurred()) return NULL;
    return make_capsule(PyTuple_GetItem(cs, 0), PyTuple_GetItem(cs, 1), code, bits, dtype_, did, versioned, 0,
                        (PyObject *)self);
}

/* configure_dlpack(exports, futhark_dlpack): interop's export cache and the Python export. */
static PyObject *configure_dlpack(PyObject *m, PyObject *args) {
    PyObject *exports, *fn;
    if (!PyArg_ParseTuple(args, "O!O:configure_dlpack", &PyDict_Type, &exports, &fn)) return NULL;
    Py_INCREF(exports);
    Py_XSETREF(futhark_exports, exports);
    Py_INCREF(fn);
    Py_XSETREF(futhark_dlpack_py, fn);
    Py_RETURN_NONE;
}

static PyObject *dlpack_exports_alive(PyObject *m, PyObject *unused) { return PyLong_FromLong(exports_alive); }

/* ------------------------------------------------------------------ pybridge.cuda exchange */

/* The exchange steps of pybridge.cuda and pybridge.interop in C (issue 34): each is the common case
 * of a Python function that stays the definition and the fallback. Anything off the common case
 * calls that function (with nothing read twice that a producer builds per read), so every error
 * and its message comes from one place.
 *   plain_cai_of    - interop.plain_cai_of
 *   cuda_import_cai - arrays._import_preferring_cai (as_device_array(x), prefer="cai")
 *   cuda_dlpack     - arrays._dlpack_python (DeviceArray.__dlpack__)
 * configure_cuda(arrays, interop, ArrayInfo, DeviceArray, DEFAULT_STREAM, context, ndarray) gives
 * them the Python side; the functions and caches are read from those modules at each call (tests replace them). */
static PyTypeObject *RawNewType;
static PyObject *cx_arrays, *cx_interop, *cx_ArrayInfo, *cx_DeviceArray, *cx_default_stream, *cx_object_new;
static PyObject *cx_context, *cx_ensure_context_py; /* pybridge.cuda.context and its ensure_context */
static PyObject *cx_ndarray, *cx_new_info_args, *cx_new_array_args; /* np.ndarray; (ArrayInfo,), (DeviceArray,) */
/* DeviceArray's slot descriptors and their setter (configure_cuda), or NULL: PyObject_SetAttr then */
static PyObject *cx_slot[7];
static descrsetfunc cx_slot_set;
static PyObject *cx_int[4]; /* 0, 1, 2, 3 */
enum {
    CX_VERSION, CX_TYPESTR, CX_STRIDES, CX_MASK, CX_STREAM, CX_SHAPE, CX_DATA, CX_DTYPES, CX_ENSURE, CX_DRIVER,
    CX_STREAM_WAIT, CX_WHAT, CX_WHAT_CAI, CX_IMPORT_PY, CX_FROM_CAI_DICT, CX_WITHOUT_CAI, CX_TORCH_PLAIN, CX_CAI,
    CX_MODULE, CX_ITEMSIZE, CX_PTR, CX_READONLY, CX_DTYPE, CX_DEVICE_TYPE, CX_DEVICE_ID, CX_INFO, CX_GPU, CX_OWNER,
    CX_PENDING, CX_META, CX_ICACHE, CX_ALLOC, CX_DL_CODES, CX_DLPACK_PY, CX_C_STRIDES, CX_TORCH, CX_TLS, CX_PUSHED,
    CX_DEVICES, CX_PRIMARY, CX_TORCH_DTYPES, CX_IS_CUDA, CX_REQUIRES_GRAD, CX_IS_SPARSE, CX_IS_CONTIGUOUS, CX_IS_CONJ,
    CX_IS_NEG, CX_NUMEL, CX_DATA_PTR, CX_NAME, CX_TENSOR, CX_PARAMETER, CX_TORCH_STREAMS, CX_TORCH_STREAM, CX_DEVICE,
    CX_INDEX, CX_ORDER, CX_LAST, CX_EV, CX_COUNT
};
static PyObject *cx_s[CX_COUNT];
static int cx_is_torch(PyObject *obj);
static PyObject *cx_torch_plain(PyObject *interop, PyObject *t);
static const char *const cx_names[CX_COUNT] = {
    "version", "typestr", "strides", "mask", "stream", "shape", "data", "_dtypes", "ensure_context", "_driver",
    "stream_wait", "what", "__cuda_array_interface__ import", "_import_preferring_cai", "_from_cai_dict",
    "_import_without_cai", "torch_plain", "__cuda_array_interface__", "__module__", "itemsize", "ptr", "readonly",
    "dtype", "device_type", "device_id", "_info", "_gpu", "_owner", "_pending", "_meta", "_icache", "_alloc",
    "_dl_codes", "_dlpack_python", "c_contiguous_strides", "torch", "_tls", "pushed", "devices", "_primary",
    "_torch_dtypes", "is_cuda", "requires_grad", "is_sparse", "is_contiguous", "is_conj", "is_neg", "numel", "data_ptr",
    "__name__", "Tensor", "Parameter", "_torch_streams", "_torch_stream", "device", "index", "order", "_last", "ev"};

/* module.name, read now from the module's dictionary (what getattr finds for a module without
 * __getattr__, in a third of the time), else through getattr (its AttributeError). */
static PyObject *cx_attr(PyObject *module, int name) {
    PyObject *v = PyDict_GetItemWithError(PyModule_GetDict(module), cx_s[name]);
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    return PyErr_Occurred() ? NULL : PyObject_GetAttr(module, cx_s[name]);
}

/* module.name(*args) for a Python function read from the module now. */
static PyObject *cx_call(PyObject *module, int name, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *fn = cx_attr(module, name);
    if (fn == NULL) return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(fn, a, b, c, NULL);
    Py_DECREF(fn);
    return r;
}

/* The names and numbers above, made once (by the first function of this section called). */
static int cx_init(void) {
    if (cx_object_new != NULL) return 0;
    for (int i = 0; i < CX_COUNT; i++)
        if (cx_s[i] == NULL && (cx_s[i] = PyUnicode_InternFromString(cx_names[i])) == NULL) return -1;
    for (int i = 0; i < 4; i++)
        if (cx_int[i] == NULL && (cx_int[i] = PyLong_FromLong(i)) == NULL) return -1;
    cx_object_new = PyObject_GetAttrString((PyObject *)&PyBaseObject_Type, "__new__");
    return cx_object_new == NULL ? -1 : 0;
}

/* cai.get(name) of an exact dict: a new reference (Py_None when absent), NULL on error. */
static PyObject *cx_get(PyObject *cai, int name) {
    PyObject *v = PyDict_GetItemWithError(cai, cx_s[name]);
    if (v == NULL && PyErr_Occurred()) return NULL;
    v = v ? v : Py_None;
    Py_INCREF(v);
    return v;
}

/* `a op b` as Python evaluates it in an `if` (no identity shortcut): 1, 0, or -1 on error. */
static int cx_compare(PyObject *a, PyObject *b, int op) {
    PyObject *r = PyObject_RichCompare(a, b, op);
    if (r == NULL) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* An exact int as int64: 1 and *out, 0 when it does not fit (or is not an exact int), -1 on error. */
static int cx_int64(PyObject *o, int64_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) return 0;
    *out = v;
    return 1;
}

/* The product of a tuple of exact non-negative ints, as Python computes it (any size); the tuple
 * was checked by the caller. */
static PyObject *cx_product(PyObject *shape) {
    Py_ssize_t n = PyTuple_Size(shape);
    int64_t size = 1;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        int64_t d;
        int ok = cx_int64(PyTuple_GetItem(shape, i), &d);
        if (ok < 0) return NULL;
        if (!ok || (d != 0 && size > INT64_MAX / d)) break;
        size *= d;
    }
    PyObject *r = PyLong_FromLongLong(size);
    for (; r != NULL && i < n; i++) { /* past int64: Python's ints from here on */
        PyObject *p = PyNumber_Multiply(r, PyTuple_GetItem(shape, i));
        Py_DECREF(r);
        r = p;
    }
    return r;
}

/* interop.plain_cai_of(cai, typestr): 1 with new references to (ptr, readonly, shape, size,
 * stream) in out[0..4]; 0 where Python returns None; -1 on error. Same reads, same order. */
static int cx_plain(PyObject *cai, PyObject *typestr, PyObject **out) {
    if (!PyDict_CheckExact(cai)) return 0;
    PyObject *version = NULL, *v = NULL, *stream = NULL, *shape = NULL, *data = NULL;
    int r = -1, t;
    if ((version = cx_get(cai, CX_VERSION)) == NULL || (v = cx_get(cai, CX_TYPESTR)) == NULL) goto done;
    if ((t = cx_compare(v, typestr, Py_NE)) != 0) {
        r = t < 0 ? -1 : 0;
        goto done;
    }
    Py_CLEAR(v);
    if ((v = cx_get(cai, CX_STRIDES)) == NULL) goto done;
    if (v != Py_None) goto none;
    Py_CLEAR(v);
    if ((v = cx_get(cai, CX_MASK)) == NULL) goto done;
    if (v != Py_None) goto none;
    if ((t = cx_compare(version, cx_int[3], Py_EQ)) < 0) goto done;
    if (t) {
        if ((stream = cx_get(cai, CX_STREAM)) == NULL) goto done;
    } else {
        if ((t = cx_compare(version, cx_int[2], Py_EQ)) < 0) goto done;
        if (!t) goto none;
        Py_INCREF(Py_None); /* PyTorch's v2: no stream field, the producer has synchronised */
        stream = Py_None;
    }
    if ((shape = cx_get(cai, CX_SHAPE)) == NULL || (data = cx_get(cai, CX_DATA)) == NULL) goto done;
    if (!PyTuple_CheckExact(shape) || !PyTuple_CheckExact(data) || PyTuple_Size(data) != 2) goto none;
    PyObject *ptr = PyTuple_GetItem(data, 0), *readonly = PyTuple_GetItem(data, 1);
    if (!PyLong_CheckExact(ptr) || !PyBool_Check(readonly)) goto none;
    int64_t p64;
    unsigned long long p;
    if ((t = cx_int64(ptr, &p64)) < 0) goto done;
    if (t) { /* the usual address: below 2**63 */
        if (p64 < 0) goto none;
        p = (unsigned long long)p64;
    } else {
        p = PyLong_AsUnsignedLongLong(ptr); /* OverflowError: below 0 or from 2**64 */
        if (p == (unsigned long long)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) goto done;
            PyErr_Clear();
            goto none;
        }
    }
    if (stream != Py_None) {
        int64_t s;
        if (!PyLong_CheckExact(stream)) goto none;
        if ((t = cx_int64(stream, &s)) < 0) goto done;
        if (t && s == 0) goto none;
    }
    Py_ssize_t n = PyTuple_Size(shape);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GetItem(shape, i);
        if (!PyLong_CheckExact(d)) goto none;
        if ((t = cx_compare(d, cx_int[0], Py_LT)) < 0) goto done;
        if (t) goto none;
    }
    PyObject *size = cx_product(shape);
    if (size == NULL) goto done;
    if (p == 0 && (t = PyObject_IsTrue(size)) != 0) {
        Py_DECREF(size);
        r = t < 0 ? -1 : 0;
        goto done;
    }
    Py_INCREF(ptr);
    Py_INCREF(readonly);
    out[0] = ptr;
    out[1] = readonly;
    out[2] = shape;
    out[3] = size;
    out[4] = stream;
    shape = stream = NULL; /* handed over */
    r = 1;
    goto done;
none:
    r = 0;
done:
    Py_XDECREF(version);
    Py_XDECREF(v);
    Py_XDECREF(stream);
    Py_XDECREF(shape);
    Py_XDECREF(data);
    return r;
}

static PyObject *plain_cai_of(PyObject *m, PyObject *args) {
    PyObject *cai, *typestr, *out[5];
    if (!PyArg_ParseTuple(args, "OO:plain_cai_of", &cai, &typestr) || cx_init() < 0) return NULL;
    int r = cx_plain(cai, typestr, out);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    PyObject *t = PyTuple_Pack(5, out[0], out[1], out[2], out[3], out[4]);
    for (int i = 0; i < 5; i++) Py_DECREF(out[i]);
    return t;
}

/* interop.c_contiguous_strides(shape, itemsize) for a tuple of exact ints (in C while it fits in
 * int64, else the Python function). */
static PyObject *cx_c_strides(PyObject *shape, PyObject *itemsize) {
    Py_ssize_t n = PyTuple_Size(shape);
    int64_t step, d;
    int ok = cx_int64(itemsize, &step);
    if (ok < 0) return NULL;
    if (ok) {
        PyObject *out = PyTuple_New(n);
        if (out == NULL) return NULL;
        for (Py_ssize_t i = n - 1; ok > 0 && i >= 0; i--) {
            if ((ok = cx_int64(PyTuple_GetItem(shape, i), &d)) <= 0) break;
            PyObject *s = PyLong_FromLongLong(step);
            if (s == NULL) {
                ok = -1;
                break;
            }
            PyTuple_SetItem(out, i, s);
            if (d < 1) d = 1; /* max(int(d), 1) */
            if (step > INT64_MAX / d) ok = 0; /* past int64: Python's ints */
            else step *= d;
        }
        if (ok > 0) return out;
        Py_DECREF(out);
        if (ok < 0) return NULL;
    }
    return cx_call(cx_interop, CX_C_STRIDES, shape, itemsize, NULL);
}

/* ArrayInfo(ptr, shape, strides, dtype, readonly) (stream None, a CUDA device 0): what its frozen
 * dataclass __init__ does, object.__setattr__ per field in order, without the Python frame. */
static PyObject *cx_info(PyObject *ptr, PyObject *shape, PyObject *strides, PyObject *dtype, PyObject *readonly) {
    PyObject *info = PyObject_Call(cx_object_new, cx_new_info_args, NULL);
    if (info == NULL) return NULL;
    PyObject *vals[] = {ptr, shape, strides, dtype, readonly, Py_None, cx_int[2], cx_int[0]};
    const int names[] = {CX_PTR, CX_SHAPE, CX_STRIDES, CX_DTYPE, CX_READONLY, CX_STREAM, CX_DEVICE_TYPE, CX_DEVICE_ID};
    for (int i = 0; i < 8; i++) {
        if (PyObject_GenericSetAttr(info, cx_s[names[i]], vals[i]) < 0) {
            Py_DECREF(info);
            return NULL;
        }
    }
    return info;
}

/* DeviceArray(info, owner=owner, pending=pending) for an info without a stream: its __init__'s
 * assignments, in order. Steals the reference to info. */
static PyObject *cx_device_array(PyObject *info, PyObject *owner, PyObject *pending) {
    if (info == NULL) return NULL;
    PyObject *a = PyObject_Call(cx_object_new, cx_new_array_args, NULL);
    PyObject *vals[] = {info, Py_None, owner, pending, Py_None, Py_None, Py_False};
    const int names[] = {CX_INFO, CX_GPU, CX_OWNER, CX_PENDING, CX_META, CX_ICACHE, CX_ALLOC};
    for (int i = 0; a != NULL && i < 7; i++) {
        int rc = cx_slot_set != NULL ? cx_slot_set(cx_slot[i], a, vals[i]) : PyObject_SetAttr(a, cx_s[names[i]], vals[i]);
        if (rc < 0) Py_CLEAR(a);
    }
    Py_DECREF(info);
    return a;
}

/* context.ensure_context()'s fast path: this thread pushed device 0's primary context, which is
 * retained. 1 when it holds, 0 when the function must run, -1 on error. */
static int cx_context_pushed(void) {
    PyObject *tls = cx_attr(cx_context, CX_TLS), *pushed = NULL, *devices = NULL, *primary = NULL;
    int r = -1;
    if (tls == NULL) return -1;
    if ((pushed = PyObject_GetAttr(tls, cx_s[CX_PUSHED])) == NULL) { /* getattr(_tls, "pushed", None) */
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            r = 0;
        }
        goto done;
    }
    r = 0;
    if (pushed == Py_None) goto done;
    r = -1;
    if ((devices = PyObject_GetAttr(pushed, cx_s[CX_DEVICES])) == NULL) goto done;
    if ((r = PySequence_Contains(devices, cx_int[0])) <= 0) goto done;
    r = -1;
    if ((primary = cx_attr(cx_context, CX_PRIMARY)) == NULL) goto done;
    r = 0;
    if (!PyDict_CheckExact(primary)) goto done;
    PyObject *ctx = PyDict_GetItemWithError(primary, cx_int[0]);
    r = ctx != NULL && ctx != Py_None ? 1 : (PyErr_Occurred() ? -1 : 0);
done:
    Py_DECREF(tls);
    Py_XDECREF(pushed);
    Py_XDECREF(devices);
    Py_XDECREF(primary);
    return r;
}

/* arrays.ensure_context(): its fast path in C when it is context.ensure_context, else the call. */
static int cx_ensure_context(void) {
    PyObject *fn = cx_attr(cx_arrays, CX_ENSURE), *r;
    if (fn == NULL) return -1;
    int pushed = fn == cx_ensure_context_py ? cx_context_pushed() : 0;
    if (pushed == 0) {
        r = PyObject_CallNoArgs(fn);
        pushed = r == NULL ? -1 : 1;
        Py_XDECREF(r);
    }
    Py_DECREF(fn);
    return pushed < 0 ? -1 : 0;
}

static int cx_ready(void) {
    if (cx_arrays != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "pybridge.cuda did not configure the compiled exchange (configure_cuda)");
    return -1;
}

/* The plain typestrs _from_cai_dict reads itself: "<" or "|", then f, i, u or b. */
static int cx_plain_typestr(PyObject *t) {
    if (!PyUnicode_CheckExact(t) || PyUnicode_GetLength(t) < 2) return 0;
    Py_UCS4 a = PyUnicode_ReadChar(t, 0), b = PyUnicode_ReadChar(t, 1);
    return (a == '<' || a == '|') && (b == 'f' || b == 'i' || b == 'u' || b == 'b');
}

/* _from_cai_dict(obj, cai, None) for the plain form with a cached dtype and an exact int version
 * (nothing here runs Python code before the producer's stream is waited for); NULL with no error
 * set: not that form, the caller calls the Python function. */
static PyObject *cx_from_cai(PyObject *obj, PyObject *cai) {
    PyObject *t = PyDict_GetItemWithError(cai, cx_s[CX_TYPESTR]), *version;
    if (t == NULL || !cx_plain_typestr(t)) return NULL;
    version = PyDict_GetItemWithError(cai, cx_s[CX_VERSION]);
    if (version == NULL || !PyLong_CheckExact(version)) return NULL;
    PyObject *dtypes = cx_attr(cx_arrays, CX_DTYPES);
    if (dtypes == NULL) return NULL;
    PyObject *dt = PyDict_Check(dtypes) ? PyDict_GetItemWithError(dtypes, t) : NULL; /* borrowed */
    Py_XINCREF(dt);
    Py_DECREF(dtypes);
    if (dt == NULL) return NULL;
    Py_INCREF(t);
    PyObject *out[5] = {NULL}, *itemsize = NULL, *strides = NULL, *r = NULL;
    int plain = cx_plain(cai, t, out);
    Py_DECREF(t);
    if (plain <= 0) goto done;
    if ((itemsize = PyObject_GetAttr(dt, cx_s[CX_ITEMSIZE])) == NULL) goto done;
    if ((strides = cx_c_strides(out[2], itemsize)) == NULL) goto done;
    PyObject *pending = Py_None;
    if (out[4] != Py_None) { /* the producer's stream: ours (legacy default) waits for it, unless it is ours */
        if (cx_ensure_context() < 0) goto done;
        int same = cx_compare(out[4], cx_int[1], Py_EQ);
        if (same < 0) goto done;
        if (!same) {
            PyObject *driver = cx_attr(cx_arrays, CX_DRIVER), *wait = NULL, *args = NULL, *kw = NULL, *w = NULL;
            if (driver != NULL) wait = PyObject_GetAttr(driver, cx_s[CX_STREAM_WAIT]);
            if (wait != NULL) args = PyTuple_Pack(2, cx_int[1], out[4]);
            if (args != NULL) kw = Py_BuildValue("{OO}", cx_s[CX_WHAT], cx_s[CX_WHAT_CAI]);
            if (kw != NULL) w = PyObject_Call(wait, args, kw);
            Py_XDECREF(driver);
            Py_XDECREF(wait);
            Py_XDECREF(args);
            Py_XDECREF(kw);
            if (w == NULL) goto done;
            Py_DECREF(w);
        }
        pending = cx_default_stream;
    }
    r = cx_device_array(cx_info(out[0], out[2], strides, dt, out[1]), obj, pending);
done:
    for (int i = 0; i < 5; i++) Py_XDECREF(out[i]);
    Py_XDECREF(itemsize);
    Py_XDECREF(strides);
    Py_DECREF(dt);
    return r;
}

/* cuda_import_cai(obj, stream): arrays._import_preferring_cai in C for stream None. */
static PyObject *cuda_import_cai(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { /* fast call: no argument tuple made or parsed (a tenth of the call) */
        PyErr_Format(PyExc_TypeError, "cuda_import_cai() takes exactly 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *obj = args[0], *stream = args[1];
    if (cx_ready() < 0) return NULL;
    /* a stream given, a DeviceArray (returned as it is) or a NumPy array (refused): the Python code */
    int python = stream != Py_None ? 1 : PyObject_IsInstance(obj, cx_DeviceArray);
    if (python == 0) python = PyObject_IsInstance(obj, cx_ndarray);
    if (python < 0) return NULL;
    if (python) return cx_call(cx_arrays, CX_IMPORT_PY, obj, stream, NULL);
    /* interop.torch_plain returns None unless type(obj).__module__ is "torch": not called then */
    int torch = cx_is_torch(obj);
    if (torch < 0) return NULL;
    if (torch) {
        PyObject *view = cx_torch_plain(cx_interop, obj);
        if (view == NULL) return NULL;
        if (view != Py_None) { /* (ptr, shape, dtype): a contiguous tensor, no stream (its CAI is v2) */
            PyObject *r = NULL;
            if (PyTuple_CheckExact(view) && PyTuple_Size(view) == 3 && PyTuple_CheckExact(PyTuple_GetItem(view, 1))) {
                PyObject *shape = PyTuple_GetItem(view, 1), *dt = PyTuple_GetItem(view, 2);
                PyObject *itemsize = PyObject_GetAttr(dt, cx_s[CX_ITEMSIZE]);
                PyObject *strides = itemsize ? cx_c_strides(shape, itemsize) : NULL;
                if (strides != NULL)
                    r = cx_device_array(cx_info(PyTuple_GetItem(view, 0), shape, strides, dt, Py_False), obj, Py_None);
                Py_XDECREF(itemsize);
                Py_XDECREF(strides);
            } else {
                r = cx_call(cx_arrays, CX_IMPORT_PY, obj, stream, NULL);
            }
            Py_DECREF(view);
            return r;
        }
        Py_DECREF(view);
    }
    PyObject *cai = PyObject_GetAttr(obj, cx_s[CX_CAI]); /* read once: CuPy and PyTorch make it per read */
    if (cai == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
        return cx_call(cx_arrays, CX_WITHOUT_CAI, obj, stream, NULL);
    }
    PyObject *r = PyDict_CheckExact(cai) ? cx_from_cai(obj, cai) : NULL;
    if (r == NULL && !PyErr_Occurred()) r = cx_call(cx_arrays, CX_FROM_CAI_DICT, obj, cai, stream);
    Py_DECREF(cai);
    return r;
}

/* cuda_dlpack(array, stream, max_version, dl_device, copy): arrays._dlpack_python in C for a
 * DeviceArray with nothing pending, C-ordered (its strides exactly C order's), a dtype exported
 * before (interop._dl_codes), keywords of the plain forms. */
static PyObject *cuda_dlpack(PyObject *m, PyObject *args) {
    PyObject *x, *stream, *max_version, *dl_device, *copy;
    if (!PyArg_ParseTuple(args, "OOOOO:cuda_dlpack", &x, &stream, &max_version, &dl_device, &copy)) return NULL;
    if (cx_ready() < 0) return NULL;
    PyObject *pending = NULL, *info = NULL, *f[7] = {NULL}, *codes = NULL, *r = NULL;
    int versioned = 0;
    if ((copy != Py_None && copy != Py_False) || dl_device != Py_None) goto slow;
    if (stream != Py_None) {
        int64_t s;
        int ok = cx_int64(stream, &s);
        if (ok < 0) return NULL;
        if (!ok || s == 0) goto slow;
    }
    if (max_version != Py_None) {
        int64_t major, minor;
        if (!PyTuple_CheckExact(max_version) || PyTuple_Size(max_version) != 2) goto slow;
        int a = cx_int64(PyTuple_GetItem(max_version, 0), &major), b = a > 0 ? cx_int64(PyTuple_GetItem(max_version, 1), &minor) : 0;
        if (a < 0 || b < 0) return NULL;
        if (!a || !b) goto slow;
        versioned = major > 1 || (major == 1 && minor >= 0);
    }
    if ((pending = PyObject_GetAttr(x, cx_s[CX_PENDING])) == NULL) goto done;
    if (pending != Py_None) goto slow; /* the consumer's stream waits: the Python code */
    if ((info = PyObject_GetAttr(x, cx_s[CX_INFO])) == NULL) goto done;
    const int names[] = {CX_PTR, CX_SHAPE, CX_STRIDES, CX_DTYPE, CX_READONLY, CX_DEVICE_TYPE, CX_DEVICE_ID};
    for (int i = 0; i < 7; i++)
        if ((f[i] = PyObject_GetAttr(info, cx_s[names[i]])) == NULL) goto done;
    int64_t ptr, dev_type, did, step, d, code, bits;
    int ok;
    if ((ok = cx_int64(f[0], &ptr)) < 0) goto done;
    if (!ok || ptr < 0 || !PyTuple_CheckExact(f[1]) || !PyTuple_CheckExact(f[2])) goto slow;
    Py_ssize_t n = PyTuple_Size(f[1]);
    if (PyTuple_Size(f[2]) != n) goto slow;
    if ((ok = cx_int64(f[5], &dev_type)) <= 0 || (ok = cx_int64(f[6], &did)) <= 0) goto maybe;
    if (dev_type < INT32_MIN || dev_type > INT32_MAX || did < INT32_MIN || did > INT32_MAX) goto slow;
    { /* the dtype's DLPack code, as interop._export_keyed caches it */
        PyObject *cache = cx_attr(cx_interop, CX_DL_CODES);
        if (cache == NULL) goto done;
        codes = PyDict_Check(cache) ? PyDict_GetItemWithError(cache, f[3]) : NULL;
        Py_XINCREF(codes);
        Py_DECREF(cache);
        if (codes == NULL) {
            if (PyErr_Occurred()) goto done;
            goto slow; /* not exported before: the Python code (which caches it) */
        }
    }
    if (!PyTuple_CheckExact(codes) || PyTuple_Size(codes) != 2) goto slow;
    if ((ok = cx_int64(PyTuple_GetItem(codes, 0), &code)) <= 0 || (ok = cx_int64(PyTuple_GetItem(codes, 1), &bits)) <= 0)
        goto maybe;
    { /* the strides are C order's exactly (interop.c_contiguous_strides): the capsule's are then */
        PyObject *itemsize = PyObject_GetAttr(f[3], cx_s[CX_ITEMSIZE]);
        if (itemsize == NULL) goto done;
        ok = cx_int64(itemsize, &step);
        Py_DECREF(itemsize);
        if (ok <= 0) goto maybe;
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int64_t s;
        if ((ok = cx_int64(PyTuple_GetItem(f[2], i), &s)) <= 0 || (ok = cx_int64(PyTuple_GetItem(f[1], i), &d)) <= 0)
            goto maybe;
        if (s != step) goto slow;
        if (d < 1) d = 1;
        if (step > INT64_MAX / d) goto slow;
        step *= d;
    }
    int readonly = PyObject_IsTrue(f[4]);
    if (readonly < 0) goto done;
    r = make_capsule(f[0], f[1], (int)code, (int)bits, (int)dev_type, (int)did, versioned, readonly, x);
    goto done;
maybe:
    if (ok < 0) goto done;
slow: {
        PyObject *fn = cx_attr(cx_arrays, CX_DLPACK_PY);
        if (fn != NULL) {
            r = PyObject_CallFunctionObjArgs(fn, x, stream, max_version, dl_device, copy, NULL);
            Py_DECREF(fn);
        }
    }
done:
    Py_XDECREF(pending);
    Py_XDECREF(info);
    for (int i = 0; i < 7; i++) Py_XDECREF(f[i]);
    Py_XDECREF(codes);
    return r;
}

/* configure_cuda(arrays, interop, ArrayInfo, DeviceArray, DEFAULT_STREAM, context, ndarray):
 * pybridge.cuda.arrays, once. */
static PyObject *configure_cuda(PyObject *m, PyObject *args) {
    PyObject *arrays, *interop, *info, *array, *stream, *context, *ensure, *ndarray, *info_args, *array_args;
    if (!PyArg_ParseTuple(args, "OOO!O!OOO!:configure_cuda", &arrays, &interop, &PyType_Type, &info, &PyType_Type,
                          &array, &stream, &context, &PyType_Type, &ndarray) ||
        cx_init() < 0)
        return NULL;
    if ((info_args = PyTuple_Pack(1, info)) == NULL) return NULL;
    if ((array_args = PyTuple_Pack(1, array)) == NULL) {
        Py_DECREF(info_args);
        return NULL;
    }
    Py_XSETREF(cx_new_info_args, info_args);
    Py_XSETREF(cx_new_array_args, array_args);
    /* Setting a slot through its descriptor's setter is what PyObject_SetAttr does for a class that
     * keeps object's __setattr__ (the type lookup left out): used where that holds for all seven. */
    const int slot_names[] = {CX_INFO, CX_GPU, CX_OWNER, CX_PENDING, CX_META, CX_ICACHE, CX_ALLOC};
    descrsetfunc set = NULL;
    cx_slot_set = NULL;
    int direct = PyType_GetSlot((PyTypeObject *)array, Py_tp_setattro) == PyType_GetSlot(&PyBaseObject_Type, Py_tp_setattro);
    for (int i = 0; i < 7; i++) {
        PyObject *d = PyObject_GetAttr(array, cx_s[slot_names[i]]);
        if (d == NULL) return NULL;
        descrsetfunc f = (descrsetfunc)PyType_GetSlot(Py_TYPE(d), Py_tp_descr_set);
        PyObject *tname = f != NULL ? PyObject_GetAttrString((PyObject *)Py_TYPE(d), "__name__") : NULL;
        int member = tname != NULL && PyUnicode_Check(tname) && PyUnicode_CompareWithASCIIString(tname, "member_descriptor") == 0;
        Py_XDECREF(tname);
        PyErr_Clear();
        if (!member || (set != NULL && f != set)) direct = 0;
        set = f;
        Py_XSETREF(cx_slot[i], d);
    }
    cx_slot_set = direct ? set : NULL;
    Py_INCREF(ndarray);
    Py_XSETREF(cx_ndarray, ndarray);
    if ((ensure = PyObject_GetAttrString(context, "ensure_context")) == NULL) return NULL;
    Py_XSETREF(cx_ensure_context_py, ensure);
    Py_INCREF(context);
    Py_XSETREF(cx_context, context);
    PyObject **slots[] = {&cx_arrays, &cx_interop, &cx_ArrayInfo, &cx_DeviceArray, &cx_default_stream};
    PyObject *vals[] = {arrays, interop, info, array, stream};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        Py_INCREF(vals[i]);
        Py_XSETREF(*slots[i], vals[i]);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ module */

/* The slot descriptors of the alias group class, where getattr would find them first: the class keeps
 * object's attribute access and `live` and `parent` are member descriptors (of __slots__). 1 when
 * they are used, else 0. */
static int configure_alias_group(PyObject *group) {
    Py_CLEAR(alias_type);
    Py_CLEAR(alias_live);
    Py_CLEAR(alias_parent);
    PyTypeObject *t = (PyTypeObject *)group;
    if (PyType_GetSlot(t, Py_tp_getattro) != PyType_GetSlot(&PyBaseObject_Type, Py_tp_getattro) ||
        PyType_GetSlot(t, Py_tp_setattro) != PyType_GetSlot(&PyBaseObject_Type, Py_tp_setattro))
        return 0;
    PyObject *live = PyObject_GetAttr(group, s_live), *parent = live ? PyObject_GetAttr(group, s_parent) : NULL;
    if (parent == NULL) {
        Py_XDECREF(live);
        PyErr_Clear(); /* not slots: getattr serves */
        return 0;
    }
    descrgetfunc get = (descrgetfunc)PyType_GetSlot(Py_TYPE(live), Py_tp_descr_get);
    descrsetfunc set = (descrsetfunc)PyType_GetSlot(Py_TYPE(live), Py_tp_descr_set);
    PyObject *tname = PyObject_GetAttrString((PyObject *)Py_TYPE(live), "__name__");
    int member = tname != NULL && PyUnicode_Check(tname) && PyUnicode_CompareWithASCIIString(tname, "member_descriptor") == 0;
    Py_XDECREF(tname);
    PyErr_Clear();
    if (!member || Py_TYPE(parent) != Py_TYPE(live) || get == NULL || set == NULL) {
        Py_DECREF(live);
        Py_DECREF(parent);
        return 0;
    }
    alias_get = get;
    alias_set = set;
    alias_live = live;
    alias_parent = parent;
    Py_INCREF(group);
    alias_type = t;
    return 1;
}

static PyObject *configure(PyObject *m, PyObject *args) {
    PyObject *ihe, *join, *shared, *efm, *rel, *reg, *ints, *f64, *f32, *f16, *b, *group;
    double fmax;
    if (!PyArg_ParseTuple(args, "OOOOOOO!OOOOdO!:configure", &ihe, &join, &shared, &efm, &rel, &reg, &PyTuple_Type,
                          &ints, &f64, &f32, &f16, &b, &fmax, &PyType_Type, &group))
        return NULL;
    int direct = configure_alias_group(group);
    PyObject **slots[] = {&InvalidHandleError, &join_fn, &shared_fn, &error_for_message, &py_release, &py_register,
                          &np_int_types, &np_float64, &np_float32, &np_float16, &np_bool};
    PyObject *vals[] = {ihe, join, shared, efm, rel, reg, ints, f64, f32, f16, b};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        Py_INCREF(vals[i]);
        Py_XSETREF(*slots[i], vals[i]);
    }
    f32_max = fmax;
    return PyBool_FromLong(direct);
}

static void set_type(PyTypeObject **slot, PyObject *type) { /* Py_XSETREF is typed from 3.12 */
    PyObject *old = (PyObject *)*slot;
    Py_INCREF(type);
    *slot = (PyTypeObject *)type;
    Py_XDECREF(old);
}

/* cffi_layout(samples, address): whether pointer objects are read in place (see cdata_type).
 * samples: cffi pointers to `address`, each with its ctype ((pointer, ffi.typeof(pointer)), ...),
 * all of one Python type, made by cffi as the handles' pointers are (a cast, a read of a cell). */
static PyObject *cffi_layout(PyObject *m, PyObject *args) {
    PyObject *samples, *addr;
    if (!PyArg_ParseTuple(args, "O!O:cffi_layout", &PyTuple_Type, &samples, &addr)) return NULL;
    Py_CLEAR(cdata_type);
    void *want = PyLong_AsVoidPtr(addr);
    if (want == NULL && PyErr_Occurred()) return NULL;
    PyObject *type = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_Size(samples); i++) {
        PyObject *p, *ctype;
        if (!PyArg_ParseTuple(PyTuple_GetItem(samples, i), "OO:cffi_layout sample", &p, &ctype)) return NULL;
        if (type == NULL) type = (PyObject *)Py_TYPE(p);
        PyObject *basic = PyObject_GetAttrString(type, "__basicsize__");
        if (basic == NULL) return NULL;
        Py_ssize_t size = PyLong_AsSsize_t(basic);
        Py_DECREF(basic);
        if (size == -1 && PyErr_Occurred()) return NULL;
        if ((PyObject *)Py_TYPE(p) != type || size < (Py_ssize_t)(sizeof(PyObject) + 2 * sizeof(void *)) ||
            CDATA_CTYPE(p) != ctype || CDATA_POINTER(p) != want)
            Py_RETURN_FALSE;
    }
    if (type == NULL) Py_RETURN_FALSE;
    set_type(&cdata_type, type);
    Py_RETURN_TRUE;
}

/* numpy_scalars(entries, true, false): which NumPy scalar types to read and make in place (see
 * np_code). entries: (code, type, sample, its value's bytes, made) per type, sample an instance made by
 * NumPy; `made`: results of `code` are made as this type. true, false: what indexing a bool array
 * gives (NumPy's singletons), or None. A type is taken only where its value sits where the layout
 * says and a scalar made in place equals the sample. Returns (codes read, codes made). */
static PyObject *numpy_scalars(PyObject *m, PyObject *args) {
    PyObject *entries, *t, *f;
    if (!PyArg_ParseTuple(args, "O!OO:numpy_scalars", &PyTuple_Type, &entries, &t, &f)) return NULL;
    for (int c = 0; c <= C_BOOL; c++) Py_CLEAR(np_made[c]);
    for (int i = 0; i < n_np_read; i++) Py_CLEAR(np_read[i].type);
    n_np_read = 0;
    Py_CLEAR(np_read_f32);
    Py_CLEAR(np_read_bool);
    Py_CLEAR(np_true);
    Py_CLEAR(np_false);
    PyObject *read = PyList_New(0), *made = PyList_New(0);
    if (read == NULL || made == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyTuple_Size(entries); i++) {
        int code, make;
        PyObject *type, *sample;
        const char *raw;
        Py_ssize_t n;
        if (!PyArg_ParseTuple(PyTuple_GetItem(entries, i), "iO!Oy#p:numpy_scalars entry", &code, &PyType_Type, &type,
                              &sample, &raw, &n, &make))
            goto fail;
        if (code < 0 || code > C_BOOL || n != slot_size[code] || (PyObject *)Py_TYPE(sample) != type) continue;
        PyObject *basic = PyObject_GetAttrString(type, "__basicsize__");
        if (basic == NULL) goto fail;
        Py_ssize_t size = PyLong_AsSsize_t(basic);
        Py_DECREF(basic);
        if (size == -1 && PyErr_Occurred()) goto fail;
        if (size < (Py_ssize_t)sizeof(PyObject) + n || memcmp(NP_VALUE(sample), raw, n) != 0) continue;
        if (make) {
            allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)type, Py_tp_alloc);
            PyObject *r = alloc == NULL ? NULL : alloc((PyTypeObject *)type, 0);
            if (r == NULL) goto fail;
            memcpy(NP_VALUE(r), raw, n);
            int same = Py_TYPE(r) == (PyTypeObject *)type ? PyObject_RichCompareBool(r, sample, Py_EQ) : 0;
            Py_DECREF(r);
            if (same < 0) goto fail;
            if (!same || code == C_BOOL) continue;
            set_type(&np_made[code], type);
            np_alloc[code] = alloc;
            if (PyList_Append(made, PyTuple_GetItem(PyTuple_GetItem(entries, i), 0)) < 0) goto fail;
        } else if (code == C_F32 || code == C_BOOL) {
            set_type(code == C_F32 ? &np_read_f32 : &np_read_bool, type);
            if (PyList_Append(read, PyTuple_GetItem(PyTuple_GetItem(entries, i), 0)) < 0) goto fail;
        } else if (code <= C_U64 && n_np_read < NP_READ_MAX) {
            Py_INCREF(type);
            np_read[n_np_read].type = (PyTypeObject *)type;
            np_read[n_np_read++].code = code;
            if (PyList_Append(read, PyTuple_GetItem(PyTuple_GetItem(entries, i), 0)) < 0) goto fail;
        }
    }
    if (t != Py_None && f != Py_None) {
        Py_INCREF(t);
        np_true = t;
        Py_INCREF(f);
        np_false = f;
        PyObject *c = PyLong_FromLong(C_BOOL);
        if (c == NULL || PyList_Append(made, c) < 0) {
            Py_XDECREF(c);
            goto fail;
        }
        Py_DECREF(c);
    }
    PyObject *r = Py_BuildValue("(NN)", PyList_AsTuple(read), PyList_AsTuple(made));
    Py_DECREF(read);
    Py_DECREF(made);
    return r;
fail:
    Py_XDECREF(read);
    Py_XDECREF(made);
    return NULL;
}

/* ------------------------------------------------------------------ a PyTorch tensor, read directly */

/* Whether type(obj).__module__ == "torch" as Python compares it: 1, 0, or -1 on error. */
static int cx_is_torch(PyObject *obj) {
    PyObject *module = PyObject_GetAttr((PyObject *)Py_TYPE(obj), cx_s[CX_MODULE]);
    if (module == NULL) return -1;
    int torch = PyUnicode_CheckExact(module) ? PyUnicode_Compare(module, cx_s[CX_TORCH]) == 0
                                             : cx_compare(module, cx_s[CX_TORCH], Py_EQ);
    Py_DECREF(module);
    return torch;
}

/* bool(obj.name) (call: bool(obj.name())): 1, 0, or -1 on error. */
static int cx_truth(PyObject *obj, int name, int call) {
    PyObject *v = call ? PyObject_CallMethodObjArgs(obj, cx_s[name], NULL) : PyObject_GetAttr(obj, cx_s[name]);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* interop.torch_plain(t) in C, for a tensor whose type's __module__ is "torch" (checked by the
 * caller): the same reads in the same order, (pointer, shape, dtype) or None. Until interop has
 * learnt PyTorch's dtypes (its first call), the Python function answers. */
static PyObject *cx_torch_plain(PyObject *interop, PyObject *t) {
    PyObject *name = PyObject_GetAttr((PyObject *)Py_TYPE(t), cx_s[CX_NAME]);
    if (name == NULL) return NULL;
    int plain = PyUnicode_CheckExact(name) &&
                (PyUnicode_Compare(name, cx_s[CX_TENSOR]) == 0 || PyUnicode_Compare(name, cx_s[CX_PARAMETER]) == 0);
    Py_DECREF(name);
    if (!plain) Py_RETURN_NONE;
    PyObject *dtypes = cx_attr(interop, CX_TORCH_DTYPES);
    if (dtypes == NULL) return NULL;
    if (!PyDict_CheckExact(dtypes) || PyDict_Size(dtypes) == 0) {
        Py_DECREF(dtypes);
        return cx_call(interop, CX_TORCH_PLAIN, t, NULL, NULL);
    }
    PyObject *r = NULL, *dt = NULL, *dtype = NULL, *shape_obj = NULL, *shape = NULL, *ptr = NULL;
    int v;
    if ((dt = PyObject_GetAttr(t, cx_s[CX_DTYPE])) == NULL) goto done;
    dtype = PyDict_GetItemWithError(dtypes, dt);
    if (dtype == NULL) {
        if (!PyErr_Occurred()) goto none;
        goto done;
    }
    Py_INCREF(dtype); /* held as Python's local is: the attributes below may empty the dictionary */
    if ((v = cx_truth(t, CX_IS_CUDA, 0)) <= 0) goto none_or_error;
    if ((v = cx_truth(t, CX_REQUIRES_GRAD, 0)) != 0) goto none_or_error;
    if ((v = cx_truth(t, CX_IS_SPARSE, 0)) != 0) goto none_or_error;
    if ((v = cx_truth(t, CX_IS_CONTIGUOUS, 1)) <= 0) goto none_or_error;
    if ((v = cx_truth(t, CX_IS_CONJ, 1)) != 0) goto none_or_error;
    if ((v = cx_truth(t, CX_IS_NEG, 1)) != 0) goto none_or_error;
    if ((shape_obj = PyObject_GetAttr(t, cx_s[CX_SHAPE])) == NULL) goto done;
    if ((shape = PySequence_Tuple(shape_obj)) == NULL) goto done;
    if ((v = cx_truth(t, CX_NUMEL, 1)) < 0) goto done;
    if (v) {
        if ((ptr = PyObject_CallMethodObjArgs(t, cx_s[CX_DATA_PTR], NULL)) == NULL) goto done;
    } else {
        Py_INCREF(cx_int[0]);
        ptr = cx_int[0];
    }
    r = PyTuple_Pack(3, ptr, shape, dtype);
    goto done;
none_or_error:
    if (v < 0) goto done;
none:
    Py_INCREF(Py_None);
    r = Py_None;
done:
    Py_DECREF(dtypes);
    Py_XDECREF(dtype);
    Py_XDECREF(dt);
    Py_XDECREF(shape_obj);
    Py_XDECREF(shape);
    Py_XDECREF(ptr);
    return r;
}

/* interop._torch_stream(obj) in C for a tensor of module "torch" on a device with an index, once
 * interop has found PyTorch's raw stream getter; else the Python function. */
static PyObject *cx_torch_stream(PyObject *interop, PyObject *obj) {
    PyObject *streams = cx_attr(interop, CX_TORCH_STREAMS), *raw, *device = NULL, *index = NULL, *handle = NULL, *r = NULL;
    if (streams == NULL) return NULL;
    if (!PyTuple_CheckExact(streams) || PyTuple_Size(streams) != 2 || (raw = PyTuple_GetItem(streams, 1)) == Py_None) {
        Py_DECREF(streams);
        return cx_call(interop, CX_TORCH_STREAM, obj, NULL, NULL);
    }
    if ((device = PyObject_GetAttr(obj, cx_s[CX_DEVICE])) == NULL) goto done;
    if ((index = PyObject_GetAttr(device, cx_s[CX_INDEX])) == NULL) goto done;
    if (index == Py_None) { /* the current device: torch.cuda.current_device(), as Python asks */
        PyObject *cuda = PyObject_GetAttrString(PyTuple_GetItem(streams, 0), "cuda");
        if (cuda == NULL) goto done;
        PyObject *current = PyObject_CallMethod(cuda, "current_device", NULL);
        Py_DECREF(cuda);
        Py_XSETREF(index, current);
        if (index == NULL) goto done;
    }
    if ((handle = PyObject_CallFunctionObjArgs(raw, index, NULL)) == NULL) goto done;
    if ((r = PyNumber_Long(handle)) == NULL) goto done;
    int zero = PyObject_Not(r);
    if (zero < 0) Py_CLEAR(r);
    else if (zero) { /* int(handle) or LEGACY_STREAM */
        Py_INCREF(cx_int[1]);
        Py_XSETREF(r, cx_int[1]);
    }
done:
    Py_DECREF(streams);
    Py_XDECREF(device);
    Py_XDECREF(index);
    Py_XDECREF(handle);
    return r;
}

/* ------------------------------------------------------------------ FromCuda */

/* ArrayKind.from_cuda in C for a cuda library with pybridge's stream accessors (kinds.py's
 * _from_cuda stays the definition and the fallback): the closed check, a plain PyTorch tensor read
 * directly or the plain CAI form of the kind's dtype and rank, Futhark's stream ordered after the
 * producer's (the event ordering.order used last, tried first as it does; anything else through
 * ordering.order, which then names the event to try next), then RawNew. Anything off that path
 * calls fallback(obj, cai) with the interface it read, so errors come from one place. */
typedef struct {
    PyObject_HEAD
    RawNewObject *raw_new;
    PyObject *public, *fallback, *typestr, *dtype, *ordering, *interop, *waiter_obj;
    uintptr_t waiter, event;
    record_fn record;
    wait_fn wait;
} FromCudaObject;

static int fromcuda_traverse(FromCudaObject *f, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(f));
    Py_VISIT((PyObject *)f->raw_new);
    Py_VISIT(f->public);
    Py_VISIT(f->fallback);
    Py_VISIT(f->typestr);
    Py_VISIT(f->dtype);
    Py_VISIT(f->ordering);
    Py_VISIT(f->interop);
    Py_VISIT(f->waiter_obj);
    return 0;
}

static int fromcuda_clear(FromCudaObject *f) {
    Py_CLEAR(f->raw_new);
    Py_CLEAR(f->public);
    Py_CLEAR(f->fallback);
    Py_CLEAR(f->typestr);
    Py_CLEAR(f->dtype);
    Py_CLEAR(f->ordering);
    Py_CLEAR(f->interop);
    Py_CLEAR(f->waiter_obj);
    return 0;
}

static void fromcuda_dealloc(FromCudaObject *f) {
    PyTypeObject *tp = Py_TYPE(f);
    PyObject_GC_UnTrack(f);
    fromcuda_clear(f);
    freefunc fr = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    fr(f);
    Py_DECREF(tp);
}

/* FromCuda(raw_new, dtype, public, fallback, ordering, interop, futhark_stream, record_address, wait_address) */
static PyObject *fromcuda_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *raw_new, *dtype, *public, *fallback, *ordering, *interop, *waiter;
    unsigned long long record, wait;
    if (!PyArg_ParseTuple(args, "O!OOOOOO!KK:FromCuda", RawNewType, &raw_new, &dtype, &public, &fallback, &ordering,
                          &interop, &PyLong_Type, &waiter, &record, &wait))
        return NULL;
    if (!record || !wait) {
        PyErr_SetString(PyExc_ValueError, "FromCuda: null driver function");
        return NULL;
    }
    if (!PyModule_Check(interop)) { /* read through its dictionary (cx_attr) */
        PyErr_SetString(PyExc_TypeError, "FromCuda: interop must be the pybridge.interop module");
        return NULL;
    }
    if (cx_init() < 0) return NULL;
    uintptr_t w = (uintptr_t)PyLong_AsUnsignedLongLong(waiter);
    if (w == (uintptr_t)-1 && PyErr_Occurred()) return NULL;
    PyObject *typestr = PyObject_GetAttrString(dtype, "str");
    if (typestr == NULL) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    FromCudaObject *f = (FromCudaObject *)alloc(type, 0);
    if (f == NULL) {
        Py_DECREF(typestr);
        return NULL;
    }
    PyObject **keep[] = {(PyObject **)&f->raw_new, &f->dtype, &f->public, &f->fallback, &f->ordering, &f->interop,
                         &f->waiter_obj};
    PyObject *vals[] = {raw_new, dtype, public, fallback, ordering, interop, waiter};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(vals[i]);
        *keep[i] = vals[i];
    }
    f->typestr = typestr;
    f->waiter = w;
    f->event = 0;
    f->record = (record_fn)(uintptr_t)record;
    f->wait = (wait_fn)(uintptr_t)wait;
    return (PyObject *)f;
}

/* Futhark's stream waits (on the device) for the work queued so far on `producer` (an int), as
 * FutharkStream.wait_for does: 0, or -1 with ordering.order's error. */
static int fromcuda_order_open(FromCudaObject *f, PyObject *producer);

static int fromcuda_order(FromCudaObject *f, PyObject *producer) {
    /* The producer's properties ran since fromcuda_call's check: the context may be closed now
     * (by them, or by another thread meanwhile). Under the context's lock, as close() runs. */
    StateObject *s = f->raw_new->state;
    if (state_lock(s) < 0) return -1;
    int r = -1;
    if (!s->open) PyErr_SetObject(InvalidHandleError, s_closed_msg);
    else r = fromcuda_order_open(f, producer);
    state_unlock(s);
    return r;
}

static int fromcuda_order_open(FromCudaObject *f, PyObject *producer) {
    int64_t p;
    int ok = cx_int64(producer, &p);
    if (ok < 0) return -1;
    if (ok && (uintptr_t)p == f->waiter) return 0;
    /* The GIL is held across both calls: no other thread records this event in between. */
    int wrc;
    if (ok && f->event && record_then_wait(f->record, f->wait, f->event, f->waiter, (uintptr_t)p, &wrc) == 0) {
        if (wrc == 0) return 0;
        /* EventSlot.try_order's _check(rc, "cuStreamWaitEvent"): raised, not retried */
        PyObject *e = PyObject_CallMethod(f->ordering, "_check", "is", wrc, "cuStreamWaitEvent");
        Py_XDECREF(e);
        return -1;
    }
    PyObject *order = PyObject_GetAttr(f->ordering, cx_s[CX_ORDER]), *r; /* any object: tests stand one in */
    if (order == NULL) return -1;
    r = PyObject_CallFunctionObjArgs(order, f->waiter_obj, producer, NULL);
    Py_DECREF(order);
    if (r == NULL) return -1;
    Py_DECREF(r);
    /* the event of the primary context order used (ordering._last): tried first next time */
    PyObject *last = PyObject_GetAttr(f->ordering, cx_s[CX_LAST]), *ev = NULL;
    if (last == NULL) return -1;
    if (PyList_CheckExact(last) && PyList_Size(last) > 0 && (ev = PyObject_GetAttr(PyList_GetItem(last, 0), cx_s[CX_EV])) != NULL) {
        unsigned long long e = PyLong_AsUnsignedLongLong(ev);
        if (e == (unsigned long long)-1 && PyErr_Occurred()) PyErr_Clear();
        else f->event = (uintptr_t)e;
    }
    PyErr_Clear();
    Py_XDECREF(ev);
    Py_DECREF(last);
    return 0;
}

/* RawNew of (ptr, shape, obj): in C for an int pointer; anything else through the RawNew object,
 * for its TypeError (what _from_cuda's raw_new(ptr, shape, obj) raises). */
static PyObject *fromcuda_wrap(FromCudaObject *f, PyObject *ptr, PyObject *shape, PyObject *obj) {
    if (!PyLong_Check(ptr)) return PyObject_CallFunctionObjArgs((PyObject *)f->raw_new, ptr, shape, obj, NULL);
    uint64_t data = PyLong_AsUnsignedLongLong(ptr);
    return data == (uint64_t)-1 && PyErr_Occurred() ? NULL : rawnew_make(f->raw_new, data, shape, obj);
}

static PyObject *fromcuda_fallback(FromCudaObject *f, PyObject *obj, PyObject *cai) {
    return PyObject_CallFunctionObjArgs(f->fallback, obj, cai, NULL);
}

static PyObject *fromcuda_call(FromCudaObject *f, PyObject *args, PyObject *kw) {
    if ((kw != NULL && PyDict_Size(kw) != 0) || PyTuple_Size(args) != 1)
        return PyObject_Call(f->public, args, kw); /* the method's own binding and its errors */
    PyObject *obj = PyTuple_GetItem(args, 0);
    if (!f->raw_new->state->open) {
        PyErr_SetObject(InvalidHandleError, s_closed_msg); /* before any order on the freed stream */
        return NULL;
    }
    int torch = cx_is_torch(obj);
    if (torch < 0) return NULL;
    if (torch) { /* interop._torch_view: a plain tensor of this dtype and rank */
        PyObject *view = cx_torch_plain(f->interop, obj);
        if (view == NULL) return NULL;
        if (PyTuple_CheckExact(view) && PyTuple_Size(view) == 3) { /* else None: not a plain tensor */
            PyObject *shape = PyTuple_GetItem(view, 1);
            int same = PyTuple_CheckExact(shape) && PyTuple_Size(shape) == f->raw_new->rank
                           ? cx_compare(PyTuple_GetItem(view, 2), f->dtype, Py_EQ) : 0;
            if (same < 0) {
                Py_DECREF(view);
                return NULL;
            }
            if (same) {
                PyObject *stream = cx_torch_stream(f->interop, obj), *h = NULL;
                if (stream != NULL && (stream == Py_None || fromcuda_order(f, stream) == 0))
                    h = fromcuda_wrap(f, PyTuple_GetItem(view, 0), shape, obj);
                Py_XDECREF(stream);
                Py_DECREF(view);
                return h;
            }
        }
        Py_DECREF(view);
    }
    PyObject *cai = PyObject_GetAttr(obj, cx_s[CX_CAI]); /* read once: some producers build it in Python */
    if (cai == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        /* interop.futhark_view_of's TypeError (raised from None), without a second read */
        PyObject *at, *av, *atb;
        PyErr_Fetch(&at, &av, &atb);
        PyErr_NormalizeException(&at, &av, &atb);
        if (atb != NULL) PyException_SetTraceback(av, atb);
        PyObject *name = PyObject_GetAttr((PyObject *)Py_TYPE(obj), cx_s[CX_NAME]);
        if (name != NULL) PyErr_Format(PyExc_TypeError, "from_cuda: %S has no __cuda_array_interface__", name);
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (name != NULL && v != NULL && av != NULL) {
            PyException_SetContext(v, av); /* steals av */
            av = NULL;
            PyException_SetCause(v, NULL); /* `from None`: __suppress_context__ */
        }
        PyErr_Restore(t, v, tb);
        Py_XDECREF(name);
        Py_XDECREF(at);
        Py_XDECREF(av);
        Py_XDECREF(atb);
        return NULL;
    }
    PyObject *out[5], *h = NULL;
    int plain = cx_plain(cai, f->typestr, out);
    if (plain < 0) goto done;
    if (plain == 0 || PyTuple_Size(out[2]) != f->raw_new->rank) {
        if (plain) for (int i = 0; i < 5; i++) Py_DECREF(out[i]);
        h = fromcuda_fallback(f, obj, cai);
        goto done;
    }
    PyObject *stream = out[4];
    Py_INCREF(stream);
    if (stream == Py_None) { /* CAI v2 (PyTorch's) names no stream, and PyTorch does not sync */
        PyObject *version = PyDict_GetItemWithError(cai, cx_s[CX_VERSION]);
        int v2 = version == NULL ? (PyErr_Occurred() ? -1 : 0) : cx_compare(version, cx_int[2], Py_EQ);
        if (v2 > 0) Py_XSETREF(stream, cx_call(f->interop, CX_TORCH_STREAM, obj, NULL, NULL));
        else if (v2 < 0) Py_CLEAR(stream);
    }
    if (stream != NULL && (stream == Py_None || fromcuda_order(f, stream) == 0))
        h = fromcuda_wrap(f, out[0], out[2], obj); /* cx_plain: an int in [0, 2**64) */
    Py_XDECREF(stream);
    for (int i = 0; i < 5; i++) Py_DECREF(out[i]);
done:
    Py_DECREF(cai);
    return h;
}

static PyType_Slot fromcuda_slots[] = {
    {Py_tp_dealloc, fromcuda_dealloc},
    {Py_tp_traverse, fromcuda_traverse},
    {Py_tp_clear, fromcuda_clear},
    {Py_tp_call, fromcuda_call},
    {Py_tp_new, fromcuda_new},
    {Py_tp_doc, "ArrayKind.from_cuda in C for its common case (kinds.py)."},
    {0, NULL},
};

static PyType_Spec fromcuda_spec = {"pybridge.futhark._callpath.FromCuda", sizeof(FromCudaObject), 0,
                                    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, fromcuda_slots};

/* torch_plain(interop, t): cx_torch_plain for a caller that made the module test too (tests). */
static PyObject *torch_plain_py(PyObject *m, PyObject *args) {
    PyObject *interop, *t;
    if (!PyArg_ParseTuple(args, "O!O:torch_plain", &PyModule_Type, &interop, &t) || cx_init() < 0) return NULL;
    int torch = cx_is_torch(t);
    if (torch <= 0) {
        if (torch < 0) return NULL;
        Py_RETURN_NONE;
    }
    return cx_torch_plain(interop, t);
}

static PyMethodDef module_methods[] = {
    {"configure", configure, METH_VARARGS, "Set the Python objects the compiled path uses (callpath.py, once)."},
    {"numpy_scalars", numpy_scalars, METH_VARARGS, "Which NumPy scalar types the plans read and make in place (checked)."},
    {"cffi_layout", cffi_layout, METH_VARARGS, "Whether cffi pointer objects are read in place (checked on samples)."},
    {"dlpack_capsule", dlpack_capsule, METH_VARARGS, "A DLPack capsule over a C-ordered array, owning a reference to owner."},
    {"dlpack_exports_alive", dlpack_exports_alive, METH_NOARGS, "Capsules made here not yet released by their consumer."},
    {"configure_dlpack", configure_dlpack, METH_VARARGS, "Give ArrayBase.__dlpack__ interop's export cache and futhark_dlpack."},
    {"order_streams", order_streams, METH_VARARGS, "cuEventRecord then cuStreamWaitEvent through their addresses (ordering.py)."},
    {"plain_cai_of", plain_cai_of, METH_VARARGS, "interop.plain_cai_of in C."},
    {"torch_plain", torch_plain_py, METH_VARARGS, "interop.torch_plain(t) in C: torch_plain(interop, t)."},
    {"cuda_import_cai", (PyCFunction)(void (*)(void))cuda_import_cai, METH_FASTCALL,
     "pybridge.cuda.arrays._import_preferring_cai in C (its common case)."},
    {"cuda_dlpack", cuda_dlpack, METH_VARARGS, "pybridge.cuda.arrays._dlpack_python in C (its common case)."},
    {"configure_cuda", configure_cuda, METH_VARARGS, "Give the cuda exchange functions pybridge.cuda's side (arrays.py, once)."},
    {NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "pybridge.futhark._callpath",
                                        "The per-call path of pybridge.futhark in compiled code (see _callpath.c).", -1,
                                        module_methods};

static int intern(PyObject **slot, const char *s) {
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__callpath(void) {
    struct {
        PyObject **slot;
        const char *s;
    } names[] = {{&s_freed, "freed"}, {&s_live, "live"}, {&s_parent, "parent"}, {&s_acquire, "acquire"},
                 {&s_release, "release"}, {&s_describe, "_describe"}, {&s_error, "error"}, {&s_free, "free"},
                 {&s_state, "_state"}, {&s_ctx, "ctx"}, {&s_closed, "closed"}, {&s_live_ptr, "_live_ptr"},
                 {&s_pointer, "_pointer"}, {&s_ffi, "ffi"}, {&s_cast, "cast"}, {&s_uintptr, "uintptr_t"},
                 {&s_closed_msg, "the Futhark context is closed"}, {&s_general, "_call_general"}, {&s_bind, "_bind"},
                 {&s_convert_scalars, "_convert_scalars"}, {&s_explained, "_explained"}, {&s_voidp, "void *"},
                 {&s_stream, "stream"}, {&s_max_version, "max_version"}, {&s_dl_device, "dl_device"}, {&s_copy, "copy"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (intern(names[i].slot, names[i].s) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    StateType = (PyTypeObject *)PyType_FromSpec(&state_spec);
    ValueType = (PyTypeObject *)PyType_FromSpec(&value_spec);
    if (StateType == NULL || ValueType == NULL) goto fail;
    LockType = (PyTypeObject *)PyType_FromSpec(&lock_spec);
    if (LockType == NULL) goto fail;
    ArrayBaseType = (PyTypeObject *)PyType_FromSpecWithBases(&array_spec, (PyObject *)ValueType);
    OpaqueBaseType = (PyTypeObject *)PyType_FromSpecWithBases(&opaque_spec, (PyObject *)ValueType);
    PlanType = (PyTypeObject *)PyType_FromSpec(&plan_spec);
    if (ArrayBaseType == NULL || OpaqueBaseType == NULL || PlanType == NULL) goto fail;
    PyTypeObject *SyncType = (PyTypeObject *)PyType_FromSpec(&sync_spec);
    RawNewType = (PyTypeObject *)PyType_FromSpec(&rawnew_spec);
    PyTypeObject *FromCudaType = (PyTypeObject *)PyType_FromSpec(&fromcuda_spec);
    if (SyncType == NULL || RawNewType == NULL || FromCudaType == NULL) goto fail;
    PyTypeObject *types[] = {StateType, ValueType, ArrayBaseType, OpaqueBaseType, PlanType, LockType, SyncType, RawNewType,
                             FromCudaType};
    const char *tnames[] = {"State", "Value", "ArrayBase", "OpaqueBase", "Plan", "Lock", "Sync", "RawNew", "FromCuda"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, tnames[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            goto fail;
        }
    }
    if (PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "RAW_MAX_RANK", RAW_MAX_RANK) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
