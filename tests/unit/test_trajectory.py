"""load_trajectory: every format, the shipped files, repeat modes, pose <-> action round trips, errors."""
from __future__ import annotations

import csv
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ConfigError, InputError
from engine.io.actions import CAMERA_STEP, KEYBOARD_KEYS, ActionTrack, builtin_schedule
from engine.geometry import poses_euler, quat_from_euler, quat_to_matrix, rotation_angle
from engine.io.poses import ORIGIN, Calibration, integrate, states_to_poses
from engine.io.trajectory import (load_trajectory, packaged_trajectory, poses_from_actions,
                                  trajectory_from_actions)

REPO = Path(__file__).resolve().parents[2]
CAL = Calibration()
STEP = CAL.distance_per_frame


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def euler(traj, frame):
    return poses_euler(traj.poses[frame])


# ---------------------------------------------------------------- shipped files

SHIPPED = sorted(p.name for p in (REPO / "trajectories").iterdir())


def test_shipped_set():
    assert set(SHIPPED) >= {"yaw.yaml", "b1_ws.yaml", "revisit_loop.yaml", "orbit.csv", "actions_universal.csv"}


UNIVERSAL_SHIPPED = [n for n in SHIPPED if not n.startswith("templerun_")]


@pytest.mark.parametrize("name", UNIVERSAL_SHIPPED)
def test_shipped_files_load_for_universal(name):
    traj = load_trajectory(packaged_trajectory(name), "universal", 1000)
    assert traj.frames == 1000 and traj.poses.shape == (1000, 7)
    assert traj.actions.keyboard.shape == (1000, 4) and traj.actions.mouse.shape == (1000, 2)
    assert traj.actions.keyboard.dtype == torch.float32 and traj.actions.mouse.dtype == torch.float32
    assert np.all(np.isfinite(traj.poses))
    assert "\n" not in traj.describe()


def test_templerun_default_loads_for_templerun():
    traj = load_trajectory(packaged_trajectory("templerun_run.yaml"), "templerun", 300)
    assert traj.actions.keyboard.shape == (300, 7) and traj.actions.mouse is None
    assert torch.all(traj.actions.keyboard.sum(dim=1) == 1)              # one-hot every frame


@pytest.mark.parametrize("name", [n for n in UNIVERSAL_SHIPPED if not n.startswith("actions_")])
def test_shipped_paths_load_for_gta(name):
    traj = load_trajectory(packaged_trajectory(name), "gta_drive", 200)
    assert traj.actions.keyboard.shape == (200, 2)
    assert torch.all(traj.actions.mouse[:, 0] == 0)                     # gta has no pitch


@pytest.mark.parametrize("name", ["revisit_loop.yaml", "b1_ws.yaml", "yaw.yaml", "orbit.csv"])
def test_shipped_paths_close(name):
    """Looping a closed path revisits places: the pose after one period is the start pose."""
    traj = load_trajectory(packaged_trajectory(name), "universal", 2000)
    n = traj.source_frames
    assert np.linalg.norm(traj.poses[n, :3] - traj.poses[0, :3]) < 1e-6
    assert rotation_angle(traj.poses[n, 3:], traj.poses[0, 3:]) < 1e-4


def test_revisit_loop_goes_somewhere():
    traj = load_trajectory(packaged_trajectory("revisit_loop.yaml"), "universal", 864)
    assert np.max(np.linalg.norm(traj.poses[:, :3], axis=1)) > 10


def test_actions_csv_matches_its_rows():
    traj = load_trajectory(packaged_trajectory("actions_universal.csv"), "universal", 96)
    rows = [line.split(",") for line in (REPO / "trajectories/actions_universal.csv").read_text().splitlines()
            if line and not line.startswith("#")][1:]
    expected = torch.tensor([[float(v) for v in row[1:]] for row in rows])
    assert torch.equal(traj.actions.keyboard, expected[:, :4])
    assert torch.equal(traj.actions.mouse, expected[:, 4:])
    assert (traj.format, traj.repeat, traj.source_frames) == ("action csv", "none", 96)
    assert traj.poses[12, 2] == pytest.approx(-12 * STEP)              # 12 frames of W along -z


def test_actions_csv_refuses_other_modes():
    with pytest.raises(InputError, match="universal actions .* mode is gta_drive"):
        load_trajectory(packaged_trajectory("actions_universal.csv"), "gta_drive", 10)


def test_packaged_trajectory_unknown_name():
    with pytest.raises(InputError, match="no packaged trajectory 'nope.yaml'.*revisit_loop.yaml"):
        packaged_trajectory("nope.yaml")


# ---------------------------------------------------------------- YAML

