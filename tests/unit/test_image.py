"""load_image: formats, colour modes, centre-crop geometry, resize, errors, the packaged start image."""
from __future__ import annotations

import fractions
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from engine.errors import InputError
from engine.io.image import center_crop_to_aspect, default_start_image_path, load_image
from engine.io.video import VideoWriter

# codec → pixel format it stores for each input layout
_ENCODE_FORMAT = {
    "png": {"rgb24": "rgb24", "gray": "gray", "rgba": "rgba"},
    "mjpeg": {"rgb24": "yuvj444p", "gray": "gray", "rgba": "yuvj444p"},
    "libwebp": {"rgb24": "yuv420p", "gray": "yuv420p", "rgba": "yuva420p"},
}


def write_image(path: Path, pixels: np.ndarray, codec: str) -> Path:
    """Encode one still with PyAV: pixels are [h, w] gray, [h, w, 3] RGB or [h, w, 4] RGBA uint8."""
    layout = {2: "gray", 3: "rgb24", 4: "rgba"}[pixels.ndim if pixels.ndim == 2 else pixels.shape[2]]
    target = _ENCODE_FORMAT[codec][layout]
    context = av.CodecContext.create(codec, "w")
    context.width, context.height = pixels.shape[1], pixels.shape[0]
    context.pix_fmt = target
    context.time_base = fractions.Fraction(1, 1)
    if codec == "mjpeg":
        context.options = {"qmin": "1", "qmax": "2"}  # near-lossless so colour checks stay tight
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format=layout)
    frame = frame.reformat(format=target) if target != layout else frame
    packets = context.encode(frame) + context.encode(None)
    path.write_bytes(b"".join(bytes(p) for p in packets))
    return path


def to_uint8(image: torch.Tensor) -> np.ndarray:
    """[1, 3, H, W] in [-1, 1] → [H, W, 3] uint8, inverting k → (k/255 - 0.5)/0.5."""
    return torch.round((image[0].permute(1, 2, 0) * 0.5 + 0.5) * 255).to(torch.uint8).numpy()


def flat(h: int, w: int, colour) -> np.ndarray:
    return np.broadcast_to(np.array(colour, np.uint8), (h, w, 3)).copy()


def test_png_same_size_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(36, 64, 3), dtype=np.uint8)
    image = load_image(write_image(tmp_path / "a.png", pixels, "png"), 36, 64)
    assert image.shape == (1, 3, 36, 64) and image.dtype == torch.float32
    expected = (torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 255 - 0.5) / 0.5
    assert torch.equal(image, expected)


@pytest.mark.parametrize("codec, suffix, tol", [("png", "png", 0), ("mjpeg", "jpg", 4),
                                                  ("libwebp", "webp", 6)])
def test_formats_decode_to_rgb(tmp_path, codec, suffix, tol):
    colour = (200, 120, 40)
    path = write_image(tmp_path / f"c.{suffix}", flat(64, 96, colour), codec)
    got = to_uint8(load_image(path, 32, 48))
    assert got.shape == (32, 48, 3)
    assert np.abs(got.astype(int) - colour).max() <= tol


def test_output_range_and_grid():
    image = load_image(default_start_image_path(), 100, 150)
    assert image.min() >= -1 and image.max() <= 1
    # Every value sits on the k/255 grid because the resized image is rounded to 8 bits.
    k = (image * 0.5 + 0.5) * 255
    assert torch.allclose(k, k.round(), atol=1e-4)


def test_wide_image_loses_its_side_strips(tmp_path):
    pixels = flat(100, 400, (0, 0, 255))
    pixels[:, :100] = (255, 0, 0)   # left strip: outside the centred 182-pixel window
    pixels[:, -100:] = (0, 255, 0)  # right strip: likewise
    got = to_uint8(load_image(write_image(tmp_path / "wide.png", pixels, "png"), 44, 80))
    assert (got == (0, 0, 255)).all()


def test_tall_image_loses_its_top_and_bottom(tmp_path):
    pixels = flat(300, 160, (0, 0, 255))
    pixels[:100] = (255, 0, 0)
    pixels[-100:] = (0, 255, 0)
    got = to_uint8(load_image(write_image(tmp_path / "tall.png", pixels, "png"), 88, 160))
    assert (got == (0, 0, 255)).all()


def test_crop_geometry_is_centred():
    pixels = torch.arange(400).view(1, 1, 1, 400).expand(1, 3, 100, 400)
    cropped = center_crop_to_aspect(pixels, 352, 640)  # width → round(100 * 640 / 352) = 182
    assert cropped.shape[-2:] == (100, 182)
    assert cropped[0, 0, 0, 0].item() == (400 - 182) // 2
    assert center_crop_to_aspect(pixels, 1, 4) is pixels  # exact aspect: untouched


