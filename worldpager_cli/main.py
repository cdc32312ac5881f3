"""``worldpager`` commands: parse flags, build a config, call one engine function, print.

Commands that measure or describe print a human table and then one compact JSON line last.
"""
from __future__ import annotations

import json
import math
import sys
from datetime import datetime
from pathlib import Path

import click

from engine.config import MODEL_CONFIGS, SessionConfig, model_config
from engine.errors import ConfigError
from worldpager_cli.errors import WorldPagerGroup


@click.group(cls=WorldPagerGroup)
@click.version_option(package_name="worldpager")
def cli() -> None:
    """WorldPager: long-session interactive world-model video with a tiered KV memory."""


def chunks_for_length(chunks: int | None, seconds: float | None, minutes: float | None,
                      fps: int, first_chunk_frames: int, chunk_frames: int) -> int:
    """Chunks needed for the requested length (at least the requested video duration)."""
    given = [v is not None for v in (chunks, seconds, minutes)]
    if sum(given) > 1:
        raise ConfigError("give only one of --chunks, --seconds, --minutes")
    if chunks is not None:
        if chunks < 1:
            raise ConfigError(f"--chunks must be at least 1, got {chunks}")
        return chunks
    total_s = seconds if seconds is not None else (minutes * 60 if minutes is not None else 30.0)
    if not math.isfinite(total_s) or total_s <= 0:
        raise ConfigError(f"length must be a positive number of seconds, got {total_s}")
    frames = math.ceil(total_s * fps)
    return 1 + max(0, math.ceil((frames - first_chunk_frames) / chunk_frames))


def default_output_path() -> Path:
    return Path.cwd() / datetime.now().strftime("worldpager-%Y%m%d-%H%M%S.mp4")


@cli.command()
@click.option("--image", type=click.Path(path_type=Path), help="Start image (PNG/JPEG/WebP). Default: the packaged scene.")
@click.option("--out", type=click.Path(path_type=Path), help="Output MP4. Default: worldpager-DATE-TIME.mp4 here.")
@click.option("--chunks", type=int, help="Length in chunks (12 video frames each; the first has 9).")
@click.option("--seconds", type=float, help="Length in seconds of video (16 fps).")
@click.option("--minutes", type=float, help="Length in minutes of video (16 fps).")
@click.option("--checkpoint", type=click.Path(path_type=Path), help="Directory with the official MG2 weights. Default: the built-in tiny model.")
@click.option("--model", "model_name", type=click.Choice(sorted(MODEL_CONFIGS)), help="Model configuration. Default: mg2-universal with --checkpoint, else tiny.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the noise.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
def generate(image, out, chunks, seconds, minutes, checkpoint, model_name, seed, device) -> None:
    """Generate a video from a start image, chunk by chunk, into an MP4."""
    from engine.session import Session   # keeps `worldpager --help` fast
    from worldpager_cli.progress import ChunkProgress

    name = model_name or ("mg2-universal" if checkpoint else "tiny")
    m = model_config(name)
    n = chunks_for_length(chunks, seconds, minutes, m.fps, m.video_frames_of_chunk(0),
                          m.video_frames_of_chunk(1))
    cfg = SessionConfig(model=name, checkpoint=checkpoint, image=image,
                        out=out or default_output_path(), chunks=n, seed=seed, device=device)
    progress = ChunkProgress(total=n, frames_total=m.video_frames_total(n), fps=m.fps)
    session = Session(cfg, on_chunk=progress.update)   # validates the inputs before any output
    if checkpoint is None:
        click.echo(f"worldpager: using the built-in {name} model (seeded random weights, no checkpoint): "
                   "the video shows the pipeline, not a trained world model")
    else:
        click.echo(f"worldpager: loading {name} from {checkpoint}")
    session.load()
    with progress:
        result = session.run()
    click.echo(f"wrote {result.frames} frames ({result.frames / m.fps:.1f} s of video) to {result.out} "
               f"in {result.wall_s:.1f} s")


@cli.command()
@click.option("--preset", "name", default="mg2-universal", show_default=True,
              type=click.Choice(sorted(MODEL_CONFIGS)), help="Model configuration.")
def inspect(name: str) -> None:
    """Print a model's shape facts; the last line is JSON."""
    from engine.model.facts import model_facts

    facts = model_facts(model_config(name))
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        click.echo(f"{key:<{width}}  {value:,}" if isinstance(value, int) else f"{key:<{width}}  {value}")
    click.echo(json.dumps(facts, separators=(",", ":")))


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(cli())
