"""VideoWriter / count_frames: round trip, frame layouts, kill safety of the fragmented MP4, path errors."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from engine.errors import ConfigError, InputError, OutputError
from engine.io.video import VideoWriter, count_frames, to_uint8_rgb
from tests_support import sigkill_when_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
H, W, FPS = 48, 64, 8


def _decode_rgb(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def _ramp(t: int, height: int = H, width: int = W) -> np.ndarray:
    """[t, H, W, 3] uint8 frames whose grey level changes per frame (so frames differ)."""
    levels = (np.arange(t, dtype=np.int64) * 7 % 256).astype(np.uint8)
    return np.broadcast_to(levels[:, None, None, None], (t, height, width, 3)).copy()


def test_round_trip_in_several_writes(tmp_path):
    out = tmp_path / "a.mp4"
    with VideoWriter(out, W, H, FPS) as writer:
        for t in (5, 7, 12, 1):
            writer.write(_ramp(t))
        assert writer.frames_written == 25
    assert count_frames(out) == 25


def test_flat_colour_survives_encoding(tmp_path):
    out = tmp_path / "flat.mp4"
    colour = np.array([200, 100, 50], np.uint8)
    with VideoWriter(out, W, H, FPS) as writer:
        writer.write(np.broadcast_to(colour, (4, H, W, 3)).copy())
    frames = _decode_rgb(out)
    assert len(frames) == 4
    # yuv420p + crf 18 on a flat frame: only colour-conversion rounding is left.
    assert np.abs(frames[2].astype(int) - colour).max() <= 3


def test_float_input_conversion_is_exact():
    x = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]).view(1, 1, 1, 6).expand(1, 3, 1, 6)
    rgb = to_uint8_rgb(x)  # [1, 1, 6, 3]
    assert rgb.dtype == np.uint8 and rgb.shape == (1, 1, 6, 3)
    # (x+1)*127.5 rounded half-to-even, clamped to [-1, 1] first.
    assert rgb[0, 0, :, 0].tolist() == [0, 0, 128, 191, 255, 255]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_tensor_frames_are_written(tmp_path, dtype):
    out = tmp_path / "f.mp4"
    frames = torch.empty(3, 3, H, W, dtype=dtype)  # [T, 3, H, W] in [-1, 1]
    frames[:, 0], frames[:, 1], frames[:, 2] = 0.6, -0.2, -0.8
    with VideoWriter(out, W, H, FPS) as writer:
        writer.write(frames)
    decoded = _decode_rgb(out)
    expected = np.rint((np.array([0.6, -0.2, -0.8]) + 1) * 127.5)
    assert len(decoded) == 3
    assert np.abs(decoded[1][H // 2, W // 2].astype(int) - expected).max() <= 3


def test_torch_uint8_frames(tmp_path):
    out = tmp_path / "u.mp4"
    with VideoWriter(out, W, H, FPS) as writer:
        writer.write(torch.from_numpy(_ramp(6)))
    assert count_frames(out) == 6


def test_odd_size_is_edge_padded(tmp_path):
    out = tmp_path / "odd.mp4"
    frames = np.zeros((2, 47, 63, 3), np.uint8)
    frames[:, -1, :] = 255  # last row white: padding repeats it, so the padded row is white too
    with VideoWriter(out, 63, 47, FPS) as writer:
        assert (writer.encoded_width, writer.encoded_height) == (64, 48)
        writer.write(frames)
    decoded = _decode_rgb(out)
    assert decoded[0].shape == (48, 64, 3)
    assert decoded[0][-1].mean() > 200 and decoded[0][:40].mean() < 10


def test_close_is_idempotent_and_empty_file_is_valid(tmp_path):
    out = tmp_path / "empty.mp4"
    writer = VideoWriter(out, W, H, FPS)
    writer.close()
    writer.close()
    assert count_frames(out) == 0


def test_open_file_is_readable_before_close(tmp_path):
    """A copy taken mid-run (what a kill would leave) holds every frame written so far."""
    out, snapshot = tmp_path / "live.mp4", tmp_path / "snapshot.mp4"
    writer = VideoWriter(out, W, H, FPS)
    writer.write(_ramp(6 * FPS))
    shutil.copyfile(out, snapshot)
    writer.close()
    assert count_frames(snapshot) == 6 * FPS
    assert count_frames(out) == 6 * FPS


_KILL_CHILD = """
import sys, time
import numpy as np
from engine.io.video import VideoWriter
w = VideoWriter(sys.argv[1], 64, 48, 8)
for i in range(6):
    w.write(np.full((8, 48, 64, 3), i * 30, np.uint8))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkilled_writer_leaves_playable_file(tmp_path):
    out = tmp_path / "killed.mp4"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    assert sigkill_when_ready(_KILL_CHILD, str(out), cwd=REPO_ROOT, env=env) == -signal.SIGKILL
    # 48 frames went in, each write was flushed before it returned: all of them must play.
    assert count_frames(out) == 48


def test_missing_directory_is_output_error(tmp_path):
    bad = tmp_path / "nope" / "out.mp4"
    with pytest.raises(OutputError, match="does not exist") as info:
        VideoWriter(bad, W, H, FPS)
    assert str(tmp_path / "nope") in str(info.value) and "\n" not in str(info.value)


def test_directory_path_is_output_error(tmp_path):
    with pytest.raises(OutputError, match="is a directory") as info:
        VideoWriter(tmp_path, W, H, FPS)
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_directory_is_output_error(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="not writable"):
            VideoWriter(locked / "out.mp4", W, H, FPS)
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("kwargs, word", [
    ({"preset": "warp"}, "preset"),
    ({"crf": 60}, "crf"),
    ({"fps": 0}, "fps"),
])
def test_bad_settings_are_config_errors(tmp_path, kwargs, word):
    args = {"path": tmp_path / "x.mp4", "width": W, "height": H, "fps": FPS, **kwargs}
    with pytest.raises(ConfigError, match=word):
        VideoWriter(**args)


def test_count_frames_missing_file(tmp_path):
    with pytest.raises(InputError, match="video not found"):
        count_frames(tmp_path / "missing.mp4")


def test_count_frames_garbage_file(tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video" * 10)
    with pytest.raises(InputError, match="cannot decode video"):
        count_frames(junk)


def test_a_cut_back_to_a_recent_write_truncates_in_place_to_the_same_bytes(tmp_path, monkeypatch):
    """A cut back (the log failed after a chunk's frames were muxed) needs no free space: it truncates the
    file where that write ended, to the bytes a run that stopped there wrote; no temporary file is made."""
    frames = np.random.default_rng(0).integers(0, 255, (21, 16, 32, 3), dtype=np.uint8)
    with VideoWriter(tmp_path / "short.mp4", 32, 16, 16) as w:
        w.write(frames[:9])
    long = VideoWriter(tmp_path / "long.mp4", 32, 16, 16)
    long.write(frames[:9])
    long.write(frames[9:])

    def no_reopen(*args, **kwargs):
        raise AssertionError("a cut back to a recent write must not rewrite the file")
    monkeypatch.setattr(VideoWriter, "reopen", no_reopen)
    long.cut_back(9)
    assert (tmp_path / "long.mp4").read_bytes() == (tmp_path / "short.mp4").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.mp4", "short.mp4"]
    with av.open(str(tmp_path / "long.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == 9
