"""``specviz distill``'s flags. Kept apart from specviz.distill.command, which imports torch, so that
building the CLI's parser (``specviz --help``) imports neither torch nor transformers."""

from __future__ import annotations

DRAFT_KINDS = ["token", "feature"]  # specviz.distill.command.KINDS' keys (a test keeps the two equal)


def add_distill_args(p) -> None:
    """distill's flags, in groups, on its parser (specviz.checks.parser makes it, with the help text)."""
    g = p.add_argument_group("target and output")
    g.add_argument("--target", default="default", help="target model SPEC")
    g.add_argument("--out", required=True, metavar="DIR", help="where the draft, report.json and README.md go")
    g.add_argument("--data", metavar="DIR", help="data shards (default OUT/data); reruns resume and reuse them")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="target dtype for data generation and evaluation")
    g.add_argument("--threads", type=int, default=0,
                   help="torch threads for training and evaluation (0 = torch's default); on a shared 2-core CPU 1 is "
                        "steady while 2 stalled up to 10x under load, but 2 is ~2x faster on an idle machine")
    g = p.add_argument_group("training data (the target's answers)")
    g.add_argument("--samples", type=int, default=2000, help="training prompts the target answers")
    g.add_argument("--prompts", default="templated", choices=["templated", "mixed", "natural", "natural2"],
                   help="templated: specviz.prompts.gen's task templates (the shipped draft's); mixed: every 4th prompt "
                        "from specviz.prompts.varied (paraphrase, multi-turn, code, lists, short and long answers); "
                        "natural: specviz.prompts.natural's ~1,500 one-off chat requests (past them, each again); "
                        "natural2: its second, larger set (held out: natural's held-out prompts, as before); "
                        "held-out prompts follow the same choice from disjoint lists")
    g.add_argument("--val-samples", type=int, default=64, help="held-out prompts answered greedily (checkpoint choice)")
    g.add_argument("--max-new-tokens", type=int, default=128, help="tokens per generated answer")
    g.add_argument("--gen-batch-size", type=int, default=32, help="rows per data-generation batch")
    g.add_argument("--gen-budget-min", type=float, default=None, help="stop generating after this many minutes")
    g.add_argument("--gen-workers", type=int, default=0,
                   help="data-generation processes, one thread each (0 = auto: up to 4 on CPU, 1 on CUDA); on a busy "
                        "2-core CPU, 2 workers x 1 thread ran 3x faster than 1 x 2 threads")
    g.add_argument("--topk", type=int, default=32, help="target logits kept per token (soft labels)")
    g.add_argument("--extra-data", action="append", metavar="DIR",
                   help="another run's --data folder (same target, dtype, kind and --topk) whose answers and text "
                        "also train this draft; read only, recorded with a checksum; repeatable")
    g = p.add_argument_group("written text (teacher-forced)")
    g.add_argument("--text", action="append", metavar="PATH",
                   help="written text the target reads teacher-forced (prefill speed) for more soft labels: files or "
                        "folders of .html/.txt/.rst/.md(.gz), repeatable; bench/text_sources.sh installs Debian's")
    g.add_argument("--text-tokens", type=int, default=200_000, help="at most this many text tokens are labelled")
    g.add_argument("--text-chunk-tokens", type=int, default=256, help="tokens per teacher-forced answer")
    g.add_argument("--text-batch-size", type=int, default=8, help="chunks per labelling forward")
    g = p.add_argument_group("the draft")
    g.add_argument("--kind", default="token", choices=DRAFT_KINDS,
                   help="token: a small LM on tokens alone; feature: a layer or a few fed the target's hidden states (EAGLE, "
                        "specviz/distill/feature.py)")
    g.add_argument("--layers", type=int, default=None,
                   help="draft depth (layers at the target's width; default 2 for a token draft, 1 for a feature draft)")
    g.add_argument("--init-layers", default="first",
                   help="'first' or comma-separated target layer ids to start from ('random' too for a feature draft)")
    g.add_argument("--vocab", type=int, default=8192, help="output vocabulary of the draft (most emitted tokens)")
    g.add_argument("--vocab-from", metavar="DRAFT",
                   help="start the map with this distilled draft's map (e.g. the shipped one), then the data's most "
                        "emitted tokens: at --vocab 24576 it covered 97.2%% of free-form target tokens (BENCHMARKS.md)")
    g.add_argument("--init-from", metavar="DRAFT",
                   help="continue training from this distilled draft's weights (same --kind; --layers at least its depth, "
                        "extra layers start as identities on top; head rows for tokens its map lacks start as the "
                        "target's), e.g. the shipped one with new data")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=3000,
                   help="training steps; the learning-rate schedule follows them, so they fix the weights")
    g.add_argument("--batch-size", type=int, default=16, help="sequences per training step")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (the schedule follows --steps)")
    g.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay")
    g.add_argument("--seed", type=int, default=0, help="fixes the data, the initialisation and the training order")
    g.add_argument("--train-precision", default="auto", choices=["auto", "bf16", "float32"],
                   help="bf16 autocast or float32 for training; auto: bf16 where bf16 matmuls are native (CUDA, CPUs with "
                        "AVX-512 bf16 or AMX), else float32 (on an AVX2 CPU training ran ~30x faster); the report records it")
    g.add_argument("--time-budget-min", type=float, default=None,
                   help="safety stop for training, in minutes (default: none); if it ends training before --steps, "
                        "the weights depend on the machine's speed and the report says so")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-every", type=int, default=100, help="steps between held-out checkpoints")
    g.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts for the engine evaluation")
    g.add_argument("--eval-max-new-tokens", type=int, default=64, help="tokens per held-out answer in the engine evaluation")
    g.add_argument("--eval-ks", default="1,2,3,4", help="draft lengths to evaluate")
    g.add_argument("--no-freeform", action="store_true", help="skip the hand-written (free-form) held-out set")
    g.add_argument("--cost-rounds", type=int, default=3, help="interleaved timing rounds for the cost ratio")
    g.add_argument("--cost-prefix-len", type=int, default=128, help="cached prefix per row when timing c")
    p.set_defaults(func=_cmd_distill)


def _cmd_distill(a) -> int:
    """``specviz distill`` on parsed flags (``a.func(a)``); torch loads only now, not when the parser is built."""
    from specviz.distill.command import cmd_distill

    return cmd_distill(a)
