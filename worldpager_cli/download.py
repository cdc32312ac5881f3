"""``worldpager download [--mode universal|gta|templerun|all] [--dir DIR]``: MG2's weights from the hub;
``worldpager download --model lingbot-fast [--dir DIR]``: LingBot-World-Fast's release folder.

Fetches only the files the chosen modes read (``engine.model.hub``) into the hub's cache (then
``--checkpoint Skywork/Matrix-Game-2.0`` finds them, offline too) or into ``--dir`` (then
``--checkpoint DIR``), resuming what an earlier run left, and checks every key and shape of them with
the strict loader, without loading the weights. Prints the directory and the files, then one JSON
line. Exit codes: 0 fetched and checked, 1 no network, a hub error or a file that fails the check.

LingBot-World-Fast (``engine.model.lingbot.download``) always goes into a directory (default
``./lingbot-world-fast``): its release folder joins two hub repositories. ``--dry-run`` prints what
would be fetched (repositories, folders, allow-patterns) and touches no network.

``--dry-run`` (either kind) fetches nothing: it lists every file with its size (the hub's metadata, one
request per repository; unknown, and said why, when the hub cannot be reached), where it would land,
whether it is already there, the total to fetch and the destination's free space, then one JSON line.
"""
from __future__ import annotations

import os
from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.config import MODEL_CONFIGS, model_config
from engine.model.hub import MODE_MODELS, REPO_ID, fetch, files_for

MODES = (*MODE_MODELS, "all")
LINGBOT_DOWNLOADS = ("lingbot-fast",)


@click.command()
@click.option("--mode", "mode", type=click.Choice(MODES), default="universal", show_default=True,
              help="Which MG2 models to fetch: each mode's DiT plus the shared VAE and CLIP.")
@click.option("--dir", "local_dir", type=click.Path(path_type=Path), default=None,
              help="Put the files in this directory (the official layout) instead of the hub's cache.")
@click.option("--check-as", type=click.Choice(sorted(MODEL_CONFIGS)), default=None,
              help="Check the files as this model instead of each mode's MG2 (tiny, micro: a small "
                   "checkpoint in the official layout).")
@click.option("--model", "model", type=click.Choice(LINGBOT_DOWNLOADS), default=None,
              help="Fetch LingBot-World-Fast's release folder (DiT, VAE, UMT5 encoder and tokenizer) instead "
                   "of MG2's weights.")
@click.option("--dry-run", is_flag=True, help="List what would be fetched: every file "
                                             "with sizes and destination, then one JSON line; nothing is downloaded.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@json_result
def download(mode: str, local_dir: Path | None, check_as: str | None, model: str | None, dry_run: bool,
             quiet: bool) -> None:
    """Fetch the MG2 weights a mode needs from Skywork/Matrix-Game-2.0 (or, with --model lingbot-fast,
    LingBot-World-Fast's release folder) and check them."""
    if model is not None:
        return _download_lingbot(model, local_dir, dry_run, quiet)
    if dry_run:
        modes = list(MODE_MODELS) if mode == "all" else [mode]
        into = local_dir if local_dir is not None else _cache_destination()
        return _print_listing([(REPO_ID, into, files_for(modes))], into,
                              {"repo": REPO_ID, "modes": modes, "allow_patterns": files_for(modes)})
    modes = list(MODE_MODELS) if mode == "all" else [mode]
    root = fetch(modes, local_dir, progress=not quiet)
    checked = list(dict.fromkeys(check_as or MODE_MODELS[m] for m in modes))
    from engine.model.load import check_checkpoint   # imports torch: not at start-up (``plan`` needs none)
    for name in checked:
        check_checkpoint(model_config(name), root)
    files = {f: (root / f).stat().st_size for f in files_for(modes)}
    click.echo(f"{REPO_ID} ({', '.join(modes)}) in {root}")
    for name, size in files.items():
        click.echo(f"  {size / 2**30:8.3f} GiB  {name}")
    click.echo(f"checked as {', '.join(checked)}: every key and shape; use --checkpoint "
               + (str(root) if local_dir is not None else REPO_ID))
    emit_json(json_line({"repo": REPO_ID, "modes": modes, "dir": str(root), "files": files,
                           "checked_as": checked}))


def _download_lingbot(model: str, local_dir: Path | None, dry_run: bool, quiet: bool) -> None:
    from engine.model.lingbot import download as lingbot_download   # imports the hub client when used

    root = local_dir if local_dir is not None else lingbot_download.DEFAULT_DIR
    if dry_run:
        parts = [(part["repo"], Path(root) / part["into"], part["allow_patterns"]) for part in lingbot_download.plan()]
        return _print_listing(parts, Path(root), {"model": model, "parts": lingbot_download.plan()})
    root = lingbot_download.fetch(root, progress=not quiet)
    from engine.model.lingbot.checkpoint import check_release   # imports torch: not at start-up
    from engine.facts.lingbot_models import lingbot_config
    check_release(root, lingbot_config(model))
    files = {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*"))
             if p.is_file() and ".cache" not in p.relative_to(root).parts}
    for name, size in files.items():
        click.echo(f"  {size / 2**30:8.3f} GiB  {name}")
    click.echo(f"checked as {model}: every file, key and shape; use --checkpoint {root}")
    emit_json(json_line({"model": model, "dir": str(root), "files": files, "checked_as": [model]}))


def _cache_destination() -> Path:
    """Where a download into the hub's cache lands: its snapshot of the repository, when there is one."""
    from engine.model.hub import _cache_dir

    try:
        from engine.model.hub import cached_snapshot
        return cached_snapshot(REPO_ID)
    except Exception:   # not cached yet (a CheckpointError) or no hub client: name the cache itself
        cache = _cache_dir() or os.path.join(os.environ.get("HF_HOME", "~/.cache/huggingface"), "hub")
        return Path(cache).expanduser() / ("models--" + REPO_ID.replace("/", "--"))


def _print_listing(parts, destination: Path, facts: dict) -> None:
    """``--dry-run``: each file, its size and destination; the total; the free space; one JSON line."""
    from engine.model.hub_listing import download_listing, free_bytes

    listed, unknown = download_listing(parts)
    click.echo(f"would fetch into {destination} (nothing is downloaded with --dry-run):")
    for f in listed:
        size = "       ? GiB" if f.size is None else f"{f.size / 2**30:8.3f} GiB"
        click.echo(f"  {size}  {f.repo}: {f.name}" + ("  (already there)" if f.present else ""))
    todo = sum(f.size for f in listed if f.size is not None and not f.present)
    free = free_bytes(destination)
    known = any(f.size is not None for f in listed)
    amount = f"{todo / 2**30:.2f} GiB" if known else "unknown"
    click.echo(f"to fetch: {amount}" + (" (at least: some sizes are unknown)" if unknown and known else "")
               + ("" if free is None else f"; {free / 2**30:.1f} GiB free at the destination"
                  + (" - NOT ENOUGH" if todo > free else "")))
    for reason in unknown:
        click.echo(f"sizes unknown for {reason}")
    emit_json(json_line({**facts, "dir": str(destination), "files": [f.as_json() for f in listed],
                           "bytes_to_fetch": todo, "sizes_unknown": unknown, "free_bytes": free}))
