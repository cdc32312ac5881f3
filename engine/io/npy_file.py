"""A strict reader of the ``.npy`` files a user names: plain arrays of the dtypes and shape the caller
expects, checked against the file's size before a byte of data is allocated; never unpickled.

Owns the file format as the reader trusts it (``read_npy``):

* the magic ``\\x93NUMPY`` and a version of 1.0, 2.0 or 3.0, then the header's length (2 bytes for
  1.0, 4 for 2.0 and 3.0), which must fit in the file and in ``MAX_HEADER_BYTES``;
* the header, latin-1 (UTF-8 for 3.0) text read by ``ast.literal_eval`` only: a dict whose keys are
  exactly ``descr``, ``fortran_order`` and ``shape``; ``descr`` a byte order and one of the caller's
  dtypes (``NpyExpect.dtypes``: kind and item size, e.g. ``"f4"``; an object, structured or any other
  dtype is refused, so nothing is ever unpickled); ``fortran_order`` a bool; ``shape`` a tuple of
  non-negative ints that matches ``NpyExpect.shape``;
* the data: ``prod(shape) * itemsize`` bytes, exactly the bytes left after the header (a file with
  fewer is truncated, one with more has trailing bytes: both refused, and which one is said) — checked
  before the array is allocated, then read with ``readinto`` of exactly that count.

An empty file, a zip (an ``.npz`` renamed), a pickle, a truncated header, a header that lies about its
length, a shape whose product overflows are each one ``InputError`` line:
``FLAG FILE: what is wrong; expected DTYPES SHAPE in a plain .npy file``. Values from the header are
shown shortened and on one line.
"""
from __future__ import annotations

import ast
import math
import os
import re
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import InputError
from engine.files.input_files import open_input

MAGIC = b"\x93NUMPY"
VERSIONS = {(1, 0): ("<H", "latin1"), (2, 0): ("<I", "latin1"), (3, 0): ("<I", "utf8")}
MAX_HEADER_BYTES = 4096             # a plain array's header: ~128 bytes, ~1.5 KiB with 64 axes of 19 digits
MAX_DIMS = 64                       # numpy's limit
MAX_BYTES = np.iinfo(np.intp).max   # numpy's limit on one array's bytes (zero-length axes aside)
_DESCR = re.compile(r"([<>|=])([a-z])(\d{1,2})")
_NAMES = {"f": "float", "i": "int", "u": "uint", "b": "bool"}
_SHOW = 40                          # characters of a header value in a message


@dataclass(frozen=True)
class NpyExpect:
    """What the caller accepts: ``shape`` (an int per axis, None for any length), ``dtypes`` (kind
    and item size: ``"f4"``, ``"i8"``, ``"b1"``; either byte order), ``meaning`` (for messages)."""

    shape: tuple[int | None, ...]
    dtypes: tuple[str, ...]
    meaning: str = ""

    def __post_init__(self):
        assert self.dtypes and all(re.fullmatch(r"[fiub]\d{1,2}", d) for d in self.dtypes), self.dtypes

    def describe(self) -> str:
        dims = ", ".join("N" if n is None else str(n) for n in self.shape)
        what = f" ({self.meaning})" if self.meaning else ""
        return f"{_dtype_names(self.dtypes)} [{dims}]{what} in a plain .npy file"


def _dtype_names(codes: tuple[str, ...]) -> str:
    """``("f4", "f8", "b1")`` -> ``"float32/64 or bool"``."""
    kinds: dict[str, list[str]] = {}
    for code in codes:
        kinds.setdefault(code[0], []).append(str(8 * int(code[1:])))
    names = ["bool" if kind == "b" else _NAMES.get(kind, kind) + "/".join(bits) for kind, bits in kinds.items()]
    return " or ".join(names)


