"""Output of ``pybridge bench``: a table on stdout, ``--json``, ``--png`` and ``--markdown``.

``--markdown BENCHMARKS.md`` (re)writes the file from the rows: every target (call and launch
overhead, exchange, kernels, Dask, real programs) with the measured figure and, where one is
missed, by how much; then every table. A hand-written notes section (between the ``notes`` markers) survives regeneration: that is where the "why" of a
missed target lives.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import exchange as ex
from . import overhead as ov
from .common import show

NOTES_START = "<!-- notes:start (kept when this file is regenerated) -->"
NOTES_END = "<!-- notes:end -->"


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:.1f}"
    return str(v)


def table_lines(rows: list[dict[str, Any]], markdown: bool = False) -> list[str]:
    """Rows grouped by benchmark, one table each (markdown or plain columns)."""
    out: list[str] = []
    extra_keys = sorted({k for r in rows for k in r} - {"benchmark", "impl", "size", "median_us", "min_us", "iqr_us",
                                                         "samples", "note", "skipped"})
    by_bench: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_bench.setdefault(r["benchmark"], []).append(r)
    for bench, rs in by_bench.items():
        keys = [k for k in extra_keys if any(k in r for r in rs)]
        head = ["impl", "size", "median µs", "min µs", "IQR µs", *keys, "note"]
        body = [[r["impl"], _fmt(r.get("size")), _fmt(r.get("median_us")), _fmt(r.get("min_us")),
                 _fmt(r.get("iqr_us")), *[_fmt(r.get(k)) for k in keys],
                 (f"skipped: {r['skipped']}" if r.get("skipped") else r.get("note", "")) or ""] for r in rs]
        if markdown:
            out += [f"### {bench}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in b) + " |" for b in body]
        else:
            widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
            out += [f"== {bench}", "  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  note"]
            out += ["  ".join(str(c).ljust(w) for c, w in zip(b, widths)) + "  " + str(b[-1]) for b in body]
        out.append("")
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    show("\n".join(table_lines(rows)))


def write_json(path: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n")


def write_png(path: str, rows: list[dict[str, Any]]) -> str | None:
    """A bar chart per benchmark (fusion as curves); None, or why no figure was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no PNG: matplotlib is not installed ({e})"
    timed = [r for r in rows if r.get("median_us") is not None]
    benches = list(dict.fromkeys(r["benchmark"] for r in timed))
    if not benches:
        return "no PNG: no timed rows"
    height = sum(1.2 + 0.3 * len({r["impl"] for r in timed if r["benchmark"] == b}) for b in benches)
    fig, axes = plt.subplots(len(benches), 1, figsize=(9, height), squeeze=False)
    for ax, b in zip(axes[:, 0], benches):
        rs = [r for r in timed if r["benchmark"] == b]
        if b == "fusion":
            for (impl, size) in dict.fromkeys((r["impl"], r["size"]) for r in rs):
                pts = [(r["ops"], r["median_us"]) for r in rs if r["impl"] == impl and r["size"] == size]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{impl} n={size}")
            ax.set(xlabel="ops in chain (N)", ylabel="µs per call", yscale="log", title=b)
            ax.legend(fontsize=6)
        else:
            labels = [f"{r['impl']}" + (f" n={r['size']}" if r.get("size") else "") for r in rs]
            ax.barh(range(len(rs)), [r["median_us"] for r in rs])
            ax.set_yticks(range(len(rs)), labels, fontsize=7)
            ax.invert_yaxis()
            ax.set(xlabel="median µs per call (log)", xscale="log", title=b)
            ax.set_xlim(left=min(0.5, min(r["median_us"] for r in rs) / 2))  # bar lengths from a fixed base
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


# ------------------------------------------------------------------ targets


@dataclass(frozen=True)
class Target:
    area: str  # what the target is about: the row's group in the table
    text: str
    check: Callable[[list[dict[str, Any]]], tuple[str, bool | None, str]]  # (figure, met, by how much)


