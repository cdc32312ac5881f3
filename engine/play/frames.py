"""Video frames as the page receives them: one binary WebSocket message per frame.

Contract. ``frame_messages(video, chunk, first, seq)`` turns a chunk's decoded frames (``to_uint8`` of
``WorldModel.decode``'s uint8 ``[T, H, W, 3]`` or float ``[T, 3, H, W]`` in [-1, 1]) into messages of a 16-byte header — four
big-endian uint32: chunk, the frame's index in the video, the newest input message (``seq``) the chunk
was made with, the chunk's frame count — followed by the frame as a JPEG (Pillow, quality ``QUALITY``).
``parse_header`` reads a header back (the bench's client, the tests).

``truth_messages`` (``play --truth``): the renderer's truth of the same frames, one message per frame in
the same form, its chunk word's top bit (``TRUTH_FLAG``) set; ``parse_header`` masks the flag off and
``is_truth`` reads it. A page that asked for no truth never receives one.
"""
from __future__ import annotations

import io
import struct

import numpy as np
import torch
from PIL import Image

HEADER = struct.Struct(">IIII")
QUALITY = 85
TRUTH_FLAG = 1 << 31        # in the chunk word: this message is the truth of the frame it names


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    """Decoded frames as uint8 RGB ``[T, H, W, 3]``."""
    if frames.dtype == torch.uint8:
        return frames.cpu().numpy()
    video = ((frames.detach().float().cpu().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)   # [T, 3, H, W]
    return video.permute(0, 2, 3, 1).numpy()


def jpeg(frame: np.ndarray, quality: int = QUALITY) -> bytes:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def frame_messages(video: np.ndarray, chunk: int, first: int, seq: int) -> list[bytes]:
    """``video``: uint8 ``[T, H, W, 3]`` (``to_uint8``)."""
    return [HEADER.pack(chunk, first + i, seq, len(video)) + jpeg(frame) for i, frame in enumerate(video)]


def truth_messages(video: np.ndarray, chunk: int, first: int, seq: int) -> list[bytes]:
    """The truth of ``frame_messages``' frames (``video``: uint8 ``[T, H, W, 3]``), flagged ``TRUTH_FLAG``."""
    return [HEADER.pack(chunk | TRUTH_FLAG, first + i, seq, len(video)) + jpeg(frame) for i, frame in enumerate(video)]


def parse_header(message: bytes) -> tuple[int, int, int, int]:
    """(chunk, frame, seq, frames in the chunk) of a frame message (a truth message's too)."""
    chunk, frame, seq, count = HEADER.unpack_from(message)
    return chunk & ~TRUTH_FLAG, frame, seq, count


def is_truth(message: bytes) -> bool:
    """The message is a frame's truth (``truth_messages``), not a frame the model made."""
    return bool(HEADER.unpack_from(message)[0] & TRUTH_FLAG)
