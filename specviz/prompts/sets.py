"""Built-in prompt sets for the app and benchmarks: one list of prompts per workload.

The sets differ in how much a prompt-lookup (n-gram) draft can copy: chat answers are fresh
text (little to copy), code completion repeats identifiers, and the summarize/rewrite set asks
the model to reproduce a passage it was given, where n-gram drafts accept long runs. The predictable
sets (editing.py, reformat.py: edit code, rewrite text, reformat data, repeated answers) are where
model-free drafts that copy and learn (suffix decoding) pay most; chat is where they pay least.
"""

from __future__ import annotations

from specviz.prompts.editing import EDIT_CODE, REWRITE_TEXT
from specviz.prompts.reformat import MULTI_TURN, REFORMAT_DATA

CHAT = [
    "Explain speculative decoding in two sentences.",
    "What is the capital of France, and why is it famous?",
    "Give three tips for writing clear technical documentation.",
    "Why is the sky blue? Answer briefly.",
    "Describe how a hash table works to a beginner.",
    "What are the pros and cons of electric cars?",
    "Write a haiku about autumn leaves.",
    "How does a CPU cache speed up programs?",
]

CODE = [
    "Complete this Python function:\ndef fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Complete this Python function:\ndef is_prime(n: int) -> bool:\n",
    "Write a Python class Stack with push, pop, peek and is_empty methods.",
    "Complete this JavaScript function:\nfunction reverseString(str) {\n",
    "Write a Python function that reads a CSV file and returns the sum of the column 'amount'.",
    "Complete this SQL query that counts orders per customer:\nSELECT customer_id,",
]

_PASSAGE_1 = (
    "The Industrial Revolution began in Great Britain in the late eighteenth century. "
    "Steam engines powered new factories, and cities grew quickly as workers moved from farms. "
    "Railways connected markets, and the price of goods such as cloth and iron fell sharply."
)
_PASSAGE_2 = (
    "Photosynthesis is the process by which green plants use sunlight to make food. "
    "Chlorophyll in the leaves absorbs light, which drives the conversion of carbon dioxide "
    "and water into glucose and oxygen. The oxygen is released into the air."
)
_PASSAGE_3 = (
    "The meeting is moved from Tuesday to Thursday at 10 am in room 204. "
    "Please bring the quarterly report, the updated budget and your project timeline. "
    "Lunch will be provided after the meeting."
)

SUMMARIZE = [
    f"Repeat the following passage exactly, then summarize it in one sentence:\n\n{_PASSAGE_1}",
    f"Rewrite this passage in the same words but as a bulleted list:\n\n{_PASSAGE_2}",
    f"Copy this note and then list the items to bring:\n\n{_PASSAGE_3}",
    f"Summarize this passage, quoting its key sentences:\n\n{_PASSAGE_1}",
    f"Repeat this text word for word:\n\n{_PASSAGE_2}",
    f"Rewrite this email politely, keeping every detail:\n\n{_PASSAGE_3}",
]

PROMPT_SETS: dict[str, list[str]] = {
    "chat questions": CHAT,
    "code completion": CODE,
    "summarize / rewrite (copy-heavy: n-gram drafts shine)": SUMMARIZE,
    "edit code (rename, docstring, fix a bug: predictable, suffix drafts shine)": EDIT_CODE,
    "rewrite text (spelling, tense: predictable)": REWRITE_TEXT,
    "reformat data (CSV <-> JSON: predictable)": REFORMAT_DATA,
    "repeated answers (multi-turn: predictable)": MULTI_TURN,
}

# Short names for the command line (--prompt-set NAME) and scripts: name -> the set's title above.
SET_NAMES = dict(zip(["chat", "code", "copy", "edit-code", "rewrite-text", "reformat-data", "multi-turn"],
                     PROMPT_SETS))


def prompt_set(name: str) -> list[str]:
    """A built-in set's prompts by its short name (SET_NAMES) or its title (PROMPT_SETS)."""
    return list(PROMPT_SETS[SET_NAMES.get(name, name)])


def to_text(prompts: list[str]) -> str:
    """One prompt per line for a text box; newlines inside a prompt are written as \\n."""
    return "\n".join(p.replace("\\", "\\\\").replace("\n", "\\n") for p in prompts)


def from_text(text: str) -> list[str]:
    """Inverse of :func:`to_text`: one prompt per line, \\n back to a newline (blank lines kept,
    so the run's validation can name an empty prompt; trailing blank lines are dropped)."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return [_unescape(line) for line in lines]


def _unescape(line: str) -> str:
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in "n\\":
            out.append("\n" if line[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)
