"""Futhark's binary value format, checked before Futhark reads any bytes.

``futhark_restore_opaque_*`` takes a bare pointer and no length: it trusts every header and shape,
so truncated or edited bytes make it read past the buffer (garbage or a segfault). The bytes that
``futhark_store_opaque_*`` writes are a sequence of values in the documented binary data format
(Futhark's docs/binary-data-format.rst; the same format ``futhark dataset -b`` writes), one per
component of the opaque value:

    'b'  version (2)  rank (1 byte)  type (4 ASCII bytes, e.g. " i32", "bool")
    shape: rank little-endian int64 values      data: prod(shape) elements, little-endian

``read_values`` walks such a sequence with every length checked and requires it to fill the bytes
exactly; any defect raises ``ValueFormatError`` (a ValueError) saying what and at which offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ValueFormatError

MAGIC = ord("b")
VERSION = 2
# The 4-byte type field -> element dtype (docs/binary-data-format.rst).
ELEMENT_TYPES: dict[bytes, np.dtype] = {
    b"  i8": np.dtype("<i1"), b" i16": np.dtype("<i2"), b" i32": np.dtype("<i4"), b" i64": np.dtype("<i8"),
    b"  u8": np.dtype("<u1"), b" u16": np.dtype("<u2"), b" u32": np.dtype("<u4"), b" u64": np.dtype("<u8"),
    b" f16": np.dtype("<f2"), b" f32": np.dtype("<f4"), b" f64": np.dtype("<f8"), b"bool": np.dtype("u1"),
}
HEADER = 7  # magic, version, rank, 4-byte type


@dataclass(frozen=True)
class Component:
    """One value of the sequence: its rank, type field, shape and where its data starts."""

    rank: int
    type: str
    shape: tuple[int, ...]
    data_offset: int

    def scalar(self, data: bytes) -> int | float | bool:
        dt = ELEMENT_TYPES[self.type.encode()]
        return np.frombuffer(data, dt, count=1, offset=self.data_offset)[0].item()


def read_values(data: bytes, what: str, bools: bool = True) -> list[Component]:
    """The components of ``data``; ValueFormatError (naming ``what`` and the offset) unless
    well-formed. ``bools``: refuse a bool byte other than 0 or 1 (restore checks those itself,
    only where a sum's active variant reaches them: restorecheck.py)."""
    out: list[Component] = []
    pos, end = 0, len(data)
    if end == 0:
        raise ValueFormatError(f"{what}: no bytes (expected Futhark's binary value format)")
    while pos < end:
        where = f"{what}: component {len(out)} at byte {pos}"
        if end - pos < HEADER:
            raise ValueFormatError(f"{where}: truncated header ({end - pos} of {HEADER} bytes)")
        if data[pos] != MAGIC:
            raise ValueFormatError(f"{where}: expected the marker 'b', found byte {data[pos]:#04x}")
        if data[pos + 1] != VERSION:
            raise ValueFormatError(f"{where}: binary format version {data[pos + 1]}, expected {VERSION}")
        rank = data[pos + 2]
        tag = bytes(data[pos + 3 : pos + 7])
        dtype = ELEMENT_TYPES.get(tag)
        if dtype is None:
            raise ValueFormatError(f"{where}: unknown element type {tag!r}")
        pos += HEADER
        if end - pos < 8 * rank:
            raise ValueFormatError(f"{where}: truncated shape ({end - pos} of {8 * rank} bytes)")
        shape = tuple(int(s) for s in np.frombuffer(data, "<i8", count=rank, offset=pos)) if rank else ()
        if any(s < 0 for s in shape):
            raise ValueFormatError(f"{where}: negative dimension in shape {shape}")
        pos += 8 * rank
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize if rank else dtype.itemsize
        if end - pos < nbytes:
            raise ValueFormatError(f"{where}: truncated data (shape {shape} of {tag.decode().strip()} needs {nbytes} bytes, {end - pos} left)")
        if bools and tag == b"bool" and nbytes and np.frombuffer(data, np.uint8, count=nbytes, offset=pos).max() > 1:
            raise ValueFormatError(f"{where}: a bool element is neither 0 nor 1")
        out.append(Component(rank, tag.decode(), shape, pos))
        pos += nbytes
    return out


__all__ = ["Component", "ELEMENT_TYPES", "read_values"]
