"""Figures from plain data: the one plotting path of reports and benchmarks.

Owns how WorldPager draws a figure and how the drawn data is read back. A ``Figure`` is a title and
panels; a ``Panel`` holds labelled ``Series`` (x, y numbers, or category labels for bars), optional
horizontal ``RefLine``s (a budget, a P50 / P99 marker) and a kind:

* ``line``: one line per series, overlaid on the same axes;
* ``step``: the same drawn as steps (counts that change chunk by chunk);
* ``stacked``: the series stacked as filled areas (a time broken into its parts);
* ``bar``: grouped bars over the categories of the series' x (all of them, in order of appearance).

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
    note: str = ""       # drawn under the panel's title (e.g. "no pool in this session")
    from_zero: bool = True   # non-negative data: the y axis starts at 0 (False: fit the data, e.g. RSS)
    empty_text: str = ""     # written across the axes when no series has a value above 0 ("no stalls")

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
    # False: the title is stored, not drawn, and a lone panel's title is not drawn either: the page that
    # shows the figure heads it (one title per figure); the note is still drawn.
    draw_title: bool = True
    font_scale: float = 1.0   # every text size times this (a report's figures: larger, for reading)

    def as_data(self) -> dict:
        return asdict(self)


def shown_empty(panel: Panel) -> bool:
    """The panel has an ``empty_text`` and nothing above 0 to plot: the text is written across it."""
    return bool(panel.empty_text) and not any(v > 0 for s in panel.series for v in s.y)


def save_png(figure: Figure, path: Path) -> Path:
    """Draw ``figure`` to ``path`` (PNG) with its data embedded; returns the path."""
    Path(path).write_bytes(png_bytes(figure))
    return Path(path)


# Panel margins in inches: the y label and ticks, the legend (right of the axes, never over the
# data), the x label, the panel's title. Fixed margins instead of a layout engine, which draws twice.
_LEFT, _RIGHT, _BOTTOM, _TOP, _HEAD = 0.75, 2.3, 0.5, 0.35, 0.45
_SLANT_ROOM = 0.45      # inches more below a panel whose bar names are slanted
_SLANT_OVER = 6         # bars named more than this many: their names would run into each other, so slanted


def _categories(panel: "Panel") -> list[str]:
    return list(dict.fromkeys(str(c) for s in panel.series for c in s.x))   # every series' in order


def _slanted(panel: "Panel") -> bool:
    return panel.kind == "bar" and len(_categories(panel)) > _SLANT_OVER


def png_bytes(figure: Figure) -> bytes:
    out = io.BytesIO()
    drawn(figure).savefig(out, format="png", metadata={DATA_KEY: _encode(figure.as_data()), "Software": "worldpager"})
    return out.getvalue()


def drawn(figure: Figure):
    """The matplotlib figure of ``figure``, drawn on an Agg canvas (no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    assert figure.panels, figure.title
    cols = max(1, min(figure.columns, len(figure.panels)))
    rows = math.ceil(len(figure.panels) / cols)
    width, height = figure.panel_size
    fs = figure.font_scale
    titled = figure.draw_title or len(figure.panels) > 1   # panel titles drawn
    note_lines = len(figure.note.splitlines() or [""]) * bool(figure.note)
    head = (_HEAD if figure.draw_title else 0.15) + 0.2 * fs * note_lines
    top = (_TOP * fs if titled else 0.15) + 0.18 * fs * any(p.note for p in figure.panels)
    fig_w, fig_h = width * cols, height * rows + head
    mpl = MplFigure(figsize=(fig_w, fig_h), dpi=figure.dpi)
    FigureCanvasAgg(mpl)
    heading = "\n".join(([figure.title] if figure.draw_title else []) + ([figure.note] if figure.note else []))
    if heading:
        mpl.suptitle(heading, fontsize=(11 if figure.draw_title else 9) * fs, y=1 - 0.08 / fig_h, va="top")
    for i, panel in enumerate(figure.panels):
        row, col = divmod(i, cols)
        x0 = (col * width + _LEFT) / fig_w
        bottom = _BOTTOM + _SLANT_ROOM * _slanted(panel)
        y0 = (fig_h - head - (row + 1) * height + bottom) / fig_h
        # A report's side-by-side panels (cumulative counts, which leave their upper left empty) keep
        # their legend inside, so that their axes get the width.
        inside = cols > 1 and not figure.draw_title
        right = 0.3 if inside else _RIGHT
        ax = mpl.add_axes((x0, y0, (width - _LEFT - right) / fig_w, (height - bottom - top) / fig_h))
        _draw_panel(ax, panel, fs, titled, inside)
    return mpl


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


def _draw_panel(ax, panel: Panel, fs: float = 1.0, titled: bool = True, legend_inside: bool = False) -> None:
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
    if panel.from_zero:
        _floor_at_zero(ax, panel)
    for ref in panel.refs:
        ax.axhline(ref.y, linestyle=_REF_STYLES[ref.style], linewidth=1.0, label=ref.label,
                   color=colours.get(ref.like, "#444444"))
    title = "\n".join(([panel.title] if titled and panel.title else []) + ([panel.note] if panel.note else []))
    ax.set_title(title, fontsize=9 * fs)
    ax.set_xlabel(panel.xlabel, fontsize=9 * fs)
    ax.set_ylabel(panel.ylabel, fontsize=9 * fs)
    ax.tick_params(labelsize=8 * fs)
    ax.grid(True, alpha=0.3)
    if panel.kind != "bar" and panel.xlabel == "chunk":   # chunks are whole numbers
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if shown_empty(panel):
        ax.text(0.5, 0.5, panel.empty_text, transform=ax.transAxes, ha="center", va="center", color="#555555",
                fontsize=12 * fs, bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#bbbbbb"})
    if (panel.series or panel.refs) and legend_inside:
        ax.legend(fontsize=7 * fs, loc="upper left")
    elif panel.series or panel.refs:
        ax.legend(fontsize=7 * fs, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)   # never over the data


def _floor_at_zero(ax, panel: Panel) -> None:
    """Counts and sizes start at 0 (an all-zero series gets a unit scale, not matplotlib's ±0.05)."""
    values = [v for s in panel.series for v in s.y] + [r.y for r in panel.refs]
    if values and min(values) >= 0:
        ax.set_ylim(bottom=0, top=None if max(values) > 0 else 1)


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
    categories = _categories(panel)
    width = 0.8 / len(panel.series)
    for i, s in enumerate(panel.series):
        by_category = dict(zip((str(c) for c in s.x), s.y))
        offsets = [k + (i - (len(panel.series) - 1) / 2) * width for k in range(len(categories))]
        ax.bar(offsets, [by_category.get(c, 0.0) for c in categories], width=width, label=s.label,
               color=colours[s.label])
    slant = _slanted(panel)
    ax.set_xticks(range(len(categories)), categories, rotation=35 if slant else 0, ha="right" if slant else "center")
