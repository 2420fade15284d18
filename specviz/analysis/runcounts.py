"""The numbers the Live page's run charts draw, counted once: specviz.figures.charts draws them and
specviz.figures.chartcaptions states them in a sentence, so a chart and its sentence cannot disagree.

Pure functions of a trace dict (specviz.analysis.trace format), a run in progress or an empty one;
no plotly, no Streamlit. Words as on the pages (SPECDEC.md): a *row-step* is one row in one step;
a step verifies k + 1 *slots* per active row, of which accepted + 1 give output and k - accepted
are *wasted*.
"""

from __future__ import annotations

from specviz.analysis.trace import PHASES


def step_seconds(step: dict) -> float:
    """One step's duration: its draft, verify, accept and bookkeeping phases."""
    return sum(step.get(f"t_{p}", 0.0) for p in PHASES)


def accepted_grid(trace: dict, rows: list[int]) -> list[list[int | None]]:
    """rows x steps: accepted draft tokens of each active row-step, None where the row did not step."""
    pos = {i: n for n, i in enumerate(rows)}
    steps = trace.get("steps", [])
    z: list[list[int | None]] = [[None] * len(steps) for _ in rows]
    for c, s in enumerate(steps):
        for r in s["rows"]:
            if r["active"] and r["index"] in pos:
                z[pos[r["index"]]][c] = r["accepted"]
    return z


def length_series(trace: dict, rows: list[int]) -> dict[int, tuple[list[int], list[int]]]:
    """Per row: (step numbers, its output length after each step it was active in)."""
    length = dict.fromkeys(rows, 0)
    series: dict[int, tuple[list[int], list[int]]] = {i: ([], []) for i in rows}
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"]:
                length[r["index"]] = length.get(r["index"], 0) + len(r["emitted"])
                xs, ys = series.setdefault(r["index"], ([], []))
                xs.append(s["step"])
                ys.append(length[r["index"]])
    return series


def slot_use(trace: dict) -> tuple[list[int], list[int], list[int]]:
    """(step numbers, slots that gave an output token, wasted slots) per step, summed over active rows."""
    steps = trace.get("steps", [])
    used = [sum(r["accepted"] + 1 for r in s["rows"] if r["active"]) for s in steps]
    waste = [sum(s["k"] - r["accepted"] for r in s["rows"] if r["active"]) for s in steps]
    return [s["step"] for s in steps], used, waste


def token_latencies(trace: dict, rows: list[int]) -> dict[int, list[float]]:
    """Per row: each of its output tokens' latency in ms, a step's duration split over the tokens it gave the row."""
    lat: dict[int, list[float]] = {i: [] for i in rows}
    for s in trace.get("steps", []):
        dur = step_seconds(s)
        for r in s["rows"]:
            if r["active"] and r["emitted"]:
                lat.setdefault(r["index"], []).extend([dur / len(r["emitted"]) * 1e3] * len(r["emitted"]))
    return lat


def telemetry_samples(trace: dict) -> list[dict]:
    """The run's telemetry samples that carry a time."""
    return [s for s in (trace.get("telemetry") or []) if "t" in s]