def test_yaml_segments_give_exact_actions(tmp_path):
    path = write(tmp_path, "s.yaml", """
segments:
  - {keys: [w, a], frames: 3}
  - {camera: [up, right], seconds: 0.25}
  - {mouse: [0.0, -0.05], frames: 2}
  - {keys: forward, frames: 1}
""")
    traj = load_trajectory(path, "universal", 10)
    kb, ms = traj.actions.keyboard, traj.actions.mouse
    assert kb[:3].tolist() == [[1, 0, 1, 0]] * 3 and ms[:3].abs().sum() == 0
    assert ms[3:7].tolist() == [[pytest.approx(CAMERA_STEP), pytest.approx(CAMERA_STEP)]] * 4
    assert ms[7:9, 1].tolist() == [pytest.approx(-0.05)] * 2 and kb[9].tolist() == [1, 0, 0, 0]
    # 3 diagonal frames forward-left at the calibrated speed, then turns
    np.testing.assert_allclose(traj.poses[3, [0, 2]], [-3 * STEP * CAL.diagonal_scale] * 2, atol=1e-9)
    assert euler(traj, 7)[3:5] == pytest.approx([6.0, 6.0])


def test_yaml_start_pose(tmp_path):
    path = write(tmp_path, "s.yaml", "start: {position: [1, 2, 3], yaw: 90}\nsegments: [{keys: [w], frames: 4}]\n")
    traj = load_trajectory(path, "universal", 5, repeat="loop")
    np.testing.assert_allclose(traj.poses[0, :3], [1, 2, 3])
    np.testing.assert_allclose(traj.poses[4, :3], [1 + 4 * STEP, 2, 3], atol=1e-9)   # yaw 90 walks along +x


def test_yaml_keyframes_become_calibrated_actions(tmp_path):
    # 1 s forward at exactly the calibrated speed, then 1 s turning right at 1.5 deg/frame.
    d = 16 * STEP
    path = write(tmp_path, "k.yaml", f"""
keyframes:
  - {{t: 0, position: [0, 0, 0]}}
  - {{t: 1.0, position: [0, 0, {-d}]}}
  - {{frame: 32, yaw: 24}}
""")
    traj = load_trajectory(path, "universal", 32)
    assert traj.source_frames == 32 and traj.format == "yaml"
    assert traj.actions.keyboard[:16, 0].sum() == 16 and traj.actions.keyboard[16:].sum() == 0
    assert torch.allclose(traj.actions.mouse[16:32, 1], torch.tensor(CAMERA_STEP))
    assert traj.tracking.position < 1e-9 and traj.tracking.yaw_deg < 1e-6


def test_yaml_keyframes_then_segments(tmp_path):
    path = write(tmp_path, "k.yaml", "keyframes: [{t: 0, yaw: 90}]\nsegments: [{keys: [w], frames: 2}]\n")
    traj = load_trajectory(path, "universal", 3)
    np.testing.assert_allclose(traj.poses[2, :3], [2 * STEP, 0, 0], atol=1e-9)


def test_single_keyframe_is_a_still_camera(tmp_path):
    path = write(tmp_path, "k.yaml", "keyframes: [{t: 0, position: [1, 0, 0], yaw: 10}]\n")
    traj = load_trajectory(path, "universal", 5)
    assert traj.actions.keyboard.sum() == 0 and traj.actions.mouse.abs().sum() == 0
    assert np.allclose(traj.poses[:, :3], [1, 0, 0]) and euler(traj, 4)[3] == pytest.approx(10)


def test_gta_segments_steer_with_a_d(tmp_path):
    path = write(tmp_path, "g.yaml", "segments: [{keys: [w, d], frames: 2}, {keys: [a], frames: 1}]\n")
    traj = load_trajectory(path, "gta_drive", 3)
    assert traj.actions.keyboard.tolist() == [[1, 0], [1, 0], [0, 0]]
    assert traj.actions.mouse.tolist() == [[0, pytest.approx(0.1)]] * 2 + [[0, pytest.approx(-0.1)]]


def test_templerun_segments_and_csv(tmp_path):
    path = write(tmp_path, "t.yaml",
                 "segments: [{keys: [jump], frames: 2}, {frames: 1}, {keys: turn_left, frames: 12}]\n")
    traj = load_trajectory(path, "templerun", 15)
    assert traj.actions.mouse is None and traj.actions.keyboard.shape == (15, 7)
    assert traj.actions.keyboard.sum(1).tolist() == [1.0] * 15
    assert traj.actions.keyboard[:2, 1].tolist() == [1, 1] and traj.actions.keyboard[2, 0] == 1
    assert float(poses_euler(traj.poses[-1])[3]) == pytest.approx(-11 * CAL.templerun_turn_degrees)
    header = "frame," + ",".join(KEYBOARD_KEYS["templerun"])
    csv = write(tmp_path, "t.csv", header + "\n0,0,1,0,0,0,0,0\n1,0,0,0,0,0,0,1\n")
    traj = load_trajectory(csv, "templerun", 2)
    assert traj.actions.keyboard[:, [1, 6]].tolist() == [[1, 0], [0, 1]]


# ---------------------------------------------------------------- CSV and nerfstudio

