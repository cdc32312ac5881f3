"""Configuration schema: frozen dataclasses that hold every default.

Owns the shape facts of the model family (DiT, action module, VAE, CLIP, sampler) and the named model
configurations (the three released MG2 modes and the small built-in ``tiny`` model). Everything else in
the engine derives shapes from these objects; no module hard-codes 30, 880 or 1536. MG2 code paths hand
the rest of the engine a ``KVLayout`` and a ``VideoGrid`` (``ModelConfig.kv_layout()`` /
``video_grid()``), never the config itself.

Overlays (presets, CLI flags) are applied by ``engine.settings.overlay``, which rejects unknown keys and wrong
types by name.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigError
from engine.facts.layout import KVLayout, ModelShape, VideoGrid

# Wan2.1 VAE latent normalisation constants (per latent channel).
WAN_LATENT_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)
WAN_LATENT_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)
CLIP_PIXEL_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_PIXEL_STD = (0.26862954, 0.26130258, 0.27577711)


def wan_rope_split(head_dim: int) -> tuple[int, int, int]:
    """Real channels of a Wan DiT head given to the (time, height, width) rotary axes (MG2 and
    LingBot-World share the rule): the spatial axes a third each, rounded down to pairs, time the rest."""
    return head_dim - 4 * (head_dim // 6), 2 * (head_dim // 6), 2 * (head_dim // 6)


@dataclass(frozen=True)
class ActionConfig:
    """Keyboard/mouse action module (MG2 ``action_config``)."""

    blocks: tuple[int, ...] = tuple(range(15))
    enable_keyboard: bool = True
    enable_mouse: bool = True
    keyboard_dim_in: int = 4
    mouse_dim_in: int = 2
    heads_num: int = 16
    hidden_size: int = 128           # keyboard embedding width
    keyboard_hidden_dim: int = 1024
    mouse_hidden_dim: int = 1024
    rope_dim_list: tuple[int, ...] = (8, 28, 28)
    rope_theta: float = 256.0
    vae_time_compression_ratio: int = 4
    windows_size: int = 3            # latent frames of action history per latent frame
    qkv_bias: bool = False

    @property
    def window_frames(self) -> int:
        """Video-frame actions each latent frame sees (12 for MG2)."""
        return self.vae_time_compression_ratio * self.windows_size

    @property
    def head_dim(self) -> int:
        return self.mouse_hidden_dim // self.heads_num if self.enable_mouse else self.keyboard_head_dim

    @property
    def keyboard_head_dim(self) -> int:
        return self.keyboard_hidden_dim // self.heads_num


@dataclass(frozen=True)
class DiTConfig:
    """Causal Wan DiT (MG2 ``CausalWanModel``)."""

    dim: int = 1536
    ffn_dim: int = 8960
    num_heads: int = 12
    num_layers: int = 30
    freq_dim: int = 256
    in_dim: int = 36
    out_dim: int = 16
    patch_size: tuple[int, int, int] = (1, 2, 2)
    eps: float = 1e-6
    local_attn_size: int = 6         # latent frames in the attention window, current chunk included
    sink_size: int = 0
    qk_norm: bool = True
    cross_attn_norm: bool = True
    clip_dim: int = 1280             # width of the CLIP tokens fed to img_emb
    rope_theta: float = 10000.0
    rope_table_frames: int = 1024    # MG2's native rotary table length (the positional horizon)
    action: ActionConfig | None = field(default_factory=ActionConfig)

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Real channels of a head given to (time, height, width) rotary axes."""
        return wan_rope_split(self.head_dim)


@dataclass(frozen=True)
class VAEConfig:
    """Wan2.1 causal 3D VAE."""

    dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    latent_mean: tuple[float, ...] = WAN_LATENT_MEAN
    latent_std: tuple[float, ...] = WAN_LATENT_STD

    @property
    def spatial_factor(self) -> int:
        return 2 ** (len(self.dim_mult) - 1)

    @property
    def temporal_factor(self) -> int:
        return 2 ** sum(self.temporal_downsample)


