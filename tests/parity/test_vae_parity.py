"""Wan2.1 causal VAE: parity with the official MG2 code (fixture §4.4 decoder, §7.2 encoder) and the
streaming encoder's memoisation.

The parity cases run the real full-width architecture (base 96 channels) on small frames with weights
rebuilt from the fixtures' key lists; every stored tensor must match to ``max|diff|/std < 1e-4``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import VAEConfig
from engine.errors import CheckpointError
from engine.model.fixture import DEFAULT_TOLERANCE, Fixture, relative_error
from engine.model.seeded_weights import checksum, fill_module_
from engine.model.vae import StartImageEncoder, StreamingDecoder, WanVAE, frames_for


def _rebuild(fixture: Fixture, prefix: str, checksum_key: str) -> dict[str, torch.Tensor]:
    """The case's weights, verified row by row against the stored checksum table."""
    weights = fixture.weights(prefix)
    keys = [key for key, _ in fixture.json(f"{prefix}weight_keys")]
    ours = np.array([checksum(weights[key].numpy()) for key in keys])
    ref = fixture.tensor(checksum_key).numpy()
    assert ours.shape == ref.shape
    # Float64 sums of identical float32 values; only summation order may differ.
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-9)
    return weights


def test_state_dict_keys_match_official_checkpoint(parity_fixtures):
    """Encoder + decoder key lists of the fixtures together are exactly the module's state_dict."""
    dec = Fixture.open(parity_fixtures / "universal_tiny.safetensors")
    enc = Fixture.open(parity_fixtures / "universal_tiny_vae_encoder.safetensors")
    official = {k: tuple(s) for k, s in dec.json("vae_weight_keys") + enc.json("vae_encoder_weight_keys")}
    ours = {k: tuple(t.shape) for k, t in WanVAE().state_dict().items()}
    assert ours == official
    assert WanVAE().decoder.num_slots == 32      # the official streaming cache has 32 slots


def test_load_parts_is_strict():
    vae = WanVAE(VAEConfig(dim=8))
    part = {k: v for k, v in vae.state_dict().items() if k.startswith(("decoder.", "conv2."))}
    assert vae.load_parts(part) == ("conv2", "decoder")
    with pytest.raises(CheckpointError):
        vae.load_parts({k: v for k, v in part.items() if k != "decoder.head.2.bias"})
    with pytest.raises(CheckpointError):
        vae.load_parts({**part, "decoder.extra.weight": torch.zeros(1)})
    with pytest.raises(CheckpointError):
        vae.load_parts({**part, "conv2.bias": torch.zeros(3)})


@pytest.mark.slow
def test_decoder_parity(parity_fixtures):
    fx = Fixture.open(parity_fixtures / "universal_tiny.safetensors")
    vae = WanVAE().eval()
    assert vae.load_parts(_rebuild(fx, "vae_", "vae.weights.checksum")) == ("conv2", "decoder")
    latents = fx.tensor("vae.latents_in")                         # [1, 16, 9, 8, 16] normalised
    ref = fx.tensor("vae.frames_raw")                             # [1, 33, 3, 64, 128] unclamped
    per_chunk = fx.tensor("vae.frames_per_chunk").tolist()        # [9, 12, 12]
    decoder = StreamingDecoder(vae)
    start = 0
    errors = []
    for c, expected_frames in enumerate(per_chunk):
        assert decoder.frames_for(3) == expected_frames
        frames = decoder.decode_chunk(latents[:, :, 3 * c:3 * c + 3])
        assert frames.shape == (1, expected_frames, 3, 64, 128) and frames.dtype == torch.float32
        errors.append(relative_error(frames, ref[:, start:start + expected_frames]))
        start += expected_frames
    assert start == ref.shape[1]
    print(f"vae.frames_raw per chunk: {['%.2e' % e for e in errors]}")
    assert max(errors) < DEFAULT_TOLERANCE, errors


@pytest.mark.slow
def test_encoder_parity(parity_fixtures):
    fx = Fixture.open(parity_fixtures / "universal_tiny_vae_encoder.safetensors")
    vae = WanVAE().eval()
    assert vae.load_parts(_rebuild(fx, "vae_encoder_", "vaeenc.weights.checksum")) == ("conv1", "encoder")
    image = fx.tensor("vaeenc.image")                             # [1, 3, 1, 64, 96] in [-1, 1]
    n = fx.tensor("vaeenc.latent").shape[2]

    encoder = StartImageEncoder(vae, image[:, :, 0])              # the [B, 3, H, W] form
    steps = [encoder.next_step() for _ in range(n)]
    got = {name: torch.cat([getattr(s, name) for s in steps], dim=2)
           for name in ("encoder_out", "mu_raw", "latent")}
    # A fresh stream so that cond_concat's mask sees absolute frame 0.
    got["cond_concat"] = StartImageEncoder(vae, image).cond_concat(n)
    errors = {name: relative_error(t, fx.tensor(f"vaeenc.{name}")) for name, t in got.items()}
    print("vaeenc:", {k: f"{v:.2e}" for k, v in errors.items()})
    assert all(e < DEFAULT_TOLERANCE for e in errors.values()), errors
    mask = got["cond_concat"][:, :4]
    assert torch.equal(mask[:, :, 0], torch.ones_like(mask[:, :, 0])) and not mask[:, :, 1:].any()


def test_frames_for():
    cfg = VAEConfig()
    assert [frames_for(cfg, 3, first=True), frames_for(cfg, 3, first=False)] == [9, 12]
    assert frames_for(cfg, 1, first=True) == 1 and frames_for(cfg, 0, first=True) == 0


def test_streaming_decoder_chunking_is_invisible():
    """Decoding 1+2 latents or 3 at once gives the same frames (the state carries across calls)."""
    vae = fill_module_(WanVAE(VAEConfig(dim=8)), 11).eval()
    latents = torch.randn(1, 16, 3, 2, 3)
    whole = StreamingDecoder(vae).decode_chunk(latents)
    dec = StreamingDecoder(vae)
    split = torch.cat([dec.decode_chunk(latents[:, :, :1]), dec.decode_chunk(latents[:, :, 1:])], dim=1)
    assert whole.shape == (1, 9, 3, 16, 24)
    assert relative_error(split, whole) < 1e-6
    dec.reset()
    assert dec.frames_for(3) == 9 and torch.equal(dec.decode_chunk(latents), whole)


def test_start_image_memoisation():
    """Memoised latents equal full recomputation bitwise, and the memo stops the encoder calls."""
    vae = fill_module_(WanVAE(VAEConfig(dim=8)), 5).eval()
    image = torch.rand(1, 3, 16, 24, generator=torch.Generator().manual_seed(0)) * 2 - 1
    n = 40
    memo = StartImageEncoder(vae, image)
    plain = StartImageEncoder(vae, image, memoise=False)
    fast, slow = memo.cond_concat(n), plain.cond_concat(n)
    assert fast.shape == (1, 4 + 16, n, 2, 3)
    assert torch.equal(fast, slow)
    assert plain.encoder_calls == n and not plain.converged
    assert memo.converged and memo.encoder_calls < n - 4, memo.encoder_calls
    # The early latents really differ (the memo is not trivially a constant tail) ...
    assert not torch.equal(slow[:, :, 1], slow[:, :, 2])
    # ... and later requests keep costing nothing.
    calls = memo.encoder_calls
    assert torch.equal(memo.next_latent(), slow[:, 4:, -1:]) and memo.encoder_calls == calls
    assert memo.position == n + 1
