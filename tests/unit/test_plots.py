"""engine/report/plots.py: every panel kind draws headless, and the PNG gives back what was plotted."""
from __future__ import annotations

import pytest
from PIL import Image

from engine.report.plots import Figure, Panel, RefLine, Series, drawn, read_png_data, save_png


def _figure() -> Figure:
    a = Series("prefetch", [0, 1, 2, 3], [0.0, 1.5, 0.0, 2.0])
    b = Series("on-demand", [0, 1, 2], [5.0, 7.0, 6.0])
    parts = (Series("memory", [0, 1], [1.0, 2.0]), Series("denoise", [0, 1], [10.0, 11.0]))
    bars = (Series("memory", ["revisit", "all"], [21.8, 20.1]), Series("window", ["revisit", "all"], [17.2, 17.6]))
    return Figure("a session", (
        Panel("stall", (a, b), "chunk", "ms", refs=(RefLine(1.5, "P99 prefetch", "dotted", like="prefetch"),)),
        Panel("queue", (a,), kind="step", note="only one"),
        Panel("time", parts, kind="stacked"),
        Panel("psnr", bars, kind="bar"),
    ), note="truncated", columns=2)


def test_every_kind_draws_and_the_data_reads_back(tmp_path):
    path = save_png(_figure(), tmp_path / "f.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 600
    data = read_png_data(path)
    assert data["title"] == "a session" and data["note"] == "truncated"
    kinds = [p["kind"] for p in data["panels"]]
    assert kinds == ["line", "step", "stacked", "bar"]
    stall = data["panels"][0]
    assert [s["label"] for s in stall["series"]] == ["prefetch", "on-demand"]
    assert stall["series"][1]["y"] == [5.0, 7.0, 6.0]
    assert stall["refs"][0] == {"y": 1.5, "label": "P99 prefetch", "style": "dotted", "like": "prefetch"}
    assert data["panels"][3]["series"][0]["x"] == ["revisit", "all"]


def test_a_png_without_data_is_a_key_error(tmp_path):
    path = tmp_path / "plain.png"
    Image.new("RGB", (4, 4)).save(path)
    with pytest.raises(KeyError):
        read_png_data(path)


def test_mismatched_series_is_our_bug():
    with pytest.raises(AssertionError):
        Series("x", [0, 1], [1.0])


@pytest.mark.parametrize("names", [4, 11])
def test_bar_names_stay_inside_the_picture(names):
    arms = ["window", "bf16", "int4", "noreproject", "int8", "int2", "k1", "k6", "sink", "on-demand", "sync"][:names]
    bars = tuple(Series(label, arms, [float(i) for i in range(names)]) for label in ("observed", "generated"))
    mpl = drawn(Figure("arms", (Panel("psnr", bars, kind="bar"), Panel("again", bars, kind="bar")), columns=2))
    renderer = mpl.canvas.get_renderer()
    for ax in mpl.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert [t.get_text() for t in labels] == arms
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert min(b.y0 for b in boxes) >= 0, "a bar's name runs off the bottom of the picture"
        if names > 6:   # many names are slanted, so that they do not run into each other
            assert all(t.get_rotation() > 0 for t in labels)
