"""The CPU's threads for a session: --threads, else OMP_NUM_THREADS, else one; decoding on the other core by
default on a CPU, not on a GPU (engine.cpu_threads)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from click.testing import CliRunner

from engine.config import SessionConfig
from engine.cpu_threads import DEFAULT_CPU_THREADS, apply_cpu_threads, cpu_threads, decode_overlap
from engine.session.save import config_digest
from tests_support import one_line_error
from worldpager_cli.main import cli


@pytest.mark.parametrize("threads, env, wanted", [
    (None, {}, DEFAULT_CPU_THREADS), (None, {"OMP_NUM_THREADS": "2"}, None), (3, {"OMP_NUM_THREADS": "2"}, 3),
    (2, {}, 2),
])
def test_the_policy(threads, env, wanted):
    assert cpu_threads(SessionConfig(threads=threads), env) == wanted


@pytest.mark.parametrize("given, device, wanted", [
    (None, "cpu", True), (None, "cuda", False), (False, "cpu", False), (True, "cuda", True)])
def test_decoding_overlaps_by_default_on_a_cpu_only(given, device, wanted):
    assert decode_overlap(SessionConfig(decode_overlap=given), torch.device(device)) is wanted


def test_it_is_applied_on_a_cpu_only():
    before = torch.get_num_threads()
    try:
        assert apply_cpu_threads(SessionConfig(threads=2), torch.device("cpu")) == 2
        assert apply_cpu_threads(SessionConfig(threads=1), torch.device("meta")) == 2   # not a CPU: untouched
    finally:
        torch.set_num_threads(before)


def test_threads_do_not_change_what_a_run_resumes():
    cfg = SessionConfig()
    assert config_digest(cfg) == config_digest(dataclasses.replace(cfg, threads=2))


def test_zero_threads_is_a_usage_error():
    one_line_error(CliRunner().invoke(cli, ["generate", "--threads", "0"]), "--threads", "at least 1", code=2)
