"""A LingBot-World-Fast release folder works whatever it is called: the DiT's control type is its
``config.json``'s, else what its weights hold, never the folder's name (the official loader looks for
"cam" or "act" in the path)."""
from __future__ import annotations

import pytest

from engine.errors import CheckpointError
from engine.facts.lingbot_models import LINGBOT_TINY, LINGBOT_TINY_ACT
from engine.model.lingbot.checkpoint import release_files, release_model
from lingbot_release_support import write_release


@pytest.mark.parametrize("control, model", [("cam", LINGBOT_TINY), ("act", LINGBOT_TINY_ACT)])
def test_an_unstated_control_type_comes_from_the_weights(tmp_path, control, model):
    root = write_release(tmp_path / "my-weights", control=control, unstated=("control_type",))
    assert release_model(release_files(root), model).dit.control_type == control


def test_weights_of_the_other_control_are_one_line(tmp_path):
    root = write_release(tmp_path / "lingbot-cam-looking-name", control="act", unstated=("control_type",))
    with pytest.raises(CheckpointError, match="control_type 'act', but --model lingbot-tiny is 'cam'"):
        release_model(release_files(root), LINGBOT_TINY)
