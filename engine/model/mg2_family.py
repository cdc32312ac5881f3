"""MG2's entries in the model registry: the released modes and the seeded tiny / micro models
(``MG2``), and the synthetic model (``SYNTHETIC``: MG2-shaped KV, no math).

Owns how a session config becomes an MG2 spec (image size, action space, grid, default trajectory,
banner, what it observes: a recorded video), an MG2 pipeline (networks from the worker's
``ModelCache`` or ``engine.model.load``; with ``--observe clip.mp4`` the clip, whose frame 0 is the
start image), the log header's facts and the KV layout (MG2's shape config says it all).
"""
from __future__ import annotations

from engine.config import DEVICE_PARAMS, SYNTHETIC_MODEL, SessionConfig, session_model_config
from engine.errors import ConfigError
from engine.io.video_clip import ClipReader, is_video, model_frames
from engine.facts.layout import KVLayout
from engine.model.facts import horizon_chunk, model_facts
from engine.model.interface import WorldModel
from engine.model.load import checkpoint_files, load_models
from engine.model.model_cache import ModelCache
from engine.model.pipeline import MG2Pipeline
from engine.model.spec import Family, ModelSpec, weights_stamp
from engine.model.synthetic import FRAME_DOWNSCALE, SyntheticPipeline
from engine.model.weight_place import place_weights, placement_key, staging_device, to_device

DEFAULT_TRAJECTORIES = {"universal": "revisit_loop.yaml", "gta_drive": "revisit_loop.yaml",
                        "templerun": "templerun_run.yaml"}


# The MG2 models that run on seeded weights without being asked: small enough to build in a second.
SEEDED_MODELS = ("tiny", "micro")
DOWNLOAD_MODES = {"mg2-universal": "universal", "mg2-gta": "gta", "mg2-templerun": "templerun"}  # engine.model.hub


def check_weights(cfg: SessionConfig) -> None:
    """A full-size MG2 model has no built-in weights: without ``--checkpoint`` it is refused (before
    anything is built or written) unless ``--seeded-weights`` asks for seeded random ones."""
    m = session_model_config(cfg)
    if cfg.checkpoint is not None or cfg.seeded_weights or m.name in SEEDED_MODELS:
        return
    params = DEVICE_PARAMS.get(m.name)
    size = f" ({params / 1e9:.1f} billion parameters)" if params else ""
    mode = DOWNLOAD_MODES.get(m.name, "universal")
    raise ConfigError(f"--model {m.name} has no built-in weights{size}: without --checkpoint it would run with "
                      f"seeded random weights (minutes of set-up on a CPU, and a video of noise); give the "
                      f"official weights with --checkpoint DIR (worldpager download --mode {mode}), run --model "
                      "tiny, or add --seeded-weights to run it anyway")


def _mg2_spec(cfg: SessionConfig) -> ModelSpec:
    m = session_model_config(cfg)
    size = (m.video_height, m.video_width)
    check_weights(cfg)
    if cfg.checkpoint is None:
        banner = (f"worldpager: using the built-in {cfg.model} model (seeded random weights, no checkpoint): "
                  "the video shows the pipeline, not a trained world model")
    else:   # the files are there before anything is said or written (their weights are read at load)
        checkpoint_files(m, cfg.checkpoint)
        banner = f"worldpager: loading {cfg.model} from {cfg.checkpoint}"
    return ModelSpec(m.name, size, m.mode, m.video_grid(), size, horizon_chunk(m),
                     DEFAULT_TRAJECTORIES[m.mode], True, banner, observes=("video",))


def _mg2_build(cfg: SessionConfig, image, trajectory, device, dtype, cache: ModelCache) -> WorldModel:
    m = session_model_config(cfg)
    key = ("mg2", m, weights_stamp(cfg.checkpoint), str(device), dtype, placement_key(cfg, dtype))

    def load():
        models = load_models(m, cfg.checkpoint, staging_device(cfg, device), dtype)
        placement = place_weights(models.dit.blocks, cfg, device, dtype, (models.dit, models.vae, models.clip))
        to_device(device, models.dit, models.vae, models.clip)
        return models, placement

    models, placement = cache.get(key, load)
    model = _mg2_pipeline(cfg, models, m, image, trajectory, device, dtype)
    model.weight_placement = placement
    return model


def _mg2_pipeline(cfg: SessionConfig, models, m, image, trajectory, device, dtype) -> WorldModel:
    if cfg.observe is None or not is_video(cfg.observe):
        return MG2Pipeline(models, m, image, trajectory, cfg.seed, cfg.positions, device, dtype)
    clip = ClipReader(cfg.observe)             # checked by engine.session.observe before the build
    image = model_frames(clip.frames(0, 1))[:, :, 0]          # the clip's frame 0: [1, 3, H, W] in [-1, 1]
    return MG2Pipeline(models, m, image, trajectory, cfg.seed, cfg.positions, device, dtype, clip=clip)


def _mg2_facts(cfg: SessionConfig) -> dict:
    return model_facts(session_model_config(cfg))


def _synthetic_spec(cfg: SessionConfig) -> ModelSpec:
    m = session_model_config(cfg)
    frame = (m.video_height // FRAME_DOWNSCALE, m.video_width // FRAME_DOWNSCALE)
    banner = (f"worldpager: synthetic model ({m.dit.num_layers} layers of MG2-shaped KV, "
              f"{cfg.chunk_ms:.0f} ms per chunk, no math), store {cfg.memory.store}")
    return ModelSpec(m.name, (m.video_height, m.video_width), m.mode, m.video_grid(), frame, horizon_chunk(m),
                     DEFAULT_TRAJECTORIES[m.mode], True, banner)


def _synthetic_build(cfg: SessionConfig, image, trajectory, device, dtype, cache: ModelCache) -> WorldModel:
    return SyntheticPipeline(session_model_config(cfg), trajectory.poses, cfg.chunk_ms, device, dtype,
                             cfg.seed)


def _synthetic_facts(cfg: SessionConfig) -> dict:
    return {"model": SYNTHETIC_MODEL, "fps": session_model_config(cfg).fps}


def _mg2_layout(cfg: SessionConfig) -> KVLayout:
    return session_model_config(cfg).kv_layout()


MG2 = Family(_mg2_spec, _mg2_build, _mg2_facts, _mg2_layout)
SYNTHETIC = Family(_synthetic_spec, _synthetic_build, _synthetic_facts, _mg2_layout)
