"""``worldpager`` commands: parse flags, build a config, call one engine function, print.

Streams (docs/conventions.md): human text — banners, progress, warnings, the closing line — goes to
stderr; stdout carries results only. ``generate``, ``resume`` and ``fork`` print nothing on stdout unless
``--json`` asks for the run's summary as one JSON object. Commands that measure or describe (``plan``,
``bench``, ``inspect``, ``report``) print a human table and then one compact JSON line last, on stdout.
Exit codes: 0 done, 1 bad input, 2 usage error, 3 ``tail``: the session did not finish, 70 internal
error, 130 interrupted, 141 closed pipe (see ``worldpager_cli.errors``).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from engine.runtime.cpu_threads import apply_cpu_threads
from engine.settings.overlay import resolve_session_config, with_user_config
from worldpager_cli.arena import arena, bench_arena, train
from worldpager_cli.batch import batch
from worldpager_cli.bench import bench
from worldpager_cli.bench_keys import bench_keys
from worldpager_cli.bench_play import bench_play
from worldpager_cli.branch import fork, resume, run_command
from worldpager_cli.doctor import doctor
from worldpager_cli.download import download
from worldpager_cli.errors import WorldPagerGroup
from worldpager_cli.inspect import inspect
from worldpager_cli.options import LENGTH_KEYS, chunks_for_length, session_options, session_overlay  # noqa: F401
from worldpager_cli.plan import plan
from worldpager_cli.play import play
from worldpager_cli.quality import bench_quality
from worldpager_cli.report import report
from worldpager_cli.run_common import JSON, OVERWRITE, QUIET, run_and_report, say_to, warn
from worldpager_cli.run_signals import abort_on_signals
from worldpager_cli.streams import keep_going_without_stdout
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
cli.add_command(resume)
cli.add_command(fork)
cli.add_command(inspect)
bench.add_command(bench_arena)
bench.add_command(bench_quality)
bench.add_command(bench_keys)
bench.add_command(bench_play)


def default_output_path() -> Path:
    return Path.cwd() / datetime.now().strftime("worldpager-%Y%m%d-%H%M%S.mp4")


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


def _generate(cfg, spec, grid, quiet: bool, as_json: bool) -> None:
    from engine.session.loop import Session   # keeps `worldpager --help` fast
    from engine.session.resume import unresumable_note
    from worldpager_cli.progress import make_progress

    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    # validates the inputs before any output; a failure before run() removes the outputs it made
    with Session(cfg, on_chunk=progress.update) as session:
        say = say_to(quiet)
        say(spec.banner)
        horizon = spec.horizon_chunk
        reach = ("none" if horizon is None else
                 f"chunk {horizon}, {grid.frames_total(horizon) / grid.fps / 60:.1f} min")
        say(f"worldpager: positions {cfg.positions} (native horizon: {reach}); store {cfg.memory.store}, "
            f"int{cfg.memory.kv_bits} KV, k={cfg.memory.retrieve_k}; log {cfg.log_path}")
        # After the first line, which says what the run does; --quiet keeps the lag warning (the video will
        # not be what the file asked) but not the note that the run cannot be resumed (the header has it).
        notes = [] if not quiet else unresumable_note(cfg)
        warn([w for w in session.warnings() if w not in notes])
        apply_cpu_threads(cfg, session.device)
        with abort_on_signals():   # nothing generated yet: stop at once, leaving no empty outputs
            session.load()
        run_and_report(session, progress, grid, say, as_json, cfg, 0)


HELP_OPTION_NAMES = ["-h", "--help"]


def _help_everywhere(command: click.Command) -> None:
    """``-h`` on every command itself, not only inherited from the group's context: click builds a
    command's help option once and keeps it, so a command first run on its own (a script or a test that
    invokes ``generate`` directly) would otherwise keep ``--help`` alone for the life of the process."""
    command.context_settings.setdefault("help_option_names", HELP_OPTION_NAMES)
    for sub in getattr(command, "commands", {}).values():
        _help_everywhere(sub)


cli.add_command(generate)
_help_everywhere(cli)
