"""The save-point file: a generation session's state, made durable so that a crash loses at most N chunks.

Owns the file format and the save-point directory, not what goes in it (``engine.model.state_tensors``
and the session decide that). Contract:

* ``write_savepoint(directory, sp, keep)`` makes ``savepoint-{chunk:08d}.wps`` durable — temporary file
  in the same directory, fsync, rename, directory fsync — and only then deletes the save points older
  than the newest ``keep`` and any leftover temporaries. A crash at any moment leaves the previous
  newest save point intact. One writer per directory. An ``OSError`` becomes an ``OutputError``.
* ``read_savepoint(path)`` returns the ``SavePoint`` or raises ``SavePointError`` (one line naming the
  file and what is wrong) for any damaged file — never another exception type, never a hang, and never
  more memory than the file's size for a lying length field.
* ``savepoint_paths(directory)`` lists them; a directory that cannot be looked at for a reason other
  than its absence (EIO, ENOMEM, EACCES) is one ``engine.files.probe.DriveError`` line, never a traceback.
* ``latest_savepoint(directory)`` returns the newest readable save point, skipping damaged newer ones
  with one note each (``"savepoint-00000120.wps: crc mismatch (skipped)"``).

File layout (all integers little-endian)::

    magic    8 bytes   b"WPSAVE" + version (u16, big-endian: b"\\x00\\x01" is version 1)
    length   8 bytes   payload bytes (u64); the file ends exactly where the payload does
    crc32    4 bytes   zlib.crc32 of the payload (u32)
    payload  safetensors bytes of the tensors, metadata {"facts": json.dumps(facts), "chunk": str(chunk)}

Save points are ordered by the chunk in their name, not by modification time: chunk numbers are
progress, and a resumed run reproduces the same chunks.
"""
from __future__ import annotations

import json
import os
import re
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from engine.files import probe
from engine.files.durable import fsync_directory
from engine.files.bounded_json import JsonInputError, parse_json
from engine.errors import InputError, OutputError, SavePointError
from engine.files.input_files import open_input, shown

MAGIC_PREFIX = b"WPSAVE"
VERSION = 1
HEADER = struct.Struct("<8sQI")                  # magic, payload length, payload crc32
NAME = re.compile(r"savepoint-([0-9]{8,})\.wps")   # {chunk:08d} grows past 8 digits
TEMP_PREFIX, TEMP_SUFFIX = ".savepoint-", ".tmp"  # a name NAME never matches
_CHUNK_TEXT = re.compile(r"[0-9]{1,18}")


@dataclass
class SavePoint:
    chunk: int                          # the next chunk to generate (> 0)
    facts: dict                         # JSON-serialisable: frames written, slot tables, digests, ...
    tensors: dict[str, torch.Tensor]    # named CPU tensors of any dtype, restored bit for bit


def savepoint_name(chunk: int) -> str:
    return f"savepoint-{chunk:08d}.wps"


def savepoint_paths(directory: Path) -> list[Path]:
    """The save points in ``directory``, newest (highest chunk) first; temporaries are not listed."""
    directory = Path(directory)
    if not probe.is_dir(directory, "the save-point directory"):
        return []
    found = [(int(m.group(1)), p) for p in probe.listdir(directory, "the save-point directory")
             if (m := NAME.fullmatch(p.name))]
    return [p for _, p in sorted(found, key=lambda cp: cp[0], reverse=True)]


# ---- writing --------------------------------------------------------------------------------------

def encode_savepoint(sp: SavePoint) -> bytes:
    """The whole file's bytes for ``sp``."""
    assert isinstance(sp.chunk, int) and sp.chunk > 0, f"save point chunk must be > 0, got {sp.chunk!r}"
    assert all(isinstance(name, str) for name in sp.tensors), "tensor names must be strings"
    # Fresh contiguous CPU copies: safetensors wants contiguous tensors that share no storage.
    tensors = {name: t.detach().to("cpu", memory_format=torch.contiguous_format, copy=True)
               for name, t in sp.tensors.items()}
    metadata = {"facts": json.dumps(sp.facts), "chunk": str(sp.chunk)}
    payload = save_safetensors(tensors, metadata=metadata)
    magic = MAGIC_PREFIX + VERSION.to_bytes(2, "big")
    return HEADER.pack(magic, len(payload), zlib.crc32(payload)) + payload


def write_savepoint(directory: Path, sp: SavePoint, keep: int = 2) -> Path:
    """Make ``sp`` durable in ``directory`` (created 0700), then prune to the newest ``keep``."""
    assert keep >= 1, f"keep must be >= 1, got {keep}"
    directory = Path(directory)
    data = encode_savepoint(sp)
    final = directory / savepoint_name(sp.chunk)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_durably(directory, final, data)
    except OSError as exc:
        raise OutputError(f"cannot write save point {final}: {exc.strerror or exc}") from exc
    _prune(directory, keep)
    return final


def _write_durably(directory: Path, final: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, final)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_directory(directory)   # the rename itself must survive a power loss


def _prune(directory: Path, keep: int) -> None:
    stale = savepoint_paths(directory)[keep:]
    stale += [p for p in probe.listdir(directory, "the save-point directory")
              if p.name.startswith(TEMP_PREFIX) and p.name.endswith(TEMP_SUFFIX)]
    for path in stale:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot remove old save point {path}: {exc.strerror or exc}") from exc


