"""The trace: one JSON document per run (DESIGN.md), its summary metrics, and exports.

Records are collected apart from compute (the engine yields specviz.records.Step records, which
TraceBuilder stores in their JSON form); everything here is a pure function of those records,
guarding division by zero.
"""

from __future__ import annotations

import json
from pathlib import Path

from specviz.analysis import acceptance
from specviz.records import Step

# Version 2 (issue 17, the request queue): sequences carry each request's life (arrival, lane,
# join/leave step and time, TTFT, time per output token, tokens/s), steps carry t_prefill (the
# prefill of requests joining at that step), joined, left and queue_length, and the summary the
# server metrics (throughput, latency percentiles, goodput). With a queue (more requests than
# lanes, or arrivals over time) a step's "rows" lists only the rows that stepped. Every version-1
# field keeps its meaning, and version-1 traces still load.
# Version 3 (issue 16, token trees): in a run with --tree-width > 1 each row-step carries "tree":
# per draft node its "token", "parent" (row-local node index, -1 = the row's last token), "depth",
# "prob" (the draft's probability of the node given its parent) and "rank" (sibling rank, 0 = the
# draft's top guess), and "path": the accepted nodes, root to leaf; "drafted" counts the nodes and
# "draft_tokens" lists them in node order. The config has tree_width and tree_nodes. Chain runs
# read as in version 2. A tree run's steps also carry "tree_width" and "tree_nodes": the (W, N) that
# step drafted with (k = 0: 1 and 0), which --policy tree picks per step; there the config's
# draft_length, tree_width and tree_nodes are its bounds. (Added fields: still version 3.)
# A run with synthetic acceptance (RunConfig.synthetic_acceptance) has "synthetic_acceptance": alpha in its
# config: its drafted tokens were accepted by a seeded Bernoulli(alpha) draw, not by the target, so its
# text is not the target's (synthetic_label says so on every page and chart). (Added field: still version 3.)
# Version 4: the config's draft-length policy is "policy" (before: "controller"); load_json renames it in
# older traces, which read as before otherwise.
# Version 5: a request's lane (which of the batch's B concurrent rows it held, per sequence and per row of
# a step) is "lane" (before: "slot", a word the cache's token positions keep); load_json renames it in older
# traces, which read as before otherwise.
TRACE_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
PHASES = ("draft", "verify", "accept", "bookkeeping")


def synthetic_label(config: dict) -> str | None:
    """The label of a run made with synthetic acceptance (a trace's config), None for the exact rule:
    the same words on every page, chart and CLI summary that shows such a run."""
    alpha = (config or {}).get("synthetic_acceptance")
    if alpha is None:
        return None
    return f"synthetic acceptance (alpha = {alpha:g}): not the target's text"


def _div(a: float, b: float) -> float | None:
    return a / b if b else None


def per_position_acceptance(steps: list[dict]) -> list[float]:
    """Acceptance per position (acceptance.acceptance_per_position), each position j over the row-steps
    that drafted >= j tokens: the share of them whose first j drafts were all accepted."""
    kmax = max((r["drafted"] for s in steps for r in s["rows"] if r["active"]), default=0)
    rows = [r for s in steps for r in s["rows"] if r["active"]]
    accepted_at = [sum(r["drafted"] >= j and r["accepted"] >= j for r in rows) for j in range(1, kmax + 1)]
    reached = [sum(r["drafted"] >= j for r in rows) for j in range(1, kmax + 1)]
    return acceptance.acceptance_per_position(accepted_at, reached)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def request_summary(steps: list[dict], sequences: list[dict], wall_s: float) -> dict:
    """Server metrics over the run's requests (seconds, tokens): throughput in finished requests/s,
    goodput in output tokens/s (SmartSpec, arXiv 2406.14066: verified tokens per second, against
    processed_tokens_per_s, every verify slot the target ran), p50/p95 latency (arrival to last
    token), TTFT (arrival to the end of the request's first step) and time per output token."""
    done = [s for s in sequences if s.get("leave_s") is not None]
    lat, ttft, tpot = ([s.get(k) for s in done] for k in ("latency_s", "ttft_s", "tpot_s"))
    queue = [s.get("queue_length", 0) for s in steps]
    active = [s.get("batch_size", sum(r["active"] for r in s["rows"])) for s in steps]
    out = {
        "requests": len(sequences),
        "requests_finished": len(done),
        "throughput_requests_per_s": _div(len(done), wall_s),
        "goodput_tokens_per_s": _div(sum(len(s["output_token_ids"]) for s in sequences), wall_s),
        "processed_tokens_per_s": _div(sum(s.get("verify_width", s["k"] + 1) * b for s, b in zip(steps, active)), wall_s),
        "join_prefill_s": sum(s.get("t_prefill", 0.0) for s in steps),
        "mean_queue_length": _div(sum(queue), len(queue)),
        "max_queue_length": max(queue, default=0),
        "mean_active_rows": _div(sum(active), len(steps)),
    }
    for name, values in (("latency", lat), ("ttft", ttft), ("tpot", tpot)):
        out[f"{name}_p50_s"], out[f"{name}_p95_s"] = percentile(values, 50), percentile(values, 95)
    return out


