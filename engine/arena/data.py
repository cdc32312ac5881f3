"""Training and evaluation samples of the arena model: episodes rendered at latent-frame rate, with the
memory each chunk retrieves.

Owns the conversion of an ``Episode`` into what the network reads (``EpisodeTensors``): the rendered
latent frames, per-frame actions (mean keys and mouse of the video frames leading to the frame), camera
states (x, z, yaw, pitch), and per chunk its context — the retrieval policy the session uses
(``engine.retrieval.select.FovOverlapPolicy`` on the same chunk keys) picks up to k memory chunks from
the chunks that have left the window, then the window chunk. Training augments this so that what
inference meets is in distribution: memory dropped for whole episodes, stale or extra slots (prefetch's
stale-set fallback keeps previous chunks in slots), memory keys moved in time (``rerotate``, and
distances up to the native horizon). Everything is a pure function of (seed, step), so training is
deterministic and resumable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.arena.config import ACTION_DIM, ArenaModelConfig
from engine.arena.episodes import KINDS, TRAIN_MIX, Episode, make_episode
from engine.arena.render import depth, render
from engine.arena.world import Arena
from engine.geometry import euler_from_quat
from engine.retrieval.select import ChunkGrid, ChunkPose, FovOverlapPolicy

TRAIN_ARENAS = 1_000_000         # training arenas are seeds [0, TRAIN_ARENAS); evaluation uses others
FIELDS = ("frames", "actions", "cam", "ctx_ids", "mem_shift")
MOUSE_SCALE = 10.0               # mouse values (0.1 per camera press) scaled to about 1


@dataclass
class EpisodeTensors:
    frames: torch.Tensor         # [C, F, 3, H, W] rendered truth in [-1, 1]
    actions: torch.Tensor        # [C, F, A]
    cam: torch.Tensor            # [C, F, 4] x, z, yaw, pitch
    ctx_ids: torch.Tensor        # [C, k + 1] memory slots then the window chunk; -1 = empty
    mem_shift: torch.Tensor      # [C, k] latent frames
    depth: torch.Tensor | None = None   # [C, F, H, W] true z-depth (world units, inf: sky), only when asked for

    def to(self, device) -> "EpisodeTensors":
        return EpisodeTensors(*(getattr(self, f).to(device) for f in FIELDS),
                              depth=None if self.depth is None else self.depth.to(device))


def latent_camera(poses: np.ndarray, cfg: ArenaModelConfig, frames: int, first: int = 0) -> np.ndarray:
    """Camera states ``[frames - first, 4]`` (x, z, yaw, pitch) of latent frames [first, frames), from
    per-video-frame poses ``[T, 7]`` (latent frame f is video frame ``temporal * f``)."""
    picked = poses[np.arange(first, frames) * cfg.temporal]
    yaw, pitch, _ = euler_from_quat(picked[:, 3:])
    return np.stack([picked[:, 0], picked[:, 2], yaw, pitch], axis=1)


def latent_actions(keyboard: np.ndarray, mouse: np.ndarray, cfg: ArenaModelConfig, frames: int,
                   first: int = 0) -> np.ndarray:
    """Per latent frame f in [first, frames): the mean action of video frames [t(f-1), t f) that moved the
    camera to it (``[frames - first, A]``; latent frame 0 has none)."""
    t = cfg.temporal
    out = np.zeros((frames - first, ACTION_DIM), dtype=np.float32)
    for f in range(max(first, 1), frames):
        rows = slice(t * (f - 1), t * f)
        out[f - first, :4] = keyboard[rows].mean(0)
        out[f - first, 4:] = mouse[rows].mean(0) * MOUSE_SCALE
    return out


def render_latents(arena: Arena, cam: np.ndarray, cfg: ArenaModelConfig) -> np.ndarray:
    return np.stack([render(arena, x, z, yaw, pitch, cfg.height, cfg.width, cfg.hfov) for x, z, yaw, pitch in cam])


def render_depths(arena: Arena, cam: np.ndarray, cfg: ArenaModelConfig) -> np.ndarray:
    """The true z-depth ``[F, H, W]`` of the latent frames at cameras ``cam [F, 4]`` (a training target)."""
    return np.stack([depth(arena, x, z, yaw, pitch, cfg.height, cfg.width, cfg.hfov) for x, z, yaw, pitch in cam])


def retrieval_sets(poses: np.ndarray, chunks: int, cfg: ArenaModelConfig, k: int) -> list[list[int]]:
    """For each chunk, the memory the session's policy retrieves from its real pose."""
    grid = ChunkGrid(cfg.video_grid().first_frames, cfg.video_grid().frames_per_chunk)
    policy = FovOverlapPolicy()
    keys = {c: ChunkPose.of_chunk(poses, c, grid) for c in range(chunks)}
    window = cfg.kv_layout().window_chunks
    out = []
    for c in range(chunks):
        cands = {j: keys[j] for j in range(0, c - window)}
        out.append(policy.select(keys[c], cands, k) if cands and k > 0 else [])
    return out


