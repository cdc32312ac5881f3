"""``worldpager`` commands: parse flags, build a config, call one engine function, print.

Streams (docs/conventions.md): human text — banners, progress, warnings, the closing line — goes to
stderr; stdout carries results only. ``generate``, ``resume`` and ``fork`` print nothing on stdout unless
``--json`` asks for the run's summary as one JSON object. Commands that measure or describe (``plan``,
``bench``, ``inspect``, ``report``) print a human table and then one compact JSON line last, on stdout.
Exit codes: 0 done, 1 bad input, 2 usage error, 3 ``tail``: the session did not finish, 70 internal
error, 130 interrupted, 141 closed pipe (see ``worldpager_cli.errors``).
"""
from __future__ import annotations

import os
import signal
import sys
from datetime import datetime
from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.config import KV_PAGING_MODES, LINGBOT_MODELS, MODEL_CONFIGS, SessionConfig
from engine.cpu_threads import apply_cpu_threads
from engine.errors import ConfigError, OutputError
from engine.overlay import resolve_session_config, with_user_config
from worldpager_cli.arena import arena, bench_arena, train
from worldpager_cli.batch import batch
from worldpager_cli.bench import bench
from worldpager_cli.bench_keys import bench_keys
from worldpager_cli.bench_play import bench_play
from worldpager_cli.doctor import doctor
from worldpager_cli.download import download
from worldpager_cli.errors import EXIT_INTERRUPTED, WorldPagerGroup
from worldpager_cli.help import SectionedCommand
from worldpager_cli.options import (LENGTH_KEYS, CheckedNumber, chunks_for_length, given,  # noqa: F401
                                    parse_arena_seed, session_options, session_overlay)
from worldpager_cli.plan import plan
from worldpager_cli.play import play
from worldpager_cli.quality import bench_quality
from worldpager_cli.report import report
from worldpager_cli.run_summary import run_summary, summary_text
from worldpager_cli.streams import keep_going_without_stdout, stdout_failure
from worldpager_cli.tail import tail
from worldpager_cli.trajectory import trajectory


@click.group(cls=WorldPagerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="worldpager")
def cli() -> None:
    """WorldPager: long-session interactive world-model video with a tiered KV memory.

    Run 'worldpager COMMAND -h' for a command's options, in sections, with examples.
    """


cli.examples = (
    "# a 2-minute video from the packaged scene and trajectory (arena model, CPU)",
    "worldpager generate --minutes 2 --out walk.mp4",
    "# will a 10-minute MG2 run fit this machine's memory and drive? (nothing is run)",
    "worldpager plan --preset mg2-4090-32g --minutes 10 --spill /mnt/nvme/wp",
    "# watch a running session's report in a browser, redrawn every 10 chunks",
    "worldpager report walk.log.jsonl --out walk-report --follow",
)


cli.add_command(tail)
cli.add_command(bench)
cli.add_command(plan)
cli.add_command(train)
cli.add_command(arena)
cli.add_command(report)
cli.add_command(download)
cli.add_command(batch)
cli.add_command(doctor)
cli.add_command(trajectory)
cli.add_command(play)
bench.add_command(bench_arena)
bench.add_command(bench_quality)
bench.add_command(bench_keys)
bench.add_command(bench_play)


def default_output_path() -> Path:
    return Path.cwd() / datetime.now().strftime("worldpager-%Y%m%d-%H%M%S.mp4")


OVERWRITE = click.option("--overwrite", is_flag=True,
                         help="Replace the outputs of an earlier run at --out (default: refuse).")
QUIET = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors and warnings (stderr).")
JSON = click.option("--json", "as_json", is_flag=True,
                    help="At the end, print the run's summary as one JSON object on stdout (keys: "
                         "docs/conventions.md). Human text stays on stderr.")
RUN_FLAGS = {"overwrite": "Output", "quiet": "Output", "as_json": "Output"}


