"""Call Futhark programs from Python: manifest -> types -> library and context -> entry points and
values. Start with ``load``::

    import pybridge.futhark as pf
    with pf.load("saxpy") as lib:
        out = lib.saxpy(2.0, xs, ys)   # a handle; data stays in Futhark
        print(out.numpy())
"""

from .context import Config, Context
from .entry import EntryPoint
from .errors import FutharkError, InvalidHandleError, OutOfMemoryError, ProgramError, ValueFormatError
from .library import Library, check_in_subprocess, load
from .manifest import Manifest, ManifestError, load_manifest, parse_manifest
from .conversion import to_numpy
from .handles import ArrayHandle, OpaqueHandle
from .kinds import ArrayKind, OpaqueKind
from .source import SourceInfo, load_source, parse_source

__all__ = [
    "ArrayHandle",
    "ArrayKind",
    "Config",
    "Context",
    "EntryPoint",
    "FutharkError",
    "InvalidHandleError",
    "Library",
    "Manifest",
    "ManifestError",
    "OpaqueHandle",
    "OpaqueKind",
    "OutOfMemoryError",
    "ProgramError",
    "SourceInfo",
    "ValueFormatError",
    "check_in_subprocess",
    "load",
    "load_manifest",
    "load_source",
    "parse_manifest",
    "parse_source",
    "to_numpy",
]