def test_pose_csv_with_frames_and_comments(tmp_path):
    path = write(tmp_path, "p.csv", "# a comment\n\n# another\nFrame, X, Y, Z, Yaw, Pitch\n"
                 f"0,0,0,0,0,0\n8,0,0,{-8 * STEP},0,0\n# mid-file comment\n12,0,0,{-8 * STEP},6,0\n")
    traj = load_trajectory(path, "universal", 12)
    assert traj.format == "pose csv" and traj.source_frames == 12
    assert traj.actions.keyboard[:8, 0].sum() == 8
    assert traj.actions.mouse[8:12, 1].tolist() == [pytest.approx(0.1)] * 4
    np.testing.assert_allclose(traj.poses[8, :3], [0, 0, -8 * STEP], atol=1e-9)


def test_sniffs_format_without_extension(tmp_path):
    csv = write(tmp_path, "poses", "# c\nt,x,y,z,yaw,pitch\n0,0,0,0,0,0\n0.5,0,0,0,12,0\n")
    assert load_trajectory(csv, "universal", 8).format == "pose csv"
    yml = write(tmp_path, "path", "# c\nsegments: [{frames: 3}]\n")
    assert load_trajectory(yml, "universal", 3).format == "yaml"


def write_quoted(tmp_path: Path, name: str, rows: list[list[str]], comment: str = "") -> Path:
    """``rows`` as ``csv.writer(..., quoting=csv.QUOTE_ALL)`` writes them (every field in quotes), after
    ``comment`` lines."""
    path = tmp_path / name
    with open(path, "w", newline="") as f:
        f.write(comment)
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    return path


def assert_same_trajectory(a, b):
    assert (a.format, a.source_frames, a.repeat, a.tracking) == (b.format, b.source_frames, b.repeat, b.tracking)
    assert torch.equal(a.actions.keyboard, b.actions.keyboard)
    assert (a.actions.mouse is None) == (b.actions.mouse is None)
    if a.actions.mouse is not None:
        assert torch.equal(a.actions.mouse, b.actions.mouse)
    np.testing.assert_array_equal(a.poses, b.poses)


QUOTED_POSES = [["T", "x", "Y", "z", "yaw", "Pitch", "roll"],
                ["0", "0", "0", "0", "0", "0", "0"],
                ["0.5", "0.2", "0", "-0.6", "12", "3", "0"],
                ["1.25", "0.5", "0", "-1.5", "30", "-2", "1"]]
QUOTED_ACTIONS = [["frame", "w", "s", "a", "d", "mouse_pitch", "mouse_yaw"],
                  ["0", "1", "0", "0", "0", "0", "0.1"],
                  ["1", "1", "0", "1", "0", "-0.1", "0"],
                  ["2", "0", "1", "0", "1", "0.05", "-0.1"]]


@pytest.mark.parametrize("rows, fmt", [(QUOTED_POSES, "pose csv"), (QUOTED_ACTIONS, "action csv")])
def test_quoted_csv_loads_like_the_unquoted_file(tmp_path, rows, fmt):
    """A CSV written with csv.QUOTE_ALL (every field quoted, also the header) is the same trajectory."""
    comment = "# written by csv.writer\n\n"
    plain = write(tmp_path, "plain.csv", comment + "".join(",".join(row) + "\n" for row in rows))
    quoted = write_quoted(tmp_path, "quoted.csv", rows, comment)
    assert quoted.read_text().splitlines()[2].startswith('"')            # really quoted
    for frames in (3, 40):
        expected = load_trajectory(plain, "universal", frames)
        assert expected.format == fmt
        assert_same_trajectory(load_trajectory(quoted, "universal", frames), expected)
    sniffed = tmp_path / "quoted"                                           # no extension: sniffed
    sniffed.write_bytes(quoted.read_bytes())
    assert_same_trajectory(load_trajectory(sniffed, "universal", 40), load_trajectory(plain, "universal", 40))


@pytest.mark.parametrize("rows, line, field", [
    (QUOTED_POSES[:2] + [["1", "0", "0", "zero", "0", "0", "0"]], 4, "z"),
    (QUOTED_ACTIONS[:3] + [["2", "yes", "0", "0", "0", "0", "0"]], 5, "w"),
])
def test_quoted_csv_non_number_is_one_line_error(tmp_path, rows, line, field):
    path = write_quoted(tmp_path, "q.csv", rows, "# a comment\n")
    bad = rows[-1][QUOTED_POSES[0].index("z") if field == "z" else 1]
    with pytest.raises(InputError) as info:
        load_trajectory(path, "universal", 8)
    assert str(info.value) == f"{path} line {line}: {field}: {bad!r} is not a number"


def test_csv_broken_quote_is_one_line_error(tmp_path):
    path = write(tmp_path, "q.csv", 't,x,y,z,yaw,pitch\n0,0,0,0,0,0\n"1,0,0,0,0,0\n')
    with pytest.raises(InputError, match=r"line 3: invalid CSV") as info:
        load_trajectory(path, "universal", 8)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(path))


