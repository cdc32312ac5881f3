"""``worldpager tail LOG``: follow a session's log and print one compact line per chunk.

Works on a running session (waits for new lines) and on a finished log (prints it and the summary).
Exit codes: 0 the summary line arrived (whatever the session's status); 1 the log is missing, a
directory, not a log, or has a damaged line; 3 the session did not finish — no summary line, and the
writer's process is gone, or nothing new came for ``--idle-timeout`` seconds, or (``--no-follow``) the
log ends there.

Streams: the lines are tail's result, on stdout; notes and errors go to stderr. ``--json`` prints each
log record instead, one compact JSON object per line as the log has it (header, chunk, save point,
resume, fork, note, then the summary): a script reads them as they come and stops at ``"type":
"summary"``; the exit code is the same as without it.

``--plot DIR`` (with ``--plot-every``) is a deprecated alias of ``worldpager report LOG --out DIR
--follow --every N``, the one live report: hidden from the help, it says so on stderr and still works.
"""
from __future__ import annotations

from pathlib import Path


import click

from engine.errors import ConfigError
from engine.files.input_files import shown
from engine.report.live import LiveReport
from engine.runtime.telemetry import LogFollower
from worldpager_cli.errors import EXIT_UNFINISHED
from worldpager_cli.json_output import json_line


def human_bytes(n: float) -> str:
    """A size in the unit that shows it: 14.6 MiB, 1.23 GiB, 512 KiB (never 0.00 GiB for a small pool)."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def chunk_line(record: dict, fps: int) -> str:
    """One compact line (the reader has checked that the fields used here are numbers)."""
    wall = record.get("wall_ms", 0.0)
    rate = record.get("frames", 0) * 1000.0 / wall if wall > 0 else 0.0
    parts = [f"chunk {record.get('chunk', '?'):>5}", f"{rate:5.1f} fps", f"stall {record.get('stall_ms', 0.0):7.1f} ms",
             f"rss {record.get('rss_bytes', 0) / 2**30:6.2f} GiB"]
    if "hits" in record:
        parts.append(f"hit/miss/stale {record['hits']}/{record.get('misses', 0)}/{record.get('stale', 0)}")
    if "pool_used_bytes" in record:
        parts.append(f"pool {human_bytes(record['pool_used_bytes'])}")
    if "disk_bytes_read" in record:
        parts.append(f"disk r/w {record['disk_bytes_read'] / 2**20:.0f}/{record.get('disk_bytes_written', 0) / 2**20:.0f} MiB")
    if "disk_alloc_bytes" in record:   # --spill-max
        parts.append(f"spill {human_bytes(record['disk_alloc_bytes'])}/{human_bytes(record.get('spill_max_bytes', 0))}"
                     f" dropped {record.get('dropped_chunks', 0)}")
    if "kv_bytes_to_device" in record:   # context K/V copied to the device (--kv-paging layer) / held there
        parts.append(f"kv {human_bytes(record['kv_bytes_to_device'])} in, {human_bytes(record.get('kv_device_bytes', 0))} held")
    if "writeback_queue" in record:
        parts.append(f"wb {record['writeback_queue']}")
    if record.get("corrupt_blocks"):
        parts.append(f"corrupt {record['corrupt_blocks']}")
    return "  ".join(parts)


def summary_line(record: dict) -> str:
    stall, rss = record.get("stall_ms", {}), record.get("rss_bytes", {})
    return (f"{record.get('status', '?')}: {record.get('chunks', 0)} chunks, {record.get('frames', 0)} frames "
            f"in {record.get('wall_s', 0.0):.1f} s; stall p50 {stall.get('p50', 0):.1f} / p99 "
            f"{stall.get('p99', 0):.1f} / max {stall.get('max', 0):.1f} ms; rss "
            f"{rss.get('min', 0) / 2**30:.2f}-{rss.get('max', 0) / 2**30:.2f} GiB"
            + (f"; {record['corrupt_blocks']} corrupt disk blocks" if record.get("corrupt_blocks") else "")
            + _quota_text(record.get("quota")))


def _quota_text(quota) -> str:
    """``--spill-max``: the spill directory's size against its quota and what was dropped."""
    if not isinstance(quota, dict):
        return ""
    rate = quota.get("first_choice_rate")
    return (f"; spill {human_bytes(quota.get('disk_alloc_bytes', 0))} of {human_bytes(quota.get('quota_bytes', 0))}, "
            f"{quota.get('dropped', 0)} chunks dropped ({quota.get('dropped_redundant', 0)} redundant, "
            f"{quota.get('dropped_cold', 0)} cold)"
            + (f", first choice kept {rate * 100:.1f} %" if isinstance(rate, (int, float)) else ""))


