"""A tiny LingBot-World-Fast release folder in the official layout, with seeded weights, for tests.

``write_release(root)`` writes what the release holds, at ``lingbot-tiny``'s shape: the DiT
(``lingbot_world_fast/config.json`` in the diffusers style, with no ``text_dim``, and two safetensors
shards listed by an index), an 8-wide Wan2.1 VAE (``Wan2.1_VAE.pth``), a two-layer UMT5 encoder in
Wan's own key layout (``models_t5_umt5-xxl-enc-bf16.pth``, float32 here) and a word-level Unigram
tokenizer (``google/umt5-xxl/tokenizer.json``, built with the ``tokenizers`` library: no downloads).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.facts.lingbot_models import LINGBOT_TINY
from engine.model.lingbot.text import T5Shape
from engine.model.lingbot.weights import key_shapes
from engine.model.seeded_weights import fill_module_, seeded_state_dict
from engine.model.vae import WanVAE

SEED = 20261203
WORDS = "a street city road house tree car sky red blue green the at night walk down snow rain".split()
TINY_T5 = T5Shape(vocab=64, dim=32, dim_attn=32, dim_ffn=48, num_heads=4, num_layers=2, num_buckets=32)


def t5_state(shape: T5Shape = TINY_T5, seed: int = SEED) -> dict[str, torch.Tensor]:
    """Seeded weights under Wan's encoder keys (the position-bias tables scaled up so that they matter)."""
    state = seeded_state_dict(seed, sorted(shape.wan_key_shapes().items()))
    for key in state:
        if key.endswith("pos_embedding.embedding.weight"):
            state[key] = state[key] * 4.0
    return state


def write_tokenizer(folder: Path) -> None:
    """A Unigram tokenizer like UMT5's: ``<pad>`` 0, ``</s>`` 1 appended to every text, ``<unk>`` 2, Metaspace."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    letters = sorted(set("".join(WORDS)))
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -3.0)]
    vocab += [("\u2581" + w, -1.0) for w in WORDS] + [(c, -5.0) for c in letters]
    assert len(vocab) <= TINY_T5.vocab
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                             special_tokens=[("</s>", 1)])
    tokenizer.add_special_tokens(["<pad>", "</s>", "<unk>"])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
         "extra_ids": 0, "additional_special_tokens": []}))


def dit_config_json(**changes) -> dict:
    """``lingbot-tiny``'s DiT as the release's ``config.json`` states a DiT (no cache window, sink, text_dim)."""
    d = LINGBOT_TINY.dit
    config = {"_class_name": "WanModelFast", "_diffusers_version": "0.35.1", "_name_or_path": "lingbot_world_fast",
              "model_type": d.model_type,
              "control_type": d.control_type, "text_len": d.text_len, "in_dim": d.in_dim, "dim": d.dim,
              "ffn_dim": d.ffn_dim, "freq_dim": d.freq_dim, "out_dim": d.out_dim, "num_heads": d.num_heads,
              "num_layers": d.num_layers, "eps": d.eps}
    return {**config, **changes}


def write_release(root: Path, t5: dict[str, torch.Tensor] | None = None, control: str = "cam",
                  unstated: tuple[str, ...] = (), **config_changes) -> Path:
    """A tiny release folder; ``control``: the DiT's control type (its weights' shapes), ``unstated``:
    fields left out of its ``config.json`` (the release may not state ``control_type``)."""
    import dataclasses

    root.mkdir(parents=True, exist_ok=True)
    dit_folder = root / "lingbot_world_fast"
    dit_folder.mkdir(exist_ok=True)
    config = {k: v for k, v in dit_config_json(control_type=control, **config_changes).items() if k not in unstated}
    (dit_folder / "config.json").write_text(json.dumps(config, indent=2))
    dit_cfg = dataclasses.replace(LINGBOT_TINY.dit, text_dim=TINY_T5.dim, control_type=control)
    state = seeded_state_dict(SEED + 1, key_shapes(dit_cfg))
    keys = sorted(state)
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "diffusion_pytorch_model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for name, part in shards.items():
        save_file({k: state[k].contiguous() for k in part}, str(dit_folder / name))
    (dit_folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: name for name, part in shards.items() for k in part}}))
    torch.save(fill_module_(WanVAE(LINGBOT_TINY.vae), SEED + 2).state_dict(), root / "Wan2.1_VAE.pth")
    torch.save(t5 if t5 is not None else t5_state(), root / "models_t5_umt5-xxl-enc-bf16.pth")
    write_tokenizer(root / "google" / "umt5-xxl")
    return root
