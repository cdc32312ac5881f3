"""Parity of our Wan VAE against the official MG2 code's fixtures, and checksum-verified weight rebuilds.

Owns
* the rebuild of a case's weights from its fixture key list, each tensor verified against the stored
  checksum table (:func:`verified_weights`, :func:`check_checksum`; a mismatch raises
  :class:`WeightChecksumError`) -- the CLIP and DiT cases use the same check;
* the replay of the streaming-decoder case (fixture README §4.4, ``vae.*`` tensors of the DiT file):
  one row per chunk, ``vae.frames_raw[chunk c]``; a wrong frame count gives an infinite-error row
  ``vae.frame_count[chunk c] ...`` in place of that chunk's frames row;
* the replay of the start-image encoder case (§7.2, ``vaeenc.*``): rows ``vaeenc.encoder_out``,
  ``vaeenc.mu_raw``, ``vaeenc.latent``, ``vaeenc.cond_concat``.

Rows are ``(name, max |ours - ref| / std(ref))`` as in :mod:`engine.model.parity.dit`.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from engine.errors import InputError
from engine.model.parity.fixture import Fixture, relative_error
from engine.model.parity.dit import Row
from engine.model.seeded_weights import checksum
from engine.model.vae import StartImageEncoder, StreamingDecoder, WanVAE

# The stored checksums are float64 sums of the same float32 values in another summation order: allow
# that rounding noise only (measured <= 6e-14 absolute), far below a one-ulp change of one value (~1e-9).
CHECKSUM_RTOL, CHECKSUM_ATOL = 1e-13, 1e-11

ENCODER_OUTPUTS = ("encoder_out", "mu_raw", "latent", "cond_concat")


class WeightChecksumError(InputError):
    """Weights rebuilt from a fixture's key list do not reproduce the fixture's checksum table."""


def weight_seed(fx: Fixture, prefix: str) -> int:
    return int(fx.metadata[f"{prefix}weight_seed"])


def checksum_table(fx: Fixture, prefix: str, checksum_key: str) -> tuple[list, np.ndarray]:
    """The ``[[key, shape], ...]`` list under ``{prefix}weight_keys`` and its checksum rows (same order)."""
    keys = fx.json(f"{prefix}weight_keys")
    table = fx.tensor(checksum_key).numpy()
    names = [key for key, _ in keys]
    if names != sorted(names):
        raise InputError(f"{fx.path}: {prefix}weight_keys is not sorted by key")
    if table.shape != (len(keys), 2):
        raise InputError(f"{fx.path}: {checksum_key} has shape {table.shape}, expected ({len(keys)}, 2)")
    return keys, table


def check_checksum(fx: Fixture, key: str, values: np.ndarray, stored: np.ndarray) -> None:
    """Raise :class:`WeightChecksumError` unless ``values`` reproduce the stored ``[sum, indexed sum]``."""
    ours = np.array(checksum(values))
    if not np.allclose(ours, stored, rtol=CHECKSUM_RTOL, atol=CHECKSUM_ATOL):
        raise WeightChecksumError(f"{fx.path}: rebuilt weight {key} has checksum {ours.tolist()}, "
                                  f"the fixture stores {stored.tolist()} (generator or fixture changed)")


def verified_weights(fx: Fixture, prefix: str, checksum_key: str) -> dict[str, torch.Tensor]:
    """The case's weights (``Fixture.weights``), every tensor checked against ``checksum_key``."""
    keys, table = checksum_table(fx, prefix, checksum_key)
    weights = fx.weights(prefix)
    for row, (key, _) in enumerate(keys):
        check_checksum(fx, key, weights[key].numpy(), table[row])
    return weights


