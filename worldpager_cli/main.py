"""``worldpager`` commands: parse flags, build a config, call one engine function, print.

Commands that measure or describe print a human table and then one compact JSON line last.
Exit codes: 0 done, 1 bad input, 2 internal error, 3 ``tail``: the session did not finish, 130
interrupted (see ``worldpager_cli.errors``).
"""
from __future__ import annotations

import json
import math
import signal
from datetime import datetime
from pathlib import Path

import click

from engine.config import ARENA_MODEL, MODEL_CONFIGS, POSITION_MODES, STORE_MODES, SYNTHETIC_MODEL, model_config
from engine.errors import ConfigError
from engine.overlay import resolve_session_config
from worldpager_cli.arena import bench_arena, train
from worldpager_cli.bench import bench
from worldpager_cli.errors import EXIT_INTERRUPTED, WorldPagerGroup
from worldpager_cli.plan import plan
from worldpager_cli.tail import tail


@click.group(cls=WorldPagerGroup)
@click.version_option(package_name="worldpager")
def cli() -> None:
    """WorldPager: long-session interactive world-model video with a tiered KV memory."""


cli.add_command(tail)
cli.add_command(bench)
cli.add_command(plan)
cli.add_command(train)
bench.add_command(bench_arena)


def chunks_for_length(chunks: int | None, seconds: float | None, minutes: float | None,
                      fps: int, first_chunk_frames: int, chunk_frames: int) -> int | None:
    """Chunks needed for the requested length (None when no length flag was given)."""
    given = [v is not None for v in (chunks, seconds, minutes)]
    if sum(given) > 1:
        raise ConfigError("give only one of --chunks, --seconds, --minutes")
    if chunks is not None:
        if chunks < 1:
            raise ConfigError(f"--chunks must be at least 1, got {chunks}")
        return chunks
    if seconds is None and minutes is None:
        return None
    total_s = seconds if seconds is not None else minutes * 60
    if not math.isfinite(total_s) or total_s <= 0:
        raise ConfigError(f"length must be a positive number of seconds, got {total_s}")
    frames = math.ceil(total_s * fps)
    return 1 + max(0, math.ceil((frames - first_chunk_frames) / chunk_frames))


def parse_arena_seed(text: str) -> int:
    """``--arena-seed``: a non-negative integer (one-line error naming the value otherwise)."""
    value = text.strip()
    if not value.isdigit():
        raise ConfigError(f"--arena-seed must be a non-negative integer, got {text!r}")
    return int(value)


def default_output_path() -> Path:
    return Path.cwd() / datetime.now().strftime("worldpager-%Y%m%d-%H%M%S.mp4")


def given(**values) -> dict:
    """Only the flags the user gave (None = not given), as a config overlay."""
    return {k: v for k, v in values.items() if v is not None}


MEMORY_OPTIONS = [
    click.option("--store", type=click.Choice(STORE_MODES), help="Store mode. Default: prefetch."),
    click.option("--spill", type=click.Path(path_type=Path), help="Directory of the disk tier (O_DIRECT). Default: none."),
    click.option("--host-mem", type=float, help="Host memory budget in GiB (the pool is this minus the process and 2 GiB)."),
    click.option("--pool-slots", type=int, help="Exact host-pool size in chunks (overrides --host-mem)."),
    click.option("--device-mem", type=float, help="Device memory budget for KV in GiB (device-only mode)."),
    click.option("--kv-bits", type=click.Choice(["2", "4", "8", "16"]), help="Stored KV format (16 = unquantised). Default: 4."),
    click.option("--drive-bw", help="Emulated drive bandwidth in GB/s: 0.25, or r=0.5,w=0.5."),
    click.option("--retrieve-k", type=int, help="Past chunks retrieved per chunk. Default: 3."),
    click.option("--sink/--no-sink", default=None, help="Keep the first chunk resident as an attention sink."),
    click.option("--positions", type=click.Choice(POSITION_MODES), help="Position handling past the horizon. Default: rerotate."),
    click.option("--chunk-ms", type=float, help="Synthetic model: device time per chunk. Default: 1200."),
    click.option("--kv-scale", type=float, help="Synthetic model: KV bytes relative to MG2. Default: 1."),
]


def memory_options(func):
    for option in reversed(MEMORY_OPTIONS):
        func = option(func)
    return func


def memory_flags(store, spill, host_mem, pool_slots, device_mem, kv_bits, drive_bw, retrieve_k, sink) -> dict:
    return given(store=store, spill=spill, host_mem_gib=host_mem, pool_slots=pool_slots, device_mem_gib=device_mem,
                 kv_bits=None if kv_bits is None else int(kv_bits), drive_bw=drive_bw,
                 retrieve_k=retrieve_k, sink=sink)


