"""A hang in a lifecycle run ends it, showing where (issue 31): the lifecycle machine's per-sequence
limit and lifecycle_run's per-batch limit (pybridge.testing.watchdog) write every thread's stack
and exit instead of stopping the test run. Each case runs in a child interpreter: the limits exit
the process they run in."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _child(code: str, timeout: float = 240) -> tuple[int, str, float]:
    """(exit status, output, seconds) of ``code`` in a fresh interpreter importing the pybridge under test."""
    import pybridge

    where = str(Path(pybridge.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([where, *filter(None, [os.environ.get("PYTHONPATH")])])}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def _probe_library() -> str:
    from conftest import built_library

    return str(built_library("probe", "c"))


def test_a_sequence_that_hangs_shows_every_stack_and_ends_the_process() -> None:
    """A lock left held by a thread that is gone (what an interrupt once did to the context lock):
    the machine's next call waits forever. With a 3 s limit per sequence the child exits with
    status 1 and the main thread's stack, inside the machine's rule, instead of waiting."""
    status, out, took = _child(f"""
        import threading
        import pybridge.futhark as pf
        from hypothesis import settings
        from hypothesis.stateful import run_state_machine_as_test
        from pybridge.testing import handle_lifecycle_machine

        lib = pf.load({_probe_library()!r})
        holder = threading.Thread(target=lib.context.lock.acquire)  # takes the lock and ends, still its owner
        holder.start(); holder.join()
        machine = handle_lifecycle_machine(lib, hang_limit_s=3)
        run_state_machine_as_test(machine, settings=settings(max_examples=5, stateful_step_count=5, deadline=None, database=None))
        print("the run ended")
    """)
    assert status == 1 and "the run ended" not in out, out[-3000:]
    # faulthandler's report: the limit (a hair under 3 s), then the main thread waiting in the rule
    assert "Timeout (0:00:0" in out and "in new_handle" in out and "pybridge/testing/stateful.py" in out, out[-3000:]
    assert took < 120, took


def test_limits_nest_and_a_finished_sequence_stops_its_own() -> None:
    """An inner limit stopped leaves the outer one armed (not the inner's later deadline, not none),
    and the machine stops its per-sequence limit at teardown: a run of short sequences under a 4 s
    limit each, then 6 s of sleep, is not ended by it; the outer 9 s limit then ends the process."""
    status, out, took = _child(f"""
        import time
        import pybridge.futhark as pf
        from hypothesis import settings
        from hypothesis.stateful import run_state_machine_as_test
        from pybridge.testing import handle_lifecycle_machine, watchdog

        outer = watchdog.start(9)
        inner = watchdog.start(600)
        watchdog.stop(inner)
        with pf.load({_probe_library()!r}) as lib:
            t0 = time.monotonic()
            machine = handle_lifecycle_machine(lib, hang_limit_s=4, interrupts=False)
            run_state_machine_as_test(machine, settings=settings(max_examples=3, stateful_step_count=3, deadline=None, database=None))
        print("machine done", flush=True)
        time.sleep(6 - min(5, time.monotonic() - t0))
        print("alive after the sequences' limits", flush=True)
        time.sleep(60)
        print("the outer limit did not fire")
    """)
    assert "machine done" in out and "alive after the sequences' limits" in out, out[-3000:]
    # the outer limit, re-armed with what was left of its 9 s, fired during the last sleep
    assert status == 1 and "the outer limit did not fire" not in out, out[-3000:]
    assert out.index("alive after") < out.index("Timeout (0:00:0") and "line 18 in <module>" in out, out[-3000:]
    assert took < 60, took


def test_limit_refuses_a_time_that_is_not_positive() -> None:
    from pybridge.testing import watchdog

    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="must be positive"):
            watchdog.start(bad)


def test_the_runner_reports_a_hung_batch_with_its_stacks_and_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose child hangs and is ended by its limit: a crash entry holding faulthandler's
    whole report (from its "Timeout" line: with many threads it is longer than the 3,000 characters
    kept of other output) and the batch's seed, so it can be run again alone."""
    from pybridge.testing import lifecycle_run

    fake = tmp_path / "python-that-hangs"
    fake.write_text(
        "#!/bin/sh\n"
        f"exec {sys.executable} -c 'import faulthandler, threading, time\n"
        "def hung_here():\n"
        "    time.sleep(30)\n"
        "for _ in range(40):\n"
        "    threading.Thread(target=hung_here, daemon=True).start()\n"
        "faulthandler.dump_traceback_later(1, exit=True)\n"
        "hung_here()'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(lifecycle_run.sys, "executable", str(fake))
    summary = lifecycle_run.run(["unused.fut"], "c", 2, batch=2, timeout=25, seed=40)
    (crash,) = summary["crashes"]
    assert crash["status"] == 1 and crash["seed"] == 40, crash
    assert crash["output"].startswith("Timeout (0:00:01)!") and "hung_here" in crash["output"], crash


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pybridge.testing.alarm needs Linux's POSIX timers")
def test_an_alarm_handled_in_a_tracer_lands_in_the_code_under_test() -> None:
    """Hypothesis traces a test that failed (sys.settrace before Python 3.12), and a signal handled
    in its trace function at a ``try:`` line raised KeyboardInterrupt past every handler of the
    traced frame: a lifecycle child died of SIGINT there, hiding the failure being explained. The
    alarm's handler now sends the interrupt again a few µs later, so it lands in the traced code
    and the rule's own ``except KeyboardInterrupt`` catches it; without a tracer it raises at once."""
    status, out, _ = _child("""
        import signal, sys
        from pybridge.testing.alarm import Alarm

        alarm = Alarm()
        signal.signal(signal.SIGALRM, alarm.handler)

        def region():
            try:
                alarm.arm(10**6)  # far away: the tracer sends the signal itself
                try:
                    sum([i for i in range(10000)])
                finally:
                    alarm.disarm()
            except KeyboardInterrupt:
                return "caught"
            return "ran through"

        INNER_TRY = region.__code__.co_firstlineno + 3

        def tracer(frame, event, arg):
            if frame.f_code is region.__code__:
                if event == "line" and frame.f_lineno == INNER_TRY:
                    signal.raise_signal(signal.SIGALRM)  # handled at the end of this call: in the tracer
                return tracer
            return None

        for traced in (True, False):
            sys.settrace(tracer if traced else None)
            try:
                got = region() if traced else (signal.raise_signal(signal.SIGALRM), "no raise")[1]
            except KeyboardInterrupt:
                got = "escaped" if traced else "raised"
            finally:
                sys.settrace(None)
            print(traced, got)
    """)
    assert status == 0, out[-3000:]
    assert "True caught" in out and "False raised" in out, out[-3000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pybridge.testing.alarm needs Linux's POSIX timers")
def test_an_alarm_handled_in_a_tracer_after_disarm_is_dropped() -> None:
    """A signal handled in a trace function once ``disarm()`` began (the alarm no longer armed)
    comes after the guarded call: raised there it would escape the region that guards it (into
    Hypothesis's code), so it is dropped, as Python drops one that comes in a finaliser. Outside a
    tracer it still raises at once."""
    status, out, _ = _child("""
        import signal, sys
        from pybridge.testing.alarm import Alarm

        alarm = Alarm()
        signal.signal(signal.SIGALRM, alarm.handler)
        alarm.arm(10**6)
        alarm.disarm()

        def after_the_call():
            total = 0
            for i in range(3):
                total += i
            return "ran through"

        def tracer(frame, event, arg):
            if frame.f_code is after_the_call.__code__:
                if event == "line":
                    signal.raise_signal(signal.SIGALRM)  # handled at the end of this call: in the tracer
                return tracer
            return None

        sys.settrace(tracer)
        try:
            got = after_the_call()
        except KeyboardInterrupt:
            got = "escaped"
        finally:
            sys.settrace(None)
        print("traced", got)
        try:
            signal.raise_signal(signal.SIGALRM)
            print("untraced no raise")
        except KeyboardInterrupt:
            print("untraced raised")
    """)
    assert status == 0, out[-3000:]
    assert "traced ran through" in out and "untraced raised" in out, out[-3000:]
