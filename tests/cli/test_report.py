"""``worldpager report`` and ``report --follow``: every view's plotted data read back against the logs of real
sessions (prefetch against on-demand, synthetic model, through the disk tier), the page parsed with every
image embedded, and the bad inputs: a log that is not ours, a cut log, other models, an unwritable --out."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from html.parser import HTMLParser
from itertools import accumulate
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.settings.overlay import resolve_session_config
from engine.report.plots import read_png_data
from engine.report.views import VIEWS
from engine.session.loop import Session
from engine.runtime.telemetry import SessionLog, percentile, read_log
from worldpager_cli.main import cli

MiB = float(1 << 20)
CHUNKS = 6


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """The logs of two real synthetic sessions that differ only in their store mode, through the disk tier
    (a 2-chunk pool)."""
    root = tmp_path_factory.mktemp("pair")
    logs = []
    for store in ("prefetch", "on-demand"):
        cfg = resolve_session_config(None, {
            "model": "synthetic", "chunk_ms": 0, "kv_scale": 0.034, "chunks": CHUNKS,
            "out": str(root / f"{store}.mp4"),
            "memory": {"store": store, "pool_slots": 2, "spill": str(root / f"spill-{store}")}})
        Session(cfg).run()
        logs.append(cfg.log_path)
    return logs[0], logs[1]


@pytest.fixture(scope="module")
def pair_report(pair, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pair-report") / "report"
    result = run("report", str(pair[0]), str(pair[1]), "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def chunks_of(log: Path) -> list[dict]:
    return [r for r in read_log(log) if r["type"] == "chunk"]


def figure(out: Path, view: str) -> dict:
    return read_png_data(out / f"{view}.png")


def series(panel: dict) -> dict[str, dict]:
    return {s["label"]: s for s in panel["series"]}


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.links, self.cells, self.headers = [], [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        for key in ("href", "src"):
            if key in attrs and tag != "img":
                self.links.append(attrs[key])
        self._tag = tag

    def handle_data(self, data):
        if getattr(self, "_tag", None) in ("td", "th") and data.strip():
            (self.headers if self._tag == "th" else self.cells).append(data.strip())


def test_report_of_a_pair_names_its_files_and_labels(pair, tmp_path):
    out = tmp_path / "report"
    result = run("report", str(pair[0]), str(pair[1]), "--out", str(out), "--view", "stall")
    assert result.exit_code == 0, result.output
    last = json.loads(result.output.strip().splitlines()[-1])
    assert last["labels"] == ["prefetch", "on-demand"] and last["chunks"] == [CHUNKS, CHUNKS]
    assert last["figures"] == {"stall": str(out / "stall.png")} and last["report"] == str(out / "report.html")


def test_a_pair_overlaid_every_view_plots_the_logs(pair, pair_report):
    out = pair_report
    logs = dict(zip(["prefetch", "on-demand"], (chunks_of(p) for p in pair)))

    def check(view, panel_index, key, scale=1.0, cumulative=False):
        got = series(figure(out, view)["panels"][panel_index])
        for label, chunks in logs.items():
            want = [r[key] / scale for r in chunks]
            want = list(accumulate(want)) if cumulative else want
            assert got[label]["x"] == [r["chunk"] for r in chunks]
            assert got[label]["y"] == pytest.approx(want), (view, key, label)

    check("stall", 0, "stall_ms")
    refs = {r["label"]: r["y"] for r in figure(out, "stall")["panels"][0]["refs"]}
    for label, chunks in logs.items():
        assert refs[f"P99, {label}"] == percentile([r["stall_ms"] for r in chunks], 99)
        assert refs[f"P50, {label}"] == percentile([r["stall_ms"] for r in chunks], 50)
    assert max(r["stall_ms"] for r in logs["on-demand"]) > 0   # on-demand waits on the drive; shown as such
    check("host_rss", 0, "rss_bytes", MiB)
    check("pool", 0, "pool_used_bytes", MiB)
    check("writeback", 0, "writeback_queue")
    check("drive", 0, "disk_bytes_read", MiB, cumulative=True)
    check("drive", 1, "disk_bytes_written", MiB, cumulative=True)
    for i, key in enumerate(("hits", "misses", "stale", "corrupt_blocks")):
        check("retrieval", i, key, cumulative=True)
    assert series(figure(out, "drive")["panels"][1])["prefetch"]["y"][-1] > 0   # the pool of 2 spilled
    time_panels = figure(out, "chunk_time")["panels"]
    assert [p["title"] for p in time_panels] == ["prefetch", "on-demand"]
    for panel, chunks in zip(time_panels, logs.values()):
        parts = series(panel)
        assert list(parts) == ["memory", "denoise", "store", "decode"]
        assert parts["denoise"]["y"] == pytest.approx([r["compute_ms"] for r in chunks])
        assert parts["store"]["y"] == pytest.approx([r["store_ms"] for r in chunks])
    capacity = {r["label"]: r["y"] for r in figure(out, "pool")["panels"][0]["refs"]}
    last_chunk = logs["prefetch"][-1]
    assert capacity["capacity, prefetch"] == (last_chunk["pool_used_bytes"] + last_chunk["pool_free_bytes"]) / MiB

    page = Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    assert sorted(i["data-view"] for i in page.images) == sorted(VIEWS)
    for image in page.images:
        assert image["src"].startswith("data:image/png;base64,")
        png = base64.b64decode(image["src"].split(",", 1)[1])
        assert png == (out / f"{image['data-view']}.png").read_bytes()
    assert page.links == []   # nothing fetched from anywhere
    assert page.headers == ["prefetch", "on-demand"]
    summaries = [read_log(p)[-1] for p in pair]
    hits_row = page.cells[page.cells.index("hits") + 1:page.cells.index("hits") + 3]
    assert hits_row == [str(s["retrieval"]["hits"]) for s in summaries]


def test_a_cut_log_is_plotted_up_to_the_cut_with_a_note(pair, tmp_path):
    lines = pair[0].read_bytes().splitlines(keepends=True)
    fifth = [i for i, line in enumerate(lines) if b'"type":"chunk"' in line][4]
    cut = tmp_path / "killed.log.jsonl"
    cut.write_bytes(b"".join(lines[:fifth]) + lines[fifth][:40])    # up to 4 chunks, half of the 5th
    out = tmp_path / "report"
    result = run("report", str(cut), "--out", str(out), "--view", "stall")
    assert result.exit_code == 0, result.output
    data = figure(out, "stall")
    assert series(data["panels"][0])["synthetic prefetch int4"]["x"] == [0, 1, 2, 3]
    assert f"cut at line {fifth + 1}" in data["note"] and f"plotted up to line {fifth}" in data["note"]
    assert f"cut at line {fifth + 1}" in (out / "report.html").read_text(encoding="utf-8")
    assert "unfinished" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("content", [b"hello\n", b'{"type": "chunk", "chunk": 0}\n', b"\x89PNG\r\n\x1a\n"])
def test_a_log_that_is_not_ours_is_one_line(tmp_path, content):
    bad = tmp_path / "notes.txt"
    bad.write_bytes(content)
    result = CliRunner().invoke(cli, ["report", str(bad), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "is not a session log" in result.output
    assert not (tmp_path / "r").exists()


def test_an_unwritable_out_is_one_line(pair, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub"):
        result = CliRunner().invoke(cli, ["report", str(pair[0]), "--out", str(out)])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert "worldpager: error:" in result.output and str(out) in result.output


def test_logs_of_different_models_overlay_labelled(pair, tmp_path):
    """A second model's log, written by the session's own log writer from the real log's records."""
    records = read_log(pair[0])
    other = tmp_path / "gta.log.jsonl"
    log = SessionLog(other)
    header = records[0]
    log.header({**header["config"], "model": "mg2-gta"}, {**header["model"], "model": "mg2-gta"})
    for r in [r for r in records if r["type"] == "chunk"][:3]:
        log.chunk({k: v for k, v in r.items() if k != "type"})
    log.close("done")
    out = tmp_path / "report"
    result = run("report", str(pair[0]), str(other), "--out", str(out), "--view", "stall")
    assert result.exit_code == 0, result.output
    assert figure(out, "stall")["extra"]["labels"] == ["synthetic", "mg2-gta"]
    assert [len(s["x"]) for s in figure(out, "stall")["panels"][0]["series"]] == [CHUNKS, 3]


