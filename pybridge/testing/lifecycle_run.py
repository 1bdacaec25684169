"""Run the handle lifecycle machine for many sequences, each batch in a child process, so that a
crash (a signal, an ``exit()`` inside Futhark's C) is counted and reported instead of ending the run.

    python -m pybridge.testing.lifecycle_run --backend c --sequences 10000 --jobs 8 prog.fut ...

Prints one JSON object: backend, programs, sequences and steps run, interrupted calls and the
interrupts that landed in them, batches, and the crashes and
failures seen (each with the child's exit status, its Hypothesis seed and the end of its output).
The exit status is 0 only when there were neither. Batch ``i`` runs with the Hypothesis seed
``--seed`` + ``i`` (a random base when not given, printed as ``seed``), so a failing batch is run
again with ``--seed`` set to its seed and ``--sequences`` to its size, e.g. ``--batch 1000``. ``PYBRIDGE_LIFECYCLE_PROFILE`` (``quick``/``full``) picks the
sequence count when ``--sequences`` is not given: ``PROFILES`` below. The machine's Ctrl-C rule
(``interrupted_call``) is on unless ``--no-interrupts`` (``PYBRIDGE_LIFECYCLE_INTERRUPTS=0`` for
the batches). A batch that runs past its time limit (``--timeout``), or one sequence past the
machine's (``stateful.SEQUENCE_LIMIT_S``), is a crash whose output holds every thread's stack (a
hang: a lock left held), written by faulthandler (``watchdog.py``) before the parent kills it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import traceback
from typing import Any, Sequence

from ..executables import python_module_command
from . import watchdog

PROFILES = {"quick": 300, "full": 10_000}
# What each batch counts and the summary adds up (attributes of the machine's class).
COUNTS = ("sequences", "steps", "interrupted_calls", "interrupts_landed")
DEFAULT_PROFILE = "quick"
HANG_OUTPUT_CHARS = 16_000  # of a batch that hung: its stacks (faulthandler's "Timeout" onwards)


def profile_sequences() -> int:
    name = os.environ.get("PYBRIDGE_LIFECYCLE_PROFILE", DEFAULT_PROFILE)
    if name not in PROFILES:
        raise ValueError(f"PYBRIDGE_LIFECYCLE_PROFILE must be one of {sorted(PROFILES)}, got {name!r}")
    return PROFILES[name]


def interrupts_wanted() -> bool:
    """The Ctrl-C rule: on unless ``PYBRIDGE_LIFECYCLE_INTERRUPTS=0``."""
    return os.environ.get("PYBRIDGE_LIFECYCLE_INTERRUPTS", "1") != "0"


def run_batch(programs: Sequence[str], backend: str, sequences: int, steps: int, seed: int | None = None) -> dict[str, Any]:
    """In this process: the machine for each program, ``sequences`` sequences split among them,
    each program's run with the Hypothesis seed ``seed`` (None: a random one)."""
    from hypothesis import HealthCheck, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.stateful import run_state_machine_as_test

    import pybridge.futhark as pf

    from .stateful import handle_lifecycle_machine

    done = dict.fromkeys(COUNTS, 0)
    share = max(1, sequences // len(programs))
    for prog in programs:
        with pf.load(prog, backend=backend) as lib:
            machine = handle_lifecycle_machine(lib, max_size=6, interrupts=interrupts_wanted())
            if seed is not None:
                machine = hypothesis_seed(seed)(machine)
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=share, stateful_step_count=steps, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
                ),
            )
            for key in COUNTS:
                done[key] += getattr(machine, key)
    return done


def _freeze_imports() -> None:
    """A child's imports out of the GC's reach (gc.freeze): the machine collects garbage before
    every sequence (stateful.py), and each full collection scanned these tens of thousands of
    objects again, 40% of a batch's time. What the sequences make is still collected."""
    import hypothesis.stateful  # noqa: F401
    import numpy  # noqa: F401

    import pybridge.futhark  # noqa: F401

    from . import stateful  # noqa: F401

    gc.collect()
    gc.freeze()


def _text(out: bytes | str | None) -> str:
    """A TimeoutExpired's output: bytes even when the run asked for text."""
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _tail(out: str) -> str:
    """The end of a child's output; from faulthandler's "Timeout" line on when it hung (every
    thread's stack: the main thread's is not the last)."""
    hung = out.rfind("Timeout (")
    return out[hung:hung + HANG_OUTPUT_CHARS] if hung >= 0 else out[-3000:]


