"""What a model family gives the session before and while it is built: ``ModelSpec`` (known without
reading weights), ``Family`` (the four functions of the session config that the registry dispatches to)
and ``weights_stamp`` (what identifies a weights file's version in a ``ModelCache`` key).

Both the registry and every family import this module; the registry imports no family (it reads them
from a table), so no model family and the registry import each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.facts.layout import KVLayout, VideoGrid

if TYPE_CHECKING:
    from engine.config import SessionConfig


@dataclass(frozen=True)
class ModelSpec:
    """What a model needs from the session and promises it, known before the model is built."""

    name: str
    image_size: tuple[int, int]       # (height, width) the start image is cropped and resized to
    action_mode: str                  # the trajectory's action space (engine.io.actions.KEYBOARD_KEYS)
    grid: VideoGrid
    frame_size: tuple[int, int]       # decoded video (height, width)
    horizon_chunk: int | None         # first chunk past the native time positions; None = unbounded
    default_trajectory: str           # packaged trajectory used without --trajectory
    uses_image: bool                  # False: the model makes its own start (the arena renders it)
    banner: str                       # the first line a command prints about the model
    encoder_preset: str = "veryfast"  # x264 preset: models that make many small frames a second want a faster one
    # what --observe may give it: "render" = a path through its own world (the arena: it also looks
    # around first, engine.session.look_around), "video" = a recorded video with its camera path (MG2)
    observes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """One model family's functions of the session config (``engine.model.registry`` says what each owes).

    ``build(cfg, image, trajectory, device, dtype, cache) -> WorldModel``."""

    spec: Callable[["SessionConfig"], ModelSpec]
    build: Callable[..., Any]
    header_facts: Callable[["SessionConfig"], dict]
    layout: Callable[["SessionConfig"], KVLayout]


def weights_stamp(path: Path | None) -> tuple | None:
    """What identifies a weights file or checkpoint directory's version in a ``ModelCache`` key."""
    if path is None:
        return None
    path = Path(path).expanduser().resolve()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return str(path), tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.exists())
