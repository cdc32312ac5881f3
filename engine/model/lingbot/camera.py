"""Camera control of LingBot-World-Fast: from per-video-frame poses to the model's control tensor.

Owns the four camera utilities of the official code and the rearrangement that feeds the model:

* ``interpolate_poses`` — camera-to-world poses resampled at (fractional) positions: translation linear
  over the pose index, rotation by quaternion slerp after a sign-continuity flip;
* ``relative_poses`` — poses relative to the first one, optionally frame to frame, translations
  optionally divided by the largest translation norm;
* ``transform_intrinsics`` / ``scale_intrinsics`` — (fx, fy, cx, cy) for a resized (and centre-cropped)
  frame;
* ``plucker_rays`` — per-pixel (ray origin, ray direction) on the pixel grid;
* ``control_embedding`` — rays [F, H, W, C] -> [1, C*s*s, F, H/s, W/s] with channel ``s*s*c + s*dy + dx``
  (s = the VAE's spatial stride, 8).

Poses are OpenCV camera-to-world 4x4 matrices (x right, y down, z forward). Rotations are handled in
float64 and rounded to float32 once; everything else is float32 as in the official code.
"""
from __future__ import annotations

import torch

from engine.errors import InputError


def _orthonormal(rot: torch.Tensor) -> torch.Tensor:
    """Nearest rotation matrices [N, 3, 3] (float64) of possibly not exactly orthonormal ones."""
    u, _, vh = torch.linalg.svd(rot.to(torch.float64))
    det = torch.det(u @ vh)
    fix = torch.ones_like(u[..., 0, :])
    fix[..., 2] = det.sign()
    return u @ torch.diag_embed(fix) @ vh


def _quaternions(rot: torch.Tensor) -> torch.Tensor:
    """Rotation matrices [N, 3, 3] -> unit quaternions [N, 4] as (x, y, z, w), numerically stable
    (the largest of w, x, y, z is computed from the diagonal, the others from off-diagonal sums)."""
    out = []
    for m in rot:
        trace = m[0, 0] + m[1, 1] + m[2, 2]
        diag = torch.stack([m[0, 0], m[1, 1], m[2, 2], trace])
        choice = int(torch.argmax(diag))
        q = torch.zeros(4, dtype=m.dtype)
        if choice == 3:
            q[0], q[1], q[2] = m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1]
            q[3] = 1 + trace
        else:
            i, j, k = choice, (choice + 1) % 3, (choice + 2) % 3
            q[i] = 1 - trace + 2 * m[i, i]
            q[j] = m[j, i] + m[i, j]
            q[k] = m[k, i] + m[i, k]
            q[3] = m[k, j] - m[j, k]
        out.append(q / q.norm())
    return torch.stack(out)