@dataclass(frozen=True)
class CLIPConfig:
    """CLIP ViT image tower as MG2 uses it (tokens of the residual stream after ``used_layers``)."""

    image_size: int = 224
    patch_size: int = 14
    width: int = 1280
    layers: int = 32
    heads: int = 16
    mlp_ratio: int = 4
    used_layers: int = 31            # MG2 stops one block before the end: no post-norm, no pooling
    norm_eps: float = 1e-5
    pixel_mean: tuple[float, float, float] = CLIP_PIXEL_MEAN
    pixel_std: tuple[float, float, float] = CLIP_PIXEL_STD

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2 + 1


@dataclass(frozen=True)
class SamplerConfig:
    """Few-step flow-matching sampler."""

    denoising_step_list: tuple[int, ...] = (1000, 666, 333)
    warp_denoising_step: bool = True
    timestep_shift: float = 5.0
    num_train_timesteps: int = 1000
    frames_per_chunk: int = 3        # latent frames per chunk ("block")
    context_noise: float = 0.0       # timestep of the clean pass that writes the chunk's KV


@dataclass(frozen=True)
class ModelConfig:
    """One complete model: DiT + VAE + CLIP + sampler + latent geometry + checkpoint file names."""

    name: str = "mg2-universal"
    mode: str = "universal"          # action space: universal | gta_drive | templerun
    dit: DiTConfig = field(default_factory=DiTConfig)
    vae: VAEConfig = field(default_factory=VAEConfig)
    clip: CLIPConfig = field(default_factory=CLIPConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    latent_height: int = 44
    latent_width: int = 80
    fps: int = 16
    dit_file: str = "base_distilled_model/base_distill.safetensors"
    vae_file: str = "Wan2.1_VAE.pth"
    clip_file: str = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"

    @property
    def video_height(self) -> int:
        return self.latent_height * self.vae.spatial_factor

    @property
    def video_width(self) -> int:
        return self.latent_width * self.vae.spatial_factor

    @property
    def tokens_per_frame(self) -> int:
        _, ph, pw = self.dit.patch_size
        return (self.latent_height // ph) * (self.latent_width // pw)

    @property
    def tokens_per_chunk(self) -> int:
        return self.tokens_per_frame * self.sampler.frames_per_chunk

    @property
    def window_frames(self) -> int:
        """Past latent frames kept in the rolling local window (excluding the current chunk)."""
        return self.dit.local_attn_size - self.sampler.frames_per_chunk

    def video_frames_of_chunk(self, chunk: int) -> int:
        """Video frames the causal VAE emits for chunk ``chunk`` (9 for the first, 12 after)."""
        t = self.vae.temporal_factor
        n = self.sampler.frames_per_chunk
        return 1 + t * (n - 1) if chunk == 0 else t * n

    def video_frames_total(self, chunks: int) -> int:
        return sum(self.video_frames_of_chunk(c) for c in range(chunks))

    def kv_bytes_per_chunk(self, bytes_per_value: float = 2.0) -> int:
        """Self-attention K+V bytes of one chunk over all layers (action caches excluded)."""
        values = 2 * self.dit.num_layers * self.tokens_per_chunk * self.dit.dim
        return int(values * bytes_per_value)

    def kv_layout(self) -> KVLayout:
        """The stored self-attention KV of one chunk, as the memory and the model interface see it."""
        return KVLayout(layers=self.dit.num_layers, tokens_per_frame=self.tokens_per_frame,
                        frames_per_chunk=self.sampler.frames_per_chunk, heads=self.dit.num_heads,
                        head_dim=self.dit.head_dim, window_frames=self.window_frames)

    def video_grid(self) -> VideoGrid:
        """Video frames of chunk 0 and of every later chunk, and the frame rate."""
        return VideoGrid(first_frames=self.video_frames_of_chunk(0),
                         frames_per_chunk=self.video_frames_of_chunk(1), fps=self.fps)

    def shape(self) -> ModelShape:
        """What the planner reads of this model (``engine.facts.layout.ModelShape``)."""
        return ModelShape(self.name, self.kv_layout(), self.video_grid(), DEVICE_PARAMS.get(self.name, 0))


# ---------------------------------------------------------------------------------------------
# Named model configurations.

_UNIVERSAL = ModelConfig()

_GTA = dataclasses.replace(
    _UNIVERSAL,
    name="mg2-gta",
    mode="gta_drive",
    dit=dataclasses.replace(_UNIVERSAL.dit, local_attn_size=4,
                            action=dataclasses.replace(ActionConfig(), keyboard_dim_in=2)),
    dit_file="gta_distilled_model/gta_keyboard2dim.safetensors",
)

_TEMPLERUN = dataclasses.replace(
    _UNIVERSAL,
    name="mg2-templerun",
    mode="templerun",
    dit=dataclasses.replace(_UNIVERSAL.dit,
                            action=dataclasses.replace(ActionConfig(), keyboard_dim_in=7,
                                                       enable_mouse=False)),
    sampler=dataclasses.replace(_UNIVERSAL.sampler, denoising_step_list=(1000, 750, 500, 250)),
    dit_file="templerun_distilled_model/templerun_7dim_onlykey.safetensors",
)

# A small model with MG2's exact architecture, for CPU demos and tests (seeded random weights).
_TINY = dataclasses.replace(
    _UNIVERSAL,
    name="tiny",
    dit=DiTConfig(dim=128, ffn_dim=256, num_heads=2, num_layers=2, clip_dim=64,
                  action=ActionConfig(blocks=(0, 1), heads_num=2, hidden_size=16,
                                      keyboard_hidden_dim=128, mouse_hidden_dim=128)),
    vae=VAEConfig(dim=16),
    clip=CLIPConfig(width=64, layers=3, heads=2, used_layers=2),
    latent_height=22,
    latent_width=40,
)

# The tiny model at 32x64 video: for smoke tests and long CPU sessions where only the pipeline matters.
# Its rotary table is 15 latent frames, so its positional horizon is chunk 5 (MG2's is 341): sessions
# past the horizon (extend, rerotate, native's stop) take seconds to reach, not a 341-chunk run. Below
# the horizon the table's length changes nothing (RoPE computes its angles for any position).
MICRO_ROPE_TABLE_FRAMES = 15
_MICRO = dataclasses.replace(_TINY, name="micro", vae=VAEConfig(dim=8), latent_height=4, latent_width=8,
                             dit=dataclasses.replace(_TINY.dit, rope_table_frames=MICRO_ROPE_TABLE_FRAMES))

MODEL_CONFIGS: dict[str, ModelConfig] = {
    c.name: c for c in (_UNIVERSAL, _GTA, _TEMPLERUN, _TINY, _MICRO)
}

# Parameters a session keeps on the device (DiT with its action modules + VAE + CLIP vision tower), per
# named configuration, for the torch-free planner; tests/unit/test_device_weights.py counts them again on
# the meta device. The synthetic model has no weights.
DEVICE_PARAMS = {"mg2-universal": 2_357_220_915, "mg2-gta": 2_357_217_075, "mg2-templerun": 2_246_694_195,
                 "tiny": 4_712_963, "micro": 2_035_083}


def synthetic_model_config(kv_scale: float = 1.0) -> ModelConfig:
    """The synthetic model's shape: MG2 universal's KV with the layer count scaled by ``kv_scale``."""
    base = MODEL_CONFIGS["mg2-universal"]
    layers = max(1, round(base.dit.num_layers * kv_scale))
    return dataclasses.replace(base, name="synthetic", dit=dataclasses.replace(base.dit, num_layers=layers, action=None))


def model_config(name: str) -> ModelConfig:
    """Look up a named model configuration; the error names the bad value and the choices."""
    try:
        return MODEL_CONFIGS[name]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r} (choose from {', '.join(sorted(MODEL_CONFIGS))})"
        ) from None


