"""``worldpager generate --trajectory DIR`` with a pose folder whose ``poses.npy`` is not what it says:
empty, an ``.npz`` renamed, a header claiming 48 GiB. Each is exit 1 with one ``worldpager: error:``
line naming the file, the flag and what is expected — no traceback — and nothing is left behind."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from engine.io.trajectory.pose_folder import INTRINSICS, POSES
from tests_support import PATIENCE_S, WORLDPAGER

N = 21                                                    # poses: one video frame each, two micro chunks


def _folder(tmp_path):
    folder = tmp_path / "walk"
    folder.mkdir()
    c2w = np.repeat(np.eye(4, dtype=np.float32)[None], N, axis=0)
    c2w[:, 2, 3] = np.arange(N) * 0.1
    np.save(folder / POSES, c2w)
    np.save(folder / INTRINSICS, np.tile(np.float32([500, 500, 416, 240]), (N, 1)))
    return folder, c2w


def _empty(poses, c2w):
    poses.write_bytes(b"")


def _npz_renamed(poses, c2w):
    np.savez(poses.with_suffix(".npz"), poses=c2w)
    poses.with_suffix(".npz").replace(poses)


def _header_claims_48_gib(poses, c2w):
    header = {"descr": "<f4", "fortran_order": False, "shape": (800_000_000, 4, 4)}
    with open(poses, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(c2w.tobytes())


@pytest.mark.parametrize("lie, needle", [
    (_empty, "the file is empty (0 bytes)"),
    (_npz_renamed, "a zip archive (an .npz renamed?), not a .npy array"),
    (_header_claims_48_gib, "its header's shape [800000000, 4, 4] of float32 needs 51200000000 bytes of data, "
                            "the file holds 1344 after its header (51199998656 bytes too few: the file is truncated)"),
])
def test_a_lying_poses_file_is_one_line(tmp_path, lie, needle):
    folder, c2w = _folder(tmp_path)
    lie(folder / POSES, c2w)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = subprocess.run(WORLDPAGER + ["generate", "--model", "micro", "--chunks", "2", "--trajectory", str(folder),
                                        "--out", str(tmp_path / "x.mp4"), "--spill", str(tmp_path / "spill")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE_S)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"worldpager: error: --trajectory {folder / POSES}: {needle}; "), lines[0]
    assert lines[0].endswith("expected float32/64 [N, 4, 4] (camera-to-world matrices) in a plain .npy file")
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.rglob("*")) == before       # no MP4, log, config or spill directory
