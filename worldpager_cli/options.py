"""The session's flags, declared once: ``generate`` and ``plan`` take the same ones.

Contract. ``session_options`` adds every flag that sets a session's config (``--preset``, the length,
the model, its inputs and outputs, and the memory flags of ``memory_options``) to a click command, as
keyword arguments named like the flags. ``session_overlay(opts)`` turns those arguments into the sparse
config overlay ``engine.overlay.resolve_session_config`` applies over the preset: only what the user gave,
so that a preset's values (``pool_slots`` among them) hold unless a flag overrides them.
``chunks_for_length`` turns ``--chunks`` / ``--seconds`` / ``--minutes`` into chunks of a video grid.
Nothing here imports the engine's session or torch (``worldpager --help`` and ``plan`` stay fast).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import click

from engine.config import (ARENA_MODEL, LATE_PREFETCH_MODES, MODEL_CONFIGS, POSITION_MODES, STORE_MODES, SYNTHETIC_MODEL,
                           WRITEBACK_MODES)
from engine.errors import ConfigError

LENGTH_KEYS = ("chunks", "seconds", "minutes")


def given(**values) -> dict:
    """Only the flags the user gave (None = not given), as a config overlay."""
    return {k: v for k, v in values.items() if v is not None}


def parse_arena_seed(text: str) -> int:
    """``--arena-seed``: a non-negative integer (one-line error naming the value otherwise)."""
    value = text.strip()
    if not value.isdigit():
        raise ConfigError(f"--arena-seed must be a non-negative integer, got {text!r}")
    return int(value)


def chunks_for_length(chunks: int | None, seconds: float | None, minutes: float | None,
                      fps: int, first_chunk_frames: int, chunk_frames: int) -> int | None:
    """Chunks needed for the requested length (None when no length flag was given)."""
    given_ = [v is not None for v in (chunks, seconds, minutes)]
    if sum(given_) > 1:
        raise ConfigError("give only one of --chunks, --seconds, --minutes")
    if chunks is not None:
        if chunks < 1:
            raise ConfigError(f"--chunks must be at least 1, got {chunks}")
        return chunks
    if seconds is None and minutes is None:
        return None
    total_s = seconds if seconds is not None else minutes * 60
    if not math.isfinite(total_s) or total_s <= 0:
        raise ConfigError(f"length must be a positive number of seconds, got {total_s}")
    frames = math.ceil(total_s * fps)
    return 1 + max(0, math.ceil((frames - first_chunk_frames) / chunk_frames))


SESSION_OPTIONS = [
    click.option("--preset", help="Preset name (presets/NAME.yaml) or a YAML file; flags override it."),
    click.option("--image", type=click.Path(path_type=Path), help="Start image (PNG/JPEG/WebP). Default: the packaged scene."),
    click.option("--trajectory", type=click.Path(path_type=Path), help="Trajectory file (YAML, pose CSV, action CSV, nerfstudio JSON). Default: the packaged revisit_loop."),
    click.option("--observe", type=click.Path(path_type=Path), help="Start from an observed clip for its whole chunks, then --trajectory goes on from where it ended: for the arena model a trajectory file whose path through its world is observed (rendered truth); for MG2 a recorded video at the model's frame size (its frame 0 is the start image), its camera path in CLIP.poses.csv beside it."),
    click.option("--observe-poses", type=click.Path(path_type=Path), help="The --observe video's camera path (pose CSV: frame,x,y,z,yaw,pitch). Default: CLIP.poses.csv beside the video."),
    click.option("--repeat", type=click.Choice(["loop", "pingpong"]), help="How a short trajectory is extended. Default: loop."),
    click.option("--out", type=click.Path(path_type=Path), help="Output MP4. Default: worldpager-DATE-TIME.mp4 here."),
    click.option("--log", type=click.Path(path_type=Path), help="JSON Lines log. Default: beside the MP4 (.log.jsonl)."),
    click.option("--chunks", type=int, help="Length in chunks (12 video frames each; the first has 9)."),
    click.option("--seconds", type=float, help="Length in seconds of video (16 fps). Default: 30."),
    click.option("--minutes", type=float, help="Length in minutes of video (16 fps)."),
    click.option("--checkpoint", type=click.Path(path_type=Path), help="Directory with the official MG2 weights (implies --model mg2-universal)."),
    click.option("--model", "model_name", type=click.Choice([ARENA_MODEL] + sorted(MODEL_CONFIGS) + [SYNTHETIC_MODEL]), help="Model. Default: arena (our own world model), or mg2-universal with --checkpoint. tiny/micro: MG2's architecture with seeded weights; synthetic: real KV bytes, no math."),
    click.option("--arena-seed", help="Arena model: which procedural world (a non-negative integer). Default: 1000017."),
    click.option("--arena-weights", type=click.Path(path_type=Path), help="Arena model: weights file. Default: the packaged ones."),
    click.option("--seed", type=int, help="Seed of the noise. Default: 0."),
    click.option("--device", help="auto, cpu, cuda or cuda:N. Default: auto."),
    click.option("--save-every", type=int, help="Save point every N chunks (0: none). Default: about every 30 s of wall time."),
    click.option("--keep-savepoints", type=int, help="Newest save points kept (where the run can be resumed or forked). Default: 2."),
    click.option("--decode-overlap/--no-decode-overlap", default=None, help="Decode and mux each chunk on a worker thread while the next one denoises (same MP4). Default: off."),
    click.option("--io-deadline", type=float, help="Seconds a synchronous read or a write-back may take before the drive counts as stuck. Default: 30."),
    click.option("--late-prefetch", type=click.Choice(LATE_PREFETCH_MODES), help="Prefetch mode: a set still loading when its chunk starts is a miss (the slot keeps its previous chunk; never waits) or is waited for (a stall; the frames then do not depend on the machine's speed: reproducible runs). Default: miss."),
    click.option("--writeback", type=click.Choice(WRITEBACK_MODES), help="When stored chunks go to the spill drive: background (when the pool runs low), through (each at once, in the background) or sync (a baseline: the loop waits). Default: background."),
]

MEMORY_OPTIONS = [
    click.option("--store", type=click.Choice(STORE_MODES), help="Store mode. Default: prefetch."),
    click.option("--spill", type=click.Path(path_type=Path), help="Directory of the disk tier (O_DIRECT). Default: none."),
    click.option("--host-mem", type=float, help="Host memory budget in GiB (the pool is this minus the process and 2 GiB)."),
    click.option("--pool-slots", type=int, help="Exact host-pool size in chunks (overrides --host-mem)."),
    click.option("--device-mem", type=float, help="Device memory budget for KV in GiB (device-only mode)."),
    click.option("--kv-bits", type=click.Choice(["2", "4", "8", "16"]), help="Stored KV format (16 = unquantised). Default: 4."),
    click.option("--drive-bw", help="Emulated drive bandwidth in GB/s: 0.25, or r=0.5,w=0.5."),
    click.option("--retrieve-k", type=int, help="Past chunks retrieved per chunk. Default: 3."),
    click.option("--sink/--no-sink", default=None, help="Keep the first chunk resident as an attention sink."),
    click.option("--positions", type=click.Choice(POSITION_MODES), help="Position handling past the horizon. Default: rerotate."),
    click.option("--chunk-ms", type=float, help="Synthetic model: device time per chunk. Default: 1200."),
    click.option("--kv-scale", type=float, help="Synthetic model: KV bytes relative to MG2. Default: 1."),
]


def _apply(options, func):
    for option in reversed(options):
        func = option(func)
    return func


def memory_options(func):
    return _apply(MEMORY_OPTIONS, func)


def session_options(func):
    """Every flag of a session's config (see the module docstring)."""
    return _apply(SESSION_OPTIONS + MEMORY_OPTIONS, func)


