"""Teacher-forced soft labels: the target read over existing text at prefill speed.

Generated data (``specviz.distill.data``) costs one target forward per output token. Here the
target reads a whole chunk of written text in one forward, and its top-k next-token
distribution at every position of the chunk becomes a label, in the same JSONL shard format as
generated data (``text-<worker>.jsonl``; ``read_shards(data, "text")`` reads them; a feature
draft's come with the target's features, ``specviz.distill.feature.label_text_features``). The draft
learns to imitate the *target's* distribution (not the text's next token) in those contexts.

    documents(paths)          -> [(name, text, sha256 of the file's bytes)] from .html/.txt/.rst/.md(.gz)
    chunk_documents(docs, tokenizer, chunk_tokens, max_tokens) -> the chunks, each framed as one
                                 chat turn: the user asks about the document, the chunk is the answer
    label_text(target, chunks, data, ...)   -> writes the shards; resumes by chunk index

A chunk's labels sit at its answer's positions, exactly as a generated sample's sit at its
outputs (``token.token_tensors`` reads both alike); ``"teacher_forced": true`` tells them apart
(the vocabulary map counts only the target's top-1 there, never the text's own tokens).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import torch

from specviz.common import SpecvizError
from specviz.distill.data import _enc, log, open_shard, read_shards

TEXT_SUFFIXES = (".html", ".htm", ".txt", ".rst", ".md", ".txt.gz", ".html.gz", ".md.gz")
_BLOCK = {"p", "div", "br", "li", "ul", "ol", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "dt", "dd",
          "section", "blockquote"}
_SKIP = {"script", "style", "head", "nav", "footer"}


class _HTMLText(HTMLParser):
    """Visible text of an HTML page, block elements as line breaks, <pre> kept verbatim; skips
    scripts, styles, navigation and sphinx's sidebars (``skip`` counts the open skipped tags)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.pre = [], 0
        self.skip_tag, self.skip = None, 0

    def handle_starttag(self, tag, attrs):
        if self.skip_tag is None:
            cls = (dict(attrs).get("class") or "").split()
            if tag in _SKIP or (tag == "div" and any(c in cls for c in ("sphinxsidebar", "related", "footer"))):
                self.skip_tag = tag
        if tag == self.skip_tag:
            self.skip += 1
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag):
        if tag == self.skip_tag:
            self.skip -= 1
            if self.skip <= 0:
                self.skip_tag, self.skip = None, 0
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.skip_tag is None:
            self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    p = _HTMLText()
    p.feed(html)
    text = "".join(p.parts).replace("\u00b6", "")  # sphinx's pilcrow anchors
    lines = [ln.rstrip() for ln in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _files(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TEXT_SUFFIXES))
        elif p.is_file():
            out.append(p)
        else:
            raise SpecvizError(f"text source {str(p)!r} does not exist (bench/text_sources.sh installs the Debian ones)")
    return out


def documents(paths) -> list[tuple[str, str, str]]:
    """(name, text, sha256 of the file's bytes) per file under ``paths`` (files or folders), sorted by path."""
    docs = []
    for f in _files(paths):
        raw = f.read_bytes()
        body = gzip.decompress(raw) if f.name.endswith(".gz") else raw
        text = body.decode("utf-8", errors="replace")
        if ".htm" in f.name:
            text = html_to_text(text)
        if text.strip():
            docs.append((str(f), text, hashlib.sha256(raw).hexdigest()))
    if not docs:
        raise SpecvizError(f"no text found under {list(map(str, paths))} (files ending in {', '.join(TEXT_SUFFIXES)})")
    return docs


def _title(name: str, text: str) -> str:
    first = next((ln.strip() for ln in text.splitlines() if len(ln.strip()) > 3), Path(name).stem)
    return first[:80]


def _doc_chunks(name: str, text: str, sha: str, tokenizer, chunk_tokens: int):
    """One document's chunks in order (a generator: a document is tokenized only as far as it is used)."""
    from specviz.models.loading import encode_prompts

    prompt = f"Tell me about: {_title(name, text)}"
    prompt_ids = encode_prompts(tokenizer, [prompt])[0]

    def chunk(ids):
        return {"prompt": prompt, "prompt_ids": prompt_ids, "output_ids": ids, "source": name, "source_sha256": sha}

    cur: list[int] = []
    for para in (p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()):
        ids = tokenizer.encode(("\n\n" if cur else "") + para, add_special_tokens=False)
        fresh = True  # ids still hold the whole paragraph
        while ids:
            room = chunk_tokens - len(cur)
            if len(ids) > room and cur:  # close the chunk (at the paragraph end when fresh)
                yield chunk(cur)
                cur = []
                if fresh:  # the paragraph starts the next chunk, without the separator
                    ids = tokenizer.encode(para, add_special_tokens=False)
                continue
            cur, ids, fresh = cur + ids[:room], ids[room:], False
    if len(cur) > 1:
        yield chunk(cur)


def chunk_documents(docs, tokenizer, chunk_tokens: int = 256, max_tokens: int | None = None) -> list[dict]:
    """Each document cut at paragraph ends into answers of <= ``chunk_tokens`` tokens (a longer
    paragraph is cut inside), each framed as a chat turn; the documents take turns (one chunk
    each, round robin) so a token budget spreads over every source. Deterministic: same files,
    same chunks. Stops once the answers hold ``max_tokens`` tokens."""
    live = [_doc_chunks(n, t, sha, tokenizer, chunk_tokens) for n, t, sha in docs]
    chunks, total = [], 0
    while live:
        for g in list(live):
            c = next(g, None)
            if c is None:
                live.remove(g)
                continue
            chunks.append(c)
            total += len(c["output_ids"])
            if max_tokens is not None and total >= max_tokens:
                return chunks
    return chunks


