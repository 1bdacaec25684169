"""The targets of ``pybridge bench scaling`` and the floor rule, judged from a run's own rows.

A judged row gets ``verdict``: ``"yes"`` (the target is met), ``"floor"`` (missed, but the same
run's floor for that graph rules the target out and the row is within ``FLOOR_SLACK`` of that
floor), or ``"no"``; ``met`` is ``verdict == "yes"``; ``note`` gives the figures either way. The
floors, each measured in the same run on the same workers:

- weak rows: Dask's own cost of the same graph doing no work ("Dask alone", F at k workers) beside
  the one-GPU time without Dask (D): the best efficiency Dask leaves is D / (D + F); the row's time
  T is within the rule when T <= 1.1 (D + F);
- strong rows: the best time is D / k + F (speedup D / (D / k + F)); and Dask + CuPy (cuBLAS) on the
  same graph: a speedup S below the target rules it out, and the row is within the rule when its
  own speedup is at least S / 1.1;
- B0: plain Dask's own fixed cost and cost per task: a target plain Dask misses itself is ruled out,
  and pybridge is within the rule at 1.1 times plain Dask's figure. (pybridge <= 1.1x plain Dask
  is already relative to that floor.)
"""

from __future__ import annotations

from typing import Any

#: Targets by row group (the multi-GPU section prints them beside the figures).
TARGETS = {
    "B0": "fixed ≤ 10 ms; per task ≤ 1 ms; pybridge ≤ 1.1× plain Dask",
    "B1": "efficiency ≥ 0.95 at 2 GPUs, ≥ 0.90 at 4",
    "B2": "efficiency ≥ 0.90 at 4 GPUs",
    "B3": "≥ 1.9× at 2 GPUs, ≥ 3.5× at 4; kernel ≤ 1.3× Dask + CuPy (cuBLAS) at every count",
    "B4": "efficiency ≥ 0.90 at 4 GPUs",
    "size": "completes, each configuration under a minute",
}
EFFICIENCY = {"B1": {2: 0.95, 4: 0.90}, "B2": {4: 0.90}, "B4": {4: 0.90}}
SPEEDUP = {2: 1.9, 4: 3.5}
KERNEL_VS_CUBLAS = 1.3
B0_FIXED_S, B0_PER_TASK_S, B0_RATIO = 0.010, 0.001, 1.1
#: How far above a floor that rules its target out a row may be and still count ("floor").
FLOOR_SLACK = 1.1

_VERDICTS = ("yes", "floor", "no")


def _set(r: dict[str, Any], verdict: str, note: str) -> None:
    assert verdict in _VERDICTS
    r["verdict"], r["met"], r["note"] = verdict, verdict == "yes", note


def _peer(rows: list[dict[str, Any]], group: str, k: int) -> dict[str, Any] | None:
    """The same graph with CuPy (NumPy on CPU workers) doing the work, at k workers."""
    return next((x for x in rows if x["benchmark"] == group and x["workers"] == k and x["impl"].startswith("Dask + ")
                 and x.get("speedup") is not None), None)


def judge_group(rows: list[dict[str, Any]], group: str, key: str) -> None:
    """Judge the pybridge rows of a weak (B1, B2, B4) or strong (B3) group that have a target at
    their worker count; B3's kernel rows also against cuBLAS on the same graph at every count.
    A row needs ``median_us``, ``workers``, ``efficiency`` or ``speedup``, and for the floor rule
    ``direct_us`` and ``dask_alone_us`` (set when the group is measured)."""
    weak = key in EFFICIENCY
    for r in rows:
        if r["benchmark"] != group or not r["impl"].startswith("pybridge") or r.get("efficiency", r.get("speedup")) is None:
            continue
        k = r["workers"]
        need = EFFICIENCY[key].get(k) if weak else SPEEDUP.get(k)
        parts, verdicts, notes = [], [], []
        if need is not None:
            parts.append(f"{'efficiency' if weak else 'speedup'} ≥ {need}")
            verdict, note = _scaling_verdict(rows, group, r, need, weak)
            verdicts.append(verdict)
            notes.append(note)
        if key == "B3" and r["impl"].startswith("pybridge kernel"):
            peer = _peer(rows, group, k)
            if peer is not None:
                r["vs cuBLAS"] = r["median_us"] / peer["median_us"]
                parts.append(f"≤ {KERNEL_VS_CUBLAS}× cuBLAS")
                ok = r["vs cuBLAS"] <= KERNEL_VS_CUBLAS
                verdicts.append("yes" if ok else "no")  # cuBLAS is the reference itself: no floor to appeal to
                if not ok:
                    notes.append(f"{r['vs cuBLAS']:.2f}× the time of Dask + cuBLAS on the same graph")
        if not parts:
            continue
        r["target"] = "; ".join(parts)
        verdict = "no" if "no" in verdicts else "floor" if "floor" in verdicts else "yes"
        _set(r, verdict, "; ".join(n for n in notes if n))


