"""Workloads whose answers repeat what was said before: reformat given data (CSV <-> JSON), and conversations
whose last answer repeats an earlier one.

The values (names, numbers) of a reformatted table are in the prompt and its keys repeat on every row;
a conversation's repeated answer is in its own transcript. Drafts that copy from the context accept
long runs here; the suffix draft also learns, across requests, the structure every answer shares.
"""

from __future__ import annotations

REFORMAT_DATA = [
    "Convert this CSV to a JSON array of objects, one object per row. Reply with the JSON only.\n\n"
    "name,city,age\nAlice,Paris,34\nBob,Berlin,27\nChen,Madrid,45\nDina,Rome,31",

    "Convert this CSV to a JSON array of objects, one object per row. Reply with the JSON only.\n\n"
    "product,price,stock\npencil,0.5,120\nnotebook,2.25,40\neraser,0.75,85\nruler,1.1,60",

    "Convert this JSON to CSV with a header row. Reply with the CSV only.\n\n"
    '[{"country": "Norway", "capital": "Oslo", "population": 5.5},\n'
    ' {"country": "Kenya", "capital": "Nairobi", "population": 54.0},\n'
    ' {"country": "Chile", "capital": "Santiago", "population": 19.6}]',

    "Convert this CSV to a JSON array of objects, one object per row. Reply with the JSON only.\n\n"
    "date,temperature,rain\n2024-03-01,12,0\n2024-03-02,9,4\n2024-03-03,11,1\n2024-03-04,14,0",

    "Convert this JSON to CSV with a header row. Reply with the CSV only.\n\n"
    '[{"id": 1, "title": "Dune", "author": "Herbert"},\n'
    ' {"id": 2, "title": "Emma", "author": "Austen"},\n'
    ' {"id": 3, "title": "Ulysses", "author": "Joyce"},\n'
    ' {"id": 4, "title": "Beloved", "author": "Morrison"}]',

    "Convert this CSV to a JSON array of objects, one object per row. Reply with the JSON only.\n\n"
    "team,wins,losses\nHawks,10,4\nOwls,7,7\nFoxes,12,2\nBears,3,11",

    "Convert this JSON to CSV with a header row. Reply with the CSV only.\n\n"
    '[{"planet": "Mercury", "moons": 0, "rings": false},\n'
    ' {"planet": "Mars", "moons": 2, "rings": false},\n'
    ' {"planet": "Saturn", "moons": 146, "rings": true}]',

    "Convert this CSV to a JSON array of objects, one object per row. Reply with the JSON only.\n\n"
    "employee,department,start_year\nGrace,Finance,2015\nIvan,Support,2019\nLena,Research,2012\nOmar,Sales,2021",
]


def _turns(*pairs: str) -> str:
    """A transcript: alternate user and assistant turns, then the last user turn."""
    who = ("User", "Assistant")
    return "\n".join(f"{who[i % 2]}: {text}" for i, text in enumerate(pairs))


_CONTINUE = "Continue this conversation with the assistant's next answer.\n\n"

MULTI_TURN = [
    _CONTINUE + _turns(
        "What do I need for a picnic?",
        "You need a blanket, sandwiches, fruit, water, napkins and a bag for the rubbish.",
        "Thanks. Can you repeat the list, and add sun cream at the end?"),
    _CONTINUE + _turns(
        "How do I make a cup of tea?",
        "Boil the water, put a tea bag in a cup, pour the water over it, wait three minutes, then remove the bag.",
        "Sorry, I missed that. Say the steps again, exactly as before."),
    _CONTINUE + _turns(
        "Name the planets in order from the Sun.",
        "Mercury, Venus, Earth, Mars, Jupiter, Saturn, Uranus and Neptune.",
        "Please list them again, one per line."),
    _CONTINUE + _turns(
        "What are the opening hours of the museum?",
        "The museum is open from 9 am to 5 pm on weekdays and from 10 am to 4 pm on weekends.",
        "And the opening hours again, please? I want to write them down."),
    _CONTINUE + _turns(
        "Give me a short packing list for a beach trip.",
        "Swimsuit, towel, sunglasses, sun cream, a hat, water and a good book.",
        "Great. Repeat the same list, but put the water first."),
    _CONTINUE + _turns(
        "What is the recipe for pancakes?",
        "Mix 200 g of flour, 2 eggs, 300 ml of milk and a pinch of salt, then fry ladlefuls in a hot buttered pan.",
        "Could you give me the recipe one more time?"),
    _CONTINUE + _turns(
        "Tell me the rules of the library.",
        "Be quiet in the reading rooms, return books within three weeks, do not eat near the shelves, "
        "and keep your card with you.",
        "Repeat the rules, word for word, for my friend who just arrived."),
    _CONTINUE + _turns(
        "What are the primary colours?",
        "The primary colours of paint are red, yellow and blue.",
        "Say that again, and then name one colour you get by mixing two of them."),
]
