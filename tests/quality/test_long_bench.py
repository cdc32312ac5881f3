"""``worldpager bench quality --long --quick``: the long benchmark's smoke size end to end — the table's
columns, the JSON line's keys per arm and per bin, the per-minute figure's data — and that its numbers
are computed from the sessions' decoded MP4 frames against the rendered truth (recomputed here with
PyAV; and a session's own truth, written by ``arena truth`` and scored in its place, scores as the truth)."""
from __future__ import annotations

import json

import av
import numpy as np
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from engine.arena.session_camera import session_camera
from engine.arena.truth import write_truth
from engine.io.video import count_frames
from engine.quality.metrics import psnr
from engine.report.plots import read_png_data
from engine.quality.long_paths import LONG_SMOKE, long_episode
from engine.quality.long_score import STOOD_RADIUS, SessionTruth, score_session
from engine.quality.long_summary import FIGURES
from worldpager_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", "--long", *args], catch_exceptions=False)


def _first_bin_psnr(video, log, observed_chunks: int, bin_frames: int) -> tuple[float, int]:
    """Mean PSNR of the generated frames of the first bin, from the MP4 decoded here."""
    camera = session_camera(log)
    truth = SessionTruth(log).frames.float() / 127.5 - 1
    grid = camera.spec.grid
    first_generated = grid.first_frames + grid.frames_per_chunk * (observed_chunks - 1)
    scores = []
    with av.open(str(video)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if first_generated <= i < bin_frames:
                x = torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1).float()[None]
                x = F.avg_pool2d(x, camera.model.upscale)[0] / 127.5 - 1
                scores.append(float(psnr(x, truth[i])))
    return float(np.mean(scores)), len(scores)


