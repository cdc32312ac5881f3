"""``worldpager trajectory export``: any trajectory (YAML, pose or action CSV, nerfstudio JSON, a pose
folder) written as LingBot-World's pose folder (``engine.io.trajectory.pose_folder``).

Prints the files written and one JSON line last. Imports torch only when the command runs, so that
``worldpager --help`` and ``plan`` stay torch-free.
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.errors import ConfigError, OutputError
from engine.files.output_files import check_output_dir
from worldpager_cli.errors import WorldPagerGroup

FORMATS = ("lingbot",)


@click.group(cls=WorldPagerGroup)
def trajectory() -> None:
    """Convert trajectories between formats."""


@trajectory.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--trajectory", "source", type=click.Path(path_type=Path), required=True,
              help="The trajectory to convert (.yaml, .csv, nerfstudio .json or a pose folder).")
@click.option("--to", "to", type=click.Choice(FORMATS), default="lingbot", show_default=True,
              help="The format written: lingbot = poses.npy, intrinsics.npy, action.npy in OUT.")
@click.option("--frames", type=int, help="Video frames written (16 fps). Default: the file's own length.")
@click.option("--repeat", type=click.Choice(["loop", "pingpong"]), default="loop", show_default=True,
              help="How a file shorter than --frames is extended.")
@click.option("--overwrite", is_flag=True, help="Replace pose-folder files already in OUT.")
@json_result
def export(out: Path, source: Path, to: str, frames: int | None, repeat: str, overwrite: bool) -> None:
    """Write TRAJECTORY as a LingBot pose folder OUT (OpenCV camera-to-world poses, 480x832 intrinsics,
    W A S D key states)."""
    from engine.io.trajectory import load_trajectory   # torch and numpy: only when a command runs
    from engine.io.trajectory.pose_folder import ACTIONS, INTRINSICS, POSES, export_pose_folder

    if frames is not None and frames < 1:
        raise ConfigError(f"--frames must be positive, got {frames}")
    if frames is None:
        frames = load_trajectory(source, "universal", frames=1).source_frames
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out} is not a directory")
    check_output_dir(out, "OUT", (POSES, INTRINSICS, ACTIONS))   # no FIFO or device among its files
    existing = [name for name in (POSES, INTRINSICS, ACTIONS) if (out / name).exists()]
    if existing and not overwrite:
        raise OutputError(f"{out} already holds {', '.join(existing)} (use --overwrite)")
    loaded = load_trajectory(source, "universal", frames=frames, repeat=repeat)
    written = export_pose_folder(out, loaded.poses, loaded.actions.keyboard.numpy(), loaded.intrinsics)
    for path in written:
        click.echo(f"wrote {path}")
    emit_json(json_line({"out": str(out), "format": to, "frames": loaded.frames, "source": str(source),
                           "files": [p.name for p in written]}))
