"""Building blocks of the Wan2.1 causal 3D VAE, with explicit streaming state.

Owns the layers (causal 3D conv, channel RMS norm, residual block, single-head spatial attention,
spatial/temporal resampling), the two stacks built from them (:class:`Encoder3d`, :class:`Decoder3d`)
and :class:`StreamState`, the per-stream temporal memory threaded through them. Attribute names and
``nn.Sequential`` positions are chosen so that ``state_dict`` keys equal those of ``Wan2.1_VAE.pth``.

Streaming model: a stack is fed a few frames at a time. Every module that looks back in time owns one
numbered slot of a :class:`StreamState`; a step reads its slot and writes a *new* tensor into it (never
in place), so a shallow copy of the slot list is a snapshot of the whole causal state.

Tensor layout everywhere: ``[B, C, T, H, W]`` (video) unless noted.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.errors import ConfigError


class StreamState:
    """Temporal memory of one stream through one stack: one entry per streaming module (None = unstarted)."""

    def __init__(self, num_slots: int):
        self.slots: list[torch.Tensor | None] = [None] * num_slots

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The started slots as CPU copies, named by slot index (``engine.model.state_tensors``)."""
        return {str(i): s.detach().to("cpu", copy=True).contiguous()
                for i, s in enumerate(self.slots) if s is not None}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None:
        self.slots = [None] * len(self.slots)
        for name, t in tensors.items():
            index = int(name)
            if not 0 <= index < len(self.slots):
                raise ValueError(f"stream state slot {index} out of range (stack has {len(self.slots)})")
            self.slots[index] = t.to(device=device, dtype=dtype)

    def snapshot(self) -> list[torch.Tensor | None]:
        # Steps replace entries instead of mutating them, so references are enough.
        return list(self.slots)

    def equals(self, other: Sequence[torch.Tensor | None]) -> bool:
        """Bitwise equality of every slot with ``other`` (a snapshot)."""
        if len(other) != len(self.slots):
            return False
        for a, b in zip(self.slots, other):
            if a is None or b is None:
                if a is not b:
                    return False
            elif a.shape != b.shape or not torch.equal(a, b):
                return False
        return True


def number_slots(root: nn.Module) -> int:
    """Give every streaming module under ``root`` its slot index, in registration order; returns the count."""
    count = 0
    for module in root.modules():
        if getattr(module, "streaming", False):
            module.slot = count
            count += 1
    return count


