"""An uploaded trace: read it whole or refuse it in one sentence, so a hostile or broken file never
reaches a chart (the page keeps the trace it had).

Checked: size (before parsing), UTF-8, JSON, the version, and the shape of every field the pages
read (types of the config, sequences, steps and their rows); then the summary is recomputed from
the steps as the last probe, since every page reads it.
"""

from __future__ import annotations

import io
import math
import zipfile

from specviz.analysis.trace import load_json, summarize, to_tables

MAX_TRACE_BYTES = 100 * 2**20  # a 64-row x 4,000-token run is ~60 MB of JSON; past this the browser would stall


def _fail(what: str):
    raise ValueError(f"not a specviz trace: {what}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _ints(v, where: str) -> None:
    if not isinstance(v, list) or not all(_is_int(t) for t in v):
        _fail(f"{where} must be a list of token ids")


def check_shape(trace: dict) -> None:
    """Raise ValueError naming the first field whose type the pages cannot read."""
    if not isinstance(trace.get("config"), dict):
        _fail("config must be an object")
    for key in ("batch_size", "draft_length"):
        if key in trace["config"] and not _is_int(trace["config"][key]):
            _fail(f"config.{key} must be an integer")
    seqs, steps = trace["sequences"], trace["steps"]
    if not isinstance(seqs, list) or not isinstance(steps, list):
        _fail("sequences and steps must be lists")
    for i, s in enumerate(seqs):
        if not isinstance(s, dict) or not _is_int(s.get("index")):
            _fail(f"sequences[{i}] needs an integer index")
        _ints(s.get("output_token_ids"), f"sequences[{i}].output_token_ids")
        _ints(s.get("prompt_token_ids", []), f"sequences[{i}].prompt_token_ids")
        if not isinstance(s.get("prompt", ""), str) or not isinstance(s.get("text") or "", str):
            _fail(f"sequences[{i}].prompt and .text must be text")
    for n, st in enumerate(steps):
        if not isinstance(st, dict) or not isinstance(st.get("rows"), list) or not _is_int(st.get("k")):
            _fail(f"steps[{n}] needs a k and a list of rows")
        for key in ("step", "t_start", "t_draft", "t_verify", "t_accept", "t_bookkeeping"):
            if not _is_num(st.get(key)):
                _fail(f"steps[{n}].{key} must be a number")
        for j, r in enumerate(st["rows"]):
            where = f"steps[{n}].rows[{j}]"
            if not isinstance(r, dict) or not isinstance(r.get("active"), bool):
                _fail(f"{where} needs active: true/false")
            if not all(_is_int(r.get(key)) and r[key] >= 0 for key in ("index", "drafted", "accepted")):
                _fail(f"{where} needs non-negative integer index, drafted and accepted")
            if r["accepted"] > r["drafted"]:
                _fail(f"{where} accepted more tokens than it drafted")
            _ints(r.get("emitted"), f"{where}.emitted")
            _ints(r.get("draft_tokens", []), f"{where}.draft_tokens")
    if not isinstance(trace.get("summary"), dict) or not isinstance(trace.get("telemetry", []), list):
        _fail("summary must be an object and telemetry a list")
    s = trace["summary"]
    try:  # every page reads the summary: it must be what its steps say it is
        summarize(steps, seqs, float(s.get("wall_s", 0.0)), float(s.get("prefill_s", 0.0)))
    except (KeyError, TypeError, ValueError) as e:
        _fail(f"its steps cannot be summarized ({type(e).__name__}: {e})")


def read_trace_upload(name: str, data: bytes) -> dict:
    """The trace in an uploaded file, or ValueError with one sentence that starts with the file's name."""
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"{name}: {len(data) / 2**20:.0f} MB is more than the {MAX_TRACE_BYTES // 2**20} MB "
                         "a trace may be here")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name}: not a specviz trace: not UTF-8 text (byte {e.start})") from None
    try:
        trace = load_json(data)  # bytes: parsed as the document, never taken for a path
        check_shape(trace)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    except RecursionError:
        raise ValueError(f"{name}: not a specviz trace: nested too deeply") from None
    return trace


def trace_csv_zip(trace: dict) -> bytes:
    """The trace's tables (specviz.analysis.trace.to_tables), one CSV each, in a zip: the Live page's export."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, df in to_tables(trace).items():
            z.writestr(f"{name}.csv", df.to_csv(index=False))
    return buf.getvalue()
