"""``worldpager download [--mode universal|gta|templerun|all] [--dir DIR]``: MG2's weights from the hub.

Fetches only the files the chosen modes read (``engine.model.hub``) into the hub's cache (then
``--checkpoint Skywork/Matrix-Game-2.0`` finds them, offline too) or into ``--dir`` (then
``--checkpoint DIR``), resuming what an earlier run left, and checks every key and shape of them with
the strict loader, without loading the weights. Prints the directory and the files, then one JSON
line. Exit codes: 0 fetched and checked, 1 no network, a hub error or a file that fails the check.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from engine.config import MODEL_CONFIGS, model_config
from engine.model.hub import MODE_MODELS, REPO_ID, fetch, files_for

MODES = (*MODE_MODELS, "all")


@click.command()
@click.option("--mode", "mode", type=click.Choice(MODES), default="universal", show_default=True,
              help="Which MG2 models to fetch: each mode's DiT plus the shared VAE and CLIP.")
@click.option("--dir", "local_dir", type=click.Path(path_type=Path), default=None,
              help="Put the files in this directory (the official layout) instead of the hub's cache.")
@click.option("--check-as", type=click.Choice(sorted(MODEL_CONFIGS)), default=None,
              help="Check the files as this model instead of each mode's MG2 (tiny, micro: a small "
                   "checkpoint in the official layout).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def download(mode: str, local_dir: Path | None, check_as: str | None, quiet: bool) -> None:
    """Fetch the MG2 weights a mode needs from Skywork/Matrix-Game-2.0 and check them."""
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
