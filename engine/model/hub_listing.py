"""What a ``worldpager download`` would fetch, before it fetches: files, sizes, destination.

Owns ``remote_files(repo, patterns)`` — the repository files that match a download's allow-patterns
with their sizes, from the hub's metadata (one ``model_info`` request, no file is downloaded), or the
one-line reason the hub could not say (offline, unreachable, an unknown repository) — and
``download_listing(parts, into)``: for every (repository, folder, allow-patterns) part of a download,
each file, its size, where it lands and whether a file of that size is already there (a resumed
download skips it), plus the destination's free space. The hub is asked at most once per repository,
with a short timeout; ``HF_HUB_OFFLINE`` means it is not asked at all.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from engine.model.hub import _offline, _reason

METADATA_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ListedFile:
    repo: str
    name: str                 # the repository path (or the allow-pattern when the hub could not list)
    dest: Path
    size: int | None          # None: unknown (the hub could not be asked)
    present: bool             # a file of this size is already at ``dest``

    def as_json(self) -> dict:
        return {"repo": self.repo, "file": self.name, "dest": str(self.dest), "bytes": self.size,
                "present": self.present}


def remote_files(repo: str, patterns: list[str]) -> dict[str, int | None] | str:
    """{repository path: size} of the files matching ``patterns``, or why the hub could not say."""
    if _offline():
        return "HF_HUB_OFFLINE is set"
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None).model_info(
            repo, files_metadata=True, timeout=METADATA_TIMEOUT_S)
    except Exception as exc:   # the hub client's errors are many (HTTP, DNS, refused); all end here
        return _reason(exc)
    from huggingface_hub.utils import filter_repo_objects   # the download's own matching

    sizes = {s.rfilename: s.size for s in info.siblings or []}
    return {name: sizes[name] for name in filter_repo_objects(list(sizes), allow_patterns=patterns)}


def download_listing(parts: list[tuple[str, Path, list[str]]]) -> tuple[list[ListedFile], list[str]]:
    """(the files of every part, the reasons sizes are unknown) for parts of (repo, folder, patterns)."""
    listed: list[ListedFile] = []
    unknown: list[str] = []
    for repo, folder, patterns in parts:
        found = remote_files(repo, patterns)
        if isinstance(found, str):
            unknown.append(f"{repo}: {found}")
            listed += [ListedFile(repo, p, folder / p, None, False) for p in patterns]
            continue
        for name, size in sorted(found.items()):
            dest = folder / name
            listed.append(ListedFile(repo, name, dest, size, size is not None and _size(dest) == size))
    return listed, unknown


def free_bytes(path: Path) -> int | None:
    """Free bytes on the drive ``path`` is (or would be created) on."""
    here = Path(path).expanduser().absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
