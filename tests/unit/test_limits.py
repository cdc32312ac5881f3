"""``engine.files.limits``: which failures are a resource running out, and the line that names the limit."""
from __future__ import annotations

import errno
import resource

import numpy as np
import pytest

from engine.errors import OutputError, ResourceLimitError
from engine.files.limits import DEVICE, FILES, MEMORY, SYSTEM_FILES, THREADS, exhausted, limit_error


def _array_memory_error() -> MemoryError:
    try:
        np.empty(2 ** 62, dtype=np.uint8)
    except MemoryError as exc:   # numpy's _ArrayMemoryError
        return exc
    raise AssertionError("numpy allocated 4 EiB")


def _wrapped_emfile() -> OutputError:
    """Our own one-line error raised while handling an EMFILE (``from None``: the context stays)."""
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as exc:
            raise OutputError(f"cannot write video o.mp4: {exc.strerror}") from None
    except OutputError as exc:
        return exc


@pytest.mark.parametrize("exc, kind", [
    (MemoryError(), MEMORY),
    (_array_memory_error(), MEMORY),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes. "
                  "Error code 12 (Cannot allocate memory)"), MEMORY),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory"), MEMORY),
    (RuntimeError("std::bad_alloc"), MEMORY),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), MEMORY),
    (ImportError("libtorch_cpu.so: failed to map segment from shared object"), MEMORY),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), DEVICE),
    (RuntimeError("can't start new thread"), THREADS),
    (OSError(errno.EMFILE, "Too many open files"), FILES),
    (OSError("[Errno 24] Too many open files: '/proc/1/stat'"), FILES),
    (_wrapped_emfile(), FILES),
    (OSError(errno.ENFILE, "Too many open files in system"), SYSTEM_FILES),
])
def test_a_resource_that_ran_out_is_recognised(exc, kind):
    assert exhausted(exc) == kind
    error = limit_error(exc)
    assert isinstance(error, ResourceLimitError) and "\n" not in str(error)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), ValueError("can't allocate memory"),
                                 OSError(errno.ENOENT, "No such file"), OutputError("cannot write o.mp4"),
                                 KeyError("memory")])
def test_other_failures_are_not(exc):
    assert exhausted(exc) is None and limit_error(exc) is None


def test_the_lines_name_the_limits_in_force():
    files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert f"(ulimit -n {files}, RLIMIT_NOFILE)" in str(limit_error(OSError(errno.EMFILE, "x")))
    space, _ = resource.getrlimit(resource.RLIMIT_AS)
    memory = str(limit_error(MemoryError()))
    if space == resource.RLIM_INFINITY:
        assert "available now" in memory or "RLIMIT_DATA" in memory
    else:
        assert f"ulimit -v {space // 1024}" in memory


def test_a_spill_write_that_ran_out_is_not_blamed_on_the_drive():
    from engine.session.loop import Session

    error = Session._drive_stopped(None, OSError(errno.EMFILE, "Too many open files"), 3, None)
    assert isinstance(error, ResourceLimitError) and "ulimit -n" in str(error)
