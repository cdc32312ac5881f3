"""Out of memory and out of file descriptors, told as the limit that was hit.

Owns the recognition of a resource the process ran out of, wherever it surfaced, and the one line
that names the limit and the fix (a ``ResourceLimitError``: the user's environment, exit 1).

* Device memory: CUDA's "out of memory" (``torch.cuda.OutOfMemoryError``, a ``RuntimeError``).
* Memory: ``MemoryError`` (numpy's ``_ArrayMemoryError`` is one), torch's allocator (``RuntimeError``:
  "DefaultCPUAllocator: can't allocate memory", "not enough memory", ``std::bad_alloc``, CUDA's "out of
  memory"), ``OSError`` ENOMEM (``mmap``: the host pool), a shared library that cannot be mapped (an
  ``ImportError``: "failed to map segment from shared object").
* Threads: ``threading.Thread.start`` raising "can't start new thread" (``RuntimeError``): a thread's
  stack is address space, so ``ulimit -v`` is its usual cause; otherwise the process limit
  (``ulimit -u``) or the system's.
* File descriptors: ``OSError`` EMFILE (the process's ``ulimit -n``) or ENFILE (the system's table), also
  from inside psutil, PyAV and subprocess, and when it arrives wrapped in one of our own errors.

* File size: ``OSError`` EFBIG, a write past the process's ``ulimit -f`` (RLIMIT_FSIZE; the process
  ignores SIGXFSZ, so the write fails instead of the process dying) or past the file system's largest
  file. Not a ``limit_error``: the writer names its file, ``file_too_large(exc)`` tells it, and
  ``file_size_text()`` gives the words (the limit as it stands, and the fix).

``limit_error(exc)`` looks at ``exc`` and the exceptions it was raised from or while handling
(``__cause__``, ``__context__``), and returns the one-line error, or None when no resource ran out.
The limits are read with ``resource.getrlimit`` when the message is made; ``ulimit -v`` and ``-d``
count KiB, ``ulimit -n`` descriptors.
"""
from __future__ import annotations

import errno
import resource

from engine.errors import ResourceLimitError

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

MEMORY_TEXT = ("can't allocate memory", "cannot allocate memory", "not enough memory", "out of memory",
               "bad_alloc", "failed to map segment from shared object")
THREAD_TEXT = ("can't start new thread", "cannot start new thread")
DESCRIPTORS_WANTED = 1024   # what to suggest: far above what a session opens (a few dozen at most)

MEMORY, DEVICE, THREADS, FILES, SYSTEM_FILES = "memory", "device memory", "threads", "files", "system files"


def exhausted(exc: BaseException) -> str | None:
    """Which resource ``exc`` (or an exception in its chain) says ran out: one of MEMORY, DEVICE,
    THREADS, FILES, SYSTEM_FILES; None for any other failure."""
    seen: set[int] = set()
    drives = False   # an error a drive's probe made: an ENOMEM under it is the drive's answer, not memory
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        drives = drives or getattr(exc, "memory_is_the_drives", False)
        kind = _kind(exc)
        if kind is not None and not (drives and kind == MEMORY):
            return kind
        exc = exc.__cause__ or exc.__context__
    return None


def _kind(exc: BaseException) -> str | None:
    if isinstance(exc, MemoryError):
        return MEMORY
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
        return {errno.EMFILE: FILES, errno.ENFILE: SYSTEM_FILES, errno.ENOMEM: MEMORY}[code]
    if not isinstance(exc, (RuntimeError, OSError, ImportError)):
        return None
    text = str(exc).lower()
    if any(t in text for t in THREAD_TEXT):
        return THREADS
    if "cuda" in text and "out of memory" in text:
        return DEVICE
    if any(t in text for t in MEMORY_TEXT):
        return MEMORY
    if "too many open files" in text:   # an EMFILE that lost its errno on the way (a library's own error)
        return FILES
    return None


