"""Full-size MG2 configurations built on the meta device: parameter counts and the checkpoint key set."""
from __future__ import annotations

import pytest
import torch

from engine.config import model_config
from engine.model.facts import model_facts
from engine.model.mg2 import CausalDiT


def official_universal_keys() -> dict[str, tuple[int, ...]]:
    """The universal checkpoint's key -> shape table, written out from the MG2 spec (§2.2)."""
    d, f, clip = 1536, 8960, 1280
    keys = {
        "patch_embedding.weight": (d, 36, 1, 2, 2), "patch_embedding.bias": (d,),
        "time_embedding.0.weight": (d, 256), "time_embedding.0.bias": (d,),
        "time_embedding.2.weight": (d, d), "time_embedding.2.bias": (d,),
        "time_projection.1.weight": (6 * d, d), "time_projection.1.bias": (6 * d,),
        "img_emb.proj.0.weight": (clip,), "img_emb.proj.0.bias": (clip,),
        "img_emb.proj.1.weight": (clip, clip), "img_emb.proj.1.bias": (clip,),
        "img_emb.proj.3.weight": (d, clip), "img_emb.proj.3.bias": (d,),
        "img_emb.proj.4.weight": (d,), "img_emb.proj.4.bias": (d,),
        "head.modulation": (1, 2, d), "head.head.weight": (64, d), "head.head.bias": (64,),
    }
    for n in range(30):
        p = f"blocks.{n}."
        keys[p + "modulation"] = (1, 6, d)
        for attn in ("self_attn", "cross_attn"):
            for lin in "qkvo":
                keys[f"{p}{attn}.{lin}.weight"] = (d, d)
                keys[f"{p}{attn}.{lin}.bias"] = (d,)
            keys[f"{p}{attn}.norm_q.weight"] = (d,)
            keys[f"{p}{attn}.norm_k.weight"] = (d,)
        keys[p + "norm3.weight"] = (d,)
        keys[p + "norm3.bias"] = (d,)
        keys[p + "ffn.0.weight"], keys[p + "ffn.0.bias"] = (f, d), (f,)
        keys[p + "ffn.2.weight"], keys[p + "ffn.2.bias"] = (d, f), (d,)
        if n < 15:
            a = p + "action_model."
            keys.update({
                a + "keyboard_embed.0.weight": (128, 4), a + "keyboard_embed.0.bias": (128,),
                a + "keyboard_embed.2.weight": (128, 128), a + "keyboard_embed.2.bias": (128,),
                a + "mouse_mlp.0.weight": (1024, 1560), a + "mouse_mlp.0.bias": (1024,),
                a + "mouse_mlp.2.weight": (1024, 1024), a + "mouse_mlp.2.bias": (1024,),
                a + "mouse_mlp.3.weight": (1024,), a + "mouse_mlp.3.bias": (1024,),
                a + "t_qkv.weight": (3072, 1024),
                a + "img_attn_q_norm.weight": (64,), a + "img_attn_k_norm.weight": (64,),
                a + "proj_mouse.weight": (d, 1024),
                a + "key_attn_q_norm.weight": (64,), a + "key_attn_k_norm.weight": (64,),
                a + "mouse_attn_q.weight": (1024, d), a + "keyboard_attn_kv.weight": (2048, d),
                a + "proj_keyboard.weight": (d, 1024),
            })
    return keys


def meta_state(name: str) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = CausalDiT(model_config(name).dit)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_universal_key_set_and_shapes_match_the_checkpoint():
    assert meta_state("mg2-universal") == official_universal_keys()


@pytest.mark.parametrize("name, tensors, params", [
    ("mg2-universal", 1114, 1_619_242_304),
    ("mg2-gta", 1114, 1_619_238_464),
    ("mg2-templerun", 964, 1_508_715_584),
])
def test_full_size_parameter_counts(name, tensors, params):
    facts = model_facts(model_config(name))
    assert facts["dit_tensors"] == tensors
    assert facts["params"] == params


def test_universal_kv_and_token_facts():
    facts = model_facts(model_config("mg2-universal"))
    assert facts["tokens_per_chunk"] == 2640
    assert facts["kv_bytes_per_chunk_bf16"] == 486_604_800
    assert facts["kv_bytes_per_chunk_int4"] == 129_438_720     # the paper's 129.4 MB
    assert facts["kv_slot_bytes_int4"] == 129_441_792          # rounded up to 4 KiB
    assert facts["kv_bytes_per_chunk_int8"] == 251_089_920
    assert facts["kv_bytes_per_chunk_int2"] == 68_613_120
    assert facts["action_params"] == 205_163_520
    assert facts["horizon_chunk"] == 341
    assert facts["video"] == [352, 640]
