"""LingBot-World-Fast's text path (``engine.model.lingbot.text``): Wan's UMT5 encoder file loaded into
``transformers``' ``UMT5EncoderModel`` equals a direct float32 forward of Wan's encoder written here from
the official equations (relative buckets, unscaled attention with padded keys masked, RMS norms, tanh-GELU
gated feed-forward); the official tokenisation (cleaning, end-of-text token, padding to 512, trimmed
output); and the key map's strict checks, one line naming the key."""
from __future__ import annotations

import math
import sys

import pytest
import torch

from engine.errors import CheckpointError, ConfigError
from engine.model.lingbot.text import (TEXT_LEN, build_encoder, clean_prompt, load_tokenizer, TextEncoder,
                                       require_transformers)
from lingbot_release_support import TINY_T5, t5_state, write_tokenizer

PATH = "t5.pth"


def _bucket(rel: torch.Tensor, num_buckets: int, max_dist: int = 128) -> torch.Tensor:
    half = num_buckets // 2                        # bidirectional: half the buckets for each sign
    out = (rel > 0).long() * half
    rel = rel.abs()
    exact = half // 2
    large = exact + (torch.log(rel.float() / exact) / math.log(max_dist / exact) * (half - exact)).long()
    return out + torch.where(rel < exact, rel, large.clamp(max=half - 1))


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def reference_encoder(state: dict, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Wan's ``T5Encoder`` forward (one position bias per layer), float32, [B, L] -> [B, L, dim]."""
    s = TINY_T5
    b, length = ids.shape
    n, c = s.num_heads, s.dim_attn // s.num_heads
    x = state["token_embedding.weight"][ids]
    rel = torch.arange(length)[None, :] - torch.arange(length)[:, None]          # key - query
    buckets = _bucket(rel, s.num_buckets)
    for i in range(s.num_layers):
        p = f"blocks.{i}."
        bias = state[p + "pos_embedding.embedding.weight"][buckets].permute(2, 0, 1)[None]   # [1, N, L, L]
        h = _rms(x, state[p + "norm1.weight"])
        q, k, v = ((h @ state[p + f"attn.{name}.weight"].T).view(b, length, n, c) for name in "qkv")
        logits = torch.einsum("binc,bjnc->bnij", q, k) + bias                      # no 1/sqrt(c)
        logits = logits.masked_fill(mask.view(b, 1, 1, length) == 0, torch.finfo(x.dtype).min)
        attn = torch.einsum("bnij,bjnc->binc", logits.softmax(-1), v).reshape(b, length, n * c)
        x = x + attn @ state[p + "attn.o.weight"].T
        h = _rms(x, state[p + "norm2.weight"])
        gated = _gelu_tanh(h @ state[p + "ffn.gate.0.weight"].T) * (h @ state[p + "ffn.fc1.weight"].T)
        x = x + gated @ state[p + "ffn.fc2.weight"].T
    return _rms(x, state["norm.weight"])


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok") / "google" / "umt5-xxl"
    write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def encoder(tokenizer_dir):
    return TextEncoder(build_encoder(t5_state(), PATH, torch.float32, "cpu"), load_tokenizer(tokenizer_dir))


def test_the_mapped_umt5_equals_wans_encoder_forward(encoder):
    state = t5_state()
    prompt = "a red car down the street at night in the rain walk snow sky"
    ids, mask = encoder.tokens(prompt)
    real = int(mask.sum())
    ours = encoder.encode(prompt)
    ref = reference_encoder(state, ids, mask)[:, :real]
    assert ours.shape == (1, real, TINY_T5.dim) and real > 12
    assert torch.allclose(ours, ref, atol=2e-5, rtol=1e-5), (ours - ref).abs().max()
    # the position bias and the padding mask matter here: without the mask the rows change
    unmasked = reference_encoder(state, ids, torch.ones_like(mask))[:, :real]
    assert (unmasked - ref).abs().max() > 1e-3


def test_tokens_are_cleaned_end_with_eos_and_pad_to_512(encoder):
    ids, mask = encoder.tokens("  a   street&amp;amp; \n at\tnight ")
    assert ids.shape == mask.shape == (1, TEXT_LEN)
    real = int(mask.sum())
    assert ids[0, real - 1] == 1 and (ids[0, real:] == 0).all() and mask[0, :real].all()
    assert ids[0, :real].tolist() == encoder.tokens("a street&amp at night")[0][0, :real].tolist()
    assert clean_prompt("  a \u0065\u0301  b&amp;amp;lt; ") == "a \u00e9 b&lt;"


def test_a_different_prompt_gives_a_different_context(encoder):
    a, b = encoder.encode("a street"), encoder.encode("a tree")
    assert a.shape == b.shape and (a - b).abs().max() > 1e-2


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.pop("blocks.1.ffn.fc2.weight"), "missing key 'blocks.1.ffn.fc2.weight' in t5.pth"),
    (lambda s: s.__setitem__("blocks.0.attn.k.weight", torch.zeros(8, TINY_T5.dim)),
     "key 'blocks.0.attn.k.weight' in t5.pth has shape (8, 32), expected (32, 32)"),
    (lambda s: s.__setitem__("pos_embedding.embedding.weight", torch.zeros(32, 4)),
     "unexpected key 'pos_embedding.embedding.weight' in t5.pth"),
    (lambda s: s.pop("token_embedding.weight"), "missing key 'token_embedding.weight' in t5.pth"),
])
def test_a_bad_encoder_file_is_one_line_naming_the_key(edit, needle):
    state = t5_state()
    edit(state)
    with pytest.raises(CheckpointError) as info:
        build_encoder(state, PATH, torch.float32, "cpu")
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_without_transformers_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)      # what an absent package looks like to import
    with pytest.raises(ConfigError, match=r"pip install 'transformers>=4.40' \(or the worldpager\[lingbot\] extra\)"):
        require_transformers()


def test_the_release_sized_encoder_maps_key_for_key():
    """umt5-xxl as Wan builds it (vocab 256384, 24 layers, 64 heads, d_ff 10240): every key lands on a
    UMT5 key of the same shape (meta tensors: no memory)."""
    from engine.model.lingbot.text import T5Shape, hf_state, t5_shape, umt5_config

    transformers = require_transformers()
    full = T5Shape(vocab=256384, dim=4096, dim_attn=4096, dim_ffn=10240, num_heads=64, num_layers=24, num_buckets=32)
    state = {k: torch.empty(s, device="meta") for k, s in full.wan_key_shapes().items()}
    assert t5_shape(state, PATH) == full and len(state) == 2 + 24 * 10
    mapped = {k: tuple(v.shape) for k, v in hf_state(state, full, PATH).items()}
    with torch.device("meta"):
        model = transformers.UMT5EncoderModel(umt5_config(full))
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == mapped
    assert model.config.d_kv == 64 and model.config.dense_act_fn == "gelu_new"
