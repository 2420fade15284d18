"""The trace: one JSON document per run (DESIGN.md), its summary metrics, and exports.

Records are collected apart from compute (the engine yields step dicts); everything here is a
pure function of those records, guarding division by zero.
"""

from __future__ import annotations

import json
from pathlib import Path

TRACE_VERSION = 1
PHASES = ("draft", "verify", "accept", "bookkeeping")


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def per_position_acceptance(steps: list[dict]) -> list[float]:
    """Fraction of row-steps that drafted >= j tokens whose first j drafts were all accepted."""
    kmax = max((r["drafted"] for s in steps for r in s["rows"] if r["active"]), default=0)
    out = []
    for j in range(1, kmax + 1):
        tried = [r for s in steps for r in s["rows"] if r["active"] and r["drafted"] >= j]
        out.append(_div(sum(r["accepted"] >= j for r in tried), len(tried)))
    return out


def summarize(steps: list[dict], sequences: list[dict], wall_s: float, prefill_s: float) -> dict:
    row_steps = [(s["k"], r) for s in steps for r in s["rows"] if r["active"]]
    drafted = sum(r["drafted"] for _, r in row_steps)
    accepted = sum(r["accepted"] for _, r in row_steps)
    output_per_step = sum(r["accepted"] + 1 for _, r in row_steps)  # untruncated: the rule's output
    slots = sum(k + 1 for k, _ in row_steps)
    tokens = sum(len(s["output_token_ids"]) for s in sequences)
    phase = {p: sum(s[f"t_{p}"] for s in steps) for p in PHASES}
    decode_s = wall_s - prefill_s
    return {
        "wall_s": wall_s,
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "steps": len(steps),
        "tokens": tokens,
        "tokens_per_s": _div(tokens, wall_s),
        "decode_tokens_per_s": _div(tokens, decode_s),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": _div(accepted, drafted),
        "mean_acceptance_length": _div(output_per_step, len(row_steps)),
        "system_efficiency": _div(output_per_step, slots),
        "wasted_slots": slots - output_per_step,
        "per_position_acceptance": per_position_acceptance(steps),
        **{f"{p}_s": v for p, v in phase.items()},
        # time outside model forwards and sampling: bookkeeping + Python between steps
        "overhead_frac": _div(decode_s - phase["draft"] - phase["verify"] - phase["accept"], wall_s),
        "compactions": sum(bool(s.get("compacted")) for s in steps),
        "max_cache_slots": max((s.get("cache_slots", 0) for s in steps), default=0),
    }


def sequence_record(row, tokenizer) -> dict:
    return {
        "index": row.index,
        "prompt": row.prompt,
        "prompt_token_ids": row.prompt_ids,
        "output_token_ids": row.output,
        "text": tokenizer.decode(row.output, skip_special_tokens=True) if tokenizer is not None else None,
        "finish_reason": row.finish_reason,
        "drafted": row.drafted,
        "accepted": row.accepted,
        "acceptance_rate": _div(row.accepted, row.drafted),
    }


def build_trace(config: dict, hardware: dict, sequences: list[dict], steps: list[dict],
                telemetry: list[dict], wall_s: float, prefill_s: float) -> dict:
    return {
        "version": TRACE_VERSION,
        "config": config,
        "hardware": hardware,
        "sequences": sequences,
        "steps": steps,
        "telemetry": telemetry,
        "summary": summarize(steps, sequences, wall_s, prefill_s),
    }


# ---- I/O -------------------------------------------------------------------------------------

def save_json(trace: dict, path) -> None:
    Path(path).write_text(json.dumps(trace))


def load_json(path_or_text) -> dict:
    """Load and check a trace; raises ValueError with a clear message if it is not one."""
    if isinstance(path_or_text, (str, Path)) and not str(path_or_text).lstrip().startswith("{"):
        text = Path(path_or_text).read_text()
    else:
        text = path_or_text.decode() if isinstance(path_or_text, bytes) else str(path_or_text)
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a specviz trace: invalid JSON ({e.msg} at line {e.lineno})") from None
    missing = [k for k in ("version", "config", "sequences", "steps", "summary") if not isinstance(trace, dict) or k not in trace]
    if missing:
        raise ValueError(f"not a specviz trace: missing {', '.join(missing)}")
    if trace["version"] != TRACE_VERSION:
        raise ValueError(f"unsupported trace version {trace['version']} (this specviz reads version {TRACE_VERSION})")
    return trace


def to_tables(trace: dict) -> dict:
    """Flat pandas tables: sequences, steps, rows (one per step x row), telemetry."""
    import pandas as pd

    seqs = pd.DataFrame([{k: v for k, v in s.items() if not isinstance(v, list)} | {
        "prompt_tokens": len(s["prompt_token_ids"]), "output_tokens": len(s["output_token_ids"])}
        for s in trace["sequences"]])
    steps = pd.DataFrame([{k: v for k, v in s.items() if k != "rows"} for s in trace["steps"]])
    rows = pd.DataFrame([{"step": s["step"], "k": s["k"], **{k: v for k, v in r.items() if not isinstance(v, list)},
                          "emitted_ids": " ".join(map(str, r["emitted"])),
                          "draft_ids": " ".join(map(str, r.get("draft_tokens", [])))}
                         for s in trace["steps"] for r in s["rows"]])
    tele = pd.DataFrame(trace.get("telemetry") or [])
    return {"sequences": seqs, "steps": steps, "rows": rows, "telemetry": tele}


def export_tables(trace: dict, out_dir, fmt: str = "csv") -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, df in to_tables(trace).items():
        p = out / f"{name}.{fmt}"
        df.to_parquet(p) if fmt == "parquet" else df.to_csv(p, index=False)
        paths.append(p)
    return paths


def to_chrome_trace(trace: dict) -> dict:
    """Chrome trace event format (chrome://tracing, ui.perfetto.dev): one lane per phase."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "specviz engine"}}]
    for tid, p in enumerate(PHASES):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": p}})
    prefill = trace["summary"].get("prefill_s", 0.0)
    if prefill:
        events.append({"name": "prefill", "ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": prefill * 1e6})
    for s in trace["steps"]:
        t = s["t_start"]
        active = [r for r in s["rows"] if r["active"]]
        for tid, p in enumerate(PHASES):
            dur = s[f"t_{p}"]
            events.append({"name": f"{p} k={s['k']}", "ph": "X", "pid": 0, "tid": tid, "ts": t * 1e6, "dur": dur * 1e6,
                           "args": {"step": s["step"], "batch_size": len(active),
                                    "accepted": sum(r["accepted"] for r in active)}})
            t += dur
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def tokens_per_s(traces: list[dict]) -> float:
    """Throughput over several runs (e.g. RunConfig.every_prompt's batches): tokens / wall time."""
    return sum(t["summary"]["tokens"] for t in traces) / sum(t["summary"]["wall_s"] for t in traces)
