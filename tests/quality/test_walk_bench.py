"""``worldpager bench quality --walk``: the class rules on hand-made camera paths (a key step is not a new
place, half a unit away is), the surfaces a camera sees, the walks' shapes, and a tiny run end to end —
its table, JSON line, rows, figure and strip, its scores recomputed from the exact latent frames of the
kept MP4, and its rows read back through ``--from-rows`` (with and without the look-around merged)."""
from __future__ import annotations

import json

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from engine.arena.visible import visible_faces
from engine.arena.world import Arena
from engine.quality.metrics import psnr
from engine.report.plots import read_png_data
from engine.quality.long_score import SessionTruth, STOOD_RADIUS
from engine.quality.walk_classes import CLASSES, NEW_RADIUS, classify_walk
from engine.quality.walk_paths import BOUND, OFFSETS, STEP, WALK_KINDS, WalkShape, walk_episode
from worldpager_cli.main import cli
from engine.quality.rows_fields import WALK_CLASSES

FPC = 3          # latent frames a chunk


def _classes(xs, observed_chunks=1, faces=None, yaw=None):
    """Classes of hand-made latent cameras at x = ``xs`` (z 0, yaw 0 unless given)."""
    xs = np.asarray(xs, dtype=np.float64)
    cam = np.stack([xs, np.zeros_like(xs), np.zeros_like(xs) if yaw is None else np.asarray(yaw, float),
                    np.zeros_like(xs)], axis=1)
    if faces is None:
        faces = np.zeros((len(xs), 4), dtype=np.int64)      # every view the same surfaces
    return classify_walk(cam, np.asarray(faces), FPC, observed_chunks)


def test_a_key_step_is_not_a_new_place_and_half_a_unit_is():
    still = [0.0] * (4 * FPC)                                # chunk 0 observed, chunks 1-3 standing there
    for step, new in ((STEP, False), (0.12, False), (0.49, False), (NEW_RADIUS, True), (0.8, True)):
        masks, _, _ = _classes(still + [step] * FPC)
        assert masks["new_place"][-FPC:].all() == new and masks["revisit"][-FPC:].all() == (not new), step
        assert masks["all"][FPC:].all() and not masks["all"][:FPC].any()
    # 0.2 units off (beyond the long benchmark's 0.15) is still the same place here
    masks, _, _ = _classes(still + [0.2] * FPC)
    assert not masks["new_place"][-FPC:].any() and 0.2 > STOOD_RADIUS


def test_walking_on_is_new_and_the_chunk_just_before_does_not_count():
    walk = np.arange(8 * FPC) * 4 * STEP                     # full speed: 0.49 units a latent frame
    masks, _, match = _classes(walk)
    # the first generated frame is a step from the last observed one (observed frames always count)
    assert masks["revisit"][FPC] and match[FPC] == FPC - 1
    assert masks["new_place"][FPC + 1:].all() and not masks["revisit"][FPC + 1:].any()
    assert (match[FPC + 1:] == -1).all()
    # walking back over the same ground: near the way out, matched to it when facing the same way
    back = np.concatenate([walk, walk[::-1]])
    masks, _, match = _classes(back)
    late = np.arange(len(back)) >= len(walk) + 2 * FPC
    assert masks["revisit"][late].all() and (match[late] >= 0).all()
    assert np.abs(back[match[late]] - back[late]).max() < NEW_RADIUS


