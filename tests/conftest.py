"""Shared test fixtures: where the MG2 parity fixtures live, GPU skipping, each parallel worker's share
of the cores, the test processes' own C allocator (left as glibc configures it), tests that no user
setting (WORLDPAGER_* variables, a config file) reaches, the order the test files are handed to the
parallel workers in (the longest first), and the run's progress lines (``progress_lines``)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

import progress_lines

REPO_ROOT = Path(__file__).resolve().parents[1]


def parity_dir() -> Path:
    """``$WORLDPAGER_PARITY_DIR`` or ``../shared/fixtures/mg2_parity`` beside the checkout."""
    env = os.environ.get("WORLDPAGER_PARITY_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "fixtures" / "mg2_parity"


@pytest.fixture(scope="session")
def parity_fixtures() -> Path:
    path = parity_dir()
    if not (path / "universal_tiny.safetensors").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"parity fixtures missing at {path} (set WORLDPAGER_PARITY_DIR)")
        pytest.skip(f"parity fixtures not found at {path}")
    return path


def _share_the_cores_between_workers() -> None:
    """Under pytest-xdist, give each worker (and the sessions it starts) its share of the cores.

    Two workers that each run torch's default team of one thread per core oversubscribe the machine, and
    OpenMP teams that wait on each other's barriers slow compute-bound tests several times over; one team
    per core keeps the suite's length close to its serial length divided by the workers.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return
    share = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ["OMP_NUM_THREADS"] = share   # inherited by the sessions the tests start
    torch.set_num_threads(int(share))


_share_the_cores_between_workers()


def _the_test_processes_allocator_as_glibc_sets_it() -> None:
    """A session pins glibc's mmap threshold at 480 KiB for the rest of its process's life
    (``engine.memory.allocator``): right for a session, whose host memory must not creep, but in a test
    process every later test's temporaries above 480 KiB are then mapped, page-faulted and unmapped per
    operation (two layer-paging sessions of the tiny model: 44 s of system time pinned, 6 s not). So the
    test processes themselves keep glibc's own thresholds: their in-process sessions see the pin as
    switched off (``WORLDPAGER_MALLOC=default``, which is not left in the environment). The sessions the
    tests start as processes pin as a user's do; the pin itself, and the flat host memory it buys, are
    tested in fresh processes (``tests/memory/test_allocator.py``, ``tests/memory/test_rss_flat.py``, the
    long run of ``tests/cli/test_session_cli.py``)."""
    from engine.memory.allocator import ENV_VAR, pin_allocator

    before = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = "default"
    try:
        pin_allocator()   # once per process: later calls return this
    finally:
        if before is None:
            del os.environ[ENV_VAR]
        else:
            os.environ[ENV_VAR] = before


_the_test_processes_allocator_as_glibc_sets_it()
_THREADS_AT_START = torch.get_num_threads()


@pytest.fixture(autouse=True)
def _threads_as_they_were():
    """A test that runs a session in-process with ``--threads N`` leaves torch's intra-op thread count
    at N; the next test in the same worker then computes on another number of threads than it would
    alone, and results that compare bytes become a matter of test order. Each test starts from the
    worker's own count."""
    if torch.get_num_threads() != _THREADS_AT_START:
        torch.set_num_threads(_THREADS_AT_START)
    yield


def _sigint_as_in_a_terminal() -> None:
    """A suite started in the background by a non-interactive shell (``cmd &``, as a CI runner may
    start it) has SIGINT ignored, and every process it starts inherits that: Python then installs no
    KeyboardInterrupt handler, and a test's Ctrl-C would do nothing. Catching SIGINT here gives the
    processes the tests start the default disposition a terminal gives them."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


_sigint_as_in_a_terminal()


def _independent_of_the_users_settings() -> None:
    """No test reads the developer's WORLDPAGER_* option variables or config file (the sessions the
    tests start inherit this)."""
    from engine.settings.options import SESSION_OPTIONS

    for option in SESSION_OPTIONS:
        os.environ.pop(option.envvar, None)
    os.environ["WORLDPAGER_CONFIG"] = ""


_independent_of_the_users_settings()


# The files that take longest (whole sessions, full-size parity), handed to the workers first. Under
# ``--dist loadfile`` a file runs whole on one worker, and one that starts last leaves the others idle
# until it ends; started first, the many short files fill in around it. Only the order changes.
LONG_FILES_FIRST = (
    "tests/memory/test_kv_paging_sessions.py",
    "tests/cli/test_resume.py",
    "tests/parity/test_lingbot_paged_vs_resident.py",
    "tests/parity/test_vae_parity.py",
    "tests/memory/test_rss_flat.py",
    "tests/cli/test_device_check.py",
    "tests/play/test_play_session.py",
    "tests/cli/test_lingbot_text_cache.py",
    "tests/cli/test_fork.py",
    "tests/cli/test_drive_full.py",
    "tests/cli/test_lingbot_session.py",
    "tests/cli/test_spill_quota_resume.py",
    "tests/cli/test_session_cli.py",
)


@pytest.hookimpl(trylast=True)   # after the terminal reporter is there
def pytest_configure(config):
    progress_lines.register(config)   # a line at each file's end and every 30 s, even under -q
    if getattr(config.option, "loadscopereorder", None):
        # pytest-xdist would hand out the files with the most tests first (the long session files have
        # few): keep the order of the collection (``pytest_collection_modifyitems``) instead.
        config.option.loadscopereorder = False


def _long_files_first(items) -> None:
    rank = {path: i for i, path in enumerate(LONG_FILES_FIRST)}
    def key(item):
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))
    items.sort(key=key)   # stable: every other file, and the tests inside each file, keep their order


def pytest_collection_modifyitems(config, items):
    _long_files_first(items)
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
