"""On the Live page, a greedy run whose output differs from regular decoding shows each diverged row's two
texts around their first difference, the first differing token marked."""

from __future__ import annotations

import copy

from test_app import known_trace, with_trace

from specviz.app import state as appstate
from specviz.common import SpecvizError


def test_a_diverged_row_shows_both_texts_with_the_first_difference_marked(monkeypatch):
    ask = appstate.ask

    def no_margins(job, *args, **kwargs):  # the device process's margins are another test's: none here
        if job == "divergence":
            raise SpecvizError("the device is busy")
        return ask(job, *args, **kwargs)

    monkeypatch.setattr(appstate, "ask", no_margins)
    spec = known_trace()
    regular = copy.deepcopy(spec)
    regular["config"]["mode"] = "regular"
    regular["sequences"][1]["output_token_ids"][2] = 77  # row 1: [29, 30, 31, ...] against [29, 30, 77, ...]
    at = with_trace(spec, regular)
    assert any("Output identical to regular decoding: 1/2 rows" in w.value for w in at.warning)
    assert any(e.label == "Where the outputs differ (1 row)" for e in at.expander)
    text = next(m.value for m in at.markdown if m.value.startswith("**Row 1, token 2**"))
    spec_line, reg_line = text.splitlines()[1:]
    assert spec_line.startswith(r"- speculative: \[29\]\[30\]**:orange-background[⟦\[31\]⟧]**\[39\]")
    assert reg_line.startswith(r"- regular: \[29\]\[30\]**:orange-background[⟦\[77\]⟧]**\[39\]")


def test_identical_outputs_show_no_texts():
    spec = known_trace()
    regular = copy.deepcopy(spec)
    regular["config"]["mode"] = "regular"
    at = with_trace(spec, regular)
    assert any("Output identical to regular decoding: 2/2 rows" in s.value for s in at.success)
    assert not any(e.label.startswith("Where the outputs differ") for e in at.expander)