def test_report_follow_redraws_a_growing_log(pair, tmp_path):
    lines = pair[1].read_bytes().splitlines(keepends=True)
    growing, out = tmp_path / "live.log.jsonl", tmp_path / "live"
    header = {**json.loads(lines[0]), "pid": os.getpid(), "started": time.time()}   # this test writes it now
    growing.write_text(json.dumps(header) + "\n")
    seen_mid_run = []

    def writer():   # 4 chunks, then wait for the redraw they are due, then the rest and the summary
        with open(growing, "ab") as f:
            written = 0
            for line in lines[1:]:
                f.write(line)
                f.flush()
                written += b'"type":"chunk"' in line
                if written == 4 and not seen_mid_run:
                    deadline = time.monotonic() + 600
                    while not (out / "stall.png").exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    seen_mid_run.append(len(figure(out, "stall")["panels"][0]["series"][0]["x"]))
    thread = threading.Thread(target=writer)
    thread.start()
    result = run("report", str(growing), "--out", str(out), "--follow", "--every", "4", "--idle-timeout", "60")
    thread.join()
    assert result.exit_code == 0, result.output
    assert f"page: {out / 'report.html'}" in result.stdout and "redrawn at chunk 3" in result.stderr
    assert seen_mid_run == [4]
    assert len(figure(out, "stall")["panels"][0]["series"][0]["x"]) == CHUNKS


