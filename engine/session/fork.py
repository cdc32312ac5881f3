"""Forking a generation session: ``worldpager fork PARENT.mp4 --at CHUNK --trajectory OTHER --out BRANCH.mp4``.

Owns what a branch needs before the session starts, and nothing of the chunk loop:

* **Where.** ``--at`` must be one of the parent's save points (``<parent>.save/``; omitted: the newest
  intact one), checked against the parent's config like a resume (``engine.session.resume``).
* **Config.** The parent's resolved config with the branch's output, log (beside it), spill directory
  (``--spill``, default ``<branch>.spill/``), length and trajectory; written as ``<branch>.config.json``.
* **Trajectory.** ``<branch>.trajectory.yaml``: the parent's actions for the video frames before the save
  point, then OTHER's (``engine.io.trajectory.splice``), so the camera goes on from where the parent was
  and the branch is an ordinary run of its own config (it can be resumed, and forked again). A parent
  that started from an observed clip (``--observe``) or a look around passes on its whole path: the
  branch's chunks after the fork are generated, whether or not the parent's were observed there (its
  config asks for no look around of its own).
* **Outputs.** The branch's trajectory, config, and copies of the parent's MP4 and log are written
  under hidden staging names beside the branch's (``.NAME.fork``, ``Fork.staging``); the session cuts
  the MP4's copy back to the save point's frames, keeps the log's records before the save point and
  adds a ``fork`` record (``Session(..., resume_from=save point, fork_of=Fork)``); only once its model
  is loaded does ``Fork.commit`` rename them into place (after removing stale save points of an earlier
  run at the same path). A fork killed during set-up leaves no file under the branch's names. Existing
  outputs at the branch's paths are refused unless ``overwrite`` (``engine.session.ownership``), and a
  path of the branch's, final or staged, that is not a regular file (a FIFO, a device, a directory) always
  (``engine.files.output_files``).
* **Memory.** The branch reads the parent's stored chunks before the save point from the parent's spill
  directory read-only (``BaseTier``: no lock, no write) and writes its own to its own directory. The
  layers are recorded in the branch's save points (``base_layers``), so a resumed branch reads them too;
  a branch of a branch reads its parent's layers before its parent's own chunks.

Nothing is written before every check has passed — the parent's video, log, save point (the newest
whose frames the parent's video holds whole) and the spill chunks it needs (``engine.session.resume``);
``Fork.discard()`` removes what was staged when the session cannot start.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from engine.files import probe
from engine.files.cleanup import Cleanup
from engine.config import SessionConfig
from engine.errors import InputError, OutputError
from engine.files.input_files import shown
from engine.io.trajectory import load_trajectory
from engine.io.trajectory.splice import splice_yaml
from engine.memory.disk import INDEX_NAME
from engine.files.durable import fsync_directory
from engine.files.output_files import OutputDriveError, check_output_file, write_failure
from engine.settings.overlay import write_resolved_config
from engine.session.ownership import refuse_existing
from engine.session.savepoint import SavePoint, savepoint_paths
from engine.session.observe import is_video, session_path
from engine.session.resume import (check_present, check_spill, check_weight_format, fitting_savepoint, run_config,
                                   with_absolute_paths)
from engine.session.save import savepoint_dir


@dataclass
class Fork:
    """A prepared branch: its config, the parent's save point it starts from, what it reads and wrote."""

    parent: Path
    cfg: SessionConfig
    savepoint: SavePoint
    base_layers: list[tuple[str, int]]       # read-only spill directories, oldest first: (path, before)
    trajectory: str                          # one line: where the branch's actions come from
    created: list[Path] = field(default_factory=list)   # staged files, in the order they were made
    committed: bool = False

    @staticmethod
    def staging(path: Path) -> Path:
        """Where the branch's file ``path`` is made before the set-up is complete."""
        path = Path(path)
        return path.with_name(f".{path.name}.fork")

    def staged_config(self) -> SessionConfig:
        """The branch's config with its trajectory read from the staged file (the session's set-up)."""
        return dataclasses.replace(self.cfg, trajectory=self.staging(self.cfg.trajectory))

    def commit(self) -> None:
        """The set-up is complete: rename the staged files into place, the MP4 last."""
        assert not self.committed, "a fork is committed once"
        with probe.probing(self.cfg.out, "cannot put the branch in place:"):
            for stale in savepoint_paths(savepoint_dir(self.cfg.out)):   # never resumed into this branch
                stale.unlink()
            for staged in self.created:
                os.replace(staged, _final(staged))
        fsync_directory(Path(self.cfg.out).parent, required=False)
        self.created.clear()
        self.committed = True

    def record(self) -> dict:
        """The fields of the branch log's ``fork`` record."""
        return {"parent": str(self.parent), "chunk": self.savepoint.chunk,
                "frames_total": self.savepoint.facts["frames_total"], "trajectory": self.trajectory,
                "base": [{"spill": d, "before": b} for d, b in self.base_layers]}

    def discard(self, failing: BaseException | None = None) -> None:
        """Remove the branch's staged files (the session could not start); nothing else is touched.
        ``failing``, the error that brought us here, is the one reported (``engine.files.cleanup``)."""
        cleanup = Cleanup(failing)
        for path in reversed(self.created):
            cleanup.run(path.unlink, missing_ok=True)
        self.created.clear()
        cleanup.finish()


