"""Helpers shared by several test modules (importable because tests/ is on sys.path via conftest)."""
from __future__ import annotations

import torch
from safetensors.torch import save_file

from engine.config import model_config
from engine.model.load import MG2Models, load_models

TINY = model_config("tiny")


def tiny_reference_models() -> MG2Models:
    """The built-in tiny model with its seeded weights, on the CPU in float32."""
    return load_models(TINY, None, torch.device("cpu"), torch.float32)


def write_checkpoint(root, models: MG2Models, dit_edit=None, clip_extra=True) -> None:
    """Write ``models`` under ``root`` in the official release's layout and file formats."""
    dit_state = {"model." + k: v.contiguous() for k, v in models.dit.state_dict().items()}
    if dit_edit:
        dit_edit(dit_state)
    (root / TINY.dit_file).parent.mkdir(parents=True, exist_ok=True)
    save_file(dit_state, str(root / TINY.dit_file))
    torch.save(models.vae.state_dict(), root / TINY.vae_file)
    clip_state = {"visual." + k: v for k, v in models.clip.state_dict().items()}
    if clip_extra:  # the official file also holds the text tower and unused vision keys
        clip_state["textual.token_embedding.weight"] = torch.zeros(4, 8)
        clip_state["log_scale"] = torch.zeros(())
        clip_state["visual.post_norm.weight"] = torch.ones(TINY.clip.width)
    torch.save(clip_state, root / TINY.clip_file)
