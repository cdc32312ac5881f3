"""Sessions that start from a recorded video (``--observe clip.mp4``), on the micro MG2 model.

The clip is a micro session's own MP4 with its camera path beside it (``clip.poses.csv``). An observed
chunk's clean pass leaves the K/V a generated chunk with the same latents would; the VAE encoder turns
the clip's frames into latents of the chunk's shape; a session observes the clip's whole chunks, flags
them in the log and goes on generating; a stop inside the observed prefix resumes to the uninterrupted
bytes; bad input is one line.
"""
from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from engine.geometry import poses_euler
from engine.io.video import count_frames
from engine.model.kv_context import AttentionContext
from engine.model.registry import build_world_model, model_spec
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.observe import session_path
from engine.runtime.telemetry import read_log
from tests_support import one_line_error, resumed_equals_uninterrupted
from worldpager_cli.main import cli

CLIP_CHUNKS = 3          # the clip: a 3-chunk micro session, 33 frames of 32x64
OBSERVED = 2             # its 33 poses are 32 frames of camera moves: 2 whole chunks (21 frames)
CHUNKS = 5


def _write_poses(path, poses):
    rows = ["frame,x,y,z,yaw,pitch"] + [",".join([str(i), *(repr(float(v)) for v in p[:5])])
                                        for i, p in enumerate(poses_euler(poses))]
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clip")
    out = tmp / "clip.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "micro", "--chunks", str(CLIP_CHUNKS),
                                      "--save-every", "0", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    cfg = resolve_session_config(None, {"model": "micro", "chunks": CLIP_CHUNKS, "out": out})
    _write_poses(tmp / "clip.poses.csv", session_path(cfg, model_spec(cfg)).trajectory.poses)
    return out


def _cfg(clip, out, **extra):
    flags = {"model": "micro", "chunks": CHUNKS, "observe": clip, "out": out, "save_every": 0,
             "memory": {"pool_slots": 4, "late_prefetch": "wait"}}   # bytes compared: whatever the speed
    for key, value in extra.items():
        flags[key] = {**flags["memory"], **value} if key == "memory" else value
    return resolve_session_config(None, flags)


def _model(cfg):
    spec = model_spec(cfg)
    model = build_world_model(cfg, None, session_path(cfg, spec).trajectory, torch.device("cpu"), torch.float32)
    ctx = AttentionContext(model.layout, memory_chunks=0)
    model.prepare_context(ctx)
    return model, ctx


def test_the_clips_whole_chunks_are_observed_by_the_shorter_of_video_and_poses(clip, tmp_path):
    cfg = _cfg(clip, tmp_path / "p.mp4")
    path = session_path(cfg, model_spec(cfg))
    assert path.observed_chunks == OBSERVED and "recorded video" in path.observed
    assert path.trajectory.frames == model_spec(cfg).grid.frames_total(CHUNKS)
    lines = (clip.parent / "clip.poses.csv").read_text().splitlines()
    (tmp_path / "short.poses.csv").write_text("\n".join(lines[:16]) + "\n")      # 15 poses: 1 chunk
    short = _cfg(clip, tmp_path / "q.mp4", observe_poses=tmp_path / "short.poses.csv")
    assert session_path(short, model_spec(short)).observed_chunks == 1


def test_an_observed_chunk_leaves_the_kv_of_a_generated_chunk_with_its_latents(clip, tmp_path):
    """Chunk 1 generated, then the same chunk observed with the generated latents as what the encoder
    gave: the same K/V in every layer."""
    cfg = _cfg(clip, tmp_path / "kv.mp4")
    model, ctx = _model(cfg)
    model.observe(0, ctx)
    ctx.commit()
    assert any(name.startswith("observer.") for name in model.state_tensors())
    latents = model.denoise(1, ctx)
    generated = [(k.clone(), v.clone()) for k, v in ctx.current_kv()]
    assert model.observer is None                       # the prefix is over: its stream is dropped
    assert not any(name.startswith("observer.") for name in model.state_tensors())
    model, ctx = _model(cfg)
    model.observe(0, ctx)
    ctx.commit()
    model.observed_latents = lambda chunk: latents
    assert torch.equal(model.observe(1, ctx), latents)
    for (k, v), (k2, v2) in zip(generated, ctx.current_kv(), strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)