def nerfstudio_file(tmp_path, fps=30.0, seconds=2.0, nested=False):
    """A camera at the origin turning right at 1.5 degrees per 16 fps frame from looking along our -z,
    in nerfstudio's z-up world: ours (x, y, z) = theirs (x, z, -y)."""
    n = int(fps * seconds)
    t = np.arange(n) / fps
    yaw = 24.0 * t                                     # 1.5 deg per 16 fps frame
    ours_r = quat_to_matrix(quat_from_euler(yaw, 0.0))
    to_theirs = np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])
    cameras = []
    for i in range(n):
        c2w = np.eye(4)
        c2w[:3, :3] = to_theirs @ ours_r[i]
        c2w[:3, 3] = to_theirs @ np.array([0.0, 0.0, 0.0])
        cameras.append({"camera_to_world": c2w.tolist() if nested else c2w.reshape(-1).tolist(), "fov": 50})
    data = {"camera_type": "perspective", "render_height": 352, "render_width": 640, "fps": fps,
            "seconds": seconds, "camera_path": cameras}
    return write(tmp_path, "camera_path.json", json.dumps(data))


@pytest.mark.parametrize("nested", [False, True])
def test_nerfstudio_camera_path(tmp_path, nested):
    traj = load_trajectory(nerfstudio_file(tmp_path, nested=nested), "universal", 31)
    assert traj.format == "nerfstudio" and traj.source_frames == 31      # 60 cameras: 0 .. 1.967 s = 32 grid poses
    assert torch.allclose(traj.actions.mouse[:, 1], torch.tensor(CAMERA_STEP))
    assert traj.tracking.yaw_deg < 1e-5                               # float32 0.1 -> 1.50000002 deg
    forward = -quat_to_matrix(traj.poses[0, 3:])[:, 2]
    np.testing.assert_allclose(forward, [0, 0, -1], atol=1e-9)          # nerfstudio +y forward -> our -z


def test_nerfstudio_y_up_skips_conversion(tmp_path):
    traj = load_trajectory(nerfstudio_file(tmp_path), "universal", 5, nerfstudio_up="y")
    up = quat_to_matrix(traj.poses[0, 3:])[:, 1]
    np.testing.assert_allclose(up, [0, 0, 1], atol=1e-9)


# ---------------------------------------------------------------- repeat

SHORT = "segments: [{keys: [w], frames: 10}, {camera: right, frames: 5}]\n"


def test_loop_replays_actions_and_continues(tmp_path):
    traj = load_trajectory(write(tmp_path, "s.yaml", SHORT), "universal", 45, repeat="loop")
    assert (traj.repeat, traj.source_frames, traj.frames) == ("loop", 15, 45)
    assert torch.equal(traj.actions.keyboard[15:30], traj.actions.keyboard[:15])
    assert torch.equal(traj.actions.mouse[30:45], traj.actions.mouse[:15])
    assert float(euler(traj, 30)[3]) == pytest.approx(15.0)           # kept turning: 2 x 7.5 degrees
    assert "loop x3.00" in traj.describe()


def test_pingpong_retraces(tmp_path):
    traj = load_trajectory(write(tmp_path, "s.yaml", SHORT), "universal", 40, repeat="pingpong")
    assert traj.repeat == "pingpong"
    assert traj.actions.keyboard[15:20].tolist() == [[0, 0, 0, 0]] * 5            # the turn undone first
    assert torch.allclose(traj.actions.mouse[15:20, 1], torch.tensor(-CAMERA_STEP))
    assert traj.actions.keyboard[20:30].tolist() == [[0, 1, 0, 0]] * 10           # then walked back (S)
    for k in range(16):
        np.testing.assert_allclose(traj.poses[15 + k], traj.poses[15 - k], atol=1e-9)
    assert torch.equal(traj.actions.keyboard[30:40], traj.actions.keyboard[:10])  # and forward again


def test_longer_file_is_cut(tmp_path):
    traj = load_trajectory(write(tmp_path, "s.yaml", SHORT), "universal", 7)
    assert (traj.repeat, traj.frames, traj.source_frames) == ("none", 7, 15)
    assert "cut" in traj.describe()


def test_trajectory_from_builtin_schedule():
    track = builtin_schedule("universal", 84)
    traj = trajectory_from_actions(track, "universal")
    assert traj.frames == 84 and torch.equal(traj.actions.keyboard, track.keyboard.float())
    np.testing.assert_allclose(poses_from_actions(track, "universal"), traj.poses)


# ---------------------------------------------------------------- round trips (hypothesis)

# Universal keyboard rows the action space distinguishes (opposite keys together would be a no-op).
KEY_ROWS = [[f == 1, f == -1, r == -1, r == 1] for f in (0, 1, -1) for r in (0, 1, -1)]
MOUSE_LEVELS = [0.0, CAMERA_STEP, -CAMERA_STEP]


