"""The same frames give the same MP4 bytes every time (what resuming a session byte for byte rests on).

x264's AVX-512 intra analysis of the IDR frame (its ``intra_*_x9`` functions) gave a different first
sample now and then for the same input: with these 9 frames (a micro-model session's first chunk, the
frames a resume test once failed on) 60 of 3,000 encodes in one process differed, every process that
ran the same sequence of encodes failing at the same ones (so it depends on the memory left by earlier
allocations, not on timing). The writer's x264 runs with ``cpu-independent=1`` (canonical algorithms,
no CPU-specific intra search): 0 of 10,000 then. How often the old setting failed depends on the
process's heap (in this test's process it may not fail at all), so the setting is checked too: that is
what stops the failure wherever the heap is laid out otherwise.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from engine.io.mp4_segments import EncoderSettings, encode_segment, mp4_header

FRAMES = Path(__file__).with_name("data") / "x264_idr_frames.npz"
SETTINGS = EncoderSettings(width=64, height=32, fps=16, crf=18, preset="veryfast")


def test_the_encoder_is_cpu_independent():
    encoder = av.CodecContext.create("libx264", "w")
    SETTINGS.configure(encoder)
    assert "cpu-independent=1" in encoder.options["x264-params"].split(":")
    assert encoder.thread_count == 1 and encoder.time_base == Fraction(1, SETTINGS.fps)


def test_the_same_frames_encode_to_the_same_bytes_every_time():
    rgb = np.load(FRAMES)["frames"]
    assert rgb.shape == (9, 32, 64, 3) and rgb.dtype == np.uint8
    _, extradata, _ = mp4_header(SETTINGS)
    first = encode_segment(SETTINGS, rgb, extradata)
    differing = [i for i in range(400) if encode_segment(SETTINGS, rgb, extradata) != first]
    assert differing == [], f"{len(differing)} of 400 encodes of the same frames differed: {differing[:10]}"