def base_layers(resume_from: SavePoint | None, fork_of: Fork | None) -> list[tuple[str, int]]:
    """The read-only spill layers of a session: a new branch's, or those a resumed branch recorded."""
    if fork_of is not None:
        return fork_of.base_layers
    if resume_from is None:
        return []
    return [(layer["spill"], int(layer["before"])) for layer in resume_from.facts.get("memory", {}).get("base", [])]


def fork_savepoint(parent: Path, at: int | None, weights: str | None = None) -> tuple[SessionConfig, SavePoint]:
    """The parent's config and its save point at ``at`` (None: the newest intact one its video holds);
    ``weights``: the ``--weights`` given (it must be the save point's)."""
    cfg = run_config(parent, doing="fork")
    check_present(parent, cfg, "fork")
    directory = savepoint_dir(parent)
    chunks = sorted(int(p.name[len("savepoint-"):-len(".wps")]) for p in savepoint_paths(directory))
    if at is not None and at not in chunks:
        have = ", ".join(map(str, chunks)) if chunks else "none"
        raise InputError(f"cannot fork {parent} at chunk {at}: no save point there; its save points are at "
                         f"chunks: {have} (in {directory}; generate --keep-savepoints N keeps more)")
    sp, _ = fitting_savepoint(parent, cfg, "fork", at)
    check_weight_format(parent, sp, weights or cfg.weights, "fork")
    check_spill(parent, cfg, sp, "fork")
    return cfg, sp


BRANCH_SECONDS = 30.0   # fork's default: this much new video after the save point (generate's default length)


def branch_config(parent_cfg: SessionConfig, out: Path, trajectory: Path, chunks: int | None,
                  spill: Path | None) -> SessionConfig:
    memory = parent_cfg.memory
    if memory.spill is not None:
        own = Path(spill) if spill else out.absolute().with_name(out.name + ".spill")
        memory = dataclasses.replace(memory, spill=own)
    # The branch's trajectory file holds the parent's whole path before the fork (observed part, look
    # around included): its chunks before the fork come from the parent, and every chunk after it is generated.
    cfg = dataclasses.replace(parent_cfg, out=out, log=None, trajectory=trajectory, observe=None, look_around=0,
                              memory=memory,
                              chunks=parent_cfg.chunks if chunks is None else chunks).validate()
    return with_absolute_paths(cfg)