def fixture_vae(fx: Fixture, prefix: str, checksum_key: str, parts: tuple[str, ...]) -> WanVAE:
    """The full-width VAE with exactly the top-level ``parts`` loaded from the verified fixture weights.

    The key list must cover exactly those parts: a partial load would leave random weights behind.
    """
    vae = WanVAE().eval()
    loaded = vae.load_parts(verified_weights(fx, prefix, checksum_key))
    if loaded != parts:
        raise InputError(f"{fx.path}: {prefix}weight_keys holds VAE parts {loaded}, expected {parts}")
    return vae


def decoder_case_rows(fx: Fixture, vae: WanVAE) -> list[Row]:
    """Stream ``vae.latents_in`` through one decoder chunk by chunk; compare each chunk's raw frames."""
    latents = fx.tensor("vae.latents_in")                          # [B, z, F, h, w] normalised
    ref = fx.tensor("vae.frames_raw")                              # [B, T, 3, H, W] before the clamp
    per_chunk = fx.tensor("vae.frames_per_chunk").tolist()
    if latents.shape[2] % len(per_chunk) or sum(per_chunk) != ref.shape[1]:
        raise InputError(f"{fx.path}: {latents.shape[2]} latent frames, {ref.shape[1]} video frames "
                         f"and frames per chunk {per_chunk} do not fit together")
    n = latents.shape[2] // len(per_chunk)                         # latent frames per chunk
    decoder = StreamingDecoder(vae)
    rows, start = [], 0
    for c, expected in enumerate(per_chunk):
        predicted = decoder.frames_for(n)
        frames = decoder.decode_chunk(latents[:, :, c * n:(c + 1) * n])
        assert frames.dtype == torch.float32, frames.dtype         # decode_chunk's contract
        if predicted == frames.shape[1] == expected:
            rows.append((f"vae.frames_raw[chunk {c}]",
                         relative_error(frames, ref[:, start:start + expected])))
        else:
            # No error metric exists for frames that are not there: the row fails under any tolerance.
            rows.append((f"vae.frame_count[chunk {c}] (predicted {predicted}, decoded {frames.shape[1]}, "
                         f"stored {expected})", math.inf))
        start += expected
    return rows


def vae_decoder_rows(path: str | Path) -> list[Row]:
    """Rows of the decoder case stored in a DiT fixture file (``vae.*`` tensors)."""
    fx = Fixture.open(path)
    vae = fixture_vae(fx, "vae_", "vae.weights.checksum", ("conv2", "decoder"))
    return decoder_case_rows(fx, vae)


def encoder_outputs(fx: Fixture, vae: WanVAE) -> dict[str, torch.Tensor]:
    """Our tensors for every name in :data:`ENCODER_OUTPUTS`, from the stored ``vaeenc.image``."""
    image = fx.tensor("vaeenc.image")                              # [B, 3, 1, H, W] in [-1, 1]
    n = fx.tensor("vaeenc.latent").shape[2]
    encoder = StartImageEncoder(vae, image[:, :, 0])               # the [B, 3, H, W] form
    steps = [encoder.next_step() for _ in range(n)]
    got = {name: torch.cat([getattr(s, name) for s in steps], dim=2) for name in ENCODER_OUTPUTS[:3]}
    # A fresh stream so that cond_concat's mask sees absolute frame 0 (and the [B,3,1,H,W] form is used).
    got["cond_concat"] = StartImageEncoder(vae, image).cond_concat(n)
    return got


def encoder_case_rows(fx: Fixture, got: dict[str, torch.Tensor]) -> list[Row]:
    return [(f"vaeenc.{name}", relative_error(got[name], fx.tensor(f"vaeenc.{name}")))
            for name in ENCODER_OUTPUTS]


def fixture_encoder_vae(fx: Fixture) -> WanVAE:
    return fixture_vae(fx, "vae_encoder_", "vaeenc.weights.checksum", ("conv1", "encoder"))


def vae_encoder_rows(path: str | Path) -> list[Row]:
    """Rows of the start-image encoder case (``vaeenc.*`` tensors)."""
    fx = Fixture.open(path)
    return encoder_case_rows(fx, encoder_outputs(fx, fixture_encoder_vae(fx)))
