"""Wan2.1 causal VAE: parity with the official MG2 code (fixture §4.4 decoder, §7.2 encoder) and the
streaming encoder's memoisation.

The parity cases run the real full-width architecture (base 96 channels) on small frames with weights
rebuilt from the fixtures' key lists; every stored tensor must match to ``max|diff|/std < 1e-4``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from engine.config import VAEConfig
from engine.errors import CheckpointError
from engine.model.parity import vae as parity_vae
from engine.model.parity.fixture import DEFAULT_TOLERANCE, Fixture, relative_error
from engine.model.seeded_weights import checksum, fill_module_, seeded_array
from engine.model.vae import StartImageEncoder, StreamingDecoder, WanVAE, frames_for


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


def _tiny_checksum_fixture(tmp_path, corrupt: bool) -> Fixture:
    """A two-key fixture whose checksum table is right, or wrong in the last bit of one row."""
    keys = [["a.bias", [3]], ["a.weight", [4, 3]]]
    table = np.array([checksum(seeded_array(7, k, tuple(s))) for k, s in keys])
    if corrupt:
        table[1, 0] += 1e-9            # far above summation noise: the size of a one-ulp change of one value
    path = tmp_path / ("bad.safetensors" if corrupt else "good.safetensors")
    save_file({"t.weights.checksum": torch.from_numpy(table)}, str(path),
              metadata={"t_weight_keys": json.dumps(keys), "t_weight_seed": "7"})
    return Fixture.open(path)


def test_verified_weights_checks_every_key(tmp_path):
    weights = parity_vae.verified_weights(_tiny_checksum_fixture(tmp_path, False), "t_", "t.weights.checksum")
    assert sorted(weights) == ["a.bias", "a.weight"] and weights["a.weight"].shape == (4, 3)
    with pytest.raises(parity_vae.WeightChecksumError, match="a.weight"):
        parity_vae.verified_weights(_tiny_checksum_fixture(tmp_path, True), "t_", "t.weights.checksum")


@pytest.mark.parametrize("per_chunk", [[9, 12], [12, 9]])
def test_decoder_rows_check_frame_counts(tmp_path, per_chunk):
    """A tiny decoder replayed against its own output: exact rows, or failing rows for wrong counts."""
    vae = fill_module_(WanVAE(VAEConfig(dim=8)), 3).eval()
    latents = torch.randn(1, 16, 6, 2, 3, generator=torch.Generator().manual_seed(0))
    frames = StreamingDecoder(vae).decode_chunk(latents)            # [1, 21, 3, 16, 24]
    path = tmp_path / "decoder.safetensors"
    save_file({"vae.latents_in": latents, "vae.frames_raw": frames.contiguous(),
               "vae.frames_per_chunk": torch.tensor(per_chunk)}, str(path))
    rows = parity_vae.decoder_case_rows(Fixture.open(path), vae)
    if per_chunk == [9, 12]:
        assert rows == [("vae.frames_raw[chunk 0]", 0.0), ("vae.frames_raw[chunk 1]", 0.0)]
    else:
        assert [name.split(" (")[0] for name, _ in rows] == ["vae.frame_count[chunk 0]",
                                                              "vae.frame_count[chunk 1]"]
        assert all(e == float("inf") for _, e in rows)


@pytest.mark.slow
def test_decoder_parity(parity_fixtures):
    rows = parity_vae.vae_decoder_rows(parity_fixtures / "universal_tiny.safetensors")
    # One frames row per chunk means every chunk decoded the stored number of frames (a wrong count
    # replaces the chunk's row by an infinite-error vae.frame_count row).
    assert [name for name, _ in rows] == [f"vae.frames_raw[chunk {c}]" for c in range(3)]
    print("vae.frames_raw per chunk:", [f"{e:.2e}" for _, e in rows])
    assert all(e < DEFAULT_TOLERANCE for _, e in rows), rows


@pytest.mark.slow
def test_encoder_parity(parity_fixtures):
    fx = Fixture.open(parity_fixtures / "universal_tiny_vae_encoder.safetensors")
    got = parity_vae.encoder_outputs(fx, parity_vae.fixture_encoder_vae(fx))
    rows = parity_vae.encoder_case_rows(fx, got)
    assert [name for name, _ in rows] == ["vaeenc.encoder_out", "vaeenc.mu_raw", "vaeenc.latent",
                                          "vaeenc.cond_concat"]
    print("vaeenc:", {name: f"{e:.2e}" for name, e in rows})
    assert all(e < DEFAULT_TOLERANCE for _, e in rows), rows
    mask = got["cond_concat"][:, :4]
    assert torch.equal(mask[:, :, 0], torch.ones_like(mask[:, :, 0])) and not mask[:, :, 1:].any()


def test_frames_for():
    cfg = VAEConfig()
    assert [frames_for(cfg, 3, first=True), frames_for(cfg, 3, first=False)] == [9, 12]
    assert frames_for(cfg, 1, first=True) == 1 and frames_for(cfg, 0, first=True) == 0


# Split and whole decodes run the same per-frame decoder calls, but the first step (denormalise + conv2)
# sees 1 frame vs 3 and the thread pool partitions each conv reduction differently, so float32 sums
# are taken in another order. Each reordered reduction of n terms moves the result by about sqrt(n)
# units of roundoff (2**-24 ~ 6e-8) of its magnitude; through the decoder's ~30 conv layers that adds
# up to the 4-6e-6 of std measured with 1, 2 and 4 threads. The bound is therefore the parity tests'
# 1e-4 of std (20x margin), while a real streaming break (a cache frame dropped, foreign, duplicated or
# misordered) moves frames by about 4 std: four orders of magnitude above it.
STREAMING_BOUND = DEFAULT_TOLERANCE


def _split_decode(vae, latents, *, break_with=None):
    """Decode latents as 1 + 2 frames; ``break_with`` corrupts the decoder's state between the calls."""
    dec = StreamingDecoder(vae)
    first = dec.decode_chunk(latents[:, :, :1])
    if break_with == "foreign":                     # the second call continues another stream's cache
        dec = StreamingDecoder(vae)
        dec.decode_chunk(latents[:, :, :1] * 0.5)
    elif break_with == "duplicated":                # one cache frame fed twice
        dec.decode_chunk(latents[:, :, :1])
    rest = latents[:, :, [2, 1]] if break_with == "misordered" else latents[:, :, 1:]
    return torch.cat([first, dec.decode_chunk(rest)], dim=1)


