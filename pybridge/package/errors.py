"""Errors of ``pybridge package``."""

from __future__ import annotations

from ..errors import PybridgeError


class PackageError(PybridgeError, ValueError):
    """The package cannot be made as asked (a bad name, version or backend, clashing entry points)."""
