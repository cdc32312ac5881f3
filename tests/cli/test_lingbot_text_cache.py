"""LingBot's text encoder runs once per prompt: its output is cached beside the session, so a second run
with the same prompt, and a fork, never construct the encoder again and make the same frames; a different
prompt, or a damaged cache file, computes anew; a cache path that is a FIFO is never waited on."""
from __future__ import annotations

import os
import subprocess
import sys

import av
import numpy as np
import pytest
from click.testing import CliRunner

from engine.io.trajectory import packaged_trajectory
from engine.model.lingbot import checkpoint
from engine.model.lingbot.text_cache import PREFIX, read_cached
from lingbot_release_support import write_release
from worldpager_cli.main import cli

RUN = ["--model", "lingbot-tiny", "--chunks", "3", "--late-prefetch", "wait", "--quiet", "--seed", "5",
       "--save-every", "1", "--keep-savepoints", "3"]


@pytest.fixture()
def constructions(monkeypatch):
    """Counts the text encoders built (each is the UMT5 network loaded)."""
    built = []
    real = checkpoint.load_text_encoder

    def counting(*args, **kwargs):
        built.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "load_text_encoder", counting)
    return built


def _frames(path) -> np.ndarray:
    with av.open(str(path)) as box:
        return np.stack([f.to_ndarray(format="rgb24") for f in box.decode(video=0)])


def _generate(release, out, prompt="a snow road"):
    done = CliRunner().invoke(cli, ["generate", *RUN, "--checkpoint", str(release), "--prompt", prompt,
                                    "--spill", str(out.with_suffix(".spill")), "--out", str(out)])
    assert done.exit_code == 0, done.output


def test_a_second_run_and_a_fork_do_not_load_the_encoder(tmp_path, constructions):
    release = write_release(tmp_path / "release")
    runs = tmp_path / "runs"
    runs.mkdir()
    _generate(release, runs / "a.mp4")
    assert len(constructions) == 1
    cached = sorted(p.name for p in runs.iterdir() if p.name.startswith(PREFIX))
    assert len(cached) == 1 and cached[0].endswith(".npy")
    _generate(release, runs / "b.mp4")
    assert len(constructions) == 1
    assert np.array_equal(_frames(runs / "a.mp4"), _frames(runs / "b.mp4"))
    done = CliRunner().invoke(cli, ["fork", str(runs / "a.mp4"), "--at", "1", "--out", str(runs / "c.mp4"),
                                    "--trajectory", str(packaged_trajectory("yaw.yaml")), "--chunks", "3", "--quiet"])
    assert done.exit_code == 0, done.output
    assert len(constructions) == 1
    _generate(release, runs / "d.mp4", prompt="a red house at night")
    assert len(constructions) == 2 and len([p for p in runs.iterdir() if p.name.startswith(PREFIX)]) == 2


def test_a_damaged_cache_file_is_computed_again(tmp_path, constructions):
    release = write_release(tmp_path / "release")
    _generate(release, tmp_path / "a.mp4")
    (cache,) = [p for p in tmp_path.iterdir() if p.name.startswith(PREFIX)]
    cache.write_bytes(b"not an array")
    assert read_cached(cache) is None
    _generate(release, tmp_path / "b.mp4")
    assert len(constructions) == 2 and read_cached(cache) is not None
    assert np.array_equal(_frames(tmp_path / "a.mp4"), _frames(tmp_path / "b.mp4"))


def test_a_fifo_in_the_cache_place_is_not_waited_on(tmp_path):
    fifo = tmp_path / f"{PREFIX}x.npy"
    os.mkfifo(fifo)
    code = ("import sys; from pathlib import Path; from engine.model.lingbot.text_cache import read_cached; "
            "print(read_cached(Path(sys.argv[1])))")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr
