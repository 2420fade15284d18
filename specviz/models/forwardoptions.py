"""How a run's forwards execute: chosen once per run and handed to every KV cache the run makes.

    lean          our lean llama forward (specviz.models.fastllama) where the model supports it,
                  else transformers' forward
    static_cache  preallocated KV buffers (specviz.models.statickv); needs the lean forward
    cuda_graphs   verify and draft forwards replayed as CUDA graphs (on CUDA; implies static_cache)
    compile       those forwards' decoder layers compiled by torch.compile (specviz.models.compiled;
                  implies static_cache; eager, with one line saying why, where compiling fails)

``specviz.run.forward_options`` makes one from a RunConfig (``--cuda-graphs``, ``--compile``, the Live
page's switches). The environment gives the defaults a developer can flip without a flag
(``SPECVIZ_LEAN_FORWARD=0``, ``SPECVIZ_STATIC_CACHE=1``, ``SPECVIZ_CUDA_GRAPHS=1``,
``SPECVIZ_COMPILE=1``); nothing in the library writes them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping


@dataclasses.dataclass(frozen=True)
class ForwardOptions:
    lean: bool = True
    static_cache: bool = False
    cuda_graphs: bool = False
    compile: bool = False

    def __post_init__(self):
        if (self.cuda_graphs or self.compile) and not self.static_cache:  # both run over the static buffers
            object.__setattr__(self, "static_cache", True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, cuda_graphs: bool = False,
                 compile: bool = False) -> "ForwardOptions":
        """The environment's defaults, with CUDA graphs or compiling on if asked for here or there."""
        env = os.environ if env is None else env
        graphs = cuda_graphs or env.get("SPECVIZ_CUDA_GRAPHS", "0") == "1"
        compiled = compile or env.get("SPECVIZ_COMPILE", "0") == "1"
        return cls(lean=env.get("SPECVIZ_LEAN_FORWARD", "1") != "0",
                   static_cache=graphs or compiled or env.get("SPECVIZ_STATIC_CACHE", "0") == "1",
                   cuda_graphs=graphs, compile=compiled)
