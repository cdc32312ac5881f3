"""Every model of the registry plays from live inputs (the session's input source, no server): a source
that gives each chunk's actions as it starts, as the live one does. For the arena model and MG2 (micro)
the frames equal those of the same session run from the recording it wrote (the arena model derives its
camera and latent actions from the trajectory at set-up: live, it re-derives each chunk's); the synthetic
model runs on the live poses; LingBot's camera control follows the keys (its relative poses move)."""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
import torch

from engine.config import SessionConfig
from engine.io.trajectory.live import LiveTrack, recording_yaml
from engine.model.registry import model_spec
from engine.session.inputs import Inputs
from engine.session.loop import Session

CHUNKS = 4


class ScriptedSource:
    """W for the first chunks, then W and L (turning right); ends after ``CHUNKS`` chunks."""

    def __init__(self, track: LiveTrack, recording):
        self.track, self.trajectory, self.recording = track, track.trajectory, recording
        self.description = "scripted live input"

    def take(self, chunk: int, frames: range, stop: threading.Event):
        if chunk >= CHUNKS:
            return None
        n = len(frames)
        keyboard = np.zeros((n, 4), np.float32)
        keyboard[:, 0] = 1
        mouse = np.zeros((n, 2), np.float32)
        if chunk >= 2:
            mouse[:, 1] = 0.1
        changed = self.track.extend(keyboard, mouse)
        self.recording.write_text(recording_yaml(self.track), encoding="utf-8")
        return Inputs(changed, 0.0, {})


def _frames(session: Session) -> list[torch.Tensor]:
    captured = []
    session.on_frames = lambda chunk, frames: captured.append(frames.clone())
    result = session.run()
    assert result.status == "done" and result.chunks == CHUNKS
    return captured


@pytest.mark.parametrize("model, extra", [("arena", {}), ("micro", {}),
                                          ("synthetic", {"kv_scale": 0.01, "chunk_ms": 0.0}),
                                          ("lingbot-tiny", {})])
def test_a_model_plays_live_and_replays_from_its_recording(tmp_path, model, extra):
    recording = tmp_path / "live.trajectory.yaml"
    cfg = SessionConfig(model=model, out=tmp_path / "live.mp4", chunks=CHUNKS + 4, trajectory=recording,
                        device="cpu", save_every=0, look_around=0, **extra).validate()   # live inputs only
    spec = model_spec(cfg)
    track = LiveTrack(spec.action_mode, spec.grid.frames_total(cfg.chunks), cfg.calibration)
    session = Session(cfg, source=ScriptedSource(track, recording))
    live = _frames(session)
    assert track.trajectory.poses[track.known - 1, 2] < -0.5           # W walked forward (-z)
    if model == "lingbot-tiny":
        assert session.model.relative[1:track.known // 4, :3, 3].abs().max() > 0   # the camera moved
        return
    replay = Session(dataclasses.replace(cfg, out=tmp_path / "replay.mp4"))
    again = _frames(replay)
    assert len(again) == len(live) == CHUNKS
    for a, b in zip(live, again):
        assert torch.equal(a, b)
