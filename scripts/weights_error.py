"""``python scripts/weights_error.py [--mg2 FILE] [--lingbot FILE]``: the error ``--weights`` costs, measured.

Replays both official-code parity fixtures (MG2's ``universal_tiny``, LingBot-World-Fast's ``cam_tiny``;
``engine.model.parity``) with the DiT blocks' large linears stored as each weight format
(``engine.model.weight_quant``) and prints, per fixture and format, the largest error against the
official outputs over (a) the teacher-forced velocities (one forward each, inputs from the fixture) and
(b) the free-running final latents (the whole multi-chunk sampler, errors compounding), both as the
fixtures measure them: max |ours - official| / std(official). ``bf16`` is the unquantised baseline (our
float32 replay on the CPU); ``int8`` runs the real ``QuantLinear``; ``fp8`` is emulated on any device
(weights rounded through ``torch.float8_e4m3fn`` and back), which is the same stored value the fp8 layer
dequantises; ``bf16-rounded`` rounds the blocks' linears to bfloat16 (what a bf16 GPU session stores: the
error int8's is to be compared with); ``int8-all`` quantises every linear of the blocks, the camera
injectors, MG2's action module and the arena's modulation included (why they stay unquantised). Then
one JSON line with every figure. Exit 1 (one line) if a fixture is missing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "fixtures"
FORMATS = ("bf16", "bf16-rounded", "int8", "fp8", "int8-all")


def _quantise(model, fmt: str):
    """``fmt`` as the session stores it; ``bf16-rounded``: the blocks' linears rounded to bfloat16 (what a
    bf16 GPU session stores); ``int8-all``: every linear of the blocks in int8, the camera injectors, MG2's
    action module and the arena's modulation included (the measurement behind keeping them unquantised)."""
    from engine.model.weight_quant import emulated, quantise_blocks

    if fmt in ("bf16-rounded", "int8-all"):
        for block in model.blocks:
            for module in block.modules():
                if isinstance(module, torch.nn.Linear):
                    if fmt == "int8-all":
                        emulated(module, "int8")
                    else:
                        module.weight.data = module.weight.data.to(torch.bfloat16).to(module.weight.dtype)
        return model
    quantise_blocks(model.blocks, fmt, emulate=fmt == "fp8")
    return model


def _worst(rows, prefix: str) -> float:
    return max(e for name, e in rows if name.startswith(prefix))


def mg2_errors(path: Path, fmt: str) -> dict:
    from engine.model.parity import dit
    from engine.model.parity.fixture import Fixture

    fx = Fixture.open(path)
    cfg = dit.fixture_model_config(fx)
    companion = path.with_name(path.stem + "_caches.safetensors")
    caches = Fixture.open(companion) if companion.is_file() else None
    with torch.no_grad():
        teacher = dit.teacher_forced_rows(fx, cfg, _quantise(dit.build_fixture_dit(fx, cfg), fmt))
        free = dit.free_running_rows(fx, cfg, _quantise(dit.build_fixture_dit(fx, cfg), fmt), caches)
    return {"velocity": _worst(teacher, "teacher.velocity"), "latents": _worst(free, "output.latents")}


def lingbot_errors(path: Path, fmt: str) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from engine.model.parity import lingbot

    case = lingbot.Case.open(path)
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        teacher = lingbot.teacher_forced_rows(case, _quantise(lingbot.build_model(case), fmt))
        free = lingbot.free_running_rows(case, _quantise(lingbot.build_model(case), fmt), None)
    return {"velocity": _worst(teacher, "teacher.velocity"), "latents": _worst(free, "output.latents")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mg2", type=Path, default=SHARED / "mg2_parity" / "universal_tiny.safetensors")
    parser.add_argument("--lingbot", type=Path, default=SHARED / "lingbot_parity" / "cam_tiny.safetensors")
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = {"mg2 universal_tiny": (args.mg2, mg2_errors), "lingbot cam_tiny": (args.lingbot, lingbot_errors)}
    for name, (path, _) in cases.items():
        if not path.is_file():
            print(f"weights_error: {name}: fixture {path} not found", file=sys.stderr)
            return 1
    results = {}
    print(f"{'fixture':<20} {'weights':<12} {'velocity err':>13} {'latents err':>12}")
    for name, (path, measure) in cases.items():
        for fmt in args.formats.split(","):
            errors = measure(path, fmt)
            results[f"{name} {fmt}"] = errors
            print(f"{name:<20} {fmt:<12} {errors['velocity']:>13.2e} {errors['latents']:>12.2e}", flush=True)
    print(json.dumps({"measure": "max |ours - official| / std(official)", "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
