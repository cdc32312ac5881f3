"""A LingBot-World-Fast run from a release folder keeps its prompt in its config: ``fork`` of it runs with
no ``--prompt`` (the parent's text), has the parent's frames before the fork point, and its config names
the same prompt and folder."""
from __future__ import annotations

import json

import av
import numpy as np
from click.testing import CliRunner

from engine.io.trajectory import packaged_trajectory
from engine.runtime.telemetry import read_log
from lingbot_release_support import write_release
from worldpager_cli.main import cli

RUN = ["--model", "lingbot-tiny", "--chunks", "4", "--store", "on-demand", "--save-every", "1",
       "--keep-savepoints", "4", "--quiet", "--seed", "3"]


def _frames(path) -> np.ndarray:
    with av.open(str(path)) as box:
        return np.stack([f.to_ndarray(format="rgb24") for f in box.decode(video=0)])


def test_a_fork_reuses_the_parents_prompt(tmp_path):
    release = write_release(tmp_path / "release")
    parent, branch = tmp_path / "parent.mp4", tmp_path / "branch.mp4"
    done = CliRunner().invoke(cli, ["generate", *RUN, "--checkpoint", str(release), "--prompt", "a snow road",
                                    "--spill", str(tmp_path / "parent.spill"), "--out", str(parent)])
    assert done.exit_code == 0, done.output
    done = CliRunner().invoke(cli, ["fork", str(parent), "--at", "2", "--trajectory",
                                    str(packaged_trajectory("yaw.yaml")), "--out", str(branch), "--chunks", "4",
                                    "--quiet"])
    assert done.exit_code == 0, done.output
    config = json.loads(branch.with_suffix(".config.json").read_text())
    assert config["prompt"] == "a snow road" and config["checkpoint"] == str(release)
    fork_frames = [r for r in read_log(branch.with_suffix(".log.jsonl")) if r["type"] == "fork"][-1]["frames_total"]
    a, b = _frames(parent), _frames(branch)
    assert fork_frames == 21 and len(a) == len(b) == 45
    assert np.array_equal(a[:fork_frames], b[:fork_frames]) and not np.array_equal(a[fork_frames:], b[fork_frames:])
