"""LingBot-World-Fast's prompt encoder: Wan's UMT5-XXL encoder file run as ``transformers``' ``UMT5EncoderModel``.

Owns the text path of the release: the prompt's cleaning and tokenisation as the official code does it
(the release's ``google/umt5-xxl`` tokenizer folder, padded to 512 tokens, the end-of-text token
appended), the key map from Wan's own T5 module (``models_t5_umt5-xxl-enc-bf16.pth``) to the Hugging
Face UMT5 names with a strict key and shape check (a missing, unexpected or mis-shaped key is one
``CheckpointError`` line naming the key and the file), and the encoder's output trimmed to the real
tokens, ``[1, n, d_model]`` (the DiT zero-pads it to 512 rows itself).

Why the map is exact: Wan's encoder and UMT5's are the same network — a relative position bias in every
layer (32 bidirectional buckets, distances up to 128), no attention scaling, RMS norms with eps 1e-6
before attention and feed-forward, a tanh-GELU gated feed-forward (``gate.0`` = ``wi_0`` through the
GELU, ``fc1`` = ``wi_1``, ``fc2`` = ``wo``), a final RMS norm, and padded keys masked out.

``transformers`` is imported when a text encoder is built, not when this module is; without it the
error is one line naming the pip command (``engine.runtime.dependencies``).

Cleaning: the official code runs ``ftfy.fix_text`` (mojibake repair), unescapes HTML entities twice and
collapses white space. ``ftfy`` is not a dependency here: the prompt is NFC-normalised (what ``ftfy``
also does) and the rest is done the same way; text damaged by a wrong decoding is not repaired.
"""
from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from engine.runtime.dependencies import require
from engine.errors import CheckpointError

WAN_T5_FILE = "models_t5_umt5-xxl-enc-bf16.pth"
TOKENIZER_DIR = "google/umt5-xxl"
TEXT_LEN = 512                 # the official ``text_len``: tokens after padding / truncation
MAX_DISTANCE = 128             # Wan's ``T5RelativeEmbedding`` max_dist
LAYER_NORM_EPS = 1e-6          # Wan's ``T5LayerNorm`` eps


def require_transformers():
    """The ``transformers`` module, or a one-line error naming the install command."""
    return require("transformers")


