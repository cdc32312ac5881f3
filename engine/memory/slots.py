"""Which past chunk sits in which memory slot of the attention context.

Owns the slot assignment of the context's memory region (k retrieval slots, plus one sink slot when
the sink is on) and the rule that keeps the valid memory tokens one contiguous range: slots fill from
the end of the region towards its start and are never emptied, only replaced. Holds no tensors; the
caller copies bytes into ``slot_views``.

Per chunk: ``plan(desired, available)`` keeps desired chunks that are already resident, puts available
desired chunks into slots whose chunk is not desired, and leaves a slot's previous chunk in place when
its replacement is not available (the stale-set fallback).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SlotPlan:
    """What one chunk's memory will be."""

    resident: list[int] = field(default_factory=list)          # desired, already in a slot
    fills: list[tuple[int, int]] = field(default_factory=list)  # (slot, chunk) to copy in now
    missing: list[int] = field(default_factory=list)           # desired, not available: not attended
    stale: list[int] = field(default_factory=list)             # not desired, kept for lack of a replacement

    @property
    def hits(self) -> int:
        return len(self.resident) + len(self.fills)


class MemorySlots:
    def __init__(self, retrieval_slots: int, sink: bool):
        self.k = retrieval_slots
        self.sink = sink
        self.total = retrieval_slots + (1 if sink else 0)
        self.chunk_in: list[int | None] = [None] * self.total   # physical slot -> chunk id

    @property
    def filled(self) -> int:
        return sum(c is not None for c in self.chunk_in)

    @property
    def sink_slot(self) -> int | None:
        """The sink takes the last physical slot (filled first, next to the window)."""
        return self.total - 1 if self.sink else None

    def resident(self) -> list[int]:
        return [c for c in self.chunk_in if c is not None]

    def retrieval_resident(self) -> list[int]:
        return [c for j, c in enumerate(self.chunk_in) if c is not None and j != self.sink_slot]

    def place_sink(self, chunk: int) -> int:
        assert self.sink and self.chunk_in[self.sink_slot] is None
        self.chunk_in[self.sink_slot] = chunk
        return self.sink_slot

    def _free_order(self) -> list[int]:
        """Retrieval slots not yet filled, from the end of the region (keeps the valid range contiguous)."""
        return [j for j in reversed(range(self.total)) if self.chunk_in[j] is None and j != self.sink_slot]

    def plan(self, desired: list[int], available: set[int]) -> SlotPlan:
        """Assign ``desired`` (at most k chunk ids) given which non-resident ones can be copied now."""
        assert len(desired) <= self.k
        plan = SlotPlan()
        in_slot = {c: j for j, c in enumerate(self.chunk_in) if c is not None and j != self.sink_slot}
        plan.resident = [c for c in desired if c in in_slot]
        wanted = [c for c in desired if c not in in_slot]
        replaceable = [j for c, j in sorted(in_slot.items()) if c not in desired]
        targets = self._free_order() + replaceable
        for chunk in wanted:
            if chunk in available and targets:
                plan.fills.append((targets.pop(0), chunk))
            else:
                plan.missing.append(chunk)
        filled_now = {j for j, _ in plan.fills}
        plan.stale = [self.chunk_in[j] for j in replaceable if j not in filled_now]
        return plan

    def apply(self, plan: SlotPlan) -> None:
        for slot, chunk in plan.fills:
            self.chunk_in[slot] = chunk

    def clear_retrieval(self) -> None:
        """Forget every retrieved chunk (the sink stays): the next plan refills all slots."""
        self.chunk_in = [c if j == self.sink_slot else None for j, c in enumerate(self.chunk_in)]

    def valid_tokens(self, tokens_per_chunk: int) -> int:
        assert all(c is not None for c in self.chunk_in[self.total - self.filled:]), (
            f"memory slots not contiguous: {self.chunk_in}")
        return self.filled * tokens_per_chunk
