"""Command line: ``specviz run|bench|calibrate|sweep|distill|vllm|tune ...`` (``python -m specviz``; docs/cli.md).

User mistakes end as one line on stderr, never a traceback, and an exit status that says which kind
of ending it was (specviz.common's EXIT_* constants: bad input, missing resource, out of memory, signal).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
from pathlib import Path

from specviz.analysis.summarytext import fmt, run_summary_lines
from specviz.checks.parser import build_parser  # noqa: F401 (the CLI's parser: tests walk it from here)
from specviz.common import (EXIT_BAD_INPUT, EXIT_MISSING, EXIT_OUT_OF_MEMORY, EXIT_SIGNAL_BASE, MissingResource,
                            OutOfMemory, SpecvizError)


def _config(a):
    from specviz.models.forwardoptions import ForwardOptions
    from specviz.runconfig import RunConfig
    from specviz.prompts.sets import prompt_set
    from specviz.run import read_prompts

    prompts = list(a.prompt or [])
    if a.prompts:
        prompts += read_prompts(a.prompts)
    prompts += prompt_set(a.prompt_set) if getattr(a, "prompt_set", None) else []
    cargs = {}
    for kv in a.policy_arg:
        key, sep, val = kv.partition("=")
        if not sep:
            raise SpecvizError(f"--policy-arg wants KEY=VALUE (got {kv!r})")
        cargs[key] = val
    return RunConfig(target=a.target, draft=a.draft, prompts=prompts, batch_size=a.batch_size,
                     draft_length=a.draft_length, max_new_tokens=a.max_new_tokens, temperature=a.temperature,
                     top_p=a.top_p, seed=a.seed, policy=a.policy, mode=a.mode, device=a.device,
                     dtype=a.dtype, device_map=a.device_map, raw_prompt=a.raw_prompt, policy_args=cargs,
                     draft_confidence=a.draft_confidence, requests=getattr(a, "requests", None),
                     arrival_rate=getattr(a, "arrival_rate", 0.0), static=getattr(a, "static", False),
                     tree_width=getattr(a, "tree_width", 1), tree_nodes=getattr(a, "tree_nodes", 16),
                     suffix_corpus=getattr(a, "suffix_corpus", None), synthetic_acceptance=getattr(a, "synthetic_acceptance", None),
                     cuda_graphs=bool(getattr(a, "cuda_graphs", False)) or ForwardOptions.from_env().cuda_graphs,
                     compile=bool(getattr(a, "compile", False)) or ForwardOptions.from_env().compile)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tok", file=sys.stderr, leave=False,
                disable=not sys.stderr.isatty() and not os.environ.get("SPECVIZ_PROGRESS"))


def _run_with_progress(cfg, target, proposer, desc: str, telemetry: bool = True, stop=None):
    from specviz.run import run

    bar = _progress(cfg.num_requests * cfg.max_new_tokens, desc)
    seen = {}

    def on_step(session, rec):
        seen["session"] = session
        bar.update(sum(len(r.emitted) for r in rec.rows))
        if stop is not None and stop.signal:  # Ctrl-C / SIGTERM: end after this step, rows left are "stopped"
            session.stop()

    try:
        return run(cfg, target, proposer, on_step=on_step, telemetry=telemetry)
    except KeyboardInterrupt as e:  # a second signal: the finished steps' trace leaves with it
        from specviz.interrupts import held_signals

        session = seen.get("session")
        with held_signals():  # it may have come before iter_run built the trace, or while it did
            e.trace = (session.trace or session.trace_so_far()) if session is not None else None
        raise
    finally:
        bar.close()


def cmd_run(a) -> int:
    from specviz.run import load_pair

    from specviz.interrupts import Interrupted, Stop, interrupted_twice, save_trace_held

    cfg = _config(a)
    cfg.validate()
    with Stop(final=True) as stop:
        target, proposer = load_pair(cfg)
        if stop.signal:
            print(f"specviz: interrupted ({stop.signal}) before generation began: nothing written", file=sys.stderr)
            return stop.exit_code
        try:
            trace = _run_with_progress(cfg, target, proposer, f"{cfg.mode} B={cfg.batch_size}", stop=stop)
        except Interrupted as e:  # a second Ctrl-C: out at once, but the finished steps are still kept
            return interrupted_twice(getattr(e, "trace", None), a.out, stop)
        saved = save_trace_held(trace, a.out) if a.out else None  # first: a Ctrl-C while printing loses nothing
        print(*run_summary_lines(trace), sep="\n")
        for i, s in enumerate(trace["sequences"][: a.show]):
            print(f"\n[{s['index']}] ({s['finish_reason']}) {s['text']!r}")
    if stop.signal:
        where = f"the trace so far is in {saved}" if a.out else "no --out was given, so nothing was written"
        print(f"specviz: interrupted ({stop.signal}) after {trace['summary']['steps']} steps, unfinished rows marked "
              f"stopped: {where}", file=sys.stderr)
        return stop.exit_code
    if a.out:
        print(f"\ntrace written to {saved}", file=sys.stderr)
    return 0


def _print_rounds(rounds: list[dict[str, float]]) -> None:
    """An interrupted bench: each arm's median over the rounds that finished."""
    print(f"{'run':<28}{'tokens/s':>10}{'ratio':>8}   ({len(rounds)} finished round(s))")
    for arm in rounds[0]:
        ratio = statistics.median(r[arm] / r["regular"] for r in rounds)
        print(f"{arm:<28}{statistics.median(r[arm] for r in rounds):>10.1f}{ratio:>8.2f}")


