"""C declarations for a Futhark library, generated from its manifest.

The manifest names every function; docs/c-api.rst fixes each function's signature from the kind of
operation. So the bindings never parse the generated header (whose format changes between compiler
versions, which is what broke futhark-ffi): the manifest plus the documented API is enough.
"""

from __future__ import annotations

from .manifest import ArrayInfo, EntryInfo, Manifest, OpaqueInfo
from .types import PRIMITIVES

# The raw storage pointer of new_raw/values_raw depends on the backend (docs/c-api.rst).
RAW_POINTER_CTYPE = {
    "c": "unsigned char *",
    "multicore": "unsigned char *",
    "ispc": "unsigned char *",
    "cuda": "CUdeviceptr",
    "hip": "void *",  # hipDeviceptr_t
    "opencl": "void *",  # cl_mem
}

_CONTEXT_API = """
struct futhark_context_config;
struct futhark_context;
struct futhark_context_config *futhark_context_config_new(void);
void futhark_context_config_free(struct futhark_context_config *cfg);
void futhark_context_config_set_debugging(struct futhark_context_config *cfg, int flag);
void futhark_context_config_set_profiling(struct futhark_context_config *cfg, int flag);
void futhark_context_config_set_logging(struct futhark_context_config *cfg, int flag);
int futhark_context_config_set_tuning_param(struct futhark_context_config *cfg, const char *param_name, size_t new_value);
int futhark_get_tuning_param_count(void);
const char *futhark_get_tuning_param_name(int i);
const char *futhark_get_tuning_param_class(int i);
void futhark_context_config_set_cache_file(struct futhark_context_config *cfg, const char *fname);
struct futhark_context *futhark_context_new(struct futhark_context_config *cfg);
void futhark_context_free(struct futhark_context *ctx);
int futhark_context_sync(struct futhark_context *ctx);
char *futhark_context_get_error(struct futhark_context *ctx);
void futhark_context_pause_profiling(struct futhark_context *ctx);
void futhark_context_unpause_profiling(struct futhark_context *ctx);
char *futhark_context_report(struct futhark_context *ctx);
int futhark_context_clear_caches(struct futhark_context *ctx);
"""

_BACKEND_API = {
    "multicore": """
void futhark_context_config_set_num_threads(struct futhark_context_config *cfg, int n);
""",
    "ispc": """
void futhark_context_config_set_num_threads(struct futhark_context_config *cfg, int n);
""",
    "gpu": """
void futhark_context_config_set_device(struct futhark_context_config *cfg, const char *s);
void futhark_context_config_set_default_thread_block_size(struct futhark_context_config *cfg, int size);
void futhark_context_config_set_default_grid_size(struct futhark_context_config *cfg, int num);
void futhark_context_config_set_default_tile_size(struct futhark_context_config *cfg, int num);
""",
    "cuda": """
typedef unsigned long long CUdeviceptr;
void futhark_context_config_set_unified_memory(struct futhark_context_config *cfg, int flag);
void futhark_context_config_add_nvrtc_option(struct futhark_context_config *cfg, const char *opt);
""",
    "hip": """
void futhark_context_config_set_unified_memory(struct futhark_context_config *cfg, int flag);
""",
    "opencl": """
void futhark_context_config_set_platform(struct futhark_context_config *cfg, const char *s);
""",
}

GPU_BACKENDS = ("cuda", "hip", "opencl")


def struct_name(ctype: str) -> str:
    """'struct futhark_f32_1d *' -> 'struct futhark_f32_1d'."""
    return ctype.replace("*", "").strip()


class CDefBuilder:
    """Accumulates declarations for one manifest, each struct declared once."""

    def __init__(self, manifest: Manifest):
        self.m = manifest
        self.raw = RAW_POINTER_CTYPE.get(manifest.backend, "void *")
        self.structs: dict[str, None] = {}
        self.lines: list[str] = []

    # A value of a type as an input parameter, as an out-parameter, and the bare C type.
    def c_type(self, type_name: str) -> str:
        if type_name in PRIMITIVES:
            return PRIMITIVES[type_name].ctype
        t = self.m.types[type_name]
        self.structs[struct_name(t.ctype)] = None
        return t.ctype.strip()

    def in_param(self, type_name: str, unique: bool = False) -> str:
        c = self.c_type(type_name)
        if type_name in PRIMITIVES or not unique:
            return f"const {c}"
        return c

    def out_param(self, type_name: str) -> str:
        return f"{self.c_type(type_name)} *"

    def add(self, line: str) -> None:
        self.lines.append(line)

    def array(self, t: ArrayInfo) -> None:
        s = struct_name(t.ctype)
        self.structs[s] = None
        elem = PRIMITIVES[t.elemtype].ctype
        dims = ", ".join(f"int64_t dim{i}" for i in range(t.rank))
        idx = ", ".join(f"int64_t i{i}" for i in range(t.rank))
        ops = t.ops
        ctx = "struct futhark_context *ctx"
        if "new" in ops:
            self.add(f"{s} *{ops['new']}({ctx}, const {elem} *data, {dims});")
        if "new_raw" in ops:
            self.add(f"{s} *{ops['new_raw']}({ctx}, {self.raw} data, {dims});")
        if "free" in ops:
            self.add(f"int {ops['free']}({ctx}, {s} *arr);")
        if "values" in ops:
            self.add(f"int {ops['values']}({ctx}, {s} *arr, {elem} *data);")
        if "values_raw" in ops:
            self.add(f"{self.raw} {ops['values_raw']}({ctx}, {s} *arr);")
        if "shape" in ops:
            self.add(f"const int64_t *{ops['shape']}({ctx}, {s} *arr);")
        if "index" in ops:
            self.add(f"int {ops['index']}({ctx}, {elem} *out, {s} *arr, {idx});")

    def opaque(self, t: OpaqueInfo) -> None:
        s = struct_name(t.ctype)
        self.structs[s] = None
        ctx = "struct futhark_context *ctx"
        ops = t.ops
        if "free" in ops:
            self.add(f"int {ops['free']}({ctx}, {s} *obj);")
        if "store" in ops:
            self.add(f"int {ops['store']}({ctx}, const {s} *obj, void **p, size_t *n);")
        if "restore" in ops:
            self.add(f"{s} *{ops['restore']}({ctx}, const void *p);")
        if t.record:
            if t.record.new:
                params = ", ".join(self.in_param(f.type) + f" f{i}" for i, f in enumerate(t.record.fields))
                self.add(f"int {t.record.new}({ctx}, {s} **out{', ' + params if params else ''});")
            for f in t.record.fields:
                self.add(f"int {f.project}({ctx}, {self.out_param(f.type)}out, const {s} *obj);")
        if t.sum:
            self.add(f"int {t.sum.variant}({ctx}, const {s} *v);")
            for v in t.sum.variants:
                ins = "".join(f", {self.in_param(p)} v{i}" for i, p in enumerate(v.payload))
                outs = "".join(f"{self.out_param(p)}v{i}, " for i, p in enumerate(v.payload))
                self.add(f"int {v.construct}({ctx}, {s} **out{ins});")
                self.add(f"int {v.destruct}({ctx}, {outs}const {s} *obj);")
        if t.record_array:
            ra = t.record_array
            idx = ", ".join(f"int64_t i{i}" for i in range(ra.rank))
            if ra.index:
                self.add(f"int {ra.index}({ctx}, {self.out_param(ra.elemtype)}out, {s} *arr, {idx});")
            if ra.shape:
                self.add(f"const int64_t *{ra.shape}({ctx}, {s} *arr);")
            if ra.zip:
                params = ", ".join(self.in_param(f.type) + f" f{i}" for i, f in enumerate(ra.fields))
                self.add(f"int {ra.zip}({ctx}, {s} **out, {params});")
            for f in ra.fields:
                self.add(f"int {f.project}({ctx}, {self.out_param(f.type)}out, const {s} *obj);")
        if t.opaque_array:
            oa = t.opaque_array
            idx = ", ".join(f"int64_t i{i}" for i in range(oa.rank))
            dims = ", ".join(f"int64_t dim{i}" for i in range(oa.rank))
            elem = self.c_type(oa.elemtype)
            if oa.index:
                self.add(f"int {oa.index}({ctx}, {self.out_param(oa.elemtype)}out, {s} *arr, {idx});")
            if oa.shape:
                self.add(f"const int64_t *{oa.shape}({ctx}, {s} *arr);")
            if oa.set:
                self.add(f"int {oa.set}({ctx}, {s} *arr, {elem} elem, {idx});")
            if oa.new:
                self.add(f"int {oa.new}({ctx}, {s} **out, {elem} *elems, {dims});")

    def entry(self, e: EntryInfo) -> None:
        params = ["struct futhark_context *ctx"]
        params += [f"{self.out_param(o.type)}out{i}" for i, o in enumerate(e.outputs)]
        params += [f"{self.in_param(p.type, p.unique)} in{i}" for i, p in enumerate(e.inputs)]
        self.add(f"int {e.cfun}({', '.join(params)});")

    def build(self) -> str:
        for t in self.m.types.values():
            if isinstance(t, ArrayInfo):
                self.array(t)
            else:
                self.opaque(t)
        for e in self.m.entry_points.values():
            self.entry(e)
        head = [_CONTEXT_API.strip()]
        backend = self.m.backend
        if backend in GPU_BACKENDS:
            head.append(_BACKEND_API["gpu"].strip())
        if backend in _BACKEND_API:
            head.append(_BACKEND_API[backend].strip())
        head.append("void free(void *ptr);")
        head.extend(f"{s};" for s in self.structs)
        return "\n".join(head + self.lines) + "\n"


def cdef_for(manifest: Manifest) -> str:
    """The complete cffi cdef for a library described by ``manifest``."""
    return CDefBuilder(manifest).build()