def unfinished_line(follower: LogFollower, idle_timeout: float | None) -> str:
    """Why the session is taken to be over without its summary line."""
    if follower.ended == "writer-gone" and follower.writer is None:
        why = "no process has it open for writing (its writer exited before its first line)"
    elif follower.ended == "writer-gone":
        why = f"its writer (pid {follower.writer['pid']}) has exited"
    elif follower.ended == "idle":
        why = f"nothing new for {idle_timeout:g} s"
    else:
        assert follower.ended == "eof", follower.ended
        why = "the log ends here (if the session is still running, drop --no-follow to follow it)"
    return (f"worldpager: error: {shown(follower.path)}: the session did not finish: no summary line after "
            f"{follower.lines} lines, {why}; the MP4 holds every chunk logged")


@click.command()
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="Wait for new lines until the session's summary arrives.")
@click.option("--idle-timeout", type=float, default=None,
              help="Give up (exit 3) after this many seconds without a new line. Default: wait while the "
                   "session's process runs.")
@click.option("--json", "as_json", is_flag=True,
              help="Print each log record as one JSON line instead (header, chunks, ..., summary).")
@click.option("--plot", "plot_dir", type=click.Path(path_type=Path), default=None, hidden=True,
              help="Deprecated: use 'worldpager report LOG --out DIR --follow'.")
@click.option("--plot-every", type=int, default=10, hidden=True, help="Deprecated: with --plot, 'report --every'.")
def tail(log: Path, follow: bool, idle_timeout: float | None, as_json: bool, plot_dir: Path | None,
         plot_every: int) -> None:
    """Follow a session log: a compact line per chunk, then the summary (exit 3 if none will come)."""
    if idle_timeout is not None and not idle_timeout > 0:
        raise ConfigError(f"--idle-timeout must be a positive number of seconds, got {idle_timeout}")
    fps = 16
    follower = LogFollower(log)
    live = None
    if plot_dir is not None:
        click.echo(f"worldpager: warning: tail --plot is deprecated: use 'worldpager report {log} --out {plot_dir} "
                   f"--follow --every {plot_every}'", err=True)
        live = LiveReport(log, plot_dir, plot_every)
    if follow and log.stat().st_size == 0:
        click.echo(f"worldpager: {log} is empty so far: waiting for the session's first line", err=True)
    for record in follower.records(follow=follow, idle_timeout_s=idle_timeout):
        kind = record.get("type")
        if kind == "chunk" and live is not None:
            live.chunk_seen()
        if as_json:
            click.echo(json_line(record))
        elif kind == "header":
            cfg = record.get("config", {})
            fps = record.get("model", {}).get("fps", fps)
            click.echo(f"session: model {cfg.get('model')}, {cfg.get('chunks')} chunks, out {cfg.get('out')}")
        elif kind == "chunk":
            click.echo(chunk_line(record, fps))
        elif kind == "summary":
            click.echo(summary_line(record))
        elif kind == "resume":
            click.echo(f"resumed at chunk {record.get('chunk')} (frame {record.get('frames_total')})")
        elif kind == "fork":
            click.echo(f"forked from {record.get('parent')} at chunk {record.get('chunk')} "
                       f"(frame {record.get('frames_total')})")
        elif kind == "drop" and isinstance(record.get("chunks"), list):
            click.echo(f"dropped at chunk {record.get('chunk')} ({record.get('reason')}): {len(record['chunks'])} "
                       f"chunks, {record.get('kept')} kept")
        elif kind == "savepoint" and isinstance(record.get("bytes"), int):
            click.echo(f"save point before chunk {record.get('chunk')}: "
                       + (f"{record['bytes'] / 2**20:.1f} MiB" if "path" in record else f"failed: {record.get('error')}"))
        elif kind == "note":
            click.echo(f"note: {record.get('text')}")
    if follower.cut_at is not None:   # a log cut mid-line: its whole records were read
        click.echo(f"worldpager: warning: {log} ends inside line {follower.cut_at} (cut mid-line: the session was "
                   f"killed while writing it, or the file was cut); read up to line {follower.cut_at - 1}", err=True)
    if live is not None and follower.lines > 0:
        click.echo(f"report: {live.finish().page}", err=True)
    if follower.ended != "summary":
        click.echo(unfinished_line(follower, idle_timeout), err=True)
        raise SystemExit(EXIT_UNFINISHED)
