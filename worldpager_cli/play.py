"""``worldpager play``: walk the world live from a browser (``engine.play``).

The same option table as ``generate`` (``engine.settings.options``: model, checkpoint, memory, spill, quota,
positions, save points, presets, environment variables, the config file), plus where to serve
(``--host``, ``--port``, ``--open``), ``--truth`` (the arena model only: the page shows the renderer's
truth beside each frame; any other model is a usage error, exit 2, before anything is read or written)
and ``--from`` (continue a played session live from its last save point). ``--observe`` starts the
session from an observed clip as ``generate``'s does, and an arena session first observes its look
around (``--look-around``); the live inputs follow. The length flags are a cap (default
``DEFAULT_MINUTES``); the session runs until the page's Stop, Ctrl-C or the cap. Human text on stderr
(the URL among it), ``--json``'s summary on stdout.

Exit codes: 0 when the session ends (Stop, Ctrl-C, the cap), 1 bad input (one line; without aiohttp:
``need_web_server``'s line, before anything is read or written), 2 a usage error (``--truth`` of a
model other than the arena's among them), 130 a second Ctrl-C (aborted at once) or
SIGTERM / SIGHUP (stopped after the chunk in hand, as ``generate``). A new session that ends before its
first chunk is in the MP4 (a failed start, a stop before any chunk) leaves no file behind
(``engine.play.run``), so the same command runs again.
"""
from __future__ import annotations

import importlib
import ipaddress
import signal
import webbrowser
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import click

from engine.runtime.cpu_threads import apply_cpu_threads

from engine.runtime.dependencies import BY_MODULE
from engine.errors import ConfigError, InputError
from worldpager_cli.help import SectionedCommand
from worldpager_cli.options import LENGTH_KEYS, chunks_for_length, session_options, session_overlay
from worldpager_cli.run_summary import run_summary, summary_text
from worldpager_cli.streams import keep_going_without_stdout
from worldpager_cli.json_output import json_line

PLAY_SECTIONS = {"host": "Serve", "port": "Serve", "open_browser": "Serve", "truth": "Serve", "parent": "Inputs",
                 "overwrite": "Output", "quiet": "Output", "as_json": "Output"}


@click.command(cls=SectionedCommand, sections=PLAY_SECTIONS, examples=(
    "# the arena model, live in the browser (open the printed URL)",
    "worldpager play --out walk.mp4",
    "# the same, with the renderer's truth beside every frame on the page",
    "worldpager play --truth --out walk.mp4",
    "# MG2 from its weights, memory spilled to a drive, the browser opened for you",
    "worldpager play --checkpoint ~/mg2 --spill /mnt/nvme/wp --out walk.mp4 --open",
    "# go on playing a session that ended (or was killed) from its last save point",
    "worldpager play --from walk.mp4",
))
@session_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on. Anything but loopback lets other machines reach the page (a warning).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to serve on (0: any free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@click.option("--truth", is_flag=True,
              help="The arena model only: show the renderer's true frame at each frame's camera beside it on the page "
                   "(not recorded).")
@click.option("--from", "parent", type=click.Path(path_type=Path),
              help="A played session's MP4: continue it live from its last save point (same files).")
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier run at --out (default: refuse).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing but the URL, errors and warnings (stderr).")
@click.option("--json", "as_json", is_flag=True, help="At the end, print the run's summary as one JSON object on stdout.")
def play(host, port, open_browser, truth, parent, overwrite, quiet, as_json, **opts) -> None:
    """Walk the world live from a browser: keys and mouse steer; recorded, resumable, forkable."""
    serve = Serving(host, port, open_browser, truth)
    need_web_server("worldpager play")
    keep_going_without_stdout()   # the product is the MP4, not what is printed
    _check_host(host)
    if parent is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in opts.items() if v not in (None, ())]
        if given:
            raise ConfigError(f"--from {parent} continues that session with its own settings; {given[0]} "
                              "cannot change them (fork it to go on with others)")
        _continue(parent, serve, quiet, as_json)
        return
    if opts.get("trajectory") is not None:
        raise ConfigError(f"--trajectory {opts['trajectory']}: play takes its inputs live and records them beside "
                          "the MP4; to run a trajectory file, use worldpager generate --trajectory")
    _play(opts, serve, overwrite, quiet, as_json)


