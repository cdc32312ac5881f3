"""Figures from plain data: the one plotting path of reports and benchmarks.

Owns how WorldPager draws a figure and how the drawn data is read back. A ``Figure`` is a title and
panels; a ``Panel`` holds labelled ``Series`` (x, y numbers, or category labels for bars), optional
horizontal ``RefLine``s (a budget, a P50 / P99 marker) and a kind:

* ``line``: one line per series, overlaid on the same axes;
* ``step``: the same drawn as steps (counts that change chunk by chunk);
* ``stacked``: the series stacked as filled areas (a time broken into its parts);
* ``bar``: grouped bars over the categories of the first series' x.

``save_png`` draws with matplotlib's Agg canvas (no pyplot, no display, no global state) and writes
the figure's data itself into the PNG as a text chunk (``worldpager-figure``: zlib-compressed JSON,
base64): ``read_png_data`` gives back exactly the numbers that were plotted, so a test can check a
figure's content, not only that a file exists. Callers pass plain lists; nothing here knows a log.
"""
from __future__ import annotations

import base64
import io
import json
import math
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

DATA_KEY = "worldpager-figure"
KINDS = ("line", "step", "stacked", "bar")
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_REF_STYLES = {"dashed": "--", "dotted": ":", "solid": "-", "dashdot": "-."}


@dataclass(frozen=True)
class Series:
    """One labelled series; ``x`` is numbers, or category names for a bar panel."""

    label: str
    x: Sequence[float | str]
    y: Sequence[float]

    def __post_init__(self):
        assert len(self.x) == len(self.y), (self.label, len(self.x), len(self.y))


@dataclass(frozen=True)
class RefLine:
    """A horizontal reference line at ``y``; ``like`` names the series whose colour it takes."""

    y: float
    label: str
    style: str = "dashed"
    like: str | None = None

    def __post_init__(self):
        assert self.style in _REF_STYLES, self.style


@dataclass(frozen=True)
class Panel:
    title: str
    series: tuple[Series, ...]
    xlabel: str = ""
    ylabel: str = ""
    kind: str = "line"
    refs: tuple[RefLine, ...] = ()
    note: str = ""       # drawn in the panel's corner (e.g. "no pool in this session")

    def __post_init__(self):
        assert self.kind in KINDS, self.kind


@dataclass(frozen=True)
class Figure:
    title: str
    panels: tuple[Panel, ...]
    note: str = ""       # drawn under the title (e.g. "log truncated at line 41")
    columns: int = 1
    panel_size: tuple[float, float] = (8.0, 2.8)   # inches per panel
    dpi: int = 80
    extra: dict = field(default_factory=dict)      # stored with the data, not drawn

    def as_data(self) -> dict:
        return asdict(self)


def save_png(figure: Figure, path: Path) -> Path:
    """Draw ``figure`` to ``path`` (PNG) with its data embedded; returns the path."""
    Path(path).write_bytes(png_bytes(figure))
    return Path(path)


def png_bytes(figure: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    assert figure.panels, figure.title
    cols = max(1, min(figure.columns, len(figure.panels)))
    rows = math.ceil(len(figure.panels) / cols)
    width, height = figure.panel_size
    top = 0.5 + (0.25 if figure.note else 0.0)
    mpl = MplFigure(figsize=(width * cols, height * rows + top), dpi=figure.dpi, layout="constrained")
    FigureCanvasAgg(mpl)
    mpl.suptitle(figure.title + (f"\n{figure.note}" if figure.note else ""), fontsize=11)
    axes = mpl.subplots(rows, cols, squeeze=False)
    for i, panel in enumerate(figure.panels):
        _draw_panel(axes[i // cols][i % cols], panel)
    for j in range(len(figure.panels), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    out = io.BytesIO()
    mpl.savefig(out, format="png", metadata={DATA_KEY: _encode(figure.as_data()), "Software": "worldpager"})
    return out.getvalue()


def read_png_data(path: Path) -> dict:
    """The data ``save_png`` plotted into ``path`` (``Figure.as_data()``); KeyError if it has none."""
    from PIL import Image

    with Image.open(path) as image:
        text = image.text[DATA_KEY]
    return json.loads(zlib.decompress(base64.b64decode(text)))


def _encode(data: dict) -> str:
    return base64.b64encode(zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 9)).decode()


def _colours(panel: Panel) -> dict[str, str]:
    return {s.label: _COLOURS[i % len(_COLOURS)] for i, s in enumerate(panel.series)}


def _draw_panel(ax, panel: Panel) -> None:
    colours = _colours(panel)
    if panel.kind == "bar":
        _draw_bars(ax, panel, colours)
    elif panel.kind == "stacked":
        _draw_stacked(ax, panel, colours)
    else:
        for s in panel.series:
            draw = ax.step if panel.kind == "step" else ax.plot
            kwargs = {"where": "mid"} if panel.kind == "step" else {}
            draw(list(s.x), list(s.y), label=s.label, color=colours[s.label], linewidth=1.2, **kwargs)
    for ref in panel.refs:
        ax.axhline(ref.y, linestyle=_REF_STYLES[ref.style], linewidth=1.0, label=ref.label,
                   color=colours.get(ref.like, "#444444"))
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel(panel.xlabel, fontsize=9)
    ax.set_ylabel(panel.ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.3)
    if panel.note:
        ax.text(0.99, 0.97, panel.note, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color="#555555")
    if panel.series or panel.refs:
        ax.legend(fontsize=7, loc="upper left", framealpha=0.7)


def _draw_stacked(ax, panel: Panel, colours: dict[str, str]) -> None:
    if not panel.series:
        return
    x = list(panel.series[0].x)
    assert all(list(s.x) == x for s in panel.series), "stacked series share their x"
    ax.stackplot(x, *[list(s.y) for s in panel.series], labels=[s.label for s in panel.series],
                 colors=[colours[s.label] for s in panel.series], alpha=0.85)


def _draw_bars(ax, panel: Panel, colours: dict[str, str]) -> None:
    if not panel.series:
        return
    categories = [str(c) for c in panel.series[0].x]
    width = 0.8 / len(panel.series)
    for i, s in enumerate(panel.series):
        by_category = dict(zip((str(c) for c in s.x), s.y))
        offsets = [k + (i - (len(panel.series) - 1) / 2) * width for k in range(len(categories))]
        ax.bar(offsets, [by_category.get(c, 0.0) for c in categories], width=width, label=s.label,
               color=colours[s.label])
    ax.set_xticks(range(len(categories)), categories)
