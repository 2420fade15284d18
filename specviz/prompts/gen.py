"""Diverse built-in prompts for distilling a draft: combinatorial, seeded, with a disjoint held-out split.

A prompt = a task template (chat, explanation, code, summarization, lists, rewriting, creative,
advice, reasoning, email) filled from slot lists (topics, activities, code tasks, passages...),
plus an optional format hint. The *training* split draws its slots from one set of lists; the
*held-out* split from different lists (``_HELDOUT``), so no held-out prompt shares a topic,
activity, code task or passage subject with any training prompt. ``freeform_prompts()`` are
hand-written, not templated: a second, harder held-out set (the template-overfitting check).

    training_prompts(n, seed) -> n distinct training prompts (thousands exist)
    heldout_prompts(n, seed)  -> n distinct held-out prompts
"""

from __future__ import annotations

import random

# ---- slot lists: training ---------------------------------------------------------------------

_TRAIN = {
    "topic": """photosynthesis; black holes; the water cycle; volcanoes; plate tectonics; the immune system;
    vaccines; antibiotics; DNA replication; climate change; renewable energy; solar panels; wind turbines;
    nuclear fission; electric cars; the internet; email; search engines; databases; cloud computing;
    machine learning; neural networks; encryption; blockchain; the stock market; inflation; interest rates;
    supply and demand; credit scores; compound interest; the Roman Empire; the French Revolution;
    the printing press; the Renaissance; ancient Egypt; the Silk Road; the Cold War; the Moon landing;
    democracy; the United Nations; coffee; chocolate; bread baking; fermentation; composting; beekeeping;
    coral reefs; rainforests; deserts; glaciers; earthquakes; hurricanes; tides; rainbows; lightning;
    magnets; gravity; friction; sound waves; the speed of light; atoms; chemical bonds; acids and bases;
    the periodic table; the human heart; sleep; memory; dreams; exercise; nutrition; vitamins; meditation;
    stress; public speaking; time management; remote work; job interviews; resumes; negotiation;
    leadership; teamwork; chess; football; the Olympic Games; jazz; classical music; the guitar;
    photography; painting; poetry; novels; Shakespeare; mythology; volunteering; recycling; gardening;
    houseplants; dogs; cats; birds migrating; whales; bees; ants; dinosaurs; evolution; fossils;
    telescopes; Mars; the solar system; satellites; rockets; airplanes; trains; bridges; skyscrapers;
    3D printing; robots; smartphones; batteries; Wi-Fi; GPS; spreadsheets; version control;
    open source software; operating systems; compilers; video games; virtual reality; social media;
    online privacy; passwords; phishing; budgeting; saving for retirement; renting an apartment;
    learning a language; study habits; libraries; museums; tea; pasta; spices; the olive tree; rice farming""",
    "activity": """learn to cook; start running; save money each month; write a cover letter; grow tomatoes;
    learn Python; prepare for an exam; plan a trip to Japan; organize a small office; train a puppy;
    make new friends in a new city; start a podcast; improve my handwriting; read more books;
    sleep better; reduce screen time; pick a laptop; paint a room; fix a flat bike tire; learn to swim;
    host a dinner party; keep a journal; give feedback to a coworker; ask for a raise; speak more clearly;
    learn chess openings; build a birdhouse; start a vegetable garden; stay focused while studying;
    clean my kitchen faster; plan a wedding on a budget; move to a new apartment; learn to draw portraits;
    write a short story; run a team meeting; back up my photos; set up a home network; choose a bike""",
    "code_task": """reverses a string; checks whether a number is prime; returns the n-th Fibonacci number;
    counts the vowels in a string; finds the largest element in a list; removes duplicates from a list;
    merges two sorted lists; checks whether a string is a palindrome; computes the factorial of n;
    sorts a list of dictionaries by a key; reads a text file and counts its words; converts Celsius to Fahrenheit;
    flattens a nested list; returns the second largest number; computes the average of a list;
    capitalizes every word in a sentence; checks if two strings are anagrams; generates a random password;
    implements binary search; implements bubble sort; counts how often each word appears;
    validates an email address; converts a decimal number to binary; finds the greatest common divisor;
    rotates a list by k positions; transposes a matrix; parses a date string; sums the digits of a number;
    finds all even numbers in a list; implements a stack class; implements a queue with two stacks""",
    "audience": """a ten-year-old; a beginner; a high school student; a busy manager; a curious adult;
    an engineer; my grandmother""",
    "thing": """tips; facts; common mistakes; benefits; questions to ask; key terms; myths; examples;
    pros and cons; steps""",
    "form": """short poem; haiku; four-line rhyme; short story; fable; dialogue between two friends;
    product description; diary entry; motivational speech; limerick""",
    "recipient": """my manager; a new client; my landlord; the school principal; a colleague; my team;
    a customer; a professor; my neighbor""",
    "subject": """a delayed project; a meeting next week; a broken heater; a job offer; a thank-you for help;
    a change of schedule; a request for a day off; a late invoice; an upcoming holiday""",
    "style": """more formal; more friendly; shorter; simpler; more persuasive; more polite; more exciting""",
    "place": """Lisbon; Nairobi; Osaka; Toronto; Melbourne; a small village in Norway; Buenos Aires; Cairo""",
    "person": """the mayor; a local teacher; a young scientist; the company's founder; a retired nurse;
    a farmer""",
}