def _rotation_matrix(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternions [N, 4] (x, y, z, w) -> rotation matrices [N, 3, 3]."""
    x, y, z, w = q.unbind(-1)
    return torch.stack([
        torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        torch.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        torch.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def _slerp(q0: torch.Tensor, q1: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation of unit quaternions [N, 4] at fractions [N] (q1 already sign-aligned)."""
    dot = (q0 * q1).sum(-1).clamp(-1.0, 1.0)
    theta = torch.arccos(dot)
    small = theta < 1e-12
    sin = torch.where(small, torch.ones_like(theta), torch.sin(theta))
    a = torch.where(small, 1 - frac, torch.sin((1 - frac) * theta) / sin)
    b = torch.where(small, frac, torch.sin(frac * theta) / sin)
    q = a[:, None] * q0 + b[:, None] * q1
    return q / q.norm(dim=-1, keepdim=True)


def interpolate_poses(c2w: torch.Tensor, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Poses c2w [N, 4, 4] at increasing positions src [N] resampled at tgt [M] -> [M, 4, 4] float32."""
    src64, tgt64 = src.to(torch.float64), tgt.to(torch.float64)
    if len(src64) < 2 or bool((tgt64 < src64[0]).any() or (tgt64 > src64[-1]).any()):
        raise InputError("camera interpolation: target positions outside the source poses")
    quat = _quaternions(_orthonormal(c2w[:, :3, :3]))
    for i in range(1, len(quat)):             # continuity: each quaternion on the previous one's side
        if float((quat[i] * quat[i - 1]).sum()) < 0:
            quat[i] = -quat[i]
    seg = (torch.searchsorted(src64, tgt64, right=True) - 1).clamp(0, len(src64) - 2)
    frac = (tgt64 - src64[seg]) / (src64[seg + 1] - src64[seg])
    trans = c2w[:, :3, 3].to(torch.float64)
    t = trans[seg] + frac[:, None] * (trans[seg + 1] - trans[seg])
    out = torch.zeros(len(tgt64), 4, 4, dtype=torch.float64)
    out[:, :3, :3] = _rotation_matrix(_slerp(quat[seg], quat[seg + 1], frac))
    out[:, :3, 3] = t
    out[:, 3, 3] = 1.0
    return out.to(torch.float32)


def relative_poses(c2w: torch.Tensor, framewise: bool = True, normalize: bool = True) -> torch.Tensor:
    """[N, 4, 4] -> poses relative to the first (pose 0 = identity); with ``framewise`` pose j >= 1
    becomes inverse(relative j-1) @ relative j; with ``normalize`` translations are divided by the
    largest translation norm (when it is positive)."""
    c2w = c2w.to(torch.float32)
    rel = torch.linalg.inv(c2w[0])[None] @ c2w
    rel[0] = torch.eye(4, dtype=rel.dtype)
    if framewise:
        step = torch.linalg.inv(rel[:-1]) @ rel[1:]
        rel = torch.cat([rel[:1], step])
    if normalize:
        scale = rel[:, :3, 3].norm(dim=-1).max()
        if float(scale) > 0:
            rel[:, :3, 3] = rel[:, :3, 3] / scale
    return rel


def scale_intrinsics(ks: torch.Tensor, original: tuple[int, int], size: tuple[int, int]) -> torch.Tensor:
    """(fx, fy, cx, cy) [..., 4] of an (H, W) = ``original`` frame for a frame resized to ``size``:
    x terms times W'/W, y terms times H'/H (factors rounded to float32, products in float32)."""
    sy = torch.tensor(size[0] / original[0], dtype=torch.float32)
    sx = torch.tensor(size[1] / original[1], dtype=torch.float32)
    factor = torch.stack([sx, sy, sx, sy])
    return ks.to(torch.float32) * factor


def transform_intrinsics(ks: torch.Tensor, original: tuple[int, int], resized: tuple[int, int],
                         final: tuple[int, int]) -> torch.Tensor:
    """``scale_intrinsics`` to ``resized``, then the principal point moved by a centre crop to ``final``."""
    out = scale_intrinsics(ks, original, resized)
    out[..., 2] = out[..., 2] - (resized[1] - final[1]) / 2
    out[..., 3] = out[..., 3] - (resized[0] - final[0]) / 2
    return out


def plucker_rays(c2w: torch.Tensor, ks: torch.Tensor, height: int, width: int,
                 with_origin: bool = True) -> torch.Tensor:
    """Per-pixel rays of poses c2w [F, 4, 4] with intrinsics ks [F, 4] -> [F, H, W, 6] (origin xyz,
    direction xyz) or, without ``with_origin``, [F, H, W, 3] (directions only)."""
    ks = ks.to(torch.float32)
    v, u = torch.meshgrid(torch.arange(height, dtype=torch.float32) + 0.5,
                          torch.arange(width, dtype=torch.float32) + 0.5, indexing="ij")
    fx, fy, cx, cy = (ks[:, i, None, None] for i in range(4))          # [F, 1, 1]
    dirs = torch.stack([(u - cx) / fx, (v - cy) / fy, torch.ones_like(u).expand_as(u - cx)], dim=-1)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)                       # [F, H, W, 3]
    rot = c2w[:, :3, :3].to(torch.float32)
    dirs = dirs @ rot.transpose(1, 2)[:, None]                          # row vector times R^T
    if not with_origin:
        return dirs
    origin = c2w[:, None, None, :3, 3].to(torch.float32).expand_as(dirs)
    return torch.cat([origin, dirs], dim=-1)


def control_embedding(rays: torch.Tensor, stride: int) -> torch.Tensor:
    """Rays [F, H, W, C] -> control tensor [1, C*stride*stride, F, H/stride, W/stride] whose channel
    ``stride*stride*c + stride*dy + dx`` holds ray channel c at pixel (stride*i + dy, stride*j + dx)."""
    frames, height, width, channels = rays.shape
    if height % stride or width % stride:
        raise InputError(f"ray grid {height}x{width} is not a multiple of the latent stride {stride}")
    x = rays.reshape(frames, height // stride, stride, width // stride, stride, channels)
    x = x.permute(5, 2, 4, 0, 1, 3)                                     # [C, dy, dx, F, h, w]
    return x.reshape(1, channels * stride * stride, frames, height // stride, width // stride)
