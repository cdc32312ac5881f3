"""Moving a run's spill directory when it is resumed: ``worldpager resume OUT --spill DIR``.

Owns what happens when the spill directory a run recorded (``memory.spill`` of ``OUT.config.json``) is
full, failing or gone and the user names another one, ``DIR``. Three cases, told apart by what is there:

* **DIR is a copy** (it holds an ``index.json``): the user copied the old directory there. It is used
  once it is checked: its index parses; every block it lists below the save point's chunk lies inside
  its ``blocks.dat`` and passes its crc32; it holds every chunk the save point's memory slots read from
  the run's own directory (``needed``); and, while the old directory can still be read, every chunk the
  old one holds below the save point, in the same format.
* **copied into DIR** (DIR is missing or holds no ``index.json`` and no ``blocks.dat``) while the old
  directory can still be read (a full drive, say): the blocks of every chunk below the save point are
  copied, as they are, into a compact tier in DIR — the block file (one slot apart each, in chunk
  order), synced, then the index (same crcs and format) written to a temporary file, synced and
  renamed — holding DIR's lock meanwhile. First DIR's drive must have room for them, the index's reserve
  and one more chunk. The old directory is only read, never changed; the user is told it is left as it
  was. A copy that fails (DIR's drive full or failing) removes what it made and is one line.
* **nothing to go on from**: the old directory is missing or failing and DIR holds no copy: one line
  naming both and what to copy.

Then the run's config records DIR (``memory.spill`` rewritten in place: temporary file, fsync, rename),
so a later ``resume`` goes on there; a save point's config digest leaves out where the spill directory
is (``engine.session.save.config_digest``). Runs without a disk tier have nothing to move (one line).
Every look at either directory goes through ``engine.files.probe``: a failing drive is one line.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import zlib
from pathlib import Path

from engine.files import probe
from engine.config import SessionConfig
from engine.files.bounded_json import OBJECT, expect_object, read_json_file
from engine.files.durable import fsync_directory
from engine.errors import InputError, OutputError, WorldPagerError
from engine.files.file_lock import release_lock, try_lock
from engine.memory.disk import (DATA_NAME, INDEX_NAME, LOCK_NAME, RESERVE_BYTES, chunk_salt, index_document,
                                read_index)
from engine.memory.types import SpillLockedError
from engine.session.preflight import usable_free_bytes
from engine.session.savepoint import SavePoint

MAX_CONFIG_BYTES = 16 << 20   # a resolved config is a few KiB

MiB = 1 << 20
PIECE = 8 * MiB


@dataclasses.dataclass
class Tier:
    """A spill directory's index as read back: the raw document and its usable entries below the save point."""

    directory: Path
    doc: dict
    blocks: dict[int, dict]   # chunk -> offset, length, crc, format (read_index), chunks below the save point

    @classmethod
    def read(cls, directory: Path, below: int, what: str, fix: str) -> "Tier":
        doc = index_document(directory / INDEX_NAME, fix)
        slot, tag = doc["slot_bytes"], doc["format"]
        if not isinstance(slot, int) or isinstance(slot, bool) or slot <= 0 or not isinstance(tag, str):
            raise InputError(f"{what} {directory}: its {INDEX_NAME} is not an index (slot_bytes {slot!r}, "
                             f"format {tag!r})")
        blocks, _ = read_index(directory / INDEX_NAME, slot, tag)
        return cls(directory, doc, {c: e for c, e in blocks.items() if c < below})