def write_pose_csv(directory: str, poses: np.ndarray) -> Path:
    e = poses_euler(poses)
    rows = [f"{i}," + ",".join(repr(float(v)) for v in row) for i, row in enumerate(e)]
    lines = ["frame,x,y,z,yaw,pitch,roll"] + rows
    path = Path(directory) / "p.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=80),
       st.floats(-180, 180), st.floats(-60, 60))
def test_actions_to_poses_to_actions_round_trip(frames, yaw0, pitch0):
    """Poses the action space can express come back as the same actions and, within 1e-6 units and
    1e-6 degrees, the same poses (float64 noise only)."""
    keyboard = torch.tensor([KEY_ROWS[k] for k, _, _ in frames], dtype=torch.float32)
    mouse = torch.tensor([[MOUSE_LEVELS[p], MOUSE_LEVELS[y]] for _, p, y in frames], dtype=torch.float32)
    start = ORIGIN._replace(x=1.0, z=-2.0, yaw=yaw0, pitch=pitch0)
    n = len(frames)
    truth = poses_from_actions(ActionTrack(torch.cat([keyboard, keyboard[-1:]]), torch.cat([mouse, mouse[-1:]])),
                               "universal", start=start)                      # n + 1 poses: n moves
    with tempfile.TemporaryDirectory() as d:
        traj = load_trajectory(write_pose_csv(d, truth), "universal", n)
    assert np.abs(traj.poses[:, :3] - truth[:n, :3]).max() < 1e-6
    assert rotation_angle(traj.poses[:, 3:], truth[:n, 3:]).max() < 1e-6
    assert torch.equal(traj.actions.keyboard, keyboard) and torch.equal(traj.actions.mouse, mouse)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.1, 0.1), st.floats(-0.1, 0.1)), min_size=1, max_size=40))
def test_continuous_mouse_round_trip(values):
    """With quantise_mouse=False any mouse value outside the dead zone (|v| <= 0.1) comes back exactly."""
    cal = Calibration(quantise_mouse=False)
    mouse = torch.tensor(values, dtype=torch.float32)
    mouse[mouse.double().abs() < cal.mouse_dead_zone] = 0.0     # the dead zone judges the float32 value
    keyboard = torch.zeros(len(values) + 1, 4)
    truth = poses_from_actions(ActionTrack(keyboard, torch.cat([mouse, mouse[-1:]])), "universal", cal)
    with tempfile.TemporaryDirectory() as d:
        traj = load_trajectory(write_pose_csv(d, truth), "universal", len(values), calibration=cal)
    assert torch.allclose(traj.actions.mouse, mouse, atol=1e-7)
    assert rotation_angle(traj.poses[:, 3:], truth[:-1, 3:]).max() < 1e-5


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_smooth_targets_are_tracked_within_bounds(seed):
    """Arbitrary smooth motion within the action space's reach — turning at most 1.5 deg/frame and
    moving at most 0.9 steps/frame in any horizontal direction — is tracked within half a camera press
    (0.75 deg) in yaw and pitch and within one step in position."""
    rng = np.random.default_rng(seed)
    n = 120
    dyaw = np.clip(rng.uniform(-1.5, 1.5) + np.cumsum(rng.normal(0, 0.2, n)), -1.5, 1.5)
    dpitch = np.clip(np.cumsum(rng.normal(0, 0.2, n)), -1.5, 1.5) * 0.3
    heading = rng.uniform(0, 2 * np.pi) + np.cumsum(rng.normal(0, 0.1, n))
    speed = rng.uniform(0, 0.9) * STEP
    states = integrate(speed * np.cos(heading), speed * np.sin(heading), dyaw, dpitch, ORIGIN, 89.0)
    with tempfile.TemporaryDirectory() as d:
        traj = load_trajectory(write_pose_csv(d, states_to_poses(states)), "universal", n)
    assert traj.tracking.yaw_deg <= 0.75 + 1e-6 and traj.tracking.pitch_deg <= 0.75 + 1e-6
    assert traj.tracking.position <= STEP


# ---------------------------------------------------------------- malformed input