def prepare_fork(parent: Path, at: int | None, other: Path, out: Path, chunks: int | None = None,
                 spill: Path | None = None, overwrite: bool = False, weights: str | None = None) -> Fork:
    """Check everything, then stage the branch's config, trajectory, MP4 and log copies (the caller
    owns ``out``: ``engine.session.ownership.claim_output``)."""
    from engine.model.registry import model_spec

    parent, out = Path(parent), Path(out)
    parent_cfg, sp = fork_savepoint(parent, at, weights)
    if parent_cfg.observe is not None and is_video(Path(parent_cfg.observe)):
        raise InputError(f"cannot fork {parent}: it started from the observed video {parent_cfg.observe}, "
                         "whose frame 0 is its start image; forking such a run is not supported yet "
                         f"(`worldpager resume {parent}` continues it)")
    spec = model_spec(parent_cfg)
    if chunks is None:   # a branch of generate's default length after the fork: 30 s of new video
        chunks = sp.chunk + math.ceil(BRANCH_SECONDS * spec.grid.fps / spec.grid.frames_per_chunk)
    # absolute: the branch may be resumed (and its trajectory read) from another directory
    cfg = branch_config(parent_cfg, out, out.absolute().with_suffix(".trajectory.yaml"), chunks, spill)
    if cfg.chunks <= sp.chunk:
        raise InputError(f"cannot fork {parent} at chunk {sp.chunk} into a run of {cfg.chunks} chunks: "
                         f"give --chunks above {sp.chunk}")
    layers = base_layers(sp, None)
    if parent_cfg.memory.spill is not None:
        layers = layers + [(str(Path(parent_cfg.memory.spill).resolve()), sp.chunk)]
    _check_branch_paths(parent, parent_cfg, cfg, layers)
    refuse_existing(cfg, overwrite)
    frames = sp.facts["frames_total"]
    first = session_path(parent_cfg, spec).trajectory
    second = load_trajectory(other, spec.action_mode, frames=spec.grid.frames_total(cfg.chunks) - frames,
                             repeat=parent_cfg.repeat, calibration=parent_cfg.calibration)
    text = splice_yaml(first, frames, second,
                       comment=f"The trajectory of {out.name}, a fork of {parent} at chunk {sp.chunk}: the\n"
                               f"parent's actions for video frames [0, {frames}), then those of {other}.")
    fork = Fork(parent, cfg, sp, layers, f"{first.source} frames [0, {frames}), then {second.describe()}")
    try:
        _write(fork, text, parent_cfg.log_path)
    except OSError as exc:
        error = OutputDriveError(f"cannot write the branch {shown(out)}: {write_failure(exc)}")
        fork.discard(error)
        raise error from None
    except BaseException as exc:
        fork.discard(exc)
        raise
    return fork


def _check_branch_paths(parent: Path, parent_cfg: SessionConfig, cfg: SessionConfig, layers) -> None:
    def same(a, b) -> bool:
        return Path(a).resolve() == Path(b).resolve()

    pairs = ((cfg.out, parent), (cfg.log_path, parent_cfg.log_path), (cfg.config_path, parent_cfg.config_path),
             (savepoint_dir(cfg.out), savepoint_dir(parent)))
    for mine, theirs in pairs:
        if same(mine, theirs):
            raise OutputError(f"--out {cfg.out}: the branch would overwrite the parent's {theirs}; "
                              f"give the branch another name")
    for directory, _ in layers:
        if not probe.is_file(Path(directory) / INDEX_NAME, f"cannot fork {parent}: its memory's spill index"):
            raise InputError(f"cannot fork {parent}: its memory's spill directory {directory} holds no stored "
                             f"chunks (a relative --spill of the parent is taken from the current directory)")
    if cfg.memory.spill is not None and any(same(cfg.memory.spill, d) for d, _ in layers):
        raise OutputError(f"--spill {cfg.memory.spill} is a spill directory the branch reads from; "
                          f"the branch writes its own chunks elsewhere")
    if not probe.is_dir(cfg.out.parent, f"--out {cfg.out}: directory"):
        raise OutputError(f"--out {cfg.out}: directory {cfg.out.parent} does not exist")
    for final in (cfg.trajectory, cfg.config_path, cfg.log_path, cfg.out):   # what the branch writes
        for path in (final, Fork.staging(final)):
            check_output_file(path, f"--out {cfg.out}: the branch's file", "move it away, or choose another --out")


def _write(fork: Fork, trajectory_text: str, parent_log: Path) -> None:
    """Stage the branch's files (``Fork.commit`` renames them in the order they are listed: MP4 last)."""
    cfg, staged = fork.cfg, fork.staging
    fork.created.append(staged(cfg.trajectory))
    staged(cfg.trajectory).write_text(trajectory_text, encoding="utf-8")
    fork.created.append(staged(cfg.config_path))
    write_resolved_config(cfg, staged(cfg.config_path))
    fork.created.append(staged(cfg.log_path))
    shutil.copyfile(parent_log, staged(cfg.log_path))
    fork.created.append(staged(cfg.out))
    shutil.copyfile(fork.parent, staged(cfg.out))


def _final(staged: Path) -> Path:
    """The branch's name of a staged file (``Fork.staging``'s inverse)."""
    assert staged.name.startswith(".") and staged.name.endswith(".fork"), staged
    return staged.with_name(staged.name[1:-len(".fork")])