def move_spill(out: Path, cfg: SessionConfig, sp: SavePoint, new: Path,
               needed: list[int]) -> tuple[SessionConfig, list[str]]:
    """Go on in ``new`` (see the module docstring): the config that uses it, and what to tell the user."""
    old, new = Path(cfg.memory.spill), Path(new).absolute()
    if new.resolve() == old.resolve():
        return cfg, []
    what, fix = f"cannot resume {out} with --spill", "check the drive, or give another --spill"
    if probe.exists(new, what, fix) and not probe.is_dir(new, what, fix):
        raise OutputError(f"--spill {new} is a file, not a directory; give a directory (it is created if missing)")
    for layer in sp.facts.get("memory", {}).get("base", []):
        if Path(layer["spill"]).resolve() == new.resolve():
            raise OutputError(f"--spill {new} is the parent's spill directory, which this branch only reads; "
                              "give the branch's own directory another place")
    source, gone = _old_tier(old, sp.chunk)
    if probe.is_file(new / INDEX_NAME, what, fix):
        count = _check_copy(out, new, source, sp, needed)
        note = (f"spill directory: going on in {new}, a copy of {old} (its {count} chunks below chunk {sp.chunk} "
                f"pass their check); {old} is no longer used by this run")
    elif source is None:
        raise InputError(f"cannot resume {out}: its spill directory {old} {gone}, and --spill {new} holds no copy "
                         f"of it (no {INDEX_NAME}); copy {old}'s {INDEX_NAME} and {DATA_NAME} into {new}, "
                         f"or put {old} back")
    elif probe.exists(new / DATA_NAME, what, fix):
        raise OutputError(f"--spill {new} holds a {DATA_NAME} but no {INDEX_NAME}: not a copy of {old}, and not "
                          "empty; give an empty or new directory to copy into")
    else:
        count, nbytes = _copy_tier(source, new)
        note = (f"spill directory moved: copied the {count} chunks ({_size(nbytes)}) below chunk "
                f"{sp.chunk} from {old} to {new}, where the run goes on; {old} is left as it was (delete it "
                "once this run is done)")
    record_spill(cfg.config_path, new)
    return dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, spill=new)), [note]


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


def _old_tier(old: Path, below: int) -> tuple[Tier | None, str]:
    """The old directory's index, or None and why it cannot be read (missing, damaged, failing)."""
    what, fix = "its spill directory", "check the drive"
    try:
        if not probe.is_dir(old, what, fix):
            return None, "is missing"
        return Tier.read(old, below, what, fix), ""
    except WorldPagerError as exc:
        return None, f"cannot be read ({exc})"


def _check_needs(out: Path, where: Path, have: set[int], sp: SavePoint, needed: list[int], name: str) -> None:
    missing = [c for c in needed if c not in have]
    if missing:
        raise InputError(f"cannot resume {out}: {name} lacks chunks {', '.join(map(str, missing))}, which its "
                         f"save point at chunk {sp.chunk} needs; nothing was changed")


def _check_copy(out: Path, new: Path, source: Tier | None, sp: SavePoint, needed: list[int]) -> int:
    """Check that ``new`` is a whole, sound copy (module docstring); how many chunks it holds below the save point."""
    what, fix = f"--spill {new}: a copy of the spill directory", "copy it again"
    try:
        copy = Tier.read(new, sp.chunk, "--spill", fix)
    except WorldPagerError as exc:
        raise InputError(f"cannot resume {out} with --spill {new}: {exc}") from None
    _check_needs(out, new, set(copy.blocks), sp, needed, f"--spill {new}")
    if source is not None:
        lacking = sorted(set(source.blocks) - set(copy.blocks))
        if lacking or (copy.doc["slot_bytes"], copy.doc["format"]) != (source.doc["slot_bytes"], source.doc["format"]):
            detail = f"lacks chunks {', '.join(map(str, lacking[:10]))}" if lacking else "holds another format"
            raise InputError(f"cannot resume {out} with --spill {new}: it is not a whole copy of {source.directory} "
                             f"(it {detail}); copy it again, or give an empty directory to copy into")
    bad = _failing_blocks(new, copy.blocks, what, fix)
    if bad:
        raise InputError(f"cannot resume {out} with --spill {new}: chunks {', '.join(map(str, bad[:10]))} of the "
                         f"copy fail their crc32 check (its {DATA_NAME} differs from its {INDEX_NAME}); copy it again")
    return len(copy.blocks)


def _failing_blocks(directory: Path, blocks: dict[int, dict], what: str, fix: str) -> list[int]:
    """Chunks whose block is short or fails its crc32 in ``directory``'s block file."""
    bad = []
    with probe.probing(directory, what, fix):
        fd = os.open(directory / DATA_NAME, os.O_RDONLY)
        try:
            for chunk, entry in sorted(blocks.items()):
                data = _read(fd, entry["offset"], entry["length"])
                if len(data) != entry["length"] or zlib.crc32(data) ^ chunk_salt(chunk) != entry["crc"]:
                    bad.append(chunk)
        finally:
            os.close(fd)
    return bad


def _read(fd: int, offset: int, length: int) -> bytes:
    parts, done = [], 0
    while done < length:
        piece = os.pread(fd, min(PIECE, length - done), offset + done)
        if not piece:
            break
        parts.append(piece)
        done += len(piece)
    return b"".join(parts)


