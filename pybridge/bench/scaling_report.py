"""``pybridge bench scaling``'s outputs beside the table: BENCHMARKS.md's multi-GPU section
(markdown: every target with its figure, the protocol, the topology, every row) and the plot of
speedup against GPU count with the ideal line. ``--section FILE`` also keeps the rows in
``FILE.json``, from which both are made again elsewhere (a machine with matplotlib); so are they
from the rows a run appended to ``--rows-out`` as it went (a run cut short)::

    python -m pybridge.bench.scaling_report multi-gpu.json --section multi-gpu.md --plot scaling.png
    python -m pybridge.bench.scaling_report rows.jsonl --section multi-gpu.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .report import table_lines
from .scaling_targets import FLOOR_SLACK, TARGETS

SECTION_TITLE = "## Multi-GPU: pybridge.dask over N GPUs"
VERDICT_TEXT = {"yes": "yes", "floor": "floor", "no": "**no**"}


def _pybridge_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if "met" in r and r.get("target")]


def target_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per judged row: the row, its target, the figure, met or not (and the floor note)."""
    out = ["| row | target | measured | met | same run's floor / note |", "|---|---|---|---|---|"]
    for r in _pybridge_rows(rows):
        if r["benchmark"].startswith("B0"):
            fig = (f"fixed {r['fixed_ms']:.2f} ms, {r['per_task_ms']:.3f} ms/task, worst {r['worst_ratio']:.2f}× plain Dask "
                   f"(plain: {r['plain_fixed_ms']:.2f} ms + {r['plain_per_task_ms']:.3f} ms/task)")
            if r.get("vs_peer_worst") is not None:
                fig += f"; at most {r['vs_peer_worst']:.2f}× {r['peer']}"
            if r.get("smallest_ms") is not None:
                fig += f"; smallest graph {r['smallest_ms']:.2f} ms (plain {r['plain_smallest_ms']:.2f} ms)"
        elif r["benchmark"].startswith("size"):
            fig = f"{r['median_us'] / 1e3:.1f} ms per run, {r['configuration_s']:.1f} s in all"
        else:
            fig = _figures(r)
        verdict = r.get("verdict") or ("yes" if r["met"] else "no")  # rows of runs before the floor rule had met only
        out.append(f"| {r['benchmark']}: {r['impl']} | {r['target']} | {fig} | {VERDICT_TEXT[verdict]} | {r.get('note', '')} |")
    judged = {r["benchmark"].split()[0] for r in _pybridge_rows(rows)}
    why = {r["benchmark"].split()[0]: r["skipped"] for r in rows if r.get("skipped")}
    for key, text in TARGETS.items():
        if key in judged:
            continue
        largest = _largest_run(rows, key)
        if largest:  # measured, but at no GPU count its target is set for (B2, B4 over 1..2 GPUs)
            counts = sorted({r["workers"] for r in rows if r["benchmark"].split()[0] == key and r.get("workers")})
            figs = "; ".join(f"{r['impl']}: {_figures(r)}" for r in largest)
            out.append(f"| {key} | {text} | {figs} | – | not judged: no target at the counts measured "
                       f"({', '.join(map(str, counts))}) |")
        else:
            out.append(f"| {key} | {text} | not measured in this run | – | {why.get(key, '')} |")
    return out


def _figures(r: dict[str, Any]) -> str:
    return f"{r['median_us'] / 1e3:.2f} ms" + "".join(
        f", {k} {r[k]:.2f}" for k in ("efficiency", "speedup", "vs cuBLAS") if r.get(k) is not None)


