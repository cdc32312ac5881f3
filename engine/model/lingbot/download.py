"""LingBot-World-Fast's weights from the Hugging Face hub: only the files a session reads, in the release layout.

Owns what ``worldpager download --model lingbot-fast`` fetches. The official README puts the fast DiT
(``robbyant/lingbot-world-fast``: its ``config.json`` and safetensors shards) into the
``lingbot_world_fast`` folder of a ``robbyant/lingbot-world-base-cam`` download; of that base repository
a session reads only the VAE, the UMT5 encoder and its tokenizer folder — not the base model's two
14B DiTs (``high_noise_model``, ``low_noise_model``). So: two ``snapshot_download`` calls with
allow-patterns, into one directory (``engine.model.lingbot.checkpoint``'s layout), resumable; a hub
that cannot be reached is one ``CheckpointError`` line (``engine.model.hub``'s wording).
"""
from __future__ import annotations

import os
from pathlib import Path

from engine.errors import CheckpointError
from engine.model.hub import _cache_dir, _offline, _reason

BASE_REPO = "robbyant/lingbot-world-base-cam"
FAST_REPO = "robbyant/lingbot-world-fast"
DEFAULT_DIR = Path("lingbot-world-fast")
COMMAND = "worldpager download --model lingbot-fast"

# (repository, folder under the download directory, allow-patterns)
PARTS = (
    (BASE_REPO, ".", ("Wan2.1_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth", "google/umt5-xxl/*")),
    (FAST_REPO, "lingbot_world_fast", ("config.json", "*.safetensors", "*.safetensors.index.json")),
)


def plan() -> list[dict]:
    """What a download fetches, without network: each repository, where it goes, its allow-patterns."""
    return [{"repo": repo, "into": folder, "allow_patterns": list(patterns)} for repo, folder, patterns in PARTS]


def fetch(local_dir: Path, progress: bool = True) -> Path:
    """Download (or complete) the release folder ``local_dir``; the folder."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    (enable_progress_bars if progress else disable_progress_bars)()
    local_dir = Path(local_dir).expanduser()
    for repo, folder, patterns in PARTS:
        try:
            snapshot_download(repo, allow_patterns=list(patterns), cache_dir=_cache_dir(),
                              local_dir=str(local_dir / folder), endpoint=os.environ.get("HF_ENDPOINT") or None,
                              local_files_only=_offline())
        except Exception as exc:   # the hub client's errors are many (HTTP, offline, no cache); all end here
            raise CheckpointError(f"cannot download {repo} into {local_dir / folder}: {_reason(exc)}; check the "
                                  "network (or HF_ENDPOINT, HF_HUB_OFFLINE) and run the command again: it "
                                  "resumes") from None
    return local_dir
