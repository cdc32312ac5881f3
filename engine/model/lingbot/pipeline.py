"""LingBot-World-Fast as a ``WorldModel`` (``engine.model.interface``): camera control, denoise, decode.

Owns what one chunk of LingBot needs around the DiT, streamed chunk by chunk for sessions of any length:

* **Conditioning y**: mask + start-image latent of the chunk's latent frames. The official code encodes
  [image, zeros] with the Wan2.1 VAE; MG2 is a Wan i2v model with the same y, so the streaming
  ``StartImageEncoder`` (``engine.model.vae``) gives it, latent frame by latent frame.
* **Camera control**: the trajectory's per-video-frame poses (``engine.geometry`` convention: OpenGL
  camera axes) become OpenCV camera-to-world matrices (camera y and z flipped); latent frame i takes the
  pose of video frame 4i (the official resampling lands exactly there when the video has 4n+1 frames);
  poses are made relative frame to frame and translations normalised by the largest one over the
  session's whole trajectory (the official rule, over the official whole run); rays are computed per
  chunk with a pose folder's intrinsics, else the retrieval's field of view, on the model's pixel grid;
  ``act`` control adds the W, A, S, D keys (``engine.model.lingbot.session_control``). In live play
  (``inputs_extended``) the whole run is not known when a chunk starts: translations are divided by
  the calibration's walk over one latent frame instead.
* **Text**: the text encoder's output rows ``[1, n, text_dim]`` given by the family (for the tiny
  model a seeded random stand-in); its cross-attention K/V are put into the context by
  ``prepare_context``.
* **Denoise**: the official DMD steps and clean pass (``engine.model.lingbot.loop.denoise_chunk``) with
  the DiT's caches as views of the session's context (``engine.model.lingbot.context``); time positions
  are absolute latent frames (RoPE computes any position: ``extend``), ``native`` stops at the horizon.
* **Decode**: MG2's streaming Wan2.1 VAE decoder (9 frames for chunk 0, 12 after).

The noise comes from one CPU generator seeded by the session: each chunk draws its initial noise, then
the re-noise of its steps. Running state across a save point: that generator, the start-image encoder's
stream and the decoder's causal cache.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.errors import HorizonError
from engine.geometry import quat_to_matrix
from engine.io.trajectory import Trajectory
from engine.model.lingbot import camera
from engine.facts.lingbot_config import VAE_STRIDE
from engine.model.lingbot.context import attach_text, context_caches
from engine.model.lingbot.dit import WanModelFast
from engine.model.lingbot.loop import ChunkConditioning, RunShape, denoise_chunk
from engine.facts.lingbot_models import LingbotModelConfig
from engine.model.lingbot.schedule import DMDSchedule
from engine.model.lingbot.session_control import chunk_control, latent_keys, ray_intrinsics
from engine.model.vae import StartImageEncoder, StreamingDecoder, WanVAE
from engine.model.state_tensors import generator_state, nest, set_generator_state, sub

OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0])     # camera axes: y up / z backward -> y down / z forward


def opencv_c2w(poses: np.ndarray) -> torch.Tensor:
    """Poses [T, 7] (x, y, z, qw, qx, qy, qz; OpenGL camera axes) -> OpenCV c2w matrices [T, 4, 4] float64."""
    out = np.zeros((len(poses), 4, 4))
    out[:, :3, :3] = quat_to_matrix(poses[:, 3:7]) @ OPENGL_TO_OPENCV
    out[:, :3, 3] = poses[:, :3]
    out[:, 3, 3] = 1.0
    return torch.from_numpy(out)


def latent_frame_poses(poses: np.ndarray) -> torch.Tensor:
    """OpenCV c2w [N, 4, 4] of the latent frames of a video of ``len(poses)`` frames: video frame 4i
    (the last frame for a latent frame past the end)."""
    latents = (len(poses) - 1) // VAE_STRIDE[0] + 1
    index = np.minimum(np.arange(latents) * VAE_STRIDE[0], len(poses) - 1)
    return opencv_c2w(poses[index])


class LingbotPipeline:
    """One LingBot-World-Fast session's model (see the module docstring); satisfies ``WorldModel``."""

    def __init__(self, dit: WanModelFast, vae: WanVAE, m: LingbotModelConfig, image: torch.Tensor,
                 trajectory: Trajectory, text: torch.Tensor, seed: int, positions: str,
                 device: torch.device, dtype: torch.dtype, weights: str, official_sink: bool = False,
                 live_step: float = VAE_STRIDE[0] * 0.1235):
        """``live_step``: the translation a latent frame's relative pose is divided by in live play (the
        calibration's walk over one latent frame; ``inputs_extended``)."""
        self.dit, self.vae, self.cfg, self.trajectory = dit, vae, m, trajectory
        self.name, self.weights = m.name, weights
        self.layout, self.grid = m.kv_layout(), m.video_grid()
        self.horizon_chunk: int | None = m.horizon_chunk
        self.positions, self.device, self.dtype = positions, device, dtype
        self.text = text.to(device, dtype)                                  # [1, n, text_dim]
        self.schedule = DMDSchedule(m.settings)
        self.rng = torch.Generator().manual_seed(seed)
        self.encoder = StartImageEncoder(vae, image.to(device, dtype))
        self.decoder = StreamingDecoder(vae)
        # every latent frame's frame-to-frame pose, translations normalised over the whole trajectory
        self.relative = camera.relative_poses(latent_frame_poses(trajectory.poses))     # [N, 4, 4]
        self.ray_ks, self.keys = ray_intrinsics(m, trajectory), latent_keys(m, trajectory)
        self.live_step = live_step
        self.sink_tokens = max(m.dit.sink_size, 0) * m.tokens_per_frame if official_sink else 0
        self.shape = RunShape(frame_num=trajectory.frames, lat_f=len(self.relative), lat_h=m.latent_height,
                              lat_w=m.latent_width, chunk_frames=m.frames_per_chunk,
                              frame_seqlen=m.tokens_per_frame,
                              kv_size=(m.window_frames + m.frames_per_chunk) * m.tokens_per_frame,
                              sink_tokens=0)

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.cfg.frame_size

    def camera_poses(self) -> np.ndarray:
        """The trajectory's per-video-frame poses [T, 7] (LingBot goes wherever the camera says)."""
        return self.trajectory.poses

    def inputs_extended(self, start: int, stop: int) -> None:
        """Live play: video frames [start, stop) were given. The relative camera of every latent frame
        known so far, its translations divided by ``live_step`` (the official rule divides by the largest
        over the whole run, which a live session cannot know yet), and the act keys of those frames."""
        poses = self.trajectory.poses[:stop]
        relative = camera.relative_poses(latent_frame_poses(poses), normalize=False)
        relative[:, :3, 3] /= self.live_step
        self.relative[:len(relative)] = relative
        keys = latent_keys(self.cfg, self.trajectory)
        if keys is not None:
            self.keys.copy_(keys)

    def prepare_context(self, ctx) -> None:
        """The text's cross-attention K/V on every layer of the context."""
        attach_text(ctx, self.dit, self.text)

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        """Keys [B, T, H, D] moved ``delta_frames`` latent frames on RoPE's time axis (every layer alike)."""
        return self.dit.rope.rotate_time(keys, delta_frames)

    def place_keys(self, layer: int, keys: torch.Tensor, start_frame: float) -> torch.Tensor:
        """Keys [B, T, H, D] of one chunk, stored before RoPE, rotated by the DiT's 3D RoPE as if the
        chunk's first latent frame sat at ``start_frame`` (every layer alike; at the chunk's own position
        exactly the rotation its forward applied)."""
        m = self.cfg
        _, ph, pw = m.dit.patch_size
        return self.dit.rope.apply_at(keys, start_frame, m.frames_per_chunk, m.latent_height // ph,
                                      m.latent_width // pw)

    def check_position(self, chunk: int) -> None:
        if self.positions == "native" and chunk >= self.horizon_chunk:
            raise HorizonError(
                f"chunk {chunk} is past {self.name}'s positional horizon (rotary table of "
                f"{self.cfg.rope_table_frames} latent frames ends at chunk {self.horizon_chunk - 1}); "
                "use --positions extend or rerotate")

    def control(self, chunk: int) -> torch.Tensor:
        """The chunk's control tensor [1, C*64, F, h, w] (``engine.model.lingbot.session_control``)."""
        return chunk_control(self.cfg, self.relative, self.ray_ks, self.keys, chunk)

    @torch.no_grad()
    def denoise(self, chunk: int, ctx) -> torch.Tensor:
        """Chunk's clean latents [1, 16, F, h, w]; its K/V stay uncommitted in ``ctx``."""
        self.check_position(chunk)
        m = self.cfg
        f = m.frames_per_chunk
        to_model = dict(device=self.device, dtype=self.dtype)
        noise = torch.randn((1, m.dit.out_dim, f, m.latent_height, m.latent_width), generator=self.rng,
                            dtype=torch.float32).to(**to_model)                  # [B, z, F, h, w]
        cond = ChunkConditioning(self.encoder.cond_concat(f).to(**to_model), self.control(chunk).to(**to_model),
                                 self.text)
        return denoise_chunk(self.dit, self.schedule, context_caches(ctx, self.sink_tokens), self.shape, chunk, noise, cond,
                             self._renoise)

    def _renoise(self, _chunk: int, _step: int, like: torch.Tensor) -> torch.Tensor:
        eps = torch.randn(like.shape, generator=self.rng, dtype=torch.float32)
        return eps.to(device=like.device, dtype=like.dtype)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        """Video frames [T, 3, H, W] in [-1, 1] (9 for the first chunk, 12 after)."""
        return self.decoder.decode_chunk(latents).clamp_(-1, 1)[0]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"rng": generator_state(self.rng), **nest("encoder", self.encoder.state_tensors()),
                **nest("decoder", self.decoder.state_tensors())}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        set_generator_state(self.rng, tensors["rng"])
        self.encoder.load_state_tensors(sub("encoder", tensors))
        self.decoder.load_state_tensors(sub("decoder", tensors))
