"""Shared test fixtures: where the MG2 parity fixtures live, GPU skipping, each parallel worker's share
of the cores, tests that no user setting (WORLDPAGER_* variables, a config file) reaches, and the run's
progress lines (``progress_lines``)."""
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


@pytest.hookimpl(trylast=True)   # after the terminal reporter is there
def pytest_configure(config):
    progress_lines.register(config)   # a line at each file's end and every 30 s, even under -q


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
