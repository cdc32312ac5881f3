"""``worldpager train arena``, ``worldpager bench arena`` and ``worldpager arena truth``: the arena model's
training, its memory evaluation and the ground truth of its sessions (click shell only; the work is in
``engine.arena``)."""
from __future__ import annotations

from pathlib import Path

import click

from engine.files.output_files import check_output_file
from worldpager_cli.json_output import emit_json, json_line, json_result

@click.group()
def train() -> None:
    """Train a model of our own."""


@train.command("arena")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Checkpoint and log directory (training resumes from DIR/last.pt when present).")
@click.option("--steps", type=int, default=20000, show_default=True, help="Total optimiser steps.")
@click.option("--batch", type=int, default=4, show_default=True, help="Episodes per step.")
@click.option("--chunks", type=int, default=12, show_default=True, help="Chunks per training episode.")
@click.option("--lr", type=float, default=1e-3, show_default=True, help="Peak learning rate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of data and initialisation.")
@click.option("--device", default=None, help="cpu or cuda. Default: cuda when present.")
@click.option("--init", type=click.Path(path_type=Path), help="Start from these weights (safetensors).")
@click.option("--export", type=click.Path(path_type=Path), help="Afterwards, write fp16 weights here.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--minutes", type=click.FloatRange(min=0, min_open=True),
              help="Stop after this many minutes of this run's wall time (the learning rate decays over the last fifth).")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Processes that render the batches (0: one thread beside the training).")
@click.option("--warp", is_flag=True, help="A new model's output: add the pixel warp of the window's last frame.")
@click.option("--hypotheses", type=click.IntRange(min=1), help="A new model's output: candidate patches per token.")
@click.option("--hard-copy", is_flag=True, help="A new model's output: whole copied patches at inference.")
@click.option("--codebook", type=click.IntRange(min=2),
              help="A new model's output: each 4x4 sub-patch classified over this many k-means codes.")
@click.option("--code-weight", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Weight of the codebook cross-entropy.")
@click.option("--head-only", is_flag=True, help="Train the codebook head alone (every other weight frozen).")
@json_result
def train_arena(out, steps, batch, chunks, lr, seed, device, init, export, quiet, minutes, workers, warp,
                hypotheses, hard_copy, codebook, code_weight, head_only) -> None:
    """Train the arena model (flow matching with retrieved memory); prints a JSON line at the end.

    How long: after its first 3 steps a run prints its time a step and the rest's. On a 2-core CPU a step
    of the default recipe takes about 3 s idle, 5-10 s beside other work (20,000 steps: a day or more;
    use --minutes, or a GPU: scripts/device_train.sh). Killed runs go on from DIR/last.pt (saved every 50 steps)."""
    import torch

    from engine.arena.train import Recipe, model_config, train as run_training
    from engine.arena.weights import export_checkpoint

    if export is not None:
        check_output_file(export, "--export")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = model_config(out, init, warp=warp or None, hypotheses=hypotheses, hard_copy=hard_copy or None,
                       codebook=codebook)
    if head_only and not cfg.codebook:
        raise click.BadParameter("trains a codebook head: give --codebook K", param_hint="--head-only")
    result = run_training(out, Recipe(seed=seed, steps=steps, batch=batch, chunks=chunks, lr=lr,
                                      code_weight=code_weight, head_only=head_only), cfg, device, init=init,
                          quiet=quiet,
                          budget_s=None if minutes is None else 60.0 * minutes, workers=workers)
    if export:
        export_checkpoint(out / "last.pt", export)
    emit_json(json_line(result))


def _row(name: str, g: dict) -> str:
    return (f"{name:<9} {g['episodes']:>3} {g['revisit_psnr_memory']:>8.2f} {g['revisit_psnr_window']:>8.2f} "
            f"{g['gain_db']:>+7.2f} ± {g['se_db']:.2f} {g['improved']:>3}/{g['with_revisits']:<3} "
            f"{g['revisit_ssim_memory']:>6.3f} {g['revisit_ssim_window']:>6.3f} "
            f"{g['all_psnr_memory']:>7.2f} {g['all_psnr_window']:>7.2f}")


@click.command("arena")
@click.option("--episodes", type=int, default=48, show_default=True, help="Held-out episodes (glance, spin, out and back in turn).")
@click.option("--chunks", type=int, default=16, show_default=True, help="Chunks per episode.")
@click.option("--weights", type=click.Path(path_type=Path), help="Arena weights. Default: the packaged ones.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Where the temporary spill directories go. Default: the system temp.")
@click.option("--quick", is_flag=True, help="6 episodes of 12 chunks (a smoke run).")
@click.option("--strip", type=click.Path(path_type=Path), help="Also write a PNG: truth | memory | window-only.")
@click.option("--strip-episode", type=int, default=1, show_default=True, help="Which episode the strip shows.")
@json_result
def bench_arena(episodes, chunks, weights, workdir, quick, strip, strip_episode) -> None:
    """Memory vs window-only on held-out arenas, through the real store (int4, 4-slot pool, spill)."""
    from engine.arena.evaluate import comparison_strip, evaluate

    if quick:
        episodes, chunks = 6, 12
    if strip is not None:
        check_output_file(strip, "--strip")
        shown = comparison_strip(strip_episode, strip, weights, chunks, workdir=workdir)
        click.echo(f"strip: {strip} ({shown['kind']} in arena {shown['arena_seed']}; rows truth, memory, "
                   f"window-only; latent frames {shown['frames']})", err=True)

    def progress(i, arms):
        m, w = arms["prefetch"], arms["window"]
        click.echo(f"episode {i + 1}/{episodes} {m.kind:<8} arena {m.arena_seed}: revisit PSNR "
                   f"{m.revisit_psnr:.2f} with memory, {w.revisit_psnr:.2f} window-only "
                   f"({m.revisit_frames} frames; {m.hits} hits, {m.misses} misses)", err=True)

    result = evaluate(episodes, weights, workdir, chunks, on_episode=progress)
    click.echo("kind      eps  rev.mem  rev.win    gain (dB)  better  ssim.m ssim.w  all.mem all.win")
    for name, g in result["kinds"].items():
        click.echo(_row(name, g))
    click.echo(f"retrieval through the store: {result['hits']} hits, {result['misses']} misses, "
               f"{result['disk_bytes_read'] / 2**20:.1f} MiB read back from the spill directory")
    emit_json(json_line(result))


@click.group("arena")
def arena() -> None:
    """The arena model's world: the ground truth of its sessions."""


@arena.command("truth")
@click.argument("log", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The truth's MP4.")
@click.option("--poses", type=click.Path(path_type=Path),
              help="The per-frame pose CSV (frame, x, y, z, yaw, pitch). Default: OUT's name with .poses.csv.")
@json_result
def arena_truth(log, out, poses) -> None:
    """Render the ground truth of the arena session that wrote LOG (its .log.jsonl): the world's exact
    view at the pose of every video frame the session wrote, at the model's size enlarged as the session
    shows it, with the session's fps and encoder. A frame between two latent frames is the exact view at
    its own pose (the session blends latent frames). Prints what it wrote, then a JSON line."""
    from engine.arena.truth import write_truth

    result = write_truth(log, out, poses)
    height, width = result["size"]
    click.echo(f"wrote the truth of {log}: {result['frames']} frames ({result['frames'] / result['fps']:.1f} s, "
               f"{width}x{height}) of arena {result['arena_seed']} to {result['out']}; poses {result['poses']}")
    emit_json(json_line(result))
