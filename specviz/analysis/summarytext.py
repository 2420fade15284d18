"""A finished run's summary as text: what ``specviz run`` prints after the run (specviz.cli)."""

from __future__ import annotations

from specviz.analysis.trace import synthetic_label  # the one wording of a synthetic run, as on the pages


def fmt(v, spec=".3f") -> str:
    """A summary number, or "-" where the run has none."""
    return "-" if v is None else format(v, spec)


def run_summary_lines(trace: dict) -> list[str]:
    """The run's summary as ``specviz run`` prints it: one "name  value" line each, names aligned."""
    s, c = trace["summary"], trace["config"]
    rows = [
        ("target", c.get("target_name", c["target"])), ("draft", c.get("draft_name", "-") if c["mode"] == "speculative" else "-"),
        ("mode", c["mode"] + (f", {synthetic_label(c)}" if synthetic_label(c) else "")), ("batch size", c["batch_size"]), ("draft length", c["draft_length"]),
        ("device / dtype", f"{c['device']} / {c['dtype']}"),
        ("tokens", s["tokens"]), ("wall s", fmt(s["wall_s"])), ("tokens/s", fmt(s["tokens_per_s"], ".1f")),
        ("acceptance rate", fmt(s["acceptance_rate"])), ("mean acceptance length", fmt(s["mean_acceptance_length"])),
        ("system efficiency", fmt(s["system_efficiency"])), ("overhead fraction", fmt(s["overhead_frac"])),
        ("steps", s["steps"]),
    ]
    if (c.get("requests") or c["batch_size"]) > c["batch_size"] or c.get("arrival_rate"):  # a request queue
        rows += [("requests / lanes", f"{s.get('requests')} / {c['batch_size']}" + (" (static batches)" if c.get("static") else "")),
                 ("throughput requests/s", fmt(s.get("throughput_requests_per_s"))),
                 ("latency p50 / p95 s", f"{fmt(s.get('latency_p50_s'))} / {fmt(s.get('latency_p95_s'))}"),
                 ("TTFT p50 / p95 s", f"{fmt(s.get('ttft_p50_s'))} / {fmt(s.get('ttft_p95_s'))}"),
                 ("join prefill s", fmt(s.get("join_prefill_s")))]
    w = max(len(k) for k, _ in rows)
    return [f"{k:<{w}}  {v}" for k, v in rows]
