"""The directory a benchmark writes under (``bench store|memory --spill DIR``): made if missing, left as found.

Owns ``bench_directory(path, flag)``, a context manager: ``path`` must be a directory or a path that can
be made as one (under an existing directory; a file there is one ``ConfigError`` line naming ``flag``);
a directory it made is removed again on the way out (it is empty by then: each run removes its own
sub-directory; anything else left there is kept, and said), so a benchmark leaves the drive as it found it.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from engine.errors import ConfigError


@contextlib.contextmanager
def bench_directory(path: Path, flag: str = "--spill") -> Iterator[Path]:
    path = Path(path)
    made = _make(path, flag)
    try:
        yield path
    finally:
        if made:
            _remove_made(made)


def _make(path: Path, flag: str) -> list[Path]:
    """The directories made for ``path``, outermost first (none when it existed)."""
    try:
        if path.is_dir():
            return []
        if path.exists():
            raise ConfigError(f"{flag} {path} is a file, not a directory; give a directory (made if missing)")
        missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
        path.mkdir(parents=True)
        return missing
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot make the directory ({exc.strerror or exc}); "
                          f"give a writable directory") from None


def _remove_made(made: list[Path]) -> None:
    for directory in reversed(made):
        try:
            os.rmdir(directory)
        except OSError:   # not empty (something not ours), or already gone: leave it
            return
