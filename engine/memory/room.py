"""Room the disk tier already holds on its drive: counted as free for itself by the free-space checks (no torch).

The tier (``engine.memory.disk``) grows its block file in large ``posix_fallocate``d extents — on a small
drive up to all of its free space but ``RESERVE_BYTES`` — so the drive's free space alone undercounts
what a session reopening the directory can write. ``tier_room(directory, resume)``:

* a fresh session (``resume=False``) truncates ``blocks.dat`` when it opens it: the file's allocated
  bytes all become free;
* a resumed one (``resume=True``) appends after the last block its ``index.json`` lists (the blocks of
  chunks it forgets stay where they are): the file's allocated bytes past that end are its own room.

A directory, a block file or an index that is not there, or an index that cannot be parsed, holds no
room (0: the check then counts the drive alone, as before). An error other than absence while looking
is a ``DriveError`` (``engine.files.probe``). The index is parsed here without ``engine.memory.disk`` (which
imports torch) and only for the blocks' ends; ``resume`` reports a damaged index itself.
"""
from __future__ import annotations

from pathlib import Path

from engine.files import probe
from engine.files.bounded_json import parse_json
from engine.errors import InputError
from engine.files.input_files import read_input_bytes

DATA_NAME, INDEX_NAME = "blocks.dat", "index.json"   # as engine.memory.disk names them
MAX_INDEX_BYTES = 1 << 30   # as engine.memory.disk bounds it


def tier_room(directory: Path, resume: bool, what: str = "--spill", fix: str | None = None) -> int:
    """Bytes of the drive the tier in ``directory`` writes into before it takes more (module docstring)."""
    directory = Path(directory)
    data = probe.stat(directory / DATA_NAME, what, fix)
    if data is None:
        return 0
    allocated = min(data.st_size, data.st_blocks * 512)
    if not resume:
        return data.st_blocks * 512
    return max(0, allocated - _used_end(directory / INDEX_NAME, what, fix))


def _used_end(index: Path, what: str, fix: str | None) -> int:
    """The end of the last block ``index`` lists; the whole file when the index cannot be read (no room)."""
    if not probe.is_file(index, what, fix):
        return 1 << 62
    try:   # through the gate and the bounded reader: a FIFO put there, or a damaged index, leaves no room
        with probe.probing(index, what, fix):
            raw = read_input_bytes(index, what, MAX_INDEX_BYTES)
        blocks = parse_json(raw, f"{what} index", MAX_INDEX_BYTES).get("blocks")
        ends = [e["offset"] + e["length"] for e in blocks.values()]
    except (InputError, AttributeError, KeyError, TypeError):
        return 1 << 62
    if not all(isinstance(end, int) and not isinstance(end, bool) for end in ends):
        return 1 << 62
    return max(ends, default=0)