def test_report_follow_takes_one_log(pair, tmp_path):
    result = CliRunner().invoke(cli, ["report", str(pair[0]), str(pair[1]), "--follow", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "--follow takes one log" in result.output


def test_bench_store_draws_its_runs_with_the_report(tmp_path):
    spill, figures = tmp_path / "spill", tmp_path / "figures"
    spill.mkdir()
    result = run("bench", "store", "--spill", str(spill), "--modes", "on-demand", "--drive-bw", "unlimited",
                 "--chunks", "2", "--warmup", "0", "--kv-scale", "0.034", "--chunk-ms", "0", "--figures", str(figures))
    assert result.exit_code == 0, result.output
    log = figures / "logs" / "on-demand-unlimited-background.log.jsonl"
    stall = figure(figures, "stall")
    assert stall["extra"]["labels"] == ["synthetic on-demand int4"] and stall["extra"]["logs"] == [str(log)]
    assert stall["panels"][0]["series"][0]["y"] == [r["stall_ms"] for r in chunks_of(log)]
    assert (figures / "report.html").is_file()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no headless Chromium here (the parse test covers CI)")
def test_the_page_opens_with_its_images_in_headless_chromium(pair, tmp_path):
    """Only the embedded figures are coloured: the stacked chunk time's areas must reach the screen."""
    import numpy as np
    from PIL import Image

    out = tmp_path / "report"
    assert run("report", str(pair[0]), "--out", str(out), "--view", "chunk_time").exit_code == 0
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1000,1200", (out / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    with Image.open(shot) as image:
        rgb = np.asarray(image.convert("RGB")).astype(int)
    coloured = int((rgb.max(axis=-1) - rgb.min(axis=-1) > 80).sum())   # the page's own text is grey
    assert coloured > 2000, coloured