def test_downscale_keeps_a_centred_marker_centred(tmp_path):
    pixels = flat(176, 320, (0, 0, 0))
    pixels[80:96, 152:168] = 255
    got = to_uint8(load_image(write_image(tmp_path / "m.png", pixels, "png"), 88, 160))
    rows, cols = np.nonzero(got[..., 0] > 128)
    assert rows.mean() == pytest.approx(43.5, abs=0.6) and cols.mean() == pytest.approx(79.5, abs=0.6)


def test_grayscale_becomes_three_equal_channels(tmp_path):
    gray = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (32, 1))  # [32, 64]
    got = to_uint8(load_image(write_image(tmp_path / "g.png", gray, "png"), 32, 64))
    assert (got[..., 0] == gray).all() and (got[..., 1] == gray).all() and (got[..., 2] == gray).all()


@pytest.mark.parametrize("codec, suffix, tol", [("png", "png", 0), ("libwebp", "webp", 6)])
def test_rgba_drops_alpha(tmp_path, codec, suffix, tol):
    pixels = np.zeros((32, 64, 4), np.uint8)
    pixels[..., :3] = (30, 160, 220)
    pixels[:, :32, 3] = 255  # half opaque, half transparent: the colour is kept either way
    got = to_uint8(load_image(write_image(tmp_path / f"a.{suffix}", pixels, codec), 32, 64))
    assert np.abs(got.astype(int) - (30, 160, 220)).max() <= tol


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.png"
    with pytest.raises(InputError) as info:
        load_image(missing, 32, 64)
    assert str(info.value) == f"start image not found: {missing}"


@pytest.mark.parametrize("name, content", [
    ("garbage.png", b"definitely not a png" * 20),
    ("garbage.bin", b"\x00\x01\x02\x03 random bytes" * 20),
    ("empty.png", b""),
])
def test_unreadable_files(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        load_image(path, 32, 64)
    message = str(info.value)
    assert message.startswith(f"cannot read start image {path}: ") and "\n" not in message


def test_directory_is_not_an_image(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_image(tmp_path, 32, 64)


def test_video_file_is_not_a_start_image(tmp_path):
    clip = tmp_path / "clip.mp4"
    with VideoWriter(clip, 64, 48, 8) as writer:
        writer.write(np.zeros((2, 48, 64, 3), np.uint8))
    with pytest.raises(InputError, match="not a still image"):
        load_image(clip, 48, 64)


def test_packaged_start_image():
    path = default_start_image_path()
    assert path.is_file() and path.stat().st_size < 200_000
    full = load_image(path, 352, 640)
    half = load_image(path, 176, 320)
    assert full.shape == (1, 3, 352, 640) and half.shape == (1, 3, 176, 320)
    assert full.std() > 0.2  # a scene, not a flat fill
    # Downscaling by exactly 2 with an antialiased filter ≈ 2x2 average pooling.
    pooled = torch.nn.functional.avg_pool2d(full, 2)
    assert (half - pooled).abs().mean() < 0.03


def _png_of_size(path, width: int, height: int) -> None:
    """A valid PNG of ``width`` x ``height`` black pixels, compressed row by row (a few MB at 20000²)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    packer = zlib.compressobj(9)
    row = b"\0" * (1 + 3 * width)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_an_image_beyond_ffmpegs_size_limit_says_so(tmp_path):
    from engine.io.image import declared_size, fits_ffmpeg

    path = tmp_path / "huge.png"
    _png_of_size(path, 20000, 20000)
    assert declared_size(path) == (20000, 20000) and not fits_ffmpeg(20000, 20000)
    with pytest.raises(InputError, match=r"20000x20000 pixels is beyond FFmpeg's image size limit"):
        load_image(path, 32, 64)


def test_declared_sizes_of_png_and_jpeg(tmp_path):
    from engine.io.image import declared_size, save_png

    rgb = np.zeros((24, 40, 3), dtype=np.uint8)
    save_png(tmp_path / "a.png", rgb)
    assert declared_size(tmp_path / "a.png") == (40, 24)
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuvj420p")
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height, codec.pix_fmt = 40, 24, "yuvj420p"
    codec.time_base = fractions.Fraction(1, 1)
    (tmp_path / "a.jpg").write_bytes(b"".join(bytes(p) for p in [*codec.encode(frame), *codec.encode(None)]))
    assert declared_size(tmp_path / "a.jpg") == (40, 24)
