"""Moved: ``pybridge bench fusion`` (pybridge/bench/fusion.py). This wrapper keeps the old command working."""
import sys

from pybridge.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["fusion", *sys.argv[1:]]))