# ---- slot lists: held-out (disjoint from training on every list that names content) -------------

_HELDOUT = {
    "topic": """the Great Wall of China; sourdough; penguins; quantum computing; the Amazon river;
    origami; the stock exchange in Tokyo; hydroelectric dams; jellyfish; the Industrial Revolution;
    tornadoes; mushrooms; the violin; submarines; the Byzantine Empire; caffeine; lighthouses;
    typography; honey; the planet Venus; electric guitars; cheese making; sea turtles; the metric system;
    solar eclipses; paper money; the human eye; maple syrup; wolves; hot air balloons; the Vikings;
    microplastics; bonsai trees; the Eiffel Tower; recursion; spam filters; vertical farming;
    the Richter scale; carbon dating; ballet""",
    "activity": """learn to juggle; cut down on sugar; prepare for a marathon; declutter my closet;
    learn sign language; brew better coffee at home; plan a camping trip; negotiate rent;
    teach my kid to ride a bike; write a wedding toast; get better at chess endgames; care for a cactus""",
    "code_task": """counts the lines in a file that contain a given word; returns the longest word in a sentence;
    checks whether a year is a leap year; computes the median of a list; merges two dictionaries;
    converts a Roman numeral to an integer; finds the first non-repeating character;
    chunks a list into groups of size n; computes the dot product of two vectors; reverses the words in a sentence""",
    "audience": """a new employee; a retired teacher; a software developer; a child who loves dinosaurs""",
    "thing": """fun facts; warning signs; rules of thumb; surprising statistics""",
    "form": """sonnet; bedtime story; short play scene; advertisement jingle""",
    "recipient": """the hiring committee; my book club; the city council; a hotel manager""",
    "subject": """a lost package; a volunteering opportunity; a noise complaint; a new product launch""",
    "style": """more playful; more concise; more academic""",
    "place": """Reykjavik; Santiago; Hanoi; Marrakesh""",
    "person": """a museum curator; the team captain; a local baker""",
}


def _lists(raw: dict) -> dict[str, list[str]]:
    return {k: [s.strip() for s in v.split(";") if s.strip()] for k, v in raw.items()}


# ---- task templates ---------------------------------------------------------------------------

LANGUAGES = ["Python", "JavaScript", "Java", "C", "C++", "Go", "Rust", "TypeScript", "Ruby", "Bash"]

