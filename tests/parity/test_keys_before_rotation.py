"""Keys stored before the rotation (``--kv-keys pre-rope``) against keys stored after it (``post-rope``).

The same MG2-architecture session (seeded weights, the looping ``yaw`` trajectory, memory through an
8-chunk host pool and a spill directory, ``on-demand`` so that no run depends on the machine's speed)
runs with either convention and the decoded float frames are compared (MG2's ``micro`` and LingBot's
``lingbot-tiny``, both with their horizon at chunk 5):

* with kv_bits 16, below the horizon and past it with ``extend``: bit-identical (a pre-rope key rotated
  at its own position when staged is the very key the forward rotated and post-rope stored). Model
  ``micro`` (horizon chunk 5) for 7 chunks (two past the horizon); for model ``tiny`` (MG2's 1024-frame table) at the model:
  its ``place_keys`` at the chunk's own position gives back the very keys the forward attended;
* past the horizon with ``rerotate``: pre-rope places retrieved keys at their new position directly,
  post-rope rotates stored keys by the difference; the two differ by float rounding only (bound below);
* with kv_bits 4: both stay within the paged-vs-resident int4 bound of the kv16 run, and differ from
  each other (the convention changes what int4 sees);
* a resume past the horizon gives the uninterrupted video byte for byte, and a resume whose setting
  differs from the save point's is refused with one line naming both;
* the context hands the memory keys before the rotation, and the model's ``place_keys`` at the chunk's
  own position gives back exactly the keys it attended (``micro`` and ``tiny``).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from engine.errors import InputError
from engine.io.image import default_start_image_path, load_image
from engine.model.kv_context import AttentionContext
from engine.model.registry import build_world_model, model_spec
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.observe import session_path
from engine.session.resume import check_key_convention, resume_point
from engine.runtime.telemetry import read_log
from tests_support import resumed_equals_uninterrupted, run_capturing_frames

TRAJECTORY = Path(__file__).resolve().parents[2] / "trajectories" / "yaw.yaml"
MICRO_HORIZON, CHUNKS = 5, 7    # lingbot-tiny's horizon is chunk 5 as well
# rerotate past the horizon, float32 on the CPU: measured max |Δ| = 3.7e-6 (micro), 3.5e-6 (lingbot-tiny)
# over 10 chunks (the tests run 7; values in [-1, 1]): one rotation by the difference of two positions against one rotation to the position.
REROTATE_BOUND = 1e-4
INT4_BOUND = 0.02   # tests/parity/test_paged_vs_resident.py's bound of int4 against kv16


def config(root: Path, name: str, keys: str, *, model: str = "micro", chunks: int = CHUNKS,
           positions: str = "rerotate", kv_bits: int = 16, save_every: int = 0):
    return resolve_session_config(None, {
        "model": model, "device": "cpu", "trajectory": str(TRAJECTORY), "chunks": chunks, "seed": 0,
        "positions": positions, "save_every": save_every, "out": str(root / f"{name}.mp4"),
        "memory": {"store": "on-demand", "kv_bits": kv_bits, "retrieve_k": 3, "pool_slots": 8,
                   "spill": str(root / f"{name}-spill"), "keys": keys}})


def frames_of(cfg) -> tuple[torch.Tensor, list[dict]]:
    """The session's decoded frames (as handed to the MP4 writer) and its log's chunk records."""
    frames, result = run_capturing_frames(cfg)
    assert result.status == "done" and result.chunks == cfg.chunks
    return torch.cat(frames), [r for r in read_log(result.log) if r["type"] == "chunk"]


def both(root: Path, **kwargs):
    suffix = "-".join(f"{v}" for v in kwargs.values())
    return (frames_of(config(root, f"post-{suffix}", "post-rope", **kwargs)),
            frames_of(config(root, f"pre-{suffix}", "pre-rope", **kwargs)))


def retrieved(records: list[dict]) -> int:
    return sum(len(r["memory"]) for r in records)


@pytest.mark.parametrize("model", ["micro", "lingbot-tiny"])
def test_pre_rope_is_bit_identical_below_the_horizon_and_with_extend(tmp_path, model):
    (post, post_log), (pre, pre_log) = both(tmp_path, model=model, positions="extend")
    assert retrieved(pre_log) > 0 and [r["memory"] for r in pre_log] == [r["memory"] for r in post_log]
    assert any(r["chunk"] >= MICRO_HORIZON and r["memory"] for r in pre_log)   # past the horizon too
    assert torch.equal(pre, post)


@pytest.mark.parametrize("model", ["micro", "lingbot-tiny"])
def test_pre_rope_with_rerotate_equals_post_rope_within_rounding(tmp_path, model):
    (post, post_log), (pre, pre_log) = both(tmp_path, model=model, positions="rerotate")
    assert sum(r["rerotated"] for r in pre_log) > 0
    below = sum(r["frames"] for r in pre_log[:MICRO_HORIZON])
    assert torch.equal(pre[:below], post[:below])
    assert 0 < (pre - post).abs().max().item() <= REROTATE_BOUND


def test_int4_both_ways_stays_within_the_int4_bound(tmp_path):
    reference, _ = frames_of(config(tmp_path, "kv16", "post-rope", positions="extend"))
    (post, _), (pre, _) = both(tmp_path, positions="extend", kv_bits=4)
    post_err, pre_err = ((x - reference).abs().max().item() for x in (post, pre))
    assert 0 < post_err <= INT4_BOUND and 0 < pre_err <= INT4_BOUND
    assert not torch.equal(pre, post)


def test_resume_past_the_horizon_equals_uninterrupted(tmp_path):
    whole = config(tmp_path, "whole", "pre-rope", chunks=9)
    cut = config(tmp_path, "cut", "pre-rope", chunks=9, save_every=1)
    sp = resumed_equals_uninterrupted(whole, cut, stop_after=6)
    assert sp.chunk == 7 and sp.facts["memory"]["keys"] == "pre-rope"


def test_a_resume_with_the_other_setting_is_refused(tmp_path):
    cut = config(tmp_path, "cut", "post-rope", chunks=6, save_every=1)
    session = Session(cut, on_chunk=lambda r: r["chunk"] == 3 and session.request_stop())
    assert session.run().status == "interrupted"
    again, sp, _ = resume_point(cut.out)
    other = dataclasses.replace(again, memory=dataclasses.replace(again.memory, keys="pre-rope"))
    # before anything is cut or reopened: the save point against the config
    with pytest.raises(InputError) as caught:
        check_key_convention(cut.out, sp, other, "resume")
    assert "\n" not in str(caught.value) and "keys post-rope" in str(caught.value)
    assert "--kv-keys pre-rope" in str(caught.value)
    # and the memory itself, handed the save point anyway, refuses it
    with pytest.raises(InputError, match="stores keys post-rope, this session has --kv-keys pre-rope"):
        Session(other, resume_from=sp).run()


@pytest.mark.parametrize("model", ["micro", "tiny"])
def test_the_context_hands_the_memory_keys_before_rotation(tmp_path, model):
    cfg = config(tmp_path, "unused", "pre-rope", model=model, chunks=1)
    spec = model_spec(cfg)
    image = load_image(default_start_image_path(), *spec.image_size)
    model = build_world_model(cfg, image, session_path(cfg, spec).trajectory, torch.device("cpu"), torch.float32)
    ctx = AttentionContext(model.layout, keys_before_rotation=True)
    model.prepare_context(ctx)
    model.denoise(0, ctx)
    for layer, ((k_attended, _), (k_stored, _)) in enumerate(zip(ctx.current_kv(), ctx.stored_kv(), strict=True)):
        assert not torch.equal(k_stored, k_attended)
        assert torch.equal(model.place_keys(layer, k_stored, 0.0), k_attended)


@pytest.mark.parametrize("model", ["arena", "synthetic"])
def test_a_model_without_pre_rope_keys_is_refused_in_one_line(tmp_path, model):
    from click.testing import CliRunner

    from worldpager_cli.main import cli

    out = tmp_path / "refused.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", model, "--kv-keys", "pre-rope", "--chunks", "2",
                                      "--quiet", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code != 0 and not out.exists()
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("worldpager: error: --kv-keys pre-rope is built for MG2's and LingBot's models")
    assert f"the {model} model" in line and "--kv-keys post-rope" in line
