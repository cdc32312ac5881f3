"""The camera of a logged arena session: for every video frame it wrote, the pose its model used.

Owns rebuilding that path from the session's log (``engine.report.read``) and what the log names:

* **Config.** The header's resolved config (rebuilt as ``engine.session.resume`` rebuilds one from a
  config file); a session of another model is refused.
* **Path.** The session's trajectory loaded as the session loads it (``engine.session.observe
  .session_path``: its frames, the model's action space, ``repeat``, ``calibration``, an observed clip),
  walked through the world by the arena pipeline's own camera code (``ArenaPipeline``:
  ``Arena.clamp_path`` then ``make_poses``), built around a weightless (meta-device) network.
* **Frames.** Those the log says are in the MP4: the summary's ``frames``, else the chunk records'
  (a killed run's camera is that of what it wrote).
* **Forks.** A fork's log starts as its parent's copy, then a ``fork`` record: the frames before it
  were made by the parent, those after by the branch, each along its own config's path (the parent's
  in the header, or a parent branch's ``<branch>.config.json``; the branch's own beside the log). The
  camera is the parent's up to the fork frame and the branch's after it, which is exact; a fork whose
  config cannot be read is refused.

Errors are one line naming the log: missing or not a session log, another model's session, no frames,
a trajectory, observed clip or weights file that no longer exists, weights whose shape is not the one
the header records. (The log records no digest of the trajectory file: one edited in place since the
session gives the truth of the edited path.)
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.model import ArenaDiT
from engine.arena.pipeline import ArenaPipeline
from engine.arena.weights import config_of, packaged_weights_path
from engine.arena.world import Arena
from engine.config import ARENA_MODEL, SessionConfig
from engine.errors import ConfigError, InputError
from engine.model.registry import ModelSpec, model_header_facts, model_spec
from engine.settings.overlay import resolve_session_config
from engine.report.read import SessionRecords, read_session
from engine.session.observe import session_path
from engine.session.resume import run_config

LOG_SUFFIX = ".log.jsonl"     # a session's log beside its MP4 (``SessionConfig.log_path``)


@dataclass(frozen=True)
class SessionCamera:
    """What the truth of a session needs: its world, its model's shape and the poses of its frames."""

    log: Path
    arena_seed: int
    weights: Path
    model: ArenaModelConfig          # the shape of the session's model (frame size, upscale, grid)
    spec: ModelSpec                  # the session's model spec (grid, encoder preset)
    poses: np.ndarray                # [frames, 7] per video frame written, clamped at walls
    own_files: tuple[tuple[Path, str], ...]   # (path, "MP4" | "log" | "config") of the sessions' files

    @property
    def frames(self) -> int:
        return len(self.poses)


def session_camera(log: Path) -> SessionCamera:
    """The camera of the session that wrote ``log`` (see the module docstring)."""
    log = Path(log)
    records = read_session(log)
    root = _header_config(log, records)
    frames = frames_written(records)
    if frames == 0:
        raise InputError(f"{log}: the session wrote no frames yet: there is no truth to render")
    weights, m = _weights(log, records, root)
    spec = model_spec(dataclasses.replace(root, arena_weights=weights))
    runs = _runs(log, records, root)
    arena = Arena.generate(root.arena_seed)
    poses = _stitched(log, runs, frames, lambda cfg: run_camera(log, cfg, spec, m, arena, weights))
    own = _own_files(log, [cfg for _, cfg in runs])
    return SessionCamera(log, root.arena_seed, weights, m, spec, poses, own)


def _stitched(log: Path, runs: list[tuple[int, SessionConfig]], frames: int, camera) -> np.ndarray:
    """Frames [0, ``frames``) of the runs' cameras, each from its first frame to the next run's."""
    pieces = []
    for i, (start, cfg) in enumerate(runs):
        stop = min(runs[i + 1][0] if i + 1 < len(runs) else frames, frames)
        if start >= stop:
            break
        poses = camera(cfg)
        if len(poses) < stop:
            raise InputError(f"cannot render the truth of {log}: its log holds {stop} frames of a run whose "
                             f"path is {len(poses)} frames")
        pieces.append(poses[start:stop])
    return np.concatenate(pieces)


def frames_written(records: SessionRecords) -> int:
    """Video frames in the session's MP4: the summary's count, else the chunk records' (a killed run)."""
    if records.summary is not None and isinstance(records.summary.get("frames"), int):
        return records.summary["frames"]
    return sum(int(r.get("frames", 0)) for r in records.chunks)