TEMPLATES = {
    "chat": [
        "What is {topic}?", "Tell me something interesting about {topic}.", "Why do people care about {topic}?",
        "I'm curious about {topic}. Where should I start?", "What are common misconceptions about {topic}?",
        "hey, quick question - what's the deal with {topic}?", "Is {topic} important? Why or why not?",
        "What would the world be like without {topic}?",
    ],
    "explanation": [
        "Explain {topic} to {audience}.", "How does {topic} work?", "Describe the history of {topic} briefly.",
        "Explain {topic} in {n} sentences.", "Give a simple explanation of {topic} with an analogy.",
        "What is the science behind {topic}?", "Compare {topic} and {topic2}.",
    ],
    "code": [
        "Write a {lang} function that {code_task}.", "In {lang}, how do I write code that {code_task}?",
        "Write a {lang} program that {code_task}, with comments.",
        "Show me a short {lang} example of a function that {code_task}, then explain it.",
        "Can you write a function that {code_task}? Use {lang}.",
    ],
    "summarization": [
        "Summarize the following text in one sentence:\n\n{passage}",
        "Summarize this in three bullet points:\n\n{passage}", "What is the main point of this passage?\n\n{passage}",
        "Write a headline for this news story:\n\n{passage}", "TL;DR:\n\n{passage}",
    ],
    "lists": [
        "List {n} {thing} about {topic}.", "Give me {n} tips to {activity}.", "Name {n} {thing} related to {topic}.",
        "What are {n} steps to {activity}?", "Make a checklist for someone who wants to {activity}.",
    ],
    "rewriting": [
        "Rewrite this sentence to be {style}: \"{sentence}\"", "Fix the spelling: \"{bad_sentence}\"",
        "Paraphrase the following: {sentence}", "Make this text {style}:\n\n{passage}",
        "Turn this into a question: \"{sentence}\"",
    ],
    "creative": [
        "Write a {form} about {topic}.", "Write a {form} set in {place}.", "Write a {form} about someone trying to {activity}.",
    ],
    "advice": [
        "How can I {activity}?", "What should I know before I {activity}?", "I want to {activity}. Any advice?",
        "What is the best way to {activity} if I only have a little time?",
    ],
    "email": [
        "Write an email to {recipient} about {subject}.", "Draft a short message to {recipient} regarding {subject}.",
        "Write a polite note to {recipient} about {subject}, under 100 words.",
    ],
}

HINTS = ["", "", "", " Be concise.", " Answer in one paragraph.", " Use bullet points.", " Keep it short.",
         " Explain step by step.", " Please be detailed."]

_SENTENCES_TRAIN = [
    "In {year}, a team in {place} began a new study of {topic}.",
    "{Person} said the first results were surprising.",
    "The project cost about {a} million dollars and took {b} years.",
    "Many residents of {place} had never heard of {topic} before.",
    "Critics argued that the money could have been spent elsewhere.",
    "Supporters say {topic} could change how people live and work.",
    "A report published last month found that interest in {topic} has doubled.",
    "{Person} plans to present the findings at a conference next spring.",
    "Local schools have started short courses about {topic}.",
    "The next phase will focus on making the work cheaper and easier to repeat.",
]
_SENTENCES_HELDOUT = [
    "Visitors to {place} can now join free weekend tours about {topic}.",
    "{Person} has spent {b} years collecting old records on {topic}.",
    "Attendance rose by {a} percent after the tours were announced in {year}.",
    "Some neighbours worry about traffic and noise on busy days.",
    "Organisers hope the tours will inspire young people to study {topic}.",
    "A small exhibition will open in the town hall next month.",
]
# reasoning prompts have no content slots, so the splits use different templates
_REASONING_TRAIN = [
    "If a train travels {a} km in {b} hours, what is its average speed? Explain.",
    "What is {a} times {b}? Show your work.", "I have {a} apples and give away {b}. How many are left?",
    "A shop sells pens for {b} dollars each. How much do {a} pens cost?",
    "Is {a} a prime number? Explain your reasoning.",
]
_REASONING_HELDOUT = [
    "A recipe needs {b} eggs per cake. How many eggs do I need for {a} cakes?",
    "What is {a} divided by {b}, rounded to two decimals?",
    "A bus leaves every {b} minutes. How many buses leave in {a} minutes?",
]

TRAIN_SLOTS = {**_lists(_TRAIN), "sentences": _SENTENCES_TRAIN, "reasoning": _REASONING_TRAIN}
HELDOUT_SLOTS = {**_lists(_HELDOUT), "sentences": _SENTENCES_HELDOUT, "reasoning": _REASONING_HELDOUT}



def _passage(rng: random.Random, s: dict) -> str:
    picks = rng.sample(s["sentences"], rng.randint(3, 5))
    fill = {"topic": rng.choice(s["topic"]), "place": rng.choice(s["place"]),
            "Person": rng.choice(s["person"]).capitalize(), "year": rng.randint(1990, 2024),
            "a": rng.randint(2, 90), "b": rng.randint(2, 9)}
    return " ".join(p.format(**fill) for p in picks)


