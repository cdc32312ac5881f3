"""The CPU's threads for a session: --threads, else OMP_NUM_THREADS, else one; decoding on the other core by
default on a CPU, not on a GPU (engine.runtime.cpu_threads)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from click.testing import CliRunner

from engine.config import SessionConfig
from engine.runtime.cpu_threads import DEFAULT_CPU_THREADS, apply_cpu_threads, cpu_threads, decode_overlap
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


def test_one_intra_op_thread_is_a_scope_on_a_cpu_only():
    from engine.runtime.cpu_threads import one_intra_op_thread

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with one_intra_op_thread(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with one_intra_op_thread(torch.device("meta")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_vae_gives_the_same_latents_and_frames_on_any_thread_count():
    """The tiny model's VAE (64 channels at the bottom, 22x20 there): its attention's 1x1 conv
    with a bias summed in another order on two threads than on one before the VAE computed on one thread
    wherever it runs; a decode on the loop's threads and one on the decode worker's then differed."""
    from engine.config import VAEConfig
    from engine.model.seeded_weights import fill_module_
    from engine.model.vae import StartImageEncoder, StreamingDecoder, WanVAE

    vae = fill_module_(WanVAE(VAEConfig(dim=16)), 5).eval()
    image = torch.rand(1, 3, 176, 160, generator=torch.Generator().manual_seed(0)) * 2 - 1
    before = torch.get_num_threads()
    out = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            encoder = StartImageEncoder(vae, image)
            latents = encoder.latents(2)
            frames = StreamingDecoder(vae).decode_chunk(latents)
            out[threads] = (latents, frames)
            assert torch.get_num_threads() == threads   # the scope gave the count back
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[1][0], out[2][0]) and torch.equal(out[1][1], out[2][1])
