"""LingBot-World's pose folder (``engine.io.trajectory.pose_folder``): written from every trajectory
format by ``worldpager trajectory export --to lingbot`` and read back as a trajectory with the same
poses; its intrinsics reach the LingBot rays; every malformed folder is one ``InputError`` line naming
the file at fault."""
from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from engine.errors import InputError
from engine.geometry import quat_to_matrix
from engine.io.trajectory import load_trajectory
from engine.io.trajectory.packaged import packaged_trajectory
from engine.io.trajectory.pose_folder import (ACTIONS, INTRINSICS, POSES, export_pose_folder,
                                              opencv_matrices)
from engine.facts.lingbot_models import LINGBOT_TINY
from engine.model.lingbot.session_control import ray_intrinsics
from worldpager_cli.main import cli

FRAMES = 69


@pytest.mark.parametrize("name", ["revisit_loop.yaml", "orbit.csv", "actions_universal.csv"])
def test_export_then_load_gives_the_same_poses(tmp_path, name):
    source = load_trajectory(packaged_trajectory(name), "universal", FRAMES)
    result = CliRunner().invoke(cli, ["trajectory", "export", str(tmp_path / "f"), "--to", "lingbot",
                                      "--trajectory", str(packaged_trajectory(name)), "--frames", str(FRAMES)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1])["frames"] == FRAMES
    poses = np.load(tmp_path / "f" / POSES)
    assert poses.shape == (FRAMES, 4, 4) and poses.dtype == np.float32
    back = load_trajectory(tmp_path / "f", "universal", FRAMES)
    assert back.format == "lingbot pose folder"
    assert np.abs(back.poses - source.poses).max() < 1e-5
    assert np.array_equal(back.key_states, source.actions.keyboard.numpy()[:, [0, 2, 1, 3]])


def test_opencv_matrices_flip_camera_y_and_z(tmp_path):
    still = np.array([[1.0, 2.0, 3.0, 1.0, 0.0, 0.0, 0.0]])          # identity rotation at (1, 2, 3)
    m = opencv_matrices(still)[0]
    assert np.allclose(m[:3, :3], np.diag([1.0, -1.0, -1.0])) and np.allclose(m[:3, 3], [1, 2, 3])


def _folder(tmp_path, n=9, **override):
    folder = tmp_path / "poses"
    folder.mkdir(exist_ok=True)
    c2w = np.repeat(np.eye(4, dtype=np.float32)[None], n, axis=0)
    c2w[:, 2, 3] = np.arange(n) * 0.1                                  # walking forward (OpenCV +z)
    arrays = {POSES: c2w, INTRINSICS: np.tile(np.float32([500, 500, 416, 240]), (n, 1)),
              ACTIONS: np.tile(np.int32([1, 0, 0, 0]), (n, 1))}
    arrays.update(override)
    for name, value in arrays.items():
        if value is not None:
            np.save(folder / name, value)
    return folder


def test_folder_intrinsics_reach_the_rays(tmp_path):
    traj = load_trajectory(_folder(tmp_path), "universal", 9)
    assert np.allclose(traj.intrinsics, [500, 500, 416, 240])
    ks = ray_intrinsics(LINGBOT_TINY, traj)                            # 480x832 -> 96x160
    assert torch.allclose(ks, torch.tensor([500 * 160 / 832, 500 * 96 / 480, 416 * 160 / 832, 240 * 96 / 480]))
    default = ray_intrinsics(LINGBOT_TINY, dataclasses.replace(traj, intrinsics=None))
    assert torch.allclose(default, torch.tensor([80.0, 80.0, 80.0, 48.0]))      # 90 degrees on 96x160
    # the OpenCV camera looks along world +z and moves there: the engine's camera (looking along its
    # own -z) looks the same way, so the tracker walks forward
    view = quat_to_matrix(traj.poses[-1, 3:7]) @ np.array([0.0, 0.0, -1.0])
    assert np.allclose(view, [0, 0, 1], atol=1e-6) and traj.poses[-1, 2] > 0.7
    assert traj.actions.keyboard[:, 0].sum() > 4 and traj.actions.keyboard[:, 1].sum() == 0


NAN_POSES = np.repeat(np.eye(4, dtype=np.float32)[None], 9, axis=0)
NAN_POSES[4, 0, 3] = np.nan
SKEWED = np.repeat(np.eye(4, dtype=np.float32)[None], 9, axis=0)
SKEWED[3, 0, 0] = 2.0