@dataclass(frozen=True)
class Serving:
    """Where and how the page is served (``--host``, ``--port``, ``--open``, ``--truth``)."""
    host: str
    port: int
    open_browser: bool
    truth: bool


def check_truth(cfg, truth: bool) -> None:
    """``--truth`` needs a world the renderer knows: the arena model's (a usage error otherwise, exit 2)."""
    from engine.config import ARENA_MODEL

    if truth and cfg.model != ARENA_MODEL:
        raise click.UsageError(f"--truth shows the arena renderer's true frames: it needs --model {ARENA_MODEL} "
                               f"(this session's model is {cfg.model}, whose world has no renderer)")


WEB_SERVER = "aiohttp"
WEB_SERVER_INSTALL = BY_MODULE[WEB_SERVER].fix   # the one pip line of engine.runtime.dependencies


def need_web_server(command: str) -> None:
    """A ``ConfigError`` line naming the install command when the web server (aiohttp) cannot be imported."""
    try:
        importlib.import_module(WEB_SERVER)
    except ImportError as exc:
        missing = exc.name if exc.name and exc.name != WEB_SERVER else None
        why = f"{WEB_SERVER} is not installed" if missing is None else f"{WEB_SERVER} cannot load {missing}"
        raise ConfigError(f"{command} needs its web server ({why}): {WEB_SERVER_INSTALL}") from None


