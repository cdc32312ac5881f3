"""LingBot-World-Fast from a release folder: ``generate --model lingbot-tiny --checkpoint DIR --prompt TEXT``
on a tiny folder in the official layout (seeded weights) makes a decodable MP4 and the prompt changes the
frames; a missing file, a wrong shape and an unknown control type are one line each naming the file or key
(and leave no output); the prompt is recorded in the run's config; ``--prompt`` is refused for models
without text; ``download --model lingbot-fast`` fetches only what a session reads (checked offline)."""
from __future__ import annotations

import json
import shutil
import socket

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from engine.settings.options import overlay
from lingbot_release_support import dit_config_json, write_release
from worldpager_cli.main import cli

ARGS = ["--model", "lingbot-tiny", "--chunks", "3", "--late-prefetch", "wait", "--quiet", "--seed", "5"]
SHARD_2 = "lingbot_world_fast/diffusion_pytorch_model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("release") / "lingbot-world-fast")


def _frames(path) -> np.ndarray:
    with av.open(str(path)) as box:
        return np.stack([f.to_ndarray(format="rgb24") for f in box.decode(video=0)])


def _generate(*args):
    return CliRunner().invoke(cli, ["generate", *args])


def one_line_error(result, needle: str) -> None:
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output


def test_a_release_folder_generates_and_the_prompt_steers_it(release, tmp_path):
    street, tree = tmp_path / "street.mp4", tmp_path / "tree.mp4"
    for out, prompt in ((street, "a street"), (tree, "a green tree")):
        result = _generate(*ARGS, "--checkpoint", str(release), "--prompt", prompt, "--out", str(out))
        assert result.exit_code == 0, result.output
    a, b = _frames(street), _frames(tree)
    assert a.shape == b.shape == (33, 96, 160, 3)
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 1.0
    config = json.loads(street.with_suffix(".config.json").read_text())
    assert config["prompt"] == "a street" and config["checkpoint"] == str(release)


def _broken(release, tmp_path, edit):
    copy = tmp_path / "broken"
    shutil.copytree(release, copy)
    edit(copy)
    return copy


def _wrong_shape(root):
    state = load_file(str(root / SHARD_2))
    key = sorted(state)[0]
    state[key] = torch.zeros(3, *state[key].shape[1:])
    save_file(state, str(root / SHARD_2))


@pytest.mark.parametrize("edit, needle", [
    (lambda r: (r / "Wan2.1_VAE.pth").unlink(), "checkpoint file missing: {root}/Wan2.1_VAE.pth"),
    (lambda r: shutil.rmtree(r / "google"), "checkpoint folder missing: {root}/google/umt5-xxl"),
    (lambda r: (r / SHARD_2).unlink(), f"checkpoint file missing: {{root}}/{SHARD_2}"),
    (_wrong_shape, "has shape (3,"),
    (lambda r: (r / "lingbot_world_fast/config.json").write_text(json.dumps(dit_config_json(control_type="joy"))),
     "{root}/lingbot_world_fast/config.json: unknown control_type 'joy'"),
    (lambda r: (r / "lingbot_world_fast/config.json").write_text(json.dumps(dit_config_json(window_size=[-1, -1]))),
     "config.json: unknown LingBot-World-Fast config field 'window_size'"),
    (lambda r: (r / "lingbot_world_fast/config.json").write_text(json.dumps(dit_config_json(num_layers=3))),
     "config.json: num_layers 3, but --model lingbot-tiny is 2"),
])
def test_a_bad_release_folder_is_one_line_and_leaves_nothing(release, tmp_path, edit, needle):
    root = _broken(release, tmp_path, edit)
    out = tmp_path / "out" / "x.mp4"
    out.parent.mkdir()
    one_line_error(_generate(*ARGS, "--checkpoint", str(root), "--prompt", "a street", "--out", str(out)),
                   needle.format(root=root))
    assert list(out.parent.iterdir()) == []


def test_the_wrong_shape_names_its_key_and_shard(release, tmp_path):
    root = _broken(release, tmp_path, _wrong_shape)
    key = sorted(load_file(str(root / SHARD_2)))[0]
    result = _generate(*ARGS, "--checkpoint", str(root), "--prompt", "a street", "--out", str(tmp_path / "x.mp4"))
    one_line_error(result, f"key {key!r} in {root / 'lingbot_world_fast'}")


