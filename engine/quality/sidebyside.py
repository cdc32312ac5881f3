"""Side-by-side videos and stills: truth | arm | window-only, one latent frame per video frame.

Owns how ``worldpager bench quality`` shows an episode: the three rows of latent frames ``[F, 3, h,
w]`` in [-1, 1] are put side by side, enlarged ``scale`` times by pixel repetition (the model's pixels
stay visible) under a band that names each column, and written as H.264 MP4 through the product's writer (``engine.io.video``) at the
latent frame rate (4 a second: each latent frame stands for 4 video frames at 16 fps); a still is
one frame decoded back from that MP4 (what a viewer sees, after H.264), written as PNG.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.io.image import save_png
from engine.io.video import VideoWriter

LATENT_FPS = 4


def side_by_side(*rows: torch.Tensor, scale: int = 2, labels: list[str] | None = None) -> torch.Tensor:
    """uint8 ``[F, BAND + scale h, scale w len(rows), 3]`` of equally long frame sequences in [-1, 1],
    under a band of ``labels`` (one per sequence; without labels, no band)."""
    assert rows and all(r.shape == rows[0].shape for r in rows), [tuple(r.shape) for r in rows]
    image = torch.cat(rows, dim=-1)                                            # [F, 3, h, n w]
    rgb = ((image.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1)
    rgb = rgb.repeat_interleave(scale, 1).repeat_interleave(scale, 2)
    if labels is None:
        return rgb.contiguous()
    from engine.io.labels import header

    assert len(labels) == len(rows)
    band = torch.from_numpy(header([scale * rows[0].shape[-1]] * len(rows), labels))
    return torch.cat([band.expand(rgb.shape[0], *band.shape), rgb], dim=1).contiguous()


def write_video(path: Path, frames: torch.Tensor) -> None:
    """``frames`` from ``side_by_side`` as an MP4 at the latent frame rate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with VideoWriter(path, frames.shape[2], frames.shape[1], LATENT_FPS) as writer:
        writer.write(frames.numpy())


def still_from_video(video: Path, index: int, path: Path) -> None:
    """Frame ``index`` of ``video`` (decoded) as a PNG at ``path``."""
    import av

    with av.open(str(video)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i == index:
                path.parent.mkdir(parents=True, exist_ok=True)
                save_png(path, frame.to_ndarray(format="rgb24"))
                return
    raise AssertionError(f"{video} has no frame {index}")