def run_camera(log: Path, cfg: SessionConfig, spec: ModelSpec, m: ArenaModelConfig, arena: Arena,
               weights: Path) -> np.ndarray:
    """The clamped per-video-frame poses ``[T, 7]`` of a session of ``cfg``, as its pipeline has them."""
    for what, path in (("trajectory", cfg.trajectory), ("observed clip", cfg.observe)):
        if path is not None and not Path(path).is_file():
            raise InputError(f"cannot render the truth of {log}: its {what} {path} no longer exists")
    trajectory = session_path(cfg, spec).trajectory
    with torch.device("meta"):   # the pipeline's camera needs the network's shape, not its weights
        net = ArenaDiT(m)
    pipeline = ArenaPipeline(net, arena, trajectory, cfg.seed, cfg.positions, torch.device("cpu"),
                             torch.float32, weights=str(weights))
    return pipeline.camera_poses()


def _header_config(log: Path, records: SessionRecords) -> SessionConfig:
    model = records.config.get("model")
    if model != ARENA_MODEL:
        raise InputError(f"{log} is a session of {model}; truth is rendered for the arena model only")
    try:
        # a session from before the look around (engine.session.look_around) had none
        return resolve_session_config(None, {"look_around": 0, **records.config})
    except ConfigError as exc:
        raise InputError(f"cannot render the truth of {log}: its header's config is not valid ({exc})") from None


def _weights(log: Path, records: SessionRecords, cfg: SessionConfig) -> tuple[Path, ArenaModelConfig]:
    """The weights file the session ran and its model config, checked against the header's facts."""
    named = records.header.get("weights")
    path = Path(named) if isinstance(named, str) else (cfg.arena_weights or packaged_weights_path())
    if not path.is_file():
        raise InputError(f"cannot render the truth of {log}: its arena weights {path} no longer exist")
    m = config_of(path)
    facts = json.loads(json.dumps(model_header_facts(dataclasses.replace(cfg, arena_weights=path))))
    logged = records.header.get("model", {})
    for key in sorted(set(facts) & set(logged)):
        if facts[key] != logged[key]:
            raise InputError(f"cannot render the truth of {log}: its arena weights {path} are not the "
                             f"session's any more ({key} {facts[key]} now, {logged[key]} in the log)")
    return path, m


def _runs(log: Path, records: SessionRecords, root: SessionConfig) -> list[tuple[int, SessionConfig]]:
    """(first video frame, config) of each run whose frames are in the MP4: the session, or the parents
    of a fork and the branch."""
    forks = [r for r in records.events if r.get("type") == "fork"]
    runs = [(0, root)]
    for i, fork in enumerate(forks):
        start = fork.get("frames_total")
        if not isinstance(start, int) or start <= runs[-1][0]:
            raise InputError(f"cannot render the truth of {log}: its fork record {i + 1} has no usable "
                             f"frames_total ({start!r})")
        made_by = Path(forks[i + 1]["parent"]) if i + 1 < len(forks) else _branch_video(log)
        cfg = _branch_config(log, made_by, start)
        if cfg.model != ARENA_MODEL or cfg.arena_seed != root.arena_seed:
            raise InputError(f"cannot render the truth of {log}: the branch {made_by} runs model {cfg.model} "
                             f"in arena {cfg.arena_seed}, its parent model {root.model} in arena {root.arena_seed}")
        runs.append((start, cfg))
    return runs


def _branch_video(log: Path) -> Path:
    """The MP4 of a fork's own log (a branch's log is always beside its MP4)."""
    if not log.name.endswith(LOG_SUFFIX):
        raise InputError(f"cannot render the truth of {log} exactly: it is a fork's log, and its branch's "
                         f"config cannot be found without the name <branch>{LOG_SUFFIX}")
    return log.with_name(log.name[:-len(LOG_SUFFIX)] + ".mp4")


def _branch_config(log: Path, video: Path, start: int) -> SessionConfig:
    """The config of the branch ``video`` whose frames from ``start`` on are in the log's MP4."""
    path = video.with_suffix(".config.json")
    if not path.is_file():
        raise InputError(f"cannot render the truth of {log} exactly: it is a fork, and the config of the run "
                         f"that made its frames from {start} on ({path}) is missing")
    return run_config(video, doing="render the truth of")


def _own_files(log: Path, configs: list[SessionConfig]) -> tuple[tuple[Path, str], ...]:
    """The sessions' MP4s, logs and configs (the last MP4 also as the one beside the log)."""
    files = [(log, "log")]
    for cfg in configs:
        files += [(Path(cfg.out), "MP4"), (cfg.log_path, "log"), (cfg.config_path, "config")]
    if configs[-1].log is None:
        files.append((log.with_name(Path(configs[-1].out).name), "MP4"))
    return tuple(files)
