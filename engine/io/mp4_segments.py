"""H.264 segments in a fragmented MP4, byte for byte: what :class:`engine.io.video.VideoWriter` writes.

Owns the x264 settings (:class:`EncoderSettings`), encoding one segment with a fresh encoder, the
file header (``ftyp`` + an empty ``moov``, written by libavformat), the fragments that follow it (one
``moof`` + ``mdat`` per group of pictures, built here) and reading a file's coded frames back.

Why fragments by hand: libavformat's MP4 muxer keeps the newest fragment in memory until the next
keyframe arrives or the file is closed, and PyAV offers no call to flush it (``av_write_frame(ctx,
NULL)``). A fragment built here goes to the OS as soon as its frames are encoded.

Each fragment states its samples' duration and flags itself (``tfhd`` defaults, the keyframe's flags
in ``trun``), so nothing depends on the defaults in the header's ``trex``; ``default-base-is-moof``
makes data offsets relative to the fragment. A file is therefore a function of its header and its
coded frames: copying the frames into a new file with :func:`fragments` reproduces its bytes.
"""
from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import av
import numpy as np

from engine.errors import InputError
from engine.files.input_files import check_input_file

FRAGMENTED_MOVFLAGS = "frag_keyframe+empty_moov+default_base_moof"
TRACK_ID = 1  # libavformat numbers its tracks from 1; checked against the header's trex
# tfhd: data offsets count from the moof; every sample's duration and flags default to the fragment's.
TFHD_FLAGS = 0x020000 | 0x000008 | 0x000020
# trun: a data offset, the first sample's own flags (it is the keyframe), then each sample's size.
TRUN_FLAGS = 0x000001 | 0x000004 | 0x000200
SAMPLE_FLAGS_KEY = 0x02000000    # sample_depends_on = 2: decodes on its own
SAMPLE_FLAGS_DELTA = 0x01010000  # sample_depends_on = 1, sample_is_non_sync_sample = 1
NAL_TYPE_SEI = 6
_START_CODE = re.compile(b"\x00\x00\x01")


class Sample(NamedTuple):
    """One coded frame: its length-prefixed NAL units and whether it is a keyframe."""

    data: bytes
    keyframe: bool


@dataclass(frozen=True)
class EncoderSettings:
    """Everything that decides x264's output; the header's and every segment's encoder use one."""

    width: int
    height: int
    fps: int
    crf: int
    preset: str

    def configure(self, codec: av.VideoCodecContext) -> None:
        codec.width, codec.height, codec.pix_fmt = self.width, self.height, "yuv420p"
        codec.time_base, codec.framerate = Fraction(1, self.fps), Fraction(self.fps)
        codec.gop_size = self.fps  # long writes still get a keyframe (a random-access point) per second
        # No B-frames: dts == pts, so timestamps never step back where one segment meets the next.
        codec.max_b_frames = 0
        # One encoder thread: the output does not depend on how x264's threads are scheduled, and x264's
        # threads do not compete with a CPU model's (measured with the arena model on 2 cores: a chunk
        # 79.6 -> 68.0 ms; at these frame sizes one thread is ample).
        codec.thread_count = 1
        # Scene cuts would let the content place keyframes; they are placed by frame count.
        # cpu-independent: x264's canonical algorithms instead of the CPU's own. Without it the IDR
        # frame's intra search runs x264's AVX-512 "x9" functions, which gave a different first sample
        # for the same frames in about 1 of 50 encodes in one process (0 of 10,000 with it): resumed
        # runs then differed from uninterrupted ones (tests/unit/test_video_determinism.py). It also
        # makes the bytes the same on machines with other instruction sets.
        codec.options = {"crf": str(self.crf), "preset": self.preset,
                         "x264-params": "scenecut=0:cpu-independent=1"}


def _scaler_threads_option() -> dict:
    """``threads=1`` for ``VideoFrame.reformat`` where this PyAV takes it (older versions scale on one
    thread anyway)."""
    try:
        av.VideoFrame(2, 2, "rgb24").reformat(format="yuv420p", threads=1)
    except TypeError:
        return {}
    return {"threads": 1}


ONE_SCALER_THREAD = _scaler_threads_option()


