"""The README's walking strip, cut from a walking benchmark's kept sessions: truth / memory / window-only
rows (``--arms``: also the depth arm's), one column every ``--every`` seconds of video (the bench's own ``walk-strip.png`` has one a minute).

Run from the repository's root, after the benchmark (`bench quality --walk` keeps the first seed's first
kind's sessions under OUT_DIR/sessions/):

    worldpager bench quality --walk --seeds 1 --kinds home --minutes 1 --out-dir walk-home/
    PYTHONPATH=$PWD python3 scripts/walk_strip.py walk-home/ docs/arena_walk_strip.png --every 10
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.arena.config import ArenaModelConfig
from engine.quality.long_strip import long_strip
from engine.runtime.telemetry import read_log

LABELS = {"int4": "memory (int4)", "window": "window-only", "depth": "memory, depth", "noreproject": "no re-projection"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="the benchmark's --out-dir")
    parser.add_argument("strip", type=Path, help="the PNG to write")
    parser.add_argument("--every", type=float, default=10.0, help="seconds of video between columns")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", default="home")
    parser.add_argument("--arms", default="int4,window", help="the rows under the truth, top down (comma-separated: "
                        + ", ".join(LABELS) + ")")
    args = parser.parse_args()
    rows = [(arm, LABELS.get(arm, arm)) for arm in args.arms.split(",")]
    folders = [args.out_dir / "sessions" / f"seed{args.seed}-{args.kind}-{arm}" for arm, _ in rows]
    sessions = [(f / f"{arm}.log.jsonl", f / f"{arm}.mp4") for f, (arm, _) in zip(folders, rows)]
    frames = [r for r in read_log(sessions[0][0]) if r.get("type") == "summary"][-1]["frames"]
    bins = int(frames / ArenaModelConfig().fps // args.every)
    print(json.dumps(long_strip(sessions, bins, args.every, args.strip, names=[name for _, name in rows])))


if __name__ == "__main__":
    main()