def summarize(steps: list[dict], sequences: list[dict], wall_s: float, prefill_s: float) -> dict:
    row_steps = [(s["k"], r) for s in steps for r in s["rows"] if r["active"]]
    drafted = sum(r["drafted"] for _, r in row_steps)
    accepted = sum(r["accepted"] for _, r in row_steps)
    output_per_step = accepted + len(row_steps)  # untruncated: the rule's output
    slots = sum(k + 1 for k, _ in row_steps)
    tokens = sum(len(s["output_token_ids"]) for s in sequences)
    phase = {p: sum(s[f"t_{p}"] for s in steps) for p in PHASES}
    join_prefill = sum(s.get("t_prefill", 0.0) for s in steps)
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
        "acceptance_rate": acceptance.acceptance_rate(accepted, drafted),
        "mean_acceptance_length": acceptance.mean_acceptance_length(accepted, len(row_steps)),
        "system_efficiency": _div(output_per_step, slots),
        "wasted_slots": slots - output_per_step,
        "per_position_acceptance": per_position_acceptance(steps),
        **{f"{p}_s": v for p, v in phase.items()},
        # time outside model forwards and sampling: bookkeeping + Python between steps
        "overhead_frac": _div(decode_s - join_prefill - phase["draft"] - phase["verify"] - phase["accept"], wall_s),
        "compactions": sum(bool(s.get("compacted")) for s in steps),
        "max_cache_slots": max((s.get("cache_slots", 0) for s in steps), default=0),
        **request_summary(steps, sequences, wall_s),
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
        "acceptance_rate": acceptance.acceptance_rate(row.accepted, row.drafted),
        **request_record(row),
    }