def run_command(*examples: str, sections: dict | None = None):
    """A run command (generate, resume, fork): sectioned help with ``examples``."""
    return cli.command(cls=SectionedCommand, sections={**RUN_FLAGS, **(sections or {})}, examples=examples)


@run_command(
    "# 12 chunks of the arena model, progress on stderr",
    "worldpager generate --chunks 12 --out walk.mp4",
    "# MG2 from the official weights, 10 minutes, memory past the host pool spilled to an NVMe drive",
    "worldpager generate --checkpoint ~/mg2 --minutes 10 --spill /mnt/nvme/wp --out long.mp4",
    "# a script's view: nothing but one JSON object on stdout",
    "worldpager generate --chunks 12 --out walk.mp4 --quiet --json | jq .s_per_chunk",
)
@session_options
@OVERWRITE
@QUIET
@JSON
def generate(quiet, overwrite, as_json, **opts) -> None:
    """Generate a video from a start image and a trajectory, chunk by chunk, into an MP4."""
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    preset, chunks, seconds, minutes = (opts[k] for k in ("preset", *LENGTH_KEYS))
    flags = session_overlay({**opts, "out": opts["out"] or default_output_path()})
    base = with_user_config()
    resolved = resolve_session_config(preset, flags, base)
    # torch (seconds to import) comes with these: after the flags, the inputs and the config are checked
    from engine.model.registry import model_spec
    from engine.session.ownership import check_video_path, claim_output, refuse_existing
    from engine.session.preflight import check_output_paths
    from engine.session.resume import with_absolute_paths

    spec = model_spec(resolved)
    grid = spec.grid
    n = chunks_for_length(chunks, seconds, minutes, grid.fps, grid.first_frames, grid.frames_per_chunk)
    cfg = with_absolute_paths(resolve_session_config(preset, {**flags, **({"chunks": n} if n is not None else {})}, base))
    check_video_path(cfg.out)
    with claim_output(cfg.out):   # held until the run ends: one writer per output
        check_output_paths(cfg)   # an output on an input or on another output is told as such, first
        refuse_existing(cfg, overwrite)
        _generate(cfg, spec, grid, quiet, as_json)


def _say(quiet: bool):
    """Human text: stderr, or nothing with --quiet."""
    return (lambda text: None) if quiet else (lambda text: click.echo(text, err=True))


def _generate(cfg, spec, grid, quiet: bool, as_json: bool) -> None:
    from engine.session.loop import Session   # keeps `worldpager --help` fast
    from engine.session.resume import unresumable_note
    from worldpager_cli.progress import make_progress

    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    # validates the inputs before any output; a failure before run() removes the outputs it made
    with Session(cfg, on_chunk=progress.update) as session:
        say = _say(quiet)
        say(spec.banner)
        horizon = spec.horizon_chunk
        reach = ("none" if horizon is None else
                 f"chunk {horizon}, {grid.frames_total(horizon) / grid.fps / 60:.1f} min")
        say(f"worldpager: positions {cfg.positions} (native horizon: {reach}); store {cfg.memory.store}, "
            f"int{cfg.memory.kv_bits} KV, k={cfg.memory.retrieve_k}; log {cfg.log_path}")
        # After the first line, which says what the run does; --quiet keeps the lag warning (the video will
        # not be what the file asked) but not the note that the run cannot be resumed (the header has it).
        notes = [] if not quiet else unresumable_note(cfg)
        _warn([w for w in session.warnings() if w not in notes])
        apply_cpu_threads(cfg, session.device)
        with _abort_on_signals():   # nothing generated yet: stop at once, leaving no empty outputs
            session.load()
        _run_and_report(session, progress, grid, say, as_json, cfg, 0)


def with_kv_paging(cfg: SessionConfig, kv_paging: str | None) -> SessionConfig:
    """``--kv-paging`` on resume and fork: where the context K/V waits is the device's business (the
    save point's tensors are the same bytes either way), so it may differ from the run's; None keeps it."""
    import dataclasses

    if kv_paging is None:
        return cfg
    return dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, kv_paging=kv_paging))


