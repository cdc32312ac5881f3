"""``worldpager generate`` and ``inspect`` end to end, in-process through click's runner."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from engine.io.video import count_frames
from engine.settings.overlay import resolve_session_config
from engine.runtime.telemetry import read_log
from tests_support import TINY, tiny_reference_models, write_checkpoint
from worldpager_cli.main import chunks_for_length, cli

REPO = Path(__file__).resolve().parents[2]


def run(*args, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)


def test_generate_writes_a_decodable_mp4_with_12n_minus_3_frames(tmp_path):
    out = tmp_path / "two.mp4"
    # micro: MG2's architecture at its smallest (tiny's VAE decode takes ten times as long; tiny runs
    # through generate in test_generate_from_a_checkpoint_directory)
    result = run("generate", "--model", "micro", "--chunks", "2", "--out", str(out), "--seed", "3")
    assert result.exit_code == 0, result.output
    first_line = result.output.splitlines()[0]
    assert "built-in micro model" in first_line and "seeded random weights" in first_line
    assert count_frames(out) == 12 * 2 - 3


def test_default_is_the_arena_model(tmp_path):
    """No flags but the length: the arena model, its packaged world and tour; the first line says so."""
    out = tmp_path / "arena.mp4"
    result = run("generate", "--chunks", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    first_line = result.output.splitlines()[0]
    assert "arena model" in first_line and "arena 1000017" in first_line
    assert count_frames(out) == 12 * 4 - 3
    header = json.loads((tmp_path / "arena.log.jsonl").read_text().splitlines()[0])
    assert header["model"]["model"] == "arena" and header["config"]["arena_seed"] == 1000017
    # an arena session first observes its look around (all but the last chunk of a short run), then tours
    assert "a look around" in header["trajectory"] and "arena_tour.yaml" in header["trajectory"]
    assert header["observed"]["chunks"] == 3 and "a look around" in header["observed"]["source"]
    assert header["config"]["look_around"] == 7
    assert "observes a look around" in first_line
    chunks = [r for r in read_log(tmp_path / "arena.log.jsonl") if r["type"] == "chunk"]
    assert [bool(r.get("observed")) for r in chunks] == [True, True, True, False]


def test_an_arena_session_looks_around_for_seven_chunks_unless_told_otherwise(tmp_path):
    from engine.model.registry import model_spec
    from engine.session.observe import session_path

    tour_file = REPO / "trajectories" / "arena_tour.yaml"
    long = resolve_session_config(None, {"chunks": 41})
    path = session_path(long, model_spec(long))
    assert path.observed_chunks == 7 and path.observed_frames == 81 and path.trajectory.frames == 489
    given = resolve_session_config(None, {"chunks": 41, "trajectory": tour_file})
    assert session_path(given, model_spec(given)).observed_chunks == 7      # a --trajectory is looked around too
    off = resolve_session_config(None, {"chunks": 41, "trajectory": tour_file, "look_around": 0})
    assert session_path(off, model_spec(off)).observed_chunks == 0
    three = resolve_session_config(None, {"chunks": 41, "look_around": 3})
    assert session_path(three, model_spec(three)).observed_chunks == 3
    for short in (1, 3):   # a look around takes at least 3 chunks and leaves one to generate
        cfg = resolve_session_config(None, {"chunks": short})
        assert session_path(cfg, model_spec(cfg)).observed_chunks == 0
    # a full turn on the spot at the fastest trained turn (mouse 0.3 = 4.5 degrees a frame), then still:
    # the tour then starts at the start view, its actions frame for frame
    mouse = path.trajectory.actions.mouse
    assert torch.allclose(mouse[:80, 1], torch.full((80,), 0.3)) and not mouse[80:81].any()
    assert not path.trajectory.actions.keyboard[:81].any()
    tour = session_path(off, model_spec(off)).trajectory
    assert torch.equal(path.trajectory.actions.keyboard[81:], tour.actions.keyboard[:408])
    assert torch.equal(path.trajectory.actions.mouse[81:], tour.actions.mouse[:408])
    start, back = path.trajectory.poses[0], path.trajectory.poses[81]
    assert abs(abs(float(start[3:] @ back[3:])) - 1) < 1e-9 and abs(back[:3]).max() < 1e-9   # the start view again
    assert abs(abs(float(start[3:] @ path.trajectory.poses[40][3:]))) < 1e-6                 # half way: behind


def test_a_model_without_a_renderer_never_looks_around(tmp_path):
    from engine.model.registry import model_spec
    from engine.session.observe import session_path

    tiny = resolve_session_config(None, {"model": "tiny", "chunks": 9})
    assert tiny.look_around == 7 and session_path(tiny, model_spec(tiny)).observed_chunks == 0


def test_arena_seed_picks_the_world(tmp_path):
    out = tmp_path / "a.mp4"
    result = run("generate", "--arena-seed", "12", "--chunks", "1", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "a.log.jsonl").read_text().splitlines()[0])["config"]["arena_seed"] == 12


@pytest.mark.parametrize("seed", ["abc", "-3", "1.5", "0x10", ""])
def test_bad_arena_seed_is_one_line(tmp_path, seed):
    out = tmp_path / "o.mp4"
    one_line_error(run("generate", "--arena-seed", seed, "--chunks", "1", "--out", str(out)), "--arena-seed",
                   repr(seed))
    assert not out.exists()


def test_missing_arena_weights_is_one_line(tmp_path):
    missing = tmp_path / "none.safetensors"
    out = tmp_path / "o.mp4"
    one_line_error(run("generate", "--arena-weights", str(missing), "--chunks", "1", "--out", str(out)),
                   str(missing), "does not exist")
    assert not out.exists()


def test_arena_refuses_a_start_image(tmp_path):
    one_line_error(run("generate", "--image", str(tmp_path / "x.png"), "--chunks", "1", "--out", str(tmp_path / "o.mp4")),
                   "--arena-seed")


def test_generate_defaults_name_the_output_by_date_in_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("generate", "--model", "micro", "--chunks", "1")
    assert result.exit_code == 0, result.output
    [out] = list(tmp_path.glob("worldpager-*.mp4"))
    assert count_frames(out) == 9


def test_generate_from_a_checkpoint_directory(tmp_path):
    (tmp_path / "ckpt").mkdir()
    write_checkpoint(tmp_path / "ckpt", tiny_reference_models())
    out = tmp_path / "ckpt.mp4"
    result = run("generate", "--model", "tiny", "--checkpoint", str(tmp_path / "ckpt"), "--chunks", "1",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "loading tiny from" in result.output.splitlines()[0]
    assert count_frames(out) == 9


@pytest.mark.parametrize("chunks, seconds, minutes, expected", [
    (5, None, None, 5), (None, 1.0, None, 2), (None, None, 0.5, 41), (None, 30.0, None, 41),
    (None, 0.5, None, 1),
])
def test_length_flags(chunks, seconds, minutes, expected):
    n = chunks_for_length(chunks, seconds, minutes, TINY.fps, 9, 12)
    assert n == expected
    if chunks is None:  # the smallest number of chunks that covers the requested duration
        wanted = (seconds if seconds is not None else minutes * 60) * TINY.fps
        assert TINY.video_frames_total(n) >= wanted > TINY.video_frames_total(n - 1) if n > 1 else True


def one_line_error(result, *needles):
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    # Banner lines may come first; the error is exactly one line, last, with no traceback.
    assert lines[-1].startswith("worldpager: error: "), result.output
    assert sum(line.startswith("worldpager: error") for line in lines) == 1 and "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[-1], lines[-1]
    return lines[-1]


def test_missing_image(tmp_path):
    missing = tmp_path / "nope.png"
    one_line_error(run("generate", "--model", "tiny", "--chunks", "1", "--image", str(missing),
                       "--out", str(tmp_path / "o.mp4")), str(missing))


def test_unreadable_image(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"definitely not a png")
    one_line_error(run("generate", "--model", "tiny", "--chunks", "1", "--image", str(bad),
                       "--out", str(tmp_path / "o.mp4")), str(bad))


def test_unwritable_output(tmp_path):
    out = tmp_path / "no-such-dir" / "o.mp4"
    one_line_error(run("generate", "--chunks", "1", "--out", str(out)), "no-such-dir")


def test_checkpoint_with_a_missing_key(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_checkpoint(ckpt, tiny_reference_models(), dit_edit=lambda s: s.pop("model.blocks.1.ffn.2.bias"))
    out = tmp_path / "o.mp4"
    one_line_error(run("generate", "--model", "tiny", "--checkpoint", str(ckpt), "--chunks", "1", "--out", str(out)),
                   "'blocks.1.ffn.2.bias'", "base_distill.safetensors")
    assert not out.exists()   # nothing was generated, so no empty file is left behind


def test_checkpoint_with_a_misshaped_key(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()

    def bad(s):
        s["model.patch_embedding.bias"] = s["model.patch_embedding.bias"][:-1].clone()
    write_checkpoint(ckpt, tiny_reference_models(), dit_edit=bad)
    one_line_error(run("generate", "--model", "tiny", "--checkpoint", str(ckpt), "--chunks", "1",
                       "--out", str(tmp_path / "o.mp4")), "'patch_embedding.bias'", "shape")


def test_conflicting_length_flags(tmp_path):
    one_line_error(run("generate", "--chunks", "2", "--seconds", "3", "--out", str(tmp_path / "o.mp4")),
                   "only one of")


def test_inspect_universal_last_line_json():
    result = run("inspect", "--model", "mg2-universal")
    assert result.exit_code == 0
    facts = json.loads(result.output.strip().splitlines()[-1])
    assert facts["kv_bytes_per_chunk_bf16"] == 486_604_800
    assert facts["tokens_per_chunk"] == 2640
    assert facts["params"] == 1_619_242_304 and facts["layers"] == 30


def test_inspect_takes_a_preset_as_generate_does():
    """``--preset`` names a preset, as in generate (its model is described); --model names a model."""
    by_preset = run("inspect", "--preset", "mg2-4090-32g")
    assert by_preset.exit_code == 0, by_preset.output
    assert json.loads(by_preset.output.strip().splitlines()[-1])["model"] == "mg2-universal"
    assert json.loads(run("inspect", "--model", "tiny").output.strip().splitlines()[-1])["model"] == "tiny"
    one_line_error(run("inspect", "--preset", "no-such-preset"), "no-such-preset")


def test_a_path_through_walls_is_clamped_and_logged(tmp_path):
    """Walking straight on for 10 chunks meets the arena's wall: the camera stops there; the log says so."""
    path = tmp_path / "through.yaml"
    path.write_text("segments:\n  - {keys: [w], seconds: 10}\n")
    out = tmp_path / "w.mp4"
    result = run("generate", "--trajectory", str(path), "--chunks", "10", "--look-around", "0", "--out", str(out),
                 "--quiet")
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "w.log.jsonl").read_text().splitlines()
    notes = json.loads(lines[0])["notes"]
    assert any("clamped at walls" in note for note in notes), notes
    assert json.loads(lines[-1])["status"] == "done" and count_frames(out) == 12 * 10 - 3
