"""Fuzzing the strict ``.npy`` reader (``engine.io.npy_file``) that reads a LingBot pose folder's files.

Files are built from their parts — magic, version, header length, the header dict (dtype, shape,
fortran order, its keys), the data — each part right or wrong, the whole sometimes truncated, mutated
or replaced by a zip, a pickle or garbage. For every file the reader must

* never allocate more than the file's size (``tracemalloc``'s peak over the read, which counts numpy's
  array allocations, stays within the file's bytes plus ``SLACK`` for parsing the header), however large
  a shape the header claims;
* refuse with one ``WorldPagerError`` line naming the file and the flag, or return exactly the array
  ``np.load`` reads from the same file (dtype, shape and bytes), and warn of nothing.

Whole pose folders with one file changed are fuzzed through ``load_trajectory`` as well.
"""
from __future__ import annotations

import ast
import io
import math
import shutil
import struct
import tempfile
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engine.errors import WorldPagerError
from engine.io.npy_file import MAGIC, NpyExpect, read_npy
from engine.io.trajectory import load_trajectory
from engine.io.trajectory.pose_folder import EXPECT, FLAG, POSES
from unit.test_fuzz_parsers import fuzz, hang_guard, mutated, one_line_error
from unit.test_fuzz_readers import read_or_refuse

SLACK = 4 * 2 ** 20          # the header's parse: ``ast`` of MAX_HEADER_BYTES takes up to ~2 MB
NUMBERS = ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1")
DESCRS = ["<f4", ">f4", "<f8", ">f8", "<f2", "=f8", "|f4", "|i1", "<i1", "<i2", ">i4", "<i8", "|u1", "<u2",
          ">u4", "<u8", "|b1", "<c8", "|O", "<U3", "|S2", "<M8[s]", "f4", "<f16", "<f3", "", "<f4 "]
PICKLE = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94."


@pytest.fixture(scope="module", autouse=True)
def _work():
    root = Path(tempfile.mkdtemp(prefix="wp-fuzz-npy-"))
    _DIR.append(root)
    yield
    _DIR.pop()
    shutil.rmtree(root, ignore_errors=True)


_DIR: list[Path] = []


def npy_bytes(descr, shape, fortran, version=(1, 0), keys=None, length_delta=0, data_delta=0, data=None) -> bytes:
    """A .npy file from its parts; ``data`` defaults to seeded bytes of the size the header claims
    (plus ``data_delta``, capped: a lying shape gets a few bytes, not its claim)."""
    header = {"descr": descr, "fortran_order": fortran, "shape": shape} if keys is None else keys
    text = repr(header).encode("latin1" if version != (3, 0) else "utf8", "backslashreplace")
    text += b" " * (-(len(MAGIC) + 2 + (2 if version == (1, 0) else 4) + len(text) + 1) % 64) + b"\n"
    length = max(0, len(text) + length_delta)
    field = struct.pack("<H", min(length, 0xFFFF)) if version == (1, 0) else struct.pack("<I", min(length, 2 ** 32 - 1))
    if data is None:
        data = np.random.default_rng(len(text)).bytes(max(0, min(_claimed(descr, shape), 4096) + data_delta))
    return MAGIC + bytes(version) + field + text + data


def _claimed(descr, shape) -> int:
    """The data bytes a header claims; 16 when it names no plain shape or dtype."""
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        return 16
    try:
        return math.prod(shape) * np.dtype(descr).itemsize
    except (TypeError, ValueError):
        return 16


def real_npy(array: np.ndarray, version) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


GOOD_DESCRS = ["<f4", ">f4", "<f8", ">f8", "<f2", "=f8", "|i1", "<i1", "<i2", ">i4", "<i8", "|u1", "<u2", ">u4",
               "<u8", "|b1"]
good_dims = st.one_of(st.integers(0, 6), st.just(4), st.integers(0, 2 ** 20), st.integers(0, 2 ** 40))
odd_dims = st.one_of(st.integers(2 ** 62, 2 ** 70), st.integers(-3, -1), st.sampled_from([True, 1.0, None, "4"]))
odd_shapes = st.one_of(st.lists(st.one_of(good_dims, odd_dims), max_size=4).map(tuple),
                       st.lists(st.integers(0, 4), max_size=3), st.sampled_from([(1,) * 65, 4, None, "(4, 4)"]))