def test_long_smoke_runs_and_scores_decoded_frames(tmp_path):
    out = tmp_path / "out"
    result = run("--quick", "--out-dir", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("smoke test (--long --quick)")
    header = next(line for line in lines if line.startswith("bin "))
    for column in ("PSNR int4", "window", "SSIM mem / win", "sharp mem / win", "obs. returns", "self-consist.",
                   "other view"):
        assert column in header
    assert "n/a (1 episode)" in result.output and "Not covered" in result.output

    summary = json.loads(lines[-1])
    assert summary["bench"] == "quality-long" and summary["smoke_test"] is True and summary["params"]["quick"]
    assert summary["arms"] == ["window", "int4"] and summary["episodes"] == 1
    ep = long_episode(0, LONG_SMOKE)
    assert summary["chunks"] == ep.chunks and summary["observed_chunks"] == ep.observed_chunks
    assert summary["bins"] == 4 and summary["bin_s"] == 5.0
    for arm in ("window", "int4"):
        d = summary["per_arm"][arm]
        assert len(d["bins"]) == 4 and set(d["session"]) == {f[0] for f in FIGURES}
        assert all(b["psnr"]["value"] > 0 and 0 < b["sharpness"]["value"] for b in d["bins"])
        assert d["session"]["observed_psnr"]["value"] > 0 and d["session"]["self_consistency"]["value"] > 0
        assert d["session"]["control"]["value"] > 0 and d["late"]["sharpness"]["ci"] is None
        assert set(d["last_minus_first_db"]) == {"mean", "ci", "pairs"}
    gain = summary["gain_over_window"]["int4"]["session"]
    assert set(gain) == {"psnr", "observed_psnr", "generated_psnr", "self_consistency"}
    assert summary["per_arm"]["int4"]["hits"] > 0 and summary["per_arm"]["window"]["hits"] == 0

    still = summary["still"]
    assert (out / "long-strip.png").read_bytes()[:4] == b"\x89PNG" and len(still["frames"]) == 4
    assert still["rows"] == ["truth", "int4", "window-only"]
    figure = read_png_data(out / "long.png")
    assert len(figure["panels"]) == 4 and "SMOKE TEST" in figure["title"]
    assert [s["label"] for s in figure["panels"][0]["series"]] == ["window-only", "memory (int4)"]
    assert abs(figure["panels"][0]["series"][1]["y"][0] - summary["per_arm"]["int4"]["bins"][0]["psnr"]["value"]) < 1e-3

    # The first bin's PSNR again, from the kept session's MP4 decoded here.
    rows = [json.loads(line) for line in (out / "long-rows.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["arm"] == "int4")
    session = out / "sessions" / "seed0-int4"
    video, log = session / "int4.mp4", session / "int4.log.jsonl"
    assert count_frames(video) == row["frames"]
    mean, n = _first_bin_psnr(video, log, row["observed_chunks"], int(row["fps"] * row["bin_s"]))
    assert n == row["bins"][0]["frames"] and abs(mean - row["bins"][0]["psnr"] / n) < 1e-3

    # After the first seconds the frames split by where the camera stands: a place it has stood at
    # before (an earlier chunk's latent camera within STOOD_RADIUS, checked here frame by frame) or not.
    assert row["late_stood"]["frames"] + row["late_new"]["frames"] == row["late"]["frames"]
    assert row["late_stood"]["frames"] > 0 and row["late_new"]["frames"] > 0
    truth = SessionTruth(log)
    stood, chunk = truth.stood_before(), truth.chunk_of_frame()
    fpc = truth.model.frames_per_chunk
    for v in range(0, len(stood), 7):
        earlier = truth.latent_cam[: chunk[v] * fpc, :2]
        near = any(np.hypot(*(truth.poses[v, [0, 2]] - e)) <= STOOD_RADIUS for e in earlier)
        assert stood[v] == near, v
    d = summary["per_arm"]["int4"]
    assert d["late_stood"]["frames"] == row["late_stood"]["frames"] and d["late_new"]["sharpness"]["value"] > 0
    assert "where the camera has stood before" in result.output

    # The session's truth written as an MP4 and scored in its place scores as the truth: the scores read
    # the file they are given.
    truth_mp4 = tmp_path / "truth.mp4"
    write_truth(log, truth_mp4)
    as_truth, _ = score_session(log, truth_mp4, row["observed_chunks"], row["bin_s"])
    b = as_truth["bins"][0]
    assert b["psnr"] / b["frames"] > 35 and 0.9 < b["detail"] / b["detail_truth"] < 1.1
    assert row["bins"][0]["psnr"] / row["bins"][0]["frames"] < 30

    again = run("--from-rows", str(out / "long-rows.jsonl"), "--out-dir", str(tmp_path / "again"))
    assert again.exit_code == 0 and again.output.startswith("smoke test")
    assert json.loads(again.output.strip().splitlines()[-1])["per_arm"] == summary["per_arm"]
    twice = run("--from-rows", str(out / "long-rows.jsonl"), "--from-rows", str(out / "long-rows.jsonl"),
                "--out-dir", str(tmp_path / "twice"))    # two runs merged: rows of the same episode count once
    assert twice.exit_code == 0 and "row(s) named the same arm and episode" in twice.output
    assert json.loads(twice.output.strip().splitlines()[-1])["per_arm"] == summary["per_arm"]

    # The rows of a run of named arms only (--no-baselines): no window-only, no int4 to lead the table.
    named = tmp_path / "named.jsonl"
    named.write_text("".join(json.dumps({**r, "arm": "extend"}) + "\n" for r in
                             map(json.loads, (out / "long-rows.jsonl").read_text().splitlines()) if r["arm"] == "int4"))
    alone = run("--from-rows", str(named), "--out-dir", str(tmp_path / "named"))
    assert alone.exit_code == 0, alone.output
    assert "PSNR extend" in next(line for line in alone.output.splitlines() if line.startswith("bin "))
    assert "over window-only" not in alone.output


def test_long_bad_values_are_one_line_errors(tmp_path):
    for args, named in ((["--arms", "int3"], "int3"), (["--minutes", "0"], "'--minutes': 0")):
        result = CliRunner().invoke(cli, ["bench", "quality", "--long", *args, "--out-dir", str(tmp_path)])
        assert result.exit_code == 2 and named in result.output and len(result.output.strip().splitlines()) == 1
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"experiment": "revisit"}) + "\n")
    result = run("--from-rows", str(rows), "--out-dir", str(tmp_path))
    assert result.exit_code == 1 and "not a row of the long benchmark" in result.output