def read_npy(path: Path, expect: NpyExpect, flag: str) -> np.ndarray:
    """The array in ``path``, as ``np.load`` would return it, or one ``InputError`` line naming
    ``flag``, the file, what is wrong and ``expect``."""
    path = Path(path)

    def refuse(problem: str) -> InputError:
        text = f"{flag} {path}: {problem}; expected {expect.describe()}"
        return InputError(re.sub(r"\s*[\r\n]+\s*", " ", text))

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise refuse(f"cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise refuse("not a regular file")
    try:   # the gate: a FIFO put there since, or a file under /proc, is refused, not waited on
        with open_input(path, flag, fix=f"expected {expect.describe()}") as f:
            return _read(f, os.fstat(f.fileno()).st_size, expect, refuse)
    except OSError as exc:
        raise refuse(f"cannot read it ({exc.strerror})") from None


def _read(f, size: int, expect: NpyExpect, refuse) -> np.ndarray:
    dtype, fortran, shape, offset = _header(f, size, expect, refuse)
    count = math.prod(shape)
    need, have = count * dtype.itemsize, size - offset
    if need != have:
        side = (f"{need - have} bytes too few: the file is truncated" if need > have
                else f"{have - need} bytes too many: trailing bytes after the array")
        raise refuse(f"its header's shape {_show_shape(shape)} of {dtype.name} needs {need} bytes of "
                     f"data, the file holds {have} after its header ({side})")
    flat = np.empty(count, dtype)
    view, done = memoryview(flat).cast("B"), 0
    while done < need:
        got = f.readinto(view[done:])
        if not got:
            raise refuse(f"the file shrank while it was read ({done} of {need} bytes of data)")
        done += got
    if fortran:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def _header(f, size: int, expect: NpyExpect, refuse) -> tuple[np.dtype, bool, tuple[int, ...], int]:
    """(dtype, fortran order, shape, data offset) from the header, every field checked."""
    if size == 0:
        raise refuse("the file is empty (0 bytes)")
    start = f.read(len(MAGIC) + 2)
    if start[:len(MAGIC)] != MAGIC[:len(start)]:
        raise refuse(_not_npy(start))
    if len(start) < len(MAGIC) + 2:
        raise refuse(f"the header is truncated: the file ends after {size} bytes")
    version = (start[-2], start[-1])
    if version not in VERSIONS:
        raise refuse(f"format version {version[0]}.{version[1]} (this reader knows 1.0, 2.0 and 3.0)")
    length_format, encoding = VERSIONS[version]
    raw = f.read(struct.calcsize(length_format))
    if len(raw) < struct.calcsize(length_format):
        raise refuse(f"the header is truncated: the file ends after {size} bytes")
    length = struct.unpack(length_format, raw)[0]
    offset = len(start) + len(raw) + length
    if length > MAX_HEADER_BYTES:
        raise refuse(f"its header claims {length} bytes (at most {MAX_HEADER_BYTES})")
    if offset > size:
        raise refuse(f"its header claims {length} bytes, the file ends {size - len(start) - len(raw)} "
                     "bytes after the header's length field")
    text = f.read(length)
    if len(text) < length:
        raise refuse("the file shrank while its header was read")
    descr, fortran, shape = _fields(_literal(text, encoding, refuse), refuse)
    dtype = _dtype(descr, expect, refuse)
    return dtype, fortran, _shape(shape, dtype.itemsize, expect, refuse), offset


def _not_npy(start: bytes) -> str:
    if start.startswith(b"PK\x03\x04") or start.startswith(b"PK\x05\x06"):
        return "a zip archive (an .npz renamed?), not a .npy array"
    if start[:1] == b"\x80":
        return "a pickle, not a .npy array (pickles are never loaded)"
    return f"not a .npy file: it starts with {_show(start)}, not {_show(MAGIC)}"


def _literal(text: bytes, encoding: str, refuse) -> object:
    try:
        with warnings.catch_warnings():      # "invalid escape sequence" in the header: not the user's stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return ast.literal_eval(text.decode(encoding).rstrip(" \n\x00"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise refuse(f"its header is not a Python literal: {_show(text)}") from None


def _fields(header: object, refuse) -> tuple[object, object, object]:
    keys = {"descr", "fortran_order", "shape"}
    if not isinstance(header, dict):
        raise refuse(f"its header is not a dict: {_show(header)}")
    if set(header) != keys:
        extra = sorted(map(repr, set(header) - keys))
        missing = sorted(map(repr, keys - set(header)))
        raise refuse(f"its header's keys are wrong (extra: {_show(', '.join(extra)) if extra else 'none'}; "
                     f"missing: {', '.join(missing) or 'none'})")
    if type(header["fortran_order"]) is not bool:
        raise refuse(f"its header's fortran_order is {_show(header['fortran_order'])}, not True or False")
    return header["descr"], header["fortran_order"], header["shape"]


def _dtype(descr: object, expect: NpyExpect, refuse) -> np.dtype:
    match = _DESCR.fullmatch(descr) if isinstance(descr, str) else None
    if match is None:
        raise refuse(f"its dtype is {_show(descr)}, not a plain number type")
    order, code = match.group(1), match.group(2) + match.group(3)
    if code not in expect.dtypes:
        raise refuse(f"its dtype is {_show(descr)}")
    if order == "|" and int(match.group(3)) != 1:
        raise refuse(f"its dtype is {_show(descr)}, a multi-byte type without a byte order")
    return np.dtype(descr)


def _shape(shape: object, itemsize: int, expect: NpyExpect, refuse) -> tuple[int, ...]:
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise refuse(f"its header's shape is {_show(shape)}, not a tuple of non-negative whole numbers")
    if len(shape) > MAX_DIMS:
        raise refuse(f"its header's shape has {len(shape)} axes (numpy's limit is {MAX_DIMS})")
    if math.prod(max(n, 1) for n in shape) * itemsize > MAX_BYTES:
        raise refuse(f"its header's shape {_show_shape(shape)} overflows any array's size")
    fits = len(shape) == len(expect.shape) and all(e is None or e == n for e, n in zip(expect.shape, shape))
    if not fits:
        raise refuse(f"its shape is {_show_shape(shape)}")
    return shape


def _show_shape(shape: tuple[int, ...]) -> str:
    text = "[" + ", ".join(map(str, shape)) + "]"
    return text if len(text) <= _SHOW else text[:_SHOW - 4] + "...]"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW - 3] + "..."
