"""The llama.cpp side of ``bench --peer llamacpp``: a child process in .venv-llamacpp's interpreter.

It imports only the standard library, numpy and llama_cpp (llama-cpp-python), never specviz: that
environment has no torch. specviz.peers.llamacpp starts it once per bench and talks JSON lines:
one request on stdin, one answer on stdout (llama.cpp's own logging goes to stderr):

    {"op": "load", "models": {NAME: GGUF path}, "threads": T, "n_ctx": N}
        -> {"ok": true, "version": ..., "system": ..., "extra_buffers": bool (false on an AMX CPU)}
    {"op": "run", "mode": "regular"|"lookup"|"draft", "model": NAME, "draft": NAME|null, "k": K,
     "ngram": N, "lanes": B, "prompts": [[ids]], "max_tokens": M, "eos": ID|null}
        -> {"ok": true, "wall_s": s, "prefill_s": s, "drafted": n, "accepted": n,
            "requests": [{"output_ids": [...], "ttft_s": s, "latency_s": s}]}
    {"op": "quit"}

Every mode is greedy. One lane runs the binding's own ``Llama.generate`` (with ``draft_model``: its
prompt lookup, ``LlamaPromptLookupDecoding``, or a draft GGUF through ``ModelDraft`` below). Several
lanes run one llama_context with a sequence per lane through the low-level batch API, as llama-server
does: a free lane takes the next request (its prompt prefilled alone), then one llama_decode a step
carries every busy lane's next token. The binding has no batched speculation, so lanes > 1 is regular
decoding only.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import numpy as np


def _out():
    """The protocol's stream: the real stdout, with fd 1 pointed at stderr so C code cannot write into it."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return proto


# ---- one lane: the binding's Llama.generate -----------------------------------------------------

class ModelDraft:
    """A draft GGUF behind the binding's LlamaDraftModel interface: given the ids so far, its greedy next
    ``k`` tokens. Its own KV cache is kept across calls (Llama.generate's prefix reuse), so each call
    evaluates only what is new since the last one."""

    def __init__(self, llm, k: int):
        self.llm, self.k = llm, k

    def __call__(self, input_ids, **kwargs):
        out = []
        for tok in self.llm.generate(input_ids.tolist(), temp=0.0, reset=True):
            out.append(tok)
            if len(out) == self.k:
                break
        return np.array(out, dtype=np.intc)


class Recorded:
    """A draft whose proposals are kept with the position each starts at (to count what was accepted)."""

    def __init__(self, inner):
        self.inner, self.proposals = inner, []

    def __call__(self, input_ids, **kwargs):
        out = self.inner(input_ids, **kwargs)
        self.proposals.append((len(input_ids), [int(t) for t in out]))
        return out


def generate_one(llm, prompt: list[int], max_tokens: int, eos: int | None) -> dict:
    """One request through Llama.generate, greedy; prefill is the time to the first token. The context
    is reset first: the binding would otherwise reuse the previous request's cache for a shared prefix
    (the chat template's system prompt), a prefill our engine does not skip."""
    llm.reset()
    t0 = time.perf_counter()
    out, first = [], None
    for tok in llm.generate(prompt, temp=0.0, reset=True):
        if first is None:
            first = time.perf_counter()
        out.append(int(tok))
        if len(out) >= max_tokens or (eos is not None and tok == eos):
            break
    end = time.perf_counter()
    return {"output_ids": out, "ttft_s": first - t0, "latency_s": end - t0}


def run_one_lane(llm, prompts, max_tokens, eos, draft=None) -> dict:
    """Every prompt in turn; with ``draft`` (a Recorded), also what it proposed and what was accepted."""
    llm.draft_model = draft
    reqs, drafted, accepted = [], 0, 0
    t0 = time.perf_counter()
    for p in prompts:
        if draft is not None:
            draft.proposals.clear()
            if isinstance(draft.inner, ModelDraft):
                draft.inner.llm.reset()  # a new request: nothing of the last one's cache is reused
        r = generate_one(llm, p, max_tokens, eos)
        if draft is not None:
            drafted += sum(len(d) for _, d in draft.proposals)
            accepted += accepted_tokens(draft.proposals, list(p) + r["output_ids"])
        reqs.append(r)
    res = {"wall_s": time.perf_counter() - t0, "prefill_s": sum(r["ttft_s"] for r in reqs), "requests": reqs}
    return res if draft is None else {**res, "drafted": drafted, "accepted": accepted}


# ---- several lanes: one context, a sequence per lane --------------------------------------------

