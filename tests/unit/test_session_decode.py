"""Decode and mux off the loop's critical path (``engine.session.decode``, ``decode_overlap``).

The stage on its own (a real MP4 writer, frames that differ per chunk): same bytes inline and on the
worker, chunks back oldest first and at most one behind, the decode on the worker's thread, a worker
failure raised in the caller. Then whole arena sessions: the MP4 byte-identical with and without the
overlap, every chunk logged once in order with its frame count, and a run stopped with a chunk in
flight, resumed from the save point made at the stop, ending in the bytes of an uninterrupted run.
"""
from __future__ import annotations

import threading

import pytest
import torch

from engine.io.video import VideoWriter
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.decode import DecodeStage
from engine.session.resume import resume_point
from engine.runtime.telemetry import read_log

H, W, FPS = 16, 24, 8
CHUNKS = 6     # arena sessions: the stop below comes with chunk 4 in flight


class Frames:
    """A decoder with state, like the models': chunk c's frames depend on c and on the chunk before."""

    def __init__(self, fail_at: int | None = None):
        self.last = 0
        self.threads: list[str] = []
        self.fail_at = fail_at

    def __call__(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        self.threads.append(threading.current_thread().name)
        if chunk == self.fail_at:
            raise RuntimeError(f"decoder broke at chunk {chunk}")
        n = 3 if chunk == 0 else 4
        ramp = torch.arange(H * W, dtype=torch.float32).view(1, H, W, 1) % 251
        video = (ramp + 17 * chunk + self.last + torch.arange(n).view(n, 1, 1, 1) * 5) % 256   # [T, H, W, 1]
        self.last = int(video[-1, 0, 0, 0])
        return video.expand(n, H, W, 3).to(torch.uint8).contiguous()


def _write(path, overlap: bool, chunks: int = 6) -> tuple[Frames, list[list[int]]]:
    decode = Frames()
    writer = VideoWriter(path, W, H, FPS)
    stage = DecodeStage(decode, writer, overlap=overlap)
    returned = []
    try:
        for c in range(chunks):
            returned.append([d.chunk for d in stage.submit(c, torch.empty(0), {"chunk": c})])
        returned.append([d.chunk for d in stage.close()])
        assert stage.frames_total == writer.frames_written == 3 + 4 * (chunks - 1)
    finally:
        writer.close()
    return decode, returned


def test_overlap_writes_the_same_bytes_a_chunk_behind(tmp_path):
    inline, back_inline = _write(tmp_path / "inline.mp4", overlap=False)
    worker, back_worker = _write(tmp_path / "worker.mp4", overlap=True)
    assert (tmp_path / "inline.mp4").read_bytes() == (tmp_path / "worker.mp4").read_bytes()
    assert back_inline == [[0], [1], [2], [3], [4], [5], []]
    assert back_worker == [[], [0], [1], [2], [3], [4], [5]]      # each submit returns the chunk before
    assert all(name == threading.current_thread().name for name in inline.threads)
    assert all(name.startswith("decode") for name in worker.threads)


def test_drain_accounts_for_every_chunk_submitted(tmp_path):
    writer = VideoWriter(tmp_path / "d.mp4", W, H, FPS)
    stage = DecodeStage(Frames(), writer, overlap=True, frames_total=100)   # a resumed run's frames before
    try:
        stage.submit(0, torch.empty(0), {})
        stage.submit(1, torch.empty(0), {})
        done = stage.drain()
        assert [(d.chunk, d.frames, d.frames_total) for d in done] == [(1, 4, 107)]
        assert stage.frames_total == 107 and writer.frames_written == 7
        assert stage.drain() == []
    finally:
        stage.close()
        writer.close()


@pytest.mark.parametrize("overlap", [False, True])
def test_a_decoder_failure_is_raised_in_the_loop(tmp_path, overlap):
    writer = VideoWriter(tmp_path / "f.mp4", W, H, FPS)
    stage = DecodeStage(Frames(fail_at=2), writer, overlap=overlap)
    try:
        stage.submit(0, torch.empty(0), {})
        stage.submit(1, torch.empty(0), {})
        with pytest.raises(RuntimeError, match="decoder broke at chunk 2"):
            stage.submit(2, torch.empty(0), {})
            stage.drain()
        assert writer.frames_written == 7              # the chunks before it are in the file
    finally:
        stage.close()
        writer.close()


# ---- whole sessions -------------------------------------------------------------------------------

def _cfg(out, overlap: bool, **extra):
    extra["memory"] = {"late_prefetch": "wait", **extra.get("memory", {})}   # bytes compared: whatever the speed
    return resolve_session_config(None, {"model": "arena", "chunks": CHUNKS, "out": out, "decode_overlap": overlap,
                                         **extra})


def _chunk_records(cfg):
    return [r for r in read_log(cfg.log_path) if r.get("type") == "chunk"]


def test_sessions_with_and_without_overlap_write_the_same_mp4(tmp_path):
    logs = {}
    for overlap in (False, True):
        cfg = _cfg(tmp_path / f"o{int(overlap)}.mp4", overlap, save_every=0)
        result = Session(cfg).run()
        assert result.status == "done" and result.chunks == CHUNKS
        logs[overlap] = _chunk_records(cfg)
        assert result.frames == logs[overlap][-1]["frames_total"]
    assert (tmp_path / "o0.mp4").read_bytes() == (tmp_path / "o1.mp4").read_bytes()
    for records in logs.values():
        assert [r["chunk"] for r in records] == list(range(CHUNKS))
        totals = [r["frames_total"] for r in records]
        assert totals == [sum(r["frames"] for r in records[:i + 1]) for i in range(CHUNKS)]
        assert all(r["decode_ms"] > 0 and r["decode_wait_ms"] >= 0 for r in records)


def test_a_stop_with_a_chunk_in_flight_resumes_to_the_uninterrupted_bytes(tmp_path):
    whole = _cfg(tmp_path / "whole.mp4", False, save_every=0)
    Session(whole).run()
    cfg = _cfg(tmp_path / "cut.mp4", True, save_every=100, memory={"pool_slots": 4, "spill": tmp_path / "spill"})
    session = Session(cfg, on_chunk=lambda r: r["chunk"] == 3 and session.request_stop())
    result = session.run()
    assert result.status == "interrupted"
    again, sp, _ = resume_point(cfg.out)
    records = _chunk_records(cfg)
    assert sp.chunk == result.chunks == records[-1]["chunk"] + 1      # every chunk before it logged
    assert sp.facts["frames_total"] == result.frames == records[-1]["frames_total"]
    assert Session(again, resume_from=sp).run().status == "done"
    assert (tmp_path / "cut.mp4").read_bytes() == (tmp_path / "whole.mp4").read_bytes()
    assert [r["chunk"] for r in _chunk_records(cfg)] == list(range(CHUNKS))


def test_the_flag_reaches_the_config(tmp_path):
    from click.testing import CliRunner

    from worldpager_cli.main import cli

    out = tmp_path / "s.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "synthetic", "--chunk-ms", "0", "--kv-scale", "0.034",
                                      "--chunks", "3", "--decode-overlap", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    cfg = resolve_session_config(None, {"out": out})
    assert read_log(cfg.log_path)[0]["config"]["decode_overlap"] is True
    assert [r["chunk"] for r in _chunk_records(cfg)] == [0, 1, 2]