GOOD_VERSIONS = st.sampled_from([(1, 0), (2, 0), (3, 0)])
versions = st.one_of(GOOD_VERSIONS, st.tuples(st.integers(0, 255), st.integers(0, 255)))


@st.composite
def built_npy(draw) -> tuple[bytes, NpyExpect]:
    """A .npy file built from right parts, then one or two of them made wrong; and what the reader
    expects: mostly what the header says (so that the size check and the data are reached)."""
    descr = draw(st.sampled_from(GOOD_DESCRS))
    shape = tuple(draw(st.lists(good_dims, min_size=1, max_size=3)))
    fortran, version, keys, length_delta, data_delta = draw(st.booleans()), draw(GOOD_VERSIONS), None, 0, 0
    for part in draw(st.lists(st.sampled_from(["descr", "shape", "fortran", "keys", "version", "length", "data",
                                               "data", "data"]), max_size=2)):
        if part == "descr":
            descr = draw(st.one_of(st.sampled_from(DESCRS), st.text(max_size=6), st.integers()))
        elif part == "shape":
            shape = draw(odd_shapes)
        elif part == "fortran":
            fortran = draw(st.sampled_from([0, 1, None, "True"]))
        elif part == "keys":                     # a key missing or one too many
            keys = {"descr": descr, "fortran_order": fortran, "shape": shape}
            if draw(st.booleans()):
                del keys[draw(st.sampled_from(sorted(keys)))]
            else:
                keys["extra"] = 1
        elif part == "version":
            version = draw(versions)
        elif part == "length":
            length_delta = draw(st.sampled_from([-1, 1, -10, 64, 10 ** 4, 2 ** 31]))
        else:
            data_delta = draw(st.sampled_from([-1, 1, -8, 64]))
    data = npy_bytes(descr, shape, fortran, version, keys, length_delta, data_delta)
    fits = NpyExpect(tuple(None if draw(st.booleans()) or type(n) is not int else n
                           for n in (shape if isinstance(shape, tuple) else ())),
                     (descr[1:] if descr in GOOD_DESCRS else "f4",) + tuple(draw(st.lists(st.sampled_from(NUMBERS)))))
    return data, draw(st.one_of(st.just(fits), st.just(fits), st.just(fits), expects))


@st.composite
def saved_npy(draw) -> bytes:
    """A file ``np.save`` writes (a [N, 4] or [N, 4, 4] array of a number dtype, C or fortran order)."""
    shape = draw(st.sampled_from([(3, 4), (0, 4), (2, 4, 4), (1, 4, 4), (5, 3), (4,)]))
    dtype = np.dtype(draw(st.sampled_from(["<f4", ">f4", "<f8", ">f8", "<i4", "|u1", "|b1", "<f2"])))
    array = np.random.default_rng(draw(st.integers(0, 99))).normal(size=shape).astype(dtype)
    if draw(st.booleans()):
        array = np.asfortranarray(array)
    return real_npy(array, draw(GOOD_VERSIONS))


garbage = st.one_of(st.binary(min_size=1, max_size=40), st.sampled_from([
    b"", b"PK\x03\x04" + b"\x00" * 60, b"PK\x05\x06" + b"\x00" * 18, PICKLE, MAGIC, MAGIC + b"\x01",
    MAGIC + b"\x01\x00", MAGIC + b"\x01\x00\x76", MAGIC + b"\x02\x00\xff\xff\xff\xff"]))
expects = st.one_of(st.sampled_from(sorted(EXPECT.values(), key=repr)),
                    st.builds(NpyExpect, st.sampled_from([(None, 4), (None, 4, 4), (None,), (None, None), (4, None)]),
                              st.lists(st.sampled_from(NUMBERS), min_size=1, unique=True).map(tuple)))


