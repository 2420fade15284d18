"""Workloads whose answers are mostly in the prompt: edit a given function, rewrite a given passage.

The answer repeats the text it was given with a few changes, so a draft that copies from the context
(prompt lookup, suffix decoding) accepts long runs. Written for specviz's prompt sets (sets.py); beside
chat, where the answer is new text, they show when speculation pays and when it does not.
"""

from __future__ import annotations

_RETURN = "Return the whole function, with no explanation."

EDIT_CODE = [
    "Rename the function `calc` to `average_price` everywhere. " + _RETURN + "\n\n"
    "def calc(prices):\n"
    "    if not prices:\n"
    "        return 0.0\n"
    "    total = 0.0\n"
    "    for p in prices:\n"
    "        total += p\n"
    "    return total / len(prices)\n",

    "Add a one-line docstring to this function. " + _RETURN + "\n\n"
    "def clamp(value, low, high):\n"
    "    if value < low:\n"
    "        return low\n"
    "    if value > high:\n"
    "        return high\n"
    "    return value\n",

    "Fix the bug: the loop skips the last item of the list. " + _RETURN + "\n\n"
    "def count_vowels(words):\n"
    "    count = 0\n"
    "    for i in range(len(words) - 1):\n"
    "        for ch in words[i].lower():\n"
    "            if ch in 'aeiou':\n"
    "                count += 1\n"
    "    return count\n",

    "Rename the variable `d` to `inventory` everywhere. " + _RETURN + "\n\n"
    "def restock(d, item, amount):\n"
    "    if item not in d:\n"
    "        d[item] = 0\n"
    "    d[item] += amount\n"
    "    if d[item] > 100:\n"
    "        d[item] = 100\n"
    "    return d\n",

    "Add type hints to the parameters and the return value. " + _RETURN + "\n\n"
    "def join_names(first, last, middle):\n"
    "    parts = [first]\n"
    "    if middle:\n"
    "        parts.append(middle)\n"
    "    parts.append(last)\n"
    "    return ' '.join(parts)\n",

    "Fix the bug: the function should return the largest number, not the smallest. " + _RETURN + "\n\n"
    "def largest(numbers):\n"
    "    best = numbers[0]\n"
    "    for n in numbers[1:]:\n"
    "        if n < best:\n"
    "            best = n\n"
    "    return best\n",

    "Rename the parameter `s` to `sentence` and add a docstring. " + _RETURN + "\n\n"
    "def title_case(s):\n"
    "    words = s.split()\n"
    "    fixed = []\n"
    "    for w in words:\n"
    "        fixed.append(w[:1].upper() + w[1:].lower())\n"
    "    return ' '.join(fixed)\n",

    "Fix the bug: a leap year divisible by 400 is reported as not a leap year. " + _RETURN + "\n\n"
    "def is_leap(year):\n"
    "    if year % 100 == 0:\n"
    "        return False\n"
    "    if year % 4 == 0:\n"
    "        return True\n"
    "    return False\n",

    "Rename the function `f` to `celsius_to_fahrenheit` and the variable `x` to `celsius`. " + _RETURN + "\n\n"
    "def f(x):\n"
    "    result = x * 9 / 5 + 32\n"
    "    return round(result, 1)\n",
]

REWRITE_TEXT = [
    "Fix the spelling mistakes in this paragraph and change nothing else:\n\n"
    "The libary opens at nine in the morning and closes at six in the evning. Visitors can borow up to "
    "five books at a time, and the books must be returned within three weeks.",

    "Rewrite this paragraph in the past tense, keeping every other word the same:\n\n"
    "Maria walks to the market every morning. She buys fresh bread and a bag of apples. Then she sits "
    "by the river and reads the newspaper until noon.",

    "Fix the spelling mistakes in this note and change nothing else:\n\n"
    "Please remeber to water the plants on Tuesday and Friday. The small cactus by the window only needs "
    "water once a month, so do not give it to much.",

    "Rewrite this paragraph in the present tense, keeping every other word the same:\n\n"
    "The train left the station at eight. The passengers watched the fields go by, and a small boy "
    "counted the cows he saw. By ten the train reached the coast.",

    "Fix the spelling mistakes in this email and change nothing else:\n\n"
    "Dear Tom, thank you for your quick reply. I have atached the report we discused yesterday. Let me "
    "know if you need anything else before the meeting on Monday.",

    "Rewrite this paragraph in the future tense, keeping every other word the same:\n\n"
    "The team finishes the bridge in May. Engineers test the steel cables, and the city opens the bridge "
    "to cars in June. Thousands of people cross it on the first day.",

    "Fix the spelling mistakes in this recipe step and change nothing else:\n\n"
    "Heat the oven to 180 degrees. Mix the flour, sugar and butter in a large bowl untill the mixture "
    "looks like breadcrumbs, then add the eggs one at a time and stir genlty.",

    "Rewrite this paragraph in the past tense, keeping every other word the same:\n\n"
    "The cat climbs onto the roof and waits for the birds. When the wind blows, it hides behind the "
    "chimney. At dusk it jumps down and runs home for dinner.",
]
