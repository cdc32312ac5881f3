"""Progress display for ``generate``: a tqdm bar over chunks."""
from __future__ import annotations

from tqdm import tqdm


class ChunkProgress:
    def __init__(self, total: int, frames_total: int, fps: int):
        self.total, self.frames_total, self.fps = total, frames_total, fps
        self.bar: tqdm | None = None

    def __enter__(self) -> "ChunkProgress":
        self.bar = tqdm(total=self.total, unit="chunk", dynamic_ncols=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, report) -> None:
        assert self.bar is not None
        self.bar.set_postfix(frames=f"{report.frames_total}/{self.frames_total}",
                             ms=f"{report.wall_ms:.0f}")
        self.bar.update(1)
