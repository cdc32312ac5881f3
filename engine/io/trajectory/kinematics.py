"""Actions -> camera motion, per the calibration: what each frame's keys and mouse do to the camera.

Owns the one reading of an action row as motion (forward, right, yaw, pitch per frame), shared by the
integration of a trajectory's poses (``build``) and by the tracker's candidate moves (``tracker``), so
the tracker picks actions by exactly the motion the poses will later show.
"""
from __future__ import annotations

import numpy as np

from engine.io.poses import Calibration, CameraState, integrate


def _moves(mode: str, keyboard: np.ndarray, mouse: np.ndarray | None, cal: Calibration):
    """Per-frame (forward, right, dyaw, dpitch) of actions [N, k] / [N, 2], per the calibration."""
    held = keyboard > 0.5
    zeros = np.zeros(len(keyboard))
    if mode == "templerun":   # the character always runs forward; turns and lane moves are keys
        forward = np.full(len(keyboard), cal.distance_per_frame)
        right = cal.distance_per_frame * (held[:, 6].astype(float) - held[:, 5])
        dyaw = cal.templerun_turn_degrees * (held[:, 4].astype(float) - held[:, 3])
        return forward, right, dyaw, zeros
    # Opposite keys held together cancel (as in MG3's integrator).
    fwd = (held[:, 0] & ~held[:, 1]).astype(float) - (held[:, 1] & ~held[:, 0])
    side = zeros if mode == "gta_drive" else (held[:, 3] & ~held[:, 2]).astype(float) - (held[:, 2] & ~held[:, 3])
    speed = cal.distance_per_frame * np.where((fwd != 0) & (side != 0), cal.diagonal_scale, 1.0)
    dpitch = zeros if mode == "gta_drive" else cal.mouse_degrees(mouse[:, 0])   # gta steers with yaw only
    return fwd * speed, side * speed, cal.mouse_degrees(mouse[:, 1]), dpitch


def _integrate_actions(keyboard: np.ndarray, mouse: np.ndarray | None, mode: str, cal: Calibration,
                       start: CameraState) -> list[CameraState]:
    return integrate(*_moves(mode, keyboard, mouse, cal), start, cal.pitch_limit)
