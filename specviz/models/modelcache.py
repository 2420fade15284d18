"""The models this process holds: one least-recently-used cache, bounded in count, that really
frees what it evicts; and the memory check a load passes before it starts.

Every loaded model of a process lives here (targets and model drafts from
specviz.models.loading.get_model, distilled drafts from specviz.models.distilled), so one text-box
entry in the app, or a script that walks through many models, cannot pile them up until the host
runs out. A distilled draft borrows its target's embedding, so it is evicted with its target.
"""

from __future__ import annotations

import collections
import gc
import os
import threading
from typing import Callable, Hashable

from specviz.common import OutOfMemory

PAIRS_ENV = "SPECVIZ_MODEL_PAIRS"
DEFAULT_PAIRS = 2  # a target and its draft are a pair: the app switches between two pairs without reloading
HEADROOM = 1.1  # the weights' estimate plus 10% for what a load allocates beside them


class NotEnoughMemory(OutOfMemory):
    """A load refused before it started: its weights would not fit in the memory that is free."""

    def __init__(self, message: str, need: int, free: int):
        super().__init__(message)
        self.need, self.free = need, free


def capacity() -> int:
    """How many models a process keeps: 2 x $SPECVIZ_MODEL_PAIRS (default 2 pairs)."""
    raw = os.environ.get(PAIRS_ENV, "")
    pairs = int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_PAIRS
    return 2 * pairs


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_fits(what: str, params: int, bytes_per_param: int, dtype_name: str, where: str, free: int) -> None:
    """Refuse, in one line that names the numbers, a load whose weights would not fit in ``free``."""
    need = params * bytes_per_param
    if need * HEADROOM > free:
        raise NotEnoughMemory(f"not loading {what}: its weights need about {gb(need)} ({params / 1e9:.2f}B "
                              f"parameters x {bytes_per_param} bytes, {dtype_name}) and {where} has {gb(free)} "
                              "free; choose a smaller model or dtype, or free memory", need, free)


class ModelCache:
    """key -> loaded model, at most ``capacity`` of them, least recently used evicted first."""

    def __init__(self, capacity: Callable[[], int] = capacity):
        self._capacity = capacity
        self._items: collections.OrderedDict = collections.OrderedDict()  # key -> (model, parent key or None)
        self._lock = threading.RLock()  # held through a load: two sessions asking for one model load it once

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list:
        with self._lock:
            return list(self._items)

    def get(self, key: Hashable, load: Callable[[], object], parent: Hashable | None = None):
        """The model under ``key``, loading it with ``load()`` on a miss. A load refused for memory
        (NotEnoughMemory) is retried after each eviction until nothing is left to evict."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            while len(self._items) >= max(1, self._capacity()):
                self._evict_oldest()
            while True:
                try:
                    model = load()
                    break
                except NotEnoughMemory:
                    if not self._evict_oldest():
                        raise
            self._items[key] = (model, parent)
            return model

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            _free()

    def _evict_oldest(self) -> bool:
        """Drop the least recently used model and whatever borrows from it; False when empty."""
        if not self._items:
            return False
        gone = {next(iter(self._items))}
        while True:  # a dependent's own dependents go too
            more = {k for k, (_, parent) in self._items.items() if parent in gone} - gone
            if not more:
                break
            gone |= more
        for k in gone:
            del self._items[k]
        _free()
        return True


def _free() -> None:
    """Return evicted weights to the allocator now, not at the next collection."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


models = ModelCache()  # the process's one cache