def clean_prompt(text: str) -> str:
    """The official ``whitespace`` cleaning, without ``ftfy`` (see the module docstring)."""
    text = unicodedata.normalize("NFC", text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class T5Shape:
    """The encoder's sizes, read from the shapes of Wan's state dict."""

    vocab: int
    dim: int
    dim_attn: int
    dim_ffn: int
    num_heads: int
    num_layers: int
    num_buckets: int

    def wan_key_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every key of Wan's encoder state dict (``T5Encoder`` with a position bias per layer) and its shape."""
        shapes = {"token_embedding.weight": (self.vocab, self.dim), "norm.weight": (self.dim,)}
        for i in range(self.num_layers):
            b = f"blocks.{i}."
            shapes.update({b + "norm1.weight": (self.dim,), b + "norm2.weight": (self.dim,),
                           **{b + f"attn.{n}.weight": (self.dim_attn, self.dim) for n in "qkv"},
                           b + "attn.o.weight": (self.dim, self.dim_attn),
                           b + "ffn.gate.0.weight": (self.dim_ffn, self.dim),
                           b + "ffn.fc1.weight": (self.dim_ffn, self.dim),
                           b + "ffn.fc2.weight": (self.dim, self.dim_ffn),
                           b + "pos_embedding.embedding.weight": (self.num_buckets, self.num_heads)})
        return shapes


def _shape_of(state: Mapping[str, torch.Tensor], key: str, path: Path, dims: int) -> tuple[int, ...]:
    if key not in state:
        raise CheckpointError(f"missing key {key!r} in {path}")
    shape = tuple(state[key].shape)
    if len(shape) != dims:
        raise CheckpointError(f"key {key!r} in {path} has shape {shape}, expected {dims} dimensions")
    return shape


def t5_shape(state: Mapping[str, torch.Tensor], path: Path) -> T5Shape:
    """Sizes from the embedding, the first block's projections and its position-bias table."""
    vocab, dim = _shape_of(state, "token_embedding.weight", path, 2)
    dim_attn, _ = _shape_of(state, "blocks.0.attn.q.weight", path, 2)
    dim_ffn, _ = _shape_of(state, "blocks.0.ffn.fc1.weight", path, 2)
    buckets, heads = _shape_of(state, "blocks.0.pos_embedding.embedding.weight", path, 2)
    layers = len({k.split(".")[1] for k in state if k.startswith("blocks.") and k.split(".")[1].isdigit()})
    if dim_attn % heads:
        raise CheckpointError(f"key 'blocks.0.attn.q.weight' in {path}: {dim_attn} rows do not split into "
                              f"{heads} heads")
    return T5Shape(vocab, dim, dim_attn, dim_ffn, heads, layers, buckets)


# Wan's block keys -> UMT5's (layer 0: self-attention with its own position bias; layer 1: feed-forward)
_BLOCK_MAP = {"norm1.weight": "layer.0.layer_norm.weight",
              **{f"attn.{n}.weight": f"layer.0.SelfAttention.{n}.weight" for n in "qkvo"},
              "pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
              "norm2.weight": "layer.1.layer_norm.weight",
              "ffn.gate.0.weight": "layer.1.DenseReluDense.wi_0.weight",     # through the tanh-GELU
              "ffn.fc1.weight": "layer.1.DenseReluDense.wi_1.weight",
              "ffn.fc2.weight": "layer.1.DenseReluDense.wo.weight"}


def hf_name(wan_key: str) -> list[str]:
    """The Hugging Face UMT5 name(s) of one Wan key (the embedding is shared: two names, one tensor)."""
    if wan_key == "token_embedding.weight":
        return ["shared.weight", "encoder.embed_tokens.weight"]
    if wan_key == "norm.weight":
        return ["encoder.final_layer_norm.weight"]
    _, index, rest = wan_key.split(".", 2)
    return [f"encoder.block.{index}.{_BLOCK_MAP[rest]}"]


def hf_state(state: Mapping[str, torch.Tensor], shape: T5Shape, path: Path) -> dict[str, torch.Tensor]:
    """Wan's encoder state under UMT5's names, after the strict check of every key and shape."""
    expected = shape.wan_key_shapes()
    for key in sorted(expected):
        if key not in state:
            raise CheckpointError(f"missing key {key!r} in {path}")
    for key in sorted(state):
        if key not in expected:
            raise CheckpointError(f"unexpected key {key!r} in {path}")
        if tuple(state[key].shape) != expected[key]:
            raise CheckpointError(f"key {key!r} in {path} has shape {tuple(state[key].shape)}, "
                                  f"expected {expected[key]}")
    return {name: state[key] for key in expected for name in hf_name(key)}


def umt5_config(shape: T5Shape):
    """``UMT5Config`` of Wan's encoder (dropout off: inference only)."""
    transformers = require_transformers()
    return transformers.UMT5Config(
        vocab_size=shape.vocab, d_model=shape.dim, d_kv=shape.dim_attn // shape.num_heads, d_ff=shape.dim_ffn,
        num_layers=shape.num_layers, num_heads=shape.num_heads, relative_attention_num_buckets=shape.num_buckets,
        relative_attention_max_distance=MAX_DISTANCE, feed_forward_proj="gated-gelu", dropout_rate=0.0,
        layer_norm_epsilon=LAYER_NORM_EPS, is_encoder_decoder=False, use_cache=False)


def build_encoder(state: Mapping[str, torch.Tensor], path: Path, dtype: torch.dtype | None,
                  device: torch.device | str):
    """``UMT5EncoderModel`` holding Wan's weights (in ``dtype``; None: the file's own dtype)."""
    transformers = require_transformers()
    shape = t5_shape(state, path)
    mapped = hf_state(state, shape, path)
    dtype = dtype or state["token_embedding.weight"].dtype
    with torch.device("meta"):
        model = transformers.UMT5EncoderModel(umt5_config(shape))
    own = model.state_dict()
    assert set(own) == set(mapped), sorted(set(own) ^ set(mapped))[:4]   # our map's bug, not the user's
    embedding = mapped["shared.weight"].to(device=device, dtype=dtype)
    converted = {k: (embedding if k.endswith(("shared.weight", "embed_tokens.weight"))
                     else v.to(device=device, dtype=dtype)) for k, v in mapped.items()}
    model.load_state_dict(converted, strict=True, assign=True)
    model.encoder.embed_tokens = model.shared          # one tensor, as the tie would make it
    return model.eval().requires_grad_(False)


def load_tokenizer(folder: Path):
    """The release's tokenizer folder (``google/umt5-xxl``), read with ``AutoTokenizer``, offline."""
    transformers = require_transformers()
    if not folder.is_dir():
        raise CheckpointError(f"tokenizer folder missing: {folder}")
    from engine.model.load import checked_checkpoint_file
    for entry in sorted(folder.iterdir()):   # a FIFO among its files would block the tokenizer's open forever
        if not entry.is_dir():
            checked_checkpoint_file(entry)
    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise CheckpointError(f"cannot read the tokenizer in {folder}: {reason}") from None


class TextEncoder:
    """A prompt -> the context rows the DiT cross-attends to, ``[1, n, d_model]`` (n real tokens)."""

    def __init__(self, model, tokenizer, text_len: int = TEXT_LEN):
        self.model, self.tokenizer, self.text_len = model, tokenizer, text_len

    @property
    def width(self) -> int:
        return self.model.config.d_model

    def tokens(self, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and mask [1, text_len]: cleaned, end-of-text appended, padded / truncated to text_len."""
        batch = self.tokenizer([clean_prompt(prompt)], return_tensors="pt", padding="max_length",
                               truncation=True, max_length=self.text_len, add_special_tokens=True)
        return batch.input_ids, batch.attention_mask

    @torch.no_grad()
    def encode(self, prompt: str) -> torch.Tensor:
        ids, mask = self.tokens(prompt)
        device = self.model.shared.weight.device
        hidden = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        return hidden[:, : int(mask.sum())]


def load_text_encoder(t5_file: Path, tokenizer_dir: Path, device: torch.device | str,
                      dtype: torch.dtype | None = None) -> TextEncoder:
    from engine.model.load import read_weights     # shared safe reader (torch.load weights_only)

    model = build_encoder(read_weights(t5_file), t5_file, dtype, device)
    return TextEncoder(model, load_tokenizer(tokenizer_dir))