def cmd_bench(a) -> int:
    from specviz.interrupts import Interrupted, Stop
    from specviz.measure.bench import bench
    from specviz.measure.hostload import OtherLoad

    cfg = _config(a)
    cfg.validate()
    if a.peer in ("vllm", "llamacpp"):  # a real vLLM server or llama.cpp beside our engine (specviz.peers)
        return cmd_vllm(a, cfg)
    passes = len(cfg.every_prompt()) * cfg.batch_size * cfg.max_new_tokens
    bar = _progress(a.repeats * 2 * passes, "bench")
    rounds, stop = [], Stop(at_once=True, final=True)  # a part-round time is not comparable: Ctrl-C drops it, keeps the rest
    load = OtherLoad("the benchmark")
    try:
        with stop, load:
            r = bench(cfg, a.repeats, peer=not a.no_peer, peer_draft=a.peer_draft,
                      on_step=lambda session, rec: bar.update(sum(len(x.emitted) for x in rec.rows)),
                      on_round=lambda i, tok_s: rounds.append(tok_s))
    except Interrupted:
        bar.close()
        if rounds and a.json:
            print(json.dumps({"interrupted": stop.signal, "rounds_tokens_per_s": rounds}, indent=1))
        elif rounds:
            _print_rounds(rounds)
        print(f"specviz: interrupted ({stop.signal}) in round {len(rounds) + 1} of {a.repeats}: "
              + (f"the {len(rounds)} finished round(s) are printed above, the unfinished one dropped" if rounds
                 else "no round had finished, so there is nothing to report"), file=sys.stderr)
        return stop.exit_code
    finally:
        bar.close()
    if r.peer_note:
        print(r.peer_note, file=sys.stderr)
    busy = load.warning()
    if a.json:
        print(json.dumps(_finite(bench_json(r, a.repeats, busy)), indent=1))
        return 0
    s, reg, spec = r.summary, r.arms["regular"], r.arms["speculative"]
    print(f"target {r.target.name} ({r.target.dtype}, {r.target.device}); draft {getattr(r.proposer, 'name', '-')}; "
          f"B={cfg.batch_size} k={cfg.draft_length} policy={cfg.policy} max_new_tokens={cfg.max_new_tokens} "
          f"prompts={len(cfg.prompts)} repeats={a.repeats}")
    print(f"{'run':<28}{'tokens/s':>10}{'ratio':>8}")
    print(f"{'regular (ours, k=0)':<28}{reg.median_tok_s:>10.1f}{1.0:>8.2f}")
    print(f"{'speculative (ours)':<28}{spec.median_tok_s:>10.1f}{spec.median_ratio:>8.2f}")
    if r.peer_proposer is not None:
        peer = r.arms["peer"]
        print(f"{'transformers generate peer':<28}{peer.median_tok_s:>10.1f}{peer.median_ratio:>8.2f}"
              + (f"  (its draft: {r.peer_proposer.name})" if r.peer_proposer is not r.proposer else ""))
        print(f"ours vs peer: {statistics.median(r.peer_vs_ours):.2f}x (median of per-repeat ratios; per repeat: "
              + ", ".join(f"{x:.2f}" for x in r.peer_vs_ours) + ")")
    print(f"acceptance rate {fmt(s['acceptance_rate'])}, mean acceptance length {fmt(s['mean_acceptance_length'])}, "
          f"overhead fraction {fmt(s['overhead_frac'])}; per step: draft {1e3 * s['draft_s'] / s['steps']:.1f} ms, "
          f"verify {1e3 * s['verify_s'] / s['steps']:.1f} ms, accept {1e3 * s['accept_s'] / s['steps']:.1f} ms, "
          f"bookkeeping {1e3 * s['bookkeeping_s'] / s['steps']:.1f} ms")
    if busy:  # the ratios are interleaved, so they suffer less than the tokens/s
        print(f"warning: {busy}", file=sys.stderr)
    if r.identical is not None:
        same = r.identical
        print(f"greedy outputs identical to regular decoding: {sum(same)}/{len(same)} rows"
              + ("" if all(same) or r.target.dtype == __import__("torch").float32 else
                 " (bf16: a (k+1)-token verify can break exact logit ties differently; see bench/exactness.py)"))
    return 0


