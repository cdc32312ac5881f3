"""VideoWriter segments: every write is a closed segment, so a file resumed after a kill with
``VideoWriter.reopen`` equals the uninterrupted one (decoded frames, packets and bytes)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import av
import numpy as np
import pytest

from engine.errors import InputError
from engine.io.mp4_segments import annexb_to_length_prefixed
from engine.io.video import VideoWriter, count_frames
from tests_support import sigkill_when_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
H, W, FPS = 48, 64, 8
CHUNKS = (9, 12, 2 * FPS + 3)  # A, B, C; C is long enough to hold keyframes inside it


def _moving_gradient(start: int, count: int) -> np.ndarray:
    """[count, H, W, 3] uint8: smooth colour waves drifting by a little each frame (codec-friendly)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    frames = []
    for t in range(start, start + count):
        r = 128 + 100 * np.sin(2 * np.pi * (x / W + t / 40))
        g = 128 + 100 * np.cos(2 * np.pi * (y / H + t / 60))
        b = 128 + 60 * np.sin(2 * np.pi * ((x + y) / (W + H) - t / 50))
        frames.append(np.stack([r, g, b], axis=-1))
    return np.rint(np.stack(frames)).astype(np.uint8)


def _chunks(sizes=CHUNKS) -> list[np.ndarray]:
    starts = np.cumsum((0,) + tuple(sizes))
    return [_moving_gradient(int(s), n) for s, n in zip(starts, sizes)]


def _decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _packets(path: Path) -> list[tuple[bytes, int, int, bool]]:
    with av.open(str(path)) as container:
        return [(bytes(p), p.pts, p.dts, p.is_keyframe) for p in container.demux(video=0) if p.size]


def _write_uninterrupted(path: Path, chunks: list[np.ndarray]) -> None:
    with VideoWriter(path, W, H, FPS) as writer:
        for chunk in chunks:
            writer.write(chunk)


def _assert_same_video(resumed: Path, reference: Path) -> None:
    decoded, expected = _decode(resumed), _decode(reference)
    assert len(decoded) == len(expected) == count_frames(resumed)
    assert all(np.array_equal(a, b) for a, b in zip(decoded, expected))
    assert _packets(resumed) == _packets(reference)
    assert resumed.read_bytes() == reference.read_bytes()


