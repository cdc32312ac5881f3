"""Resuming a session with an attention sink (``--sink``) gives the uninterrupted video byte for byte.

The sink's copy is made when chunk 0 is stored and attended only once chunk 0 has left the local window;
past the positional horizon it is re-rotated in place. A save point may fall in either stretch: its copy
must be kept before it is attended, and a re-rotated copy is put back as it was (not rotated again).
Model ``micro`` (horizon chunk 5), memory through a spill directory; the run is stopped in process after
a given chunk (a save point after every chunk), resumed from that save point, and compared.
"""
from __future__ import annotations

import pytest

from engine.settings.overlay import resolve_session_config
from tests_support import resumed_equals_uninterrupted


def _config(root, name: str, chunks: int):
    return resolve_session_config(None, {
        "model": "micro", "device": "cpu", "chunks": chunks, "save_every": 1, "out": str(root / f"{name}.mp4"),
        "memory": {"sink": True, "pool_slots": 4, "late_prefetch": "wait", "spill": str(root / f"{name}.spill")}})


@pytest.mark.parametrize("stop_after, chunks", [
    (0, 4),     # saved after chunk 0: the sink's copy exists, not yet attended
    (6, 9),     # saved after chunk 6: the sink was re-rotated past the horizon
])
def test_resume_with_a_sink_equals_uninterrupted(tmp_path, stop_after, chunks):
    sp = resumed_equals_uninterrupted(_config(tmp_path, "whole", chunks), _config(tmp_path, "cut", chunks),
                                      stop_after)
    assert sp.chunk == stop_after + 1
