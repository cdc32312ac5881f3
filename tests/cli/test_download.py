"""``worldpager download`` and ``--checkpoint REPO_ID`` against a local hub cache laid out as
huggingface_hub lays it out (``models--Skywork--Matrix-Game-2.0/{refs/main, blobs/, snapshots/REV/}``
with the snapshot's files linked to their blobs), built here from the tiny model's seeded weights in
the official release's file layout. The hub is never reached: its endpoint is a closed local port."""
from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from engine.config import model_config
from engine.errors import CheckpointError
from engine.model.hub import REPO_ID, mode_files
from engine.model.load import load_models
from tests_support import tiny_reference_models, write_checkpoint
from worldpager_cli.main import cli

REVISION = "0123456789abcdef0123456789abcdef01234567"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # closed again when this returns: connections are refused


def hub_cache(root: Path, files_dir: Path, only: list[str] | None = None) -> Path:
    """A hub cache holding ``files_dir``'s files (all, or ``only``) as a snapshot of REPO_ID."""
    repo = root / ("models--" + REPO_ID.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    for path in sorted(p for p in files_dir.rglob("*") if p.is_file()):
        name = path.relative_to(files_dir).as_posix()
        if only is not None and name not in only:
            continue
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / REVISION / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return root


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-ckpt")
    write_checkpoint(root, tiny_reference_models())
    return root


@pytest.fixture
def offline_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    return monkeypatch


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_no_network_and_nothing_cached_is_one_line(offline_env):
    result = invoke("download", "--mode", "gta", "--quiet")
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1
    assert "cannot download Skywork/Matrix-Game-2.0 (gta)" in result.output and "Connection refused" in result.output


def test_a_cached_snapshot_is_found_and_checked_without_the_network(offline_env, tiny_files, tmp_path):
    cache = hub_cache(tmp_path / "cache", tiny_files)
    offline_env.setenv("HF_HUB_CACHE", str(cache))
    result = invoke("download", "--mode", "universal", "--check-as", "tiny", "--quiet")
    assert result.exit_code == 0, result.output
    last = json.loads(result.output.strip().splitlines()[-1])
    snapshot = cache / "models--Skywork--Matrix-Game-2.0" / "snapshots" / REVISION
    assert Path(last["dir"]) == snapshot and last["checked_as"] == ["tiny"]
    assert sorted(last["files"]) == sorted(mode_files("universal"))
    # the same files checked as the real MG2: the strict loader names the first key that does not fit
    result = invoke("download", "--mode", "universal", "--quiet")
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "missing key" in result.output and "base_distill.safetensors" in result.output


def test_checkpoint_as_a_repo_id_loads_from_the_cache(offline_env, tiny_files, tmp_path):
    cache = hub_cache(tmp_path / "cache", tiny_files)
    offline_env.setenv("HF_HUB_CACHE", str(cache))
    models = load_models(model_config("tiny"), Path(REPO_ID), torch.device("cpu"), torch.float32)
    reference = tiny_reference_models()
    assert models.source.endswith(REVISION)
    for ours, ref in zip(models.dit.state_dict().values(), reference.dit.state_dict().values()):
        assert torch.equal(ours, ref)


def test_a_repo_id_missing_from_the_cache_names_the_command(offline_env, tiny_files, tmp_path):
    with pytest.raises(CheckpointError, match=r"no such directory, and no hub repo .* in .*empty-cache.*run 'worldpager download"):
        load_models(model_config("tiny"), Path(REPO_ID), torch.device("cpu"), torch.float32)
    shared = [f for f in mode_files("universal") if "distilled" not in f]
    cache = hub_cache(tmp_path / "cache", tiny_files, only=shared)   # the VAE and CLIP, no DiT
    offline_env.setenv("HF_HUB_CACHE", str(cache))
    with pytest.raises(CheckpointError, match=r"lacks gta_distilled_model/.*run 'worldpager download --mode gta'"):
        load_models(model_config("mg2-gta"), Path(REPO_ID), torch.device("cpu"), torch.float32)


def test_generate_with_an_uncached_repo_id_is_one_line(offline_env, tmp_path):
    out = tmp_path / "x.mp4"
    result = invoke("generate", "--model", "tiny", "--checkpoint", REPO_ID, "--chunks", "1", "--out", str(out),
                    "--quiet")
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("worldpager: error:")]
    assert len(lines) == 1 and "worldpager download" in lines[0]
    assert not out.exists()