def memory_flags(store, spill, host_mem, pool_slots, device_mem, kv_bits, drive_bw, retrieve_k, sink) -> dict:
    return given(store=store, spill=spill, host_mem_gib=host_mem, pool_slots=pool_slots, device_mem_gib=device_mem,
                 kv_bits=None if kv_bits is None else int(kv_bits), drive_bw=drive_bw,
                 retrieve_k=retrieve_k, sink=sink)


def session_overlay(opts: Mapping) -> dict:
    """The config overlay of the session flags given (``opts``: ``session_options``'s arguments;
    ``--preset`` and the length are not part of it)."""
    o = opts
    flags = given(image=o["image"], out=o["out"], log=o["log"], trajectory=o["trajectory"],
                  observe=o["observe"], observe_poses=o["observe_poses"], repeat=o["repeat"], checkpoint=o["checkpoint"], model=o["model_name"], seed=o["seed"],
                  device=o["device"], positions=o["positions"], chunk_ms=o["chunk_ms"], kv_scale=o["kv_scale"],
                  arena_seed=None if o["arena_seed"] is None else parse_arena_seed(o["arena_seed"]),
                  arena_weights=o["arena_weights"], save_every=o["save_every"],
                  keep_savepoints=o["keep_savepoints"], decode_overlap=o["decode_overlap"])
    mem = memory_flags(o["store"], o["spill"], o["host_mem"], o["pool_slots"], o["device_mem"], o["kv_bits"],
                       o["drive_bw"], o["retrieve_k"], o["sink"])
    if o["io_deadline"] is not None:
        mem["io_deadline_s"] = o["io_deadline"]
    if o["late_prefetch"] is not None:
        mem["late_prefetch"] = o["late_prefetch"]
    if o["writeback"] is not None:
        mem["writeback"] = o["writeback"]
    if mem:
        flags["memory"] = mem
    if o["checkpoint"] is not None and o["model_name"] is None and o["preset"] is None:
        flags["model"] = "mg2-universal"
    return flags