KV_PAGING = click.option("--kv-paging", type=click.Choice(KV_PAGING_MODES), default=None,
                         help="Where the context K/V waits while a chunk is computed: chunk (on the device) or "
                              "layer (on the host, one layer's on the device at a time; the same frames). "
                              "Default: as the run had it.")


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
@KV_PAGING
@QUIET
@JSON
def resume(out, spill, kv_paging, quiet, as_json) -> None:
    """Continue a run that was killed or stopped, from its last save point (OUT.mp4.save/)."""
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    from engine.session.ownership import claim_output

    with claim_output(out, "resume"):   # before anything is read: the run's files are ours now
        _resume(out, spill, quiet, as_json, kv_paging)


def _resume(out: Path, spill: Path | None, quiet: bool, as_json: bool, kv_paging: str | None = None) -> None:
    from engine.model.registry import model_spec
    from engine.session.loop import Session
    from engine.session.resume import resume_point
    from worldpager_cli.progress import make_progress

    cfg, sp, notes = resume_point(out, spill)   # everything checked before the MP4 is cut
    cfg = with_kv_paging(cfg, kv_paging)
    say = _say(quiet)
    for note in notes:
        click.echo(f"worldpager: {note}", err=True)
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    with _abort_on_signals():
        with Session(cfg, on_chunk=progress.update, resume_from=sp) as session:   # closed if what follows fails
            _warn(session.warnings())
            apply_cpu_threads(cfg, session.device)
            session.load()
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: resuming {out} at chunk {sp.chunk} of {cfg.chunks} (frame {sp.facts['frames_total']}); "
        f"log {cfg.log_path}")
    _run_and_report(session, progress, grid, say, as_json, cfg, sp.facts["frames_total"])


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
@KV_PAGING
@OVERWRITE
@QUIET
@JSON
def fork(parent, at, trajectory, out, chunks, spill, kv_paging, overwrite, quiet, as_json) -> None:
    """Start a new run from a save point of PARENT.mp4 that goes another way (PARENT is read, never changed)."""
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    from engine.session.ownership import check_video_path, claim_output

    check_video_path(out)
    with claim_output(out):   # held until the branch's run ends: one writer per output
        _fork(parent, at, trajectory, out, chunks, spill, overwrite, quiet, as_json, kv_paging)


def _fork(parent, at, trajectory, out, chunks, spill, overwrite, quiet, as_json, kv_paging=None) -> None:
    from engine.model.registry import model_spec
    from engine.session.loop import Session
    from engine.session.fork import prepare_fork
    from worldpager_cli.progress import make_progress

    branch = prepare_fork(parent, at, trajectory, out, chunks=chunks, spill=spill, overwrite=overwrite)
    branch.cfg = with_kv_paging(branch.cfg, kv_paging)
    cfg, sp = branch.cfg, branch.savepoint
    say = _say(quiet)
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    try:
        with _abort_on_signals():
            session = Session(cfg, on_chunk=progress.update, resume_from=sp, fork_of=branch)
            _warn(_branch_warnings(trajectory, cfg, sp))
            apply_cpu_threads(cfg, session.device)
            session.load()
    except BaseException as exc:
        branch.discard(exc)   # the error that brought us here is the one reported
        raise
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: forking {parent} at chunk {sp.chunk} (frame {sp.facts['frames_total']}) into {out}, "
        f"{cfg.chunks} chunks; log {cfg.log_path}")
    _run_and_report(session, progress, grid, say, as_json, cfg, sp.facts["frames_total"])


def _warn(lines: list[str]) -> None:
    """Warnings go to stderr, also with --quiet (they are not progress)."""
    for line in lines:
        click.echo(f"worldpager: warning: {line}", err=True)


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


