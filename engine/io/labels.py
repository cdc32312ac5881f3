"""Text labels for the figures' frame strips and side-by-side videos, drawn into uint8 RGB pixels.

Owns ``header``: a band of centred labels, one per column, to put above frames laid side by side, and
``row_labels``: a band of labels, one per row, to put left of frames stacked in rows. Text is rendered
by matplotlib's Agg canvas (a declared dependency; no Pillow import), black on white, so a strip
says which row is the truth and which the model, and which column is which moment.
"""
from __future__ import annotations

import numpy as np

BAND = 20   # header height in pixels (even: H.264 needs even frame sizes)


def _render(width: int, height: int, texts: list[tuple[float, float, str, str]], size: float) -> np.ndarray:
    """uint8 [height, width, 3]: each (x, y, text, ha) at the fraction (x, y) of the band."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / 100, height / 100), dpi=100, facecolor="white")
    canvas = FigureCanvasAgg(fig)
    for x, y, text, ha in texts:
        fig.text(x, y, text, ha=ha, va="center", fontsize=size, color="black", family="DejaVu Sans")
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())
    assert rgba.shape[:2] == (height, width), (rgba.shape, height, width)
    return np.ascontiguousarray(rgba[..., :3])


def _fit(labels: list[str], room_px: float, size: float) -> float:
    """A font size (points at 100 dpi) at which the longest label fits ``room_px`` (about 0.6 em a char)."""
    longest = max((len(t) for t in labels), default=1) or 1
    return max(4.0, min(size, room_px / (0.6 * longest) * 72 / 100))


def header(widths: list[int], labels: list[str], height: int = BAND) -> np.ndarray:
    """uint8 [height, sum(widths), 3]: ``labels[i]`` centred over a column ``widths[i]`` pixels wide."""
    assert len(widths) == len(labels)
    total = sum(widths)
    size = _fit(labels, min(widths) - 4, height * 0.5 * 72 / 100 * 1.4)
    left, texts = 0, []
    for w, text in zip(widths, labels):
        texts.append(((left + w / 2) / total, 0.5, text, "center"))
        left += w
    return _render(total, height, texts, size)


def row_labels(heights: list[int], labels: list[str], width: int) -> np.ndarray:
    """uint8 [sum(heights), width, 3]: ``labels[i]`` left-aligned beside a row ``heights[i]`` pixels tall."""
    assert len(heights) == len(labels)
    total = sum(heights)
    size = _fit(labels, width - 6, min(min(heights) * 0.5, 10.0))
    top, texts = 0, []
    for h, text in zip(heights, labels):
        texts.append((4 / width, 1 - (top + h / 2) / total, text, "left"))
        top += h
    return _render(width, total, texts, size)