class Lanes:
    """B sequences in one llama_context over a loaded model; greedy, argmax over each row's logits."""

    def __init__(self, model, lanes: int, n_ctx: int, threads: int):
        import llama_cpp as L

        self.L = L
        p = L.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch = lanes * n_ctx, n_ctx, min(n_ctx, 512)
        p.n_seq_max, p.n_threads, p.n_threads_batch = lanes, threads, threads
        self.ctx = L.llama_init_from_model(model, p)
        if self.ctx is None:
            raise RuntimeError(f"llama.cpp could not make a context of {lanes} lanes x {n_ctx} tokens")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        self.batch = L.llama_batch_init(max(n_ctx, lanes), 0, 1)
        self.lanes = lanes

    def close(self):
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, wants logits) items."""
        b = self.batch
        for i, (tok, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = tok, pos, 1, seq, logits
        b.n_tokens = len(items)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _argmax(self, i: int) -> int:
        row = np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
        return int(row.argmax())

    def run(self, prompts, max_tokens, eos) -> dict:
        todo = list(enumerate(prompts))
        reqs: list = [None] * len(prompts)
        busy: dict[int, dict] = {}  # lane -> {"req", "pos", "out", "t0", "first"}
        prefill, t0 = 0.0, time.perf_counter()
        while todo or busy:
            for s in [s for s in range(self.lanes) if s not in busy][: len(todo)]:
                i, ids = todo.pop(0)
                start = time.perf_counter()
                self.L.llama_memory_seq_rm(self.mem, s, -1, -1)
                self._decode([(t, j, s, j == len(ids) - 1) for j, t in enumerate(ids)])
                first = time.perf_counter()
                prefill += first - start
                busy[s] = {"req": i, "pos": len(ids), "out": [self._argmax(len(ids) - 1)], "t0": start, "first": first}
            for s in [s for s, r in busy.items() if len(r["out"]) >= max_tokens or r["out"][-1] == eos]:
                r = busy.pop(s)
                reqs[r["req"]] = {"output_ids": r["out"], "ttft_s": r["first"] - r["t0"],
                                  "latency_s": time.perf_counter() - r["t0"]}
            if not busy:
                continue
            order = sorted(busy)
            self._decode([(busy[s]["out"][-1], busy[s]["pos"], s, True) for s in order])
            for i, s in enumerate(order):
                busy[s]["pos"] += 1
                busy[s]["out"].append(self._argmax(i))
        return {"wall_s": time.perf_counter() - t0, "prefill_s": prefill, "requests": reqs}


# ---- loading ------------------------------------------------------------------------------------

def extra_buffers_safe(system_info: str) -> bool:
    """Whether to let llama.cpp repack weights into its extra buffer types. Not on a CPU with AMX: there
    it repacks quantized weights (the packaged Q4_1) for its AMX matmul, which crashes the process
    (SIGSEGV in the first decode, ggml_backend_amx_mul_mat; llama.cpp issue 20824, on this Sapphire
    Rapids VM too). Without them those weights run on llama.cpp's AVX-512 CPU kernels. bf16 and f32
    weights never use an extra buffer, so their rows are the same either way."""
    return "AMX_INT8 = 1" not in system_info


@contextlib.contextmanager
def extra_buffer_types(allowed: bool):
    """Llama() takes no use_extra_bufts argument, so the model parameters it starts from are changed
    while it loads (and restored after)."""
    from llama_cpp import llama_cpp as api  # the ctypes module Llama() calls

    original = api.llama_model_default_params

    def params():
        p = original()
        p.use_extra_bufts = allowed
        return p

    api.llama_model_default_params = params
    try:
        yield
    finally:
        api.llama_model_default_params = original


# ---- the loop ----------------------------------------------------------------------------------

def accepted_tokens(proposals: list[tuple[int, list[int]]], seq: list[int]) -> int:
    """Greedy verification keeps the longest prefix of a proposal that matches what the target then
    emitted, so acceptance follows from the proposals (at their positions in ``seq``) and the output."""
    n = 0
    for at, drafted in proposals:
        for j, t in enumerate(drafted):
            if at + j >= len(seq) or seq[at + j] != t:
                break
            n += 1
    return n


class Worker:
    def __init__(self):
        self.models: dict = {}  # name -> Llama (one lane, no draft)
        self.spec: dict = {}  # name -> Llama made with a draft (the binding then keeps every row's logits)
        self.threads, self.n_ctx = 2, 2048

    def load(self, req: dict) -> dict:
        import llama_cpp

        self.threads, self.n_ctx = req.get("threads", 2), req.get("n_ctx", 2048)
        system = llama_cpp.llama_print_system_info().decode()
        self.extra_buffers = extra_buffers_safe(system)
        self.paths = req["models"]
        for name, path in self.paths.items():
            self.models[name] = self._llama(path)
        return {"version": llama_cpp.__version__, "system": system, "extra_buffers": self.extra_buffers}

    def _llama(self, path: str, **kw):
        from llama_cpp import Llama

        with extra_buffer_types(self.extra_buffers):
            return Llama(model_path=path, n_ctx=self.n_ctx, n_batch=self.n_ctx, n_threads=self.threads,
                         n_threads_batch=self.threads, verbose=False, **kw)

    def _spec_llama(self, name: str):
        """The target again, made with a draft model: the binding decides at construction to keep every
        position's logits (verification needs them), so this is a second context over the same mmapped file."""
        if name not in self.spec:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            self.spec[name] = self._llama(self.paths[name], draft_model=LlamaPromptLookupDecoding())
        return self.spec[name]

    def run(self, req: dict) -> dict:
        mode, prompts, m, eos = req["mode"], req["prompts"], req["max_tokens"], req.get("eos")
        if req.get("lanes", 1) > 1:
            if mode != "regular":
                raise ValueError("llama-cpp-python speculates in one lane only")
            lanes = Lanes(self.models[req["model"]].model, req["lanes"], self.n_ctx, self.threads)
            try:
                return lanes.run(prompts, m, eos)
            finally:
                lanes.close()
        if mode == "regular":
            return run_one_lane(self.models[req["model"]], prompts, m, eos)
        if mode == "lookup":
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = LlamaPromptLookupDecoding(max_ngram_size=req.get("ngram", 2), num_pred_tokens=req["k"])
        elif mode == "draft":
            draft = ModelDraft(self.models[req["draft"]], req["k"])
        else:
            raise ValueError(f"unknown mode {mode!r}")
        return run_one_lane(self._spec_llama(req["model"]), prompts, m, eos, Recorded(draft))


def main() -> int:
    proto = _out()
    worker = Worker()
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "quit":
            break
        try:
            res = worker.load(req) if req["op"] == "load" else worker.run(req)
            proto.write(json.dumps({"ok": True, **res}) + "\n")
        except Exception as e:  # one line back to the parent, which says it
            proto.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
