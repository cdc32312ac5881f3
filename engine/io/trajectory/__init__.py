"""Trajectory files → per-video-frame MG2 actions (the model's input) and camera poses (the memory's key).

Contract: ``load_trajectory(path, mode, frames, repeat, calibration)`` returns a ``Trajectory`` of exactly
``frames`` video frames in ``mode``'s action space, or raises ``InputError`` whose one-line message
names the file and the line or field at fault. Poses follow ``engine.geometry`` (y-up world, camera
looks along -z, yaw > 0 turns right, pitch > 0 looks up; ``[T, 7]`` = x, y, z, qw, qx, qy, qz).

One pipeline for every format: the file becomes per-frame actions plus a start pose (pose files are
first resampled onto the 16 fps grid — linear position, slerp rotation — and then *tracked*: each frame
picks the action whose calibrated motion lands nearest the next target pose, carrying what it missed
into the next frame); the actions are extended to ``frames`` (loop or ping-pong) and integrated with the
calibration into the poses. So the poses always describe the camera the actions drive — the memory is
keyed by the path the model was told to take, not by a path it could not express. ``Trajectory.tracking``
says how far that path strays from the file's poses (vertical motion, roll, pitch in gta_drive and
strafing in gta_drive cannot be expressed and show up there). Pose files cannot drive templerun (its
actions are discrete lane changes and turns of an always-running character).

Formats (by extension; other names are sniffed from the content):

``.yaml`` / ``.yml``::

    start: {position: [0, 0, 0], yaw: 0, pitch: 0, roll: 0}   # optional; only without keyframes
    keyframes:                 # camera poses; times relative to the first keyframe
      - t: 0.0                 # seconds, or `frame: N` (16 fps); strictly increasing
        position: [0, 0, 0]    # x, y, z; each field defaults to the previous keyframe's (first: 0)
        yaw: 0                 # degrees; consecutive keyframes must differ by less than 180
        pitch: 0               # degrees in [-90, 90]
        roll: 0                # optional
    segments:                  # actions, played after the keyframes (from the last keyframe's pose)
      - keys: [w, a]           # universal w s a d (or forward back left right); gta_drive w s, and
                               # a d steer (mouse yaw -/+0.1); templerun one of none jump slide
                               # turn_left turn_right left_side right_side
        camera: right          # or [up, right]: +-0.1 on pitch (up +) / yaw (right +); or
        # mouse: [0.0, 0.05]   # raw [pitch, yaw] mouse values (not with camera)
        frames: 24             # or `seconds: 1.5` (rounded to whole frames)

  Unknown keys, wrong types, NaN/inf and duplicate keys are errors naming the line.

``.csv`` (read with the ``csv`` module, so quoted fields work; leading ``#`` comment lines and blank
  lines are skipped; header names are case-insensitive; one record per line):
  * poses: ``t`` (seconds) or ``frame``, then ``x, y, z, yaw, pitch`` and optional ``roll`` (degrees; the
    columns in any order). Rotation between rows takes the shorter arc, so wrapped yaw is fine.
  * raw actions, one row per video frame, ``frame`` = 0, 1, 2, …:
    universal ``frame, w, s, a, d, mouse_pitch, mouse_yaw``; gta_drive ``frame, w, s, mouse_yaw``;
    templerun ``frame, none, jump, slide, turn_left, turn_right, left_side, right_side`` (one-hot).
    Keys are 0 or 1; mouse values within [-1, 1] (MG2 trained on 0 and +-0.1). A file for another
    mode is an error.

``.json``: nerfstudio ``camera_path.json``: ``camera_path: [{camera_to_world: 16 floats (row-major 4x4)
  or a nested 4x4 / 3x4, ...}]`` at ``fps`` (else ``len / seconds``). nerfstudio cameras already use our
  camera axes; its world is z-up, so world (x, y, z) becomes ours (x, z, -y) (``nerfstudio_up="y"``
  skips that).

Repeat: a file shorter than ``frames`` is extended at the action level — ``loop`` replays its actions
(a closed path revisits its places; an open one continues from where it ended), ``pingpong`` plays them
backwards mirrored (W<->S, A<->D, mouse negated; templerun swaps the turns and the sides), which retraces
the path exactly unless pitch hit its limit. A longer file is cut. ``Trajectory.repeat`` records which.

Package layout (one module per concern; they import one another one way only — ``fields`` and
``kinematics``, then ``build``, ``tracker``, the formats, ``load`` — and never this ``__init__``):
``load`` (``load_trajectory``: file, format, dispatch), ``packaged`` (``packaged_trajectory``),
``build`` (``Trajectory``, ``TrackingError``, extend / cut / integrate, ``trajectory_from_actions``,
``poses_from_actions``), ``kinematics`` (actions -> motion), ``tracker`` (target poses -> actions),
``fields`` (error messages and checked values), ``yaml_lines`` / ``yaml_file`` / ``yaml_segments``,
``csv_table`` / ``pose_csv`` / ``action_csv``, ``nerfstudio``, and ``splice`` (a fork's trajectory).
"""
from engine.io.trajectory.build import (MODES, REPEATS, Trajectory, TrackingError, poses_from_actions,
                                       trajectory_from_actions)
from engine.io.trajectory.load import PathLike, load_trajectory
from engine.io.trajectory.packaged import packaged_trajectory

__all__ = ["MODES", "REPEATS", "PathLike", "Trajectory", "TrackingError", "load_trajectory", "packaged_trajectory",
           "poses_from_actions", "trajectory_from_actions"]
