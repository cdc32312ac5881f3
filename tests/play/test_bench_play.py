"""``worldpager bench play``'s arena arms scored per walking class: the played session's exact latent
frames against the rendered truth in ``bench quality --walk``'s classes, in the table and the JSON line.

Run as a user runs it (a subprocess, bounded by a generous timeout so that a hung server fails the test
instead of hanging the suite), with the burner made a no-op (the arena+burner arm still runs; the test
does not spin a core of a shared machine). No figure's value is asserted: only what is reported.
"""
from __future__ import annotations

import json
import subprocess
import sys

from engine.arena.config import ArenaModelConfig
from engine.quality.walk_classes import CLASSES
from engine.quality.walk_summary import FIGURES
from tests_support import PATIENCE_S

NO_BURNER = "import engine.play.bench as b; b.BURNER = 'pass'; from worldpager_cli.main import cli; cli()"


def test_bench_play_reports_the_played_frames_per_walking_class(tmp_path):
    done = subprocess.run([sys.executable, "-c", NO_BURNER, "bench", "play", "--spill", str(tmp_path), "--chunks", "4",
                           "--synthetic-chunks", "0"], capture_output=True, text=True, timeout=PATIENCE_S,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    doc = json.loads(lines[-1])
    assert doc["bench"] == "play" and [r["name"] for r in doc["runs"]] == ["arena", "arena+burner"]
    for run in doc["runs"]:
        walk = run["walk"]
        assert walk["observed_chunks"] == 1             # chunk 0, the prompt, is given (no look around)
        assert set(walk["classes"]) == set(CLASSES)
        for cls in walk["classes"].values():
            assert set(cls) == {"frames"} | {name for name, _, _ in FIGURES}
        classes = walk["classes"]
        fpc = ArenaModelConfig().frames_per_chunk
        assert classes["all"]["frames"] == walk["latent_frames"] - fpc * walk["observed_chunks"] > 0
        assert classes["revisit"]["frames"] == classes["return_observed"]["frames"] + classes["return_generated"]["frames"]
        assert classes["all"]["psnr"] > 0 and classes["all"]["sharpness"] > 0
        empty = [c for c in classes.values() if c["frames"] == 0]
        assert all(c["psnr"] is None for c in empty)
    header = next(i for i, line in enumerate(lines) if line.startswith("class ") and "PSNR" in line and "sharp" in line)
    assert lines[header + 1].startswith("new place") and "arena" in lines[header + 1]
    assert any(line.startswith("every generated frame") for line in lines[header:])