def test_returns_to_observed_and_generated_places_and_seen_surfaces():
    # chunk 0 observed at x 0; chunks 1-2 walk to x 3 (new); chunks 3-4 stand there; chunk 5 back at x 0
    xs = [0.0] * FPC + [1.0] * FPC + [3.0] * FPC + [3.0] * (2 * FPC) + [0.1] * FPC
    faces = np.arange(len(xs) * 4).reshape(-1, 4)            # every frame its own surfaces ...
    faces[-FPC:] = faces[0]                                  # ... but the return sees the observed view's
    faces[3 * FPC:5 * FPC] = faces[2 * FPC]                  # standing at x 3 sees what x 3 saw
    masks, share, _ = _classes(xs, faces=faces)
    assert masks["never_seen"][FPC:3 * FPC].all() and (share[FPC:3 * FPC] == 0).all()
    assert masks["return_observed"][-FPC:].all() and not masks["return_generated"][-FPC:].any()
    stood = slice(4 * FPC, 5 * FPC)                          # two chunks after the first frames at x 3
    assert masks["return_generated"][stood].all() and not masks["return_observed"][stood].any()
    # a new place whose view was seen before from elsewhere; a near place turned to a new view
    faces2 = faces.copy()
    faces2[2 * FPC:3 * FPC] = faces[0]
    masks, _, _ = _classes(xs, faces=faces2)
    assert masks["seen_surface"][2 * FPC:3 * FPC].all() and masks["new_place"][2 * FPC:3 * FPC].all()
    faces3 = faces.copy()
    faces3[4 * FPC:5 * FPC] = 10_000 + np.arange(FPC * 4).reshape(FPC, 4)
    masks, _, _ = _classes(xs, faces=faces3)
    assert masks["near_new_view"][stood].all() and masks["never_seen"][stood].all()
    assert set(masks) == set(CLASSES) == set(WALK_CLASSES)


def test_visible_faces_follow_the_view():
    arena = Arena.generate(1_510_000)
    cam = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.5, 0.0], [0.0, 0.0, 180.0, 0.0], [0.0, 0.0, 0.0, 10.0]])
    faces = visible_faces(arena, cam)
    assert faces.shape == (4, 40) and (faces >= 0).all()
    assert np.isin(faces[1], faces[0]).mean() > 0.7 and not np.isin(faces[2], faces[0]).any()
    assert (faces[3] == faces[0]).all()                      # pitch does not change the walls seen


@pytest.mark.parametrize("kind", WALK_KINDS)
def test_walks_stay_in_the_free_middle_and_do_what_they_say(kind):
    for seed in (0, 1):
        for look in (True, False):
            ep = walk_episode(seed, kind, WalkShape(2.0, look))
            p = ep.episode.poses[:, [0, 2]]
            assert ep.episode.clamped == 0 and np.abs(p).max() <= BOUND
            assert ep.observed_chunks == (8 if look else 1) and ep.tour_frames == (93 if look else 0)
            moving = np.flatnonzero(np.r_[False, np.hypot(*(p[1:] - p[:-1]).T) > 1e-9])
            if kind == "onward":     # never back within 0.5 units of where it walked 7.5 s before
                assert min(np.hypot(*(p[:t - 120] - p[t]).T).min() for t in moving if t > 121) > NEW_RADIUS
            if kind == "home":       # the last move ends back at the start
                assert np.hypot(*p[-1]) < 0.25 and moving[-1] > len(p) - 16 * 20
            if kind == "near":       # stops 0.2 to 2 units off the start, facing its first view
                stops = {round(float(np.hypot(*p[t])), 1) for t in range(150, len(p) - 16)
                         if (np.abs(p[t:t + 16] - p[t]).max() < 1e-9 and abs(np.hypot(*p[t])) < 2.3)}
                assert stops and all(0.2 <= d <= 2.05 for d in stops) and max(d for d, _ in OFFSETS) == 2.0
    assert np.allclose(walk_episode(1, kind).episode.poses[:, 0], -walk_episode(0, kind).episode.poses[:, 0])


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", "--walk", *args], catch_exceptions=False)


def _all_psnr_from_mp4(video, log, observed_chunks: int) -> tuple[float, int]:
    """Sum of PSNR of the generated latent frames (every 4th decoded frame), decoded here."""
    truth = SessionTruth(log)
    m = truth.model
    total, n = 0.0, 0
    with av.open(str(video)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i % m.temporal == 0 and i // m.temporal >= observed_chunks * m.frames_per_chunk:
                x = torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1).float()[None]
                x = F.avg_pool2d(x, m.upscale)[0] / 127.5 - 1
                total += float(psnr(x, truth.frames[i].float() / 127.5 - 1))
                n += 1
    return total, n