def _copy_tier(source: Tier, new: Path) -> tuple[int, int]:
    """Copy ``source``'s blocks below the save point into a compact tier in ``new``; (chunks, bytes)."""
    slot = source.doc["slot_bytes"]
    nbytes = len(source.blocks) * slot
    _check_room(new, nbytes + RESERVE_BYTES + slot)
    made_dir = not probe.exists(new, "--spill")
    made: list[Path] = []
    lock = None
    try:
        new.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_made = not probe.exists(new / LOCK_NAME, "--spill")
        lock = try_lock(new / LOCK_NAME)
        if lock_made:
            made.append(new / LOCK_NAME)
        if lock is None:
            raise SpillLockedError(f"--spill {new} is in use by another WorldPager session (lock "
                                   f"{new / LOCK_NAME} is held); choose another --spill directory")
        entries = _copy_blocks(source, new, slot, made)
        _write_index(new, {**source.doc, "blocks": entries}, made)
    except BaseException as exc:
        _undo(made, new if made_dir else None)
        if not isinstance(exc, OSError):
            raise
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(f"--spill {new}: its drive filled while the {_size(nbytes)} of the spill "
                              "directory were copied there; free space or choose another --spill; nothing was "
                              "changed") from None
        raise probe.drive_error(new, exc, "--spill", "check the drive, or give another --spill") from None
    finally:
        if lock is not None:
            release_lock(lock)
    return len(source.blocks), nbytes


def _check_room(new: Path, need: int) -> None:
    existing = new
    while not probe.exists(existing, "--spill"):
        existing = existing.parent
    free = usable_free_bytes(probe.statvfs(existing, "--spill"))
    if free is not None and free < need:
        raise OutputError(f"--spill {new}: its drive has {_size(free)} free; the chunks the save point "
                          f"needs, the index and one more chunk take {_size(need)}; free space or choose "
                          "another --spill")


def _copy_blocks(source: Tier, new: Path, slot: int, made: list[Path]) -> dict[str, dict]:
    """Each block as it is (a damaged one stays damaged: a miss, as it would be in the old directory)."""
    entries: dict[str, dict] = {}
    read_fd = _open_old(source)
    try:
        fd = os.open(new / DATA_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made.append(new / DATA_NAME)
        try:
            for n, (chunk, entry) in enumerate(sorted(source.blocks.items())):
                data = _read_old(source, read_fd, entry)
                os.pwrite(fd, data, n * slot)
                entries[str(chunk)] = {**source.doc["blocks"][str(chunk)], "offset": n * slot}
            os.fdatasync(fd)
        finally:
            os.close(fd)
    finally:
        os.close(read_fd)
    return entries


def _open_old(source: Tier) -> int:
    with probe.probing(source.directory, "its spill directory", "check the drive"):
        return os.open(source.directory / DATA_NAME, os.O_RDONLY)


def _read_old(source: Tier, fd: int, entry: dict) -> bytes:
    with probe.probing(source.directory, "its spill directory", "check the drive"):
        return _read(fd, entry["offset"], entry["length"])


def _write_index(new: Path, doc: dict, made: list[Path]) -> None:
    tmp = new / (INDEX_NAME + ".tmp")
    made.append(tmp)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.flush()
        os.fdatasync(f.fileno())
    os.replace(tmp, new / INDEX_NAME)
    made[made.index(tmp)] = new / INDEX_NAME
    fsync_directory(new)


def _undo(made: list[Path], directory: Path | None) -> None:
    """Remove what a failed copy made (its first error is the one reported)."""
    for path in reversed(made):
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    if directory is not None:
        try:
            directory.rmdir()
        except OSError:
            pass


def record_spill(config_path: Path, spill: Path) -> None:
    """Rewrite the run's config with its spill directory at ``spill`` (temporary file, fsync, rename)."""
    what = "cannot record the new spill directory in"
    with probe.probing(config_path, what, "check the drive of the run's outputs"):
        doc = expect_object(read_json_file(config_path, "the run's config", MAX_CONFIG_BYTES), "the run's config",
                            optional={"memory": OBJECT})
        doc.setdefault("memory", {})["spill"] = str(spill)
        tmp = Path(config_path).with_name(f".{Path(config_path).name}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(doc, indent=2) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, config_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(Path(config_path).parent, required=False)