def episode_tensors(episode: Episode, cfg: ArenaModelConfig, chunks: int, k: int,
                    rng: np.random.Generator | None = None, arena: Arena | None = None,
                    memory_distance: float | None = None, with_depth: bool = False) -> EpisodeTensors:
    """Render and assemble one episode; ``rng`` turns on the training augmentations (``memory_distance``:
    the farthest a memory slot's keys are moved, in latent frames; default the native table);
    ``with_depth``: the true depth too (a depth head's target)."""
    arena = arena or Arena.generate(episode.arena_seed)
    f_total = chunks * cfg.frames_per_chunk
    cam = latent_camera(episode.poses, cfg, f_total)
    frames = render_latents(arena, cam, cfg)
    actions = latent_actions(episode.keyboard, episode.mouse, cfg, f_total)
    sets = retrieval_sets(episode.poses, chunks, cfg, k)
    ctx_ids = -np.ones((chunks, k + 1), dtype=np.int64)
    shift = np.zeros((chunks, k), dtype=np.float64)
    drop_all = rng is not None and rng.random() < 0.2
    for c in range(chunks):
        mem = [] if drop_all else list(sets[c])
        if rng is not None and c >= 2:
            mem = _augment_memory(mem, c, k, cfg, rng)
            shift[c] = _memory_shifts(mem, c, k, cfg, rng, memory_distance)
        ctx_ids[c, :len(mem)] = mem
        if c >= 1:
            ctx_ids[c, k] = c - 1
    fpc = cfg.frames_per_chunk
    return EpisodeTensors(
        frames=torch.from_numpy(frames).unflatten(0, (chunks, fpc)),
        actions=torch.from_numpy(actions).unflatten(0, (chunks, fpc)),
        cam=torch.from_numpy(cam.astype(np.float32)).unflatten(0, (chunks, fpc)),
        ctx_ids=torch.from_numpy(ctx_ids), mem_shift=torch.from_numpy(shift.astype(np.float32)),
        depth=torch.from_numpy(render_depths(arena, cam, cfg)).unflatten(0, (chunks, fpc)) if with_depth else None)


def _augment_memory(mem: list[int], c: int, k: int, cfg: ArenaModelConfig, rng) -> list[int]:
    """Stale slots (another past chunk in a slot) and extra slots, as prefetch leaves them."""
    window = cfg.kv_layout().window_chunks
    others = [j for j in range(0, c - window) if j not in mem]
    mem = [m for m in mem if rng.random() > 0.1]                          # a miss: the slot is lost
    while others and len(mem) < k and rng.random() < 0.3:                 # a stale chunk in a free slot
        mem.append(others.pop(int(rng.integers(len(others)))))
    return mem


def _memory_shifts(mem: list[int], c: int, k: int, cfg: ArenaModelConfig, rng,
                   memory_distance: float | None = None) -> np.ndarray:
    """Time moves of memory keys: stored position, the rerotate target, or any distance up to
    ``memory_distance`` latent frames (default the native table; more: what ``--positions extend``
    meets past the horizon, a memory minutes old)."""
    far = cfg.rope_table_frames if memory_distance is None else memory_distance
    fpc = cfg.frames_per_chunk
    out = np.zeros(k)
    for s, j in enumerate(mem):
        u = rng.random()
        if u < 0.4:
            continue
        if u < 0.7:
            target = c * fpc - 30.0 / cfg.temporal - fpc                   # rerotate's default offset
        else:
            target = c * fpc - rng.uniform(2 * fpc, far - fpc)
        out[s] = target - j * fpc
    return out


def training_episode(seed: int, step: int, index: int, cfg: ArenaModelConfig, chunks: int,
                     k: int, memory_distance: float | None = None, with_depth: bool = False) -> EpisodeTensors:
    """Episode ``index`` of training step ``step``: a fresh training arena and a mixed trajectory kind."""
    rng = np.random.default_rng([seed, step, index])
    arena_seed = int(rng.integers(0, TRAIN_ARENAS))
    kind = str(rng.choice(KINDS, p=TRAIN_MIX))
    arena = Arena.generate(arena_seed)
    frames = cfg.video_grid().frames_total(chunks)
    episode = make_episode(arena_seed, kind, frames, rng, arena=arena)
    return episode_tensors(episode, cfg, chunks, k, rng=rng, arena=arena, memory_distance=memory_distance,
                           with_depth=with_depth)


def stack(items: list[EpisodeTensors]) -> EpisodeTensors:
    depths = [e.depth for e in items]
    return EpisodeTensors(*(torch.stack([getattr(e, f) for e in items]) for f in FIELDS),
                          depth=torch.stack(depths) if all(d is not None for d in depths) else None)
