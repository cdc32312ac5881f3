"""``engine.files.file_lock``: a holder that removes its lock file on the way out never leaves two holders.

A process that opened the lock file just before its holder removed it locks a file that is no longer
at the path; ``try_lock_at`` sees that and locks the file now there, so a third process is refused.
"""
from __future__ import annotations

import fcntl
import os

from engine.files import file_lock
from engine.files.file_lock import release_and_remove, still_at, try_lock_at


def test_a_lock_on_a_file_its_holder_just_removed_is_taken_again_on_the_new_one(tmp_path, monkeypatch):
    path = tmp_path / "batch.lock"
    holder = try_lock_at(path, 0o644)
    stale = os.open(path, os.O_RDWR)      # a second batch opens the file...
    release_and_remove(holder, path)       # ...as its holder removes it and lets go
    assert not path.exists()
    real = file_lock.try_lock
    first = []

    def the_stale_file_first(p, mode=0o600):
        if not first:   # the second batch's flock lands on the removed file
            first.append(stale)
            fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return stale
        return real(p, mode)

    monkeypatch.setattr(file_lock, "try_lock", the_stale_file_first)
    fd = try_lock_at(path, 0o644)
    assert fd is not None and fd != stale and still_at(fd, path)
    assert real(path) is None               # a third one is refused: one holder at the path
    release_and_remove(fd, path)
    assert not path.exists()


def test_removing_is_only_done_by_the_holder_of_the_file_at_the_path(tmp_path):
    path = tmp_path / "batch.lock"
    old = try_lock_at(path)
    os.unlink(path)
    new = try_lock_at(path)                 # another holder's file now at the path
    release_and_remove(old, path)           # the old holder leaves: it must not remove the new file
    assert path.exists() and still_at(new, path)
    release_and_remove(new, path)
    assert not path.exists()
