"""Text the pages show: the four token roles defined once, the one alpha, the coloured output
of every row, and one row-step taken apart (the step explainer). Pure functions returning
strings (Markdown or HTML); no Streamlit, no plotly."""

from __future__ import annotations

from typing import Callable

from specviz.analysis import acceptance
from specviz.analysis.trace import synthetic_label
from specviz.figures.charts import KIND_COLORS, SPECIAL, special_label, token_kinds
from specviz.figures.safetext import html_text, md_escape

Decode = Callable[[list[int]], str]

# SPECDEC.md's vocabulary, one plain sentence each: the legend, the explainer and the tests use these.
DEFINITIONS = {
    "accepted": "a token the draft proposed and the target agreed with, so it was kept without a forward of its own.",
    "recovered": "at the first draft token the target rejected, the target's own choice at that position "
                 "replaces it (the drafted tokens after it are thrown away).",
    "bonus": "when the target accepted every drafted token, one more token it computes anyway in the same "
             "verify forward (also the one token of a step that drafted nothing, as in regular decoding).",
    "output": "what a step adds to a row: its accepted tokens plus one recovered or bonus token, so always at "
              "least 1 and at most k + 1.",
}
# The page's other terms, used by its charts before the generated text: the Live page's glossary.
TERMS = {
    "step": "one round for the whole batch: every active row drafts up to k tokens, then one target forward "
            "verifies all rows' drafts at once.",
    "row-step": "one row in one step; per-row numbers (acceptance, output tokens) are counted per row-step.",
    "slot": "one token position the target verifies for a row in a step: k drafted tokens plus one, so k + 1.",
    "wasted slot": "a verified slot that produced no output: a drafted token the target rejected, or one after "
                   "a rejection. A step wastes k − accepted slots per row.",
    acceptance.MEAN_ACCEPTANCE_LENGTH: "output tokens per row-step (accepted + the one recovered or bonus token); "
                                       "regular decoding's is 1.",
    "phases": "draft (the draft proposes), verify (the target's forward over every slot), accept (the acceptance "
              "rule), bookkeeping (caches rolled back, outputs recorded); other = wall time between steps.",
    "lane": "under a request queue, one of the batch's b rows: a request holds a lane from the step it joins "
            "until it finishes, then the lane goes to the next queued request.",
}
# The acceptance quantities, named as specviz.analysis.acceptance names them (and computes them).
ALPHA = acceptance.ALPHA
ALPHA_DEFINITION = (f"**{ALPHA} (per-position acceptance)** = accepted draft tokens / draft positions the target "
                    "checked: the chance a drafted token is accepted given every token before it in the step was. "
                    "A position after a rejection is never checked, so it does not count.")
ACCEPTANCE_RATE_DEFINITION = (f"**{acceptance.ACCEPTANCE_RATE}** = accepted / drafted: it also counts the drafted "
                              f"tokens thrown away after a rejection, so it sits below {ALPHA}.")
MEAN_ACCEPTANCE_LENGTH_DEFINITION = (f"**{acceptance.MEAN_ACCEPTANCE_LENGTH}** = "
                                     + TERMS[acceptance.MEAN_ACCEPTANCE_LENGTH])
MODEL_MEAN_ACCEPTANCE_LENGTH_DEFINITION = (
    f"**{acceptance.MEAN_ACCEPTANCE_LENGTH} E({ALPHA}, k)**: the model's expected output tokens per row-step at "
    f"draft length k when every position is accepted with chance {ALPHA} (Leviathan et al. 2022); a run's "
    "measured mean acceptance length is the number to compare it with.")
ALPHA_FROM_MEAN_DEFINITION = (f"**{ALPHA}** in the sweep's table is fitted, not counted: the {ALPHA} whose expected "
                              "accepted count per row-step (i.i.d. acceptance) equals the cell's measured mean; it "
                              f"differs from the counted {ALPHA} of the Live and Speedup pages when acceptance is not "
                              "the same at every position.")


def short_label(option: str) -> str:
    """A drop-down option without its parenthesised note, so it fits a narrow column (the full
    names go in the widget's help): "summarize / rewrite (copy-heavy: ...)" -> "summarize / rewrite"."""
    return option.split(" (")[0]


