"""Start-image input: file on disk → the model's ``[1, 3, H, W]`` float tensor in [-1, 1].

Owns decoding (PNG, JPEG, WebP and other still formats FFmpeg knows, through PyAV, so there is no
Pillow dependency), the conversion of grayscale / palette / RGBA / 16-bit images to 8-bit RGB (alpha is
dropped, not composited), MG2's preprocessing (centre-crop to the target aspect ratio, antialiased
bilinear resize, normalise with mean = std = 0.5) and the path of the packaged default start image.
Knows nothing about the VAE or CLIP that consume the tensor.

Known limit: EXIF orientation in JPEGs is not applied (FFmpeg decodes the stored pixel order).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import av
import numpy as np
import torch
import torch.nn.functional as F

from engine.errors import InputError
from engine.files.input_files import check_input_file, open_input, shown

PathLike = Union[str, os.PathLike]


def default_start_image_path() -> Path:
    """The built-in start image shipped as package data (640x352 RGB PNG)."""
    return Path(__file__).resolve().parents[1] / "assets" / "start.png"


def load_image(path: PathLike, height: int, width: int) -> torch.Tensor:
    """Read a start image and return it as ``[1, 3, height, width]`` float32 in [-1, 1].

    The image is centre-cropped to ``width / height`` (the longer side is trimmed equally on both
    ends), resized with antialiased bilinear filtering, rounded to 8 bits and mapped as
    ``k -> (k / 255 - 0.5) / 0.5``.

    Raises:
        InputError: the file is missing, empty, not an image, or cannot be decoded.
    """
    assert height > 0 and width > 0, f"target size must be positive, got {height}x{width}"
    path = Path(path)
    rgb = _decode_rgb(path)  # [h, w, 3] uint8
    pixels = torch.from_numpy(rgb).permute(2, 0, 1).unsqueeze(0)  # [1, 3, h, w] uint8
    pixels = resize(center_crop_to_aspect(pixels, height, width), height, width)
    return (pixels.to(torch.float32) / 255.0 - 0.5) / 0.5


def center_crop_to_aspect(pixels: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Crop ``[N, C, h, w]`` around its centre to the aspect ratio ``width / height``."""
    src_h, src_w = pixels.shape[-2:]
    # Compare cross-products, not float ratios, so an exact aspect match is never cropped by one pixel.
    if src_w * height > src_h * width:  # too wide: trim left and right
        crop_w = max(1, round(src_h * width / height))
        left = (src_w - crop_w) // 2
        return pixels[..., :, left:left + crop_w]
    if src_w * height < src_h * width:  # too tall: trim top and bottom
        crop_h = max(1, round(src_w * height / width))
        top = (src_h - crop_h) // 2
        return pixels[..., top:top + crop_h, :]
    return pixels


def resize(pixels: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Antialiased bilinear resize of uint8 ``[N, C, h, w]`` to ``(height, width)``, still uint8.

    Rounding back to uint8 mirrors the reference pipeline, which resizes a PIL image (8-bit) before
    normalising; it also keeps every output value on the ``k / 255`` grid.
    """
    if tuple(pixels.shape[-2:]) == (height, width):
        return pixels
    resized = F.interpolate(pixels.to(torch.float32), size=(height, width), mode="bilinear",
                            align_corners=False, antialias=True)
    return resized.round().clamp(0, 255).to(torch.uint8)


def _decode_rgb(path: Path) -> np.ndarray:
    """Decode the first frame of an image file to ``[h, w, 3]`` uint8 RGB, or raise InputError."""
    _check_readable(path)
    try:
        with av.open(str(path)) as container:
            frame = _first_image_frame(container, path)
            rgb = frame.to_ndarray(format="rgb24")
    except (OSError, av.error.FFmpegError, ValueError) as exc:   # ValueError: metadata PyAV cannot decode
        size = declared_size(path)
        if size is not None and not fits_ffmpeg(*size):
            raise InputError(f"cannot read start image {path}: {size[0]}x{size[1]} pixels is beyond FFmpeg's "
                             "image size limit ((w + 128) x (h + 128) under 268 million, e.g. 16000x16000); "
                             "scale it down") from None
        raise InputError(f"cannot read start image {path}: {_reason(exc)}") from None
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise InputError(f"cannot read start image {path}: zero-size image")
    return rgb


def fits_ffmpeg(width: int, height: int) -> bool:
    """FFmpeg decodes no image larger than this (``av_image_check_size``)."""
    return (width + 128) * (height + 128) < (2 ** 31 - 1) // 8


def declared_size(path: Path) -> tuple[int, int] | None:
    """Width and height a PNG or JPEG file declares in its header (read without decoding), or None."""
    try:
        with open_input(path, "start image") as f:
            head = f.read(1 << 16)
    except (OSError, InputError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    i = 2 if head[:2] == b"\xff\xd8" else len(head)
    while i + 9 <= len(head):   # JPEG: walk the segments to a start-of-frame
        if head[i] != 0xFF:
            return None
        marker, length = head[i + 1], int.from_bytes(head[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(head[i + 7:i + 9], "big"), int.from_bytes(head[i + 5:i + 7], "big")
        i += 2 + length
    return None


def _check_readable(path: Path) -> None:
    if not os.path.lexists(path):
        raise InputError(f"start image not found: {shown(path)}")
    # A FIFO, socket, device, directory or /proc file is refused here, before FFmpeg opens it (and waits).
    if check_input_file(path, "start image", fix="name a PNG or JPEG file as --image").st_size == 0:
        raise InputError(f"cannot read start image {path}: empty file")


def _first_image_frame(container: av.container.InputContainer, path: Path) -> av.VideoFrame:
    # FFmpeg opens videos too; a start image must come from a still-image demuxer
    # ("png_pipe", "jpeg_pipe", "webp_pipe", ... or "image2").
    fmt = container.format.name
    if not (fmt == "image2" or fmt.endswith("_pipe")) or not container.streams.video:
        raise InputError(f"cannot read start image {path}: not a still image (format {fmt})")
    for frame in container.decode(video=0):
        return frame
    raise InputError(f"cannot read start image {path}: no decodable frame")


def _reason(exc: BaseException) -> str:
    """The short part of an OS/FFmpeg error, without errno numbers or repeated paths."""
    return getattr(exc, "strerror", None) or str(exc).splitlines()[0]


def save_png(path: PathLike, rgb: np.ndarray) -> None:
    """Write an ``[H, W, 3]`` uint8 RGB array as a PNG (through PyAV's PNG encoder)."""
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3, (rgb.dtype, rgb.shape)
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = rgb.shape[1], rgb.shape[0], "rgb24"
    packets = list(codec.encode(frame)) + list(codec.encode(None))
    Path(path).write_bytes(b"".join(bytes(p) for p in packets))
