"""How a run was made, said beside everything that shows it (no Streamlit): a run with synthetic
acceptance (RunConfig.synthetic_acceptance) carries its label as a second line of every chart's title
and as a note at the top of every page that shows it, in the one wording of
specviz.analysis.trace.synthetic_label."""

from __future__ import annotations

from specviz.analysis.trace import synthetic_label

LABEL_COLOUR = "#b00020"  # the label's red: a warning, apart from the token roles' colours


def run_label(trace: dict | None) -> str | None:
    """The run's label ("synthetic acceptance (alpha = 0.6): not the target's text"), None for an exact run."""
    return synthetic_label((trace or {}).get("config") or {})


def page_note(trace: dict | None) -> str | None:
    """The page's note (Markdown) about a synthetic run: what was replaced, what is still real."""
    label = run_label(trace)
    if label is None:
        return None
    alpha = trace["config"]["synthetic_acceptance"]
    return (f"**This run used {label}.** Each drafted token was kept by a seeded draw that succeeds with "
            f"probability α = {alpha:g}, whatever the target said; the target's own token follows the first "
            "rejection. The timings are real, the text is not what the target would write, and no exactness "
            "check reads this run.")


def mark(fig, trace: dict | None):
    """``fig`` with the run's label as a second, red line of its title (and room for it); unchanged for an
    exact run."""
    label = run_label(trace)
    if label is None:
        return fig
    title = fig.layout.title.text or ""
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 66
    fig.update_layout(title_text=f"{title}<br><span style='font-size:12px;color:{LABEL_COLOUR}'>{label}</span>",
                      margin_t=top + 18)
    return fig


# ---- a prediction without a calibration ------------------------------------------------------------------
# Until a calibration (a Live run's, or `specviz calibrate`) has measured this pair's forward costs on this
# device and dtype, every predicted number stands on assumed costs: the word sits next to the number, its
# one-line reason under it.
UNCALIBRATED = "uncalibrated"
WHY_LIVE = ("uncalibrated: no calibration of this pair on this device and dtype yet, so the prediction is the "
            "batch-1 formula with this run's α and draft cost c; a Live run calibrates its pair when it ends "
            "(`python -m specviz calibrate` from a terminal).")
WHY_ROOFLINE = ("uncalibrated: no calibration of this pair on this device and dtype yet, so these predictions use an "
                "illustrative roofline (a forward flat up to N* tokens, a draft step c of a target step); "
                "a Live run calibrates its pair when it ends (`python -m specviz calibrate` from a terminal).")


def prediction_label(label: str, calibrated: bool) -> str:
    """A predicted number's label, with "(uncalibrated)" beside it when no calibration stands behind it."""
    return label if calibrated else f"{label} ({UNCALIBRATED})"


def mark_uncalibrated(fig, calibrated: bool):
    """A figure of predictions: " (uncalibrated)" after its title when no calibration stands behind them."""
    if not calibrated:
        fig.update_layout(title_text=prediction_label(fig.layout.title.text or "", False))
    return fig
