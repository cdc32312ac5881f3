"""Recorded video clips read back as frames (``--observe clip.mp4``): the probe and the reader.

Owns which files are videos (``VIDEO_SUFFIXES``, ``is_video``), what a session may know of a video
file before its model is built (``probe_clip``: its frame count and frame size, or a one-line
``InputError`` when PyAV cannot decode it) and reading its frames in order (``ClipReader.frames``: RGB uint8 ``[T, H, W, 3]``, as decoded, never resized). Frames are
decoded on demand and only forward; asking for an earlier frame opens the file again, so a session that
resumes inside the clip reads exactly the frames an uninterrupted one read.

PyAV is imported where a file is opened, not with the module: the MG2 family imports this module, and a
model that observes nothing builds and runs where PyAV is not installed (a GPU machine's bare image).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.errors import InputError
from engine.files.input_files import check_input_file

VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".webm", ".avi", ".m4v")


def is_video(path: Path) -> bool:
    """Whether ``path`` names a video file (by its suffix)."""
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


@dataclass(frozen=True)
class ClipInfo:
    """A decodable video's length and frame size."""

    path: Path
    frames: int
    height: int
    width: int


def probe_clip(path: Path) -> ClipInfo:
    """Decode ``path`` once: its frame count and (height, width); one-line ``InputError`` otherwise."""
    import av

    frames, size = 0, None
    check_input_file(path, "--observe", fix="name a video file as --observe")   # a FIFO: refused, not waited on
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"--observe {path}: has no video stream")
            for frame in container.decode(video=0):
                size = size or (frame.height, frame.width)
                frames += 1
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"--observe {path}: not a video PyAV can decode ({_reason(exc)})") from None
    if size is None:
        raise InputError(f"--observe {path}: the video has no frames")
    return ClipInfo(Path(path), frames, *size)


def _reason(exc: Exception) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(text).split()) or type(exc).__name__


class ClipReader:
    """A video's frames in order, decoded on demand (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._container = None
        self._frames = None
        self._next = 0               # index of the next frame the open decoder gives

    def frames(self, start: int, stop: int) -> np.ndarray:
        """Frames ``[start, stop)`` as RGB uint8 ``[stop - start, H, W, 3]``."""
        if start < self._next or self._frames is None:
            self._open()
        out = []
        while self._next < stop:
            try:
                frame = next(self._frames)
            except StopIteration:
                raise InputError(f"--observe {self.path}: the video ends at frame {self._next}, "
                                 f"before frame {stop}") from None
            if self._next >= start:
                out.append(frame.to_ndarray(format="rgb24"))
            self._next += 1
        return np.stack(out)

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
        self._container, self._frames, self._next = None, None, 0

    def _open(self) -> None:
        import av

        self.close()
        self._container = av.open(str(self.path))
        self._frames = self._container.decode(video=0)


def model_frames(rgb: np.ndarray) -> torch.Tensor:
    """RGB uint8 ``[T, H, W, 3]`` -> float32 ``[1, 3, T, H, W]`` in [-1, 1] (``k -> (k / 255 - 0.5) / 0.5``,
    as the start image is mapped)."""
    pixels = torch.from_numpy(np.ascontiguousarray(rgb)).permute(3, 0, 1, 2).unsqueeze(0)
    return (pixels.to(torch.float32) / 255.0 - 0.5) / 0.5
