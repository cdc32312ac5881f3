"""Parity of LingBot-World-Fast's inputs against its fixture: camera utilities, schedule, y mask.

Owns the rows that need no DiT: the control tensor from the stored poses and intrinsics (``cam.*``),
the ``act`` control tensor (ray directions + the WASD actions of ``inputs.*action*``,
``engine.model.lingbot.act``), the four camera utilities on the harder stand-alone pose list (``camcase.*``, the ``_camutils``
companion file), the sigma tables and look-ups (``schedule.*``) and the mask channels of y. Integer
tensors compare exactly (error 0 or infinity).
"""
from __future__ import annotations

import torch

from engine.errors import InputError

from engine.model.lingbot import camera
from engine.model.lingbot.act import act_embedding, latent_actions
from engine.model.lingbot.loop import RunShape, camera_condition, image_mask
from engine.model.lingbot.schedule import DMDSchedule
from engine.model.parity.fixture import Fixture, relative_error

Row = tuple[str, float]


def exact_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    same = ours.shape == ref.shape and bool((ours.to(ref.dtype) == ref).all())
    return 0.0 if same else float("inf")


def compare(name: str, ours: torch.Tensor, ref: torch.Tensor) -> Row:
    if ref.is_floating_point():
        return name, relative_error(ours, ref)
    return name, exact_error(ours, ref)


def action_key(keys) -> str | None:
    """The stored per-video-frame actions (``inputs.action`` as ``action.npy``, or another
    ``inputs.*action*`` name); None when the fixture has none."""
    found = sorted(k for k in keys if k.startswith("inputs.") and "action" in k)
    if len(found) > 1:
        raise InputError(f"several action inputs {found}; expected one")
    return found[0] if found else None


def control_key(keys) -> str | None:
    """The stored control tensor: ``cam.embedding``, else the one other ``*.embedding`` (not debug)."""
    found = [k for k in keys if k.endswith(".embedding") and not k.startswith("debug.")]
    if "cam.embedding" in found:
        return "cam.embedding"
    return found[0] if len(found) == 1 else None


def camera_rows(fx: Fixture, shape: RunShape, control_type: str) -> list[Row]:
    """``cam.*`` from ``inputs.poses_c2w`` / ``inputs.intrinsics``: the whole camera path of ``cam``
    control; with ``act`` control the poses, intrinsics, the directions-only rays and, when the fixture
    stores the actions, the 7-channel control tensor (rays + actions, ``engine.model.lingbot.act``)
    compared with its stored control tensor (and any other ``*action*`` tensor of shape [lat_f, 4] with
    the picked rows)."""
    names = set(fx.keys())
    cam = camera_condition(fx.tensor("inputs.poses_c2w"), fx.tensor("inputs.intrinsics"), shape)
    ours = {"cam.Ks": cam.ks, "cam.c2ws_interpolated": cam.interpolated, "cam.c2ws_relative": cam.relative}
    if control_type == "cam":
        ours.update({"cam.plucker": cam.rays, "cam.embedding": cam.embedding})
    else:
        rays_d = cam.rays[..., 3:]
        if "cam.plucker" in names and fx.tensor("cam.plucker").shape[-1] == 3:
            ours["cam.plucker"] = rays_d
        actions = action_key(names)
        if actions is not None:
            picked = latent_actions(fx.tensor(actions), shape.frame_num, shape.lat_f)
            ours.update({k: picked for k in names if "action" in k and not k.startswith(("inputs.", "debug."))
                         and tuple(fx.tensor(k).shape) == tuple(picked.shape)})
            key = control_key(names)
            if key is not None:
                ours[key] = act_embedding(rays_d, picked)
    return [compare(k, v, fx.tensor(k)) for k, v in ours.items() if k in names]


def camutils_rows(fx: Fixture) -> list[Row]:
    """The four camera utilities on ``camcase.*`` (sizes from the ``camcase_sizes`` metadata)."""
    sizes = fx.json("camcase_sizes")
    t = fx.tensor
    interpolated = camera.interpolate_poses(t("camcase.src_c2w"), t("camcase.src_indices"),
                                            t("camcase.tgt_indices"))
    ref_interp = t("camcase.interpolated")
    ks = camera.transform_intrinsics(t("camcase.Ks_in"), (sizes["height_org"], sizes["width_org"]),
                                     (sizes["height_resize"], sizes["width_resize"]),
                                     (sizes["height_final"], sizes["width_final"]))
    relative = t("camcase.relative_framewise")
    frames, hf, wf = len(relative), sizes["height_final"], sizes["width_final"]
    per_frame = ks[:1].expand(frames, 4)
    rows = [compare("camcase.interpolated", interpolated, ref_interp),
            # the relative poses start from the reference interpolation, so their rows test only themselves
            compare("camcase.relative_framewise", camera.relative_poses(ref_interp), relative),
            compare("camcase.relative_global", camera.relative_poses(ref_interp, framewise=False),
                    t("camcase.relative_global")),
            compare("camcase.relative_framewise_unnormalized",
                    camera.relative_poses(ref_interp, normalize=False),
                    t("camcase.relative_framewise_unnormalized")),
            compare("camcase.Ks_transformed", ks, t("camcase.Ks_transformed")),
            compare("camcase.plucker", camera.plucker_rays(relative, per_frame, hf, wf), t("camcase.plucker")),
            compare("camcase.plucker_rays_d",
                    camera.plucker_rays(relative, per_frame, hf, wf, with_origin=False),
                    t("camcase.plucker_rays_d"))]
    return rows


def schedule_rows(fx: Fixture, schedule: DMDSchedule) -> list[Row]:
    ours = {"schedule.timesteps_table": schedule.timesteps_table,
            "schedule.sigmas_table": schedule.sigmas_table, "schedule.timesteps": schedule.timesteps,
            "schedule.sigma_x0": schedule.sigma_x0, "schedule.sigma_renoise": schedule.sigma_renoise}
    return [compare(k, v, fx.tensor(k)) for k, v in ours.items()]


def mask_rows(fx: Fixture, shape: RunShape) -> list[Row]:
    mask = image_mask(shape)
    return [compare("inputs.y[mask channels]", mask, fx.tensor("inputs.y")[:len(mask)])]
