"""The disk quota (``--spill-max``): its size syntax and how many stored chunks fit under it (no torch).

Contract.
  * ``parse_spill_max(text, spill_dir)`` reads a size (``500M``, ``4G``, ``4GiB``, ``1.5G``: the one rule
    of ``engine.settings.sizes``, binary units, a plain number of bytes) or ``10%`` (of the space free on the spill
    directory's drive *now*, at the session's start) and returns bytes. ``check_spill_max_text(text)``
    checks the same syntax without the drive (the flag's usage error). A value it cannot read is a one-line
    ``ConfigError`` naming it.
  * ``QuotaPlan.of(quota_bytes, slot_bytes, format_tag)`` splits the quota into blocks: the block file
    (``blocks``, each ``slot_bytes``, 4 KiB-aligned) and the index, counted twice (the old index and its
    replacement exist at once while it is rewritten). ``keep`` is how many chunks the session keeps
    retrievable: ``blocks`` less ``reserve`` — the blocks of dropped chunks that a save point may still
    need (they are given back once a newer save point is on the drive, see ``DiskTier.retire``): with
    ``--save-every N`` two intervals' drops and a batch (2N + batch + 1), with save points by wall time a
    tenth of the blocks, without save points none.
    ``low`` is where a drop batch stops (drops come in batches, not one per chunk).
  * ``minimum_keep(k, window)`` is the fewest chunks a session pins at once (the retrieved set, the
    set staged for the next chunk, the chunks still inside the local window and the one just stored);
    ``check_quota`` refuses a quota below it with a one-line ``ConfigError`` naming the value and the
    smallest size that works (a quota that holds no chunk at all: one chunk's size, the quota's minimum).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.files import probe
from engine.errors import ConfigError
from engine.settings.sizes import parse_size

ALIGN = 4096
MiB = 1 << 20
_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")
INDEX_BYTES_PER_ENTRY = 96   # one block's JSON entry without its format tag (measured ~70 B; rounded up)


def parse_spill_max(text, spill_dir: Path | None = None) -> int:
    """Bytes of a ``--spill-max`` value (see the module docstring)."""
    share = check_spill_max_text(text)
    if share is not None:
        free = _free_bytes(spill_dir)
        if free is None:
            raise ConfigError(f"--spill-max {str(text).strip()}: the free space of {spill_dir} is unknown; give a "
                              "size such as 4G")
        return int(free * share / 100)
    return int(parse_size(text, "--spill-max", 1))


def check_spill_max_text(text) -> float | None:
    """The share of the free space a ``NN%`` value asks for, None for a size; a one-line ``ConfigError``
    for anything else (a size of 0 bytes included)."""
    value = str(text).strip()
    if (m := _PERCENT.match(value)) and not isinstance(text, bool):
        share = float(m.group(1))
        if not 0 < share <= 100:
            raise ConfigError(f"--spill-max: {value!r} is not a share of the free space in (0, 100] %")
        return share
    try:
        size = parse_size(text, "--spill-max", 1)
    except ConfigError:
        raise ConfigError(f"--spill-max: {text!r} is not a size (e.g. 500M, 4G, 4GiB, 4GB, or 10% of the "
                          "drive's free space; a plain number is bytes)") from None
    if int(size) <= 0:
        raise ConfigError(f"--spill-max: {text!r} is not a positive number of bytes")
    return None


def _free_bytes(spill_dir: Path | None) -> int | None:
    if spill_dir is None:
        return None
    existing = Path(spill_dir)
    while not probe.exists(existing, "--spill") and existing != existing.parent:
        existing = existing.parent
    st = probe.statvfs(existing, "--spill")
    return None if st.f_blocks == 0 else st.f_bavail * st.f_frsize


def format_tag(fmt) -> str:
    """The format tag the disk index stores with each entry (as ``KVStore`` writes it)."""
    return getattr(fmt, "tag", None) or repr(fmt)


def index_bound(blocks: int, format_tag: str) -> int:
    """An upper bound of the index file's allocated bytes for ``blocks`` entries."""
    raw = 256 + blocks * (INDEX_BYTES_PER_ENTRY + len(format_tag))
    return -(-raw // ALIGN) * ALIGN


def minimum_keep(k: int, window_chunks: int) -> int:
    """Chunks a session pins at once: retrieved + staged + inside the window + the one just stored."""
    return 2 * max(k, 1) + window_chunks + 1


@dataclass(frozen=True)
class QuotaPlan:
    quota_bytes: int
    slot_bytes: int
    blocks: int      # blocks the block file may hold
    reserve: int     # of them, kept for dropped chunks a save point may still need
    keep: int        # chunks kept retrievable (a drop batch starts above this)
    low: int         # a drop batch stops here

    @classmethod
    def of(cls, quota_bytes: int, slot_bytes: int, format_tag: str = "",
           save_every: int | None = None) -> "QuotaPlan":
        """``save_every`` (chunks between save points, when fixed): the reserve then holds the drops of
        two save-point intervals and a batch (a save point is written within the next interval);
        otherwise it is a tenth of the blocks (at least 2)."""
        blocks = max(0, quota_bytes // slot_bytes)
        while blocks > 0 and blocks * slot_bytes + 2 * index_bound(blocks, format_tag) > quota_bytes:
            blocks -= 1
        batch = max(1, blocks // 32)
        if save_every == 0:
            reserve = 0                     # no save points: a dropped block is given back at once
        elif save_every is not None:
            reserve = 2 * save_every + batch + 1
        else:
            reserve = max(2, blocks // 10)
        reserve = min(reserve, blocks)
        keep = blocks - reserve
        return cls(quota_bytes, slot_bytes, blocks, reserve, keep, max(0, keep - batch))

    @property
    def block_file_bytes(self) -> int:
        """The block file's cap (``DiskTier(max_bytes=...)``)."""
        return self.blocks * self.slot_bytes

    def smallest_bytes(self, keep_needed: int, format_tag: str = "", save_every: int | None = None) -> int:
        """The least quota whose ``keep`` reaches ``keep_needed`` (for the error message)."""
        size = self.slot_bytes * (keep_needed + 2)
        while QuotaPlan.of(size, self.slot_bytes, format_tag, save_every).keep < keep_needed:
            size += self.slot_bytes
        return size


def amount(n: int) -> str:
    """Bytes as a message says them: MiB with one decimal from 1 MiB up, KiB below (a small model's chunk)."""
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.1f} KiB"


def flag_size(n: int) -> str:
    """The least ``--spill-max`` value of at least ``n`` bytes, in the unit ``amount`` uses."""
    return f"{-(-n // MiB)}M" if n >= MiB else f"{-(-n // 1024)}K"


def check_quota(text, plan: QuotaPlan, k: int, window_chunks: int, format_tag: str = "",
                save_every: int | None = None) -> None:
    """A one-line ``ConfigError`` when the quota cannot hold what the session pins at once; a quota that
    holds no chunk at all says so, with the quota's minimum (one chunk and the index)."""
    need = minimum_keep(k, window_chunks)
    if plan.keep >= need:
        return
    least = plan.smallest_bytes(need, format_tag, save_every)
    if plan.blocks == 0:
        one = plan.slot_bytes + 2 * index_bound(1, format_tag)
        raise ConfigError(f"--spill-max {text} ({amount(plan.quota_bytes)}) is below the quota's minimum: one "
                          f"stored chunk takes {amount(plan.slot_bytes)} ({amount(one)} with the disk index), "
                          f"and the session pins up to {need} at once (retrieved, staged, in the window): give "
                          f"at least {flag_size(least)}")
    raise ConfigError(f"--spill-max {text} holds {plan.keep} chunks of {amount(plan.slot_bytes)}; the "
                      f"session pins up to {need} at once (retrieved, staged, in the window): give at least "
                      f"{flag_size(least)}")