def test_a_release_folder_means_lingbot_fast_and_text_is_lingbots_alone(release, tmp_path):
    assert overlay({"checkpoint": str(release)})["model"] == "lingbot-fast"
    assert overlay({"checkpoint": str(tmp_path)})["model"] == "mg2-universal"
    out = str(tmp_path / "x.mp4")
    one_line_error(_generate("--checkpoint", str(release), "--prompt", "a street", "--out", out),
                   "dim 128, but --model lingbot-fast is 5120")
    one_line_error(_generate("--model", "tiny", "--prompt", "a street", "--out", out), "the tiny model takes no text")
    one_line_error(_generate(*ARGS, "--checkpoint", str(release), "--out", out), "give --prompt TEXT")
    one_line_error(_generate(*ARGS, "--prompt", "a street", "--out", out), "has no text encoder")
    assert list(tmp_path.iterdir()) == []


def test_download_fetches_only_what_a_session_reads(release, monkeypatch):
    from huggingface_hub.utils import filter_repo_objects

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # the dry run's sizes: not asked of the hub here
    result = CliRunner().invoke(cli, ["download", "--model", "lingbot-fast", "--dry-run"])
    assert result.exit_code == 0, result.output
    parts = {p["repo"]: p for p in json.loads(result.output.splitlines()[-1])["parts"]}
    base = ["Wan2.1_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth", "google/umt5-xxl/tokenizer.json",
            "google/umt5-xxl/tokenizer_config.json", "high_noise_model/config.json",
            "high_noise_model/diffusion_pytorch_model-00001-of-00006.safetensors", "low_noise_model/config.json",
            "README.md", "assets/teaser.mp4", "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"]
    fast = ["config.json", "diffusion_pytorch_model-00001-of-00002.safetensors",
            "diffusion_pytorch_model.safetensors.index.json", "README.md", "assets/demo.gif"]
    def fetched(repo, names):
        return sorted(filter_repo_objects(names, allow_patterns=parts[repo]["allow_patterns"]))

    got_base = fetched("robbyant/lingbot-world-base-cam", base)
    got_fast = fetched("robbyant/lingbot-world-fast", fast)
    assert got_base == sorted(base[:4])
    assert got_fast == sorted(fast[:3])
    assert parts["robbyant/lingbot-world-fast"]["into"] == "lingbot_world_fast"


def test_download_without_network_is_one_line(tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["download", "--model", "lingbot-fast", "--dir", str(tmp_path / "d"), "--quiet"])
    assert result.exit_code == 1
    one_line_error(result, "cannot download robbyant/lingbot-world-base-cam")


# The official ``Wan2_1_VAE`` (wan/modules/vae2_1.py of the LingBot release code): dim 96, z 16, mults
# 1,2,4,4, 2 residual blocks, temporal downsampling F,T,T, and these latent statistics.
OFFICIAL_MEAN = (-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                 0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921)
OFFICIAL_STD = (2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160)


def test_the_release_vae_is_mg2s_wan21_vae():
    from engine.facts.lingbot_models import LINGBOT_FAST

    vae = LINGBOT_FAST.vae
    assert (vae.dim, vae.z_dim, vae.dim_mult, vae.num_res_blocks) == (96, 16, (1, 2, 4, 4), 2)
    assert vae.temporal_downsample == (False, True, True)
    assert vae.latent_mean == OFFICIAL_MEAN and vae.latent_std == OFFICIAL_STD


def test_a_vae_of_another_width_is_one_line_naming_the_key(release, tmp_path):
    from engine.config import VAEConfig
    from engine.model.vae import WanVAE

    root = _broken(release, tmp_path, lambda r: torch.save(WanVAE(VAEConfig(dim=4)).state_dict(),
                                                            r / "Wan2.1_VAE.pth"))
    result = _generate(*ARGS, "--checkpoint", str(root), "--prompt", "a street", "--out", str(tmp_path / "x.mp4"))
    one_line_error(result, f"in {root / 'Wan2.1_VAE.pth'} has shape")
