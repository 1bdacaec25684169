"""The one table of primitive element types: NumPy dtype, Futhark name, C type, and the spellings a
kernel declaration may use for it. ``pybridge.futhark.types`` and ``pybridge.cuda.signature`` derive
their lookups from here.

The C type is the one both Futhark's C API and kernel launchers use for one element; ``f16`` travels
as the ``uint16_t`` holding its IEEE binary16 bits (C has no half). ``long`` is 64 bits: CUDA on
Linux is LP64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BY_DTYPE", "BY_FUTHARK_NAME", "BY_SPELLING", "PrimitiveType", "TABLE"]


@dataclass(frozen=True)
class PrimitiveType:
    futhark: str  # Futhark spelling: i32, f16, bool ...
    dtype: np.dtype  # NumPy dtype of one element
    ctype: str  # C type of one element's storage
    short: str  # name used when a kernel declaration is printed back
    aliases: tuple[str, ...]  # every spelling a kernel declaration accepts


_I64_C = ("long", "long int", "signed long", "long long", "long long int", "signed long long",
          "signed long long int", "ptrdiff_t", "ssize_t", "intptr_t")
_U64_C = ("unsigned long", "unsigned long int", "unsigned long long", "unsigned long long int", "size_t",
          "uintptr_t")

TABLE: tuple[PrimitiveType, ...] = (
    PrimitiveType("i8", np.dtype(np.int8), "int8_t", "int8", ("int8", "int8_t", "i8", "signed char", "char")),
    PrimitiveType("i16", np.dtype(np.int16), "int16_t", "int16",
                  ("int16", "int16_t", "i16", "short", "short int", "signed short", "signed short int")),
    PrimitiveType("i32", np.dtype(np.int32), "int32_t", "int32", ("int32", "int32_t", "i32", "int", "signed", "signed int")),
    PrimitiveType("i64", np.dtype(np.int64), "int64_t", "int64", ("int64", "int64_t", "i64", *_I64_C)),
    PrimitiveType("u8", np.dtype(np.uint8), "uint8_t", "uint8", ("uint8", "uint8_t", "u8", "unsigned char")),
    PrimitiveType("u16", np.dtype(np.uint16), "uint16_t", "uint16",
                  ("uint16", "uint16_t", "u16", "unsigned short", "unsigned short int")),
    PrimitiveType("u32", np.dtype(np.uint32), "uint32_t", "uint32", ("uint32", "uint32_t", "u32", "unsigned", "unsigned int")),
    PrimitiveType("u64", np.dtype(np.uint64), "uint64_t", "uint64", ("uint64", "uint64_t", "u64", *_U64_C)),
    PrimitiveType("f16", np.dtype(np.float16), "uint16_t", "half", ("float16", "half", "__half", "f16")),
    PrimitiveType("f32", np.dtype(np.float32), "float", "float", ("float", "float32", "f32")),
    PrimitiveType("f64", np.dtype(np.float64), "double", "double", ("double", "float64", "f64")),
    PrimitiveType("bool", np.dtype(np.bool_), "bool", "bool", ("bool", "_Bool")),
)

BY_FUTHARK_NAME: dict[str, PrimitiveType] = {p.futhark: p for p in TABLE}
BY_DTYPE: dict[np.dtype, PrimitiveType] = {p.dtype: p for p in TABLE}
#: Every accepted declaration spelling (multi-word C spellings with single spaces).
BY_SPELLING: dict[str, PrimitiveType] = {a: p for p in TABLE for a in p.aliases}