def test_resumed_file_equals_uninterrupted(tmp_path):
    a, b, c = _chunks()
    reference, resumed = tmp_path / "reference.mp4", tmp_path / "resumed.mp4"
    _write_uninterrupted(reference, [a, b, c])

    writer = VideoWriter(resumed, W, H, FPS)
    writer.write(a)
    writer.write(b)
    del writer  # abandoned without close(), as a kill leaves it
    kept = len(a) + len(b)
    assert all(np.array_equal(x, y) for x, y in zip(_decode(resumed), _decode(reference)[:kept]))
    assert count_frames(resumed) == kept

    writer = VideoWriter.reopen(resumed, kept, W, H, FPS)
    assert writer.frames_written == kept and writer.path == resumed
    writer.write(c)
    writer.close()
    _assert_same_video(resumed, reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reference.mp4", "resumed.mp4"]


_KILLED_WRITER = """
import sys, time
import numpy as np
from engine.io.video import VideoWriter
w = VideoWriter(sys.argv[1], 64, 48, 8)
for chunk in np.load(sys.argv[2], allow_pickle=False).values():
    w.write(chunk)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_resume_after_sigkill_equals_uninterrupted(tmp_path):
    a, b, c = _chunks()
    reference, resumed = tmp_path / "reference.mp4", tmp_path / "resumed.mp4"
    kept_chunks = tmp_path / "ab.npz"
    _write_uninterrupted(reference, [a, b, c])
    np.savez(kept_chunks, a=a, b=b)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    assert sigkill_when_ready(_KILLED_WRITER, str(resumed), str(kept_chunks), cwd=REPO_ROOT, env=env) \
        == -signal.SIGKILL

    with VideoWriter.reopen(resumed, len(a) + len(b), W, H, FPS) as writer:
        writer.write(c)
    _assert_same_video(resumed, reference)


def test_resume_after_a_kill_mid_write(tmp_path):
    """A kill while a write's fragments were going to disk leaves a torn tail; reopen drops it."""
    a, b, c = _chunks()
    reference, resumed = tmp_path / "reference.mp4", tmp_path / "resumed.mp4"
    _write_uninterrupted(reference, [a, b, c])
    _write_uninterrupted(resumed, [a, b])
    whole, full = resumed.stat().st_size, reference.read_bytes()
    for cut in (whole + 5, (whole + len(full)) // 2, len(full) - 3):
        resumed.write_bytes(full[:cut])
        with VideoWriter.reopen(resumed, len(a) + len(b), W, H, FPS) as writer:
            writer.write(c)
        _assert_same_video(resumed, reference)


def test_every_write_starts_with_a_keyframe(tmp_path):
    sizes = (5, 3, 2 * FPS + 1, 1)
    out = tmp_path / "k.mp4"
    _write_uninterrupted(out, _chunks(sizes))
    packets = _packets(out)
    starts = np.cumsum((0,) + sizes[:-1])
    # A segment's first frame, then one per second inside a long write.
    expected = {int(s) + k for s, n in zip(starts, sizes) for k in range(0, n, FPS)}
    assert {i for i, (*_, key) in enumerate(packets) if key} == expected
    assert [dts for _, _, dts, _ in packets] == [pts for _, pts, _, _ in packets]
    assert len({pts for _, pts, _, _ in packets}) == sum(sizes)
    assert [pts for _, pts, _, _ in packets] == sorted(pts for _, pts, _, _ in packets)


def test_file_holds_every_frame_after_each_write(tmp_path):
    chunks = _chunks((4, 1, FPS + 2, 3))
    reference, live = tmp_path / "reference.mp4", tmp_path / "live.mp4"
    _write_uninterrupted(reference, chunks)
    expected = _decode(reference)
    writer = VideoWriter(live, W, H, FPS)
    assert count_frames(live) == 0  # the header alone is a valid, empty video
    for chunk in chunks:
        writer.write(chunk)
        decoded = _decode(live)
        assert len(decoded) == writer.frames_written
        assert all(np.array_equal(x, y) for x, y in zip(decoded, expected))
    writer.close()


def test_same_frames_give_the_same_bytes(tmp_path):
    first, second = tmp_path / "1.mp4", tmp_path / "2.mp4"
    _write_uninterrupted(first, _chunks())
    _write_uninterrupted(second, _chunks())
    assert first.read_bytes() == second.read_bytes()


def test_reopen_at_a_whole_file_and_at_zero(tmp_path):
    a, b, c = _chunks()
    reference, resumed = tmp_path / "reference.mp4", tmp_path / "resumed.mp4"
    _write_uninterrupted(reference, [a, b, c])
    _write_uninterrupted(resumed, [a, b])
    with VideoWriter.reopen(resumed, len(a) + len(b), W, H, FPS) as writer:  # keeps the whole file
        writer.write(c)
    _assert_same_video(resumed, reference)
    with VideoWriter.reopen(resumed, 0, W, H, FPS) as writer:  # keeps nothing
        for chunk in (a, b, c):
            writer.write(chunk)
    _assert_same_video(resumed, reference)


def _one_line_input_error(path: Path, keep_frames: int, match: str, **settings) -> str:
    args = {"width": W, "height": H, "fps": FPS, **settings}
    with pytest.raises(InputError, match=match) as info:
        VideoWriter.reopen(path, keep_frames, **args)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    return message


def test_reopen_inside_a_write_is_an_input_error(tmp_path):
    a, b, _ = _chunks()
    out = tmp_path / "v.mp4"
    _write_uninterrupted(out, [a, b])
    before = out.read_bytes()
    message = _one_line_input_error(out, len(a) + 1, "no write began there")
    assert f"frame {len(a) + 1}" in message
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["v.mp4"]


def test_reopen_past_the_end_is_an_input_error(tmp_path):
    out = tmp_path / "v.mp4"
    _write_uninterrupted(out, _chunks()[:1])
    message = _one_line_input_error(out, CHUNKS[0] + 1, "holds only")
    assert f"only {CHUNKS[0]} frames" in message


def test_reopen_with_other_settings_is_an_input_error(tmp_path):
    out = tmp_path / "v.mp4"
    _write_uninterrupted(out, _chunks()[:1])
    _one_line_input_error(out, CHUNKS[0], "not written by this writer", preset="medium")
    _one_line_input_error(out, CHUNKS[0], "not written by this writer", width=W - 2)


def test_reopen_missing_or_garbage_file_is_an_input_error(tmp_path):
    _one_line_input_error(tmp_path / "missing.mp4", 0, "file not found")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video" * 100)
    _one_line_input_error(junk, 0, "not written by this writer")


def test_reopen_removes_a_stale_temporary(tmp_path):
    a, b, _ = _chunks()
    out = tmp_path / "v.mp4"
    _write_uninterrupted(out, [a, b])
    stale = tmp_path / ".v.mp4.reopen"
    stale.write_bytes(b"left by a killed reopen")
    with VideoWriter.reopen(out, len(a), W, H, FPS) as writer:
        assert writer.frames_written == len(a)
    assert not stale.exists()
    assert count_frames(out) == len(a)


def test_annexb_units_become_length_prefixed_without_sei():
    annexb = b"\x00\x00\x00\x01\x67sps\x00\x00\x01\x06banner\x00\x00\x00\x01\x65slice\x00"
    assert annexb_to_length_prefixed(annexb) == b"\x00\x00\x00\x04\x67sps\x00\x00\x00\x06\x65slice"
