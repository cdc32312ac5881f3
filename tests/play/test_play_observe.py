"""``worldpager play --observe CLIP``: the clip's chunks are observed first (the world's truth along its
path, flagged and marked, instead of the look around), then the player steers from where the clip ended;
the recording holds the live frames only, and ``generate --observe CLIP --trajectory RECORDING`` makes the
same video bit for bit."""
from __future__ import annotations

import subprocess

from engine.session.observe import mark_share
from engine.runtime.telemetry import read_log
from play_support import PlayProcess, mp4_frames, play_script, walk_and_turn
from tests_support import PATIENCE_S, WORLDPAGER

CLIP = "segments:\n  - keys: [w]\n    frames: 20\n  - camera: right\n    frames: 14\n"    # 34 frames: 3 chunks


def test_play_observes_the_clip_then_goes_live_and_replays_bit_for_bit(tmp_path):
    (tmp_path / "clip.yaml").write_text(CLIP)
    play = PlayProcess(tmp_path, "seen", "--observe", str(tmp_path / "clip.yaml"), chunks=10)
    assert play.url is not None, play.stderr
    played = play_script(6, play.url, walk_and_turn())
    assert play.finish() == 0, play.stderr
    assert played.end["status"] == "done"
    records = read_log(play.log)
    assert records[0]["observed"]["chunks"] == 3 and "clip.yaml" in records[0]["observed"]["source"]
    chunks = [r for r in records if r["type"] == "chunk"]
    assert [bool(r.get("observed")) for r in chunks] == [True] * 3 + [False] * (len(chunks) - 3)
    frames = mp4_frames(play.out)
    assert len(frames) == chunks[-1]["frames_total"] and len(chunks) > 3
    assert all(mark_share(f) > 0.9 for f in frames[:33]) and all(mark_share(f) < 0.5 for f in frames[33:])
    assert f"generate --observe {tmp_path / 'clip.yaml'} --trajectory" in play.stderr
    replay = subprocess.run(WORLDPAGER + ["generate", "--observe", str(tmp_path / "clip.yaml"), "--trajectory",
                                          str(play.recording), "--out", "replay.mp4", "--spill", "replay.spill",
                                          "--pool-slots", "4", "--late-prefetch", "wait", "--save-every", "2"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=PATIENCE_S)
    assert replay.returncode == 0, replay.stderr
    assert (tmp_path / "replay.mp4").read_bytes() == play.out.read_bytes()
