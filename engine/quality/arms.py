"""The arms of ``worldpager bench quality``: each one a set of the product's own config keys.

Owns the arm tables. An arm is an overlay of ``SessionConfig`` keys, applied with the same strict
merge as a preset (``engine.settings.overlay.replace_strict``) on top of the benchmark's base: the arena model
on a held-out arena, ``--store prefetch`` through an int4 host pool of ``POOL_SLOTS`` chunks and a
spill directory (the disk tier), k = 3, no sink, ``--positions rerotate``. ``flags`` is how a user
asks for the same thing on ``worldpager generate`` (``rerotate_offset_frames`` has no flag: a preset
key).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import ConfigError

POOL_SLOTS = 4              # host-pool chunks: most of an episode's memory comes back from the spill directory


@dataclass(frozen=True)
class Arm:
    name: str
    flags: str                                      # the same arm on the command line
    overlay: dict = field(default_factory=dict)     # SessionConfig keys (nested, as in a preset)


def _memory(**keys) -> dict:
    return {"memory": keys}


WINDOW = Arm("window", "--store window", _memory(store="window"))
BF16 = Arm("bf16", "--kv-bits 16", _memory(kv_bits=16))
INT4 = Arm("int4", "--kv-bits 4 (the default: k 3, no sink, prefetch)", _memory(kv_bits=4))
# The arena model's x0 alone, without the re-projection of context frames seen from the same place.
NO_REPROJECT = Arm("noreproject", "--arena-reproject 0 (int4)", {"arena_reproject": 0.0, **_memory(kv_bits=4)})
# The DiT blocks' large linears stored int8 (--weights int8), with the default memory and without any:
# memory's benefit on returns with int8 weights is weights-int8 against window-weights-int8.
WEIGHTS_INT8 = Arm("weights-int8", "--weights int8 (int4 KV)", {"weights": "int8", **_memory(kv_bits=4)})
WINDOW_WEIGHTS_INT8 = Arm("window-weights-int8", "--store window --weights int8",
                          {"weights": "int8", **_memory(store="window")})
DEPTH = Arm("depth", "--arena-reproject-depth (int4; weights with a depth head)",
            {"arena_reproject_depth": True, **_memory(kv_bits=4)})

REVISIT_ARMS = (
    WINDOW,
    BF16,
    Arm("int8", "--kv-bits 8", _memory(kv_bits=8)),
    INT4,
    Arm("int2", "--kv-bits 2", _memory(kv_bits=2)),
    Arm("k1", "--retrieve-k 1", _memory(retrieve_k=1)),
    Arm("k6", "--retrieve-k 6", _memory(retrieve_k=6)),
    Arm("sink", "--sink", _memory(sink=True)),
    Arm("on-demand", "--store on-demand", _memory(store="on-demand")),
    Arm("sync", "--store sync", _memory(store="sync")),
    NO_REPROJECT,
)

BELOW = Arm("below", "the same path from chunk 0 (--positions rerotate; below the horizon every mode is the same)")
POSITION_ARMS = (
    Arm("extend", "--positions extend", {"positions": "extend"}),
    Arm("rerotate6", "--positions rerotate, rerotate_offset_frames: 6",
        {"positions": "rerotate", "rerotate_offset_frames": 6.0}),
    Arm("rerotate30", "--positions rerotate (offset 30, the default)",
        {"positions": "rerotate", "rerotate_offset_frames": 30.0}),
    Arm("rerotate96", "--positions rerotate, rerotate_offset_frames: 96",
        {"positions": "rerotate", "rerotate_offset_frames": 96.0}),
)

DRIFT_ARMS = (BF16, INT4)


def arms_named(names: list[str] | None) -> tuple[Arm, ...]:
    """The revisit arms to run (``window`` and ``bf16`` always: retention is measured against them)."""
    if not names:
        return REVISIT_ARMS
    known = {a.name: a for a in REVISIT_ARMS}

    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"unknown arm {bad[0]!r} (choose from {', '.join(known)})")
    wanted = {"window", "bf16", *names}
    return tuple(a for a in REVISIT_ARMS if a.name in wanted)