def _find(rows: list[dict[str, Any]], bench_prefix: str, impl: str) -> float | None:
    for r in rows:
        if r["benchmark"].startswith(bench_prefix) and r["impl"] == impl and r.get("median_us") is not None:
            return float(r["median_us"])
    return None


def _ratio_target(bench: str, impl: str, ref_bench: str, ref_impl: str, factor: float,
                  absolute: float | None = None) -> Callable[[list[dict[str, Any]]], tuple[str, bool | None, str]]:
    def check(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
        got, ref = _find(rows, bench, impl), _find(rows, ref_bench, ref_impl)
        if got is None:
            return "not measured here", None, ""
        bound = ref * factor if ref is not None else None
        if absolute is not None:
            bound = absolute if bound is None else min(bound, absolute)
        if bound is None:
            return f"{got:.2f} µs (no reference row)", None, ""
        fig = f"{got:.2f} µs" + (f" vs {ref_impl} {ref:.2f} µs" if ref is not None else "")
        return fig, got <= bound, "" if got <= bound else f"+{got - bound:.2f} µs ({got / bound:.2f}× the bound)"

    return check


def _added_target(bench: str, impl: str, ref_impl: str, added: float) -> Callable[..., tuple[str, bool | None, str]]:
    def check(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
        got, ref = _find(rows, bench, impl), _find(rows, bench, ref_impl)
        if got is None or ref is None:
            return "not measured here", None, ""
        return (f"{got:.2f} µs vs C {ref:.2f} µs: +{got - ref:.2f} µs", got - ref <= added,
                "" if got - ref <= added else f"{got - ref - added:.2f} µs over")

    return check


def _exchange_target(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
    sides = [(r["impl"], r["median_us"]) for r in rows
             if r["benchmark"].startswith("exchange: ") and r["impl"].startswith(ex.PYBRIDGE_SIDE)
             and r.get("median_us") is not None]
    if not sides:
        return "not measured here", None, ""
    worst = max(sides, key=lambda s: s[1])
    over = [f"{i.split(': ', 1)[1]} {v:.2f} µs" for i, v in sides if v > 2.0]
    return f"worst {worst[1]:.2f} µs ({worst[0].split(': ', 1)[1]})", not over, "; ".join(over)


def _dask_target(against: str) -> Callable[..., tuple[str, bool | None, str]]:
    """``pybridge bench scaling --gpus 1`` rows (strong scaling, 1 GPU): pybridge's Dask time against
    the direct call (speedup ≥ 0.8) or against Dask + CuPy on the same graph (faster)."""

    def check(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
        figs, missed, met = [], [], True
        for kind in ("saxpy", "matmul"):
            mine = [r for r in rows if r["benchmark"] == f"{kind} strong" and r["impl"] == "dask 1 GPU"]
            if not mine:
                continue
            if against == "direct":
                v = float(mine[0]["speedup_vs_direct"])
                # Dask's own floor (the same graph passing its blocks through): what any task pays
                floor = [r for r in rows if r["benchmark"] == f"{kind} strong" and r["impl"].startswith("Dask alone")
                         and r.get("speedup_vs_direct") is not None]
                figs.append(f"{kind} {v:.2f} of direct" + (f" (Dask alone, no work: {float(floor[0]['speedup_vs_direct']):.2f})"
                                                             if floor else ""))
                if v < 0.8:
                    met = False
                    missed.append(f"{kind}: {v:.2f} (needs 0.8)")
            else:
                peer = [r for r in rows if r["benchmark"] == f"{kind} strong" and r["impl"].startswith("Dask + CuPy")]
                if not peer:
                    continue
                a, b = float(mine[0]["median_us"]), float(peer[0]["median_us"])
                figs.append(f"{kind} {a / 1e3:.1f} vs {b / 1e3:.1f} ms")
                if a >= b:
                    met = False
                    missed.append(f"{kind}: {a / b:.2f}× Dask + CuPy")
        if not figs:
            return "not measured here (pybridge bench scaling --gpus 1)", None, ""
        return "; ".join(figs), met, "; ".join(missed)

    return check


def _external(bench: str, text: str) -> Callable[..., tuple[str, bool | None, str]]:
    """Targets judged by the kernel benchmarks' own rows: those carrying ``target_met`` (pybridge's
    kernels, % of the same run's reference); one figure per op and size, the best of pybridge's paths."""

    def check(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
        mine = [r for r in rows if r["benchmark"].startswith(bench) and "target_met" in r
                and r.get("pct_of_reference") is not None]
        if not mine:
            return f"no `{bench}` rows in this run", None, ""
        best: dict[tuple[str, Any], dict[str, Any]] = {}
        for r in mine:
            key = (str(r.get("op", r["benchmark"])), r.get("size"))
            if key not in best or r["pct_of_reference"] > best[key]["pct_of_reference"]:
                best[key] = r
        figs = "; ".join(f"{op} n={size}: {r['pct_of_reference']:.1f}%" for (op, size), r in best.items())
        missed = "; ".join(f"{op} n={size}: {r['pct_of_reference']:.1f}%"
                           for (op, size), r in best.items() if not r["target_met"])
        return figs or text, all(r["target_met"] for r in best.values()), missed

    return check


def _summary_target(backend: str, impl: str) -> Callable[..., tuple[str, bool | None, str]]:
    """Targets judged by ``pybridge bench programs``' summary rows (value, target, met)."""

    def check(rows: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
        for r in rows:
            if r["benchmark"] == f"programs summary ({backend})" and r["impl"] == impl and r.get("value") is not None:
                v, t = float(r["value"]), float(r["target"])
                unit = " µs" if "µs" in impl else "×"
                met = v <= t
                return (f"{v:.3f}{unit} over {r['size']} (program, dataset) pairs", met,
                        "" if met else f"{v - t:+.3f}{unit}")
        return f"no `pybridge bench programs --backend {backend}` rows in this run", None, ""

    return check


TARGETS: list[Target] = [
    Target("Futhark calls", "Futhark scalar entry point ≤ 0.8 µs and ≤ half of futhark-ffi (default mode)",
           _ratio_target("futhark-call (", ov.FUT_DEFAULT, "futhark-call (", ov.FUT_FFI, 0.5, absolute=0.8)),
    Target("Futhark calls", "Futhark array entry point on resident handles ≤ 1.5× the bare cffi call",
           _ratio_target("futhark-array-call (", "pybridge lib.saxpy(a, hx, hy).free()", "futhark-array-call (",
                         "bare cffi entry + free", 1.5)),
    Target("Futhark calls", "Futhark entry point through pybridge vs the same call from C: ≤ 2 µs added (chain30)",
           _added_target("futhark-chain30 (", "pybridge chain30(h).free(); sync()", ov.FUT_C, 2.0)),
    Target("kernel launches", "Checked kernel launch, PyCUDA path: cuda.launch(s, cfg, k, ...) ≤ CuPy RawKernel",
           _ratio_target("cuda-launch", ov.K_LAUNCH, "cuda-launch", ov.CUPY_RAW, 1.0)),
    Target("kernel launches", "Checked kernel launch, PyCUDA path: k(..., grid=, block=) ≤ CuPy RawKernel",
           _ratio_target("cuda-launch", ov.K_CHECKED, "cuda-launch", ov.CUPY_RAW, 1.0)),
    Target("kernel launches", "Checked kernel launch, cffi host-launcher path ≤ CuPy RawKernel",
           _ratio_target("cuda-launch", ov.L_CHECKED, "cuda-launch", ov.CUPY_RAW, 1.0)),
    Target("kernel launches", "Prepared (unchecked per call) kernel launch ≤ 1.2× the C loop of cuLaunchKernel",
           _ratio_target("cuda-launch", ov.K_PREPARED, "cuda-launch", ov.C_LAUNCH, 1.2)),
    Target("kernel launches", "Prepared host-launcher call ≤ 1.2× the C loop of launch_saxpy",
           _ratio_target("cuda-launch", ov.L_PREPARED, "cuda-launch", ov.C_LAUNCHER, 1.2)),
    Target("exchange", "Exchange with CuPy / PyTorch / numba, both directions, no copy: ≤ 2 µs on pybridge's side",
           _exchange_target),
    Target("kernels", "saxpy, sum, scan at 2^24–2^28: ≥ 90% of the copy bandwidth of the same run",
           _external("bandwidth", "see the bandwidth table")),
    Target("kernels", "matmul f32 (no TF32) at 2048–8192: ≥ 75% of cuBLAS SGEMM of the same run",
           _external("matmul", "see the matmul table")),
    Target("exchange", "Exchange, pybridge's side, both directions: ≤ 2 µs, no host-blocking sync (tests/gpu/test_exchange_order.py)",
           _exchange_target),
    Target("cuda calls", "cuda scalar entry point (with the sync it needs) ≤ 1.2× the bare cffi call + sync",
           _ratio_target("futhark-call (cuda)", ov.FUT_DEFAULT, "futhark-call (cuda)", ov.FUT_CFFI_API, 1.2)),
    Target("cuda calls", "cuda array entry point on resident handles ≤ 1.5× the bare cffi entry + free",
           _ratio_target("futhark-array-call (cuda)", "pybridge lib.saxpy(a, hx, hy).free()", "futhark-array-call (cuda)",
                         "bare cffi entry + free", 1.5)),
    Target("cuda calls", "30-op chain, pybridge vs the same library from C (cuda): ≤ +1 µs",
           _added_target("futhark-chain30 (cuda)", "pybridge chain30(h).free(); sync()", ov.FUT_C, 1.0)),
    Target("Dask", "pybridge.dask on one GPU, 4 chunks: ≥ 0.8 of one direct call (strong scaling)", _dask_target("direct")),
    Target("Dask", "pybridge.dask on one GPU: faster than Dask + CuPy on the same graph", _dask_target("peer")),
    Target("real programs", "Real programs, c: added per call over Futhark's own executable ≤ 2 µs (median, calls < 1 ms)",
           _summary_target("c", "added µs, calls < 1 ms: median")),
    Target("real programs", "Real programs, c: added per call ≤ 4 µs for the worst entry shape (calls < 1 ms)",
           _summary_target("c", "added µs, calls < 1 ms: worst")),
    Target("real programs", "Real programs, c: calls of 1 ms or more ≤ 1.02× the executable (worst)",
           _summary_target("c", "ratio, calls >= 1 ms: worst")),
    Target("real programs", "Real programs, cuda: pybridge / executable ≤ 1.02 (median over all pairs)",
           _summary_target("cuda", "ratio, all pairs: median")),
    Target("real programs", "Real programs, cuda: pybridge / executable ≤ 1.2 (worst pair)",
           _summary_target("cuda", "ratio, all pairs: worst")),
]


# ------------------------------------------------------------------ the call path table

# (path, (benchmark prefix, impl) of pybridge's figure, (benchmark prefix, impl) of the bare call of
# the same run or None, target: ("ratio", bound) to the bare call or ("µs", bound) on pybridge's side)
CALL_PATH_CALLS = [
    ("cuda scalar entry, with the sync it needs", ("futhark-call (cuda)", ov.FUT_DEFAULT),
     ("futhark-call (cuda)", ov.FUT_CFFI_API), ("ratio", 1.2)),
    ("cuda array entry on resident handles, result freed", ("futhark-array-call (cuda)", "pybridge lib.saxpy(a, hx, hy).free()"),
     ("futhark-array-call (cuda)", "bare cffi entry + free"), ("ratio", 1.2)),
]
# pybridge's side of an exchange (exchange.py's rows) -> the rows of the same run that time the
# driver's and the other library's part of it (what pybridge cannot remove).
EXCHANGE_REFERENCES = {
    "h.__dlpack__() (capsule dropped)": (ex.DRIVER_PAIR,),
    "from_cuda(cupy).free()": (ex.NEW_RAW_FREE, ex.CUPY_CAI, ex.DRIVER_PAIR),
    "from_cuda(torch).free()": (ex.NEW_RAW_FREE, ex.TORCH_READS, ex.TORCH_STREAM, ex.DRIVER_PAIR),
    "from_cuda(numba).free()": (ex.NEW_RAW_FREE, ex.NUMBA_CAI),
    "cuda.as_device_array(cupy)": (ex.CUPY_CAI,),
    "cuda.as_device_array(torch)": (ex.TORCH_READS,),
}
EXCHANGE_TARGET_US = 2.0
# (path, backend, summary impl of `pybridge bench programs`, its reference impl or None)
CALL_PATH_PROGRAMS = [
    ("real programs on cuda: pybridge / executable, median", "cuda", "ratio, all pairs: median",
     "bare cffi / executable, all pairs: median"),
    ("real programs on cuda: pybridge / executable, worst", "cuda", "ratio, all pairs: worst", None),
    ("real programs on c: pybridge − bare µs, calls < 1 ms, median", "c", "pybridge - bare cffi µs, calls < 1 ms: median", None),
    ("real programs on c: pybridge − bare µs, calls < 1 ms, worst", "c", "pybridge - bare cffi µs, calls < 1 ms: worst", None),
]


def _summary(rows: list[dict[str, Any]], backend: str, impl: str) -> dict[str, Any] | None:
    for r in rows:
        if r["benchmark"].endswith(f"summary ({backend})") and r["impl"] == impl and r.get("value") is not None:
            return r
    return None


def call_path_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The call path's figures, each beside the bare call (or the driver's and other library's
    part) measured in the same run, and its target: a Markdown table."""
    out = ["| path | pybridge | bare / references, same run | ratio or pybridge's own part | target | met |",
           "|---|---|---|---|---|---|"]
    for path, mine, bare, (kind, bound) in CALL_PATH_CALLS:
        got, ref = _find(rows, *mine), (_find(rows, *bare) if bare else None)
        if got is None:
            out.append(f"| {path} | not measured | | | ≤ {bound}{'x' if kind == 'ratio' else ' µs'} | – |")
            continue
        ratio = got / ref if ref else None
        met = (ratio <= bound) if ratio is not None else None
        out.append(f"| {path} | {got:.2f} µs | {'–' if ref is None else f'{ref:.2f} µs'} | "
                   f"{'–' if ratio is None else f'{ratio:.2f}x'} | ≤ {bound}x | {_mark(met)} |")
    sides = [(r["impl"].split(": ", 1)[1], float(r["median_us"]), r["benchmark"]) for r in rows
             if r["benchmark"].startswith("exchange: ") and r["impl"].startswith(ex.PYBRIDGE_SIDE)
             and r.get("median_us") is not None]
    if not sides:
        out.append(f"| exchange (pybridge's side) | not measured | | | ≤ {EXCHANGE_TARGET_US} µs | – |")
    for what, got, bench in sorted(sides, key=lambda s: -s[1]):
        refs = [(name, v) for name in EXCHANGE_REFERENCES.get(what, ()) if (v := _find(rows, bench, name)) is not None]
        own = got - sum(v for _, v in refs)
        ref_text = "; ".join(f"{name.removeprefix('reference: ')} {v:.2f} µs" for name, v in refs) or "–"
        if got <= EXCHANGE_TARGET_US:
            verdict = "yes"
        elif refs and own <= EXCHANGE_TARGET_US:
            verdict = "pybridge's own part only (the rest: driver, other library)"
        else:
            verdict = "**no**"
        own_text = "–" if not refs else f"{own:.2f} µs"
        if refs and own < 0:  # the references go through Python and cffi; pybridge makes the same calls from C
            own_text += " (below 0: the references, timed from Python, cost more than the same calls made from C)"
        out.append(f"| exchange `{what}` ({bench.removeprefix('exchange: ')}) | {got:.2f} µs | {ref_text} | "
                   f"{own_text} | ≤ {EXCHANGE_TARGET_US} µs | {verdict} |")
    for path, backend, impl, ref_impl in CALL_PATH_PROGRAMS:
        r = _summary(rows, backend, impl)
        beside = _summary(rows, backend, ref_impl) if ref_impl else None
        if r is None:
            out.append(f"| {path} | not measured | | | | – |")
            continue
        target = r.get("target")
        met = r.get("met") if r.get("met") is not None else (r["value"] <= target if target is not None else None)
        beside_text = "–" if beside is None else f"{ref_impl}: {beside['value']:.3f}"
        mark = _mark(met)
        if r.get("note"):  # the pair the worst is of, with the library's own call beside it
            beside_text = r["note"] if beside is None else f"{beside_text}; {r['note']}"
        floor, over = r.get("floor_ratio"), r.get("over_floor_ratio")
        if met is False and target is not None and floor is not None and over is not None \
                and floor > target and over <= target:
            mark = "floor (the library's own call misses it; pybridge within the target of it)"
        out.append(f"| {path} | {r['value']:.3f} | {beside_text} | | "
                   f"{'–' if target is None else f'≤ {target}'} | {mark} |")
    return out


def _mark(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[met]


def target_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| area | target | figure | met | missed by |", "|---|---|---|---|---|"]
    for t in TARGETS:
        fig, met, miss = t.check(rows)
        mark = {True: "yes", False: "**no**", None: "–"}[met]
        out.append(f"| {t.area} | {t.text} | {fig} | {mark} | {miss} |")
    return out


def write_markdown(path: str, rows: list[dict[str, Any]], meta: dict[str, Any], png: str | None) -> None:
    p = Path(path)
    notes = f"{NOTES_START}\n_(hand-written notes: why a target is missed; kept on regeneration)_\n{NOTES_END}"
    if p.exists():
        m = re.search(re.escape(NOTES_START) + r".*?" + re.escape(NOTES_END), p.read_text(), re.S)
        if m:
            notes = m.group(0)
    lines = [
        "# Benchmarks",
        "",
        "Generated by `" + meta["command"] + "`; do not edit outside the notes section (regenerate instead).",
        "",
        f"Machine: {meta['machine']}; GPU: {meta['gpu']}; Python {meta['python']}; {meta['date']}.",
        "Every figure: median over batches after warm-up (min and interquartile range beside it), with the",
        "synchronisation each path needs inside the timed region; device times from CUDA events where shown.",
        "",
        "## Targets",
        "",
        *target_lines(rows),
        "",
        "## Notes",
        "",
        notes,
        "",
    ]
    if png:
        lines += ["## Figure", "", f"![benchmarks]({Path(png).name})", ""]
    lines += ["## Tables", "", *table_lines(rows, markdown=True)]
    p.write_text("\n".join(lines) + "\n")


def read_json(paths: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows (and the first file's metadata) of earlier ``--json`` outputs, in order: for
    ``pybridge bench report``, which redraws or merges runs without running anything."""
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path}: not a `pybridge bench --json` file (no rows)")
        for i, r in enumerate(data["rows"]):
            if not isinstance(r, dict) or not isinstance(r.get("benchmark"), str) or not isinstance(r.get("impl"), str):
                raise ValueError(f"{path}: row {i} is not a benchmark row (a dict with 'benchmark' and 'impl'): {r!r}")
        rows += data["rows"]
        meta = meta or dict(data.get("meta") or {})
    return rows, meta


def machine_meta(command: str) -> dict[str, Any]:
    import datetime
    import sys

    from .common import gpu_status

    gpu, why = gpu_status()
    name = "none (" + why + ")"
    if gpu:
        try:
            import subprocess

            from ..executables import child_env, find

            smi = find("nvidia-smi")
            name = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20, env=child_env()).stdout.strip() if smi else ""
            name = name or "present"
        except Exception:  # noqa: BLE001
            name = "present"
    return {"command": command, "machine": f"{platform.node()} {platform.machine()}", "gpu": name,
            "python": sys.version.split()[0], "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
