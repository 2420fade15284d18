"""Distil a tiny draft for a target: generate data with the target, train, evaluate, save.

    python -m specviz distill --target default --out DIR [--samples N --steps N --vocab N --kind K ...]

1. data      (data.py) the target answers diverse built-in prompts (specviz.prompts.gen) through
             the engine's regular decoding (half greedy, half sampled); every emitted token keeps
             the target's top-k logits at that position (free: the engine computed them), so
             training gets soft labels without another target pass. Shards, resumable.
             ``--prompts mixed`` adds specviz.prompts.varied's chat styles (multi-turn, code...).
1b. text     (text.py) ``--text PATH``: the target reads written text teacher-forced, one
             forward per chunk (prefill speed, ~5x generation's labels per second on the CPU),
             and its top-k at every position is stored in the same shard format; every file read
             is recorded with its sha256 (bench/text_sources.sh installs Debian's docs).
2. draft     (token.py, feature.py) a LlamaForCausalLM at the target's width: target layers as
             the start, the target's *frozen input embedding* (shared at load time, never
             stored), and an output head over only the ``--vocab`` tokens the target emits most
             (the vocabulary map). Tokens outside the map get logit -inf: never proposed, so the
             acceptance rule simply rejects where the target wants one of them. The feature kind
             (EAGLE) also reads the target's hidden states.
3. training  (train.py) soft cross-entropy to the target's top-k distribution renormalised over
             the map (= forward KL up to a constant); the checkpoint with the best held-out top-1
             agreement (= greedy acceptance at k = 1, teacher-forced) is kept. Resumable:
             OUT/train-state.pt holds the last checkpoint until the draft is saved.
4. report    (evaluate.py, report.py) held-out greedy acceptance through the engine at k = 1..4,
             the cost ratio c from real forward timings at B = 1 and 8, the predicted speedup
             (specviz.analysis.analytic).

command.py holds the CLI and the table of kinds. The saved format, and loading a draft for a run,
are specviz.models.distilled's (a run never imports this package).
"""
