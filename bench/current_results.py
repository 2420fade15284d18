"""The "Current results" section at the top of BENCHMARKS.md, made from the result files stored in
bench/results/ and nothing else: one table per question, every row with its commit, machine, command
and spread over rounds. A question with no stored result says so.

    .venv/bin/python bench/current_results.py            # print the section
    .venv/bin/python bench/current_results.py --write    # replace it in BENCHMARKS.md
    .venv/bin/python bench/current_results.py --check    # exit 1 when BENCHMARKS.md differs from it

Ratios are the result files' own medians of per-round ratios; a spread is the lowest and highest
per-round ratio, computed here from the per-round tokens/s each file logs (to one decimal), or read
from the file where it lists them. To add a newer result: store its files under bench/results/, add
its rows to SOURCES below, run --write.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"
BEGIN = "<!-- current results: made by bench/current_results.py from bench/results/; do not edit by hand -->"
END = "<!-- end of current results -->"

EPYC = "2-core AMD EPYC, idle"
XEON = "2-core Intel Xeon (AMX), idle"
FREEFORM = "bench/results/continued-draft-2026-12-01/freeform.jsonl"
TOKEN = "specviz/assets/draft-SmolLM2-135M-Instruct"
FEATURE = "specviz/assets/feature-draft-2l-SmolLM2-135M-Instruct"

# Commands as the result folders' scripts ran them (those scripts are in git history). {draft} paths
# were the assets named, or a new draft's folder then copied into the asset.
COMMANDS = {
    "drafts": f"bench/drafts.py --prompts {FREEFORM} --rounds 3 --batch-size B --arms token:{TOKEN}:K,...",
    "peer-b1": f"bench/drafts.py --batch-size 1 --rounds 5 --arms shipped:{TOKEN}:1,shipped:{TOKEN}:2 --peer {TOKEN}:4",
    "peers-b1": f"bench/drafts.py --batch-size 1 --rounds 4 --arms shipped:{TOKEN}:1,shipped:{TOKEN}:2 "
                f"--peer {TOKEN}:1,{TOKEN}:2,{TOKEN}:4",
    "continuous": "specviz calibrate --dtype bfloat16 --device cpu --batch-sizes 1,2,4,8 --k-max 4, then "
                  "bench/continuous.py --requests 32 --batch-size 8 --max-new-tokens 64 --rounds 5 --ks 1,2",
    "vllm": 'bench/vllm_peer.py --modes "default/1>none,ngram" --slots 1,8:32 --rounds 3 --num-prompts 4 --max-new-tokens 32',
    "vllm-pair": 'bench/vllm_peer.py --modes "default/1>none,default/2>none" --slots 1,8 --rounds 3 --num-prompts 4 '
                 "--max-new-tokens 32",
    "llamacpp-b1": "specviz bench --peer llamacpp --prompts bench/results/llamacpp-peer-2026-12-06/prompts.jsonl "
                   "--max-new-tokens 96 --repeats 2 --dtype bfloat16 --batch-size 1 --peer-weights bf16,q4_1 "
                   "--peer-modes regular,lookup,draft --json",
    "llamacpp-b8": "specviz bench --peer llamacpp --prompts bench/results/llamacpp-peer-2026-12-06/prompts.jsonl "
                   "--max-new-tokens 96 --repeats 2 --dtype bfloat16 --batch-size 8 --peer-weights bf16,q4_1 "
                   "--peer-modes regular --json",
    "llamacpp-fused-b1": "specviz bench --peer llamacpp --prompts bench/results/llamacpp-peer-2026-12-06/prompts.jsonl "
                         "--max-new-tokens 96 --repeats 2 --dtype bfloat16 --batch-size 1 --peer-weights bf16 "
                         "--peer-modes regular --json",
    "llamacpp-fused-b8": "the same with --batch-size 8",
    "llamacpp-packed-b1": "llamacpp-fused-b1 with --repeats 3",
    "llamacpp-blocks": "llamacpp-fused-b1 with --repeats 3, and again with --batch-size 8",
    "llamacpp-decoder": "llamacpp-fused-b1 with --repeats 3, and again with --batch-size 8",
    "bf16-kernel": "bench/bf16_kernel.py --rounds 3 --max-new-tokens 64",
    "auto-dtype": "bench/auto_dtype.py --rounds 3",
    "suffix": "bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96",
    "suffix-goodput": "specviz calibrate --draft ngram --dtype bfloat16 --device cpu --batch-sizes 1,2,4,8 --k-max 8, then "
                      'bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96 --batch-sizes 8,1 --no-chat '
                      '--arms "ngram;suffix;suffix, k = 12;suffix, k = 12, goodput"',
    "suffix-4x3": "specviz calibrate --draft ngram --dtype bfloat16 --device cpu --batch-sizes 1,2,4,8 --k-max 8, then "
                  'bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96 --batch-sizes 1,8 --no-chat '
                  '--arms "ngram;suffix;suffix, k = 12;suffix, k = 12, goodput"',
    "hybrid-depth": 'bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96 --batch-sizes 1,8 --arms '
                    '"suffix, k = 12;default;default+suffix;default+suffix, suffix to k" (at that commit the second '
                    'hybrid arm is today\'s default+suffix, the first default+suffix:12)',
    "suffix-goodput-b8": 'bench/suffix_hybrid.py --rounds 2 --max-new-tokens 96 --batch-sizes 8 --no-chat '
                         '--arms "suffix;suffix, k = 12;suffix, k = 12, goodput" (after suffix-goodput\'s calibration)',
    "trees": f"bench/trees.py --prompts {FREEFORM} --batch-size 1 --rounds 3 --drafts token:{TOKEN},old:OLD,wide:{FEATURE} "
             "--chains 2 --trees 3:2:6,3:4:12",
}


# ---- reading the stored files --------------------------------------------------------------------

def rounds_and_table(path: Path) -> tuple[list[dict[str, float]], dict[str, dict[str, str]]]:
    """A drafts.py / trees.py log: its 'round i: arm tok/s, ...' lines and its markdown table by arm."""
    rounds, table, header = [], {}, None
    for line in path.read_text().splitlines():
        if m := re.match(r"round \d+(?:/\d+)?: (.*)$", line):
            rounds.append({name: float(v) for name, v in (item.rsplit(" ", 1) for item in m.group(1).split(", "))})
        elif line.startswith("| arm |"):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif header and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            table[cells[0]] = dict(zip(header, cells))
    return rounds, table


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def arm_row(path: Path, arm: str, vs: str = "regular") -> dict:
    """One arm of a drafts.py / trees.py log against another (regular decoding, or a peer)."""
    rounds, table = rounds_and_table(path)
    per_round = [r[arm] / r[vs] for r in rounds]
    ratio = table[arm]["vs regular (median of per-round ratios)"] if vs == "regular" else f"{statistics.median(per_round):.2f}x"
    return {"ratio": ratio, "spread": spread(per_round), "rounds": len(rounds), "row": table[arm]}


def continuous_row(path: Path, arm: str) -> dict:
    arms = json.loads(path.read_text())
    a = arms[arm]
    return {"ratio": f"{a['ratio']:.2f}x", "spread": spread(a["ratios"]), "rounds": len(a["ratios"]),
            "acceptance": "–" if a["acceptance"] != a["acceptance"] else f"{a['acceptance']:.3f}",
            "p50": f"{a['latency_p50_s']:.1f} s", "tok_s": f"{a['tok_s']:.1f}"}


def vllm_rows(path: Path) -> list[dict]:
    """bench/vllm_peer.py's log: per setting, ours and vLLM's tokens/s and the per-round ratios."""
    rows, head, toks = [], None, {}
    for line in path.read_text().splitlines():
        if m := re.match(r"vLLM (\S+) .* vs ours: target (\S+), ours (.+), vLLM (.+), (\d+) requests through (\d+) (?:slots|lanes)", line):
            head, toks = m.groups(), {}
        elif m := re.match(r"(ours|vllm) +([\d.]+) ", line):
            toks[m.group(1)] = m.group(2)
        elif m := re.match(r"ours / vLLM tokens/s: ([\d.]+x) \(median of per-round ratios: ([\d., ]+)\)", line):
            per_round = [float(x) for x in m.group(2).split(", ")]
            rows.append({"version": head[0], "ours": head[2], "theirs": head[3], "requests": head[4], "lanes": head[5],
                         "ratio": m.group(1), "spread": spread(per_round), "rounds": len(per_round),
                         "ours_tok_s": toks["ours"], "vllm_tok_s": toks["vllm"]})
    return rows


# ---- what is stored, question by question -------------------------------------------------------

def speculative_vs_regular() -> list[str]:
    runs = [  # (folder, log at B = 1, log at B = 8, commit)
        ("draft-tradeoffs-2026-12-07", "b{b}-after.txt", "ac15522"),
        ("feature-draft-continued3-2026-12-03", "drafts-b{b}.log", "a0d3a79"),
        ("feature-draft-continued3-2026-12-03", "confirm-b{b}.log", "26cb118"),
        ("feature-draft-natural2-2026-12-03", "drafts-b{b}.log", "not recorded"),
        ("feature-draft-wide-2026-12-03", "drafts-b{b}.log", "not recorded"),
    ]
    out = ["| B | k | vs regular (median) | spread over rounds | acceptance | rounds | stored in | commit | machine | command |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for b, k in ((1, 2), (8, 1)):
        for folder, log, commit in runs:
            path = RESULTS / folder / log.format(b=b)
            r = arm_row(path, f"token k={k}")
            out.append(f"| {b} | {k} | **{r['ratio']}** | {r['spread']} | {r['row']['acceptance rate']} | {r['rounds']} | "
                       f"`{path.relative_to(RESULTS)}` | {commit} | {EPYC} | drafts |")
    return out


def queue() -> list[str]:
    path = RESULTS / "continuous-2026-12-01-idle" / "continuous.json"
    out = ["| arm | tokens/s (median) | vs regular (median) | spread over rounds | acceptance | p50 latency | rounds | commit | "
           "machine | command |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in ("regular", "k=1", "k=2", "goodput"):
        r = continuous_row(path, arm)
        out.append(f"| {arm} | {r['tok_s']} | **{r['ratio']}** | {r['spread']} | {r['acceptance']} | {r['p50']} | "
                   f"{r['rounds']} | cd0505c | 2-core AMD EPYC, idle | continuous |")
    return out


def assisted_generate() -> list[str]:
    out = ["| arm (B = 1) | vs regular (median) | spread | ours (k = 1) over it, per-round median | spread | rounds | "
           "stored in | commit | machine | command |", "|---|---|---|---|---|---|---|---|---|---|"]
    for log in ("peer-b1.log", "peers-b1.log"):
        path = RESULTS / "cpu-draft-2026-11-30" / log
        _, table = rounds_and_table(path)
        for arm in [a for a in table if a.startswith("transformers")]:
            vs_reg, ours = arm_row(path, arm), arm_row(path, "shipped k=1", vs=arm)
            k = re.search(r"k=(\d+)", arm).group(1)
            out.append(f"| transformers' assisted generate, k = {k} | {vs_reg['ratio']} | {vs_reg['spread']} | "
                       f"**{ours['ratio']}** | {ours['spread']} | {ours['rounds']} | `{path.relative_to(RESULTS)}` | "
                       f"not recorded | {EPYC} | {path.stem} |")
    return out


def vllm_cpu() -> list[str]:
    out = ["| ours | vLLM-CPU | requests through lanes | ours tok/s | vLLM tok/s | ours / vLLM (median) | spread | rounds | "
           "commit | machine | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for folder, commit, command in (("vllm-peer-2026-12-01-head", "35e7cd8", "vllm"),
                                    ("vllm-peer-2026-12-01-default-pair", "e1b3c8e", "vllm-pair")):
        for r in vllm_rows(RESULTS / folder / "peer.log"):
            out.append(f"| {r['ours']} | {r['theirs']} ({r['version']}) | {r['requests']} through {r['lanes']} | "
                       f"{r['ours_tok_s']} | {r['vllm_tok_s']} | **{r['ratio']}** | {r['spread']} | {r['rounds']} | "
                       f"{commit} | {EPYC} | {command} |")
    return out


def llama_cpp() -> list[str]:
    """`bench --peer llamacpp --json`: every arm against our regular decoding in the same rounds."""
    out = ["| lanes | arm | tokens/s | decode tokens/s | vs ours regular (median) | spread | acceptance | rounds | "
           "commit | machine | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for folder, log, command, machine in (("llamacpp-peer-2026-12-07-greedy", "b1.json", "llamacpp-decoder", EPYC),
                                          ("llamacpp-peer-2026-12-07-greedy", "b8.json", "llamacpp-decoder", EPYC),
                                          ("llamacpp-peer-2026-12-07-decoder", "b1.json", "llamacpp-decoder", EPYC),
                                          ("llamacpp-peer-2026-12-07-decoder", "b8.json", "llamacpp-decoder", EPYC),
                                          ("llamacpp-peer-2026-12-07-blocks", "b1.json", "llamacpp-blocks", EPYC),
                                          ("llamacpp-peer-2026-12-07-blocks", "b8.json", "llamacpp-blocks", EPYC),
                                          ("llamacpp-peer-2026-12-07-packed", "b1.json", "llamacpp-packed-b1", EPYC),
                                          ("llamacpp-peer-2026-12-07-fused", "b1.json", "llamacpp-fused-b1", EPYC),
                                          ("llamacpp-peer-2026-12-07-fused", "b8.json", "llamacpp-fused-b8", EPYC),
                                          ("llamacpp-peer-2026-12-07", "b1.json", "llamacpp-b1", EPYC),
                                          ("llamacpp-peer-2026-12-07", "b8.json", "llamacpp-b8", EPYC)):
        j = json.loads((RESULTS / folder / log).read_text())
        commit = (RESULTS / folder / "commit.txt").read_text().strip()
        for name, a in j["arms"].items():
            acc = "–" if a["acceptance_rate"] is None else f"{a['acceptance_rate']:.3f}"
            out.append(f"| {j['lanes']} | {name} | {a['tokens_per_s']:.1f} | {a['decode_tokens_per_s']:.1f} | "
                       f"**{a['ratio_to_ours_regular']:.2f}x** | {spread(a['rounds_ratio'])} | {acc} | "
                       f"{len(a['rounds_ratio'])} | {commit} | {machine} | {command} |")
    return out


def bf16_kernel() -> list[str]:
    """bench/bf16_kernel.py --json: F.linear, our linear kernel alone and with the other steps fused,
    interleaved, per batch size and arm."""
    folder = "bf16-fused-2026-12-07"
    j = json.loads((RESULTS / folder / "b1-b8.json").read_text())
    commit = (RESULTS / folder / "commit.txt").read_text().strip()
    out = ["| B | arm | F.linear tok/s | kernel tok/s | fused tok/s | fused / F.linear | spread | fused / kernel | "
           "spread | rounds | commit | machine | command |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b, r in j["by_batch"].items():
        for arm in ("regular", f"k={j['k']}"):
            label = "regular" if arm == "regular" else f"default {arm}"
            med = {side: statistics.median(r["tok_s"][f"{side} {arm}"]) for side in ("plain", "kernel", "fused")}
            over_plain, over_kernel = r["ratios"][f"fused / plain, {arm}"], r["ratios"][f"fused / kernel, {arm}"]
            out.append(f"| {b} | {label} | {med['plain']:.1f} | {med['kernel']:.1f} | {med['fused']:.1f} | "
                       f"**{statistics.median(over_plain):.2f}x** | {spread(over_plain)} | "
                       f"**{statistics.median(over_kernel):.2f}x** | {spread(over_kernel)} | {len(over_plain)} | "
                       f"{commit} | {EPYC} | bf16-kernel |")
    return out


def auto_dtype() -> list[str]:
    """bench/auto_dtype.py --json: the default run and regular decoding in float32 and bfloat16, interleaved."""
    folder = "auto-dtype-2026-12-07"
    j = json.loads((RESULTS / folder / "b1-b8.json").read_text())
    commit = (RESULTS / folder / "commit.txt").read_text().strip()
    out = ["| B | arm | float32 tok/s | bfloat16 tok/s | bfloat16 / float32 (median) | spread | rounds | commit | "
           "machine | command |", "|---|---|---|---|---|---|---|---|---|---|"]
    for b, r in j["by_batch"].items():
        for arm, ratios in r["bf16_over_fp32"].items():
            label = "regular" if arm == "regular" else (f"default run (fp32: {j['drafts']['float32']}; "
                                                        f"bf16: {j['drafts']['bfloat16']}), k = 2")
            out.append(f"| {b} | {label} | {statistics.median(r['tok_s'][f'float32 {arm}']):.1f} | "
                       f"{statistics.median(r['tok_s'][f'bfloat16 {arm}']):.1f} | **{statistics.median(ratios):.2f}x** | "
                       f"{spread(ratios)} | {len(ratios)} | {commit} | {EPYC} | auto-dtype |")
    return out


def suffix_tables(path: Path) -> list[dict]:
    """bench/suffix_hybrid.py's output: one dict per table (workload, B, k, prompts) with its rows by arm."""
    tables = []
    for line in path.read_text().splitlines():
        if m := re.match(r"(\S+), B = (\d+), k = (\d+), (\d+) prompts$", line):
            tables.append({"set": m.group(1), "B": int(m.group(2)), "k": int(m.group(3)), "rows": {}})
        elif tables and (m := re.match(r"(.+?) +([\d.]+) +([\d.]+x) \(([\d.]+)-([\d.]+)\) +(\S+)(?: +([\d.]+))?$", line)):
            arm, _, ratio, lo, hi, acc, ms = m.groups()
            tables[-1]["rows"][arm] = {"ratio": ratio, "spread": f"{lo}–{hi}", "acceptance": acc, "ms": ms or "–"}
    return tables


