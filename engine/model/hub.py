"""MG2's weights from the Hugging Face hub: what each mode needs, fetching it, finding it offline.

Owns the map from a mode (``universal``, ``gta``, ``templerun``) to the files of the official release
(``Skywork/Matrix-Game-2.0``) that its model reads — the mode's DiT plus the shared VAE and CLIP, and
nothing else of the repository — and two ways to a checkpoint directory:

* ``fetch``: ``huggingface_hub.snapshot_download`` of only those files, into the hub's cache (shared
  with every other tool that uses it) or a plain directory; interrupted downloads resume, progress
  bars show; a hub that cannot be reached is one ``CheckpointError`` line.
* ``resolve_checkpoint``: ``--checkpoint`` given as a hub repo id (``Skywork/Matrix-Game-2.0``) is the
  snapshot in the local cache, found with no network; not there, or without a file the model needs,
  is one line naming the ``worldpager download`` command that gets it.

The environment is read when called (``HF_HUB_CACHE`` / ``HF_HOME``, ``HF_ENDPOINT``,
``HF_HUB_OFFLINE``), not when imported, so a caller can point it elsewhere at any time.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from engine.config import model_config
from engine.errors import CheckpointError

REPO_ID = "Skywork/Matrix-Game-2.0"
MODE_MODELS = {"universal": "mg2-universal", "gta": "mg2-gta", "templerun": "mg2-templerun"}
_REPO_ID_FORM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def mode_files(mode: str) -> list[str]:
    """The repository files the mode's model reads (the loader's layout)."""
    cfg = model_config(MODE_MODELS[mode])
    return [cfg.dit_file, cfg.vae_file, cfg.clip_file]


def files_for(modes: list[str]) -> list[str]:
    return sorted({f for mode in modes for f in mode_files(mode)})


def modes_needing(files: list[str]) -> list[str]:
    """The modes whose download brings ``files`` (for the command a message names)."""
    return [m for m in MODE_MODELS if set(files) & set(mode_files(m))] or list(MODE_MODELS)


def looks_like_repo_id(text: str) -> bool:
    return bool(_REPO_ID_FORM.match(text)) and not text.startswith(".")


def _cache_dir() -> str | None:
    return os.environ.get("HF_HUB_CACHE") or None   # None: huggingface_hub's own default (HF_HOME/hub)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def download_command(modes: list[str]) -> str:
    mode = modes[0] if len(modes) == 1 else "all"
    return f"worldpager download --mode {mode}"


def fetch(modes: list[str], local_dir: Path | None = None, progress: bool = True, repo_id: str = REPO_ID) -> Path:
    """Download what ``modes`` need (skipping what is already there); the directory holding them."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    (enable_progress_bars if progress else disable_progress_bars)()
    files = files_for(modes)
    try:
        path = snapshot_download(repo_id, allow_patterns=files, cache_dir=_cache_dir(),
                                 local_dir=str(local_dir) if local_dir is not None else None,
                                 endpoint=os.environ.get("HF_ENDPOINT") or None, local_files_only=_offline())
    except Exception as exc:   # the hub client's errors are many (HTTP, offline, no cache); all end here
        raise CheckpointError(f"cannot download {repo_id} ({', '.join(modes)}): {_reason(exc)}; check the "
                              "network (or HF_ENDPOINT, HF_HUB_OFFLINE) and run the command again: it resumes") from None
    missing = [f for f in files if not (Path(path) / f).is_file()]
    if missing:
        raise CheckpointError(f"the download of {repo_id} into {path} lacks {', '.join(missing)}: run "
                              f"'{download_command(modes)}' again with the network on")
    return Path(path)


def _reason(exc: BaseException) -> str:
    """The first cause (the refused connection under the hub client's "cannot find the snapshot")."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text if len(text) <= 120 else text[:117] + '...'}"


def cached_snapshot(repo_id: str) -> Path:
    """The newest snapshot of ``repo_id`` (its ``refs/main``) in the local hub cache, without network."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=_cache_dir(), local_files_only=True))
    except Exception as exc:   # not cached (LocalEntryNotFoundError) or a damaged cache entry
        where = _cache_dir() or "the hub cache"
        raise CheckpointError(f"--checkpoint {repo_id}: no such directory, and no hub repo {repo_id} in {where} "
                              f"({type(exc).__name__}): run '{download_command(list(MODE_MODELS))}' (or --mode "
                              "universal|gta|templerun) first, or give the directory holding the weights") from None


def resolve_checkpoint(root: Path, needed: list[str]) -> Path:
    """``root`` as a directory; a hub repo id that is not a directory here becomes its cached snapshot,
    which must hold the ``needed`` files."""
    root = Path(root).expanduser()
    if root.is_dir() or not looks_like_repo_id(str(root)):
        return root
    snapshot = cached_snapshot(str(root))
    missing = [f for f in needed if not (snapshot / f).is_file()]
    if missing:
        raise CheckpointError(f"--checkpoint {root}: the cached snapshot {snapshot} lacks {', '.join(missing)}: "
                              f"run '{download_command(modes_needing(missing))}'")
    return snapshot
