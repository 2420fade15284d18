"""Chat-style prompts beyond the task templates of ``specviz.prompts.gen``: paraphrase, multi-turn,
code (fix, explain, complete), lists, one-line answers and long answers, casual troubleshooting.

Same split rule as ``gen``: the training prompts fill their slots from ``_TRAIN``, the held-out
ones from ``_HELDOUT``, and the two share no slot value, so no held-out prompt shares a subject,
sentence, snippet or conversation with a training prompt (tests/distill/test_distill.py checks this, and
that no training slot value appears in the hand-written free-form set, the acceptance yardstick).

A multi-turn prompt is a string holding a JSON list of chat messages (so prompt lists stay
lists of strings: shards, resumes and sets compare them as text); :func:`messages` turns any
prompt into the messages a chat template takes.

    varied_prompts(n, seed, heldout=False) -> n distinct prompts, kinds in turn, prefix-stable
"""

from __future__ import annotations

import json
import random

_TRAIN = {
    "sentence": """The committee postponed the vote because too many members were absent;
    Our quarterly sales grew faster than anyone on the team had predicted; The museum will close early
    on Friday for a private event; Regular stretching can reduce the risk of injury for runners;
    The new software update fixes several bugs but makes the app slower on old phones;
    Most of the volunteers had never planted a tree before the weekend event;
    The recipe calls for two cups of flour and a pinch of salt; Heavy rain flooded the lower
    streets of the town overnight; She finished the marathon in under four hours despite the heat;
    The library extended its opening hours during the exam period""",
    "subject": """photosynthesis; the water cycle; compound interest; plate tectonics; the immune system;
    machine learning; the printing press; black holes; supply and demand; recycling; electric motors;
    the French Revolution; coral reefs; vaccines; GPS; binary numbers""",
    "followup": """Can you give me an example?; Explain that more simply.; Now put it as a short list.;
    Why does that matter?; What is a common mistake people make here?; Can you make it shorter?""",
    "snippet": ["def average(xs):\n    return sum(xs) / len(xs) + 1\n",
                "def is_even(n):\n    return n % 2 == 1\n",
                "for i in range(1, 10):\n    print(i * i)\n",
                "def last(items):\n    return items[len(items)]\n",
                "numbers = [3, 1, 2]\nnumbers.sort(reverse=True)\nprint(numbers[0])\n",
                "def greet(name):\n    print('Hello, ' + name)\n    return\n"],
    "stub": ["def count_words(text):\n    # return a dict word -> count\n",
             "def clamp(x, lo, hi):\n    # keep x inside [lo, hi]\n",
             "class Counter:\n    def __init__(self):\n",
             "function sumArray(arr) {\n  // add up the numbers\n",
             "def read_lines(path):\n    # return the non-empty lines of a file\n"],
    "query": """lists the ten most recent orders; counts the users per country; finds products that were
    never ordered; shows the average salary per department""",
    "shell": """finds the five largest files in a folder; replaces 'foo' with 'bar' in every .txt file;
    shows which process uses port 8080; counts the lines of all Python files""",
    "occasion": """a weekend in the mountains; a first day at a new job; a picnic in the park;
    moving to a new flat; a business trip of two days""",
    "country": "Japan; Canada; Brazil; Kenya; Norway; Egypt",
    "phrase": "Good morning; Thank you very much; How much does this cost?; I am lost",
    "language": "Italian; Portuguese; Dutch",
    "word": "ephemeral; resilient; ubiquitous; meticulous; candid",
    "problem": """my bike chain keeps falling off; my laptop gets very hot; my bread never rises;
    my phone battery dies by noon; my tomato plants have spots on their leaves""",
    "guide": """starting a small vegetable garden; learning to touch type; running a book club;
    keeping a budget as a student""",
}

_HELDOUT = {
    "sentence": """The ferry was cancelled twice this week because of strong winds;
    Our neighbours repainted their fence a bright shade of green; The conference moved online at the
    last minute; Drinking enough water helps many people concentrate better;
    The bakery on the corner now opens at six in the morning""",
    "subject": """tidal energy; the Doppler effect; inflation; the nervous system; cryptography;
    the steam engine; glaciers; antibiotics resistance""",
    "followup": """Could you summarise that in one sentence?; How would you explain it to a child?;
    What should I read next about it?""",
    "snippet": ["def maximum(xs):\n    best = 0\n    for x in xs:\n        if x > best:\n            best = x\n    return best\n",
                "def reverse(s):\n    return s[::1]\n",
                "total = 0\nfor n in [1, 2, 3]:\n    total = n\nprint(total)\n"],
    "stub": ["def flatten(nested):\n    # one flat list of all items\n",
             "def is_leap(year):\n    # Gregorian leap year rule\n",
             "function capitalize(word) {\n  // first letter upper case\n"],
    "query": "finds customers with no orders; lists the three cheapest products per category",
    "shell": "deletes empty folders below the current one; shows the disk usage of each subfolder",
    "occasion": "a ski trip; a music festival; a family reunion",
    "country": "Chile; Vietnam; Morocco",
    "phrase": "Where is the nearest pharmacy?; See you tomorrow",
    "language": "Swedish; Polish",
    "word": "serendipity; pragmatic; lucid",
    "problem": """my kettle leaves white flakes; my printer prints blank pages; my cat ignores her new bed""",
    "guide": "planning a home office; learning to knit",
}