@cli.command()
@click.option("--preset", help="Preset name (presets/NAME.yaml) or a YAML file; flags override it.")
@click.option("--image", type=click.Path(path_type=Path), help="Start image (PNG/JPEG/WebP). Default: the packaged scene.")
@click.option("--trajectory", type=click.Path(path_type=Path), help="Trajectory file (YAML, pose CSV, action CSV, nerfstudio JSON). Default: the packaged revisit_loop.")
@click.option("--repeat", type=click.Choice(["loop", "pingpong"]), help="How a short trajectory is extended. Default: loop.")
@click.option("--out", type=click.Path(path_type=Path), help="Output MP4. Default: worldpager-DATE-TIME.mp4 here.")
@click.option("--log", type=click.Path(path_type=Path), help="JSON Lines log. Default: beside the MP4 (.log.jsonl).")
@click.option("--chunks", type=int, help="Length in chunks (12 video frames each; the first has 9).")
@click.option("--seconds", type=float, help="Length in seconds of video (16 fps). Default: 30.")
@click.option("--minutes", type=float, help="Length in minutes of video (16 fps).")
@click.option("--checkpoint", type=click.Path(path_type=Path), help="Directory with the official MG2 weights (implies --model mg2-universal).")
@click.option("--model", "model_name", type=click.Choice([ARENA_MODEL] + sorted(MODEL_CONFIGS) + [SYNTHETIC_MODEL]), help="Model. Default: arena (our own world model), or mg2-universal with --checkpoint. tiny/micro: MG2's architecture with seeded weights; synthetic: real KV bytes, no math.")
@click.option("--arena-seed", help="Arena model: which procedural world (a non-negative integer). Default: 1000017.")
@click.option("--arena-weights", type=click.Path(path_type=Path), help="Arena model: weights file. Default: the packaged ones.")
@click.option("--seed", type=int, help="Seed of the noise. Default: 0.")
@click.option("--device", help="auto, cpu, cuda or cuda:N. Default: auto.")
@click.option("--save-every", type=int, help="Save point every N chunks (0: none). Default: about every 30 s of wall time.")
@click.option("--keep-savepoints", type=int, help="Newest save points kept (where the run can be resumed or forked). Default: 2.")
@click.option("--io-deadline", type=float, help="Seconds a synchronous read or a write-back may take before the drive counts as stuck. Default: 30.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
@memory_options
def generate(preset, image, trajectory, repeat, out, log, chunks, seconds, minutes, checkpoint, model_name,
             arena_seed, arena_weights, seed, device, save_every, keep_savepoints, io_deadline, quiet, store, spill, host_mem, pool_slots, device_mem,
             kv_bits, drive_bw, retrieve_k, sink, positions, chunk_ms, kv_scale) -> None:
    """Generate a video from a start image and a trajectory, chunk by chunk, into an MP4."""
    from engine.model.registry import model_spec
    from engine.session import Session   # keeps `worldpager --help` fast
    from worldpager_cli.progress import make_progress

    flags = given(image=image, out=out or default_output_path(), log=log, trajectory=trajectory,
                  repeat=repeat, checkpoint=checkpoint, model=model_name, seed=seed, device=device,
                  positions=positions, chunk_ms=chunk_ms, kv_scale=kv_scale,
                  arena_seed=None if arena_seed is None else parse_arena_seed(arena_seed),
                  arena_weights=arena_weights, save_every=save_every, keep_savepoints=keep_savepoints)
    mem = memory_flags(store, spill, host_mem, pool_slots, device_mem, kv_bits, drive_bw, retrieve_k, sink)
    if io_deadline is not None:
        mem["io_deadline_s"] = io_deadline
    if mem:
        flags["memory"] = mem
    if checkpoint is not None and model_name is None and preset is None:
        flags["model"] = "mg2-universal"
    spec = model_spec(resolve_session_config(preset, flags))
    grid = spec.grid
    n = chunks_for_length(chunks, seconds, minutes, grid.fps, grid.first_frames, grid.frames_per_chunk)
    cfg = resolve_session_config(preset, {**flags, **({"chunks": n} if n is not None else {})})
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    session = Session(cfg, on_chunk=progress.update)   # validates the inputs before any output
    say = (lambda text: None) if quiet else click.echo
    say(spec.banner)
    horizon = spec.horizon_chunk
    reach = ("none" if horizon is None else
             f"chunk {horizon}, {grid.frames_total(horizon) / grid.fps / 60:.1f} min")
    say(f"worldpager: positions {cfg.positions} (native horizon: {reach}); store {cfg.memory.store}, "
        f"int{cfg.memory.kv_bits} KV, k={cfg.memory.retrieve_k}; log {cfg.log_path}")
    with _abort_on_signals():   # nothing generated yet: stop at once, leaving no empty outputs
        session.load()
    _run_and_report(session, progress, grid, say)


@cli.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def resume(out, quiet) -> None:
    """Continue a run that was killed or stopped, from its last save point (OUT.mp4.save/)."""
    from engine.model.registry import model_spec
    from engine.session import Session
    from engine.session_resume import resume_point
    from worldpager_cli.progress import make_progress

    cfg, sp, notes = resume_point(out)
    say = (lambda text: None) if quiet else click.echo
    for note in notes:
        click.echo(f"worldpager: {note}", err=True)
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    with _abort_on_signals():
        session = Session(cfg, on_chunk=progress.update, resume_from=sp)
        session.load()
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: resuming {out} at chunk {sp.chunk} of {cfg.chunks} (frame {sp.facts['frames_total']}); "
        f"log {cfg.log_path}")
    _run_and_report(session, progress, grid, say)