def _finite(v):
    """NaN and infinities as null: JSON has no word for them (a regular arm's acceptance is NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def bench_json(r, repeats: int, busy: str | None) -> dict:
    """``bench --json``: what the table says, as numbers (tokens/s, ratios and their rounds, acceptance,
    per-step phase times in ms, the peer, greedy rows identical to regular decoding)."""
    cfg, s = r.cfg, r.summary
    arms = {name: {"tokens_per_s": arm.median_tok_s, "ratio": arm.median_ratio, "rounds_tokens_per_s": arm.tok_s,
                   "rounds_ratio": arm.ratio} for name, arm in r.arms.items()}
    return {"target": r.target.name, "dtype": str(r.target.dtype).removeprefix("torch."), "device": str(r.target.device),
            "draft": getattr(r.proposer, "name", None), "batch_size": cfg.batch_size, "draft_length": cfg.draft_length,
            "policy": cfg.policy, "max_new_tokens": cfg.max_new_tokens, "prompts": len(cfg.prompts),
            "repeats": repeats, "arms": arms,
            "peer_draft": getattr(r.peer_proposer, "name", None), "peer_vs_ours": r.peer_vs_ours if r.peer_proposer is not None else None,
            "peer_note": r.peer_note,
            "acceptance_rate": s["acceptance_rate"], "mean_acceptance_length": s["mean_acceptance_length"],
            "overhead_frac": s["overhead_frac"],
            "per_step_ms": {phase: 1e3 * s[f"{phase}_s"] / s["steps"] for phase in ("draft", "verify", "accept",
                                                                                   "bookkeeping")},
            "identical_rows": None if r.identical is None else [sum(r.identical), len(r.identical)],
            "machine_busy": busy}


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecvizError(f"{what} must be comma-separated integers (got {text!r})") from None
    if not vals or min(vals) < 0:
        raise SpecvizError(f"{what} must be non-negative integers (got {text!r})")
    return vals


def cmd_calibrate(a) -> int:
    from specviz.interrupts import Interrupted, Stop
    from specviz.measure.calibrate import calibrate_config, summary_lines

    sizes, bars, stop = _ints(a.batch_sizes, "--batch-sizes"), [], Stop(at_once=True, final=True)

    def progress(total):
        bars.append(_progress(total, "calibrate"))
        return lambda: bars[-1].update(1)

    interrupted = None
    try:
        with stop:  # each timing point is on disk once measured (specviz.measure.calpartial)
            cal, path = calibrate_config(_config(a), sizes, a.k_max, a.prefix_len, progress)
    except Interrupted as e:
        interrupted = e
    finally:
        for bar in bars:
            bar.close()
    if interrupted is not None:
        kept = getattr(interrupted, "kept", "before the first timing point: nothing written")
        print(f"specviz: interrupted ({stop.signal}) {kept}", file=sys.stderr)
        return stop.exit_code
    print("\n".join(summary_lines(cal, path)))
    return 0


def cmd_sweep(a) -> int:
    from specviz.interrupts import Interrupted, Stop
    from specviz.measure import resume
    from specviz.analysis.explain import drift_warning
    from specviz.measure.sweep import sweep_config, write_sweep

    cfg = _config(a)
    cfg.validate()
    sizes, ks = _ints(a.batch_sizes, "--batch-sizes"), _ints(a.draft_lengths, "--draft-lengths")
    key = resume.sweep_key(cfg, a.repeats, a.recalibrate)
    done, cells, stop = resume.load_cells(a.out_dir, key), [], Stop(at_once=True, final=True)
    if done:
        print(f"resuming an interrupted sweep: {len(done)} finished cell(s) kept from {resume.resume_path(a.out_dir)}",
              file=sys.stderr)
    elif other := resume.other_sweep(a.out_dir, key):  # read once: it is a file
        n, differ = other
        print(f"note: {a.out_dir} holds {n} finished cell(s) of an interrupted sweep with other settings "
              f"({', '.join(differ)}); this sweep replaces them (give another --out-dir to keep them)", file=sys.stderr)
    bar = _progress(len(sizes) * len(ks), "sweep")

    def on_cell(c):
        cells.append(c)
        resume.save_cells(a.out_dir, key, cells)  # at once: even a kill -9 loses only the cell under way
        bar.update(1)
        print(f"B={c['batch_size']:<3} k={c['draft_length']:<2} alpha {c['alpha']:.3f}  measured {c['measured_speedup']:.2f}x"
              f"  predicted {c['predicted_speedup']:.2f}x (i.i.d. rows {c['predicted_speedup_iid']:.2f}x)", flush=True)
        if drift := drift_warning(c):
            print(f"  warning: B={c['batch_size']} k={c['draft_length']}: {drift}", flush=True)

    try:
        with stop:
            rows, summary, cal, config = sweep_config(cfg, sizes, ks, a.repeats, a.recalibrate, on_cell, done=done)
    except Interrupted as e:
        bar.close()
        if not cells:  # in the calibration that comes first, its points are kept (specviz.measure.calpartial)
            print(f"specviz: interrupted ({stop.signal}) " + (f"in the sweep's calibration {e.kept}" if hasattr(e, "kept")
                  else "before the first cell finished: nothing written"), file=sys.stderr)
            return stop.exit_code
        path = resume.write_cells_csv(a.out_dir, cells)
        (Path(a.out_dir).expanduser() / "sweep.json").unlink(missing_ok=True)  # it would describe another sweep
        print(f"specviz: interrupted ({stop.signal}) after {len(cells)} of {len(sizes) * len(ks)} cells: they are in "
              f"{path}; the same command again resumes from them", file=sys.stderr)
        return stop.exit_code
    finally:
        bar.close()
    csv_path, json_path = write_sweep(a.out_dir, rows, summary, cal, config)
    resume.clear(a.out_dir)
    print(f"\nmedian |predicted - measured| / measured: {summary['median_abs_rel_error']:.3f}")
    print(f"{'B':>3} {'best k (measured)':>18} {'k* (predicted)':>15} {'k* (one alpha)':>15} {'speedup':>8}")
    for b, v in summary["per_batch_size"].items():
        print(f"{b:>3} {v['measured_best_k']:>18} {v['predicted_k_star']:>15} {v['predicted_k_star_one_alpha']:>15} "
              f"{v['measured_best_speedup']:>8.2f}")
    print(f"written to {csv_path} and {json_path}", file=sys.stderr)
    return 0


def cmd_vllm(a, cfg=None) -> int:
    from specviz.interrupts import Interrupted, Stop
    from specviz.peers.command import run_vllm

    stop = Stop(at_once=True)  # the server's context manager stops it on the way out
    try:
        with stop:
            return run_vllm(a, cfg)
    except Interrupted:
        print(f"specviz: interrupted ({stop.signal}): the {'llama.cpp worker' if getattr(a, 'peer', '') == 'llamacpp' else 'vLLM server'} was stopped", file=sys.stderr)
        return stop.exit_code


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while torch and transformers still import: nothing had started
        print("\nspecviz: interrupted while starting: nothing was done", file=sys.stderr)
        return EXIT_SIGNAL_BASE + signal.SIGINT
    except BrokenPipeError:  # `specviz tune ... | head`: the reader left; say nothing more, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not raise again
        return EXIT_SIGNAL_BASE + signal.SIGPIPE


def _main(argv=None) -> int:
    try:  # before torch imports: --help and a usage mistake answer at once
        a = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, or a usage mistake already said in one line
        return e.code

    import torch
    import transformers

    from specviz.checks import check_args
    from specviz.distill.command import cmd_distill
    from specviz.peers.tunecmd import cmd_tune

    # our errors say what went wrong in one line; transformers' warnings and load bars only add noise,
    # and our own warnings print as one line too, not with the source line that raised them
    import warnings

    warnings.formatwarning = lambda message, category, *_, **__: f"specviz: warning: {message}\n"
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    try:
        check_args(a.cmd, a)  # every flag and file, before any model loads
        return {"run": cmd_run, "bench": cmd_bench, "calibrate": cmd_calibrate, "sweep": cmd_sweep,
                "distill": cmd_distill, "vllm": cmd_vllm, "tune": cmd_tune}[a.cmd](a)
    except OutOfMemory as e:  # refused before loading: the weights would not fit
        print(f"specviz: error: {e}", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    except MissingResource as e:
        print(f"specviz: error: {e}", file=sys.stderr)
        return EXIT_MISSING
    except SpecvizError as e:
        print(f"specviz: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return EXIT_SIGNAL_BASE + signal.SIGINT
    except (torch.OutOfMemoryError, MemoryError) as e:
        print(f"specviz: error: out of memory ({e.__class__.__name__}): try a smaller --batch-size or --draft-length",
              file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
    except RuntimeError as e:
        if "can't allocate memory" not in str(e) and "out of memory" not in str(e).lower():
            raise
        print("specviz: error: out of memory (the allocator failed): try a smaller --batch-size or --draft-length",
              file=sys.stderr)
        return EXIT_OUT_OF_MEMORY
