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
"""
from __future__ import annotations

import json
from pathlib import Path

import click

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
@click.option("--dry-run", is_flag=True, help="Print what would be fetched (repositories and allow-patterns) "
                                             "as one JSON line; no network.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def download(mode: str, local_dir: Path | None, check_as: str | None, model: str | None, dry_run: bool,
             quiet: bool) -> None:
    """Fetch the MG2 weights a mode needs from Skywork/Matrix-Game-2.0 (or, with --model lingbot-fast,
    LingBot-World-Fast's release folder) and check them."""
    if model is not None:
        return _download_lingbot(model, local_dir, dry_run, quiet)
    if dry_run:
        modes = list(MODE_MODELS) if mode == "all" else [mode]
        click.echo(json.dumps({"repo": REPO_ID, "modes": modes, "allow_patterns": files_for(modes)},
                              separators=(",", ":")))
        return
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
    click.echo(json.dumps({"repo": REPO_ID, "modes": modes, "dir": str(root), "files": files,
                           "checked_as": checked}, separators=(",", ":")))


def _download_lingbot(model: str, local_dir: Path | None, dry_run: bool, quiet: bool) -> None:
    from engine.model.lingbot import download as lingbot_download   # imports the hub client when used

    root = local_dir if local_dir is not None else lingbot_download.DEFAULT_DIR
    if dry_run:
        click.echo(json.dumps({"model": model, "dir": str(root), "parts": lingbot_download.plan()},
                              separators=(",", ":")))
        return
    root = lingbot_download.fetch(root, progress=not quiet)
    from engine.model.lingbot.checkpoint import check_release   # imports torch: not at start-up
    from engine.lingbot_models import lingbot_config
    check_release(root, lingbot_config(model))
    files = {p.relative_to(root).as_posix(): p.stat().st_size for p in sorted(root.rglob("*"))
             if p.is_file() and ".cache" not in p.relative_to(root).parts}
    for name, size in files.items():
        click.echo(f"  {size / 2**30:8.3f} GiB  {name}")
    click.echo(f"checked as {model}: every file, key and shape; use --checkpoint {root}")
    click.echo(json.dumps({"model": model, "dir": str(root), "files": files, "checked_as": [model]},
                          separators=(",", ":")))
