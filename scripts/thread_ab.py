#!/usr/bin/env python3
"""The CPU thread default, measured: ``worldpager generate`` on the arena model with each ``--threads`` and
``--decode-overlap`` setting, alternated over rounds, idle and beside CPU burners.

Prints a table (the default demo's wall time including start-up; the long run's median chunk time from
chunk 20 on, from its log) and a last line of JSON. Run from any directory; writes only under a
temporary directory (or ``--workdir``).

    python3 scripts/thread_ab.py --rounds 3 --burners 0,2
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _burner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _run(workdir: Path, chunks: int | None, threads: int, overlap: bool) -> dict:
    out = workdir / f"t{threads}{'o' if overlap else ''}-{chunks or 'demo'}.mp4"
    cmd = ["worldpager", "generate", "--quiet", "--overwrite", "--out", str(out), "--threads", str(threads),
           "--save-every", "0"]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    if overlap:
        cmd += ["--decode-overlap"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    began = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    log = out.with_suffix(".log.jsonl")
    chunk_ms = [r["wall_ms"] for r in map(json.loads, log.read_text().splitlines()) if r["type"] == "chunk"]
    out.unlink()
    log.unlink()
    return {"wall_s": wall, "chunk_ms_p50": statistics.median(chunk_ms[20:] or chunk_ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burners", default="0,2", help="Comma list of CPU burner counts to measure beside.")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--long-chunks", type=int, default=300)
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    settings = [(int(t), o) for t, o in itertools.product(args.threads.split(","), (False, True))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="worldpager-threads-", dir=args.workdir) as tmp:
        for burners in (int(b) for b in args.burners.split(",")):
            procs = [_burner() for _ in range(burners)]
            try:
                got = {s: {"demo": [], "long": []} for s in settings}
                for _ in range(args.rounds):
                    for s in settings:            # alternated, so a slow minute hits every setting alike
                        got[s]["demo"].append(_run(Path(tmp), None, *s)["wall_s"])
                        got[s]["long"].append(_run(Path(tmp), args.long_chunks, *s)["chunk_ms_p50"])
            finally:
                for p in procs:
                    p.kill()
            for (threads, overlap), g in got.items():
                rows.append({"burners": burners, "threads": threads, "decode_overlap": overlap,
                             "demo_wall_s": statistics.median(g["demo"]), "demo_runs": g["demo"],
                             "long_chunk_ms_p50": statistics.median(g["long"]), "long_runs": g["long"]})
    print(f"{'burners':>7} {'threads':>7} {'overlap':>7} {'demo wall s':>11} {'long chunk ms p50':>17}")
    for r in rows:
        print(f"{r['burners']:>7} {r['threads']:>7} {'on' if r['decode_overlap'] else 'off':>7} "
              f"{r['demo_wall_s']:>11.1f} {r['long_chunk_ms_p50']:>17.1f}")
    print(json.dumps({"rounds": args.rounds, "long_chunks": args.long_chunks, "cpus": os.cpu_count(),
                      "rows": rows}, separators=(",", ":")))


if __name__ == "__main__":
    main()