@pytest.mark.parametrize("override, message", [
    ({INTRINSICS: np.ones((8, 4), np.float32)}, "intrinsics.npy has 8 rows but poses.npy has 9 poses"),
    ({ACTIONS: np.zeros((7, 4), np.int32)}, "action.npy has 7 rows but poses.npy has 9 poses"),
    ({INTRINSICS: np.ones((9, 3), np.float32)},
     r"--trajectory .*intrinsics.npy: its shape is \[9, 3\]; expected float32/64 \[N, 4\]"),
    ({POSES: np.zeros((9, 3, 4), np.float32)},
     r"--trajectory .*poses.npy: its shape is \[9, 3, 4\]; expected float32/64 \[N, 4, 4\]"),
    ({POSES: SKEWED}, "poses.npy: pose 3 is not rigid"),
    ({POSES: NAN_POSES}, r"poses.npy: not a finite number at index \(4, 0, 3\)"),
    ({INTRINSICS: None}, "intrinsics.npy is missing"),
])
def test_bad_folders_are_one_line_errors(tmp_path, override, message):
    folder = _folder(tmp_path, **override)
    with pytest.raises(InputError, match=message) as err:
        load_trajectory(folder, "universal", 9)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


def _intrinsics(row: int, column: int, value: float) -> np.ndarray:
    ks = np.tile(np.float64([500, 500, 416, 240]), (9, 1))
    ks[row, column] = value
    return ks


def _keys(row: int, column: int, value) -> np.ndarray:
    keys = np.tile(np.float32([1, 0, 0, 0]), (9, 1))
    keys[row, column] = value
    return keys


FAR = np.repeat(np.eye(4)[None], 9, axis=0)
FAR[6, 1, 3] = 1e12


@pytest.mark.parametrize("override, message", [
    ({INTRINSICS: _intrinsics(0, 0, 1e300)}, r"intrinsics.npy: row 0: fx 1e\+300 is outside \[1, 83200\]"),
    ({INTRINSICS: _intrinsics(5, 1, 0.01)}, r"intrinsics.npy: row 5: fy 0.01 is outside \[1, 83200\]"),
    ({INTRINSICS: _intrinsics(2, 2, 5000)}, r"intrinsics.npy: row 2: cx 5000 is outside \[0, 832\]"),
    ({INTRINSICS: _intrinsics(3, 3, -1)}, r"intrinsics.npy: row 3: cy -1 is outside \[0, 480\]"),
    ({ACTIONS: _keys(4, 2, 2)}, "action.npy: row 4, key S: 2 is not a key state"),
    ({ACTIONS: _keys(1, 0, 0.5)}, "action.npy: row 1, key W: 0.5 is not a key state"),
    ({ACTIONS: _keys(7, 3, -1e30)}, "action.npy: row 7, key D: -1e\\+30 is not a key state"),
    ({POSES: FAR}, r"poses.npy: pose 6: position y 1e\+12 is outside \+-1e\+09 world units"),
])
def test_values_out_of_range_are_one_line_naming_file_index_and_value(tmp_path, override, message):
    folder = _folder(tmp_path, **override)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no numpy overflow warning on the way
        with pytest.raises(InputError, match=message) as err:
            load_trajectory(folder, "universal", 9)
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


def test_export_refuses_to_overwrite(tmp_path):
    folder = _folder(tmp_path)
    result = CliRunner().invoke(cli, ["trajectory", "export", str(folder), "--trajectory",
                                      str(packaged_trajectory("yaw.yaml"))])
    assert result.exit_code == 1 and "already holds poses.npy" in result.output


def test_export_writes_a_folder_the_official_layout_reads(tmp_path):
    written = export_pose_folder(tmp_path / "f", np.array([[0.0, 0, 0, 1, 0, 0, 0]] * 5), np.eye(4)[[0, 1, 2, 3, 0]])
    assert [p.name for p in written] == [POSES, INTRINSICS, ACTIONS]
    actions = np.load(tmp_path / "f" / ACTIONS)
    assert actions.dtype == np.int32 and actions.tolist()[:4] == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    assert np.load(tmp_path / "f" / INTRINSICS).tolist()[0] == [416.0, 416.0, 416.0, 240.0]