def _piece(t: int, decode: Decode | None) -> str:
    """One output token as HTML: its text, or a grey marker for a special token (<|im_end|>...)."""
    if decode is None:
        return html_text(f"[{t}]")
    text = decode([t])
    if SPECIAL.fullmatch(text.strip()):
        return (f'<span style="color:#999;font-size:85%" title="special token {html_text(text)}">'
                f'{html_text(special_label(text.strip()))}</span>')
    return html_text(text)


def legend_html() -> str:
    """The colours of the generated text, each with its definition."""
    items = "".join(f'<li><span style="color:{KIND_COLORS[k]};font-weight:bold">■ {k}</span>: {DEFINITIONS[k]}</li>'
                    for k in KIND_COLORS)
    return (f'<ul style="margin-bottom:0.3em">{items}<li><b>output</b>: {DEFINITIONS["output"]}</li></ul>')


def terms_markdown() -> str:
    """The page's other terms as a Markdown list, one definition each."""
    return "\n".join(f"- **{term}**: {text}" for term, text in TERMS.items())


def token_html(trace: dict, decode: Decode | None = None, max_rows: int | None = None) -> list[tuple[int, str]]:
    """Per row: (index, HTML) of its output with accepted / recovered / bonus tokens coloured."""
    out = []
    finish = {s["index"]: s.get("finish_reason") for s in trace.get("sequences", [])}
    for i, toks in list(token_kinds(trace).items())[:max_rows]:
        spans = [f'<span style="color:{KIND_COLORS[kind]}" title="{kind}, step {step}">{_piece(t, decode)}</span>'
                 for t, kind, step in toks]
        reason = finish.get(i)
        tail = f' <span style="color:#999">[{html_text(reason)}]</span>' if reason else ""
        out.append((i, f'<div style="white-space:pre-wrap;font-family:monospace">{"".join(spans)}{tail}</div>'))
    return out


def _chip(t: int, decode: Decode | None, color: str, note: str, strike: bool = False) -> str:
    style = (f"border:2px solid {color};border-radius:4px;padding:1px 5px;margin:2px;display:inline-block;"
             f"font-family:monospace;{'text-decoration:line-through;opacity:0.6;' if strike else ''}")
    return (f'<span style="{style}" title="{note}">{_piece(t, decode)}'
            f'<sub style="color:{color};font-family:sans-serif"> {note}</sub></span>')


def step_html(d: dict, decode: Decode | None = None) -> str:
    """One row-step (analysis.explain.step_detail) as two lines: what the draft proposed, marked
    accepted / rejected / thrown away, and what the row got (its output)."""
    if d["drafted"] == 0:
        drafted = "<i>nothing drafted this step</i>"
    elif d["draft_tokens"] is None:
        drafted = (f"{d['drafted']} tokens; this trace does not record their ids, only the "
                   f"{d['accepted']} accepted: " + "".join(_chip(t, decode, KIND_COLORS["accepted"], "accepted")
                                                          for t in d["accepted_tokens"]))
    else:
        chips = []
        for j, t in enumerate(d["draft_tokens"]):
            if j < d["accepted"]:
                chips.append(_chip(t, decode, KIND_COLORS["accepted"], "accepted"))
            elif j == d["rejected_at"]:
                chips.append(_chip(t, decode, "#d62728", "rejected", strike=True))
            else:
                chips.append(_chip(t, decode, "#999", "thrown away", strike=True))
        drafted = "".join(chips)
    out = "".join(_chip(t, decode, KIND_COLORS["accepted"], "accepted") for t in d["accepted_tokens"])
    if d["final"] is not None:
        out += _chip(d["final"], decode, KIND_COLORS[d["final_kind"]], d["final_kind"])
    if d["rejected_at"] is not None:
        verdict = (f"the target accepted {d['accepted']} of {d['drafted']} drafted tokens; it rejected draft "
                   f"position {d['rejected_at'] + 1}, and its own token there is the <b>recovered</b> token.")
    elif d["drafted"]:
        verdict = f"the target accepted all {d['drafted']} drafted tokens and added a <b>bonus</b> token."
    else:
        verdict = "with nothing to check, the target decoded one token itself: the <b>bonus</b> token."
    return (f'<div style="line-height:2.2"><b>drafted (k = {d["k"]}):</b> {drafted}<br>'
            f'<b>output ({len(d["output"])} token{"" if len(d["output"]) == 1 else "s"}):</b> {out}<br><span>{verdict}</span></div>')