@st.composite
def npy_files(draw) -> tuple[bytes, NpyExpect]:
    """A file and what its reader expects: built from parts (most), saved by numpy, or garbage; then
    maybe truncated or mutated."""
    kind = draw(st.sampled_from(["built", "built", "built", "saved", "garbage"]))
    if kind == "built":
        data, expect = draw(built_npy())
    else:
        data, expect = draw(saved_npy() if kind == "saved" else garbage), draw(expects)
    how = draw(st.sampled_from(["as is", "as is", "as is", "truncate", "mutate"]))
    if how == "truncate" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif how == "mutate":
        data = draw(mutated(data, max_ops=2))
    return data, expect


def read_within_the_file(path: Path, data: bytes, expect: NpyExpect):
    """``read_npy`` on ``data`` in ``path`` (one-line refusal or the array), its allocations measured;
    it warns of nothing (a warning would be a second line on the user's stderr)."""
    tracemalloc.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tracemalloc.reset_peak()
            value = read_or_refuse(path, data, lambda p: read_npy(p, expect, FLAG))
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= len(data) + SLACK, f"read a {len(data)}-byte file with a peak of {peak} bytes"
    assert not caught, [str(w.message) for w in caught]
    return value


def check(data: bytes, expect: NpyExpect) -> None:
    path = _DIR[-1] / "poses.npy"
    value = read_within_the_file(path, data, expect)
    if value is None:
        return
    loaded = np.load(path, allow_pickle=False)
    assert isinstance(loaded, np.ndarray) and value.dtype == loaded.dtype and value.shape == loaded.shape
    assert value.tobytes() == loaded.tobytes()
    assert value.dtype.str[1:] in expect.dtypes and len(value.shape) == len(expect.shape)


POSES_EXPECT = EXPECT[POSES]
HUGE = (800_000_000, 4, 4)                                   # 47.7 GiB of float32
BAD_ESCAPE = b"{'descr': '\\ ', 'fortran_order': False, 'shape': ()}\n"   # Python warns of '\ ' when parsing


@fuzz(400)
@given(npy_files())
@example((b"", POSES_EXPECT))
@example((npy_bytes("<f4", HUGE, False, data=b"\0" * 64), POSES_EXPECT))
@example((npy_bytes("<f4", (2 ** 20, 4, 4), False, data=b"\0" * 64), POSES_EXPECT))    # 64 MiB claimed
@example((npy_bytes("<f8", (2 ** 31, 4, 4), True, data=b"\0" * 4096), POSES_EXPECT))
@example((npy_bytes("<f4", (2 ** 40, 2 ** 40, 4), False, data=b""), POSES_EXPECT))
@example((npy_bytes("<f4", (0, 2 ** 62, 4), False, data=b""), NpyExpect((None, None, 4), ("f4",))))
@example((npy_bytes("<f4", (3, 4), False, length_delta=10 ** 4), POSES_EXPECT))
@example((npy_bytes("<f4", (3, 4), False, version=(2, 0), length_delta=2 ** 31), EXPECT["intrinsics.npy"]))
@example((npy_bytes("<f4", (3, 4), False, length_delta=-30), EXPECT["intrinsics.npy"]))
@example((npy_bytes("|O", (3, 4), False), EXPECT["action.npy"]))
@example((npy_bytes("<f4", (3, 4), False, keys={"descr": "<f4", "shape": (3, 4), "fortran_order": False,
                                                "x\n\ny" * 30: 1}), EXPECT["intrinsics.npy"]))
@example((npy_bytes("<f4", (3, 4), False, keys="\n".join(["a"] * 50)), EXPECT["intrinsics.npy"]))
@example((MAGIC + b"\x01\x00" + struct.pack("<H", 4000) + b"(" * 4000, POSES_EXPECT))
@example((MAGIC + b"\x01\x00" + struct.pack("<H", len(BAD_ESCAPE)) + BAD_ESCAPE, POSES_EXPECT))
@example((npy_bytes("<f4", (0,) * 1300, False, data=b""), POSES_EXPECT))            # the longest header parsed
@example((real_npy(np.zeros((2, 4, 4), np.float32), (1, 0))[:40], POSES_EXPECT))
@example((real_npy(np.asfortranarray(np.arange(12.0).reshape(3, 4)), (3, 0)), EXPECT["intrinsics.npy"]))
@example((PICKLE, POSES_EXPECT))
@example((b"PK\x03\x04" + b"\x00" * 60, POSES_EXPECT))
def test_npy_headers_never_allocate_past_the_file(case):
    check(*case)


