"""Training the arena model on a lent CUDA device for a fixed number of minutes (``scripts/device_train.sh``).

Owns the device run's recipe and what it leaves: start from the packaged weights (or ``--init``), train
with a bigger batch for ``--minutes`` of wall time (``engine.arena.train``'s timed schedule: warm-up,
peak, linear decay over the last fifth), batches rendered by ``--workers`` processes; then write to
``--out`` the fp16 weights (``arena.safetensors``, the file the package ships), the training log
(``train.log.jsonl``) and a summary (``device_train.json``: steps, wall time, loss, device, recipe).
The checkpoint with the optimiser (``last.pt``, too big to bring back) stays in ``--work``; a run
with the same ``--work`` resumes it. Nothing here needs the network or PyAV.

``--dry-run`` runs the same path on the CPU at a tiny size in seconds (two steps of batch 1, 4 chunks,
one rendering process), for CI.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

DEVICE_BATCH = 32
DEVICE_LR = 5e-4
DRY = {"steps": 2, "batch": 1, "chunks": 4, "workers": 1, "minutes": 5.0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="scripts/device_train.sh", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=8.0, help="wall time of training (default 8)")
    p.add_argument("--out", type=Path, required=True, help="where the weights, log and summary go")
    p.add_argument("--work", type=Path, default=Path("/tmp/arena-train"), help="checkpoint folder (resumed)")
    p.add_argument("--init", type=Path, default=None, help="start weights (default: the packaged ones)")
    p.add_argument("--batch", type=int, default=DEVICE_BATCH)
    p.add_argument("--lr", type=float, default=DEVICE_LR)
    p.add_argument("--chunks", type=int, default=12)
    p.add_argument("--workers", type=int, default=None, help="rendering processes (default: CPUs - 2)")
    p.add_argument("--dry-run", action="store_true", help="the same path on the CPU, tiny, in seconds")
    a = p.parse_args(argv)

    import torch

    from engine.arena.train import Recipe, model_config, train
    from engine.arena.weights import export_checkpoint, packaged_weights_path

    if a.dry_run:
        device, steps = "cpu", DRY["steps"]
        a.batch, a.chunks, a.workers, a.minutes = DRY["batch"], DRY["chunks"], DRY["workers"], DRY["minutes"]
    else:
        if not torch.cuda.is_available():
            print("device_train: error: no CUDA device (use --dry-run to check the path on the CPU)", file=sys.stderr)
            return 1
        device, steps = "cuda", 10**9
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    workers = a.workers if a.workers is not None else max(1, (os.cpu_count() or 4) - 2)
    init = a.init or packaged_weights_path()
    recipe = Recipe(steps=steps, batch=a.batch, chunks=a.chunks, lr=a.lr, warmup=20)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = train(a.work, recipe, model_config(a.work, init), device, save_every=100, init=init, quiet=True,
                   budget_s=60.0 * a.minutes, workers=workers)
    from engine.arena.weights import read_metadata

    meta = export_checkpoint(a.work / "last.pt", a.out / "arena.safetensors",
                             {"trained_on": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (dry run)",
                              "init": str(init), "init_train_steps": read_metadata(init).get("train_steps", "?")})
    shutil.copyfile(a.work / "train.log.jsonl", a.out / "train.log.jsonl")
    summary = {"dry_run": a.dry_run, "device": meta["trained_on"], "minutes": a.minutes, "workers": workers,
               "init": str(init), "recipe": dataclasses.asdict(recipe), **result,
               "seconds": round(time.monotonic() - t0, 1),
               "files": sorted({p.name for p in a.out.iterdir()} | {"device_train.json"})}
    (a.out / "device_train.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
