"""Streaming MP4 output: the one place that turns decoded frames into an H.264 file.

Owns the container and codec settings (libx264, yuv420p, fragmented MP4), the conversion of the frame
layouts the engine produces into RGB uint8, and the check that an output path is writable. Knows nothing
about chunks, models or memory tiers: the session hands it frames and it appends them.

Kill safety: the file is a *fragmented* MP4 (``frag_keyframe+empty_moov+default_base_moof``) with a
keyframe every ``fps`` frames, and packets are flushed to the OS as they are muxed. Each keyframe closes
a self-contained fragment, so a process killed mid-run leaves a playable file that lacks only the open
fragment plus the encoder's lookahead (roughly one to two seconds of video). The encoder runs on one
thread, in the caller's: the packets of a frame are muxed before ``write`` returns or are held only by
the lookahead, and the same frames give the same bytes.

Frame layouts accepted by :meth:`VideoWriter.write` (numpy array or torch tensor):

* ``uint8`` ``[T, H, W, 3]`` RGB, written as is;
* floating ``[T, 3, H, W]`` in [-1, 1] (the VAE decoder's output), converted to uint8 as
  ``round((clamp(x, -1, 1) + 1) * 127.5)``.

Odd sizes: H.264 in yuv420p needs even width and height, so an odd dimension is padded by one row or
column that repeats the last one (edge padding). The file's size is then ``encoded_width`` x
``encoded_height``; the caller's content is untouched in the top-left corner.
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Union

import av
import numpy as np
import torch

from engine.errors import ConfigError, InputError, OutputError

Frames = Union[np.ndarray, torch.Tensor]

# x264's named presets; anything else makes avcodec_open2 fail with an opaque message.
X264_PRESETS = (
    "ultrafast", "superfast", "veryfast", "faster", "fast",
    "medium", "slow", "slower", "veryslow", "placebo",
)
FRAGMENTED_MOVFLAGS = "frag_keyframe+empty_moov+default_base_moof"


class VideoWriter:
    """Append RGB frames to a fragmented H.264 MP4 as they are produced.

    Args:
        path: output file (``.mp4``); its directory must exist and be writable.
        width, height: frame size of the frames passed to :meth:`write`.
        fps: frames per second (also the keyframe interval, so one fragment per second).
        crf: x264 constant rate factor, 0 (lossless) to 51; 18 is visually near-lossless.
        preset: x264 speed preset, e.g. ``"veryfast"``.

    Raises:
        OutputError: the path cannot be written (missing directory, directory path, no permission).
        ConfigError: crf, preset, fps or size out of range.
    """

    def __init__(self, path: Union[str, os.PathLike], width: int, height: int, fps: int,
                 crf: int = 18, preset: str = "veryfast") -> None:
        _check_settings(width, height, fps, crf, preset)
        self.path = Path(path)
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        # yuv420p subsamples chroma 2x2, so libx264 rejects odd sizes: round up and edge-pad.
        self.encoded_width = self.width + self.width % 2
        self.encoded_height = self.height + self.height % 2
        self._frames_written = 0
        self._closed = False
        _check_writable(self.path)
        self._container, self._stream = self._open(crf, preset)

    def _open(self, crf: int, preset: str) -> tuple[av.container.OutputContainer, av.VideoStream]:
        try:
            container = av.open(str(self.path), mode="w", format="mp4", container_options={
                "movflags": FRAGMENTED_MOVFLAGS,
                # Hand every finished fragment to the OS at once; otherwise it can sit in
                # FFmpeg's IO buffer and die with the process.
                "flush_packets": "1",
            })
        except (OSError, av.error.FFmpegError) as exc:
            raise OutputError(f"cannot write video {self.path}: {_reason(exc)}") from None
        stream = container.add_stream("libx264", rate=self.fps)
        stream.width, stream.height = self.encoded_width, self.encoded_height
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf), "preset": preset}
        # A keyframe per second bounds what a kill can lose: fragments end at keyframes.
        stream.codec_context.gop_size = self.fps
        # One encoder thread: encode() then returns its packets in step with the frames handed in
        # (nothing encodes in the background), the output is the same for the same frames on any
        # machine, and x264's threads do not compete with a CPU model's (measured with the arena
        # model on 2 cores: a chunk 79.6 -> 68.0 ms; at these frame sizes one thread is ample).
        stream.codec_context.thread_count = 1
        try:
            # Writes ftyp+moov now, so even a run killed before its first frame leaves a valid file.
            container.start_encoding()
        except (OSError, av.error.FFmpegError) as exc:
            container.close()
            raise OutputError(f"cannot write video {self.path}: {_reason(exc)}") from None
        return container, stream

    @property
    def frames_written(self) -> int:
        """Frames handed to the encoder so far (all of them are in the file after :meth:`close`)."""
        return self._frames_written

    def write(self, frames: Frames) -> None:
        """Append frames: uint8 ``[T, H, W, 3]`` RGB or float ``[T, 3, H, W]`` in [-1, 1]."""
        assert not self._closed, f"write() after close() on {self.path}"
        rgb = _pad_even(to_uint8_rgb(frames))  # [T, H', W', 3] uint8
        assert rgb.shape[1:3] == (self.encoded_height, self.encoded_width), (
            f"frames are {tuple(rgb.shape[1:3])}, writer was opened for {(self.height, self.width)}")
        for image in rgb:
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = self._frames_written
            self._mux(self._stream.encode(frame))
            self._frames_written += 1

    def close(self) -> None:
        """Flush the encoder's delayed frames and finish the file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._mux(self._stream.encode(None))
        finally:
            self._container.close()

    def _mux(self, packets: list[av.Packet]) -> None:
        try:
            for packet in packets:
                self._container.mux(packet)
        except (OSError, av.error.FFmpegError) as exc:
            raise OutputError(f"cannot write video {self.path}: {_reason(exc)}") from None

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def to_uint8_rgb(frames: Frames) -> np.ndarray:
    """Return ``[T, H, W, 3]`` uint8 RGB (contiguous) from either accepted layout."""
    if isinstance(frames, torch.Tensor):
        frames = _torch_to_uint8_rgb(frames)
    assert frames.ndim == 4, f"expected 4-D frames, got shape {tuple(frames.shape)}"
    if frames.dtype == np.uint8:
        assert frames.shape[3] == 3, f"uint8 frames must be [T, H, W, 3], got {frames.shape}"
        return np.ascontiguousarray(frames)
    assert np.issubdtype(frames.dtype, np.floating), f"unsupported frame dtype {frames.dtype}"
    assert frames.shape[1] == 3, f"float frames must be [T, 3, H, W], got {frames.shape}"
    scaled = np.rint((np.clip(frames.astype(np.float32), -1.0, 1.0) + 1.0) * 127.5)
    return np.ascontiguousarray(scaled.astype(np.uint8).transpose(0, 2, 3, 1))


