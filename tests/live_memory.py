"""A live-storage tracker for CPU runs: bytes of the tensor storages created while it is active and
still alive, and the peak of each phase (`tag`). torch keeps no allocator statistics on the CPU;
this counts what a CUDA caching allocator would be asked for (its block rounding left out)."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Live(TorchDispatchMode):
    def __init__(self, *existing: torch.Tensor) -> None:
        super().__init__()
        self.now, self.tag, self.peaks = 0, "", {}
        self.refs: dict[int, weakref.ref] = {}
        self.old = {t.untyped_storage().data_ptr() for t in existing}

    def _free(self, key: int, n: int) -> None:
        self.refs.pop(key, None)
        self.now -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key, n = storage.data_ptr(), storage.nbytes()
                if n and key not in self.old and key not in self.refs:
                    self.now += n
                    self.refs[key] = weakref.ref(storage, lambda _, k=key, n=n: self._free(k, n))
        self.peaks[self.tag] = max(self.peaks.get(self.tag, 0), self.now)
        return out