def _run_child(programs: Sequence[str], backend: str, n: int, steps: int, timeout: float, seed: int | None = None) -> dict[str, Any]:
    """One batch of ``n`` sequences in a child process (Hypothesis seed ``seed``; None: a random
    one): its counts, or a crash/failure entry."""
    seeded = ("--seed", str(seed)) if seed is not None else ()
    cmd = python_module_command("pybridge.testing.lifecycle_run", "--child", "--backend", backend, "--sequences", str(n),
                                "--steps", str(steps), *seeded,
                                "--stacks-after", str(max(1.0, timeout - min(30.0, timeout / 10))), *programs)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = _text(e.stdout) + _text(e.stderr)
        return {"crash": {"status": "timeout", "seed": seed, "output": f"batch of {n} ran over {timeout} s\n{_tail(out)}"}}
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode == 0 and last:
        try:
            return {"counts": json.loads(last[0])}
        except json.JSONDecodeError:
            pass
    entry = {"status": proc.returncode, "seed": seed, "output": _tail(proc.stdout + proc.stderr)}
    # A negative status is a signal; Futhark's exit(1) gives 1 with no traceback from Python.
    died = proc.returncode < 0 or "Traceback" not in proc.stderr
    return {"crash" if died else "failure": entry, "ran": True}


def run(programs: Sequence[str], backend: str, sequences: int, batch: int = 500, steps: int = 20, timeout: float = 3600,
        jobs: int = 1, seed: int | None = None) -> dict[str, Any]:
    """Batches of ``batch`` sequences, each in a child process, ``jobs`` children at a time (each
    child is a separate process, so parallel batches cannot hide each other's crashes); batch ``i``
    with the Hypothesis seed ``seed + i`` (``seed`` None: a random base)."""
    from concurrent.futures import ThreadPoolExecutor

    for name, value, least in (("sequences", sequences, 0), ("batch", batch, 1), ("jobs", jobs, 1)):
        if value < least:  # a batch <= 0 would run nothing and report success
            raise ValueError(f"lifecycle_run: {name} must be at least {least}, got {value}")
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    summary: dict[str, Any] = {"backend": backend, "programs": list(programs), "seed": seed, **dict.fromkeys(COUNTS, 0),
                               "batches": 0, "jobs": jobs, "crashes": [], "failures": []}
    sizes = [min(batch, sequences - start) for start in range(0, sequences, batch)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for outcome in pool.map(lambda i, n: _run_child(programs, backend, n, steps, timeout, seed + i), range(len(sizes)), sizes):
            if "counts" in outcome:
                summary["batches"] += 1
                for key in COUNTS:  # .get: a child of an older pybridge counts fewer things
                    summary[key] += outcome["counts"].get(key, 0)
            elif "crash" in outcome:
                summary["batches"] += int(outcome.get("ran", False))
                summary["crashes"].append(outcome["crash"])
            else:
                summary["batches"] += 1
                summary["failures"].append(outcome["failure"])
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("programs", nargs="+", help=".fut sources or built libraries")
    ap.add_argument("--backend", default="c")
    ap.add_argument("--sequences", type=int, default=None)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1, help="batches run at once (each in its own process)")
    ap.add_argument("--interrupts", action=argparse.BooleanOptionalAction, default=interrupts_wanted(),
                    help="interrupt calls at random moments (KeyboardInterrupt by SIGALRM), the default; "
                         "--no-interrupts sets PYBRIDGE_LIFECYCLE_INTERRUPTS=0 for the batches")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds a batch may run (default 3600)")
    ap.add_argument("--seed", type=int, default=None, help="Hypothesis seed of the first batch (the next: +1, ...)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stacks-after", type=float, default=None, help=argparse.SUPPRESS)  # child: faulthandler's limit
    args = ap.parse_args(argv)
    for name, least in (("sequences", 0), ("batch", 1), ("jobs", 1)):
        value = getattr(args, name)
        if value is not None and value < least:
            ap.error(f"--{name} must be at least {least}, got {value}")
    os.environ["PYBRIDGE_LIFECYCLE_INTERRUPTS"] = "1" if args.interrupts else "0"  # the batches inherit it
    n = args.sequences if args.sequences is not None else profile_sequences()
    if args.child:
        _freeze_imports()
        if args.stacks_after is not None:  # a hang: every thread's stack in the output, then exit
            watchdog.start(args.stacks_after)
        try:
            counts = run_batch(args.programs, args.backend, n, args.steps, args.seed)
        except KeyboardInterrupt:
            # The Ctrl-C rule catches every interrupt it sends (alarm.py keeps them out of tracers);
            # one that got past it is the harness's failure, reported with its traceback, not a
            # death by SIGINT that the runner would count as a crash.
            traceback.print_exc()
            print("lifecycle_run: an interrupt escaped the machine's Ctrl-C rule", file=sys.stderr)
            return 3
        print(json.dumps(counts))
        return 0
    summary = run(args.programs, args.backend, n, args.batch, args.steps, timeout=args.timeout, jobs=args.jobs, seed=args.seed)
    print(json.dumps(summary, indent=1))
    return 0 if not summary["crashes"] and not summary["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