def _run_and_report(session, progress, grid, say, as_json: bool, cfg, frames_before: int) -> None:
    """Run, then the closing line (stderr) and, with --json, the summary object (stdout)."""
    with progress, _stop_on_signals(session):
        result = session.run()
    if as_json:   # also for an interrupted run (exit 130): a script learns how far it got
        click.echo(json_line(run_summary(result, cfg, grid.fps, frames_before)))
    # Seconds per chunk over the chunks this run made: a resumed or forked run inherits the others.
    summary = summary_text(result, grid.fps)
    if result.status == "interrupted":
        click.echo(f"worldpager: interrupted after {result.chunks} chunks: wrote {summary}", err=True)
        _warn_stdout_failure()
        raise SystemExit(EXIT_INTERRUPTED)
    say(f"wrote {summary}")
    _warn_stdout_failure()
    if result.savepoint_errors:   # the video is whole, but a crash would have lost more than promised
        raise OutputError(f"{len(result.savepoint_errors)} save point(s) could not be written "
                          f"(last: {result.savepoint_errors[-1]}); the video is complete")


def _warn_stdout_failure() -> None:
    if stdout_failure() is not None:
        _warn([f"standard output failed ({stdout_failure().strerror}): the --json summary was not printed; "
               "the video is whole"])


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _abort_on_signals:
    """SIGTERM and SIGHUP interrupt like Ctrl-C (a KeyboardInterrupt: exit 130)."""

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS[1:]}
        return self

    def __exit__(self, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


class _stop_on_signals:
    """First Ctrl-C, SIGTERM or SIGHUP: finish the chunk in hand, then stop cleanly (exit 130).
    A second one of any of them: interrupt at once — the session closes the MP4 and the log without
    waiting on the drive, and the process exits without waiting for threads still on it."""

    def __init__(self, session):
        self.session = session
        self.previous: dict[int, object] = {}
        self.aborted = False

    def _handler(self, signum, frame) -> None:
        if self.session._stop.is_set():
            self.aborted = True
            raise KeyboardInterrupt
        self.session.request_stop()
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        try:
            click.echo(f"\nworldpager: {name}: stopping after the current chunk ({name} again to abort)", err=True)
        except OSError:   # SIGHUP: the terminal may be gone; the stop is what matters
            pass

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handler) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, exc_type, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        if self.aborted and exc_type is KeyboardInterrupt:
            # The MP4 and the log are closed; what is left are transfer threads that may be blocked on
            # the drive, and the interpreter's teardown would wait for them (or for seconds of freeing).
            click.echo("worldpager: interrupted", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)


@cli.command()
@click.option("--model", "model", type=click.Choice(sorted(MODEL_CONFIGS) + list(LINGBOT_MODELS)),
              help="Model configuration. Default: the preset's model, else mg2-universal.")
@click.option("--preset", help="A preset (presets/NAME.yaml or a YAML file), as generate takes it: its model.")
@json_result
def inspect(model: str | None, preset: str | None) -> None:
    """Print a model's shape facts (no weights are read); the last line is JSON."""
    from engine.model.registry import model_header_facts

    described = sorted(MODEL_CONFIGS) + list(LINGBOT_MODELS)
    if model is None and preset is not None:
        model = resolve_session_config(preset, {}).model
        if model not in described:
            raise ConfigError(f"preset {preset!r} is for the {model} model; inspect describes "
                              f"{', '.join(described)}")
    facts = model_header_facts(SessionConfig(model=model or "mg2-universal"))
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        click.echo(f"{key:<{width}}  {value:,}" if isinstance(value, int) else f"{key:<{width}}  {value}")
    emit_json(json_line(facts))


HELP_OPTION_NAMES = ["-h", "--help"]


def _help_everywhere(command: click.Command) -> None:
    """``-h`` on every command itself, not only inherited from the group's context: click builds a
    command's help option once and keeps it, so a command first run on its own (a script or a test that
    invokes ``generate`` directly) would otherwise keep ``--help`` alone for the life of the process."""
    command.context_settings.setdefault("help_option_names", HELP_OPTION_NAMES)
    for sub in getattr(command, "commands", {}).values():
        _help_everywhere(sub)


_help_everywhere(cli)