def _lists(raw: dict) -> dict[str, list[str]]:
    return {k: v if isinstance(v, list) else [" ".join(s.split()) for s in v.split(";") if s.strip()] for k, v in raw.items()}


TRAIN_SLOTS, HELDOUT_SLOTS = _lists(_TRAIN), _lists(_HELDOUT)

_REPLIES = ["Sure. {subject} is a big topic, so here is the short version: it is easier to understand "
            "through one concrete case than through definitions.",
            "Good question. In short, {subject} is about how a few simple rules add up to a large effect."]

KINDS = {
    "paraphrase": ["Paraphrase this: {sentence}.", "Say this in simpler words: \"{sentence}.\"",
                   "Rewrite this sentence two different ways: {sentence}."],
    "multi-turn": ["__conversation__"],
    "code": ["Fix the bug in this code:\n\n{snippet}", "What does this code do?\n\n{snippet}", "{stub}",
             "Write a SQL query that {query}.", "Write a shell command that {shell}."],
    "lists": ["Give me a packing list for {occasion}.", "List the steps for {guide}.",
              "What are five things to remember about {subject}?"],
    "short": ["What is the capital of {country}? One word.", "Translate '{phrase}' into {language}.",
              "Define '{word}' in one sentence.", "Answer yes or no, then one reason: is {subject} still studied today?"],
    "long": ["Write a detailed guide to {guide}, with headings.",
             "Write a short essay about {subject} with an introduction, three points and a conclusion."],
    "casual": ["Help! {problem}. What should I check first?", "ugh, {problem}. any ideas?",
               "Quick one: {problem}. Is that normal?"],
}


SUFFIXES = ["", "", " Keep it short.", " Please be detailed.", " Use a friendly tone.", " Answer in two sentences.",
            " Explain your answer."]


def messages(prompt: str) -> list[dict]:
    """The chat messages of a prompt: a multi-turn prompt's own, else one user message."""
    if prompt.startswith('[{"role"'):
        try:
            msgs = json.loads(prompt)
        except json.JSONDecodeError:
            msgs = None
        if isinstance(msgs, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in msgs):
            return msgs
    return [{"role": "user", "content": prompt}]


def _fill(rng: random.Random, template: str, s: dict) -> str:
    values = {k: rng.choice(v) for k, v in s.items()}
    if template != "__conversation__":
        text, suffix = template.format(**values), rng.choice(SUFFIXES)
        return text + ("\n" + suffix.strip() if suffix and text.endswith("\n") else suffix)
    subject = values["subject"]
    first = rng.choice(["What is {subject}?", "Can you explain {subject}?", "Tell me about {subject}."]).format(subject=subject)
    msgs = [{"role": "user", "content": first},
            {"role": "assistant", "content": rng.choice(_REPLIES).format(subject=subject.capitalize())},
            {"role": "user", "content": values["followup"] + rng.choice(SUFFIXES)}]
    return json.dumps(msgs)


def varied_prompts(n: int, seed: int = 0, heldout: bool = False, short_ok: bool = False) -> list[str]:
    """n distinct prompts, the kinds in turn; the first n of a longer draw are the same prompts.
    When the slot lists hold fewer, ValueError, or with ``short_ok`` all there are."""
    slots = HELDOUT_SLOTS if heldout else TRAIN_SLOTS
    rng = random.Random((20_000 if heldout else 0) + seed)
    kinds = sorted(KINDS)
    out, seen, misses, turn = [], set(), dict.fromkeys(kinds, 0), 0
    while len(out) < n:
        live = [k for k in kinds if misses[k] < 300]  # a kind that drew 300 repeats in a row is used up
        if not live:
            if short_ok:
                return out
            raise ValueError(f"could not draw {n} distinct varied prompts (space exhausted at {len(out)})")
        kind = live[turn % len(live)]
        turn += 1
        text = _fill(rng, rng.choice(KINDS[kind]), slots)
        if text in seen:
            misses[kind] += 1
            continue
        misses[kind] = 0
        seen.add(text)
        out.append(text)
    return out


def mixed_prompts(n: int, seed: int = 0, heldout: bool = False, every: int = 4) -> list[str]:
    """n prompts, every ``every``-th a varied one, the rest ``specviz.prompts.gen``'s templated ones
    (the held-out split of both when ``heldout``); prefix-stable like both. Once the varied
    prompts run out (about 4,000 for training), the rest are templated."""
    from specviz.prompts.gen import heldout_prompts, training_prompts

    varied = varied_prompts(n // every, seed, heldout, short_ok=True)  # all there are, if fewer
    templated = (heldout_prompts if heldout else training_prompts)(n - len(varied), seed)
    it_v, it_t = iter(varied), iter(templated)
    return [next(it_v) if i % every == every - 1 and i // every < len(varied) else next(it_t) for i in range(n)]