# ---- --dry-run: files, sizes, destination ---------------------------------------------------------

class _Sibling:
    def __init__(self, name, size):
        self.rfilename, self.size = name, size


def _fake_hub(monkeypatch, files: dict[str, dict[str, int]], asked: list):
    """The hub's metadata (``model_info(files_metadata=True)``) for ``files`` {repo: {path: size}}."""
    import huggingface_hub

    def model_info(self, repo, files_metadata=False, timeout=None, **kw):
        asked.append((repo, files_metadata))
        return type("Info", (), {"siblings": [_Sibling(n, s) for n, s in files[repo].items()]})()

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)


def test_dry_run_lists_files_sizes_and_destination_and_fetches_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    names = mode_files("universal")
    asked = []
    _fake_hub(monkeypatch, {REPO_ID: {**{n: (i + 1) << 30 for i, n in enumerate(names)}, "README.md": 10,
                                      "gta_distilled_model/gta_keyboard2dim.safetensors": 5 << 30}}, asked)
    dest = tmp_path / "mg2"
    (dest / names[0]).parent.mkdir(parents=True, exist_ok=True)
    (dest / names[0]).write_bytes(b"\0" * 4096)          # a partial file: still to fetch
    result = CliRunner().invoke(cli, ["download", "--dry-run", "--dir", str(dest)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert [f["file"] for f in doc["files"]] == sorted(names)          # only what the mode reads
    assert doc["bytes_to_fetch"] == (1 + 2 + 3) << 30 and doc["dir"] == str(dest)
    assert all(f["dest"].startswith(str(dest)) for f in doc["files"]) and doc["free_bytes"] > 0
    assert "would fetch into" in result.output and "GiB free at the destination" in result.output
    assert asked == [(REPO_ID, True)] and [p.name for p in dest.rglob("*") if p.is_file()] == [Path(names[0]).name]


def test_dry_run_says_which_files_are_already_there(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    asked = []
    _fake_hub(monkeypatch, {"robbyant/lingbot-world-base-cam": {"Wan2.1_VAE.pth": 100, "google/umt5-xxl/tokenizer.json": 7,
                                                                "high_noise_model/x.safetensors": 1 << 40},
                            "robbyant/lingbot-world-fast": {"config.json": 3, "a.safetensors": 1 << 30}}, asked)
    (tmp_path / "Wan2.1_VAE.pth").write_bytes(b"\0" * 100)
    result = CliRunner().invoke(cli, ["download", "--model", "lingbot-fast", "--dry-run", "--dir", str(tmp_path)])
    doc = json.loads(result.output.strip().splitlines()[-1])
    files = {f["file"]: f for f in doc["files"]}
    assert set(files) == {"Wan2.1_VAE.pth", "google/umt5-xxl/tokenizer.json", "config.json", "a.safetensors"}
    assert files["Wan2.1_VAE.pth"]["present"] and "(already there)" in result.output
    assert files["a.safetensors"]["dest"] == str(tmp_path / "lingbot_world_fast" / "a.safetensors")
    assert doc["bytes_to_fetch"] == 7 + 3 + (1 << 30)


def test_dry_run_without_the_hub_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(cli, ["download", "--dry-run", "--dir", str(tmp_path / "x")])
    assert result.exit_code == 0
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert doc["sizes_unknown"] == [f"{REPO_ID}: HF_HUB_OFFLINE is set"] and "to fetch: unknown" in result.output
    assert not (tmp_path / "x").exists()
