"""The ``.fut`` header reader, which lives in ``pybridge.futhark.source`` (the library needs it
too: size parameters are validated before a call). Kept here for existing imports."""

from ..futhark.source import *  # noqa: F401,F403
from ..futhark.source import __all__  # noqa: F401
