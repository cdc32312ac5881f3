"""The revisit classifier on a hand-built episode whose answer is known frame by frame."""
from __future__ import annotations

import numpy as np
import pytest

from engine.quality.revisits import classify

FPC, OBSERVED, CHUNKS = 3, 2, 20          # chunks 0-1 observed, 2-19 generated


def frame(chunk: int, i: int = 0) -> int:
    return chunk * FPC + i


@pytest.fixture
def episode():
    """Every camera somewhere of its own (10 units apart), then the poses below put in by hand."""
    n = CHUNKS * FPC
    cam = np.stack([10.0 * (1 + np.arange(n)), np.zeros(n), np.zeros(n), np.zeros(n)], axis=1)
    start, seen = [0.0, 0.0, 0.0, 0.0], [-5.0, 3.0, 40.0, 0.0]
    made, other = [-7.0, 1.0, -90.0, 0.0], [-9.0, 2.0, 10.0, 0.0]
    cam[frame(0, 1)] = start                          # chunk 0: the view the session is handed
    cam[frame(1, 1)] = seen                           # observed, not the start
    cam[frame(3)] = made                              # generated only: its first visit ...
    cam[frame(5)] = made                              # ... and a later one
    cam[frame(5, 1)] = other                          # generated
    both = [-11.0, 4.0, 0.0, 0.0]
    cam[frame(1, 2)] = cam[frame(4, 2)] = both        # observed once, generated once
    wrap = [-13.0, 5.0, 179.0, 0.0]
    cam[frame(3, 2)] = wrap
    # the revisits
    cam[frame(12)] = start                                        # observed, at the start pose
    cam[frame(11, 1)] = [-5.0, 3.0, 42.4, 2.4]                    # observed: within 2.5 degrees
    cam[frame(13)] = [-7.0 + 0.06, 1.0 + 0.07, -90.0, 0.0]        # generated: 0.09 units away
    cam[frame(16)] = made                                         # generated, two earlier visits
    cam[frame(14, 2)] = both                                      # observed (any match observed)
    cam[frame(15, 2)] = [-13.0, 5.0, -179.0, 0.0]                 # generated: 2 degrees across +-180
    # not revisits
    cam[frame(14)] = other                                        # 9 chunks after its visit
    cam[frame(13, 1)] = [-7.0 + 0.11, 1.0, -90.0, 0.0]            # 0.11 units away
    cam[frame(13, 2)] = [-5.0, 3.0, 42.6, 0.0]                    # 2.6 degrees of yaw
    cam[frame(17)] = [-5.0, 3.0, 40.0, 2.6]                       # 2.6 degrees of pitch
    cam[frame(1)] = start                                         # an observed chunk: never a revisit
    return cam


def test_each_frame_is_what_it_was_built_to_be(episode):
    rv = classify(episode, FPC, OBSERVED)
    observed = {frame(12): frame(0, 1), frame(11, 1): frame(1, 1), frame(14, 2): frame(1, 2)}
    generated = {frame(13): frame(3), frame(16): frame(3), frame(15, 2): frame(3, 2)}
    assert set(np.flatnonzero(rv.revisit)) == set(observed) | set(generated)
    assert set(np.flatnonzero(rv.observed)) == set(observed)
    assert set(np.flatnonzero(rv.generated)) == set(generated)
    assert set(np.flatnonzero(rv.start)) == {frame(12)}
    for f, first in {**observed, **generated}.items():
        assert rv.first[f] == first, f               # the earliest match: the first visit
    assert (rv.first[~rv.revisit] == -1).all()
    assert not rv.generated_frames[:OBSERVED * FPC].any() and rv.generated_frames[OBSERVED * FPC:].all()


def test_the_class_masks_split_the_revisits(episode):
    masks = classify(episode, FPC, OBSERVED).masks()
    assert masks["observed"].sum() == 3 and masks["start"].sum() == 1 and masks["observed_away"].sum() == 2
    assert masks["generated"].sum() == 3 and masks["revisit"].sum() == 6
    assert masks["all"].sum() == (CHUNKS - OBSERVED) * FPC
    assert not (masks["observed"] & masks["generated"]).any()


def test_chunk_0_alone_observed_and_bad_input(episode):
    rv = classify(episode, FPC, 1)                    # without a tour, chunk 1's views are generated
    assert rv.generated[frame(11, 1)] and rv.observed[frame(12)]
    with pytest.raises(ValueError, match="observed_chunks 0"):
        classify(episode, FPC, 0)
    with pytest.raises(ValueError, match=r"\(60, 3\)"):
        classify(episode[:, :3], FPC, 1)
