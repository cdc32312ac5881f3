"""Wan2.1 causal 3D VAE as MG2 uses it: streaming decode of DiT latents, streaming start-image encode.

Owns :class:`WanVAE` (the module whose ``state_dict`` keys equal ``Wan2.1_VAE.pth``: ``encoder.*``,
``conv1.*``, ``conv2.*``, ``decoder.*``), the latent (un)normalisation with the per-channel Wan
constants, strict loading of whole-part subsets of a checkpoint, and the two streaming front ends:

* :class:`StreamingDecoder` turns chunks of normalised latents into raw (unclamped) frames, one latent
  frame at a time, keeping the causal state across chunks of one generation.
* :class:`StartImageEncoder` produces the image-conditioning latents (and ``cond_concat``) of an
  arbitrarily long session on demand, memoising them once the causal encoder reaches its fixed point.
* :class:`StreamingEncoder` turns the chunks of an observed video into normalised latents (the
  posterior's mean, as the start image's), keeping the encoder's causal state across chunks.

Everything runs in the dtype/device of the module's parameters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn as nn

from engine.config import VAEConfig
from engine.runtime.cpu_threads import one_intra_op_thread
from engine.errors import CheckpointError, ConfigError, InputError
from engine.model.state_tensors import as_int, integer, nest, optional, sub
from engine.model.vae_blocks import CausalConv3d, Decoder3d, Encoder3d, StreamState


class WanVAE(nn.Module):
    """Encoder, latent-statistics conv (``conv1``), latent input conv (``conv2``) and decoder."""

    def __init__(self, config: VAEConfig = VAEConfig()):
        super().__init__()
        if len(config.latent_mean) != config.z_dim or len(config.latent_std) != config.z_dim:
            raise ConfigError(f"VAE latent_mean/latent_std need {config.z_dim} entries (z_dim)")
        self.config = config
        z = config.z_dim
        # The encoder emits mean and log-variance stacked on channels; only the mean is ever used.
        self.encoder = Encoder3d(config.dim, 2 * z, config.dim_mult, config.num_res_blocks,
                                 config.temporal_downsample)
        self.conv1 = CausalConv3d(2 * z, 2 * z, 1)
        self.conv2 = CausalConv3d(z, z, 1)
        self.decoder = Decoder3d(config.dim, z, config.dim_mult, config.num_res_blocks,
                                 tuple(reversed(config.temporal_downsample)))
    @property
    def dtype(self) -> torch.dtype:
        return self.conv2.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.conv2.weight.device

    def _per_channel(self, values: tuple[float, ...], like: torch.Tensor) -> torch.Tensor:
        """A per-channel constant of the config as [1, z, 1, 1, 1] in ``like``'s dtype and device.

        Built from the config on use (not a buffer): it stays exact in float32 until this cast, and a
        model built on the meta device needs nothing beyond its checkpoint.
        """
        return torch.tensor(values, dtype=torch.float32, device=like.device).to(like.dtype).view(1, -1, 1, 1, 1)

    def _inverse_std(self) -> tuple[float, ...]:
        std = torch.tensor(self.config.latent_std, dtype=torch.float32)
        return tuple((1.0 / std).tolist())

    def normalise(self, mu: torch.Tensor) -> torch.Tensor:
        """Raw latent mean -> DiT latent space: ``(mu - mean) * (1 / std)`` (reciprocal as the reference)."""
        return (mu - self._per_channel(self.config.latent_mean, mu)) * self._per_channel(self._inverse_std(), mu)

    def denormalise(self, z: torch.Tensor) -> torch.Tensor:
        """DiT latent space -> decoder input scale: ``z / (1 / std) + mean`` (the reference divides)."""
        return z / self._per_channel(self._inverse_std(), z) + self._per_channel(self.config.latent_mean, z)

    def load_parts(self, state_dict: Mapping[str, torch.Tensor]) -> tuple[str, ...]:
        """Load a checkpoint holding complete top-level parts (e.g. only ``decoder`` + ``conv2``).

        Every part the checkpoint touches must be present exactly (no missing, extra or mis-shaped key);
        parts it does not touch are left as they are. Returns the loaded part names.
        """
        own = self.state_dict()
        parts = sorted({key.split(".", 1)[0] for key in state_dict})
        unknown = [p for p in parts if p not in self._modules]
        if unknown:
            raise CheckpointError(f"VAE checkpoint has unknown top-level parts {unknown}")
        expected = {key for key in own if key.split(".", 1)[0] in parts}
        missing, extra = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
        if missing or extra:
            raise CheckpointError(f"VAE checkpoint parts {parts}: missing keys {missing[:5]}, "
                                  f"unexpected keys {extra[:5]}")
        bad = [k for k in expected if tuple(state_dict[k].shape) != tuple(own[k].shape)]
        if bad:
            k = sorted(bad)[0]
            raise CheckpointError(f"VAE checkpoint key {k}: shape {tuple(state_dict[k].shape)}, "
                                  f"expected {tuple(own[k].shape)}")
        with torch.no_grad():
            for key in expected:
                own[key].copy_(state_dict[key].to(own[key].dtype))
        return tuple(parts)


def frames_for(config: VAEConfig, num_latents: int, first: bool) -> int:
    """Video frames decoded from ``num_latents`` latents (the stream's first latent yields one frame)."""
    t = config.temporal_factor
    return t * num_latents - (t - 1) if first and num_latents > 0 else t * num_latents


class _CausalStream:
    """A causal VAE half's state across calls and a count of what it has seen (``COUNTER``), saved and
    restored as a save point's share of it."""

    COUNTER = ""

    def __init__(self, vae: WanVAE):
        self.vae = vae
        self.reset()

    def _half(self):
        raise NotImplementedError

    def reset(self) -> None:
        """Start a new stream: forget every frame seen so far."""
        self.state = self._half().new_state()
        setattr(self, self.COUNTER, 0)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The causal state after the frames so far (a save point's share)."""
        return {self.COUNTER: integer(getattr(self, self.COUNTER)), **nest("stream", self.state.state_tensors())}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.reset()
        setattr(self, self.COUNTER, as_int(tensors[self.COUNTER]))
        self.state.load_state_tensors(sub("stream", tensors), self.vae.device, self.vae.dtype)


class StreamingDecoder(_CausalStream):
    """Decodes one generation's latents chunk by chunk, carrying the decoder's causal state between calls."""

    COUNTER = "latents_seen"

    def _half(self):
        return self.vae.decoder

    def frames_for(self, num_latents: int) -> int:
        """Frames the next ``decode_chunk`` call of ``num_latents`` latents will return."""
        return frames_for(self.vae.config, num_latents, first=self.latents_seen == 0)

    @torch.no_grad()
    def decode_chunk(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalised latents ``[B, z, F, h, w]`` -> raw frames ``[B, T, 3, H, W]`` float32, not clamped."""
        vae = self.vae
        if latents.dim() != 5 or latents.shape[1] != vae.config.z_dim:
            raise InputError(f"latents must be [B, {vae.config.z_dim}, F, h, w], got {tuple(latents.shape)}")
        with one_intra_op_thread(vae.device):   # the same frames on the loop and on the decode worker
            z = vae.conv2(vae.denormalise(latents.to(vae.device, vae.dtype)))   # [B, z, F, h, w]
            # The decoder is causal: one latent frame per call keeps its per-call work bounded.
            pieces = [vae.decoder(z[:, :, f:f + 1], self.state) for f in range(z.shape[2])]
        self.latents_seen += z.shape[2]
        video = torch.cat(pieces, dim=2)                              # [B, 3, T, H, W]
        return video.transpose(1, 2).float()                          # [B, T, 3, H, W]


@dataclass(frozen=True)
class EncodedLatent:
    """One latent frame of the start-image conditioning, with the raw pieces before it."""

    encoder_out: torch.Tensor   # [B, 2z, 1, h, w] encoder output (mean and log-variance halves)
    mu_raw: torch.Tensor        # [B, z, 1, h, w]  channels 0..z-1 of conv1(encoder_out)
    latent: torch.Tensor        # [B, z, 1, h, w]  normalised mu (what the DiT sees)


class StartImageEncoder:
    """Start-image conditioning of MG2, streamed: latent 0 encodes the image, latent i >= 1 encodes zeros.

    The reference encodes ``image + 4(N-1) zero frames`` causally (call 0: the image; call i: video frames
    4i-3 .. 4i). Here each call is made when its latent is asked for, so sessions of any length never hold
    more than one group of frames. From call 1 on the input is always the same zero group, so once a call
    leaves every slot of the causal state bitwise unchanged, every later call would repeat it exactly: its
    result is memoised, the state dropped, and later latents cost nothing.
    """

    def __init__(self, vae: WanVAE, image: torch.Tensor, *, memoise: bool = True):
        if image.dim() == 4:
            image = image.unsqueeze(2)                                # [B, 3, 1, H, W]
        cfg = vae.config
        if image.dim() != 5 or image.shape[1] != 3 or image.shape[2] != 1:
            raise InputError(f"start image must be [B, 3, H, W] or [B, 3, 1, H, W], got {tuple(image.shape)}")
        if image.shape[-2] % cfg.spatial_factor or image.shape[-1] % cfg.spatial_factor:
            raise InputError(f"start image size {tuple(image.shape[-2:])} is not a multiple of "
                             f"{cfg.spatial_factor}")
        self.vae = vae
        self.image = image.to(vae.device, vae.dtype)
        self.memoise = memoise
        self.state: StreamState | None = vae.encoder.new_state()   # None once memoised
        self.position = 0            # absolute index of the next latent frame
        self.encoder_calls = 0       # real encoder passes made (for tests and logs)
        self._previous: EncodedLatent | None = None
        self._fixed: EncodedLatent | None = None

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Position, causal state (until memoised) and the last / fixed-point steps."""
        out = {"position": integer(self.position), "encoder_calls": integer(self.encoder_calls)}
        if self.state is not None:
            out.update(nest("stream", self.state.state_tensors()))
        for name, step in (("previous", self._previous), ("fixed", self._fixed)):
            if step is not None:
                out.update({f"{name}.{field}": getattr(step, field).detach().cpu().contiguous()
                            for field in ("encoder_out", "mu_raw", "latent")})
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        vae = self.vae
        self.position = as_int(tensors["position"])
        self.encoder_calls = as_int(tensors["encoder_calls"])
        steps = {}
        for name in ("previous", "fixed"):
            part = sub(name, tensors)
            steps[name] = EncodedLatent(*(optional(part, f, vae.device, vae.dtype)
                                          for f in ("encoder_out", "mu_raw", "latent"))) if part else None
        self._previous, self._fixed = steps["previous"], steps["fixed"]
        if self._fixed is None:
            self.state = vae.encoder.new_state()
            self.state.load_state_tensors(sub("stream", tensors), vae.device, vae.dtype)
        else:
            self.state = None

    @property
    def converged(self) -> bool:
        return self._fixed is not None

    @property
    def mask_channels(self) -> int:
        # MG2's mask has one channel per video frame folded into a latent frame.
        return self.vae.config.temporal_factor

    @torch.no_grad()
    def next_step(self) -> EncodedLatent:
        """Encode the next latent frame (or return the memoised fixed point) with its raw pieces."""
        if self._fixed is not None:
            self.position += 1
            return self._fixed
        vae = self.vae
        if self.position == 0:
            frames = self.image
        else:
            b, _, _, h, w = self.image.shape
            frames = self.image.new_zeros(b, 3, vae.config.temporal_factor, h, w)   # [B, 3, t, H, W]
        before = self.state.snapshot()
        with one_intra_op_thread(vae.device):
            encoder_out = vae.encoder(frames, self.state)             # [B, 2z, 1, h, w]
            mu_raw = vae.conv1(encoder_out)[:, :vae.config.z_dim]     # [B, z, 1, h, w]
        self.encoder_calls += 1
        step = EncodedLatent(encoder_out, mu_raw, vae.normalise(mu_raw))
        # The state check alone proves the fixed point (same state, same zero input from now on); the
        # output check is a cheap second guard.
        if (self.memoise and self.position >= 1 and self.state.equals(before)
                and self._previous is not None and torch.equal(step.encoder_out, self._previous.encoder_out)):
            self._fixed = step
            self.state = None        # the whole causal state is no longer needed
        self._previous = step
        self.position += 1
        return step

    def next_latent(self) -> torch.Tensor:
        """The next normalised latent frame ``[B, z, 1, h, w]``."""
        return self.next_step().latent

    def latents(self, num_latents: int) -> torch.Tensor:
        """The next ``num_latents`` normalised latent frames ``[B, z, n, h, w]``."""
        return torch.cat([self.next_latent() for _ in range(num_latents)], dim=2)

    def cond_concat(self, num_latents: int) -> torch.Tensor:
        """``[mask ; latent]`` for the next ``num_latents`` frames: ``[B, t + z, n, h, w]``.

        The mask (t = temporal_factor channels) is 1 on absolute latent frame 0 and 0 elsewhere.
        """
        start = self.position
        latent = self.latents(num_latents)                            # [B, z, n, h, w]
        b, _, n, h, w = latent.shape
        mask = latent.new_zeros(b, self.mask_channels, n, h, w)       # [B, t, n, h, w]
        if start == 0 and n > 0:
            mask[:, :, 0] = 1.0
        return torch.cat([mask, latent], dim=1)


class StreamingEncoder(_CausalStream):
    """Encodes one video's frames chunk by chunk into normalised latents, carrying the encoder's causal
    state between calls.

    As Wan's ``encode``: the stream's first frame alone, then groups of ``temporal_factor`` frames, one
    latent frame per group; the latent is ``normalise`` of the posterior's mean (channels 0..z-1 of
    ``conv1``), exactly what :class:`StartImageEncoder` computes for the start image.
    """

    COUNTER = "frames_seen"

    def _half(self):
        return self.vae.encoder

    @torch.no_grad()
    def encode_chunk(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames ``[B, 3, T, H, W]`` in [-1, 1] -> normalised latents ``[B, z, n, h, w]``: T = 1 + t(n - 1)
        for the stream's first chunk, t n after (t = temporal_factor)."""
        vae, t = self.vae, self.vae.config.temporal_factor
        first = 1 if self.frames_seen == 0 else 0
        if frames.dim() != 5 or frames.shape[1] != 3 or (frames.shape[2] - first) % t or frames.shape[2] < 1:
            raise InputError(f"frames must be [B, 3, T, H, W] with T = {first} + {t}k, got {tuple(frames.shape)}")
        frames = frames.to(vae.device, vae.dtype)
        bounds = ([(0, 1)] if first else []) + [(s, s + t) for s in range(first, frames.shape[2], t)]
        latents = []
        with one_intra_op_thread(vae.device):
            for start, stop in bounds:
                encoder_out = vae.encoder(frames[:, :, start:stop], self.state)    # [B, 2z, 1, h, w]
                latents.append(vae.normalise(vae.conv1(encoder_out)[:, :vae.config.z_dim]))
        self.frames_seen += frames.shape[2]
        return torch.cat(latents, dim=2)