def encode_segment(settings: EncoderSettings, rgb: np.ndarray, extradata: bytes) -> list[Sample]:
    """Encode ``rgb`` [T, H, W, 3] uint8 with a fresh encoder, flushed: T samples, the first an IDR.

    ``extradata`` is the header's SPS/PPS, which this encoder must reproduce.
    """
    encoder = av.CodecContext.create("libx264", "w")
    settings.configure(encoder)
    # SPS/PPS go to extradata (the header's avcC) instead of in front of each segment's IDR.
    encoder.flags |= av.codec.context.Flags.global_header
    packets: list[av.Packet] = []
    for index, image in enumerate(rgb):
        # RGB -> YUV here, on one thread: left to the encoder, the conversion runs on as many threads as
        # the machine has cores (PyAV's default), and the same frames then gave different bytes now
        # and then on a loaded machine.
        frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p", **ONE_SCALER_THREAD)
        frame.pts = index  # segment-local: nothing in the segment depends on where it lands
        packets += encoder.encode(frame)
    packets += encoder.encode(None)
    assert encoder.extradata == extradata, "x264's SPS/PPS differ from the header's"
    assert [(p.pts, p.dts) for p in packets] == [(i, i) for i in range(len(rgb))], "x264 reordered frames"
    assert packets[0].is_keyframe, "a segment must start with an IDR frame"
    return [Sample(annexb_to_length_prefixed(bytes(p)), p.is_keyframe) for p in packets]


def mp4_header(settings: EncoderSettings) -> tuple[bytes, bytes, int]:
    """``ftyp`` + empty ``moov`` as libavformat writes them for ``settings``, the SPS/PPS (Annex B, as
    each segment's encoder reports them) and the track's timescale (ticks per second)."""
    buffer = io.BytesIO()
    muxer = av.open(buffer, mode="w", format="mp4", container_options={"movflags": FRAGMENTED_MOVFLAGS})
    try:
        stream = muxer.add_stream("libx264", rate=settings.fps)
        settings.configure(stream.codec_context)
        muxer.start_encoding()  # opens an encoder configured like the segments' and writes ftyp + moov
        extradata, timescale = stream.codec_context.extradata, stream.time_base.denominator
    finally:
        muxer.close()
    written = buffer.getvalue()
    boxes = _top_level_boxes(written)
    assert [kind for kind, _ in boxes[:2]] == [b"ftyp", b"moov"], f"unexpected MP4 header {boxes}"
    header = written[:boxes[0][1] + boxes[1][1]]
    trex = header.index(b"trex")
    assert int.from_bytes(header[trex + 8:trex + 12], "big") == TRACK_ID, "the header's track is not 1"
    return header, extradata, timescale


def fragments(samples: Sequence[Sample], first_sequence: int, first_frame: int,
              sample_duration: int) -> tuple[bytes, int]:
    """``moof`` + ``mdat`` pairs for ``samples``, a new fragment at every keyframe.

    Fragment ``k`` (from 0) gets sequence number ``first_sequence + k``; sample ``i`` decodes at
    ``(first_frame + i) * sample_duration`` timescale ticks. Returns the bytes and the fragment count.
    """
    assert samples and samples[0].keyframe, "fragments must start with a keyframe"
    starts = [i for i, sample in enumerate(samples) if sample.keyframe] + [len(samples)]
    pieces = [_fragment(samples[begin:end], first_sequence + k, (first_frame + begin) * sample_duration,
                        sample_duration)
              for k, (begin, end) in enumerate(zip(starts, starts[1:]))]
    return b"".join(pieces), len(pieces)


