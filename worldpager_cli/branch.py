"""``worldpager resume`` and ``worldpager fork``: a run that goes on from a save point, as it was or
another way.

Each parses its flags, asks the session for the save point (``engine.session.resume.resume_point``,
``engine.session.fork.prepare_fork``: everything checked before a file is touched), runs the session and
ends as ``generate`` does (``worldpager_cli.run_common``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from worldpager_cli.help import SectionedCommand
from worldpager_cli.options import CheckedNumber
from worldpager_cli.run_common import JSON, OVERWRITE, QUIET, RUN_FLAGS, WEIGHTS, run_and_report, say_to, warn
from worldpager_cli.run_signals import abort_on_signals
from worldpager_cli.streams import keep_going_without_stdout

from engine.config import KV_PAGING_MODES, SessionConfig
from engine.runtime.cpu_threads import apply_cpu_threads


def with_kv_paging(cfg: SessionConfig, kv_paging: str | None) -> SessionConfig:
    """``--kv-paging`` on resume and fork: where the context K/V waits is the device's business (the
    save point's tensors are the same bytes either way), so it may differ from the run's; None keeps it."""
    if kv_paging is None:
        return cfg
    return dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, kv_paging=kv_paging))


KV_PAGING = click.option("--kv-paging", type=click.Choice(KV_PAGING_MODES), default=None,
                         help="Where the context K/V waits while a chunk is computed: chunk (on the device) or "
                              "layer (on the host, one layer's on the device at a time; the same frames). "
                              "Default: as the run had it.")


def run_command(*examples: str, sections: dict | None = None):
    """A run command (generate, resume, fork): sectioned help with ``examples``."""
    return click.command(cls=SectionedCommand, sections={**RUN_FLAGS, **(sections or {})}, examples=examples)


@run_command(
    "# go on with a run that was killed, from its last save point",
    "worldpager resume walk.mp4",
    "# its spill drive is full or failing: go on with the spill directory on another drive",
    "worldpager resume walk.mp4 --spill /mnt/other/walk.spill",
    sections={"out": "Inputs", "spill": "Disk tier", "kv_paging": "Memory"},
)
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--spill", type=click.Path(path_type=Path), metavar="DIR",
              help="Move the run's spill directory to DIR: a copy of it made there is checked and used; into a "
                   "new or empty DIR the chunks the save point needs are copied from the old one while it can "
                   "still be read (left as it was). OUT.config.json then names DIR. Default: the run's own.")
@WEIGHTS
@KV_PAGING
@QUIET
@JSON
def resume(out, spill, weights, kv_paging, quiet, as_json) -> None:
    """Continue a run that was killed or stopped, from its last save point (OUT.mp4.save/)."""
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    from engine.session.ownership import claim_output

    with claim_output(out, "resume"):   # before anything is read: the run's files are ours now
        _resume(out, spill, quiet, as_json, weights, kv_paging)


def _resume(out: Path, spill: Path | None, quiet: bool, as_json: bool, weights: str | None = None,
            kv_paging: str | None = None) -> None:
    from engine.model.registry import model_spec
    from engine.session.loop import Session
    from engine.session.resume import resume_point
    from worldpager_cli.progress import make_progress

    cfg, sp, notes = resume_point(out, spill, weights)   # everything checked before the MP4 is cut
    cfg = with_kv_paging(cfg, kv_paging)
    say = say_to(quiet)
    for note in notes:
        click.echo(f"worldpager: {note}", err=True)
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    with abort_on_signals():
        with Session(cfg, on_chunk=progress.update, resume_from=sp) as session:   # closed if what follows fails
            warn(session.warnings())
            apply_cpu_threads(cfg, session.device)
            session.load()
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: resuming {out} at chunk {sp.chunk} of {cfg.chunks} (frame {sp.facts['frames_total']}); "
        f"log {cfg.log_path}")
    run_and_report(session, progress, grid, say, as_json, cfg, sp.facts["frames_total"])


@run_command(
    "# from walk.mp4's newest save point, turn the other way, into a new file",
    "worldpager fork walk.mp4 --trajectory yaw.yaml --out branch.mp4",
    "# from the save point at chunk 30, 20 chunks long",
    "worldpager fork walk.mp4 --at 30 --chunks 20 --trajectory yaw.yaml --out branch.mp4",
    sections={"at": "Inputs", "trajectory": "Inputs", "out": "Output", "chunks": "Run control",
              "spill": "Disk tier", "kv_paging": "Memory"},
)
@click.argument("parent", type=click.Path(path_type=Path))
@click.option("--at", "at", type=int, help="The parent's save point (a chunk) to start from. Default: its newest.")
@click.option("--trajectory", type=click.Path(path_type=Path), required=True, help="Where the branch goes from there (any trajectory file).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The branch's MP4.")
@click.option("--chunks", type=CheckedNumber(True, 1, False, "chunks"),
              help="The branch's length in chunks, those before the save point included. Default: 30 s of new "
                   "video after the save point (the arena and MG2: its chunk + 40), as generate's default length.")
@click.option("--spill", type=click.Path(path_type=Path), help="The branch's own spill directory. Default: OUT.mp4.spill beside it.")
@WEIGHTS
@KV_PAGING
@OVERWRITE
@QUIET
@JSON
def fork(parent, at, trajectory, out, chunks, spill, weights, kv_paging, overwrite, quiet, as_json) -> None:
    """Start a new run from a save point of PARENT.mp4 that goes another way (PARENT is read, never changed)."""
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    from engine.session.ownership import check_video_path, claim_output

    check_video_path(out)
    with claim_output(out):   # held until the branch's run ends: one writer per output
        _fork(parent, at, trajectory, out, chunks, spill, overwrite, quiet, as_json, weights, kv_paging)


def _fork(parent, at, trajectory, out, chunks, spill, overwrite, quiet, as_json, weights=None, kv_paging=None) -> None:
    from engine.model.registry import model_spec
    from engine.session.loop import Session
    from engine.session.fork import prepare_fork
    from worldpager_cli.progress import make_progress

    branch = prepare_fork(parent, at, trajectory, out, chunks=chunks, spill=spill, overwrite=overwrite,
                          weights=weights)
    branch.cfg = with_kv_paging(branch.cfg, kv_paging)
    cfg, sp = branch.cfg, branch.savepoint
    say = say_to(quiet)
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    try:
        with abort_on_signals():
            session = Session(cfg, on_chunk=progress.update, resume_from=sp, fork_of=branch)
            warn(_branch_warnings(trajectory, cfg, sp))
            apply_cpu_threads(cfg, session.device)
            session.load()
    except BaseException as exc:
        branch.discard(exc)   # the error that brought us here is the one reported
        raise
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: forking {parent} at chunk {sp.chunk} (frame {sp.facts['frames_total']}) into {out}, "
        f"{cfg.chunks} chunks; log {cfg.log_path}")
    run_and_report(session, progress, grid, say, as_json, cfg, sp.facts["frames_total"])


def _branch_warnings(trajectory: Path, cfg, sp) -> list[str]:
    """The lag warning of the file a fork's branch follows from its save point (the branch's own
    trajectory is the spliced actions, which are not tracked), at the branch's video frames."""
    from engine.io.trajectory import load_trajectory
    from engine.model.registry import model_spec

    spec, before = model_spec(cfg), sp.facts["frames_total"]
    after = load_trajectory(trajectory, spec.action_mode, frames=spec.grid.frames_total(cfg.chunks) - before,
                            repeat=cfg.repeat, calibration=cfg.calibration)
    lag = after.lag_warning(offset=before)
    return [] if lag is None else [lag]
