"""What the lower layers (handles, kinds, conversion, entry points) need of a loaded library.

``library.Library`` satisfies these; naming them here lets those modules type their ``library``
argument without importing ``library.py``, which sits above them (manifest -> types -> library and
context -> entry points and handles; each module imports only downward).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol

from .context import Context
from .manifest import Manifest
from .source import SourceInfo


class CodecLike(Protocol):
    """Python value <-> C argument by manifest type name (``conversion.Codec``)."""

    def call_scope(self) -> Any: ...

    def to_c(self, type_name: str, value: Any, what: str, scope: Any, unique: bool = False) -> Any: ...

    def out_cell(self, type_name: str) -> Any: ...

    def from_cell(self, type_name: str, cell: Any) -> Any: ...

    def shell(self, type_name: str) -> Any: ...

    def take(self, type_name: str, shell: Any, cell: Any) -> Any: ...


class LibraryLike(Protocol):
    """A loaded Futhark library with its cffi binding, context and per-type objects."""

    path: Path
    backend: str
    mode: str
    raw_ctype: str
    key: str  # "<path>::<backend>": how a pickled handle finds its library again
    instance: str  # this Library among others of the same file: where copies and round trips go
    ffi: Any
    lib: Any
    manifest: Manifest
    source: SourceInfo | None
    context: Context
    codec: CodecLike
    types: Mapping[str, Any]  # type name -> kinds.ArrayKind | kinds.OpaqueKind

    def fn(self, name: str) -> Any: ...


__all__ = ["CodecLike", "LibraryLike"]
