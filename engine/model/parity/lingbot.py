"""Parity of LingBot-World-Fast (DiT, cache, DMD loop) against the official code's fixture.

Owns the replay of a ``cam_tiny``-style case (README of ``fixtures/lingbot_parity``): check the weight
generator, rebuild the weights, then

(1) teacher-forced: feed every stored forward input in order and compare each velocity, plus the
    intermediates of the forwards that have ``debug.c{c}f0.*`` tensors (captured with forward hooks on
    the modules of the same names);
(2) free-running: run ``generate_latents`` with the stored noise and re-noise draws; compare x0 after
    every step, the re-noised inputs, the final latents per chunk, the cache indices after every
    forward and, with the ``_caches`` companion, the self-attention K/V, indices and slot frames after
    every chunk and every layer's cross-attention K/V;

plus the input rows of ``lingbot_camera`` (and the ``_camutils`` companion's). The control tensor fed to
the DiT is the stored one (``cam.embedding``), so a camera error and a DiT error show apart. Attention runs on
PyTorch's math kernel, the reference's. Rows are ``(name, max |ours - ref| / std(ref))``.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.errors import InputError
from engine.model.lingbot.cache import FastCaches
from engine.facts.lingbot_config import FastDiTConfig, LoopSettings, config_from_official
from engine.model.lingbot.dit import WanModelFast
from engine.model.lingbot.loop import (ChunkConditioning, RunShape, allocate_caches, generate_latents,
                                       run_shape)
from engine.model.lingbot.schedule import DMDSchedule
from engine.model.lingbot.weights import load_state
from engine.model.parity.fixture import Fixture, relative_error
from engine.model.parity.lingbot_camera import (Row, camera_rows, camutils_rows, compare, mask_rows,
                                                schedule_rows)
from engine.model.parity.vae import verified_weights


SETTINGS = ("chunk_size", "timesteps_index", "shift", "num_train_timesteps", "frame_num_requested",
            "n_poses", "lat_h", "lat_w")


@dataclasses.dataclass
class Case:
    fx: Fixture
    cfg: FastDiTConfig
    settings: LoopSettings
    shape: RunShape

    @classmethod
    def open(cls, path: Path) -> "Case":
        fx = Fixture.open(path)
        cfg = config_from_official(fx.json("config"))
        s = fx.json("settings")
        missing = [k for k in SETTINGS if k not in s]
        if missing:
            raise InputError(f"{path}: settings lack {missing}")
        settings = LoopSettings(chunk_size=s["chunk_size"], timesteps_index=tuple(s["timesteps_index"]),
                                shift=float(s["shift"]), num_train_timesteps=s["num_train_timesteps"],
                                max_attention_size=s.get("max_attention_size"))
        shape = run_shape(s["frame_num_requested"], s["n_poses"], s["lat_h"], s["lat_w"], cfg, settings)
        return cls(fx, cfg, settings, shape)

    def inputs(self):
        """noise, y, control, context with a batch axis of 1."""
        t = self.fx.tensor
        return (t("inputs.noise")[None], t("inputs.y")[None], t(self.control_key()), t("inputs.context")[None])

    def control_key(self) -> str:
        """The stored control tensor: ``cam.embedding``, else the one other ``*.embedding`` input."""
        keys = [k for k in self.fx.keys() if k.endswith(".embedding") and not k.startswith("debug.")]
        if "cam.embedding" in keys:
            return "cam.embedding"
        if len(keys) != 1:
            raise InputError(f"{self.fx.path}: no single control tensor among {keys or 'no *.embedding'}")
        return keys[0]

    def conditioning(self, chunk: int) -> ChunkConditioning:
        _, y, control, context = self.inputs()
        frames = self.frames(chunk)
        return ChunkConditioning(y[:, :, frames], control[:, :, frames], context)

    def frames(self, chunk: int) -> slice:
        f = self.shape.chunk_frames
        return slice(chunk * f, (chunk + 1) * f)


def build_model(case: Case) -> WanModelFast:
    return load_state(case.cfg, verified_weights(case.fx, "", "weights.checksum"), case.fx.path)


def _tap_module(name: str) -> str:
    """``debug.cXfY.<name>`` -> the module whose output it is."""
    if name == "head":
        return "head.head"
    if name.startswith("block"):
        index, _, part = name[len("block"):].partition(".")
        return f"blocks.{index}" if part == "out" else f"blocks.{index}.{part}"
    return name


def _module(model: WanModelFast, name: str) -> torch.nn.Module:
    try:
        return model.get_submodule(_tap_module(name))
    except AttributeError:
        raise InputError(f"debug tensor {name!r} names no module of the model") from None


@contextmanager
def _taps(model: WanModelFast, names: list[str], store: dict[str, torch.Tensor]):
    def hook(name):
        return lambda module, args, output: store.__setitem__(name, output)
    handles = [_module(model, n).register_forward_hook(hook(n)) for n in names]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _debug_rows(case: Case, model: WanModelFast, prefix: str, taps: dict[str, torch.Tensor]) -> list[Row]:
    names = [k for k in case.fx.keys() if k.startswith(prefix)]
    if "text_embedding" not in taps:    # computed once per run; later forwards reuse the cross K/V
        taps["text_embedding"] = model.embed_text(case.inputs()[3])
    return [compare(k, taps[k[len(prefix):]], case.fx.tensor(k)) for k in sorted(names)]


def teacher_forced_rows(case: Case, model: WanModelFast) -> list[Row]:
    fx, shape = case.fx, case.shape
    schedule = DMDSchedule(case.settings)
    velocity, renoised, x0 = (fx.tensor(k) for k in ("forward.velocity", "forward.x_in_renoised", "forward.x0"))
    noise = case.inputs()[0]
    caches = allocate_caches(case.cfg, shape, case.settings)
    n, rows = schedule.num_steps, []
    for c in range(shape.chunks):
        cond = case.conditioning(c)
        for k in range(n + 1):
            x = noise[:, :, case.frames(c)] if k == 0 else (renoised[c, k - 1] if k < n else x0[c, n - 1])[None]
            t = schedule.timesteps[k:k + 1] if k < n else torch.zeros(1)
            prefix = f"debug.c{c}f{k}."
            names = sorted({key[len(prefix):] for key in fx.keys() if key.startswith(prefix)})
            taps: dict[str, torch.Tensor] = {}
            with _taps(model, names, taps):
                v = model(x, t, cond.context, cond.y, cond.control, caches, c * shape.chunk_tokens,
                          shape.frame_seqlen)
            rows.append((f"teacher.velocity[{c},{k}]", relative_error(v[0], velocity[c, k])))
            if names:
                rows.extend(_debug_rows(case, model, prefix, taps))
    return rows


def _fed_rows(case: Case, schedule: DMDSchedule) -> list[Row]:
    chunks, n = case.shape.chunks, schedule.num_steps
    fed = torch.cat([schedule.timesteps.to(torch.float32), torch.zeros(1)]).expand(chunks, n + 1)
    starts = (torch.arange(chunks) * case.shape.chunk_tokens)[:, None].expand(chunks, n + 1)
    return [compare("schedule.timestep_fed", fed, case.fx.tensor("schedule.timestep_fed")),
            compare("schedule.current_start", starts, case.fx.tensor("schedule.current_start"))]


def _cache_rows(caches_fx: Fixture, caches: FastCaches, chunk: int, frame_seqlen: int) -> list[Row]:
    names, rows = set(caches_fx.keys()), []
    for layer, kv in enumerate(caches.self_kv):
        base = f"kv.layer{layer}.after_chunk{chunk}"
        if f"{base}.k" not in names:
            continue
        k, v = kv.valid()
        rows += [compare(f"{base}.k", k, caches_fx.tensor(f"{base}.k")),
                 compare(f"{base}.v", v, caches_fx.tensor(f"{base}.v")),
                 compare(f"{base}.index", torch.tensor([kv.global_end, kv.local_end]),
                         caches_fx.tensor(f"{base}.index"))]
    frames_key = f"kv.after_chunk{chunk}.frames"
    if frames_key in names:
        rows.append(compare(frames_key, caches.self_kv[0].frames(frame_seqlen), caches_fx.tensor(frames_key)))
    return rows


def free_running_rows(case: Case, model: WanModelFast, caches_fx: Fixture | None) -> list[Row]:
    fx, shape = case.fx, case.shape
    schedule = DMDSchedule(case.settings)
    ref_x0, ref_in, draws = (fx.tensor(k) for k in ("forward.x0", "forward.x_in_renoised", "inputs.renoise"))
    caches = allocate_caches(case.cfg, shape, case.settings)
    n, rows = schedule.num_steps, []
    index = torch.zeros(shape.chunks, n + 1, 2, dtype=torch.int64)   # [global, local] after each forward

    def trace(chunk, step, x_in, velocity, x0):
        index[chunk, step] = torch.tensor([caches.self_kv[0].global_end, caches.self_kv[0].local_end])
        if 0 < step < n:
            rows.append((f"chain.x_in_renoised[{chunk},{step - 1}]",
                         relative_error(x_in[0], ref_in[chunk, step - 1])))
        if step < n:
            rows.append((f"chain.x0[{chunk},{step}]", relative_error(x0[0], ref_x0[chunk, step])))
        elif caches_fx is not None:
            rows.extend(_cache_rows(caches_fx, caches, chunk, shape.frame_seqlen))

    noise, y, control, context = case.inputs()
    latents = generate_latents(model, schedule, caches, shape, noise, y, control, context,
                               lambda c, k, like: draws[c, k][None].to(like.dtype), trace)
    ref = fx.tensor("output.latents")
    for c in range(shape.chunks):
        f = case.frames(c)
        rows.append((f"output.latents[chunk {c}]", relative_error(latents[0, :, f], ref[:, f])))
    if caches_fx is not None:
        rows.append(compare("kv.index_after_forward", index, caches_fx.tensor("kv.index_after_forward")))
        for layer, cross in enumerate(caches.cross):
            for part in ("k", "v"):
                key = f"crossattn.layer{layer}.{part}"
                rows.append(compare(key, getattr(cross, part), caches_fx.tensor(key)))
    return rows + _fed_rows(case, schedule)


def _companion(path: Path, suffix: str) -> Fixture | None:
    other = path.with_name(f"{path.stem}_{suffix}.safetensors")
    return Fixture.open(other) if other.is_file() else None


def lingbot_rows(path: Path) -> list[Row]:
    """Every row of a LingBot-World-Fast fixture (with its ``_caches`` / ``_camutils`` companions)."""
    case = Case.open(path)
    camutils = _companion(path, "camutils")
    rows = camera_rows(case.fx, case.shape, case.cfg.control_type) + mask_rows(case.fx, case.shape)
    rows += schedule_rows(case.fx, DMDSchedule(case.settings))
    rows += camutils_rows(camutils) if camutils is not None else []
    model = build_model(case)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        rows += teacher_forced_rows(case, model)
        rows += free_running_rows(case, model, _companion(path, "caches"))
    return rows


def camutils_file_rows(path: Path) -> list[Row]:
    """A ``_camutils`` file alone."""
    return camutils_rows(Fixture.open(path))