# ---- reading --------------------------------------------------------------------------------------

def read_savepoint(path: Path) -> SavePoint:
    """The save point in ``path``, or ``SavePointError`` naming the file and what is wrong with it."""
    path = Path(path)
    payload = _read_payload(path)
    chunk, facts = _parse_metadata(path, payload)
    named = NAME.fullmatch(path.name)
    if named and int(named.group(1)) != chunk:
        raise SavePointError(path, f"chunk in name ({int(named.group(1))}) and metadata ({chunk}) disagree")
    try:
        tensors = load_safetensors(payload)
    except Exception as exc:   # the payload passed its crc: whatever safetensors rejects is a damaged file
        raise SavePointError(path, f"unparsable payload ({type(exc).__name__}: {_one_line(exc)})") from exc
    return SavePoint(chunk=chunk, facts=facts, tensors=tensors)


def _read_payload(path: Path) -> bytes:
    """The crc-checked payload; the length field is trusted only after checking it against the file size."""
    try:
        # The input gate: a FIFO that wears a save point's name (or a file under /proc) is refused, not waited on.
        try:
            f = open_input(path, "save point")
        except InputError as exc:
            why = str(exc).removeprefix(f"save point {shown(path)} ").removeprefix("is ").split(";")[0]
            why = "unreadable (no such file)" if why == "does not exist" else why
            raise SavePointError(path, why) from None
        with f:
            payload, crc = _read_framed(path, f, os.fstat(f.fileno()).st_size)
    except OSError as exc:
        raise SavePointError(path, f"unreadable ({exc.strerror or exc})") from exc
    if zlib.crc32(payload) != crc:
        raise SavePointError(path, "crc mismatch")
    return payload


def _read_framed(path: Path, f, size: int) -> tuple[bytes, int]:
    """The payload and its recorded crc; every short read (a file shrinking under us too) is truncation."""
    header = f.read(HEADER.size)
    if len(header) < HEADER.size:
        raise SavePointError(path, f"truncated ({len(header)} bytes, shorter than the {HEADER.size}-byte header)")
    magic, length, crc = HEADER.unpack(header)
    _check_magic(path, magic)
    if length > size - HEADER.size:
        raise SavePointError(path, f"truncated (header promises {length} payload bytes, "
                                   f"file holds {size - HEADER.size})")
    if length < size - HEADER.size:
        raise SavePointError(path, f"{size - HEADER.size - length} bytes after the payload")
    payload = f.read(length)
    if len(payload) != length:
        raise SavePointError(path, f"truncated (read {len(payload)} of {length} payload bytes)")
    return payload, crc


def _check_magic(path: Path, magic: bytes) -> None:
    if magic[:len(MAGIC_PREFIX)] != MAGIC_PREFIX:
        raise SavePointError(path, "bad magic (not a save point)")
    version = int.from_bytes(magic[len(MAGIC_PREFIX):], "big")
    if version != VERSION:
        raise SavePointError(path, f"unsupported version {version} (this build reads version {VERSION})")


def _parse_metadata(path: Path, payload: bytes) -> tuple[int, dict]:
    """``chunk`` and ``facts`` from the safetensors header, read without trusting its length field."""
    def bad(what: str) -> SavePointError:
        return SavePointError(path, f"unparsable payload ({what})")

    if len(payload) < 8:
        raise bad("no safetensors header")
    header_length = int.from_bytes(payload[:8], "little")
    if header_length > len(payload) - 8:
        raise bad(f"safetensors header of {header_length} bytes in a {len(payload)}-byte payload")
    header = _loads(path, payload[8:8 + header_length], "safetensors header")
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict):
        raise bad("no metadata")
    chunk_text, facts_text = metadata.get("chunk"), metadata.get("facts")
    if not isinstance(chunk_text, str) or not _CHUNK_TEXT.fullmatch(chunk_text) or int(chunk_text) == 0:
        raise bad(f"chunk {_clip(chunk_text)} is not a positive integer")
    if not isinstance(facts_text, str):
        raise bad("facts missing")
    facts = _loads(path, facts_text, "facts")
    if not isinstance(facts, dict):
        raise bad("facts are not a JSON object")
    return int(chunk_text), facts


def _loads(path: Path, text: bytes | str, what: str):
    try:   # bounded: encoding and nesting depth checked before anything is parsed
        return parse_json(text, what, max_bytes=len(text) * 4 + 1)
    except JsonInputError as exc:
        raise SavePointError(path, f"unparsable payload ({_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    return _clip(str(exc))


def _clip(value: object, limit: int = 80) -> str:
    """``value`` as printable text of at most ``limit`` characters (messages stay one line)."""
    text = value if isinstance(value, str) else repr(value)
    clipped = "".join(c if c.isprintable() else " " for c in text[:limit])
    return clipped + "..." if len(text) > limit else clipped


# ---- finding the newest good one ------------------------------------------------------------------

def latest_savepoint(directory: Path) -> tuple[SavePoint | None, list[str]]:
    """The newest readable save point (or ``None``) and one note per damaged newer one that was skipped."""
    notes: list[str] = []
    for path in savepoint_paths(directory):
        try:
            return read_savepoint(path), notes
        except SavePointError as exc:
            notes.append(f"{path.name}: {exc.reason} (skipped)")
    return None, notes
