"""The revisit episodes: unclamped, deterministic, held out, long enough, coming back to observed and to
generated views; and the session's cameras (tour observed, then the exploration) are the episode's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.data import latent_camera
from engine.arena.model import ArenaDiT
from engine.arena.pipeline import ArenaPipeline
from engine.arena.world import Arena
from engine.errors import ConfigError
from engine.model.registry import model_spec
from engine.quality.arms import INT4
from engine.quality.episodes import QUALITY_ARENA_BASE
from engine.quality.revisit_paths import FULL, KINDS, QUICK, revisit_episode
from engine.quality.revisits import classify
from engine.quality.session_run import session_config
from engine.session.observe import session_path

MODEL = ArenaModelConfig()


def cameras(ep) -> np.ndarray:
    return latent_camera(ep.episode.poses, MODEL, ep.chunks * MODEL.frames_per_chunk)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_comes_back_to_observed_and_generated_views(kind):
    ep = revisit_episode(3, kind)
    assert ep.episode.clamped == 0 and ep.chunks == FULL.chunks >= 40 and ep.arena_seed == QUALITY_ARENA_BASE + 3
    assert len(ep.episode.keyboard) == 12 * ep.chunks - 3 and ep.tour_frames == 12 * ep.observed_chunks - 3
    rv = classify(cameras(ep), MODEL.frames_per_chunk, ep.observed_chunks)
    masks = rv.masks()
    assert masks["observed_away"].sum() >= 9 and masks["generated"].sum() >= 25
    assert masks["start"].sum() < masks["revisit"].sum() / 4          # the start pose is a minority
    again = revisit_episode(3, kind)
    np.testing.assert_array_equal(again.episode.mouse, ep.episode.mouse)


def test_the_spin_is_two_slow_turns_and_the_walk_comes_back_the_same_way():
    cam = cameras(revisit_episode(0, "spin"))
    assert np.allclose(np.diff(np.unwrap(np.radians(cam[:, 2]))), np.radians(6.0))   # 1.5 degrees a video frame
    turn = (cam[60:, 2] - cam[:60, 2] + 180) % 360 - 180
    assert np.abs(turn).max() < 1e-3                                                 # the second turn: the first's
    walk = cameras(revisit_episode(0, "walk"))
    far = np.hypot(walk[:, 0], walk[:, 1]).max()
    assert 5.0 < far < 6.5 and set(np.round(walk[:, 2]) % 360) <= set(range(0, 360, 18))     # turns of 18 degrees


def test_the_quick_shape_is_short_and_still_has_revisits():
    spin = revisit_episode(0, "spin", QUICK)
    rv = classify(cameras(spin), MODEL.frames_per_chunk, QUICK.observed_chunks)
    assert spin.chunks == 13 and rv.observed.any() and rv.generated.any() and rv.start.any()
    with pytest.raises(ConfigError, match="spiral"):
        revisit_episode(0, "spiral")


def test_the_session_observes_the_tour_and_its_cameras_are_the_episodes(tmp_path):
    ep = revisit_episode(1, "walk", QUICK)
    cfg = session_config(INT4, ep.episode, ep.chunks, tmp_path, observe_frames=ep.tour_frames)
    assert cfg.observe == tmp_path / "tour.csv" and cfg.trajectory == tmp_path / "path.csv"
    spec = model_spec(cfg)
    path = session_path(cfg, spec)
    assert path.observed_chunks == ep.observed_chunks
    with torch.device("meta"):
        net = ArenaDiT(MODEL)
    pipeline = ArenaPipeline(net, Arena.generate(ep.arena_seed), path.trajectory, 0, "rerotate",
                             torch.device("cpu"), torch.float32, weights="")
    assert pipeline.clamped_frames == 0
    np.testing.assert_allclose(pipeline.cam, cameras(ep), atol=1e-4)