def _largest_run(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """pybridge's rows of group ``key`` at the largest worker count measured, with their figures."""
    mine = [r for r in rows if r["benchmark"].split()[0] == key and r["impl"].startswith("pybridge")
            and r.get("median_us") and r.get("efficiency", r.get("speedup")) is not None]
    top = max((r["workers"] for r in mine), default=None)
    return [r for r in mine if r["workers"] == top]


def _batching(meta: dict[str, Any]) -> str:
    ms = meta.get("client_batching_ms")
    if ms is None:
        return "The client's message batching was not recorded."
    if ms == 0:
        return ("The client's connection sends without Dask's batching delay (`pbd.low_latency(client)`, as "
                "docs/scale-out.md sets a client up).")
    return f"The client's connection kept a batching interval of {ms:g} ms (not `pbd.low_latency`)."


def write_section(path: str, rows: list[dict[str, Any]], meta: dict[str, Any], plot: str | None) -> None:
    topo = str(meta.get("topology") or "(not given: --topology FILE)").rstrip()
    counts = meta.get("counts", [])
    unit = "GPUs" if meta.get("gpu") else "CPU workers"
    lines = [
        SECTION_TITLE, "",
        *([f"**Run:** {meta['label']}.", ""] if meta.get("label") else []),
        f"Written by `pybridge bench scaling` over {min(counts, default=0)}..{max(counts, default=0)} {unit} "
        f"(cluster: {meta.get('cluster')}, backend {meta.get('backend')}, {meta.get('repeat')} timed runs per figure "
        f"after one warm-up, {meta.get('repeat_weak', meta.get('repeat'))} for B1 and B2 (judged against their floor "
        f"within a few per cent); whole run {meta.get('seconds', 0):.0f} s).", "",
        "**Protocol.** One Dask worker per GPU (rotated `CUDA_VISIBLE_DEVICES`; no host memory limit: the blocks "
        "live in device memory), libraries loaded once per worker "
        "(`pbd.PybridgeWorker`), NVLink multicast off (`NCCL_NVLS_ENABLE=0`). Inputs are made on the workers "
        "(`pbd.random`, CuPy) before timing. A figure is the median of runs (after one warm-up), each timed from "
        "building the graph to `wait` returning for all its futures; every task of every row (pybridge, plain Dask, "
        "Dask + CuPy, Dask alone alike) waits for its own GPU work before it returns (`sync=True`: its CuPy stream, "
        "which Futhark's results are ordered on), so a finished future is a computed block and no device sync "
        "round trip (`client.run`) follows. " + _batching(meta) + " Between runs, untimed, the result is "
        f"released and the client left idle for {meta.get('quiet_ms', 25):.0f} ms, so that a run's graph never travels "
        f"with the previous run's release. pybridge's call path: {meta.get('call_path', 'not recorded')}. Results stay on the workers. B1-B4 and the size "
        "rows are one task per GPU (`pbd.spmd`, all ranks in one graph); B2's halos and B3's broadcast of B go GPU "
        "to GPU over NCCL (`pbd.Comms`). \"direct\" is the same work on one GPU without Dask (in a worker: call + "
        "device sync), rerun in this run; weak efficiency = direct / time on k GPUs with k times the work; strong "
        "speedup = direct / time. \"Dask alone\" is the same graph doing no work (Dask's floor); \"Dask + CuPy\" the "
        "same graph with CuPy doing it. `submit_us` is the client's part of a run (building and submitting the graph). "
        f"B0: medians of {meta.get('repeat_b0', 20)} runs per task count of `pbd.map_blocks(saxpy)` over blocks of 1024 "
        "elements against plain Dask's `da.map_blocks` of a module-level function passing its block through and "
        "Dask + CuPy's `da.map_blocks` doing the same saxpy (`a * x + y`), fixed "
        "and per-task costs fitted by repeated medians (Siegel: one slow count bends neither), the smallest graph's "
        "time beside them. Where the time goes, measured in runs apart from the timed ones: B2's `phase_*` "
        "(5 runs with the workers recording, the task that ended last: `assemble` (the extended block allocated, "
        "its copy queued), `copy` (the block into it, on its own stream), `exchange` (the halos, NCCL, and the "
        "wait for the copy), `compute` (the entry point; `compute_max` of any rank), `trim`, device times from "
        "CUDA events and `_host_us` host times; `to_start` submit to the last task's start, `start_skew`, `task`, "
        "`after` its end to the client seeing the run done); B0's `in_graph_<impl>_task_us` and `_busy` (the "
        "biggest graph's tasks timed inside it; busy: the busiest worker's task time over the run's) and "
        "`worker_<impl>_us` (each task function alone on a worker, no scheduler: `entry` is the entry point alone "
        "on handles made beforehand). " + _b4_text(meta),
        "",
        "**Targets.** \"met\": yes, the target is met; floor, it is missed, but Dask's own floor for that graph, "
        "measured in this run on the same workers, rules it out and the row is within "
        f"{FLOOR_SLACK}× of that floor (weak rows: the best efficiency is direct / (direct + Dask alone at k GPUs), "
        "the row's time against direct + Dask alone; strong rows: direct / k + Dask alone, and Dask + CuPy's own "
        "speedup on the same graph; B0: plain Dask's own fixed cost and cost per task, and Dask + CuPy doing the same saxpy per block); **no**, missed beyond that. "
        "The last column gives the figures.", "", *target_lines(rows), "",
    ]
    if plot:
        lines += [f"![speedup against GPU count]({Path(plot).name})", ""]
    if meta.get("unavailable"):
        lines += ["**Not available in this run** (their rows say so):", ""]
        lines += [f"- `{name}`: {why}" for name, why in meta["unavailable"].items()] + [""]
    skipped = [r for r in rows if r.get("skipped")]
    if skipped:
        lines += ["**Not measured** (failed, or out of the run's time budget):", ""]
        lines += [f"- {r['benchmark']}, {r['impl']}: {r['skipped']}" for r in skipped] + [""]
    lines += ["**Topology** (`nvidia-smi topo -m`):", "", "```", topo, "```", ""]
    aff = meta.get("affinity")
    if aff:
        lines += ["**dask-cuda's CPU pins** (NVML's CPUs near each GPU against those this machine lets the process use):", ""]
        lines += [f"- GPU {g}: {why}" for g, why in aff.items()] + [""]
    lines += ["**All rows.**", "", *table_lines(rows, markdown=True)]
    Path(path).write_text("\n".join(lines) + "\n")


def _b4_text(meta: dict[str, Any]) -> str:
    sizes = meta.get("sizes", {})
    side, iters = sizes.get("frame"), sizes.get("max_iter")
    if not side:
        return ""
    chosen = ("the iterations doubled until one frame takes at least "
              f"{'a quarter second on one GPU' if meta.get('gpu') else '20 ms on one worker'}" if sizes.get("calibrate_b4")
              else "the iterations as given")
    return (f"B4: every GPU renders one {side}² frame of `futhark/mandelbrot.fut` at {iters} iterations ({chosen}), "
            "the view [-2.25, 0.75] × [-1.5, 1.5] shifted by rank / 100 of a pixel: another image, the same work "
            "(at 2048² and 2000 iterations the four frames' iteration totals differ by under 0.01%); each frame "
            "stays on its GPU.")


def speedups(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Series to plot: label -> [(GPU count, speedup)] (weak rows: scaled speedup, k × efficiency)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("speedup") is None or r["impl"].startswith(("direct", "Dask alone")):
            continue
        if not r["benchmark"].startswith(("B1", "B2", "B3", "B4")):
            continue
        label = f"{r['benchmark']}: {r['impl'].rsplit(',', 1)[0]}"
        series.setdefault(label, []).append((int(r["workers"]), float(r["speedup"])))
    return {k: sorted(v) for k, v in series.items()}


def write_plot(path: str, rows: list[dict[str, Any]]) -> str | None:
    """The PNG; None, or why none was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: matplotlib is not installed ({e})"
    series = speedups(rows)
    if not series:
        return "no plot: no row with a speedup"
    top = max(k for pts in series.values() for k, _ in pts)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.plot([1, top], [1, top], "k--", label="ideal")
    for label, pts in series.items():
        style = "-o" if "pybridge" in label else ":x"
        ax.plot([k for k, _ in pts], [v for _, v in pts], style, label=label)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("speedup over one GPU without Dask (weak: scaled)")
    ax.set_xticks(range(1, top + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def write_outputs(rows: list[dict[str, Any]], meta: dict[str, Any], section: str | None, plot: str | None,
                  topology: str | None) -> list[str]:
    """The section (and its rows as JSON beside it) and the plot, as asked; the problems met."""
    problems = []
    if plot:
        problem = write_plot(plot, rows)
        if problem:
            problems.append(problem)
            plot = None
    if section:
        if topology and Path(topology).exists():
            meta = {**meta, "topology": Path(topology).read_text()}
        Path(section).with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n")
        write_section(section, rows, meta, plot)
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pybridge.bench.scaling_report", description=__doc__.splitlines()[0])
    p.add_argument("rows", help="the JSON that --section wrote beside the section")
    p.add_argument("--section", metavar="FILE")
    p.add_argument("--plot", metavar="FILE")
    a = p.parse_args(argv)
    rows, meta = read_rows(a.rows)
    for problem in write_outputs(rows, meta, a.section, a.plot, None):
        print(problem)
    return 0


def read_rows(path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and metadata of a ``--section`` JSON, or of a ``--rows-out`` JSON-lines file (a
    row measured again later, judged, replaces its first line; a run cut short has no totals)."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not (isinstance(data, dict) and "rows" in data):
        meta: dict[str, Any] = {}
        rows: dict[Any, dict[str, Any]] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:  # the last line of a run killed while writing it
                continue
            if "meta" in item and len(item) == 1:
                meta.update(item["meta"])
            else:
                rows[item.pop("_row", len(rows))] = item
        return list(rows.values()), meta
    return data["rows"], data["meta"]


if __name__ == "__main__":
    raise SystemExit(main())
