"""The still of ``bench quality --long``: what the kept sessions look like, minute by minute.

Owns ``long_strip``: one PNG of rows — the rendered truth, then each kept arm's decoded MP4 frame — and
one column per bin of video (the frame in the middle of each minute), at the size the sessions show,
with each row's name on its left and each column's time of video above it.
The frames are the first seed's sessions that ``engine.quality.long_run`` keeps under ``sessions/``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.quality.long_score import SessionTruth, decoded_frames


def _frames(video: Path, wanted: list[int]) -> dict[int, np.ndarray]:
    out = {}
    for i, rgb in enumerate(decoded_frames(video)):
        if i in wanted:
            out[i] = rgb
        if len(out) == len(wanted):
            break
    return out


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def long_strip(sessions: list[tuple[Path, Path]], bins: int, bin_s: float, out: Path,
               names: list[str] | None = None) -> dict:
    """``sessions``: (log, MP4) of each row after the truth (the first's log gives the truth); ``names``:
    their row labels (default: the MP4s' names)."""
    from engine.io.image import save_png
    from engine.io.labels import BAND, header, row_labels

    truth = SessionTruth(sessions[0][0])
    fps, up = truth.fps, truth.model.upscale
    picks = [min(int((b + 0.5) * bin_s * fps), len(truth.poses) - 1) for b in range(bins)]
    rows = [np.concatenate([np.repeat(np.repeat(truth.frames[i].permute(1, 2, 0).numpy(), up, 0), up, 1)
                            for i in picks], axis=1)]
    for _, video in sessions:
        got = _frames(video, picks)
        rows.append(np.concatenate([got[i] for i in picks], axis=1))
    names = ["truth", *(names or [v.stem for _, v in sessions])]
    height, width = rows[0].shape[0], rows[0].shape[1] // len(picks)
    grid = np.concatenate(rows, axis=0)
    grid = np.concatenate([header([width] * len(picks), [_clock(i / fps) for i in picks]), grid], axis=0)
    left = row_labels([BAND] + [height] * len(rows), ["video time", *names], 110)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(out, np.ascontiguousarray(np.concatenate([left, grid], axis=1)))
    return {"frames": picks, "seconds": [i / fps for i in picks], "rows": names}