def request_record(row) -> dict:
    """A request's life (seconds after the run started; steps): where and when it ran, and its metrics."""
    n = len(row.output)
    arrival, join, first, leave = (getattr(row, k, None) for k in ("arrival_s", "join_s", "first_token_s", "leave_s"))
    arrival = arrival or 0.0
    return {
        "arrival_s": arrival,
        "lane": getattr(row, "lane", None),
        "join_step": getattr(row, "join_step", None),
        "join_s": join,
        "first_token_s": first,
        "leave_step": getattr(row, "leave_step", None),
        "leave_s": leave,
        "queue_wait_s": None if join is None else join - arrival,
        "ttft_s": None if first is None else first - arrival,
        "latency_s": None if leave is None else leave - arrival,
        "tpot_s": _div(leave - first, n - 1) if leave is not None and first is not None and n > 1 else None,
        "tokens_per_s": _div(n, leave - join) if leave is not None and join is not None else None,
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


class TraceBuilder:
    """One run's trace as it is made: the engine's steps go in (:meth:`add`, specviz.records.Step),
    the trace document comes out, while the run goes (:meth:`partial`) and at its end (:meth:`final`).
    The CLI, the decode worker, the measurements and the Live page all build traces here."""

    def __init__(self, config: dict, hardware: dict | None = None):
        self.config, self.hardware = config, hardware or {}
        self.steps: list[dict] = []  # each step's JSON form, made once as it arrives

    def add(self, step: Step) -> dict:
        if not isinstance(step, Step):
            raise TypeError(f"a trace step is a specviz.records.Step, not {type(step).__name__}")
        d = step.to_json()
        self.steps.append(d)
        return d

    def final(self, sequences: list[dict], telemetry: list[dict], wall_s: float, prefill_s: float) -> dict:
        return build_trace(self.config, self.hardware, sequences, list(self.steps), list(telemetry), wall_s, prefill_s)

    def partial(self, sequences: list[dict], telemetry: list[dict], wall_s: float, prefill_s: float) -> dict:
        """The trace so far, marked "partial" (its rows are still being generated)."""
        return {**self.final(sequences, telemetry, wall_s, prefill_s), "partial": True}


# ---- I/O -------------------------------------------------------------------------------------

def save_json(trace: dict, path) -> None:
    """Temp file + rename (specviz.common.write_atomic): a crash or Ctrl-C never leaves half a trace."""
    from specviz.common import write_atomic

    write_atomic(path, json.dumps(trace))


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
    if trace["version"] not in READABLE_VERSIONS:
        raise ValueError(f"unsupported trace version {trace['version']} (this specviz reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))})")
    cfg = trace["config"]
    if isinstance(cfg, dict) and "controller" in cfg and "policy" not in cfg:  # versions 1-3 named it so
        cfg["policy"] = cfg.pop("controller")
    seqs, steps = (x if isinstance(x, list) else [] for x in (trace["sequences"], trace["steps"]))
    rows = [r for s in steps if isinstance(s, dict) and isinstance(s.get("rows"), list) for r in s["rows"]]
    for r in seqs + rows:  # versions 2-4 named a request's lane "slot"
        if isinstance(r, dict) and "slot" in r and "lane" not in r:
            r["lane"] = r.pop("slot")
    return trace


def to_tables(trace: dict) -> dict:
    """Flat pandas tables: sequences, steps, rows (one per step x row), telemetry."""
    import pandas as pd

    seqs = pd.DataFrame([{k: v for k, v in s.items() if not isinstance(v, list)} | {
        "prompt_tokens": len(s["prompt_token_ids"]), "output_tokens": len(s["output_token_ids"])}
        for s in trace["sequences"]])
    steps = pd.DataFrame([{k: v for k, v in s.items() if k != "rows"} for s in trace["steps"]])
    rows = pd.DataFrame([{"step": s["step"], "k": s["k"], **{k: v for k, v in r.items() if not isinstance(v, (list, dict))},
                          "emitted_ids": " ".join(map(str, r["emitted"])),
                          "draft_ids": " ".join(map(str, r.get("draft_tokens", [])))}
                         for s in trace["steps"] for r in s["rows"]])
    tele = pd.DataFrame(trace.get("telemetry") or [])
    return {"sequences": seqs, "steps": steps, "rows": rows, "telemetry": tele}


# What makes a spreadsheet read a cell as a formula (OWASP, CSV injection): a prompt or a model's text
# starting so would run when the CSV is opened, e.g. =HYPERLINK(...) sending the row elsewhere.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """``value`` with a leading ``'`` when it is text a spreadsheet would run; anything else as it is."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def csv_text(df) -> str:
    """The table as CSV text with every text cell and column name through :func:`spreadsheet_safe`
    (numbers stay numbers): the trace's CSV exports (export_tables, the Live page's zip) are written so."""
    import pandas as pd

    df = df.rename(columns=spreadsheet_safe)
    for col in range(df.shape[1]):
        s = df.iloc[:, col]
        if pd.api.types.is_object_dtype(s) or pd.api.types.is_string_dtype(s):
            df.isetitem(col, s.map(spreadsheet_safe))  # by position: two columns may share a name
    # CRLF rows (RFC 4180): the csv writer then quotes a cell holding a lone CR too, which a spreadsheet
    # would otherwise take for a row break, starting a new unquoted cell (that could be a formula)
    return df.to_csv(index=False, lineterminator="\r\n")


def export_tables(trace: dict, out_dir, fmt: str = "csv") -> list[Path]:
    """The trace's tables (:func:`to_tables`), one file each, each written whole (temp file + rename)."""
    from specviz.common import atomic_open, write_atomic

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, df in to_tables(trace).items():
        p = out / f"{name}.{fmt}"
        if fmt == "parquet":
            with atomic_open(p) as f:
                df.to_parquet(f)
        else:
            write_atomic(p, csv_text(df))
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
        t += s.get("t_prefill", 0.0)  # newcomers' prefill comes first (version 2)
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
