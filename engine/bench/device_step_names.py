"""The device check's step names, in the order they run, and ``--steps`` read against them.

Torch-free, so that ``worldpager bench device`` refuses a bad ``--steps`` or ``--step-budget`` before it
imports torch. The steps themselves (their functions, budgets and descriptions) are
``engine.bench.device_check.STEPS``, in this order (``tests/cli/test_device_check.py`` keeps the two alike).
"""
from __future__ import annotations

from engine.errors import ConfigError

STEP_NAMES = ("env", "pytest_gpu", "quant", "parity_tiny", "parity_micro", "dit_mg2", "arena", "session_mp4",
              "synthetic_session", "weights")


def step_names(spec: str | None) -> list[str]:
    """``--steps`` as names, in the order given (None: all, in ``STEP_NAMES`` order)."""
    if spec is None:
        return list(STEP_NAMES)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for name in names:
        if name not in STEP_NAMES:
            raise ConfigError(f"--steps: unknown step {name!r} (choose from {', '.join(STEP_NAMES)})")
    if len(set(names)) < len(names) or not names:
        raise ConfigError(f"--steps {spec!r}: name each step once")
    return names