def limit_error(exc: BaseException) -> ResourceLimitError | None:
    """The one-line error for a resource ``exc`` says ran out (see the module docstring), or None."""
    if isinstance(exc, ResourceLimitError):
        return exc
    kind = exhausted(exc)
    if kind is None:
        return None
    text = {MEMORY: memory_text, DEVICE: device_text, THREADS: threads_text, FILES: files_text,
            SYSTEM_FILES: system_files_text}[kind]()
    return ResourceLimitError(text)


def _limit(which: int) -> int | None:
    """The soft limit ``which`` (a ``resource.RLIMIT_*``), None when unlimited or unknown."""
    try:
        soft, _ = resource.getrlimit(which)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def _available() -> int | None:
    """Bytes of memory the machine has available now (/proc/meminfo; None where unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:   # no psutil: its own reads may be what failed
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        return None
    return None


SMALLER = "or make the session smaller (--pool-slots, --host-mem, a smaller --model)"


def memory_text() -> str:
    space, data = _limit(resource.RLIMIT_AS), _limit(getattr(resource, "RLIMIT_DATA", -1))
    if space is not None:
        return (f"out of memory: this process may use {_size(space)} of address space (ulimit -v "
                f"{space // KIB}, RLIMIT_AS) and that is used up; raise it (ulimit -v unlimited) {SMALLER}")
    if data is not None:
        return (f"out of memory: this process may use {_size(data)} of data memory (ulimit -d {data // KIB}, "
                f"RLIMIT_DATA) and that is used up; raise it (ulimit -d unlimited) {SMALLER}")
    available = _available()
    have = f"{_size(available)} available now" if available is not None else "none left"
    return (f"out of memory: the machine has {have} and an allocation failed; free memory (close other "
            f"programs) {SMALLER}")


def device_text() -> str:
    return ("out of GPU memory: the model, the attention context and the staging slots do not fit in what "
            "the device has free; end other programs on the GPU, or lower --retrieve-k or --device-mem, "
            "or use a smaller --model")


def threads_text() -> str:
    space, procs = _limit(resource.RLIMIT_AS), _limit(getattr(resource, "RLIMIT_NPROC", -1))
    if space is not None:
        return (f"cannot start a thread: its stack does not fit in this process's {_size(space)} of address "
                f"space (ulimit -v {space // KIB}, RLIMIT_AS); raise it (ulimit -v unlimited) {SMALLER}")
    if procs is not None:
        return (f"cannot start a thread: this user may run {procs} processes and threads (ulimit -u {procs}, "
                f"RLIMIT_NPROC); raise it (ulimit -u unlimited) or end other programs")
    return ("cannot start a thread: the system refused one (out of memory, or its limit on threads: "
            "/proc/sys/kernel/threads-max, a container's pids.max); free memory or end other programs")


def files_text() -> str:
    files = _limit(resource.RLIMIT_NOFILE)
    if files is None:
        return "out of file descriptors: this process may not open another file; close other programs' files"
    return (f"out of file descriptors: this process may open {files} files at once (ulimit -n {files}, "
            f"RLIMIT_NOFILE) and a session needs more; raise it (ulimit -n {max(DESCRIPTORS_WANTED, files * 2)})")


def file_too_large(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from or while handling) is a write refused with EFBIG."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _bytes(n: int) -> str:
    return _size(n) if n >= MIB else f"{n / KIB:.0f} KiB"


def file_size_text() -> str:
    """Why a write was refused with EFBIG, in words: the process's file-size limit with its value
    (``ulimit -f`` counts KiB), or, without one, the file system's largest file."""
    size = _limit(resource.RLIMIT_FSIZE)
    if size is None:
        return ("the file reached the largest file its file system holds; write it to a drive whose file "
                "system takes larger files")
    return (f"this process may write files of at most {_bytes(size)} (ulimit -f {size // KIB}, RLIMIT_FSIZE) "
            "and the file reached that; raise it (ulimit -f unlimited)")


def system_files_text() -> str:
    try:
        with open("/proc/sys/fs/file-max", encoding="ascii") as f:
            most = f"{int(f.read().split()[0])} files"
    except (OSError, ValueError, IndexError):
        most = "its limit"
    return (f"out of file descriptors: the system's table of open files is full ({most}, "
            "/proc/sys/fs/file-max); close other programs' files or raise fs.file-max")
