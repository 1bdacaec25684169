"""The root of every exception pybridge defines: ``except pybridge.PybridgeError`` catches them all.

Each subclass also derives from the builtin a caller would expect (``ValueError`` for bad input,
``RuntimeError`` for a failed call, ``MemoryError``, ``AssertionError`` for a mismatch), so code
written against the builtins keeps working. This module imports nothing, so every layer can use it.
"""

from __future__ import annotations


class PybridgeError(Exception):
    """Base class of all pybridge exceptions."""
