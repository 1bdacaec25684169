"""The command line's parser and argument types: one rule and one wording for every bad argument.

A bad option, value, backend or file ends as one line on stderr, ``<prog>: error: argument X:
<what was wrong> (expected ...)``, and exit 2; a value is checked where it is parsed, so that no
command starts (or downloads, or compiles) before it is refused. Kept apart from cli.py so that the
subcommands defined elsewhere (bench, package) use the same types without importing the CLI.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from .backends import BACKENDS, check_backend
from .errors import PybridgeError


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message.replace(chr(10), ' ')} (see {self.prog} -h)\n")


class UsageError(PybridgeError, ValueError):
    """Bad input found after parsing (an option that does not apply, say): one line, exit 2."""


def at_least(minimum: int) -> Callable[[str], int]:
    """argparse type of a whole number >= ``minimum``."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum}" + (" (a positive integer)" if minimum == 1 else "")
                                             + f", got {value}")
        return value

    return whole_number


# Counts and sizes: 0 or a negative number would time nothing (or divide by it).
positive_int = at_least(1)


def positive_int_list(text: str) -> str:
    """argparse type of comma-separated counts (``1,2,4``), each >= 1; the same text back."""
    try:
        return ",".join(str(positive_int(w.strip())) for w in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1 such as 1,2,4, got {text!r}") from None


def choice_list(valid: Iterable[str]) -> Callable[[str], str]:
    """argparse type of comma-separated names, each one of ``valid``; the same text back."""
    choices = tuple(valid)

    def names(text: str) -> str:
        unknown = [n for n in (w.strip() for w in text.split(",")) if n not in choices]
        if unknown or not text.strip():
            raise argparse.ArgumentTypeError(f"expected comma-separated names of {', '.join(choices)}, got {text!r}")
        return text

    return names


def positive_float(text: str) -> float:
    """argparse type of a time limit in seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def duration(text: str) -> float:
    """argparse type of an age: 30s, 12h, 7d, 2w; a plain number is days."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30s, 12h, 7d or 2w (a plain number: days), got {text!r}")
    return float(m[1]) * _SECONDS[m[2].lower()]


def backend(valid: Iterable[str] = BACKENDS) -> Callable[[str], str]:
    """argparse type of a Futhark backend among ``valid``: a near miss (``cdua``) is named."""
    choices = tuple(valid)

    def backend_name(text: str) -> str:
        try:
            return check_backend(text, choices)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("backend: ")) from None

    return backend_name


def backend_list(valid: Iterable[str]) -> Callable[[str], list[str]]:
    """argparse type of comma-separated backends (``c,multicore``), each among ``valid``, none twice."""
    one = backend(valid)

    def backend_names(text: str) -> list[str]:
        names = [one(b.strip()) for b in text.split(",") if b.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"expected comma-separated backends such as c,multicore, got {text!r}")
        if len(set(names)) != len(names):
            raise argparse.ArgumentTypeError(f"{text!r} names a backend twice")
        return names

    return backend_names


def existing_file(what: str, *suffixes: str) -> Callable[[str], str]:
    """argparse type of an input file: it must exist, be a readable file (not a folder) and end in
    one of ``suffixes``; ``what`` says what was expected (``a Futhark program (.fut)``)."""

    def input_file(text: str) -> str:
        path = Path(text)
        if not path.exists():
            problem = f"{text} does not exist"
        elif path.is_dir():
            problem = f"{text} is a directory"
        elif suffixes and path.suffix not in suffixes:
            problem = f"{text} is not {what}"
        else:
            try:
                with open(path, "rb"):
                    return text
            except OSError as e:
                problem = f"{text} cannot be read ({e.strerror or e})"
        raise argparse.ArgumentTypeError(f"{problem} (expected {what})")

    return input_file


def existing_dir(text: str) -> str:
    """argparse type of a folder that is read."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} {'is not a directory' if Path(text).exists() else 'does not exist'} "
                                         "(expected an existing directory)")
    return text


def output_dir(text: str) -> str:
    """argparse type of a folder to write into (made when missing): not an existing file."""
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory (expected a directory to write into)")
    return text


def output_file(text: str) -> str:
    """argparse type of a file to write: not a folder, in a folder that exists (checked before a
    long run, not after it)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory (expected a file to write)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: its folder {parent} does not exist (expected a file in an existing folder)")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: its folder {parent} is not writable")
    return text


def verbosity_options(parser: argparse.ArgumentParser, default: object) -> None:
    """-v / -q on ``parser`` (``default``: False on the top-level parser, argparse.SUPPRESS on the
    subcommands', so that ``pybridge -q info`` keeps the -q given before the subcommand)."""
    parser.add_argument("-v", "--verbose", action="store_true", default=default,
                        help="also the DEBUG log (cache hits) and the traceback of an unexpected error")
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="only results and errors (no log of what is compiled, no hints, no progress)")