def test_the_size_check_names_the_side(tmp_path):
    good = real_npy(np.zeros((2, 4, 4), np.float32), (1, 0))
    for data, side in ((good[:-4], "4 bytes too few: the file is truncated"),
                       (good + b"\0" * 8, "8 bytes too many: trailing bytes")):
        path = tmp_path / "poses.npy"
        path.write_bytes(data)
        with pytest.raises(WorldPagerError) as err:
            read_npy(path, POSES_EXPECT, FLAG)
        assert side in str(err.value) and str(err.value).startswith(f"{FLAG} {path}: ")
        assert "expected float32/64 [N, 4, 4] (camera-to-world matrices) in a plain .npy file" in str(err.value)


def test_the_header_is_read_as_a_literal_only(tmp_path):
    """A header that would run code if evaluated is refused as not a literal, and runs nothing."""
    path = tmp_path / "poses.npy"
    marker = tmp_path / "ran"
    text = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    raw = text.encode() + b"\n"
    path.write_bytes(MAGIC + b"\x01\x00" + struct.pack("<H", len(raw)) + raw)
    with pytest.raises(WorldPagerError, match="not a Python literal"):
        read_npy(path, POSES_EXPECT, FLAG)
    assert not marker.exists()
    with pytest.raises(ValueError):
        ast.literal_eval(text)


# ---- whole pose folders, as ``--trajectory DIR`` reads them ---------------------------------------------

FOLDER_FRAMES = 21
_C2W = np.repeat(np.eye(4, dtype=np.float32)[None], FOLDER_FRAMES, axis=0)
_C2W[:, 2, 3] = np.arange(FOLDER_FRAMES) * 0.1
BASE_FOLDER = {POSES: real_npy(_C2W, (1, 0)),
               "intrinsics.npy": real_npy(np.tile(np.float32([500, 500, 416, 240]), (FOLDER_FRAMES, 1)), (1, 0)),
               "action.npy": real_npy(np.tile(np.int32([1, 0, 0, 0]), (FOLDER_FRAMES, 1)), (1, 0))}


@st.composite
def changed_array(draw, name: str) -> bytes:
    """``name``'s array saved by numpy with rows added or cut, values replaced (NaN, infinities, huge,
    random) or another dtype: files the reader takes, for the folder's own checks."""
    array = np.load(io.BytesIO(BASE_FOLDER[name])).astype(np.float64)
    rows = draw(st.integers(0, FOLDER_FRAMES + 3))
    array = np.concatenate([array] * 2)[:rows]
    for _ in range(draw(st.integers(0, 3))):
        if array.size:
            index = tuple(draw(st.integers(0, n - 1)) for n in array.shape)
            array[index] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1.0, 0.0, 2.0, 1e-30]))
    dtype = draw(st.sampled_from(["<f4", ">f8", "<f8", "<i4", "|u1", "|b1", "<f2"]))
    with np.errstate(all="ignore"):
        return real_npy(array.astype(dtype), draw(GOOD_VERSIONS))


@fuzz(100)
@given(st.sampled_from(sorted(BASE_FOLDER)), st.data())
@example(POSES, None)
def test_mutated_pose_folders(name, data):
    """One file of a good folder replaced by a mutated, truncated, built or changed one: the trajectory,
    or one line naming the folder (the file's own errors name the file and ``--trajectory`` too)."""
    folder = _DIR[-1] / "folder"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for other, content in BASE_FOLDER.items():
        (folder / other).write_bytes(content)
    bad = b"" if data is None else data.draw(st.one_of(
        mutated(BASE_FOLDER[name], max_ops=2), built_npy().map(lambda case: case[0]), changed_array(name)))
    (folder / name).write_bytes(bad)
    try:
        with hang_guard():
            traj = load_trajectory(folder, "universal", FOLDER_FRAMES)
    except WorldPagerError as exc:
        message = one_line_error(exc, folder)
        assert name in message, message
        return
    assert traj.frames == FOLDER_FRAMES and np.isfinite(traj.poses).all()
