"""The parameters each named configuration keeps on the device, as the torch-free planner reads them
(``ModelShape.device_params``), counted again from the networks built on the meta device."""
from __future__ import annotations

import pytest
import torch

from engine.config import MODEL_CONFIGS, synthetic_model_config
from engine.facts.lingbot_models import LINGBOT_CONFIGS
from engine.model.clip import CLIPVisionTower
from engine.model.facts import count_parameters
from engine.model.lingbot.weights import empty_model
from engine.model.mg2 import CausalDiT
from engine.model.vae import WanVAE


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_mg2_device_params_are_dit_vae_and_clip(name):
    cfg = MODEL_CONFIGS[name]
    with torch.device("meta"):
        nets = (CausalDiT(cfg.dit), WanVAE(cfg.vae), CLIPVisionTower(cfg.clip))
    assert cfg.shape().device_params == sum(count_parameters(n) for n in nets)


@pytest.mark.parametrize("name", sorted(LINGBOT_CONFIGS))
def test_lingbot_device_params_are_dit_and_vae(name):
    m = LINGBOT_CONFIGS[name]
    with torch.device("meta"):
        vae = WanVAE(m.vae)
    assert m.shape().device_params == count_parameters(empty_model(m.dit)) + count_parameters(vae)


def test_the_synthetic_model_has_no_weights():
    assert synthetic_model_config(1.0).shape().device_params == 0