def _torch_to_uint8_rgb(frames: torch.Tensor) -> np.ndarray:
    """Torch → numpy; float tensors go through float32 (numpy has no bf16) and stay float here."""
    frames = frames.detach().cpu()
    if frames.dtype == torch.uint8:
        return frames.numpy()
    assert frames.is_floating_point(), f"unsupported frame dtype {frames.dtype}"
    return frames.to(torch.float32).numpy()


def _pad_even(rgb: np.ndarray) -> np.ndarray:
    pad_h, pad_w = rgb.shape[1] % 2, rgb.shape[2] % 2
    if not (pad_h or pad_w):
        return rgb
    return np.pad(rgb, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")


def _check_settings(width: int, height: int, fps: int, crf: int, preset: str) -> None:
    if width < 2 or height < 2:
        raise ConfigError(f"video size must be at least 2x2, got {width}x{height}")
    if not isinstance(fps, numbers.Integral) or isinstance(fps, bool) or fps < 1:
        raise ConfigError(f"video fps must be a positive integer, got {fps!r}")
    if not 0 <= crf <= 51:
        raise ConfigError(f"video crf must be in 0..51, got {crf}")
    if preset not in X264_PRESETS:
        raise ConfigError(f"unknown x264 preset {preset!r} (one of {', '.join(X264_PRESETS)})")


def _check_writable(path: Path) -> None:
    """Fail early, in words, before FFmpeg reports the same problem as an errno."""
    parent = path.parent
    if path.is_dir():
        raise OutputError(f"video output path is a directory: {path}")
    if not parent.is_dir():
        raise OutputError(f"video output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"video output directory is not writable: {parent}")


def _reason(exc: BaseException) -> str:
    """The short part of an OS/FFmpeg error, without errno numbers or repeated paths."""
    return getattr(exc, "strerror", None) or str(exc).splitlines()[0]


def count_frames(path: Union[str, os.PathLike]) -> int:
    """Decode every video frame of ``path`` with PyAV and return how many there are.

    Raises:
        InputError: the file is missing, has no video stream, or cannot be decoded.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"video not found: {path}")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"no video stream in {path}")
            return sum(1 for _ in container.decode(video=0))
    except (OSError, av.error.FFmpegError) as exc:
        raise InputError(f"cannot decode video {path}: {_reason(exc)}") from None
