"""Rows of several benchmark runs read together (``bench quality --from-rows`` given more than once).

Owns what makes two rows the same measurement — experiment, arm and episode — and keeps the first of
each: two runs merged both hold the baselines (window-only, bf16, int4) of the same episodes, which
would otherwise count twice in every pooled figure.
"""
from __future__ import annotations

ROW_IDENTITY = ("experiment", "arm", "seed", "kind", "arena_seed", "block_start", "chunks")


def once_each(rows: list[dict]) -> tuple[list[dict], int]:
    """The rows with each (experiment, arm, episode) kept once — the first — and how many were dropped."""
    seen, kept = set(), []
    for row in rows:
        key = tuple(row.get(k) for k in ROW_IDENTITY)
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept, len(rows) - len(kept)


def repeated_line(repeated: int) -> str:
    return (f"{repeated} row(s) named the same arm and episode as an earlier one (the baselines of two runs "
            "merged): the first of each was kept")
