"""An uploaded trace: read it whole or refuse it in one sentence, so a hostile or broken file never
reaches a chart (the page keeps the trace it had).

Checked: size (before parsing), UTF-8, JSON, the version, and the shape of every field the pages
read: the config's text and numbers, each sequence's text (prompt, text, a finish_reason the engine
writes) and token ids, and the steps, their rows, the telemetry and the summary, which hold numbers,
flags and token ids only; every token id is a non-negative integer, below the vocabulary of the
tokenizer the pages would decode it with. Then the summary is recomputed from the steps as the last
probe, since every page reads it. The pages still escape every text they show (specviz.figures.safetext).
"""

from __future__ import annotations

import io
import math
import zipfile

from specviz.analysis.trace import load_json, summarize, to_tables

MAX_TRACE_BYTES = 100 * 2**20  # a 64-row x 4,000-token run is ~60 MB of JSON; past this the browser would stall
# What specviz.engine.decoder writes; None is a row still going (a Live run's snapshot).
FINISH_REASONS = ("eos", "length", "stopped")
MAX_TOKEN_ID = 2**31 - 1  # no vocabulary is larger; a tokenizer's decode overflows past its integer type
CONFIG_TEXT = ("target", "draft", "policy", "mode", "device", "dtype", "target_name", "draft_name")
CONFIG_NUMBERS = ("max_new_tokens", "temperature", "top_p", "seed", "draft_confidence", "requests", "arrival_rate",
                  "tree_width", "tree_nodes", "target_layers", "target_params", "target_own_params", "draft_layers",
                  "draft_params", "draft_own_params", "synthetic_acceptance")
SEQUENCE_TEXT = ("prompt", "text", "finish_reason")
SEQUENCE_IDS = ("prompt_token_ids", "output_token_ids")
TREE_INDICES = ("parent", "depth", "rank", "path")