SYNTHETIC_MODEL = "synthetic"          # --model synthetic: real KV bytes, no math (systems experiments)
ARENA_MODEL = "arena"                  # --model arena: our own world model of procedural arenas (the default)
# LingBot-World-Fast (engine/model/lingbot/): the released 14B shape, and its tiny seeded stand-in
LINGBOT_MODELS = ("lingbot-fast", "lingbot-tiny", "lingbot-tiny-act")
DEFAULT_ARENA_SEED = 1_000_017         # a held-out arena (training draws seeds below 1,000,000)
LOOK_AROUND_CHUNKS = 7                 # a session's look around: the fewest chunks (81 video frames) holding a
                                       # full turn at the fastest turn the arena model trained on (4.5 degrees a frame)
LOOK_AROUND_MIN_CHUNKS = 3             # 33 video frames: a full turn within a mouse value of 1 a frame
STORE_MODES = ("prefetch", "on-demand", "sync", "dram-only", "device-only", "window")
POSITION_MODES = ("native", "extend", "rerotate")
# background: dirty chunks are written when the pool runs low (write-back); through: every stored chunk
# is written at once in the background (write-through); sync: put waits for its write-back (a baseline).
WRITEBACK_MODES = ("background", "through", "sync")
# What the prefetch mode does with a staged set still loading when its chunk starts: "miss" (the design:
# never wait, the slot keeps its previous chunk) or "wait" (a stall instead: the run's frames no longer
# depend on how fast the machine and the drive were, for reproducible runs and frame-exact comparisons).
LATE_PREFETCH_MODES = ("miss", "wait")
# Which keys the memory stores: "post-rope" (as the model attended them, rotated at their chunk's own
# positions) or "pre-rope" (before the rotation; rotated when staged, at the positions chosen then).
# The convention is part of the spill's format (engine/session/memory.py records it in save points).
KEY_CONVENTIONS = ("post-rope", "pre-rope")
# Where a session's attention context lives on the device: "chunk" (every layer's memory, window and current
# KV at once) or "layer" (one layer's, the next one's copied in while this one computes; exact).
KV_PAGING_MODES = ("chunk", "layer")
# How the DiT blocks' large linears are stored on the device (engine.planner.weight_plan has the bytes).
WEIGHT_FORMATS = ("bf16", "int8", "fp8")
# Where LingBot's UMT5 text encoder runs, once per prompt (its output is cached beside the session).
TEXT_ENCODER_PLACES = ("cpu", "device")


