"""The session's side of ``--spill-max``: when to drop, what a drop batch logs, what a save point keeps.

Owns the quota's bookkeeping for one session (``SessionMemory`` calls it; the store executes drops):

* ``enforce(chunk, pinned)`` after chunk ``chunk`` is stored: when more than ``plan.keep`` chunks are
  kept, drops a batch down to ``plan.low`` (``engine.retrieval.forget.choose_drops``: redundant first,
  then cold), never one of ``pinned`` (the chunks in the memory slots, the set staged for the next
  chunk, and those still inside the local window). The decision depends only on chunk numbers and
  poses, never on time, so a resumed run drops what the first run dropped. Each batch is one
  ``drop`` log record per reason (``take_records``).
* ``note_retrieval(first, found)`` counts whether a chunk's first choice (the policy's best pick had
  nothing been dropped) was still kept: the ``first_choice_rate`` of the summary.
* ``state_facts`` / ``load_facts``: the dropped chunks (and the chunk each was dropped at) and the
  quota in bytes, so that a resumed run holds the same holes under the same quota (a ``10%`` quota is
  not measured again).
"""
from __future__ import annotations

from engine.memory.quota import QuotaPlan
from engine.retrieval.forget import choose_drops


class SessionQuota:
    def __init__(self, plan: QuotaPlan, retriever, sink: bool):
        self.plan, self.retriever, self.sink = plan, retriever, sink
        self.dropped: dict[int, int] = {}          # chunk -> the chunk it was dropped at
        self.stored_through = -1                   # the newest chunk stored
        self.first_choice = {"found": 0, "retrievals": 0}
        self.counts = {"redundant": 0, "cold": 0, "batches": 0}
        self._records: list[dict] = []

    def kept(self) -> list[int]:
        return [c for c in range(self.stored_through + 1) if c not in self.dropped]

    def kept_count(self) -> int:
        return self.stored_through + 1 - len(self.dropped)

    def enforce(self, chunk: int, pinned: set[int]) -> list[int]:
        """Chunks to drop now that ``chunk`` is stored (see the module docstring)."""
        self.stored_through = max(self.stored_through, chunk)
        if self.kept_count() <= self.plan.keep:
            return []
        want = self.kept_count() - self.plan.low
        picks = choose_drops(self.retriever, self.kept(), pinned, want, chunk, sink=0 if self.sink else None)
        by_reason: dict[str, list[int]] = {}
        for c, reason in picks:
            self.dropped[c] = chunk
            by_reason.setdefault(reason, []).append(c)
        for reason, chunks in by_reason.items():
            self.counts[reason] += len(chunks)
            self._records.append({"chunk": chunk, "reason": reason, "chunks": sorted(chunks),
                                  "kept": self.kept_count()})
        self.counts["batches"] += bool(picks)
        return [c for c, _ in picks]

    def note_retrieval(self, first: int | None) -> None:
        if first is None:
            return
        self.first_choice["retrievals"] += 1
        self.first_choice["found"] += first not in self.dropped

    def take_records(self) -> list[dict]:
        out, self._records = self._records, []
        return out

    def state_facts(self) -> dict:
        return {"quota_bytes": self.plan.quota_bytes, "dropped": [[c, at] for c, at in sorted(self.dropped.items())],
                "stored_through": self.stored_through}

    def load_facts(self, facts: dict) -> None:
        self.dropped = {int(c): int(at) for c, at in facts["dropped"]}
        self.stored_through = int(facts["stored_through"])

    def summary(self) -> dict:
        fc = self.first_choice
        return {"quota_bytes": self.plan.quota_bytes, "quota_blocks": self.plan.blocks,
                "dropped": len(self.dropped), "dropped_redundant": self.counts["redundant"],
                "dropped_cold": self.counts["cold"], "drop_batches": self.counts["batches"],
                "first_choice_rate": round(fc["found"] / fc["retrievals"], 4) if fc["retrievals"] else None}
