"""Translation of the official MG2 ``config.json`` (``CausalWanModel`` constructor arguments) into ours.

Owns the mapping of official field names and constructor defaults; unknown fields are errors so that a
config we do not understand is never silently half-applied.
"""
from __future__ import annotations

from typing import Any, Mapping

from engine.config import ActionConfig, DiTConfig
from engine.errors import ConfigError

_DIT_FIELDS = {
    "dim": "dim", "ffn_dim": "ffn_dim", "num_heads": "num_heads", "num_layers": "num_layers",
    "freq_dim": "freq_dim", "in_dim": "in_dim", "out_dim": "out_dim", "eps": "eps",
    "local_attn_size": "local_attn_size", "sink_size": "sink_size", "qk_norm": "qk_norm",
    "cross_attn_norm": "cross_attn_norm", "patch_size": "patch_size",
}
_IGNORED = {"_class_name", "_diffusers_version", "model_type", "text_len", "text_dim",
            "inject_sample_info", "action_config"}
_ACTION_IGNORED = {"img_hidden_size", "patch_size", "qk_norm", "mouse_qk_dim_list"}


def action_config_from_official(d: Mapping[str, Any]) -> ActionConfig:
    known = {f for f in ActionConfig.__dataclass_fields__}
    kwargs = {}
    for key, value in d.items():
        if key in _ACTION_IGNORED:
            continue
        if key not in known:
            raise ConfigError(f"unknown action_config field {key!r}")
        kwargs[key] = tuple(value) if isinstance(value, list) else value
    return ActionConfig(**kwargs)


def dit_config_from_official(d: Mapping[str, Any]) -> DiTConfig:
    """DiT config from an official ``config.json`` dict (constructor defaults for absent fields)."""
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key in _IGNORED:
            continue
        if key not in _DIT_FIELDS:
            raise ConfigError(f"unknown DiT config field {key!r}")
        kwargs[_DIT_FIELDS[key]] = tuple(value) if isinstance(value, list) else value
    action = d.get("action_config") or None
    kwargs["action"] = action_config_from_official(action) if action else None
    return DiTConfig(**kwargs)
