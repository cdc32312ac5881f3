"""LingBot-World-Fast parity against the official code's fixture (``fixtures/lingbot_parity``).

Every stored tensor within the bound, the command-line runner on the fixture files, and deliberately broken
formulas (shift, RoPE split, RoPE time origin, no sink, the two sigma look-ups, the intrinsics row) that
must fail it.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from engine.model.lingbot.schedule import DMDSchedule
from engine.model.parity import lingbot as parity_lingbot
from engine.model.parity.fixture import DEFAULT_TOLERANCE
from engine.model.parity.lingbot_camera import camera_rows
from engine.model.parity.runner import main as runner_main
from engine.model.rope import DiTRope
from tests.conftest import REPO_ROOT

FIXTURE = "cam_tiny.safetensors"


def lingbot_parity_dir() -> Path:
    """``$WORLDPAGER_LINGBOT_PARITY_DIR`` or ``../shared/fixtures/lingbot_parity`` beside the checkout."""
    env = os.environ.get("WORLDPAGER_LINGBOT_PARITY_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "fixtures" / "lingbot_parity"


@pytest.fixture(scope="module")
def fixture_path() -> Path:
    path = lingbot_parity_dir() / FIXTURE
    if not path.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"LingBot parity fixtures missing at {path.parent} (set WORLDPAGER_LINGBOT_PARITY_DIR)")
        pytest.skip(f"LingBot parity fixtures not found at {path.parent}")
    return path


@pytest.fixture(scope="module")
def case(fixture_path):
    case = parity_lingbot.Case.open(fixture_path)
    return case, parity_lingbot.build_model(case)


def _count(names, prefix):
    return len([n for n in names if n.startswith(prefix)])


def test_every_tensor_within_tolerance(fixture_path):
    rows = parity_lingbot.lingbot_rows(fixture_path)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names))
    # every class of stored tensor was compared
    assert _count(names, "teacher.velocity") == 20
    assert _count(names, "chain.x0") == 16 and _count(names, "chain.x_in_renoised") == 12
    assert _count(names, "output.latents") == 4
    assert _count(names, "debug.c0f0.") == 12 and _count(names, "debug.c3f0.") == 12
    assert _count(names, "kv.layer") == 24 and _count(names, "kv.after_chunk") == 4
    assert _count(names, "crossattn.") == 4 and "kv.index_after_forward" in names
    assert _count(names, "cam.") == 5 and _count(names, "camcase.") == 7
    assert _count(names, "schedule.") == 7
    bad = [(n, e) for n, e in rows if not e < DEFAULT_TOLERANCE]
    assert not bad, bad


def test_runner_passes_on_the_fixture(fixture_path, capsys):
    assert runner_main([str(fixture_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ok"] and result["tensors"] >= 129 and result["max_rel_err"] < DEFAULT_TOLERANCE


def _worst(rows, prefix):
    return max(e for n, e in rows if n.startswith(prefix))


def _free_running(case, model, monkeypatch, schedule_patch=None):
    if schedule_patch is not None:
        class Patched(DMDSchedule):
            def __init__(self, settings):
                super().__init__(settings)
                schedule_patch(self)
        monkeypatch.setattr(parity_lingbot, "DMDSchedule", Patched)
    with torch.no_grad():
        return parity_lingbot.free_running_rows(case, model, None)


def test_faithful_free_run_passes(case, monkeypatch):
    assert _worst(_free_running(*case, monkeypatch), "chain.x0") < DEFAULT_TOLERANCE


def _x0_sigma_at_table_index(schedule):
    schedule.sigma_x0 = schedule.sigmas_table[list(DEFAULT_STEPS)]


def _renoise_first_match(schedule):
    schedule.sigma_renoise = torch.stack([schedule.sigmas_table[schedule.x0_index(int(t))]
                                          for t in schedule.timesteps[1:]])


DEFAULT_STEPS = (0, 179, 358, 679)


@pytest.mark.parametrize("mutation", ["shift", "x0_sigma_at_index", "renoise_first_match"])
def test_a_broken_schedule_fails_parity(case, mutation, monkeypatch):
    fixture_case, model = case
    if mutation == "shift":
        settings = dataclasses.replace(fixture_case.settings, shift=10.0)
        fixture_case = dataclasses.replace(fixture_case, settings=settings)
        rows = _free_running(fixture_case, model, monkeypatch)
    else:
        assert fixture_case.settings.timesteps_index == DEFAULT_STEPS
        patch = _x0_sigma_at_table_index if mutation == "x0_sigma_at_index" else _renoise_first_match
        rows = _free_running(fixture_case, model, monkeypatch, patch)
    assert _worst(rows, "output.latents") > DEFAULT_TOLERANCE


@pytest.mark.parametrize("mutation", ["rope_split", "rope_time_from_chunk", "no_sink"])
def test_a_broken_model_fails_parity(case, mutation, monkeypatch):
    fixture_case, model = case
    if mutation == "rope_split":
        t, h, w = fixture_case.cfg.rope_split        # one pair moved from time to height and width
        monkeypatch.setattr(model, "rope", DiTRope(fixture_case.cfg.head_dim, (t - 4, h + 2, w + 2)))
    elif mutation == "rope_time_from_chunk":
        apply = model.rope.apply
        monkeypatch.setattr(model.rope, "apply", lambda x, start, *rest: apply(x, 0, *rest))
    else:
        shape = dataclasses.replace(fixture_case.shape, sink_tokens=0)
        fixture_case = dataclasses.replace(fixture_case, shape=shape)
    rows = _free_running(fixture_case, model, monkeypatch)
    assert _worst(rows, "output.latents") > DEFAULT_TOLERANCE


def test_camera_from_the_wrong_intrinsics_row_fails_parity(case, monkeypatch):
    fixture_case, _ = case
    fx = fixture_case.fx
    original = fx.tensor
    monkeypatch.setattr(fx, "tensor",
                        lambda name: original(name)[1:] if name == "inputs.intrinsics" else original(name))
    rows = dict(camera_rows(fx, fixture_case.shape, fixture_case.cfg.control_type))
    assert rows["cam.embedding"] > DEFAULT_TOLERANCE and rows["cam.c2ws_relative"] < DEFAULT_TOLERANCE


def test_runner_takes_the_camera_utilities_file_alone(fixture_path, capsys):
    camutils = fixture_path.with_name(fixture_path.stem + "_camutils.safetensors")
    assert runner_main([str(camutils)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tensors"] == 7
