"""A LingBot-World-Fast session from a release folder (``--checkpoint DIR --prompt TEXT``).

Owns the two steps the family delegates when a checkpoint is given: the spec before loading (the
folder's files and the DiT config checked, the prompt required — one line naming what is wrong, before
any output exists) and the pipeline (networks and the prompt's context from
``engine.model.lingbot.checkpoint``, kept in the worker's ``ModelCache`` under the folder, the model,
the prompt, the device, the dtype and where the text encoder runs — the CPU unless ``text_encoder:
device`` — with the prompt's context cached in the log's folder for later runs). The session geometry is the named model's (``lingbot-fast``:
480x832; ``lingbot-tiny``: 96x160, for a small folder of that shape).
"""
from __future__ import annotations

from pathlib import Path

from engine.errors import ConfigError
from engine.model.lingbot.checkpoint import LingbotRelease, load_release, release_files, release_model
from engine.facts.lingbot_config import VAE_STRIDE
from engine.facts.lingbot_models import LingbotModelConfig
from engine.model.lingbot.pipeline import LingbotPipeline
from engine.model.model_cache import ModelCache
from engine.model.spec import ModelSpec
from engine.model.weight_place import place_weights, placement_key, staging_device, to_device


def _prompt(cfg, m: LingbotModelConfig) -> str:
    if cfg.prompt is None or not cfg.prompt.strip():
        raise ConfigError(f"--model {m.name} --checkpoint {cfg.checkpoint}: give --prompt TEXT (what the scene "
                          "shows, as the official examples do)")
    return cfg.prompt


def release_spec(cfg, m: LingbotModelConfig, default_trajectory: str) -> ModelSpec:
    _prompt(cfg, m)
    files = release_files(Path(cfg.checkpoint))
    release_model(files, m)          # config.json's fields and the encoder's keys, before any output
    height, width = m.frame_size
    banner = f"worldpager: {m.name} from {files.root} ({height}x{width})"
    return ModelSpec(m.name, m.frame_size, "universal", m.video_grid(), m.frame_size, m.horizon_chunk,
                     default_trajectory, True, banner)


def build_from_release(cfg, m: LingbotModelConfig, image, trajectory, device, dtype, cache: ModelCache):
    root = Path(cfg.checkpoint).expanduser().absolute()
    prompt = _prompt(cfg, m)
    text_device = cfg.text_encoder
    cache_dir = Path(cfg.log_path).expanduser().absolute().parent      # the prompt's context beside the session

    def load():
        release = load_release(root, m, prompt, device, dtype, text_device, cache_dir,
                               dit_device=staging_device(cfg, device))
        placement = place_weights(release.dit.blocks, cfg, device, dtype, (release.dit, release.vae))
        to_device(device, release.dit)
        return release, placement

    release: LingbotRelease
    release, placement = cache.get(("lingbot-release", str(root), m, prompt, str(device), dtype, text_device,
                                    placement_key(cfg, dtype)), load)
    model = LingbotPipeline(release.dit, release.vae, release.model, image, trajectory, release.text, cfg.seed,
                            cfg.positions, device, dtype, weights=f"checkpoint {release.root}",
                            live_step=VAE_STRIDE[0] * cfg.calibration.distance_per_frame)
    model.weight_placement = placement
    return model