@dataclass(frozen=True)
class CalibrationConfig:
    """How MG2 actions map to camera motion and back (``engine.io.poses.Calibration`` adds the math).

    MG2 defines no camera model, so the defaults are Matrix-Game 3's pose-from-action constants: mouse
    0.1 turns 1.5 degrees per frame; a held move key advances 0.1235 world units per frame.
    """

    degrees_per_mouse_unit: float = 15.0     # yaw/pitch degrees per frame per unit of mouse value
    distance_per_frame: float = 0.1235       # world units per frame while one move key is held
    mouse_dead_zone: float = 0.02            # |mouse| below this turns nothing
    mouse_step: float = 0.1                  # MG2's camera value: the only magnitude it trained on
    quantise_mouse: bool = True              # poses -> actions emit only 0 / +-mouse_step
    diagonal_scale: float = 0.7071067811865476  # per-axis speed when a forward and a side key are held
    pitch_limit: float = 89.0                # degrees; pitch is clamped like a game camera
    templerun_turn_degrees: float = 7.5      # yaw per frame of turn_left/right (a 12-frame press = 90)


@dataclass(frozen=True)
class MemoryConfig:
    """The retrieval memory and its tiers (used from the tiered store on)."""

    store: str = "prefetch"                  # one of STORE_MODES
    kv_bits: int = 4                         # 16 = unquantised
    retrieve_k: int = 3                      # past chunks retrieved per chunk
    predictor: str = "constant-velocity"     # pose extrapolation for prefetch: or reuse-current
    retrieve_visit: str = "first"            # of near-duplicate past views, retrieve the first or the newest
    sink: bool = False                       # keep the first chunk resident as an attention sink
    official_sink: bool = False              # LingBot: its sink_size first latent frames beside the window
    host_mem_gib: float | None = None        # host budget; None = what the machine has
    pool_slots: int | None = None            # exact host-pool size in chunks (overrides host_mem_gib)
    device_mem_gib: float | None = None      # the device's memory (model + buffers + KV); None = unbounded
    spill: Path | None = None                # disk tier directory; None = no disk tier
    drive_bw: str | None = None              # emulated drive bandwidth, GB/s: "0.25" or "r=0.5,w=0.5"
    spill_max: str | int | None = None       # disk quota of the spill directory: "4G", "500M", "10%", bytes; None = unbounded
    writeback: str = "background"            # WRITEBACK_MODES: when a stored chunk goes to the drive
    io_deadline_s: float = 30.0              # a synchronous read or a write-back late by this much fails
    late_prefetch: str = "miss"              # LATE_PREFETCH_MODES: a prefetch still loading is a miss, or waited for
    hedge_slots: int | None = None           # staging slots for the sets of stop / turn / walk-ahead; None = auto
    device_cache: int | None = None          # chunks kept on the device once loaded; None = auto (engine.memory.budget)
    stick: float = 0.1                       # retrieval keeps a view at hand unless another adds this much coverage
    keys: str = "post-rope"                  # KEY_CONVENTIONS: stored keys after or before the rotation
    kv_paging: str = "chunk"                 # KV_PAGING_MODES: the device holds every layer's context KV, or one
                                             # layer's at a time (the next prefetched while this one computes)