def _fail(what: str):
    raise ValueError(f"not a specviz trace: {what}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


_PLAIN_TYPES = frozenset({int, bool, type(None)})  # exact types: what json.loads makes, and fast to test


def _is_plain(v) -> bool:
    """A number, a flag or nothing: what a record holds where it holds no text and no list."""
    return type(v) in _PLAIN_TYPES or (type(v) is float and math.isfinite(v))


def _all_ints(v) -> bool:
    return type(v) is list and set(map(type, v)) <= {int}


def _ints(v, where: str) -> None:
    if not _all_ints(v):
        _fail(f"{where} must be a list of integers")


def _ids(v, where: str, vocab: int) -> None:
    """Token ids: integers in [0, vocab), so no tokenizer's decode ever sees one it lacks."""
    if not _all_ints(v) or (v and (min(v) < 0 or max(v) >= vocab)):
        bad = next((t for t in v if not _is_int(t) or not 0 <= t < vocab), None) if isinstance(v, list) else None
        _fail(f"{where} must be a list of token ids in [0, {vocab})"
              + (f" (holds {bad})" if _is_int(bad) else ""))


def _record(rec: dict, where: str, skip: tuple = ()) -> None:
    """Every field of ``rec`` but ``skip`` is a number, a flag or nothing, or a list of integers."""
    for key, v in rec.items():
        if not _is_plain(v) and key not in skip and not _all_ints(v):
            _fail(f"{where}.{key} must be a number")


def _tree(t, where: str, vocab: int) -> None:
    """A tree row-step (version 3): node tokens, parent / depth / rank per node, the accepted path."""
    if not isinstance(t, dict):
        _fail(f"{where} must be an object")
    _ids(t.get("token"), f"{where}.token", vocab)
    n = len(t["token"])
    for key in TREE_INDICES:
        _ints(t.get(key), f"{where}.{key}")
    if len(t["parent"]) != n or len(t["rank"]) != n or len(t["depth"]) != n:
        _fail(f"{where} needs a parent, depth and rank per node")
    if not all(-1 <= p < n for p in t["parent"]) or not all(0 <= i < n for i in t["path"]):
        _fail(f"{where} names a node it does not have")
    prob = t.get("prob")
    if prob is not None and (not isinstance(prob, list) or len(prob) != n or not all(_is_plain(p) for p in prob)):
        _fail(f"{where}.prob must be a number per node")


def _config(cfg) -> None:
    if not isinstance(cfg, dict):
        _fail("config must be an object")
    for key in ("batch_size", "draft_length"):
        if key in cfg and not _is_int(cfg[key]):
            _fail(f"config.{key} must be an integer")
    for key in CONFIG_TEXT:
        if cfg.get(key) is not None and not isinstance(cfg[key], str):
            _fail(f"config.{key} must be text")
    for key in CONFIG_NUMBERS:
        if not _is_plain(cfg.get(key)) or isinstance(cfg.get(key), bool):
            _fail(f"config.{key} must be a number")


def _sequence(s, i: int, vocab: int) -> None:
    where = f"sequences[{i}]"
    if not isinstance(s, dict) or not _is_int(s.get("index")):
        _fail(f"{where} needs an integer index")
    _ids(s.get("output_token_ids"), f"{where}.output_token_ids", vocab)
    _ids(s.get("prompt_token_ids", []), f"{where}.prompt_token_ids", vocab)
    if not isinstance(s.get("prompt", ""), str) or not isinstance(s.get("text") or "", str):
        _fail(f"{where}.prompt and .text must be text")
    if s.get("finish_reason") is not None and s["finish_reason"] not in FINISH_REASONS:
        _fail(f"{where}.finish_reason must be one of {', '.join(FINISH_REASONS)} (or null: still going)")
    _record(s, where, SEQUENCE_TEXT + SEQUENCE_IDS)


def _step(st, n: int, vocab: int) -> None:
    if not isinstance(st, dict) or not isinstance(st.get("rows"), list) or not _is_int(st.get("k")):
        _fail(f"steps[{n}] needs a k and a list of rows")
    for key in ("step", "t_start", "t_draft", "t_verify", "t_accept", "t_bookkeeping"):
        if not _is_num(st.get(key)):
            _fail(f"steps[{n}].{key} must be a number")
    _record(st, f"steps[{n}]", ("rows",))
    for j, r in enumerate(st["rows"]):
        where = f"steps[{n}].rows[{j}]"
        if not isinstance(r, dict) or not isinstance(r.get("active"), bool):
            _fail(f"{where} needs active: true/false")
        if not all(_is_int(r.get(key)) and r[key] >= 0 for key in ("index", "drafted", "accepted")):
            _fail(f"{where} needs non-negative integer index, drafted and accepted")
        if r["accepted"] > r["drafted"]:
            _fail(f"{where} accepted more tokens than it drafted")
        _ids(r.get("emitted"), f"{where}.emitted", vocab)
        _ids(r.get("draft_tokens", []), f"{where}.draft_tokens", vocab)
        if r.get("tree") is not None:
            _tree(r["tree"], f"{where}.tree", vocab)
        _record(r, where, ("emitted", "draft_tokens", "tree"))


def check_shape(trace: dict, vocab_size: int | None = None) -> None:
    """Raise ValueError naming the first field whose type or value the pages cannot read.
    ``vocab_size``: token ids must be below it (else below MAX_TOKEN_ID)."""
    vocab = min(vocab_size, MAX_TOKEN_ID) if vocab_size else MAX_TOKEN_ID
    _config(trace.get("config"))
    seqs, steps = trace["sequences"], trace["steps"]
    if not isinstance(seqs, list) or not isinstance(steps, list):
        _fail("sequences and steps must be lists")
    for i, s in enumerate(seqs):
        _sequence(s, i, vocab)
    for n, st in enumerate(steps):
        _step(st, n, vocab)
    if not isinstance(trace.get("summary"), dict) or not isinstance(trace.get("telemetry", []), list):
        _fail("summary must be an object and telemetry a list")
    for key, v in trace["summary"].items():  # the pages format these as numbers
        if not _is_plain(v) and not (isinstance(v, list) and all(_is_plain(x) for x in v)):
            _fail(f"summary.{key} must be a number")
    for n, sample in enumerate(trace.get("telemetry") or []):
        if not isinstance(sample, dict) or not isinstance(sample.get("source", ""), (str, type(None))):
            _fail(f"telemetry[{n}] must be an object with a text source")
        _record(sample, f"telemetry[{n}]", ("source",))
    s = trace["summary"]
    try:  # every page reads the summary: it must be what its steps say it is
        summarize(steps, seqs, float(s.get("wall_s") or 0.0), float(s.get("prefill_s") or 0.0))
    except (KeyError, TypeError, ValueError) as e:
        _fail(f"its steps cannot be summarized ({type(e).__name__}: {e})")


def read_trace_upload(name: str, data: bytes, vocab_size: int | None = None, target_name: str | None = None) -> dict:
    """The trace in an uploaded file, or ValueError with one sentence that starts with the file's name.

    ``vocab_size`` is len(tokenizer) of the target the page has loaded, ``target_name`` its name:
    the page decodes a trace's ids with that tokenizer when the trace was made by that target or
    names none (specviz.app.state.trace_decoder), so such a trace's ids must be below it. A trace
    of another target shows its ids as numbers, and only needs them non-negative."""
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"{name}: {len(data) / 2**20:.0f} MB is more than the {MAX_TRACE_BYTES // 2**20} MB "
                         "a trace may be here")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{name}: not a specviz trace: not UTF-8 text (byte {e.start})") from None
    try:
        trace = load_json(data)  # bytes: parsed as the document, never taken for a path
        made_by = trace["config"].get("target_name") if isinstance(trace.get("config"), dict) else None
        decoded_here = made_by is None or target_name is None or made_by == target_name
        check_shape(trace, vocab_size if decoded_here else None)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    except RecursionError:
        raise ValueError(f"{name}: not a specviz trace: nested too deeply") from None
    return trace


def trace_csv_zip(trace: dict) -> bytes:
    """The trace's tables (specviz.analysis.trace.to_tables), one CSV each, in a zip: the Live page's export."""
    from specviz.analysis.trace import csv_text

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, df in to_tables(trace).items():
            z.writestr(f"{name}.csv", csv_text(df))  # text a spreadsheet would run starts with '
    return buf.getvalue()