def draft_text(cfg: dict, c: float | None) -> str:
    """"What is this draft", from a trace's config: layers and parameters against the target's
    (its own apart from the target embedding it reuses) and the measured cost ratio c."""
    raw = cfg.get("draft_name") or cfg.get("draft")
    name = md_escape(raw) if raw else raw
    end = f"; measured cost ratio c = {c:.3f} (one draft token costs {100 * c:.1f}% of a target verify step)." if c else "."
    if cfg.get("draft_params") and cfg.get("draft_params") == cfg.get("target_params"):
        return (f"**What is this draft:** the target's own weights ({cfg['draft_layers']} layers, "
                f"{cfg['draft_params'] / 1e6:.0f}M parameters) run in a cheaper dtype{end}")
    if cfg.get("draft_params"):
        tgt = (f" against the target's {cfg['target_layers']} layers and {cfg['target_params'] / 1e6:.0f}M"
               if cfg.get("target_params") else "")
        own = cfg.get("draft_own_params", cfg["draft_params"])
        reuse = (f" of its own, plus {(cfg['draft_params'] - own) / 1e6:.0f}M it reuses from the target (the "
                 "embedding)" if own < cfg["draft_params"] else "")
        return (f"**What is this draft:** {name}: {cfg.get('draft_layers')} layers, "
                f"{own / 1e6:.0f}M parameters{reuse}{tgt}; it shares the target's tokenizer{end}")
    if raw and str(raw).startswith("ngram"):
        return ("**What is this draft:** prompt lookup (n-grams): no model, it proposes the tokens that followed "
                f"the row's last few tokens earlier in its own context, so it costs almost nothing{end}")
    if "suffix_corpus_tokens" in cfg:
        n, r = cfg["suffix_corpus_tokens"], cfg.get("suffix_corpus_requests", 0)
        learnt = (f"this run started knowing {n:,} tokens from {r} earlier requests (this session's earlier runs): "
                  "run the same workload again and it accepts more" if n else
                  "it knew nothing from earlier runs yet: run the same workload again and it accepts more")
        return ("**What is this draft:** suffix decoding: no model, it proposes what followed the row's latest "
                f"tokens before, in its own prompt and output and in earlier requests' outputs; {learnt}{end}")
    return f"**What is this draft:** {name}{end}" if name else ""


def model_note(cfg: dict) -> str:
    """Under the generated text: whose text it is, and that a small model's answers can be wrong."""
    if label := synthetic_label(cfg):  # the draws, not the target, kept the drafted tokens
        return (f"This text comes from {label}: drafted tokens were kept by a seeded draw, so it is neither the "
                "target's nor the draft's own answer.")
    params = cfg.get("target_params")
    who = f"a {params / 1e6:,.0f}M-parameter model" if isinstance(params, (int, float)) and params > 0 else "the target model"
    return (f"This text is what {who} generated, and its answers can be wrong: specviz shows how a model "
            "decodes, not what it knows.")


def exactness_text(ex: dict, dtype: str = "") -> str:
    """The exactness line from analysis.explain.exactness: n/N rows identical, and for the others
    where they diverged and the regular run's logit margin there."""
    line = f"**Output identical to regular decoding: {ex['identical']}/{ex['rows']} rows.**"
    if ex["diverged"]:
        where = "; ".join(f"row {d['row']} from token {d['position']}"
                          + (f" (regular top-1 − top-2 logit margin {d['margin']:.3g})" if d["margin"] is not None else "")
                          for d in ex["diverged"])
        if dtype in ("bfloat16", "float16"):
            why = (f" Speculative decoding is exact in exact arithmetic. In {dtype} a verify over k + 1 tokens and a "
                   "one-token step add the same numbers in another order, and "
                   + ("bfloat16 keeps about 3 significant digits (a logit near 20 is stored in steps of 0.125), "
                      if dtype == "bfloat16" else "float16 keeps about 3 significant digits, ")
                   + "so a lead of a step or two can flip. Choose float32 in the sidebar, or use the Correctness "
                     "page, to see every row identical.")
        else:
            why = (f" A tiny margin is a near-tie that a (k+1)-token verify rounds differently in "
                   f"{md_escape(dtype) if dtype else 'this dtype'}"
                   ", not a bookkeeping bug; the Correctness page checks exactness in float32.")
        line += f" Diverged: {where}.{why}"
    return line