@dataclass(frozen=True)
class SessionConfig:
    """One generation session: which model, which inputs, how long, where the video and log go.

    Precedence: these defaults < a preset (``presets/*.yaml``) < command-line flags.
    """

    model: str = ARENA_MODEL
    checkpoint: Path | None = None     # directory laid out like the official release; None = built-in
    seeded_weights: bool = False       # a full-size MG2 model without --checkpoint: seeded random weights (else refused)
    image: Path | None = None          # start image; None = the packaged default
    trajectory: Path | None = None     # trajectory file; None = the packaged revisit_loop
    observe: Path | None = None        # an observed clip the session starts from (engine/session/observe.py)
    observe_poses: Path | None = None  # a video clip's camera path (pose CSV); None = <clip>.poses.csv beside it
    repeat: str = "loop"               # loop | pingpong, when the trajectory is shorter than the video
    out: Path = Path("worldpager.mp4")
    log: Path | None = None            # JSON Lines log; None = beside the video (<out>.log.jsonl)
    chunks: int = 41                   # 30 s of video at 16 fps (9 + 40 x 12 frames)
    seed: int = 0
    device: str = "auto"               # auto | cpu | cuda | cuda:N
    positions: str = "rerotate"        # one of POSITION_MODES
    rerotate_offset_frames: float = 30.0  # rerotate: retrieved chunks end this many video frames before the current chunk
    chunk_ms: float = 1200.0           # synthetic model only: device time per chunk
    kv_scale: float = 1.0              # synthetic model only: KV bytes relative to MG2 (via layers)
    arena_seed: int = DEFAULT_ARENA_SEED  # arena model only: which procedural world
    arena_weights: Path | None = None  # arena model only: weights file; None = the packaged ones
    arena_reproject: float | None = None  # arena model only: re-projection radius in world units; None = the weights'
    look_around: int = LOOK_AROUND_CHUNKS  # arena model only: chunks of a turn on the spot observed first (0: none)
    arena_reproject_depth: bool = False  # arena model only: re-project with the depth head's depth (from anywhere)
    prompt: str | None = None          # LingBot-World-Fast from a release folder: the text the scene follows
    save_every: int | None = None      # save point every N chunks; None = about every save_interval_s of wall time; 0 = none
    save_interval_s: float = 30.0      # with save_every None: wall time between save points (a slow machine makes them at fewer chunks)
    keep_savepoints: int = 2           # newest save points kept (each is a chunk a run can be resumed or forked at)
    decode_overlap: bool | None = None   # decode and mux chunk c on a worker thread while c+1 denoises
                                         # (engine/session/decode.py); None: on a CPU device, off on a GPU
    weights: str = "bf16"              # WEIGHT_FORMATS: storage of the DiT blocks' large linears on the device
                                       # (engine.planner.weight_plan); blocks beyond --device-mem are streamed
    text_encoder: str = "cpu"          # TEXT_ENCODER_PLACES: LingBot's UMT5 encoder on the CPU (no device memory) or the device
    threads: int | None = None         # torch's intra-op threads on a CPU; None: OMP_NUM_THREADS, else 1 (engine/runtime/cpu_threads.py)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    @property
    def log_path(self) -> Path:
        return self.log if self.log is not None else self.out.with_suffix(".log.jsonl")

    @property
    def config_path(self) -> Path:
        """Where the resolved config is written (beside the video)."""
        return self.out.with_suffix(".config.json")

    def validate(self) -> "SessionConfig":
        """Range checks of values whose type is right but whose value is not; returns self."""
        checks = [
            (self.chunks >= 1, f"chunks must be at least 1, got {self.chunks}"),
            (self.save_every is None or self.save_every >= 0,
             f"--save-every (save_every) must be a number of chunks >= 0, got {self.save_every}"),
            (math.isfinite(self.save_interval_s) and self.save_interval_s > 0,
             f"save_interval_s must be a number of seconds > 0, got {self.save_interval_s}"),
            (self.keep_savepoints >= 1,
             f"--keep-savepoints (keep_savepoints) must be at least 1, got {self.keep_savepoints}"),
            (self.threads is None or self.threads >= 1, f"--threads (threads) must be at least 1, got {self.threads}"),
            (self.repeat in ("loop", "pingpong"), f"repeat must be loop or pingpong, got {self.repeat!r}"),
            (self.positions in POSITION_MODES, f"positions must be one of {', '.join(POSITION_MODES)}, got {self.positions!r}"),
            (self.memory.store in STORE_MODES, f"store must be one of {', '.join(STORE_MODES)}, got {self.memory.store!r}"),
            (self.memory.kv_bits in (2, 4, 8, 16), f"kv_bits must be 2, 4, 8 or 16, got {self.memory.kv_bits}"),
            (self.memory.retrieve_k >= 0, f"retrieve_k must be >= 0, got {self.memory.retrieve_k}"),
            (math.isfinite(self.memory.io_deadline_s) and self.memory.io_deadline_s > 0,
             f"--io-deadline (memory.io_deadline_s) must be a positive number of seconds, got {self.memory.io_deadline_s}"),
            (self.memory.late_prefetch in LATE_PREFETCH_MODES,
             f"--late-prefetch (memory.late_prefetch) must be one of {', '.join(LATE_PREFETCH_MODES)}, "
             f"got {self.memory.late_prefetch!r}"),
            (self.memory.hedge_slots is None or (type(self.memory.hedge_slots) is int
                                                 and 0 <= self.memory.hedge_slots <= 64),
             f"memory.hedge_slots must be an integer 0..64 or null (automatic), got {self.memory.hedge_slots!r}"),
            (self.memory.device_cache is None or (type(self.memory.device_cache) is int
                                                  and 0 <= self.memory.device_cache <= 4096),
             f"memory.device_cache must be an integer 0..4096 chunks or null (automatic), got "
             f"{self.memory.device_cache!r}"),
            (type(self.memory.stick) in (int, float) and 0 <= self.memory.stick <= 1,
             f"memory.stick must be a number 0..1 (a share of the view's coverage), got {self.memory.stick!r}"),
            (self.memory.keys in KEY_CONVENTIONS,
             f"--kv-keys (memory.keys) must be one of {', '.join(KEY_CONVENTIONS)}, got {self.memory.keys!r}"),
            (self.memory.keys != "pre-rope" or self.model in MODEL_CONFIGS or self.model in LINGBOT_MODELS,
             f"--kv-keys pre-rope is built for MG2's and LingBot's models; the {self.model} model's memory "
             "stores keys after rotation only: use --kv-keys post-rope"),
            (self.memory.kv_paging in KV_PAGING_MODES,
             f"--kv-paging (memory.kv_paging) must be one of {', '.join(KV_PAGING_MODES)}, got {self.memory.kv_paging!r}"),
            (self.weights in WEIGHT_FORMATS,
             f"--weights (weights) must be one of {', '.join(WEIGHT_FORMATS)}, got {self.weights!r}"),
            (self.text_encoder in TEXT_ENCODER_PLACES,
             f"text_encoder must be one of {', '.join(TEXT_ENCODER_PLACES)}, got {self.text_encoder!r}"),
            (self.memory.writeback in WRITEBACK_MODES,
             f"writeback must be one of {', '.join(WRITEBACK_MODES)}, got {self.memory.writeback!r}"),
            (self.memory.predictor in ("constant-velocity", "reuse-current"),
             f"predictor must be constant-velocity or reuse-current, got {self.memory.predictor!r}"),
            (self.memory.retrieve_visit in ("first", "newest"),
             f"retrieve_visit must be first or newest, got {self.memory.retrieve_visit!r}"),
            (math.isfinite(self.chunk_ms) and self.chunk_ms >= 0,
             f"--chunk-ms (chunk_ms) must be a finite number >= 0, got {self.chunk_ms}"),
            (_positive_or_none(self.memory.host_mem_gib),
             f"--host-mem (memory.host_mem_gib) must be a positive, finite number of GiB, got "
             f"{self.memory.host_mem_gib}"),
            (_positive_or_none(self.memory.device_mem_gib),
             f"--device-mem (memory.device_mem_gib) must be a positive, finite number of GiB, got "
             f"{self.memory.device_mem_gib}"),
            (self.memory.pool_slots is None or self.memory.pool_slots >= 1,
             f"--pool-slots (memory.pool_slots) must be at least 1 chunk, got {self.memory.pool_slots}"),
            (0 < self.kv_scale <= 16, f"kv_scale must be in (0, 16], got {self.kv_scale}"),
            (0 <= self.arena_seed < 2 ** 63, f"arena_seed must be a non-negative integer, got {self.arena_seed}"),
            (self.arena_reproject is None or (isinstance(self.arena_reproject, (int, float))
                                              and 0 <= self.arena_reproject < math.inf),
             f"--arena-reproject (arena_reproject) must be a non-negative number of world units, "
             f"got {self.arena_reproject}"),
            (isinstance(self.look_around, int) and not isinstance(self.look_around, bool)
             and (self.look_around == 0 or self.look_around >= LOOK_AROUND_MIN_CHUNKS),
             f"--look-around (look_around) must be 0 (none) or at least {LOOK_AROUND_MIN_CHUNKS} chunks (a full "
             f"turn), got {self.look_around!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        if self.prompt is not None and self.model not in LINGBOT_MODELS:
            raise ConfigError(f"--prompt {self.prompt!r}: the {self.model} model takes no text (only "
                              f"{', '.join(LINGBOT_MODELS)} from a release folder do)")
        if self.memory.official_sink and (problem := _official_sink_problem(self)) is not None:
            raise ConfigError(problem)
        if self.model not in (SYNTHETIC_MODEL, ARENA_MODEL, *LINGBOT_MODELS):
            try:
                model_config(self.model)
            except ConfigError:
                names = [ARENA_MODEL] + sorted(MODEL_CONFIGS) + list(LINGBOT_MODELS) + [SYNTHETIC_MODEL]
                raise ConfigError(f"unknown model {self.model!r} (choose from {', '.join(names)})") from None
        return self


def _official_sink_problem(cfg) -> str | None:
    if cfg.model not in LINGBOT_MODELS:
        return f"--official-sink is LingBot-World-Fast's (a model of {', '.join(LINGBOT_MODELS)}), not {cfg.model}'s"
    if cfg.memory.sink:
        return "--official-sink and --sink together would attend the first frames twice; choose one"
    return None


def _positive_or_none(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def session_model_config(cfg: SessionConfig) -> ModelConfig:
    """The MG2-family model a session runs (the synthetic model's shape depends on ``kv_scale``)."""
    if cfg.model == ARENA_MODEL or cfg.model in LINGBOT_MODELS:
        raise ConfigError(f"the {cfg.model} model is not an MG2 configuration (use engine.model.registry.model_spec)")
    if cfg.model == SYNTHETIC_MODEL:
        return synthetic_model_config(cfg.kv_scale)
    return model_config(cfg.model)
