"""The Lessons page's guided steps, as data (no Streamlit): each step names the control to touch, the
run to make, what to look for and a check question with its answer, and the settings "Set up this
step" puts into the Live page's controls and the sidebar (their session keys). docs/teaching.md walks
the same steps (tests/app/test_lessons.py keeps the two in step)."""

from __future__ import annotations

import dataclasses

from specviz.bounds import SLIDERS
from specviz.prompts import sets as promptsets

INTRO = ("Six short steps on the **Live** page, about three minutes each. Each step says which control to "
         "touch and which run to make; **Set up this step** puts its settings into the Live controls, then "
         "press **Run** there. Come back here for what to look for and the check question.")


@dataclasses.dataclass(frozen=True)
class Lesson:
    title: str
    touch: str  # the control to touch
    run: str  # the run (or runs) to make
    look: str  # what to look for once it has run
    question: str  # the check question
    answer: str  # shown on demand
    settings: dict  # session key -> value: what "Set up this step" sets (Live's widgets, the sidebar's draft)


def _prompts(short: str) -> dict:
    """A built-in prompt set in the Live page's two controls: its drop-down and the text it loads."""
    title = promptsets.SET_NAMES[short]
    return {"prompt_set": title, "prompts_text": promptsets.to_text(promptsets.PROMPT_SETS[title])}


# What every step starts from: the default pair, greedy, one fixed k, a race, no queue, the real acceptance rule.
BASE = {"draft_kind": "default", "policy": "fixed", "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64,
        "seed": 0, "race": True, "requests": 0, "arrival_rate": 0.0, "synthetic_on": False,
        "synthetic_alpha": SLIDERS["synthetic_acceptance"][2], "batch_size": 1, "draft_length": 2, **_prompts("chat")}

LESSONS = (
    Lesson(
        "k = 0 is regular decoding",
        touch="Draft length k: set it to 0 (batch size 1).",
        run="Press Run once.",
        look="Every token of the generated text is blue (a bonus token), the mean acceptance length is 1.00 and "
             "the measured speedup is about 1x: the race's two lines finish together.",
        question="With k = 0, how many tokens does a row gain per step, and why is there nothing to gain?",
        answer="One. A step that drafts nothing verifies only the row's last token: one target forward per token, "
               "which is exactly regular decoding. Speculation can only gain when a forward checks several "
               "drafted tokens at once.",
        settings={**BASE, "draft_length": 0}),
    Lesson(
        "k = 2: which tokens are green?",
        touch="Draft length k: set it to 2 (batch size 1).",
        run="Press Run, then open the step explainer at the bottom of Live and step through one row.",
        look="Green, orange and blue tokens in the generated text; in the step explainer, a step where the draft's "
             "second token was rejected.",
        question="Which tokens are green, and what is the most a row can gain in one step at k = 2?",
        answer="Green tokens are accepted: the draft proposed them and the target agreed, so they cost no forward "
               "of their own. At most k + 1 = 3 tokens per step: two accepted drafts plus the bonus token the "
               "same verify forward gives. An orange (recovered) token is the target's own choice where it "
               "rejected a draft.",
        settings={**BASE, "draft_length": 2}),
    Lesson(
        "Raise b from 1 to 16: why does the speedup fall?",
        touch="Batch size b: first 1, then 16 (k = 2).",
        run="Run at b = 1, note the measured speedup, then set b = 16 and Run again.",
        look="The measured speedup tile of both runs, and the Speedup model page's curves for b = 1 and b = 16.",
        question="Why does speculation gain less at b = 16 than at b = 1?",
        answer="At b = 1 a target forward is bound by reading the weights: verifying k + 1 tokens costs about as "
               "much as one, so accepted drafts ride almost free. At b = 16 the forward already carries 16 rows, "
               "so k + 1 tokens per row add real compute; every rejected slot is paid for, and the batch waits "
               "for its slowest row. On a CPU the knee comes early, so the speedup can fall below 1x.",
        settings={**BASE, "batch_size": 16}),
    Lesson(
        "Set α by hand: 0.9, then 0.3",
        touch="Tick Synthetic acceptance and drag α: 0.9 first, then 0.3 (k = 4, b = 1).",
        run="Run at α = 0.9, then at α = 0.3; try 0.6 if there is time.",
        look="The α tile follows the slider (the draws, not the draft, decide); the measured and predicted "
             "speedups fall with α. Every chart says synthetic acceptance: the text is not the target's.",
        question="When does speculation stop paying, and why does the draft's cost decide where?",
        answer="When the expected output per step, (1 − α^(k+1)) / (1 − α), no longer covers the step's cost: k "
               "draft forwards plus one verify of k + 1 tokens, over one regular step. A cheap draft (small c) "
               "pays at a lower α. Read the break-even on the Speedup model page: k = 4, c at this run's measured "
               "value, and the α where the curve crosses 1x. Synthetic acceptance shows this effect apart from "
               "how good the draft is.",
        settings={**BASE, "draft_length": 4, "synthetic_on": True, "synthetic_alpha": 0.9}),
    Lesson(
        "The suffix draft on text rewrites",
        touch="Sidebar Draft: suffix; Prompt set: rewrite text (k = 12, batch size 1).",
        run="Press Run; then switch the prompt set to chat questions and Run again.",
        look="Long green runs where the output repeats the prompt's text, a higher acceptance rate than on the "
             "chat questions, and a measured speedup well above 1x on the rewrites.",
        question="Why does a draft with no model at all accept so much on text rewrites, even at k = 12?",
        answer="Fixing the spelling of a passage repeats most of the input: the suffix draft proposes "
               "continuations of text it has already seen (the prompt, earlier outputs), and the target agrees "
               "because it copies too. It drafts only as deep as its match supports, so a long k costs nothing "
               "where matches are short. Chat answers repeat little, so there it has little to propose.",
        settings={**BASE, "draft_kind": "suffix", "draft_length": 12, "batch_size": 1, **_prompts("rewrite-text")}),
    Lesson(
        "Is the text still the target's?",
        touch="Nothing new: the Correctness page, after any run without synthetic acceptance.",
        run="On Correctness, press Check exactness (float32, greedy).",
        look="Rows identical to regular decoding, and for any that differ, the logit margin where they do.",
        question="Speculation changes how the text is made: does it change the text?",
        answer="No. Greedy speculative decoding keeps a drafted token only when it is the target's own argmax, so "
               "in float32 the output equals regular decoding (in bf16 near-ties can round differently). With "
               "sampling, the acceptance rule min(1, p/q) and the residual max(0, p − q) keep the target's "
               "distribution. Synthetic acceptance breaks this on purpose, which is why it is labelled and "
               "never checked.",
        settings={**BASE, "draft_length": 2, "batch_size": 4}),
)


def settings_text(lesson: Lesson) -> str:
    """The settings a step puts into the Live controls, in the page's words."""
    s = lesson.settings
    parts = [f"b = {s['batch_size']}", f"k = {s['draft_length']}", f"draft: {s['draft_kind']}",
             f"prompts: {s['prompt_set'].split(' (')[0]}"]
    if s["synthetic_on"]:
        parts.append(f"synthetic acceptance α = {s['synthetic_alpha']:g}")
    return ", ".join(parts)