def _typos(rng: random.Random, sentence: str) -> str:
    """Swap two adjacent letters in two longer words: a sentence to correct."""
    words = sentence.split()
    for i in rng.sample(range(len(words)), min(2, len(words))):
        w = words[i]
        if len(w) > 4:
            j = rng.randrange(1, len(w) - 2)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def _fill(rng: random.Random, kind: str, template: str, s: dict) -> str:
    topic, topic2 = rng.sample(s["topic"], 2)
    sentence = _passage(rng, s).split(". ")[0].rstrip(".") + "."
    values = {
        "topic": topic, "topic2": topic2, "activity": rng.choice(s["activity"]), "code_task": rng.choice(s["code_task"]),
        "audience": rng.choice(s["audience"]), "thing": rng.choice(s["thing"]), "form": rng.choice(s["form"]),
        "recipient": rng.choice(s["recipient"]), "subject": rng.choice(s["subject"]), "style": rng.choice(s["style"]),
        "place": rng.choice(s["place"]), "lang": rng.choice(LANGUAGES), "n": rng.randint(3, 7),
        "a": rng.randint(2, 120), "b": rng.randint(2, 12), "passage": _passage(rng, s) if "{passage}" in template else "",
        "sentence": sentence, "bad_sentence": _typos(rng, sentence),
    }
    text = template.format(**values)
    if kind not in ("summarization", "rewriting", "reasoning"):
        text += rng.choice(HINTS)
    return text


def _generate(n: int, seed: int, slots: dict) -> list[str]:
    rng = random.Random(seed)
    templates = {**TEMPLATES, "reasoning": slots["reasoning"]}
    kinds = sorted(templates)
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct prompts (space exhausted)")
        kind = kinds[tries % len(kinds)]  # round-robin over task kinds: balanced until one runs dry
        text = _fill(rng, kind, rng.choice(templates[kind]), slots)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out  # prefix-stable: the first n of a longer draw are the same prompts (resumable data)


def training_prompts(n: int, seed: int = 0) -> list[str]:
    """n distinct training prompts, a balanced mix of task kinds, reproducible from seed;
    training_prompts(n) is a prefix of training_prompts(m) for m > n."""
    return _generate(n, seed, TRAIN_SLOTS)


def heldout_prompts(n: int, seed: int = 0) -> list[str]:
    """n distinct held-out prompts: slots from lists disjoint from training's."""
    return _generate(n, 10_000 + seed, HELDOUT_SLOTS)


FREEFORM = [
    "My sourdough starter smells like nail polish remover. Is it dead?",
    "Can you help me understand why my houseplant's leaves are turning yellow at the edges?",
    "Write a limerick about a cat who hates Mondays.",
    "What's the difference between a virus and a bacterium?",
    "I keep procrastinating on my thesis. What should I do tonight to get started?",
    "def merge_intervals(intervals):\n    # merge overlapping intervals, return sorted list\n",
    "Explain what a REST API is, like I'm new to programming.",
    "Who was Ada Lovelace and why is she remembered?",
    "Translate 'Where is the train station?' into Spanish, French and German.",
    "Give me a packing list for a three-day hiking trip in autumn.",
    "Why do onions make people cry?",
    "Write a SQL query that finds the five customers who spent the most last year.",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "What are some good questions to ask at the end of a job interview?",
    "Describe a sunset over the ocean without using the words 'orange' or 'red'.",
    "How do noise-cancelling headphones work?",
    "Plan a simple vegetarian dinner menu for four people.",
    "What is the time complexity of quicksort, and when is it slow?",
    "Write a short, friendly reminder to my roommate about doing the dishes.",
    "Why is it hotter in summer than in winter?",
    "Suggest three names for a small bakery that specializes in cinnamon rolls.",
    "How should I prepare for my first marathon if I have six months?",
    "Explain the difference between 'affect' and 'effect' with examples.",
    "Write a bash one-liner that counts the files in a directory, recursively.",
]


def freeform_prompts(n: int | None = None) -> list[str]:
    """Hand-written prompts in styles no template produces (a harder held-out set)."""
    return list(FREEFORM[: n or len(FREEFORM)])
