"""``python -m engine.model.parity.runner FIXTURE [FIXTURE ...]``: replay official-code parity fixtures.

Owns the command: which cases a fixture file holds (decided from its tensor keys alone), running each
case through the one replay implementation in ``dit`` / ``vae`` / ``clip`` (the
tests call the same functions), the result table, and the exit status.

Cases: ``forward.velocity`` -> DiT (its weight checksums, then ``dit_rows``, which also reads the
``<stem>_caches.safetensors`` companion beside the file); ``forward.velocity`` with a text context
``inputs.context`` -> LingBot-World-Fast (``lingbot_rows``, with the ``_caches`` and ``_camutils``
companions); any ``camcase.*`` -> LingBot-World-Fast camera utilities alone; ``vae.frames_raw`` -> VAE
decoder; any ``vaeenc.*`` -> VAE encoder; any ``clip.*`` -> CLIP tower. Config, seeds and key lists come from the
file. Output: one table row per comparison (name, max |ours - ref| / std(ref), ok/FAIL), then as the
last line one JSON object ``{"max_rel_err", "tensors", "ok", "fixtures", "failed"}``
(``max_rel_err`` is null when some error is not finite).

Exit status: 0 all rows within ``--tolerance``; 1 some row out of tolerance, or a fixture that is
missing, unreadable, of no known case or inconsistent with our weight generator (one line on stderr);
2 a usage error (argparse's own status); 70 an internal error (traceback on stderr; EX_SOFTWARE).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from safetensors import SafetensorError

from engine.errors import InputError, WorldPagerError
from engine.model.parity.fixture import DEFAULT_TOLERANCE, Fixture
from engine.model.parity.clip import clip_rows
from engine.model.parity.dit import Row, dit_rows
from engine.model.parity.lingbot import camutils_file_rows, lingbot_rows
from engine.model.parity.vae import vae_decoder_rows, vae_encoder_rows, verified_weights

EXIT_OK, EXIT_FAILED, EXIT_INTERNAL = 0, 1, 70   # 2: argparse's usage errors; 70: EX_SOFTWARE
NAME_WIDTH = 44


def _dit_case_rows(path: Path) -> list[Row]:
    # dit_rows rebuilds the weights itself; checking the checksums first (2.7 M values, under a second)
    # tells a generator drift apart from a model error.
    verified_weights(Fixture.open(path), "", "weights.checksum")
    return dit_rows(path)


@dataclass(frozen=True)
class Case:
    name: str
    present: Callable[[set[str]], bool]     # tensor keys of the file -> does it hold this case
    metadata: tuple[str, ...]               # header fields the replay reads
    rows: Callable[[Path], list[Row]]


def _has_prefix(prefix: str) -> Callable[[set[str]], bool]:
    return lambda keys: any(k.startswith(prefix) for k in keys)


CASES = (
    Case("dit", lambda keys: "forward.velocity" in keys and "inputs.context" not in keys,
         ("config", "denoising_step_list", "weight_keys", "weight_seed"), _dit_case_rows),
    Case("lingbot", lambda keys: "forward.velocity" in keys and "inputs.context" in keys,
         ("config", "settings", "weight_keys", "weight_seed"), lingbot_rows),
    Case("lingbot-camera", _has_prefix("camcase."), ("camcase_sizes",), camutils_file_rows),
    Case("vae-decoder", lambda keys: "vae.frames_raw" in keys,
         ("vae_weight_keys", "vae_weight_seed"), vae_decoder_rows),
    Case("vae-encoder", _has_prefix("vaeenc."),
         ("vae_encoder_weight_keys", "vae_encoder_weight_seed"), vae_encoder_rows),
    Case("clip", _has_prefix("clip."), ("clip_weight_keys", "clip_weight_seed"), clip_rows),
)


def detect_cases(path: Path) -> list[Case]:
    """The cases ``path`` holds; :class:`InputError` for a missing, unreadable or unknown file."""
    try:
        fx = Fixture.open(path)
        keys = set(fx.keys())
    except (SafetensorError, OSError) as exc:
        raise InputError(f"cannot read fixture {path}: {exc}") from exc
    cases = [case for case in CASES if case.present(keys)]
    if not cases:
        raise InputError(f"{path} holds no known parity case (no forward.velocity, vae.frames_raw, "
                         f"vaeenc.*, clip.* or camcase.* tensors; a _caches file is read beside its "
                         f"DiT file)")
    for case in cases:
        missing = [m for m in case.metadata if m not in fx.metadata]
        if missing:
            raise InputError(f"{path}: {case.name} case lacks header metadata {missing}")
    return cases


def run_case(case: Case, path: Path) -> list[Row]:
    try:
        return case.rows(path)
    except SafetensorError as exc:       # e.g. a tensor the case needs is not in the file
        raise InputError(f"{path}: {case.name} case: {exc}") from exc


def format_row(name: str, error: float, tolerance: float) -> str:
    status = "ok" if error < tolerance else "FAIL"
    return f"  {name:<{NAME_WIDTH}} {error:>11.3e}  {status}"


def summary(rows: list[Row], fixtures: list[Path], tolerance: float) -> dict:
    errors = [e for _, e in rows]
    finite = all(math.isfinite(e) for e in errors)
    failed = [name for name, e in rows if not e < tolerance]    # NaN fails too
    return {"max_rel_err": max(errors, default=0.0) if finite else None, "tensors": len(rows),
            "ok": not failed, "fixtures": [str(p) for p in fixtures], "failed": failed}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m engine.model.parity",
                                     description="Compare our models (MG2, LingBot-World-Fast) with "
                                                 "the official code's outputs stored in parity "
                                                 "fixture files.")
    parser.add_argument("fixtures", nargs="+", type=Path, metavar="FIXTURE",
                        help="a parity fixture (.safetensors)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help="bound on max |ours - ref| / std(ref) per row (default %(default)g)")
    return parser.parse_args(argv)


def run(fixtures: list[Path], tolerance: float) -> int:
    # Detect every file first, so a bad path fails at once and not after minutes of other cases.
    plan = [(path, detect_cases(path)) for path in fixtures]
    rows: list[Row] = []
    print(f"  {'name':<{NAME_WIDTH}} {'max rel err':>11}  status")
    for path, cases in plan:
        for case in cases:
            print(f"{path.name}: {case.name}", flush=True)
            case_rows = run_case(case, path)
            for name, error in case_rows:
                print(format_row(name, error, tolerance))
            rows.extend(case_rows)
    result = summary(rows, fixtures, tolerance)
    print(json.dumps(result), flush=True)
    return EXIT_OK if result["ok"] else EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args.fixtures, args.tolerance)
    except WorldPagerError as exc:
        # One line even when a library message spans several.
        print(f"parity: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # an internal bug: keep the traceback, but a distinct exit status
        traceback.print_exc(file=sys.stderr)
        print(f"parity: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