@cli.command()
@click.argument("parent", type=click.Path(path_type=Path))
@click.option("--at", "at", type=int, help="The parent's save point (a chunk) to start from. Default: its newest.")
@click.option("--trajectory", type=click.Path(path_type=Path), required=True, help="Where the branch goes from there (any trajectory file).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The branch's MP4.")
@click.option("--chunks", type=int, help="The branch's length in chunks. Default: the parent's.")
@click.option("--spill", type=click.Path(path_type=Path), help="The branch's own spill directory. Default: OUT.mp4.spill beside it.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors.")
def fork(parent, at, trajectory, out, chunks, spill, quiet) -> None:
    """Start a new run from a save point of PARENT.mp4 that goes another way (PARENT is read, never changed)."""
    from engine.model.registry import model_spec
    from engine.session import Session
    from engine.session_fork import prepare_fork
    from worldpager_cli.progress import make_progress

    if chunks is not None and chunks < 1:
        raise ConfigError(f"--chunks must be at least 1, got {chunks}")
    branch = prepare_fork(parent, at, trajectory, out, chunks=chunks, spill=spill)
    cfg, sp = branch.cfg, branch.savepoint
    say = (lambda text: None) if quiet else click.echo
    grid = model_spec(cfg).grid
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=quiet)
    try:
        with _abort_on_signals():
            session = Session(cfg, on_chunk=progress.update, resume_from=sp, fork_of=branch)
            session.load()
    except BaseException:
        branch.discard()
        raise
    progress.skip(sp.chunk, sp.facts["frames_total"])
    say(f"worldpager: forking {parent} at chunk {sp.chunk} (frame {sp.facts['frames_total']}) into {out}, "
        f"{cfg.chunks} chunks; log {cfg.log_path}")
    _run_and_report(session, progress, grid, say)


def _run_and_report(session, progress, grid, say) -> None:
    with progress, _stop_on_signals(session):
        result = session.run()
    summary = (f"{result.frames} frames ({result.frames / grid.fps:.1f} s of video) to {result.out} in "
               f"{result.wall_s:.1f} s ({result.wall_s / max(result.chunks, 1):.2f} s per chunk); log {result.log}")
    if result.status == "interrupted":
        click.echo(f"worldpager: interrupted after {result.chunks} chunks: wrote {summary}", err=True)
        raise SystemExit(EXIT_INTERRUPTED)
    say(f"wrote {summary}")


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
    A second one of any of them: interrupt at once."""

    def __init__(self, session):
        self.session = session
        self.previous: dict[int, object] = {}

    def _handler(self, signum, frame) -> None:
        if self.session._stop.is_set():
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

    def __exit__(self, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


@cli.command()
@click.option("--preset", "name", default="mg2-universal", show_default=True,
              type=click.Choice(sorted(MODEL_CONFIGS)), help="Model configuration.")
def inspect(name: str) -> None:
    """Print a model's shape facts; the last line is JSON."""
    from engine.model.facts import model_facts

    facts = model_facts(model_config(name))
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        click.echo(f"{key:<{width}}  {value:,}" if isinstance(value, int) else f"{key:<{width}}  {value}")
    click.echo(json.dumps(facts, separators=(",", ":")))
