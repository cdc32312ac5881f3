"""The report page as a reader meets it: each figure's title once, empty panels that say why, and a
first screen that answers "did it stall, did memory stay flat, how fast" from the log's chunk records.

The logs are a real micro session's; the stalling and growing variants are that log with its chunk
records' ``stall_ms`` / ``rss_bytes`` rewritten, so that the answers are known in advance."""
from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engine.settings.overlay import resolve_session_config
from engine.report.plots import read_png_data
from engine.report.answers import FLAT_SHARE, memory_answer, slope
from engine.report.views import VIEW_TITLES
from engine.report.write import write_report
from engine.session.loop import Session
from engine.runtime.telemetry import read_log

CHUNKS = 4
MiB = 1 << 20


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("page")
    cfg = resolve_session_config(None, {"model": "micro", "chunks": CHUNKS, "out": str(root / "a.mp4"),
                                        "save_every": 0})
    Session(cfg).run()
    return cfg.log_path


def rewritten(log: Path, out: Path, **per_chunk) -> Path:
    """``log`` with each chunk record's fields set from ``per_chunk`` (field -> one value per chunk)."""
    lines = []
    for record in read_log(log):
        if record["type"] == "chunk":
            record.update({k: v[record["chunk"]] for k, v in per_chunk.items()})
        lines.append(json.dumps(record))
    out.write_text("\n".join(lines) + "\n")
    return out


class Text(HTMLParser):
    """The page's visible text by element (``h2`` headings, the answers' verdicts)."""

    def __init__(self):
        super().__init__()
        self.stack, self.headings, self.verdicts, self.empty = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.stack.append((tag, dict(attrs).get("class", "")))

    def handle_endtag(self, tag):
        self.stack.pop()

    def handle_data(self, data):
        if not self.stack:
            return
        tag, cls = self.stack[-1]
        if tag == "h2":
            self.headings.append(data)
        elif "verdict" in cls:
            self.verdicts.append(data)
        elif cls == "empty":
            self.empty.append(data)


def page(report) -> tuple[str, Text]:
    html = report.page.read_text(encoding="utf-8")
    text = Text()
    text.feed(html)
    return html, text


def test_each_figure_title_is_on_the_page_once_and_not_drawn_again(log, tmp_path):
    report = write_report([log], tmp_path / "r")
    html, text = page(report)
    for name, title in VIEW_TITLES.items():
        assert html.count(title) == 1 and text.headings.count(title) == 1, title
        data = read_png_data(report.figures[name])
        assert data["title"] == title and data["draw_title"] is False   # kept in the data, not drawn
        assert data["dpi"] == 100 and data["panel_size"][0] * data["columns"] == 10.0


def test_a_run_without_stalls_says_so_on_the_page_and_in_the_panel(log, tmp_path):
    calm = rewritten(log, tmp_path / "calm.log.jsonl", stall_ms=[0.0] * CHUNKS)
    report = write_report([calm], tmp_path / "r")
    _, text = page(report)
    assert f"no stalls ({CHUNKS} chunks)" in text.empty
    assert read_png_data(report.figures["stall"])["panels"][0]["empty_text"] == f"no stalls ({CHUNKS} chunks)"
    assert text.verdicts[0] == "No"
    assert "no disk tier (no --spill)" in text.empty   # the session had no spill directory


def test_a_stalling_run_answers_yes_with_its_count_and_longest(log, tmp_path):
    stalls = [0.0, 12.5, 0.0, 40.0]
    report = write_report([rewritten(log, tmp_path / "s.log.jsonl", stall_ms=stalls)], tmp_path / "r")
    html, text = page(report)
    assert text.verdicts[0] == "Yes" and "2 of 4 chunks waited on memory; longest 40.0 ms" in html
    assert not any(e.startswith("no stalls") for e in text.empty)


def test_memory_that_grows_is_not_flat(log, tmp_path):
    base = 300 * MiB
    grows = rewritten(log, tmp_path / "g.log.jsonl", rss_bytes=[base + i * 40 * MiB for i in range(CHUNKS)])
    flat = rewritten(log, tmp_path / "f.log.jsonl", rss_bytes=[base + (i % 2) * MiB for i in range(CHUNKS)])
    _, grown = page(write_report([grows], tmp_path / "rg"))
    _, kept = page(write_report([flat], tmp_path / "rf"))
    assert grown.verdicts[1] == "No" and kept.verdicts[1] == "Yes"


def test_the_memory_rule_at_its_edge():
    """Growth carried over the run just under and just over FLAT_SHARE of the first RSS."""
    n, first = 100, 1000.0
    for share, flat in ((FLAT_SHARE * 0.9, True), (FLAT_SHARE * 1.1, False)):
        per_chunk = share * first / n
        chunks = [{"chunk": i, "rss_bytes": (first + per_chunk * i) * MiB} for i in range(n)]
        assert memory_answer(chunks).good is flat, share
    assert slope([0, 1, 2], [1, 3, 5]) == pytest.approx(2.0) and slope([1], [1]) == 0.0


def test_how_fast_is_the_median_chunk_and_frames_per_second(log, tmp_path):
    walls = [1000.0, 2000.0, 3000.0, 500.0]
    report = write_report([rewritten(log, tmp_path / "w.log.jsonl", wall_ms=walls)], tmp_path / "r")
    html, text = page(report)
    frames = sum(r["frames"] for r in read_log(log) if r["type"] == "chunk")
    assert text.verdicts[2] == "1.50 s per chunk"
    assert f"{frames * 1000 / sum(walls):.1f} frames per second" in html
