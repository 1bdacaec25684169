"""Exceptions for Futhark calls.

Futhark's C API returns 0 on success, ``FUTHARK_PROGRAM_ERROR`` (2) when the program fails (bounds
check, assertion) and ``FUTHARK_OUT_OF_MEMORY`` (3) when an allocation fails; other nonzero codes
are unspecified failures. Generated entry points return 1 for arguments of the wrong sizes (seen in
0.25.32 and 0.25.34), which is the program's own size constraint failing: a ``ProgramError`` too.
The text always comes from ``futhark_context_get_error``.
"""

from __future__ import annotations
from ..errors import PybridgeError

FUTHARK_SUCCESS = 0
FUTHARK_PROGRAM_ERROR = 2
FUTHARK_OUT_OF_MEMORY = 3
FUTHARK_SIZE_MISMATCH = 1  # not a documented code: what entry points return for wrong argument sizes


class FutharkError(PybridgeError, RuntimeError):
    """A Futhark API call failed. ``code`` is the C return code (None for NULL returns)."""

    def __init__(self, message: str, code: int | None = None, function: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.function = function


class ProgramError(FutharkError):
    """The Futhark program failed (out-of-bounds index, failed assert, size mismatch).

    The context stays usable after it."""


class OutOfMemoryError(FutharkError, MemoryError):
    """Futhark could not allocate memory (reliable mainly for GPU memory)."""


class ValueFormatError(FutharkError, ValueError):
    """Bytes given to ``restore()`` (or unpickled) are not a value of the type: truncated, edited,
    or of another type. Raised before Futhark reads them."""


class InvalidHandleError(PybridgeError, RuntimeError):
    """A value was used after it was freed, consumed, or after its context was closed."""


def naming(e: Exception, what: str) -> Exception:
    """``e`` with ``what`` (where the value was passed: ``"saxpy: parameter 'ys'"``) in front of its
    message, unless it is there already; an exception of another class than the plain ones (whose
    constructor takes the message alone) is returned as it is."""
    text = str(e)
    if text.startswith(what) or type(e) not in (TypeError, ValueError, OverflowError, InvalidHandleError):
        return e
    return type(e)(f"{what}: {text}")


def error_for(code: int | None, message: str, function: str | None = None) -> FutharkError:
    """The exception class for a return code and message."""
    low = message.lower()
    if code == FUTHARK_OUT_OF_MEMORY or "out of memory" in low or "failed to allocate" in low:
        return OutOfMemoryError(message, code, function)
    # Futhark 0.25 reports argument size mismatches with code 1; a negative allocation (C hardened by
    # csource.py) also comes back as code 1 from the entry point: both are the program's inputs.
    if code == FUTHARK_PROGRAM_ERROR or (code == FUTHARK_SIZE_MISMATCH and "invalid sizes" in low) or "negative allocation" in low:
        return ProgramError(message, code, function)
    return FutharkError(message, code, function)