def _scaling_verdict(rows: list[dict[str, Any]], group: str, r: dict[str, Any], need: float, weak: bool) -> tuple[str, str]:
    have = r["efficiency"] if weak else r["speedup"]
    what = "efficiency" if weak else "speedup"
    d, f, t = r.get("direct_us"), r.get("dask_alone_us"), r["median_us"]
    k = r["workers"]
    notes, within = [], False
    if d and f:
        best_time = (d if weak else d / k) + f
        best = d / best_time
        ratio = t / best_time
        rules_out = best < need
        within = rules_out and ratio <= FLOOR_SLACK
        notes.append(f"Dask alone {f / 1e3:.2f} ms beside direct {d / 1e3:.2f} ms{'' if weak else f' / {k}'} "
                     f"allows {what} ≤ {best:.3f}{' (rules the target out)' if rules_out else ''}; "
                     f"pybridge {ratio:.3f}× that")
    peer = _peer(rows, group, k)
    if peer is not None:
        s = peer["efficiency"] if weak and peer.get("efficiency") is not None else peer["speedup"]
        rules_out = s < need
        peer_ok = rules_out and have * FLOOR_SLACK >= s
        within = within or (not weak and peer_ok)  # on strong rows Dask + CuPy's own speedup is a floor
        notes.append(f"{peer['impl'].rsplit(', ', 1)[0]}: {what} {s:.3f}{' (rules the target out)' if rules_out else ''}")
    if have >= need:
        return "yes", ""
    return ("floor" if within else "no"), "; ".join(notes)


def judge_b0(r: dict[str, Any]) -> None:
    """The B0 fit row (``fixed_ms``, ``per_task_ms``, ``worst_ratio`` and plain Dask's own)."""
    notes, verdicts = [], []
    for label, mine, plain, limit in (("fixed", r["fixed_ms"], r["plain_fixed_ms"], B0_FIXED_S * 1e3),
                                      ("per task", r["per_task_ms"], r["plain_per_task_ms"], B0_PER_TASK_S * 1e3)):
        if mine <= limit:
            verdicts.append("yes")
        elif plain > limit and mine <= FLOOR_SLACK * plain:
            verdicts.append("floor")
            notes.append(f"{label}: plain Dask's own {plain:.3f} ms misses ≤ {limit:g} ms; pybridge {mine / plain:.3f}× that")
        else:
            verdicts.append("no")
            notes.append(f"{label}: {mine:.3f} ms (plain Dask {plain:.3f} ms)")
    if r["worst_ratio"] <= B0_RATIO:
        verdicts.append("yes")
    else:
        verdicts.append("no")
        notes.append(f"worst {r['worst_ratio']:.3f}× plain Dask, at {r.get('worst_tasks')} tasks")
    _set(r, "no" if "no" in verdicts else "floor" if "floor" in verdicts else "yes", "; ".join(notes))


def judge_size(r: dict[str, Any], limit_s: float = 60.0) -> None:
    ok = r["configuration_s"] < limit_s
    _set(r, "yes" if ok else "no", "" if ok else f"{r['configuration_s']:.1f} s")