def test_the_encoder_gives_finite_latents_of_the_chunks_shape(clip, tmp_path):
    model, _ = _model(_cfg(clip, tmp_path / "enc.mp4"))
    m = model.cfg
    for chunk in range(OBSERVED):
        latents = model.observed_latents(chunk)
        assert latents.shape == (1, m.dit.out_dim, m.sampler.frames_per_chunk, m.latent_height, m.latent_width)
        assert torch.isfinite(latents).all()


def test_a_session_observes_the_clip_then_generates(clip, tmp_path):
    out = tmp_path / "s.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "micro", "--observe", str(clip), "--chunks", str(CHUNKS),
                                      "--save-every", "0", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    records = read_log(_cfg(clip, out).log_path)
    assert records[0]["observed"]["chunks"] == OBSERVED and "recorded video" in records[0]["observed"]["source"]
    chunks = [r for r in records if r["type"] == "chunk"]
    assert [bool(r.get("observed")) for r in chunks] == [True] * OBSERVED + [False] * (CHUNKS - OBSERVED)
    assert count_frames(out) == 12 * CHUNKS - 3


def test_a_stop_inside_the_observed_prefix_resumes_to_the_uninterrupted_bytes(clip, tmp_path):
    whole = _cfg(clip, tmp_path / "whole.mp4", memory={"spill": tmp_path / "whole.spill"})
    cfg = _cfg(clip, tmp_path / "cut.mp4", save_every=1, memory={"spill": tmp_path / "cut.spill"})
    assert resumed_equals_uninterrupted(whole, cfg, stop_after=0).chunk == 1 < OBSERVED


def test_a_run_that_observed_a_video_is_resumed_not_forked(clip, tmp_path):
    """Its start image is the clip's frame 0, which a branch would not have: one line, nothing written."""
    from engine.errors import InputError
    from engine.session.fork import prepare_fork

    cfg = _cfg(clip, tmp_path / "p.mp4", save_every=1, memory={"spill": tmp_path / "p.spill"})
    assert Session(cfg).run().status == "done"
    (tmp_path / "other.yaml").write_text("segments:\n  - keys: [w]\n    frames: 30\n")
    with pytest.raises(InputError, match="not supported yet") as err:
        prepare_fork(cfg.out, None, tmp_path / "other.yaml", tmp_path / "b.mp4")
    assert "worldpager resume" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "b.mp4").exists()


def _write_video(path, frames, height, width):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=16)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            rgb = np.full((height, width, 3), 8 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))
        container.mux(stream.encode())
    return path


def _with_poses(video, source):
    (video.parent / f"{video.stem}.poses.csv").write_text((source.parent / "clip.poses.csv").read_text())
    return video


@pytest.mark.parametrize("make, needles", [
    (lambda tmp, clip: _with_poses(_write_video(tmp / "big.mp4", 9, 48, 64), clip), ("64x48", "64x32", "not resized")),
    (lambda tmp, clip: _write_video(tmp / "bare.mp4", 9, 32, 64), ("bare.poses.csv", "not found")),
    (lambda tmp, clip: _with_poses(_write_video(tmp / "four.mp4", 4, 32, 64), clip), ("shorter than one chunk",)),
    (lambda tmp, clip: (tmp / "junk.mp4", (tmp / "junk.mp4").write_bytes(b"\0" * 64))[0], ("not a video PyAV can decode",)),
])
def test_bad_videos_are_one_line_errors(clip, tmp_path, make, needles):
    path = make(tmp_path, clip)
    out = tmp_path / "bad.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "micro", "--observe", str(path), "--chunks", str(CHUNKS),
                                      "--out", str(out), "--quiet"])
    one_line_error(result, str(path), *needles)
    assert not out.exists()


def test_an_image_with_a_video_and_a_model_that_cannot_observe_are_one_line_errors(clip, tmp_path):
    runner = CliRunner()
    image = tmp_path / "start.png"
    from PIL import Image
    Image.new("RGB", (64, 32)).save(image)
    both = runner.invoke(cli, ["generate", "--model", "micro", "--observe", str(clip), "--image", str(image),
                               "--chunks", str(CHUNKS), "--out", str(tmp_path / "i.mp4"), "--quiet"])
    one_line_error(both, "--image", "frame 0 is the start image")
    synthetic = runner.invoke(cli, ["generate", "--model", "synthetic", "--observe", str(clip), "--chunks", str(CHUNKS),
                                    "--out", str(tmp_path / "y.mp4"), "--quiet"])
    one_line_error(synthetic, "synthetic model cannot start from an observed clip")