def suffix() -> list[str]:
    out = ["| workload | B | draft (k) | vs regular (median) | spread over rounds | acceptance | draft ms / step | "
           "rounds | commit | machine | command |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    # hybrid-depth ran when the hybrid's suffix side went 12 deep by default: its arms under today's specs
    today = {"default+suffix": "default+suffix:12", "default+suffix, suffix to k": "default+suffix"}
    for folder, machine, command in (("hybrid-depth-2026-12-08", EPYC, "hybrid-depth"),
                                     ("suffix-decoder-2026-12-07", EPYC, "suffix-4x3"),
                                     ("suffix-4x3-2026-12-07", EPYC, "suffix-4x3"),
                                     ("suffix-goodput-2026-12-07b", EPYC, "suffix-goodput-b8"),
                                     ("suffix-goodput-2026-12-07", EPYC, "suffix-goodput"),
                                     ("suffix-hybrid-2026-12-05", XEON, "suffix")):
        commit = (RESULTS / folder / "commit.txt").read_text().strip()
        for t in suffix_tables(RESULTS / folder / "out.txt"):
            for arm, r in t["rows"].items():
                if arm == "regular":
                    continue
                arm = today.get(arm, arm) if command == "hybrid-depth" else arm
                label = arm if ", k = " in arm else f"{arm} (k = {t['k']})"
                out.append(f"| {t['set']} | {t['B']} | {label.replace(', k = ', ' (k = ') + (')' if ', k = ' in arm else '')} | "
                           f"**{r['ratio']}** | {r['spread']} | {'–' if r['acceptance'] == 'nan' else r['acceptance']} | "
                           f"{r['ms']} | 2 | {commit} | {machine} | {command} |")
    return out


def trees() -> list[str]:
    path = RESULTS / "feature-draft-wide-2026-12-03" / "trees-b1.log"
    _, table = rounds_and_table(path)
    names = {"token": "token draft (`default`)", "old": "feature draft, 8k map (in git at 41eb59e)",
             "wide": "feature draft, 24k map (`feature-draft-2l`)"}
    out = ["| draft | shape | vs regular (median) | spread over rounds | output tokens / row-step | rounds | commit | "
           "machine | command |", "|---|---|---|---|---|---|---|---|---|"]
    for arm in [a for a in table if a != "regular"]:
        who, shape = arm.split(" ", 1)
        r = arm_row(path, arm)
        out.append(f"| {names[who]} | {shape} | **{r['ratio']}** | {r['spread']} | {r['row']['output tokens / row-step']} | "
                   f"{r['rounds']} | not recorded | {EPYC} | trees |")
    return out


def section() -> str:
    parts = [BEGIN, "## Current results", "",
             "Made by `bench/current_results.py` from the files in `bench/results/` (regenerate with `--write`; a test "
             "checks this section matches). Target: the packaged SmolLM2-135M-Instruct in bf16 on the CPU, greedy. "
             "\"vs regular\" is our own engine at k = 0 on the same prompts, interleaved round by round in one process; "
             "the spread is the lowest and highest per-round ratio. These machines drift 10-50% within minutes, so "
             "read a ratio with its spread. The commands are listed under the tables.", "",
             "### Speculative vs regular decoding, the default pair, by batch size", "",
             "The `default` token draft on the 24 hand-written free-form chat prompts, 64 new tokens, each stored run "
             "(the 2026-12-07 rows on the bf16 kernels, where regular decoding at B = 1 runs ~60 tokens/s against 31-34 "
             "in the 2026-12-03 rows: a one-slot step got cheaper and a verified token did not, so the ratio fell; "
             "BENCHMARKS' log, \"where a speculative step's time goes\"):", "",
             *speculative_vs_regular(), "",
             "### Through a request queue", "",
             "32 requests through 8 lanes (the batch's rows; a finished request's lane goes to the next), all queued "
             "at the start, 64 new tokens, the default pair "
             "(`goodput`: k picked each step from the calibration):", "",
             *queue(), "",
             "### Against transformers' assisted generate", "",
             "The same token draft in `generate(assistant_model=...)`, on `bench/prompts.txt`, 64 new tokens, "
             "interleaved with ours:", "",
             *assisted_generate(), "",
             "### Against vLLM-CPU", "",
             "vLLM-CPU 0.32.0 (`bash setup.sh --vllm`) serving the same model, greedy, 32 new tokens; `default k=1` is "
             "our default pair (vLLM cannot serve the distilled draft, so its side decodes regularly):", "",
             *vllm_cpu(), "",
             "### Against llama.cpp", "",
             "llama-cpp-python 0.3.36 (`bash setup.sh --llamacpp`) on GGUFs of the same weights: `bf16` the same bits "
             "as our bf16 run, `q4_1` the packaged 4-bit file (a lower bandwidth floor: a different model); one lane "
             "or 8 (llama.cpp batches its lanes in one context; at 8 lanes it runs regular decoding only), "
             "8 free-form prompts, 96 new tokens, greedy, 2 threads each side, ours in bf16 (through our bf16 kernels, "
             "below: the rows of commit 7e5f549 with 3 rows as one 3 x 3 block and the greedy rule's CPU forms "
             "(verdict in Python lists, bf16 argmax in C++), those of "
             "commit 4aa75ce with every decoder layer of a step in one C++ call, those of commit "
             "2086839 with each layer in three C++ calls and 4 x 3 register blocks for "
             "calls of several rows, those of c09c512 with the forward's other steps fused and the packed weight copy "
             "for one-row calls, those of d4c0ad0 fused without the copy, those of 2d325b3 with the linear kernel "
             "alone) "
             "with the default pair (`ours default k=2`); "
             "llama.cpp's `draft` drafts with the packaged target at 4 bits (it cannot read our distilled draft):", "",
             *llama_cpp(), "",
             "### bf16 on an AVX2 CPU: our kernels against F.linear", "",
             "Where oneDNN cannot pack bf16 (AVX2 only, no AVX-512), bf16 linears run through our kernel "
             "(`specviz/models/bf16linear.py`), and the lean forward's norms, rotary, MLP activation, attention and "
             "residual adds run fused beside it (`fused`, the default; `SPECVIZ_BF16_FUSED=0` gives the kernel alone, "
             "`SPECVIZ_BF16_KERNEL=0` torch's `F.linear`). All three in one process, interleaved, the 8 free-form "
             "prompts above, 64 new tokens, greedy:", "",
             *bf16_kernel(), "",
             "### `--dtype auto` on an AVX2 CPU", "",
             "Where the kernel is built, `--dtype auto` (the app's and the CLI's default) picks bfloat16 on such a CPU; "
             "before, float32. The CLI's default run (draft `default`, k = 2) and regular decoding in each dtype, in one "
             "process, interleaved, the same prompts and tokens:", "",
             *auto_dtype(), "",
             "### Suffix decoding and the hybrid, on predictable workloads and on chat", "",
             "`suffix` (model-free, learns from the prompt and earlier outputs), prompt lookup (`ngram`), the `default` "
             "token draft and the hybrid (`default+suffix`), each against regular decoding; 8 prompts per set that the "
             "drafts never saw (every round starts the suffix structure empty), 96 new tokens, greedy, bf16. The "
             "suffix draft drafts at most min(k, 4 L) deep for a match of L tokens, so it appears both at the shared "
             "k = 4 and at its own cap k = 12, and at k = 12 also with factor 1 (min(k, L), Arctic Inference's default "
             "and the hybrid's). `hybrid tree`: the hybrid's token trees (width 2, 8 nodes), one draft per row or one "
             "merged tree. `goodput`: the suffix draft at its cap with `--policy goodput`, which keeps each step only "
             "the batch's likeliest drafted tokens that pay by the target's calibrated cost. `default+suffix:12`: the "
             "hybrid with its suffix side drafting up to 12 deep while the model drafts k = 4 (the first rows, "
             "2026-12-08; slower than the default `default+suffix` on every set). The first rows are on the "
             "AMD EPYC of the tables above with our bf16 kernel; the rows after them on a 2-core Intel Xeon with AMX "
             "(oneDNN's bf16), where bf16 regular decoding ran at about 33 tokens/s at B = 1 (on the EPYC with the "
             "kernel 23-28 in the first entries of 2026-12-07, 53-57 in the rows of 11770a5 and later):", "",
             *suffix(), "",
             "### Token trees vs chains", "",
             "Batch size 1, the 24 free-form prompts, 48 new tokens; chains and trees of depth k, width W, N nodes:", "",
             *trees(), "",
             "### On a GPU", "",
             "| question | stored result |", "|---|---|",
             "| speculative vs regular decoding on a GPU | **none.** The one GPU session (one H200, 2026-11-30) kept no raw "
             "logs in the repo, and its engine timings were not usable (see the log, \"GPU\"). `bash bench/gpu_check.sh` "
             "is prepared for the next one. |", "",
             "Commands, run from the checkout (`bench/*.py` with `.venv/bin/python`; `specviz` is `.venv/bin/specviz`); "
             "without `--prompts`, `drafts.py` and `vllm_peer.py` read `bench/prompts.txt`, `continuous.py` that and the "
             "app's chat set:", "",
             *[f"- {name}: `{cmd}`" for name, cmd in COMMANDS.items()], "", END]
    return "\n".join(parts) + "\n"


def current_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    return text[start:end]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="replace the section in BENCHMARKS.md")
    ap.add_argument("--check", action="store_true", help="exit 1 when BENCHMARKS.md's section differs")
    a = ap.parse_args()
    new = section()
    if a.write:
        text = BENCHMARKS.read_text()
        BENCHMARKS.write_text(text.replace(current_block(text), new))
    elif a.check:
        if current_block(BENCHMARKS.read_text()) != new:
            print("BENCHMARKS.md's current results differ from bench/current_results.py: run it with --write",
                  file=sys.stderr)
            return 1
    else:
        sys.stdout.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
