"""Progress display for ``generate``: a tqdm bar on a terminal, plain lines otherwise, or nothing.

Without a TTY (scripts, CI, ``| tee``) a bar's carriage returns are noise, so one plain line is printed
every few chunks instead (about 20 lines per run, at least one per chunk for short runs).
"""
from __future__ import annotations

import sys

import click
from tqdm import tqdm


class BarProgress:
    def __init__(self, total: int, frames_total: int):
        self.total, self.frames_total = total, frames_total
        self.bar: tqdm | None = None
        self.initial = 0

    def skip(self, chunks: int, frames: int) -> None:
        """A resumed run starts with ``chunks`` already made."""
        self.initial = chunks

    def __enter__(self):
        self.bar = tqdm(total=self.total, initial=self.initial, unit="chunk", dynamic_ncols=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, record: dict) -> None:
        self.bar.set_postfix(frames=f"{record['frames_total']}/{self.frames_total}",
                             stall=f"{record['stall_ms']:.0f}ms")
        self.bar.update(1)


class LineProgress:
    def __init__(self, total: int, frames_total: int):
        self.total, self.frames_total = total, frames_total
        self.every = max(1, total // 20)

    def skip(self, chunks: int, frames: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, record: dict) -> None:
        done = record["chunk"] + 1
        if done % self.every == 0 or done == self.total:
            click.echo(f"chunk {done}/{self.total}  frames {record['frames_total']}/{self.frames_total}  "
                       f"{record['wall_ms']:.0f} ms/chunk  stall {record['stall_ms']:.1f} ms  "
                       f"rss {record['rss_bytes'] / 2**30:.2f} GiB", err=True)


class QuietProgress(LineProgress):
    def update(self, record: dict) -> None:
        pass


def make_progress(total: int, frames_total: int, quiet: bool):
    if quiet:
        return QuietProgress(total, frames_total)
    if sys.stderr.isatty():
        return BarProgress(total, frames_total)
    return LineProgress(total, frames_total)
