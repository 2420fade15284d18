"""The built-in prompt sets: every set has a short name for the command line, and the predictable
workloads (edit code, rewrite text, reformat data, repeated answers) hold eight or more prompts of their own."""

from specviz.prompts.sets import PROMPT_SETS, SET_NAMES, prompt_set


def test_every_set_has_a_short_name_and_the_name_gives_its_prompts():
    assert sorted(SET_NAMES.values()) == sorted(PROMPT_SETS)
    for name, title in SET_NAMES.items():
        assert " " not in name and prompt_set(name) == PROMPT_SETS[title] == prompt_set(title)


def test_the_predictable_sets_have_eight_prompts_or_more_and_share_none():
    predictable = ["edit-code", "rewrite-text", "reformat-data", "multi-turn"]
    seen = set()
    for name in predictable:
        prompts = prompt_set(name)
        assert len(prompts) >= 8 and len(set(prompts)) == len(prompts), name
        assert not seen & set(prompts)
        seen |= set(prompts)
    assert not seen & {p for n in SET_NAMES if n not in predictable for p in prompt_set(n)}
    assert all("def " in p and "Return the whole function" in p for p in prompt_set("edit-code"))
