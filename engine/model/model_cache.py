"""Networks loaded once and handed to every session that asks for the same ones (one cache per worker).

Owns the reuse of a model's *weights* across sessions, nothing else. What a session builds on top of
them — the noise RNG, the VAE streams, the action windows, the arena's last frame — is made anew by the
model family's builder for each session (``engine.model.registry``), so a session given cached networks
generates exactly what it would after a fresh load. The networks themselves hold no per-session state
(the streaming caches live in objects the pipeline makes, the KV in the attention context), and they
are only ever run under ``torch.no_grad()`` in eval mode.

A key names everything a load depends on (family, shape config, weights file and its modification
time, device, dtype). The cache keeps the ``keep`` most recently used entries: a batch that switches
between models does not hold every one of them in memory.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class ModelCache:
    """Loaded networks by key; ``loads`` counts real loads, ``reuses`` the loads it saved."""

    def __init__(self, keep: int = 1):
        assert keep >= 1, keep
        self.keep = keep
        self.loads = 0
        self.reuses = 0
        self._entries: OrderedDict[Hashable, object] = OrderedDict()

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The networks under ``key``, loading them (and dropping the least recently used) when absent."""
        if key in self._entries:
            self._entries.move_to_end(key)
            self.reuses += 1
            return self._entries[key]
        while len(self._entries) >= self.keep:   # free the old weights before the new ones are read
            self._entries.popitem(last=False)
        value = load()
        self.loads += 1
        self._entries[key] = value
        return value
