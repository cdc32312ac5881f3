"""The report's first screen: three questions about a session, answered from its chunk records.

Owns the answers and their rules, one per session:

* **Did it stall?** — the chunks whose ``stall_ms`` is above 0, of all chunks, and the longest stall.
* **Did host memory stay flat?** — process RSS at the first and the last chunk, and the least-squares
  slope of RSS over the second half of the chunks (the first half holds the warm-up: the pool filling,
  the allocator settling), in MiB per 100 chunks. Flat when that slope, carried over the whole run,
  adds less than ``FLAT_SHARE`` of the first chunk's RSS.
* **How fast?** — the median chunk's wall time in seconds, and frames per second of wall time over
  every chunk logged.

A session with no chunk records answers "no chunks yet" to each.
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from engine.report.read import SessionRecords

MiB = float(1 << 20)
FLAT_SHARE = 0.05
QUESTIONS = ("Did it stall?", "Did host memory stay flat?", "How fast?")


@dataclass(frozen=True)
class Answer:
    """One session's answer to one question: ``verdict`` in a word or two, ``detail`` the figures."""

    verdict: str
    detail: str
    good: bool | None = None     # True: as hoped (no stall, flat), False: not, None: nothing to judge


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 for fewer than two distinct x)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def stall_answer(chunks: list[dict]) -> Answer:
    stalls = [float(r.get("stall_ms", 0.0)) for r in chunks]
    stalled = sum(1 for s in stalls if s > 0)
    if stalled == 0:
        return Answer("No", f"0 of {len(chunks)} chunks waited on memory", True)
    return Answer("Yes", f"{stalled} of {len(chunks)} chunks waited on memory; longest {max(stalls):,.1f} ms, "
                         f"{sum(stalls) / 1000:,.2f} s in all", False)


def memory_answer(chunks: list[dict]) -> Answer:
    rows = [(float(r["chunk"]), r["rss_bytes"] / MiB) for r in chunks if "rss_bytes" in r and "chunk" in r]
    if not rows:
        return Answer("Unknown", "no RSS in the chunk records")
    second_half = rows[len(rows) // 2:]
    per_chunk = slope([x for x, _ in second_half], [y for _, y in second_half])
    first, last = rows[0][1], rows[-1][1]
    flat = abs(per_chunk * len(rows)) < FLAT_SHARE * first
    return Answer("Yes" if flat else "No",
                  f"RSS {first:,.0f} MiB at the first chunk, {last:,.0f} MiB at the last; "
                  f"slope {per_chunk * 100:+,.1f} MiB per 100 chunks (second half)", flat)


def speed_answer(chunks: list[dict], fps: float | None) -> Answer:
    walls = [float(r["wall_ms"]) for r in chunks if "wall_ms" in r]
    if not walls:
        return Answer("Unknown", "no chunk times in the chunk records")
    frames = sum(int(r.get("frames", 0)) for r in chunks)
    rate = frames * 1000.0 / sum(walls) if sum(walls) > 0 else 0.0
    realtime = f" ({rate / fps:.2f}x the video's {fps:g} fps)" if fps else ""
    return Answer(f"{median(walls) / 1000:.2f} s per chunk",
                  f"median chunk {median(walls) / 1000:.3f} s; {rate:.1f} frames per second{realtime}")


def session_answers(session: SessionRecords) -> tuple[Answer, Answer, Answer]:
    if not session.chunks:
        none = Answer("No chunks yet", "the log holds no chunk record")
        return none, none, none
    fps = session.header.get("model", {}).get("fps")
    return (stall_answer(session.chunks), memory_answer(session.chunks),
            speed_answer(session.chunks, fps if isinstance(fps, (int, float)) else None))