def test_streaming_decoder_chunking_is_invisible():
    """Decoding 1+2 latents or 3 at once gives the same frames (the state carries across calls)."""
    vae = fill_module_(WanVAE(VAEConfig(dim=8)), 11).eval()
    latents = torch.randn(1, 16, 3, 2, 3, generator=torch.Generator().manual_seed(0))
    whole = StreamingDecoder(vae).decode_chunk(latents)
    assert whole.shape == (1, 9, 3, 16, 24)
    assert relative_error(_split_decode(vae, latents), whole) < STREAMING_BOUND
    dec = StreamingDecoder(vae)
    assert dec.frames_for(3) == 9 and torch.equal(dec.decode_chunk(latents), whole)


@pytest.mark.parametrize("break_with", ["foreign", "duplicated", "misordered"])
def test_streaming_bound_catches_broken_state(break_with):
    """The bound above is loose for roundoff only: every broken stream exceeds it a thousandfold."""
    vae = fill_module_(WanVAE(VAEConfig(dim=8)), 11).eval()
    latents = torch.randn(1, 16, 3, 2, 3, generator=torch.Generator().manual_seed(0))
    whole = StreamingDecoder(vae).decode_chunk(latents)
    broken = _split_decode(vae, latents, break_with=break_with)[:, :whole.shape[1]]
    assert relative_error(broken, whole) > 1000 * STREAMING_BOUND


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
