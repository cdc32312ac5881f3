"""A report kept up to date while its session runs (``report --follow``; ``tail --plot``, its deprecated alias).

Owns when to redraw: after every ``every`` new chunk records, but never sooner after the last drawing
than that drawing took, so a reader that draws spends at most half its time drawing and keeps up with
a fast session instead of falling ever further behind. ``finish`` draws the last state once more.
"""
from __future__ import annotations

import time
from pathlib import Path

from engine.errors import ConfigError
from engine.report.write import Report, prepare_out, write_report


class LiveReport:
    def __init__(self, log: Path, out: Path, every: int = 10):
        if every < 1:
            raise ConfigError(f"refresh every N chunks needs N >= 1, got {every}")
        prepare_out(Path(out))
        self.log, self.out, self.every = Path(log), Path(out), every
        self.pending, self.drawn, self.last = 0, 0, None
        self._ready_at = 0.0

    def chunk_seen(self) -> Report | None:
        """Count one chunk record; redraw when due (returns the report then)."""
        self.pending += 1
        if self.pending < self.every or time.monotonic() < self._ready_at:
            return None
        return self.refresh()

    def refresh(self) -> Report:
        start = time.monotonic()
        self.last = write_report([self.log], self.out)
        end = time.monotonic()
        self._ready_at = end + (end - start)
        self.pending, self.drawn = 0, self.drawn + 1
        return self.last

    def finish(self) -> Report:
        """The final drawing (also when nothing new came since the last one: the summary may have)."""
        return self.refresh()