class CausalConv3d(nn.Conv3d):
    """3D conv that is causal in time ('same' zero padding in space, only past frames in time).

    A temporal kernel of k taps needs k-1 frames of history before the new frames; a fresh stream's
    history is zeros. ``forward`` takes the history explicitly; ``step`` keeps it in a StreamState slot.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int, int],
                 stride: int | tuple[int, int, int] = 1, spatial_padding: int = 0, *,
                 streaming: bool = True):
        # Spatial padding is left to the conv itself (no padded copy of large frames); time is handled here.
        super().__init__(in_channels, out_channels, kernel_size, stride=stride,
                         padding=(0, spatial_padding, spatial_padding))
        self.context = self.kernel_size[0] - 1
        self.streaming = streaming and self.context > 0
        self.slot = -1

    def zero_history(self, x: torch.Tensor) -> torch.Tensor:
        b, c, _, h, w = x.shape
        return x.new_zeros(b, c, self.context, h, w)                 # [B, C, context, H, W]

    def forward(self, x: torch.Tensor, history: torch.Tensor | None = None) -> torch.Tensor:
        return self.advance(x, history)[0]

    def advance(self, x: torch.Tensor, history: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Convolve the new frames ``x`` after ``history``; also return the history for the next call."""
        if not self.context:
            return self.convolve(x), None
        window = torch.cat([self.zero_history(x) if history is None else history, x], dim=2)
        # Clone so the next history does not pin the whole (possibly large) window.
        return self.convolve(window), window[:, :, -self.context:].clone()

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        """The plain (unpadded-in-time) conv of x [B, C, T, H, W].

        On the CPU, PyTorch's conv3d is several times slower than conv2d, so the conv is computed as
        one frame-batched conv2d per temporal tap, summed (same result up to float rounding).
        """
        if x.device.type != "cpu":
            return super().forward(x)
        kt, st = self.kernel_size[0], self.stride[0]
        b, c, t, h, w = x.shape
        t_out = (t - kt) // st + 1
        frames = x.transpose(1, 2)                                      # [B, T, C, H, W]
        out = None
        for tap in range(kt):
            picked = frames[:, tap:tap + st * (t_out - 1) + 1:st].reshape(b * t_out, c, h, w)
            y = F.conv2d(picked, self.weight[:, :, tap], None, self.stride[1:], self.padding[1:])
            out = y if out is None else out.add_(y)
        out = out + self.bias.view(1, -1, 1, 1)
        return out.view(b, t_out, *out.shape[1:]).transpose(1, 2)        # [B, C', T', H', W']

    def step(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        """``advance`` with the history kept in this conv's StreamState slot."""
        if not self.context:
            return self.convolve(x)
        y, state.slots[self.slot] = self.advance(x, state.slots[self.slot])
        return y


class RMSNorm(nn.Module):
    """Channel RMS norm: ``x / max(||x||_2 over C, 1e-12) * sqrt(C) * gamma``.

    ``spatial_dims`` is the number of axes after C (3 for video ``[B,C,T,H,W]``, 2 for frames
    ``[B,C,H,W]``); it fixes gamma's checkpoint shape (C,1,1,1) or (C,1,1).
    """

    def __init__(self, channels: int, spatial_dims: int = 3):
        super().__init__()
        self.scale = channels ** 0.5
        self.gamma = nn.Parameter(torch.ones(channels, *([1] * spatial_dims)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Written out rather than F.normalize: its strided vector norm is ~5x slower on the CPU.
        norm = x.square().sum(dim=1, keepdim=True).sqrt_().clamp_min_(1e-12)
        return x / norm * (self.scale * self.gamma)


class ResBlock(nn.Module):
    """Pre-activation residual block of two causal 3x3x3 convs; 1x1x1 shortcut when widths differ."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        # The positions (norm 0, conv 2, norm 3, conv 6) are the checkpoint's key names; 1 and 4 are the
        # activations and 5 the (inference no-op) dropout.
        self.residual = nn.Sequential(
            RMSNorm(in_channels), nn.SiLU(),
            CausalConv3d(in_channels, out_channels, 3, spatial_padding=1),
            RMSNorm(out_channels), nn.SiLU(), nn.Identity(),
            CausalConv3d(out_channels, out_channels, 3, spatial_padding=1))
        self.shortcut = (CausalConv3d(in_channels, out_channels, 1) if in_channels != out_channels
                         else nn.Identity())

    def forward(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        norm_a, act, conv_a, norm_b, _, _, conv_b = self.residual
        h = conv_a.step(act(norm_a(x)), state)
        h = conv_b.step(act(norm_b(h)), state)
        return h + self.shortcut(x)


class SpatialAttention(nn.Module):
    """Single-head self-attention over the H*W positions of each frame separately (no temporal mixing)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = RMSNorm(channels, spatial_dims=2)
        self.to_qkv = nn.Conv2d(channels, channels * 3, 1)
        self.proj = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = x.transpose(1, 2).reshape(b * t, c, h, w)            # [(B T), C, H, W]
        qkv = self.to_qkv(self.norm(frames))                          # [(B T), 3C, H, W]
        # Output channels split as q | k | v; one head -> [(B T), 1, H*W, C] each.
        qkv = qkv.reshape(b * t, 1, 3 * c, h * w).transpose(2, 3).contiguous()
        q, k, v = qkv.chunk(3, dim=-1)
        out = F.scaled_dot_product_attention(q, k, v)                 # [(B T), 1, H*W, C]
        out = out.squeeze(1).transpose(1, 2).reshape(b * t, c, h, w)
        out = self.proj(out).reshape(b, t, c, h, w).transpose(1, 2)   # [B, C, T, H, W]
        return x + out


RESAMPLE_MODES = ("upsample2d", "upsample3d", "downsample2d", "downsample3d")


class Resample(nn.Module):
    """x2 spatial resampling of every frame, optionally with x2 temporal resampling.

    * upsample: nearest x2, then 3x3 conv C -> C/2. ``upsample3d`` first doubles the frame rate: a causal
      (3,1,1) conv C -> 2C whose two channel halves become two consecutive frames. The stream's very first
      call skips it (one frame stays one frame) and the conv's history starts as zeros on the next call.
    * downsample: one zero column right and one zero row bottom, then 3x3 conv stride 2. ``downsample3d``
      then halves the frame rate: the first call passes its frames through; later calls prepend the
      previous call's last frame and apply a (3,1,1) conv with temporal stride 2 and no padding.
    """

    def __init__(self, channels: int, mode: str):
        super().__init__()
        if mode not in RESAMPLE_MODES:
            raise ConfigError(f"resample mode {mode!r} not in {RESAMPLE_MODES}")
        self.mode = mode
        if mode.startswith("upsample"):
            self.resample = nn.Sequential(nn.Upsample(scale_factor=2.0, mode="nearest"),
                                          nn.Conv2d(channels, channels // 2, 3, padding=1))
        else:
            self.resample = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)),
                                          nn.Conv2d(channels, channels, 3, stride=2))
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(channels, channels * 2, (3, 1, 1), streaming=False)
        elif mode == "downsample3d":
            self.time_conv = nn.Conv3d(channels, channels, (3, 1, 1), stride=(2, 1, 1))
        self.streaming = mode.endswith("3d")
        self.slot = -1

    def forward(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        if self.mode == "upsample3d":
            x = self._double_rate(x, state)
        b, c, t, h, w = x.shape
        frames = self.resample(x.transpose(1, 2).reshape(b * t, c, h, w))   # [(B T), C', H', W']
        x = frames.reshape(b, t, *frames.shape[1:]).transpose(1, 2)          # [B, C', T, H', W']
        if self.mode == "downsample3d":
            x = self._halve_rate(x, state)
        return x

    def _double_rate(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        history = state.slots[self.slot]
        if history is None:
            # The first frame of a stream is not temporally upsampled, and it never enters the history.
            state.slots[self.slot] = self.time_conv.zero_history(x)
            return x
        y, state.slots[self.slot] = self.time_conv.advance(x, history)
        b, c, t, h, w = x.shape
        # [B, 2C, T, H, W] -> channel half j becomes frame 2*tau + j -> [B, C, 2T, H, W]
        return y.reshape(b, 2, c, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)

    def _halve_rate(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        previous = state.slots[self.slot]
        state.slots[self.slot] = x[:, :, -1:].clone()
        if previous is None:
            return x
        return self.time_conv(torch.cat([previous, x], dim=2))


def _check_levels(dim_mult: Sequence[int], temporal: Sequence[bool]) -> None:
    if len(temporal) != len(dim_mult) - 1:
        raise ConfigError(f"VAE temporal_downsample has {len(temporal)} entries; dim_mult "
                          f"{tuple(dim_mult)} needs {len(dim_mult) - 1}")


class Encoder3d(nn.Module):
    """Video -> latent statistics: /2 spatially per level after the first, /2 in time where asked."""

    def __init__(self, dim: int, out_channels: int, dim_mult: Sequence[int], num_res_blocks: int,
                 temporal_downsample: Sequence[bool]):
        super().__init__()
        _check_levels(dim_mult, temporal_downsample)
        widths = [dim] + [dim * m for m in dim_mult]
        self.conv1 = CausalConv3d(3, widths[0], 3, spatial_padding=1)
        blocks: list[nn.Module] = []
        for level, (width_in, width) in enumerate(zip(widths[:-1], widths[1:])):
            for _ in range(num_res_blocks):
                blocks.append(ResBlock(width_in, width))
                width_in = width
            if level < len(dim_mult) - 1:
                blocks.append(Resample(width, "downsample3d" if temporal_downsample[level]
                                       else "downsample2d"))
        self.downsamples = nn.Sequential(*blocks)
        top = widths[-1]
        self.middle = nn.Sequential(ResBlock(top, top), SpatialAttention(top), ResBlock(top, top))
        self.head = nn.Sequential(RMSNorm(top), nn.SiLU(),
                                  CausalConv3d(top, out_channels, 3, spatial_padding=1))
        self.num_slots = number_slots(self)

    def new_state(self) -> StreamState:
        return StreamState(self.num_slots)

    def forward(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        x = self.conv1.step(x, state)
        for block in (*self.downsamples, *self.middle):
            x = block(x, state)
        norm, act, conv = self.head
        return conv.step(act(norm(x)), state)


class Decoder3d(nn.Module):
    """Latent -> video, mirroring the encoder: x2 spatially per level but the last, x2 in time where asked."""

    def __init__(self, dim: int, z_dim: int, dim_mult: Sequence[int], num_res_blocks: int,
                 temporal_upsample: Sequence[bool]):
        super().__init__()
        _check_levels(dim_mult, temporal_upsample)
        widths = [dim * m for m in (dim_mult[-1], *reversed(dim_mult))]
        self.conv1 = CausalConv3d(z_dim, widths[0], 3, spatial_padding=1)
        top = widths[0]
        self.middle = nn.Sequential(ResBlock(top, top), SpatialAttention(top), ResBlock(top, top))
        blocks: list[nn.Module] = []
        for level, (width_in, width) in enumerate(zip(widths[:-1], widths[1:])):
            if level > 0:
                width_in //= 2        # every upsample halves the channels it outputs
            # One more residual block per level than the encoder has.
            for _ in range(num_res_blocks + 1):
                blocks.append(ResBlock(width_in, width))
                width_in = width
            if level < len(dim_mult) - 1:
                blocks.append(Resample(width, "upsample3d" if temporal_upsample[level]
                                       else "upsample2d"))
        self.upsamples = nn.Sequential(*blocks)
        bottom = widths[-1]
        self.head = nn.Sequential(RMSNorm(bottom), nn.SiLU(),
                                  CausalConv3d(bottom, 3, 3, spatial_padding=1))
        self.num_slots = number_slots(self)

    def new_state(self) -> StreamState:
        return StreamState(self.num_slots)

    def forward(self, x: torch.Tensor, state: StreamState) -> torch.Tensor:
        x = self.conv1.step(x, state)
        for block in (*self.middle, *self.upsamples):
            x = block(x, state)
        norm, act, conv = self.head
        return conv.step(act(norm(x)), state)