def _check_host(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        click.echo(f"worldpager: warning: --host {host} serves the page beyond this machine: anyone who can "
                   "reach it and has the URL's token can watch, and steer while nobody else does", err=True)


def _play(opts, serve: Serving, overwrite, quiet, as_json) -> None:
    from engine.model.registry import model_spec
    from engine.settings.overlay import resolve_session_config, with_user_config
    from engine.play.run import DEFAULT_MINUTES, play_config
    from engine.session.ownership import check_video_path, claim_output, refuse_existing
    from engine.session.preflight import check_output_paths
    from engine.session.resume import with_absolute_paths

    preset, chunks, seconds, minutes = (opts[k] for k in ("preset", *LENGTH_KEYS))
    flags = session_overlay({**opts, "out": opts["out"] or Path.cwd() / datetime.now().strftime("worldpager-%Y%m%d-%H%M%S.mp4")})
    base = with_user_config()
    spec = model_spec(resolve_session_config(preset, flags, base))
    grid = spec.grid
    if chunks is None and seconds is None and minutes is None:
        minutes = DEFAULT_MINUTES
    n = chunks_for_length(chunks, seconds, minutes, grid.fps, grid.first_frames, grid.frames_per_chunk)
    cfg = with_absolute_paths(resolve_session_config(preset, {**flags, "chunks": n}, base))
    cfg = play_config(cfg)
    check_truth(cfg, serve.truth)
    spec = model_spec(cfg)   # its banner says what this run does: inputs live, no default path
    check_video_path(cfg.out)
    check_output_paths(cfg)
    with claim_output(cfg.out):
        refuse_existing(cfg, overwrite)
        _refuse_recording(cfg.trajectory, overwrite)
        _serve(cfg, spec, serve, quiet, as_json)


def _refuse_recording(path: Path, overwrite: bool) -> None:
    if path.is_dir():
        raise InputError(f"{path} (where the inputs are recorded, beside --out) is a directory; choose another --out")
    if path.exists() and not overwrite:
        raise InputError(f"--out: would overwrite the recording {path}; give --overwrite to replace it, or "
                         "choose another --out")


def _continue(parent: Path, serve: Serving, quiet, as_json) -> None:
    from engine.model.registry import model_spec
    from engine.play.run import recording_path
    from engine.session.ownership import claim_output
    from engine.session.resume import check_present, check_spill, fitting_savepoint, run_config

    with claim_output(parent, "play --from"):
        cfg = run_config(parent, doing="continue")
        check_truth(cfg, serve.truth)
        if cfg.trajectory is None or Path(cfg.trajectory) != recording_path(cfg.out):
            raise InputError(f"cannot continue {parent} live: it was not played live (its inputs are "
                             f"{cfg.trajectory or 'the model default'}); `worldpager fork {parent} --trajectory "
                             "FILE` goes another way from a save point")
        check_present(parent, cfg, "continue")
        sp, notes = fitting_savepoint(parent, cfg, "continue")
        check_spill(parent, cfg, sp, "continue")
        for note in notes:
            click.echo(f"worldpager: {note}", err=True)
        _serve(cfg, model_spec(cfg), serve, quiet, as_json, resume_from=sp)


def _serve(cfg, spec, serve: Serving, quiet, as_json, resume_from=None) -> None:
    from engine.play.run import prepare_play
    from worldpager_cli.progress import make_progress

    say = (lambda text: None) if quiet else (lambda text: click.echo(text, err=True))
    grid = spec.grid
    frames_before = 0 if resume_from is None else resume_from.facts["frames_total"]
    progress = make_progress(total=cfg.chunks, frames_total=grid.frames_total(cfg.chunks), quiet=True)
    run = prepare_play(cfg, spec, serve.host, serve.port, resume_from=resume_from, on_chunk=progress.update,
                       truth=serve.truth)
    try:
        with _interrupt_on_signals():   # nothing made yet: Ctrl-C, SIGTERM and SIGHUP stop the start at once
            say(spec.banner)
            click.echo(f"worldpager: play at {run.url}", err=True)
            where = "" if resume_from is None else f" from chunk {resume_from.chunk}"
            say(f"worldpager: live{where}, at most {cfg.chunks} chunks ({grid.frames_total(cfg.chunks) / grid.fps:.0f} "
                f"s of video); video {cfg.out}, log {cfg.log_path}, inputs recorded to {cfg.trajectory}; Ctrl-C or "
                "Stop ends it")
            for line in run.session.warnings():
                click.echo(f"worldpager: warning: {line}", err=True)
            apply_cpu_threads(cfg, run.session.device)
            run.session.load()
        with _end_on_signals(run):
            if serve.open_browser:
                webbrowser.open(run.url)
            result = run.run()
        empty = run.discard_if_empty(result.status)
    except BaseException:
        run.discard_if_empty()     # a failed start leaves nothing behind (the first error is the one said)
        raise
    finally:
        run.close()
    if as_json:
        summary = run_summary(result, cfg, grid.fps, frames_before)
        click.echo(json_line({**summary, "recording": None if empty else str(cfg.trajectory)}))
    if empty:
        say(f"worldpager: the session ended ({result.status}) before its first chunk: no video, log or "
            "recording written")
        if result.status == "interrupted":
            raise SystemExit(130)
        return
    say(f"wrote {summary_text(result, grid.fps)}")
    observe = "" if cfg.observe is None else f" --observe {cfg.observe}"
    say(f"worldpager: inputs recorded to {cfg.trajectory}: `worldpager generate{observe} --trajectory {cfg.trajectory} "
        f"--chunks {result.chunks}` with the same settings makes this video again (--late-prefetch wait on both: "
        "bit for bit)")
    if result.status == "interrupted":
        raise SystemExit(130)


class _interrupt_on_signals:
    """Ctrl-C, SIGTERM and SIGHUP interrupt (a KeyboardInterrupt: exit 130) — Ctrl-C too, even where the
    process was started with SIGINT ignored (a background job of a script): from the printed URL on, the
    session answers it, and a SIGINT lost before the loop's own handler would leave it waiting for a page."""

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, signal.default_int_handler)
                         for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        return self

    def __exit__(self, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


class _end_on_signals:
    """Ctrl-C ends the session like the page's Stop (done, exit 0); SIGTERM and SIGHUP stop it after the
    chunk in hand (interrupted, 130); a second signal of any of them aborts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, run):
        self.run, self.previous, self.count = run, {}, 0

    def _handler(self, signum, frame) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        if signum == signal.SIGINT:
            self.run.source.finish()
        else:
            self.run.session.request_stop()
        try:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            click.echo(f"\nworldpager: {name}: ending after the chunk in hand ({name} again to abort)", err=True)
        except OSError:
            pass

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handler) for sig in self.SIGNALS}
        return self

    def __exit__(self, exc_type, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        if exc_type is KeyboardInterrupt:
            click.echo("worldpager: interrupted", err=True)
