"""Device maps: a target larger than one GPU, its layers spread by accelerate over every GPU, then
CPU memory, then disk (``--device-map auto``); where each part landed, said in one line."""

from __future__ import annotations

import torch

from specviz.common import cache_dir

DEVICE_MAPS = ("none", "auto")


def main_device(device_map: dict) -> torch.device:
    """Where a dispatched model takes its inputs: the first GPU it uses (accelerate runs layers
    offloaded to cpu or disk there too), else the CPU."""
    gpus = [d for d in device_map.values() if isinstance(d, int) or str(d).startswith("cuda")]
    if not gpus:
        return torch.device("cpu")
    first = gpus[0]
    return torch.device(f"cuda:{first}" if isinstance(first, int) else first)


def is_split(device_map: dict | None) -> bool:
    """True when the weights sit on more than one device (or partly in cpu/disk offload)."""
    return bool(device_map) and len({str(d) for d in device_map.values()}) > 1


def placement(device_map: dict | None) -> str:
    """One line: how many decoder layers each device holds ("cuda:0 14 layers, cuda:1 16 layers")."""
    if not device_map:
        return ""
    if set(device_map) == {""}:  # accelerate put everything on one device
        d = device_map[""]
        return f"{f'cuda:{d}' if isinstance(d, int) else d}: the whole model"
    counts: dict[str, int] = {}
    for module, d in device_map.items():
        name = f"cuda:{d}" if isinstance(d, int) else str(d)
        counts.setdefault(name, 0)
        counts[name] += module.rsplit(".", 1)[-1].isdigit() and ".layers." in f".{module}"
    return ", ".join(f"{d} {n} layers" for d, n in counts.items())


def plan_device_map(config, max_memory: dict, dtype: torch.dtype = torch.float32) -> dict:
    """accelerate's placement for a model of this config under ``max_memory`` ({0: bytes, 1: bytes,
    "cpu": bytes}), without allocating weights: what ``from_pretrained(device_map="auto")`` does on a
    machine with those devices, decoder layers kept whole."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    return dict(infer_auto_device_map(model, max_memory=max_memory, dtype=dtype,
                                      no_split_module_classes=model._no_split_modules))


def dispatch_kwargs(spec: str, max_memory: dict | None) -> dict:
    """from_pretrained's arguments for device_map="auto": layers that fit nowhere go to a disk folder
    under the cache (one per model)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec)
    kw = {"device_map": "auto", "offload_folder": str(cache_dir() / "offload" / safe)}
    if max_memory:
        kw["max_memory"] = max_memory
    return kw
