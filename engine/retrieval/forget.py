"""Which stored chunks a full disk quota drops: those retrieval is least likely to need (numpy only).

Contract. ``choose_drops(retriever, kept, pinned, n, now)`` returns at most ``n`` of ``kept`` (none in
``pinned``) as ``(chunk, reason)``, in the order they should go; a pure function of its arguments and
of the trajectory's poses, so a resumed run drops exactly what the first run dropped.

Order.
  1. ``redundant`` — a kept chunk that stands for no view cell (``Retriever.representatives``: the
     retriever reduces its candidates to the chunks that stand for a cell before the policy scores
     them; by default the newest chunk whose middle frame is in the cell, with first-visit retrieval
     every chunk that is the oldest to stand in one of its frames' cells), so it is never picked while
     the others are kept: dropping it changes no selection. Oldest first. ``sink`` (the first chunk when an attention sink
     keeps its own copy) counts as redundant too: it is never a candidate.
  2. ``cold`` — the chunk that stands for a cell, farthest first from the camera position of chunk ``now``
     (the middle frame's position; ties: the older first). The policy never considers candidates
     farther than its ``max_distance``, so these are the chunks the current path would need last.
"""
from __future__ import annotations

import numpy as np


def chunk_position(retriever, chunk: int) -> np.ndarray:
    """The camera position of ``chunk``'s middle frame."""
    return retriever.poses[retriever.grid.summary_frames(chunk, 1)[0], :3]


def choose_drops(retriever, kept: list[int], pinned: set[int], n: int, now: int,
                 sink: int | None = None) -> list[tuple[int, str]]:
    """At most ``n`` chunks of ``kept`` to drop, with their reason (see the module docstring)."""
    if n <= 0:
        return []
    representatives = set(retriever.representatives(list(kept)))
    out: list[tuple[int, str]] = []
    if sink is not None and sink in kept and sink not in pinned:
        out.append((sink, "redundant"))
    out += [(c, "redundant") for c in kept
            if c not in representatives and c not in pinned and c != sink]
    if len(out) >= n:
        return out[:n]
    here = chunk_position(retriever, now)
    cold = [c for c in sorted(representatives) if c not in pinned and c != sink]
    far = np.array([np.linalg.norm(chunk_position(retriever, c) - here) for c in cold])
    order = np.lexsort((np.asarray(cold), -far)) if cold else []   # farthest first, then the older
    out += [(cold[i], "cold") for i in order[:n - len(out)]]
    return out
