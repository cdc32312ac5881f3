"""The flags of ``worldpager bench quality`` checked before anything runs (click only; no numpy, no torch).

Owns what a usage error (exit 2, one line naming the flag) is for this command:

* numbers out of range: ``BoundedNumber`` is ``worldpager_cli.options.CheckedNumber`` (finite, at least
  its low) with a high bound too, so ``--minutes 1e308`` is refused before it becomes a number of chunks;
* a name list (``--only``, ``--kinds``, ``--arms``) naming something that is not one of its choices; the
  choices of ``--arms`` are the benchmark's own (``--long`` has others);
* a flag of another benchmark: ``--minutes`` only means something with ``--long`` or ``--walk``,
  ``--no-baselines`` only with ``--long``, ``--no-look-around`` only with ``--walk``; ``--chunks``,
  ``--observed``, ``--position-seeds``, ``--prefix-chunks``, ``--drift-chunks``, ``--block``, ``--only`` and
  ``--workdir`` only without both, ``--kinds`` without ``--long`` (with ``--walk`` it names walk kinds);
  ``--long`` and ``--walk`` together are refused. A flag the user gave, not its default, is what
  counts: given where it means nothing, it is refused rather than ignored.
"""
from __future__ import annotations

import click
from click.core import ParameterSource

from worldpager_cli.options import CheckedNumber

EXPERIMENTS = ("revisit", "positions", "drift")
MAX_MINUTES = 24 * 60          # a day of video a session: past it the chunk count is no benchmark's
MAX_SEEDS = 1000               # held-out arenas in one run
MAX_SEED = 1_000_000           # the first held-out seed
MAX_CHUNKS = 100_000           # chunks of an episode, a prefix or a drift session
MAX_THREADS = 1024

LONG_ONLY = ("minutes", "no_baselines")
WALK_ONLY = ("no_look_around",)
WALK_TAKES = ("minutes", "kinds", "no_look_around")
REVISIT_ONLY = ("kinds", "episode_chunks", "observed", "position_seeds", "prefix_chunks", "drift_chunks",
                "block", "only", "workdir")


class BoundedNumber(CheckedNumber):
    """``CheckedNumber`` (an int or finite float, at least ``low``) that is also at most ``high``."""

    def __init__(self, integer: bool, low: float, high: float, low_open: bool = False, unit: str = ""):
        super().__init__(integer, low, low_open, unit)
        self.high = high

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number > self.high:
            unit = f" {self.unit}" if self.unit else ""
            self.fail(f"{value} is more than {self.high:g}{unit}", param, ctx)
        return number


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _choose(flag: str, text: str, choices, empty_ok: bool = False) -> None:
    names = _names(text)
    bad = [n for n in names if n not in choices] or ([] if names or empty_ok else [text])
    if bad:
        raise click.BadParameter(f"{bad[0]!r} is not one of {', '.join(choices)}", param_hint=f"'{flag}'")


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave flag ``name`` (not its default)."""
    return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)


_given = given


def _flag(ctx: click.Context, name: str) -> str:
    param = next(p for p in ctx.command.params if p.name == name)
    return param.opts[0]


def _check_walk(ctx: click.Context, long_mode: bool, kinds: str, arm_names: str) -> None:
    if long_mode:
        raise click.UsageError("--long and --walk are two benchmarks: give one of them")
    wrong = [n for n in (*REVISIT_ONLY, *LONG_ONLY) if n not in WALK_TAKES and _given(ctx, n)]
    if wrong:
        raise click.UsageError(f"{_flag(ctx, wrong[0])} is a flag of another benchmark; --walk does not take it "
                               "(leave it out, or leave out --walk)")
    from engine.quality.long_run import OPTIONAL_ARMS
    from engine.quality.walk_paths import WALK_KINDS
    from engine.quality.walk_run import WALK_ARMS

    if _given(ctx, "kinds"):
        _choose("--kinds", kinds, WALK_KINDS)
    _choose("--arms", arm_names, (*(a.name for a in WALK_ARMS), *OPTIONAL_ARMS), empty_ok=True)


def check_flags(ctx: click.Context, long_mode: bool, only: str, kinds: str, arm_names: str,
                no_baselines: bool, walk_mode: bool = False) -> None:
    """Refuse (``click.UsageError``, exit 2) the flags that do not fit together or name no choice."""
    if walk_mode:
        _check_walk(ctx, long_mode, kinds, arm_names)
        return
    walk_only = [n for n in WALK_ONLY if _given(ctx, n)]
    if walk_only:
        raise click.UsageError(f"{_flag(ctx, walk_only[0])} only applies to the walking benchmark: add --walk")
    wrong = [n for n in (REVISIT_ONLY if long_mode else LONG_ONLY) if _given(ctx, n)]
    if wrong and long_mode:
        raise click.UsageError(f"{_flag(ctx, wrong[0])} is a flag of the revisit benchmark; --long does not "
                               "take it (leave it out, or leave out --long)")
    if wrong and wrong[0] == "minutes":
        raise click.UsageError("--minutes only applies to the long benchmark: add --long (or --walk: the walking "
                               "benchmark)")
    if wrong:
        raise click.UsageError(f"{_flag(ctx, wrong[0])} only applies to the long benchmark: add --long")
    if long_mode:
        from engine.quality.long_run import OPTIONAL_ARMS

        _choose("--arms", arm_names, ("window", "int4", *OPTIONAL_ARMS), empty_ok=True)
        if no_baselines and not set(_names(arm_names)) & set(OPTIONAL_ARMS):
            raise click.UsageError(f"--no-baselines runs only the arms named: name them with --arms "
                                   f"({', '.join(OPTIONAL_ARMS)})")
        return
    from engine.quality.arms import REVISIT_ARMS
    from engine.quality.revisit_paths import KINDS

    _choose("--only", only, EXPERIMENTS)
    _choose("--kinds", kinds, KINDS)
    _choose("--arms", arm_names, tuple(a.name for a in REVISIT_ARMS), empty_ok=True)