KF = "keyframes:\n  - {t: 0}\n"
IDENTITY = "[1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1]"
CASES = {
    "yaml bad number": ("a.yaml", "keyframes:\n  - t: 0\n    yaw: abc\n",
        ["line 3", "keyframes[0].yaw", "'abc'"]),
    "yaml quoted number": ("a.yaml", "keyframes:\n  - {t: 0, yaw: '10'}\n",
        ["line 2", "keyframes[0].yaw", "expected a number"]),
    "yaml bool is not a number": ("a.yaml", "segments:\n  - {frames: yes}\n",
        ["line 2", "segments[0].frames", "True"]),
    "yaml wrong type": ("a.yaml", "segments: {keys: w}\n", ["line 1", "segments", "non-empty list"]),
    "yaml position type": ("a.yaml", KF + "  - {t: 1, position: 3}\n",
        ["line 3", "keyframes[1].position", "[x, y, z]"]),
    "yaml unknown top key": ("a.yaml", "segments: [{frames: 1}]\nsegmnts: []\n",
        ["line 2", "unknown key 'segmnts'"]),
    "yaml unknown segment key": ("a.yaml", "segments:\n  - frames: 1\n    key: [w]\n",
        ["line 3", "segments[0]", "'key'"]),
    "yaml nan": ("a.yaml", KF + "  - {t: 1, yaw: .nan}\n", ["line 3", "keyframes[1].yaw", "finite"]),
    "yaml inf": ("a.yaml", "keyframes:\n  - {t: .inf}\n", ["line 2", "keyframes[0].t", "finite"]),
    "yaml time backwards": ("a.yaml", KF + "  - {t: 2}\n  - {t: 1}\n", ["line 4", "keyframes[2]", "backwards"]),
    "yaml duplicate time": ("a.yaml", KF + "  - {frame: 0}\n", ["line 3", "keyframes[1]", "duplicate time"]),
    "yaml duplicate key": ("a.yaml", "segments: []\nsegments: []\n", ["line 2", "duplicate key 'segments'"]),
    "yaml syntax": ("a.yaml", "segments:\n  - {frames: 1\n", ["invalid YAML", "line"]),
    "yaml half turn": ("a.yaml", KF + "  - {t: 1, yaw: 200}\n", ["line 3", "keyframes[1].yaw", "180"]),
    "yaml pitch range": ("a.yaml", KF + "  - {t: 1, pitch: 95}\n",
        ["line 3", "keyframes[1].pitch", "[-90, 90]"]),
    "yaml t and frame": ("a.yaml", "keyframes:\n  - {t: 0, frame: 0}\n",
        ["line 2", "keyframes[0]", "exactly one"]),
    "yaml no duration": ("a.yaml", "segments:\n  - {keys: [w]}\n",
        ["line 2", "segments[0]", "seconds or frames"]),
    "yaml zero seconds": ("a.yaml", "segments:\n  - {seconds: 0.01}\n",
        ["line 2", "segments[0].seconds", "one frame"]),
    "yaml key of another mode": ("a.yaml", "segments:\n  - {keys: [jump], frames: 2}\n",
        ["line 2", "segments[0].keys", "'jump'", "universal"]),
    "yaml camera name": ("a.yaml", "segments:\n  - {camera: sideways, frames: 2}\n",
        ["line 2", "segments[0].camera", "'sideways'"]),
    "yaml camera contradiction": ("a.yaml", "segments:\n  - {camera: [up, down], frames: 2}\n",
        ["segments[0].camera", "contradict"]),
    "yaml mouse range": ("a.yaml", "segments:\n  - {mouse: [0, 15], frames: 2}\n",
        ["line 2", "segments[0].mouse", "[-1, 1]"]),
    "yaml start with keyframes": ("a.yaml", "start: {yaw: 1}\n" + KF, ["line 1", "start"]),
    "yaml not a mapping": ("a.yaml", "- 1\n- 2\n", ["expected a mapping"]),
    "yaml neither": ("a.yaml", "start: {yaw: 1}\n", ["needs keyframes"]),
    "empty file": ("a.yaml", "  \n\n", ["file is empty"]),
    "comments only csv": ("a.csv", "# just a comment\n", ["no header"]),
    "csv header only": ("a.csv", "t,x,y,z,yaw,pitch\n", ["line 1", "no data rows"]),
    "csv missing column": ("a.csv", "t,x,y,z,yaw\n0,0,0,0,0\n", ["line 1", "missing column 'pitch'"]),
    "csv unknown column": ("a.csv", "t,x,y,z,yaw,pitch,speed\n0,0,0,0,0,0,1\n",
        ["line 1", "unknown column 'speed'"]),
    "csv t and frame": ("a.csv", "t,frame,x,y,z,yaw,pitch\n0,0,0,0,0,0,0\n", ["line 1", "exactly one"]),
    "csv bad number": ("a.csv", "# c\nt,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1,0,0,zero,0,0\n",
        ["line 4", "z", "'zero'"]),
    "csv nan": ("a.csv", "t,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1,0,nan,0,0,0\n", ["line 3", "y", "finite"]),
    "csv inf": ("a.csv", "t,x,y,z,yaw,pitch\n0,0,0,0,inf,0\n", ["line 2", "yaw", "finite"]),
    "csv time backwards": ("a.csv", "t,x,y,z,yaw,pitch\n0,0,0,0,0,0\n2,0,0,0,0,0\n1,0,0,0,0,0\n",
        ["line 4", "backwards"]),
    "csv duplicate frame": ("a.csv", "frame,x,y,z,yaw,pitch\n0,0,0,0,0,0\n0,0,0,0,0,0\n",
        ["line 3", "frame", "duplicate"]),
    "csv field count": ("a.csv", "t,x,y,z,yaw,pitch\n0,0,0,0,0\n", ["line 2", "expected 6 values"]),
    "csv fractional frame": ("a.csv", "frame,x,y,z,yaw,pitch\n0.5,0,0,0,0,0\n",
        ["line 2", "frame", "whole number"]),
    "actions other mode": ("a.csv", "frame,w,s,mouse_yaw\n0,1,0,0\n",
        ["line 1", "gta_drive actions", "mode is universal"]),
    "actions key value": ("a.csv", "frame,w,s,a,d,mouse_pitch,mouse_yaw\n0,0.5,0,0,0,0,0\n",
        ["line 2", "w", "0 or 1"]),
    "actions frame gap": ("a.csv", "frame,w,s,a,d,mouse_pitch,mouse_yaw\n0,1,0,0,0,0,0\n2,1,0,0,0,0,0\n",
        ["line 3", "frame 2", "expected 1"]),
    "actions frame repeat": ("a.csv", "frame,w,s,a,d,mouse_pitch,mouse_yaw\n0,1,0,0,0,0,0\n0,1,0,0,0,0,0\n",
        ["line 3", "does not increase"]),
    "actions mouse range": ("a.csv", "frame,w,s,a,d,mouse_pitch,mouse_yaw\n0,1,0,0,0,0,30\n",
        ["line 2", "mouse_yaw", "[-1, 1]"]),
    "actions unknown column": ("a.csv", "frame,w,s,a,d,jump\n0,1,0,0,0,0\n",
        ["line 1", "unknown column 'jump'"]),
    "unknown format": ("a.txt", "hello world\n", ["unknown trajectory format"]),
    "json not nerfstudio": ("a.json", '{"frames": []}', ["unknown JSON trajectory", "camera_path"]),
    "json syntax": ("a.json", '{"camera_path": [\n  {"camera_to_world": [1,2,}\n]}',
        ["line 2", "invalid JSON"]),
    "json no fps": ("a.json", '{"camera_path": [{"camera_to_world": %s}]}' % IDENTITY,
        ["fps"]),
    "json matrix length": ("a.json", '{"fps": 30, "camera_path": [{"camera_to_world": [1, 2, 3]}]}',
        ["camera_path[0].camera_to_world", "16 numbers"]),
    "json not a rotation": ("a.json", '{"fps": 30, "camera_path": [{"camera_to_world": %s}, '
                            '{"camera_to_world": [2,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1]}]}' % IDENTITY,
        ["camera_path[1].camera_to_world", "rotation"]),
    "json nan": ("a.json", '{"fps": 30, "camera_path": [{"camera_to_world": %s}]}'
                 % IDENTITY.replace("[1", "[NaN"),
        ["camera_path[0].camera_to_world", "finite"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_input_is_one_line_error(tmp_path, case):
    name, text, fragments = CASES[case]
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as info:
        load_trajectory(path, "universal", 16)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    for fragment in fragments:
        assert fragment in message, (case, message)


@pytest.mark.parametrize("name", ["orbit.csv"])
def test_poses_cannot_drive_templerun(name):
    with pytest.raises(InputError, match="cannot drive templerun"):
        load_trajectory(packaged_trajectory(name), "templerun", 10)


@pytest.mark.parametrize("text, mode, fragment", [
    ("segments:\n  - {camera: up, frames: 2}\n", "gta_drive", "no mouse pitch"),
    ("segments:\n  - {keys: [d], camera: right, frames: 2}\n", "gta_drive", "not both"),
    ("segments:\n  - {camera: up, frames: 2}\n", "templerun", "no mouse"),
    ("segments:\n  - {keys: [jump, slide], frames: 2}\n", "templerun", "exactly one"),
    ("frame,none,jump,slide,turn_left,turn_right,left_side,right_side\n0,1,1,0,0,0,0,0\n", "templerun", "one-hot"),
])
def test_mode_specific_errors(tmp_path, text, mode, fragment):
    path = write(tmp_path, "m.csv" if text.startswith("frame") else "m.yaml", text)
    with pytest.raises(InputError, match=fragment):
        load_trajectory(path, mode, 4)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_trajectory(tmp_path / "nope.yaml", "universal", 4)
    with pytest.raises(InputError, match="poses.npy is missing .a directory is read as a LingBot pose folder"):
        load_trajectory(tmp_path, "universal", 4)


def test_bad_arguments_are_config_errors():
    path = packaged_trajectory("yaw.yaml")
    for kwargs in ({"mode": "chess"}, {"frames": 0}, {"repeat": "bounce"}, {"nerfstudio_up": "x"}):
        args = {"mode": "universal", "frames": 4, **kwargs}
        with pytest.raises(ConfigError):
            load_trajectory(path, **args)


def test_not_utf8(tmp_path):
    path = tmp_path / "b.csv"
    path.write_bytes(b"t,x\n\xff\xfe\n")
    with pytest.raises(InputError, match="UTF-8"):
        load_trajectory(path, "universal", 4)


def test_math_sanity():
    assert math.isclose(STEP, 0.1235)


# ---------------------------------------------------------------- lag warnings

def turn_file(tmp_path: Path, seconds: float, name: str = "turn.yaml") -> Path:
    """Still, then 180 degrees to the right in ``seconds`` (two keyframes of 90), then held for 3 s."""
    return write(tmp_path, name, f"""
keyframes:
  - {{t: 0, yaw: 0}}
  - {{t: {seconds / 2}, yaw: 90}}
  - {{t: {seconds}, yaw: 180}}
  - {{t: {seconds + 3}, yaw: 180}}
""")


def test_fast_turn_warns_of_the_yaw_lag_and_where(tmp_path):
    path = turn_file(tmp_path, 1.0, "fast.yaml")
    traj = load_trajectory(path, "universal", 64)
    warning = traj.lag_warning()
    frame = traj.tracking.yaw_frame
    assert warning is not None and len(warning.splitlines()) == 1
    assert warning.startswith(f"{path} cannot be followed exactly: the camera falls up to ")
    assert "deg of yaw behind" in warning and f"(frame {frame}, {frame / 16:.1f} s;" in warning
    assert "it turns at most 24 deg/s" in warning and "pitch" not in warning and "units" not in warning
    assert traj.tracking.yaw_deg > 150 and f"(frame {frame}, " in traj.describe()


def test_slow_turn_does_not_warn(tmp_path):
    traj = load_trajectory(turn_file(tmp_path, 10.0), "universal", 16 * 14)
    assert traj.tracking.yaw_deg < 5 and traj.lag_warning() is None


def test_pose_csv_jump_warns_of_the_position_lag(tmp_path):
    path = write(tmp_path, "jump.csv", "frame,x,y,z,yaw,pitch\n0,0,0,0,0,0\n20,0,0,0,0,0\n21,0,0,-5,0,0\n"
                                       "80,0,0,-5,0,0\n")
    traj = load_trajectory(path, "universal", 80)
    warning = traj.lag_warning()
    assert warning is not None and "units from the path (frame 21, 1.3 s;" in warning
    assert "it moves at most 0.1235 units a frame" in warning and "yaw" not in warning
    assert traj.tracking.position_frame == 21 and traj.tracking.position > 4.8


def test_action_files_never_warn(tmp_path):
    path = write(tmp_path, "spin.csv", "frame,w,s,a,d,mouse_pitch,mouse_yaw\n"
                 + "".join(f"{i},1,0,0,0,0,1\n" for i in range(32)))
    for traj in (load_trajectory(path, "universal", 64),
                 load_trajectory(packaged_trajectory("actions_universal.csv"), "universal", 200),
                 trajectory_from_actions(builtin_schedule("universal", 64), "universal")):
        assert traj.lag_warning() is None
        assert traj.tracking.as_record() == {"position": 0.0, "yaw_deg": 0.0, "pitch_deg": 0.0,
                                             "position_frame": None, "yaw_frame": None, "pitch_frame": None}


def test_reported_frame_is_where_the_lag_is_worst(tmp_path):
    # still for 2 s (frame 32), then 90 degrees in 0.5 s (to frame 40): 11 frames of catching up after it
    path = write(tmp_path, "late.yaml", "keyframes:\n  - {t: 0, yaw: 0}\n  - {t: 2.0, yaw: 0}\n"
                                        "  - {t: 2.5, yaw: 90}\n  - {t: 6.0, yaw: 90}\n")
    traj = load_trajectory(path, "universal", 96)
    frames = np.arange(96)
    target = 90 * np.clip((frames - 32) / 8, 0, 1)
    lag = np.abs(target - poses_euler(traj.poses)[:, 3])
    frame = traj.tracking.yaw_frame
    assert 32 < frame <= 40 + math.ceil(90 / 1.5) and frame == int(np.argmax(lag))
    assert traj.tracking.yaw_deg == pytest.approx(lag.max(), abs=1e-6)
    assert f"(frame {frame}, {frame / 16:.1f} s;" in traj.lag_warning()


def test_only_the_sessions_frames_count(tmp_path):
    # the file jumps 90 degrees at frame 33: a session of frames 0..32 never shows that frame
    path = write(tmp_path, "jump.yaml", "keyframes:\n  - {t: 0, yaw: 0}\n  - {frame: 32, yaw: 0}\n"
                                        "  - {frame: 33, yaw: 90}\n  - {frame: 64, yaw: 90}\n")
    assert load_trajectory(path, "universal", 33).lag_warning() is None
    later = load_trajectory(path, "universal", 34)
    assert later.tracking.yaw_frame == 33 and "(frame 33, 2.1 s;" in later.lag_warning()


def test_gta_drive_pitch_lag_says_it_cannot_pitch(tmp_path):
    path = write(tmp_path, "look.yaml", "keyframes:\n  - {t: 0, pitch: 0}\n  - {t: 2, pitch: 30}\n")
    warning = load_trajectory(path, "gta_drive", 32).lag_warning()
    assert warning is not None and "deg of pitch behind" in warning and "gta_drive cannot pitch" in warning