def read_groups(path: Path, frames: int) -> Iterator[list[Sample]]:
    """The first ``frames`` coded frames of ``path``, demuxed (not decoded), a group of pictures at a
    time (so a long file is never held in memory whole). A frame cut short by a kill does not count.

    Raises (while iterating):
        InputError: the file is unreadable, holds fewer frames, or the frame after them is not a
            keyframe (so no segment starts there).
    """
    group: list[Sample] = []
    read = 0
    check_input_file(path, "video")   # the gate: a FIFO is refused, never waited on
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"cannot resume video {path}: no video stream")
            for packet in container.demux(video=0):
                if packet.size == 0 or packet.is_corrupt:  # end of stream; a fragment cut by a kill
                    break
                if read == frames:
                    if not packet.is_keyframe:
                        raise InputError(f"cannot resume video {path} at frame {frames}: "
                                         f"no write began there (frame {frames} is not a keyframe)")
                    break
                if packet.is_keyframe and group:
                    yield group
                    group = []
                group.append(Sample(bytes(packet), packet.is_keyframe))
                read += 1
    except (OSError, av.error.FFmpegError, ValueError) as exc:   # ValueError: metadata PyAV cannot decode
        # An error past the kept frames is a tail a kill cut short; the kept frames are whole.
        if read < frames:
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise InputError(f"cannot resume video {path}: {reason}") from None
    if read < frames:
        raise InputError(f"cannot resume video {path} at frame {frames}: it holds only {read} frames")
    if group:
        yield group


def cut_points(path: Path) -> tuple[int, set[int]]:
    """The whole coded frames of ``path`` (demuxed, not decoded) and the indices of its keyframes: a
    file can be continued after frame ``f`` when ``f`` is their count or one of those keyframes
    (``read_groups``). A frame cut short by a kill, and whatever follows it, does not count.

    Raises:
        InputError: the file cannot be opened as a video.
    """
    frames, keys = 0, set()
    check_input_file(path, "video")   # the gate: a FIFO is refused, never waited on
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"video {path} has no video stream")
            for packet in container.demux(video=0):
                if packet.size == 0 or packet.is_corrupt:
                    break
                if packet.is_keyframe:
                    keys.add(frames)
                frames += 1
    except (OSError, av.error.FFmpegError, ValueError) as exc:   # ValueError: metadata PyAV cannot decode
        if frames == 0:   # past the first frame, an error is a tail a kill cut short
            reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            raise InputError(f"cannot read video {path}: {reason}") from None
    return frames, keys


def annexb_to_length_prefixed(data: bytes) -> bytes:
    """Annex B NAL units (start-code separated) as MP4 stores them: each after its 4-byte length.

    SEI units are dropped: the only one x264 emits with these settings is its ~600-byte banner of
    version and options, which every fresh encoder would otherwise repeat in front of its first frame.
    """
    units = []
    for nal in _START_CODE.split(data):
        # Zeros before a start code belong to the byte stream (4-byte start codes, trailing_zero_8bits),
        # not to the NAL unit, whose last byte holds its stop bit.
        nal = nal.rstrip(b"\x00")
        if nal and nal[0] & 0x1F != NAL_TYPE_SEI:
            units.append(struct.pack(">I", len(nal)) + nal)
    return b"".join(units)


def _fragment(samples: Sequence[Sample], sequence: int, decode_time: int, sample_duration: int) -> bytes:
    """One group of pictures: a keyframe, then only frames that depend on it."""
    assert samples[0].keyframe and not any(s.keyframe for s in samples[1:]), "not one group of pictures"

    def moof(data_offset: int) -> bytes:
        sizes = struct.pack(f">{len(samples)}I", *(len(s.data) for s in samples))
        trun = _box(b"trun", struct.pack(">IIiI", TRUN_FLAGS, len(samples), data_offset, SAMPLE_FLAGS_KEY)
                    + sizes)
        tfhd = _box(b"tfhd", struct.pack(">IIII", TFHD_FLAGS, TRACK_ID, sample_duration, SAMPLE_FLAGS_DELTA))
        tfdt = _box(b"tfdt", struct.pack(">IQ", 1 << 24, decode_time))  # version 1: 64-bit time
        mfhd = _box(b"mfhd", struct.pack(">II", 0, sequence))
        return _box(b"moof", mfhd + _box(b"traf", tfhd + tfdt + trun))

    mdat_payload_offset = len(moof(0)) + 8  # the offset's value does not change the moof's size
    return moof(mdat_payload_offset) + _box(b"mdat", b"".join(s.data for s in samples))


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _top_level_boxes(data: bytes) -> list[tuple[bytes, int]]:
    """``(type, size)`` of each complete top-level box at the start of ``data``."""
    boxes, offset = [], 0
    while offset + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, offset)
        if size < 8 or offset + size > len(data):
            break
        boxes.append((kind, size))
        offset += size
    return boxes