def source_manifest(docs, chunks) -> list[dict]:
    """What each source file gave: path, sha256, labelled chunks and tokens (report.json records it)."""
    used: dict[str, list[int]] = {}
    for c in chunks:
        used.setdefault(c["source"], []).append(len(c["output_ids"]))
    return [{"path": n, "sha256": sha, "chunks": len(used[n]), "tokens": sum(used[n])} for n, _, sha in docs if n in used]


def manifest_sha256(manifest: list[dict]) -> str:
    return hashlib.sha256(json.dumps([(m["path"], m["sha256"], m["tokens"]) for m in manifest]).encode()).hexdigest()


def chunk_record(i: int, c: dict) -> dict:
    """What a labelled chunk's sample holds besides its labels (both draft kinds' shards)."""
    return {"sample": i, "prompt": c["prompt"], "temperature": None, "teacher_forced": True, "source": c["source"],
            "source_sha256": c["source_sha256"], "prompt_ids": c["prompt_ids"], "output_ids": c["output_ids"],
            "finish_reason": "text"}


@torch.no_grad()
def label_batch(target, chunks: list[dict], topk: int, features: bool = False) -> list[tuple]:
    """One forward over the batch (right padded); per chunk (top-k ids [n, K], top-k logits [n, K])
    of the target's next-token distribution at each answer position (the one predicting output i),
    and with ``features`` the target's final-norm output at every fed position [P + n - 1, H] (bf16,
    what a feature draft reads: ``specviz.distill.feature``)."""
    seqs = [c["prompt_ids"] + c["output_ids"][:-1] for c in chunks]
    T = max(map(len, seqs))
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)], mask[b, :len(s)] = torch.as_tensor(s), 1  # [B, T] right padding
    dev = target.device
    h = target.model.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).last_hidden_state  # [B, T, H]
    head = target.model.get_output_embeddings()
    out = []
    id_dtype = np.uint16 if target.model.config.vocab_size <= 65536 else np.int32
    for b, c in enumerate(chunks):
        P, n = len(c["prompt_ids"]), len(c["output_ids"])
        z = head(h[b, P - 1:P - 1 + n]).float()  # [n, V] only this chunk's answer positions
        vals, top = z.topk(topk, dim=-1)  # [n, K]
        labels = (top.cpu().numpy().astype(id_dtype), vals.cpu().numpy().astype(np.float16))
        out.append((*labels, h[b, :len(seqs[b])].to(torch.bfloat16).cpu()) if features else labels)
    return out


def label_text(target, chunks: list[dict], data, name: str = "text", batch_size: int = 8, topk: int = 32,
               worker: int = 0, workers: int = 1, deadline: float | None = None, desc: str = "text labels",
               **_) -> None:
    """Label ``chunks`` into ``data/name-<worker>.jsonl``, skipping chunks any shard already holds
    (same index and same tokens), so an interrupted run resumes where it stopped. Worker w of W
    takes batches j = w (mod W); a batch is chunks j*batch_size .. (a chunk's labels do not depend
    on its batch: padding is on the right)."""
    from tqdm import tqdm

    data = Path(data)
    done = {(s["sample"], tuple(s["output_ids"])) for s in read_shards(data, name)}
    todo = [(j, list(range(j, min(len(chunks), j + batch_size)))) for j in range(0, len(chunks), batch_size)]
    todo = [(j, idx) for n_j, (j, idx) in enumerate(todo) if n_j % workers == worker
            and any((i, tuple(chunks[i]["output_ids"])) not in done for i in idx)]
    if not todo:
        return
    bar = tqdm(total=sum(len(chunks[i]["output_ids"]) for _, idx in todo for i in idx), desc=desc, unit="tok",
               file=sys.stderr, mininterval=2, disable=worker > 0)
    last_s = 0.0
    with open_shard(data / f"{name}-{worker}.jsonl") as f:
        for j, idx in todo:
            t = time.time()
            if deadline is not None and t + last_s > deadline:
                log(f"{desc}: labelling budget reached")
                break
            labels = label_batch(target, [chunks[i] for i in idx], topk)
            for i, (top, vals) in zip(idx, labels):
                c = chunks[i]
                if (i, tuple(c["output_ids"])) in done:
                    continue
                rec = {**chunk_record(i, c), "topk": topk, "ids_dtype": str(top.dtype), "topk_ids": _enc(top),
                       "topk_logits": _enc(vals)}
                f.write(json.dumps(rec) + "\n")
            f.flush()
            bar.update(sum(len(chunks[i]["output_ids"]) for i in idx))
            last_s = time.time() - t
    bar.close()


def read_text_samples(data, chunks: list[dict], name: str = "text") -> list[dict]:
    """The labelled chunks of this run (index and tokens match), one per chunk, in chunk order."""
    want = {i: tuple(c["output_ids"]) for i, c in enumerate(chunks)}
    got = {s["sample"]: s for s in read_shards(Path(data), name) if want.get(s["sample"]) == tuple(s["output_ids"])}
    return [got[i] for i in sorted(got)]