def test_walk_runs_end_to_end_on_exact_latent_frames(tmp_path):
    out = tmp_path / "out"
    result = run("--seeds", "1", "--minutes", "0.1", "--kinds", "near,onward", "--out-dir", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    header = next(line for line in lines if line.startswith("class "))
    for column in ("arm", "frames", "PSNR", "SSIM", "sharp", "self-consist.", "truth views", "PSNR - window"):
        assert column in header
    assert any(line.startswith("new place (>= 0.5 from every earlier camera)") for line in lines)
    assert "n/a (2 episodes)" in result.output and "Not covered" in result.output
    assert "retrieval misses per minute" in result.output

    summary = json.loads(lines[-1])
    assert summary["bench"] == "quality-walk" and list(summary["settings"]) == ["look_around"]
    s = summary["settings"]["look_around"]
    assert s["arms"] == ["window", "int4", "noreproject"] and s["episodes"] == 2 and s["kinds"] == ["near", "onward"]
    for arm in s["arms"]:
        d = s["per_arm"][arm]
        assert set(d["classes"]) == set(CLASSES) and d["classes"]["all"]["psnr"]["value"] > 0
        assert d["classes"]["new_place"]["frames"] > 0 and d["classes"]["revisit"]["frames"] > 0
    assert s["per_arm"]["int4"]["hits"] > 0 and s["per_arm"]["window"]["hits"] == 0
    assert set(s["gain_over_window"]) == {"int4", "noreproject"}

    rows = [json.loads(line) for line in (out / "walk-rows.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and {r["experiment"] for r in rows} == {"walk"}
    row = next(r for r in rows if r["arm"] == "int4" and r["kind"] == "near")
    generated = (row["chunks"] - row["observed_chunks"]) * FPC
    assert row["latent_frames"] == row["chunks"] * FPC and row["bins"][0]["classes"]["all"]["frames"] == generated
    session = out / "sessions" / "seed0-near-int4"
    total, n = _all_psnr_from_mp4(session / "int4.mp4", session / "int4.log.jsonl", row["observed_chunks"])
    assert n == generated and abs(total - row["bins"][0]["classes"]["all"]["psnr"]) < 1e-3 * n

    figure = read_png_data(out / "walk.png")
    assert len(figure["panels"]) == 5 and figure["panels"][0]["series"][0]["label"] == "window-only"
    assert abs(figure["panels"][0]["series"][1]["y"][0] - s["per_arm"]["int4"]["bins"][0]["new_place"]["psnr"]["value"]) < 1e-3
    assert (out / "walk-strip.png").read_bytes()[:4] == b"\x89PNG"
    assert summary["still"]["rows"] == ["truth", "int4", "noreproject", "window-only"]

    # Without the look-around (one kind), then both runs' rows read together: two settings.
    bare = tmp_path / "bare"
    result = run("--seeds", "1", "--minutes", "0.1", "--kinds", "loops", "--no-look-around", "--out-dir", str(bare))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["settings"]["no_look_around"]["observed_chunks"] == 1
    again = run("--from-rows", str(out / "walk-rows.jsonl"), "--from-rows", str(bare / "walk-rows.jsonl"),
                "--from-rows", str(out / "walk-rows.jsonl"), "--out-dir", str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    merged = json.loads(again.output.strip().splitlines()[-1])
    assert merged["settings"]["look_around"]["per_arm"] == s["per_arm"]
    assert list(merged["settings"]) == ["look_around", "no_look_around"]
    assert "row(s) named the same arm and episode" in again.output and "without a look-around" in again.output


def test_walk_flags_and_rows_are_checked(tmp_path):
    for args, says in ((["--walk", "--long"], "--long and --walk"), (["--walk", "--chunks", "20"], "--chunks"),
                       (["--walk", "--kinds", "spin"], "'spin' is not one of onward"),
                       (["--walk", "--no-baselines"], "--no-baselines"), (["--walk", "--arms", "int3"], "int3"),
                       (["--no-look-around"], "add --walk"), (["--long", "--no-look-around"], "add --walk"),
                       (["--walk", "--minutes", "0"], "'--minutes'")):
        result = CliRunner().invoke(cli, ["bench", "quality", *args, "--out-dir", str(tmp_path / "x")])
        assert result.exit_code == 2 and says in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    good = {"experiment": "walk", "arm": "window", "seed": 0, "kind": "near", "look_around": True,
            "arena_seed": 1_510_000, "chunks": 17, "observed_chunks": 8, "frames": 201, "fps": 16, "bin_s": 60.0,
            "bins": [{"hits": 0, "misses": 0, "stale": 0, "classes": {
                c: {"frames": 1, "psnr": 20.0, "ssim": 0.5, "detail": 1.0, "detail_truth": 2.0, "first_frames": 0,
                    "psnr_first": 0.0, "psnr_first_truth": 0.0} for c in CLASSES}}]}
    bad_bins = [{**good["bins"][0], "classes": {c: v for c, v in good["bins"][0]["classes"].items() if c != "revisit"}}]
    for rows, flags, says in (([good], [], "read it with --walk"), ([{**good, "bins": bad_bins}], ["--walk"],
                                                                     "bin 1: field 'classes' has no class 'revisit'"),
                              ([{**good, "look_around": "yes"}], ["--walk"], "field 'look_around'"),
                              ([{"experiment": "long"}], ["--walk"], "read it with --long"),
                              ([good, {**good, "arm": "int4", "frames": 400}], ["--walk"], "400 video frames")):
        path = tmp_path / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        result = CliRunner().invoke(cli, ["bench", "quality", *flags, "--from-rows", str(path), "--out-dir",
                                          str(tmp_path / "y")])
        assert result.exit_code == 1 and says in result.output, (says, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


def _row(arm: str, **changes) -> dict:
    sums = {"frames": 2, "psnr": 40.0, "ssim": 1.0, "detail": 1.0, "detail_truth": 2.0, "first_frames": 1,
            "psnr_first": 25.0, "psnr_first_truth": 30.0}
    bins = [{"hits": 1, "misses": 1, "stale": 0, "classes": {c: dict(sums) for c in CLASSES}} for _ in range(2)]
    return {"experiment": "walk", "arm": arm, "seed": 0, "kind": "near", "look_around": True, "arena_seed": 1_510_000,
            "chunks": 161, "observed_chunks": 8, "frames": 1929, "latent_frames": 483, "fps": 16, "bin_s": 60.0,
            "bins": bins, "hits": 2, "misses": 2, "stale": 0, "smoke_test": False, **changes}


def _paths(value, path=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*path, key)
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        yield from _paths(value[0], (*path, 0))


def test_any_field_of_a_walk_row_changed_is_refused_or_summarised(tmp_path):
    """Whatever one field of a walk row becomes, the rows are refused in one ``JsonInputError`` or
    summarised: never a KeyError, TypeError or ZeroDivisionError from the summary."""
    import copy
    import io
    from contextlib import redirect_stdout

    from engine.files.bounded_json import JsonInputError
    from engine.quality.walk_summary import summarise_walk
    from engine.quality.rows_read import read_rows
    from worldpager_cli.quality_walk import echo_walk

    base = [_row("window"), _row("int4")]
    for path in _paths(base[0]):
        for value in (None, "text", -1, float("nan"), [], {}, True, 0, "DELETE"):
            rows = copy.deepcopy(base)
            parent = rows[0]
            for key in path[:-1]:
                parent = parent[key]
            if value == "DELETE":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            file = tmp_path / "rows.jsonl"
            file.write_text("".join(json.dumps(r) + "\n" for r in rows))
            try:
                read, _ = read_rows([file], long=False, walk=True)
            except JsonInputError as exc:
                assert "\n" not in str(exc)
                continue
            with np.errstate(all="ignore"), redirect_stdout(io.StringIO()):
                echo_walk(summarise_walk(read))


def test_the_repositorys_walk_rows_summarise_with_walk(tmp_path):
    from pathlib import Path

    rows = Path(__file__).resolve().parents[2] / "docs" / "quality_walk_rows.jsonl"
    result = run("--from-rows", str(rows), "--out-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output.strip().splitlines()[-1])["settings"]
    s = settings["look_around"]
    assert s["episodes"] == 12 and s["arms"] == ["window", "int4", "noreproject"]
    assert settings["no_look_around"]["episodes"] == 4 and settings["no_look_around"]["observed_chunks"] == 1
    assert (tmp_path / "walk.png").exists()
