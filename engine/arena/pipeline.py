"""The arena model as a ``WorldModel``: a session's chunks in one procedural arena.

Owns what a session of the arena model needs around the network:

* **The camera.** The trajectory's per-video-frame poses walked through the arena with collisions
  (``Arena.clamp_path``: a step into a wall slides along it; the count of clamped frames is reported in
  ``notes``); these clamped poses are what the memory is keyed on (``camera_poses``). Latent frame f is
  the camera at video frame ``temporal * f``; its action is the mean of the video frames' actions that
  led to it (MG2's universal keys and mouse).
* **The prompt.** Chunk 0 is the arena's true view (rendered) at chunk 0's poses — the arena model's
  start image is its world's rendered first frames; chunk 0 only runs the clean pass.
* **Observe.** A chunk taken from what was observed (``--observe``; chunk 0 always): the world's truth
  at its poses through the clean pass only.
* **Denoise.** Later chunks: seeded noise, the sampler's steps (x0 prediction; re-noised between
  steps), then the clean pass at t = 0 that leaves the chunk's K/V (and copy-layer K/V) in the context.
  A model with the pixel warp also gets the camera of the previous latent frame (the window's last,
  whose pixels the copy layer holds); with re-projection (``reproject`` > 0, the model's or the
  session's ``arena_reproject``) the cameras of every context frame, from which chunks the session's
  memory placed in the context (``AttentionContext.memory_chunks``) and the window's.
* **Depth.** With depth re-projection (``reproject_depth``, the model's or the session's
  ``arena_reproject_depth``; it needs the depth head) the layout has the depth layer, every chunk leaves
  its inverse depth there (a generated chunk: the depth head on the sampler's last pass, re-projected
  pixels keeping the depth they were moved with; an observed chunk: the conv head on its true frames after
  the clean pass — the observed head where the model has one (``observed_depth``) — or the linear head on a
  full pass over them at t = 0, which writes the same K/V as the clean pass), and a generated chunk re-projects
  every context frame with it (``engine.arena.depth_reproject``; context frames ranked by their latent
  frame). Never the renderer's depth: ``depth_source`` is a hook for tests only.
* **Positions.** Latent-frame time positions; ``native`` stops at the horizon (``rope_table_frames``),
  ``extend`` computes past it, ``rerotate`` moves memory keys with ``rotate_time`` (time rotation of
  the transformer layers; the copy layer has no time position).
* **Decode.** Each latent frame becomes ``temporal`` video frames, linearly blended from the previous
  latent frame (chunk 0: 1 + temporal x 2 frames, as MG2's causal VAE), enlarged ``upscale`` times by
  pixel repetition for viewing, as uint8 RGB.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.arena.config import ACTION_DIM, ArenaModelConfig
from engine.arena.data import latent_actions, latent_camera, render_latents
from engine.arena.depth_reproject import GENERATED, OBSERVED
from engine.arena.model import ArenaDiT
from engine.arena.world import Arena
from engine.errors import ConfigError, HorizonError
from engine.geometry import make_poses
from engine.model.state_tensors import generator_state, optional, set_generator_state


class ArenaPipeline:
    name = "arena"
    # Tests only: ``(pipeline, chunk) -> inverse depth [F, H, W]`` used in place of the depth head's.
    depth_source = None

    def __init__(self, model: ArenaDiT, arena: Arena, trajectory, seed: int, positions: str,
                 device: torch.device, dtype: torch.dtype, weights: str, reproject: float | None = None,
                 reproject_depth: bool = False):
        """``reproject``: the re-projection radius in world units (0: off; None: the model's own);
        ``reproject_depth``: re-project with predicted depth (or the model's own ``reproject_depth``)."""
        cfg: ArenaModelConfig = model.cfg
        self.reproject = float(cfg.reproject if reproject is None else reproject)
        self.depth = bool(cfg.reproject_depth or reproject_depth)
        if self.depth and not cfg.depth_head and ArenaPipeline.depth_source is None:
            raise ConfigError(f"--arena-reproject-depth needs weights with a depth head; {weights} has none")
        self.model, self.cfg, self.arena = model, cfg, arena
        self.positions, self.device, self.dtype, self.weights = positions, device, dtype, weights
        self.layout, self.grid = cfg.kv_layout(self.depth), cfg.video_grid()
        self.frame_size = cfg.video_size
        self.horizon_chunk = cfg.horizon_chunk
        self.trajectory = trajectory
        frames = trajectory.frames
        self.poses = np.zeros((frames, 7))                                        # [T, 7] clamped at walls
        self._walked = np.zeros((frames, 4))          # per frame: grid x, z given, then as clamped
        self._clamped = np.zeros(frames, dtype=bool)
        latent_frames = (frames - 1) // cfg.temporal + 1
        self.cam = np.zeros((latent_frames, 4))                                   # [F, 4]
        self.actions = np.zeros((latent_frames, ACTION_DIM), dtype=np.float32)    # [F, A]
        self.inputs_extended(0, frames)
        self.clamped_frames = int(self._clamped.sum())
        self.rng = torch.Generator().manual_seed(seed)
        self._last_frame: torch.Tensor | None = None
        self.notes = [f"arena seed {arena.seed}"] + (
            [f"trajectory clamped at walls on {self.clamped_frames} of {len(self.poses)} frames"]
            if self.clamped_frames else [])

    def inputs_extended(self, start: int, stop: int) -> None:
        """Derive the camera and the latent frames' inputs of video frames [start, stop) (all of them at
        set-up; live play: the frames just given): the path is walked on from where frame ``start - 1``
        stood, so a path derived in pieces is bit for bit the path derived whole."""
        cfg, t = self.cfg, self.cfg.temporal
        poses = np.asarray(self.trajectory.poses[start:stop], dtype=np.float64)
        gx, gz = self.arena.to_grid(poses[:, 0], poses[:, 2])
        after = None if start == 0 else tuple(self._walked[start - 1])
        out_x, out_z, clamped = self.arena.walk(gx, gz, after)
        self._walked[start:stop] = np.stack([gx, gz, out_x, out_z], 1)
        self._clamped[start:stop] = clamped
        x, z = self.arena.to_world(out_x, out_z)
        self.poses[start:stop] = make_poses(np.stack([x, poses[:, 1], z], 1), poses[:, 3:],
                                            None if start == 0 else self.poses[start - 1])
        latent = len(self.cam)
        first, end = -(-start // t), min(latent, -(-stop // t))          # latent f sits at video frame t f
        self.cam[first:end] = latent_camera(self.poses, cfg, end, first)
        first, end = start // t + 1, min(latent, -(-stop // t) + 1)      # f's action: frames [t(f-1), t f)
        if first < end:
            keyboard = self.trajectory.actions.keyboard.numpy()
            mouse = self.trajectory.actions.mouse
            mouse = mouse.numpy() if mouse is not None else np.zeros((len(keyboard), 2))
            self.actions[first:end] = latent_actions(keyboard, mouse, cfg, end, first)

    # ---- WorldModel ---------------------------------------------------------------------------------

    def camera_poses(self) -> np.ndarray:
        return self.poses

    def prepare_context(self, ctx) -> None:
        pass

    def _frames(self, chunk: int) -> slice:
        f = self.cfg.frames_per_chunk
        return slice(chunk * f, (chunk + 1) * f)

    def truth(self, chunk: int) -> torch.Tensor:
        """The arena's true latent frames of ``chunk`` ``[F, 3, H, W]`` (the prompt for chunk 0)."""
        return torch.from_numpy(render_latents(self.arena, self.cam[self._frames(chunk)], self.cfg))

    def _inputs(self, chunk: int, ctx=None):
        """The chunk's ``ChunkInputs`` (with ``ctx``, a generated chunk's: its context frames' cameras for
        the re-projection) and the tensor options."""
        cfg = self.cfg
        if self.positions == "native" and chunk >= self.horizon_chunk:
            raise HorizonError(f"chunk {chunk} is past the arena model's positional horizon (time positions "
                               f"for {cfg.rope_table_frames} latent frames end at chunk {self.horizon_chunk - 1}); "
                               "use --positions extend or rerotate")
        rows = self._frames(chunk)
        to = dict(device=self.device, dtype=self.dtype)
        actions = torch.from_numpy(self.actions[rows])[None].to(**to)
        cam = torch.from_numpy(self.cam[rows].astype(np.float32))[None].to(self.device)   # float32: see chunk_inputs
        prev = rows.start - 1       # the window's last latent frame: the warp's source camera
        prev_cam = torch.from_numpy(self.cam[prev].astype(np.float32))[None].to(self.device) if prev >= 0 else None
        ctx_cam = ctx_time = None
        if ctx is not None and (self.reproject > 0 or self.depth):
            ctx_cam, ctx_time = self.context_cameras(chunk, ctx, with_time=True)
        return self.model.chunk_inputs(actions, cam, chunk * cfg.frames_per_chunk, prev_cam, ctx_cam,
                                       self.reproject, ctx_time, self.depth), to

    def context_cameras(self, chunk: int, ctx, with_time: bool = False):
        """The cameras ``[1, S, 4]`` of ``chunk``'s context frames in the copy layer's order: the memory's
        chunks as the session placed them (``ctx.memory_chunks``), then the window's (the chunks just
        before ``chunk``); ``with_time``: and their latent-frame indices ``[1, S]``."""
        kv = ctx.layers[self.cfg.layers].self_kv
        per_chunk = self.cfg.tokens_per_chunk
        memory = list(ctx.memory_chunks)
        if len(memory) * per_chunk != kv.memory_valid:
            raise ValueError(f"memory of {kv.memory_valid} tokens but chunks {memory} placed")
        window = kv.window_valid // per_chunk
        chunks = memory + list(range(chunk - window, chunk))
        rows = np.concatenate([np.arange(c * self.cfg.frames_per_chunk, (c + 1) * self.cfg.frames_per_chunk)
                               for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        cams = torch.from_numpy(self.cam[rows].astype(np.float32).reshape(1, -1, 4)).to(self.device)
        return (cams, torch.from_numpy(rows.astype(np.int64))[None].to(self.device)) if with_time else cams

    def _clean_pass(self, x0: torch.Tensor, inputs, to: dict, ctx) -> torch.Tensor:
        """The pass at t = 0 on ``x0`` [1, F, 3, H, W] that leaves the chunk's K/V in the context."""
        self.model.chunk_forward(x0, torch.zeros(1, **to), inputs, ctx, output=False)
        return x0

    def _store_depth(self, chunk: int, ctx, inv: torch.Tensor | None, kind: int) -> None:
        """The chunk's inverse depth into the depth layer (``depth_source``'s when a test sets one)."""
        if ArenaPipeline.depth_source is not None:
            inv = torch.as_tensor(ArenaPipeline.depth_source(self, chunk))[None]
        self.model.write_depth(ctx, inv.to(self.device), kind)

    def _with_depth(self) -> bool:
        return self.depth and self.cfg.depth_head and ArenaPipeline.depth_source is None

    @torch.no_grad()
    def observe(self, chunk: int, ctx) -> torch.Tensor:
        """An observed chunk: the world's rendered truth at the chunk's poses, through the clean pass only
        (no noise drawn); with depth re-projection the depth head's depth of it too (the linear head: a full
        pass instead, the same K/V; the conv head reads the frames, the observed head where the model has one)."""
        inputs, to = self._inputs(chunk)
        truth = self.truth(chunk)[None].to(**to)
        if not self.depth:
            return self._clean_pass(truth, inputs, to, ctx)
        inv = None
        if self._with_depth() and self.cfg.depth_kind == "conv":    # the clean pass, then the head on the truth
            self._clean_pass(truth, inputs, to, ctx)
            inv = self.model.observed_frame_depth(truth, inputs.cam)
        elif self._with_depth():
            inv = self.model.chunk_forward(truth, torch.zeros(1, **to), inputs, ctx, with_depth=True)[1]
        else:
            self._clean_pass(truth, inputs, to, ctx)
        self._store_depth(chunk, ctx, inv, OBSERVED)
        return truth

    @torch.no_grad()
    def denoise(self, chunk: int, ctx) -> torch.Tensor:
        if chunk == 0:                     # the prompt: the world's true view
            return self.observe(0, ctx)
        cfg = self.cfg
        inputs, to = self._inputs(chunk, ctx)
        shape = (1, cfg.frames_per_chunk, 3, cfg.height, cfg.width)
        x = torch.randn(shape, generator=self.rng).to(**to)
        steps = list(cfg.steps)
        inv = None
        for i, t in enumerate(steps):
            last = i + 1 == len(steps)
            x0 = self.model.chunk_forward(x, torch.full((1,), t, **to), inputs, ctx,
                                          with_depth=last and self._with_depth())
            if last and self._with_depth():
                x0, inv = x0
            if not last:
                nxt = steps[i + 1]
                x = (1 - nxt) * x0 + nxt * torch.randn(shape, generator=self.rng).to(**to)
        out = self._clean_pass(x0.clamp(-1, 1), inputs, to, ctx)
        if self.depth:
            self._store_depth(chunk, ctx, inv, GENERATED)
        return out

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        """uint8 RGB ``[T, H * upscale, W * upscale, 3]``: blended in time, enlarged by pixel repetition
        (the model's pixels stay visible as they are; at this size, cheaper than any filter)."""
        frames = latents[0].float().cpu()                                          # [F, 3, h, w]
        t, up = self.cfg.temporal, self.cfg.upscale
        out = []
        for frame in frames:
            prev = self._last_frame
            if prev is None:                                                       # the very first frame
                out.append(frame)
            else:
                out += [prev + (frame - prev) * (j / t) for j in range(1, t + 1)]
            self._last_frame = frame
        video = ((torch.stack(out).clamp_(-1, 1) + 1) * 127.5).round_().to(torch.uint8)   # [T, 3, h, w]
        video = video.permute(0, 2, 3, 1).numpy()                                  # [T, h, w, 3]
        # numpy's repeat copies whole pixels, then whole rows (measured: 0.6 ms for 12 frames, 4-16 ms
        # with torch's repeat_interleave on these strides)
        return torch.from_numpy(np.repeat(np.repeat(video, up, axis=2), up, axis=1))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Noise RNG and the last latent frame (the next chunk's first frames blend from it)."""
        out = {"rng": generator_state(self.rng)}
        if self._last_frame is not None:
            out["last_frame"] = self._last_frame.clone()
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        set_generator_state(self.rng, tensors["rng"])
        self._last_frame = optional(tensors, "last_frame", dtype=torch.float32)

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        if layer >= self.cfg.layers:                                               # the copy layer
            return keys
        return self.model.rope.rotate(keys, torch.tensor(float(delta_frames), device=keys.device))
