"""``--late-prefetch wait``: a prefetched set still loading when its chunk starts is waited for, so a run's
frames do not depend on how fast the machine or the drive is.

Two arena sessions through the disk tier, the same in everything but the drive: one unthrottled, one
throttled so hard that every read from it takes longer than a chunk's compute. With ``wait`` both write
the same MP4 bytes and log the same retrievals chunk for chunk, and the throttled one's waits are logged
as stalls. (With the default, ``miss``, the throttled run's late sets are misses by design, which is why
the tests that compare frames across runs use ``wait``.) A mode that is neither is a one-line error.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from engine.errors import WorldPagerError
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import one_line_error
from worldpager_cli.main import cli

CHUNKS = 10


def _run(tmp_path, name: str, drive_bw: str | None) -> list[dict]:
    memory = {"pool_slots": 4, "spill": tmp_path / f"{name}.spill", "late_prefetch": "wait",
              "io_deadline_s": 600.0}
    if drive_bw:
        memory["drive_bw"] = drive_bw
    cfg = resolve_session_config(None, {"model": "arena", "chunks": CHUNKS, "out": tmp_path / f"{name}.mp4",
                                        "save_every": 0, "memory": memory})
    assert Session(cfg).run().status == "done"
    return [r for r in read_log(cfg.log_path) if r.get("type") == "chunk"]


def test_a_slow_drive_changes_the_stalls_not_the_frames(tmp_path):
    fast = _run(tmp_path, "fast", None)
    slow = _run(tmp_path, "slow", "r=0.0002")          # 0.2 MB/s: every staged read is late
    assert (tmp_path / "fast.mp4").read_bytes() == (tmp_path / "slow.mp4").read_bytes()
    retrievals = ("hits", "misses", "stale", "staged", "memory")
    assert [{k: r[k] for k in retrievals} for r in fast] == [{k: r[k] for k in retrievals} for r in slow]
    assert sum(r["hits"] for r in slow) > 0             # chunks did come back from the drive
    assert sum(r["stall_ms"] for r in slow) > 0         # and were waited for


def test_an_unknown_mode_is_one_line():
    one_line_error(CliRunner().invoke(cli, ["generate", "--late-prefetch", "later", "--chunks", "2"]),
                   "--late-prefetch", "'later'", code=2)   # not one of the choices: a usage error
    with pytest.raises(WorldPagerError) as err:       # the config's own check: presets and batch job lines
        resolve_session_config(None, {"memory": {"late_prefetch": "later"}})
    assert "late_prefetch" in str(err.value) and "later" in str(err.value) and "\n" not in str(err.value)
