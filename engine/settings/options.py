"""A session's options, declared once: the table ``generate``, ``plan``, ``batch`` (its flags and its job
lines) and the overlay rule all read.

Owns ``SESSION_OPTIONS`` (each option's name, value kind, the config key it sets, its help and the
section of the help it is listed in: ``SECTIONS``),
``job_parsers()`` (how a batch job line's value of each kind is read), ``overlay(values)`` (the sparse
config overlay of the options given: ``engine.settings.overlay.resolve_session_config`` applies it over a preset)
and ``parse_settings`` (``--set KEY=VALUE``: any config key, the keys presets set included, so that a
flag, a job line and a preset can each reach every setting). No click here (``engine`` never imports
it): ``worldpager_cli.options`` builds the flags from this table.

Names are the flags without their dashes, with ``_`` for ``-`` (``io_deadline`` is ``--io-deadline``
and a job's ``io_deadline`` or ``io-deadline``). ``target`` is the dotted config key an option sets;
options without one (the preset, the length, ``--set``) are read by the commands themselves.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from engine.config import (ARENA_MODEL, KEY_CONVENTIONS, KV_PAGING_MODES, LATE_PREFETCH_MODES, LINGBOT_MODELS, MODEL_CONFIGS,
                           POSITION_MODES, STORE_MODES, SYNTHETIC_MODEL, WEIGHT_FORMATS, WRITEBACK_MODES, SessionConfig)
from engine.errors import ConfigError
from engine.files.input_files import refuse_wrong_kind
from engine.settings.sizes import GiB, EXAMPLES, MiB, size_in
from engine.settings.overlay import merged_overlays

LINGBOT_DIT_FOLDER = "lingbot_world_fast"     # engine.model.lingbot.weights.CHECKPOINT_SUBFOLDER (torch-free here)
MODEL_NAMES = (ARENA_MODEL, *sorted(MODEL_CONFIGS), *LINGBOT_MODELS, SYNTHETIC_MODEL)
KINDS = ("path", "int", "float", "text", "choice", "switch", "settings", "size")


@dataclass(frozen=True)
class Option:
    """One session option. ``kind``: path, int, float, text, choice (one of ``choices``), switch (an
    on/off pair, ``--sink/--no-sink``), settings (``KEY=VALUE``, repeatable) or size (``engine.settings.sizes``:
    ``24G``, ``512M``; a plain number in the option's ``unit``, the value it sets is in that unit too;
    ``--spill-max`` keeps its text, ``10%`` included, and is read at the session's start)."""

    name: str
    kind: str
    help: str
    target: str | None = None
    choices: tuple[str, ...] = ()
    group: str = "Options"          # the section of the help that lists it (one of ``SECTIONS``)
    low: float | None = None        # int/float: the least value a flag may give (None: any finite number)
    low_open: bool = False          # the least value itself is refused (a positive number: low 0, open)
    unit: str = ""                  # what the number counts, for the refusal: "minutes", "GiB"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def envvar(self) -> str:
        """The environment variable that gives the option when the flag is not given: WORLDPAGER_SPILL."""
        return "WORLDPAGER_" + self.name.upper()


def parse_arena_seed(value: Any) -> int:
    """``--arena-seed``: a non-negative integer (one-line error naming the value otherwise)."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise ConfigError(f"--arena-seed must be a non-negative integer, got {value!r}")
    return int(text)


# The sections a command's help lists its options under, in this order (``worldpager_cli.help``), and
# the section of each option of the table.
SECTIONS = ("Inputs", "Output", "Model", "Memory", "Disk tier", "Positions", "Run control", "Options")
SECTION_OF = {
    **dict.fromkeys(("preset", "image", "trajectory", "observe", "observe_poses", "repeat", "prompt"), "Inputs"),
    **dict.fromkeys(("out", "log"), "Output"),
    **dict.fromkeys(("checkpoint", "seeded_weights", "model", "arena_seed", "arena_weights", "arena_reproject",
                     "arena_reproject_depth", "look_around", "seed", "device",
                     "chunk_ms", "kv_scale", "weights"), "Model"),
    **dict.fromkeys(("store", "host_mem", "pool_slots", "device_mem", "kv_bits", "retrieve_k", "retrieve_visit",
                     "sink", "official_sink", "late_prefetch", "kv_keys", "kv_paging"), "Memory"),
    **dict.fromkeys(("spill", "spill_max", "drive_bw", "io_deadline", "writeback"), "Disk tier"),
    "positions": "Positions",
    **dict.fromkeys(("chunks", "seconds", "minutes", "save_every", "keep_savepoints", "decode_overlap", "threads",
                     "set"), "Run control"),
}


def _opt(name, kind, help, target=None, choices=()) -> Option:
    low, low_open, unit = RANGES.get(name, (None, False, ""))
    return Option(name, kind, help, target, tuple(choices), SECTION_OF[name], low, low_open, unit)


# The numbers a flag may give, and their unit (a flag out of range is a usage error, exit 2, in the
# user's unit: "--minutes -3: not a positive number of minutes"); the config's own checks stay for
# presets, config files and job lines.
RANGES = {"chunks": (1, False, "chunks"), "seconds": (0, True, "seconds"), "minutes": (0, True, "minutes"),
          "save_every": (0, False, "chunks"), "keep_savepoints": (1, False, "save points"),
          "chunk_ms": (0, False, "ms"), "kv_scale": (0, True, "times MG2's KV"), "host_mem": (0, True, "GiB"),
          "pool_slots": (1, False, "chunk slots"), "device_mem": (0, True, "GiB"), "retrieve_k": (0, False, "chunks"),
          "io_deadline": (0, True, "seconds"), "threads": (1, False, "threads"),
          "arena_reproject": (0, False, "world units"), "look_around": (0, False, "chunks"),
          "spill_max": (0, True, "bytes")}


SESSION_OPTIONS: tuple[Option, ...] = (
    _opt("preset", "text", "Preset name (presets/NAME.yaml) or a YAML file; flags override it."),
    _opt("image", "path", "Start image (PNG/JPEG/WebP). Default: the packaged scene.", "image"),
    _opt("trajectory", "path", "Trajectory file (YAML, pose CSV, action CSV, nerfstudio JSON) or LingBot pose "
         "folder. Default: the model's packaged one (the arena model: arena_tour.yaml; MG2: revisit_loop.yaml).", "trajectory"),
    _opt("observe", "path", "Start from an observed clip for its whole chunks, then --trajectory goes on from "
         "where it ended: for the arena model a trajectory file whose path through its world is observed "
         "(rendered truth); for MG2 a recorded video at the model's frame size (its frame 0 is the start image), "
         "its camera path in CLIP.poses.csv beside it.", "observe"),
    _opt("observe_poses", "path", "The --observe video's camera path (pose CSV: frame,x,y,z,yaw,pitch). "
         "Default: CLIP.poses.csv beside the video.", "observe_poses"),
    _opt("repeat", "choice", "How a short trajectory is extended. Default: loop.", "repeat", ("loop", "pingpong")),
    _opt("out", "path", "Output MP4. Default: worldpager-DATE-TIME.mp4 here.", "out"),
    _opt("log", "path", "JSON Lines log. Default: beside the MP4 (.log.jsonl).", "log"),
    _opt("chunks", "int", "Length in chunks (12 video frames each; the first has 9)."),
    _opt("seconds", "float", "Length in seconds of video (16 fps). Default: 30."),
    _opt("minutes", "float", "Length in minutes of video (16 fps)."),
    _opt("checkpoint", "path", "Directory with official weights: MG2's (implies --model mg2-universal) or a "
         "LingBot-World-Fast release folder, one holding lingbot_world_fast/ (implies --model lingbot-fast).",
         "checkpoint"),
    _opt("seeded_weights", "switch", "A full-size MG2 model (mg2-universal, mg2-gta, mg2-templerun) without "
         "--checkpoint: build it with seeded random weights anyway (billions of parameters: minutes on a CPU, and "
         "the video shows the pipeline, not a world model). Without it such a run is refused.", "seeded_weights"),
    _opt("prompt", "text", "LingBot-World-Fast from a release folder: the text the scene follows (UMT5 encoded). "
         "Other models take no text.", "prompt"),
    _opt("model", "choice", "Model. Default: arena (our own world model), or with --checkpoint mg2-universal "
         "(lingbot-fast for a LingBot release folder). tiny/micro: MG2's architecture with seeded weights; synthetic: real KV bytes, no math.", "model",
         MODEL_NAMES),
    _opt("arena_seed", "text", "Arena model: which procedural world (a non-negative integer). Default: 1000017.",
         "arena_seed"),
    _opt("arena_weights", "path", "Arena model: weights file. Default: the packaged ones.", "arena_weights"),
    _opt("arena_reproject", "float", "Arena model: a generated frame takes the pixels of memory frames seen from "
         "within this many world units of its camera, turned to its view (0: off). Default: the weights' own (0.15).",
         "arena_reproject"),
    _opt("arena_reproject_depth", "switch", "Arena model: a generated frame takes the pixels of memory and window "
         "frames from any distance, moved into its view with the depth the model predicted for them (weights "
         "with a depth head: without --arena-weights, the packaged arena-depth.safetensors). Default: off.",
         "arena_reproject_depth"),
    _opt("look_around", "int", "Arena model: the session first observes a look around at its start (a full turn "
         "on the spot, the world's rendered truth, marked in the corner) for this many chunks (0: none, else at least "
         "3), at most all but the last; not with --observe, whose clip is observed instead. Default: 7.", "look_around"),
    _opt("weights", "choice", "How the DiT blocks' large linears (attention, cross-attention, FFN) are stored on the "
         "device: bf16 (the compute dtype), int8 or fp8 (one byte a value, a scale per output channel; fp8 needs "
         "CUDA capability 8.9+). Blocks beyond --device-mem stream from host memory. Default: bf16.", "weights",
         WEIGHT_FORMATS),
    _opt("seed", "int", "Seed of the noise. Default: 0.", "seed"),
    _opt("device", "text", "auto, cpu, cuda or cuda:N. Default: auto.", "device"),
    _opt("save_every", "int", "Save point every N chunks (0: none). Default: about every 30 s of wall time.",
         "save_every"),
    _opt("keep_savepoints", "int", "Newest save points kept (where the run can be resumed or forked). Default: 2.",
         "keep_savepoints"),
    _opt("decode_overlap", "switch", "Decode and mux each chunk on a worker thread while the next one denoises "
         "(same MP4). Default: on for a CPU device (its other core decodes), off on a GPU.", "decode_overlap"),
    _opt("threads", "int", "Intra-op threads of torch on a CPU (the CPU's share of a session; a GPU's work is "
         "unaffected). Default: OMP_NUM_THREADS if set, else 1.", "threads"),
    _opt("positions", "choice", "Position handling past the horizon. Default: rerotate.", "positions",
         POSITION_MODES),
    _opt("chunk_ms", "float", "Synthetic model: device time per chunk. Default: 1200.", "chunk_ms"),
    _opt("kv_scale", "float", "Synthetic model: KV bytes relative to MG2. Default: 1.", "kv_scale"),
    _opt("store", "choice", "Store mode. Default: prefetch.", "memory.store", STORE_MODES),
    _opt("spill", "path", "Directory of the disk tier (O_DIRECT). Default: none.", "memory.spill"),
    _opt("host_mem", "size", "Host memory budget: 24G, 22.5GiB, 512M; a plain number is GiB (the pool is this minus the process and 2 GiB).",
         "memory.host_mem_gib"),
    _opt("pool_slots", "int", "Exact host-pool size in chunks (overrides --host-mem).", "memory.pool_slots"),
    _opt("device_mem", "size", "Device memory budget (the model's weights, the KV and working buffers): 24G, 512M; a plain number is GiB. "
         "Blocks of weights that do not fit stream from host memory.", "memory.device_mem_gib"),
    _opt("kv_bits", "choice", "Stored KV format (16 = unquantised). Default: 4.", "memory.kv_bits",
         ("2", "4", "8", "16")),
    _opt("kv_keys", "choice", "Keys the memory stores: post-rope (rotated at their own positions, as attended) "
         "or pre-rope (before the rotation; rotated when staged, at the positions chosen then: native, extended "
         "or re-placed). MG2 and LingBot models. Default: post-rope.", "memory.keys", KEY_CONVENTIONS),
    _opt("kv_paging", "choice", "Where the context K/V lives while a chunk is computed: chunk (every layer's on "
         "the device) or layer (on the host; the device holds one layer's plus the next one's, copied in per "
         "layer; the same frames, bit for bit). Default: chunk.", "memory.kv_paging", KV_PAGING_MODES),
    _opt("drive_bw", "text", "Emulated drive bandwidth in GB/s: 0.25, or r=0.5,w=0.5.", "memory.drive_bw"),
    _opt("retrieve_k", "int", "Past chunks retrieved per chunk. Default: 3.", "memory.retrieve_k"),
    _opt("retrieve_visit", "choice", "Of past chunks that saw the same view, retrieve the first (the place as "
         "first seen or observed) or the newest (the latest rendition of it). Default: first.",
         "memory.retrieve_visit", ("first", "newest")),
    _opt("sink", "switch", "Keep the first chunk resident as an attention sink.", "memory.sink"),
    _opt("official_sink", "switch", "LingBot models: the official attention sink, its sink_size first latent "
         "frames beside the window, never re-rotated (not with --sink).", "memory.official_sink"),
    _opt("spill_max", "size", "Disk quota of --spill: 500M, 4G, 4GiB or 10% (of the drive's free space at "
         "start); a plain number is bytes. When full, the chunks retrieval is least likely to need are dropped. Default: none.",
         "memory.spill_max"),
    _opt("io_deadline", "float", "Seconds a synchronous read or a write-back may take before the drive counts "
         "as stuck. Default: 30.", "memory.io_deadline_s"),
    _opt("late_prefetch", "choice", "Prefetch mode: a set still loading when its chunk starts is a miss (the "
         "slot keeps its previous chunk; never waits) or is waited for (a stall; the frames then do not depend "
         "on the machine's speed: reproducible runs). Default: miss.", "memory.late_prefetch",
         LATE_PREFETCH_MODES),
    _opt("writeback", "choice", "When stored chunks go to the spill drive: background (when the pool runs low), "
         "through (each at once, in the background) or sync (a baseline: the loop waits). Default: background.",
         "memory.writeback", WRITEBACK_MODES),
    _opt("set", "settings", "Any config key, as a preset sets it: KEY=VALUE (dotted keys, YAML values), "
         "repeatable, e.g. --set calibration.mouse_step=0.2 --set save_interval_s=10."),
)
BY_NAME = {o.name: o for o in SESSION_OPTIONS}
LENGTH_NAMES = ("chunks", "seconds", "minutes")


# ---- batch job lines: a value of each kind, from JSON, CSV or YAML -------------------------------

def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ValueError("not an integer")


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError("not a number") from None


def _switch(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError("not true or false")


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError("not a text value")
    return str(value)


def _path(value: Any) -> str:
    text = _text(value)
    if not text.strip():
        raise ValueError("an empty path")
    return text


def _settings(value: Any) -> tuple[str, ...]:
    """A job's ``set``: a mapping of config keys, or KEY=VALUE text (a list of them, or ``;``-separated)."""
    if isinstance(value, dict):
        return tuple(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}" for k, v in value.items())
    items = value if isinstance(value, list) else str(value).split(";")
    texts = tuple(_text(v).strip() for v in items if str(v).strip())
    if not all("=" in t for t in texts):
        raise ValueError("not KEY=VALUE settings")
    return texts


SIZE_UNITS = {"GiB": GiB, "MiB": MiB, "bytes": 1}


def parse_size_option(option: Option, value: Any) -> Any:
    """A size option's value as its config key holds it: a positive number in the option's ``unit``
    (``--host-mem 24G`` sets ``memory.host_mem_gib`` 24.0); ``--spill-max`` its text, checked (a ``10%``
    share is read against the drive when the session starts). A one-line ``ConfigError`` otherwise."""
    if option.name == "spill_max":
        from engine.memory.quota import check_spill_max_text

        check_spill_max_text(value)
        return value.strip() if isinstance(value, str) else value
    number = size_in(value, option.flag, SIZE_UNITS[option.unit])
    if number <= 0:
        raise ConfigError(f"{option.flag}: {value!r} is not a positive number of {option.unit}")
    return number


def _size_parser(option: Option) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        try:
            return parse_size_option(option, value)
        except ConfigError:
            raise ValueError(f"not a size such as {EXAMPLES} (a plain number is {option.unit})") from None
    return parse


JOB_PARSERS: dict[str, Callable[[Any], Any]] = {
    "path": _path, "int": _integer, "float": _number, "text": _text, "choice": _text, "switch": _switch,
    "settings": _settings}


def job_parsers() -> dict[str, Callable[[Any], Any]]:
    """How a batch job line reads each option (a job cannot choose its device: the batch's workers do)."""
    parsers = {o.name: _size_parser(o) if o.kind == "size" else JOB_PARSERS[o.kind]
               for o in SESSION_OPTIONS if o.name != "device"}
    parsers["kv_bits"] = _integer
    return {"name": _text, **parsers}


# ---- the overlay ----------------------------------------------------------------------------------

def parse_settings(texts) -> dict:
    """``KEY=VALUE`` settings as a nested overlay (values read as YAML: 0.2, true, [1, 2], text)."""
    overlay: dict = {}
    for text in texts or ():
        key, sep, raw = str(text).partition("=")
        key = key.strip()
        if not sep or not key or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in key.split(".")):
            raise ConfigError(f"--set {text!r}: expected KEY=VALUE with a dotted config key, "
                              "e.g. --set memory.retrieve_k=4")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = overlay
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text!r}: {part} is set both as a value and as a section")
        node[leaf] = value
    return overlay


def overlay(values: Mapping[str, Any]) -> dict:
    """The sparse config overlay of the options given in ``values`` (None = not given): what a flag
    sets, then ``--set``'s keys over it. ``--checkpoint`` without ``--model`` or ``--preset`` means the
    official MG2 (mg2-universal), or lingbot-fast for a LingBot-World-Fast release folder."""
    flags: dict = {}
    for option in SESSION_OPTIONS:
        value = values.get(option.name)
        if value is None or option.target is None:
            continue
        if option.name == "kv_bits":
            value = int(value)
        elif option.name == "arena_seed":
            value = parse_arena_seed(value)
        elif option.kind == "size":
            value = parse_size_option(option, value)
        node = flags
        *parents, leaf = option.target.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    if values.get("checkpoint") is not None and values.get("model") is None and values.get("preset") is None:
        flags["model"] = "lingbot-fast" if _lingbot_release(values["checkpoint"]) else "mg2-universal"
    return merged_overlays(flags, parse_settings(values.get("set")))


# The options that name an input: what each may be (a regular file, a directory); checked by kind when the
# options are read, whatever the model, so that a FIFO never waits and a directory is never a start image.
INPUT_KINDS = {"image": (True, False), "trajectory": (True, True), "observe": (True, False),
               "observe_poses": (True, False), "arena_weights": (True, False), "checkpoint": (False, True),
               "preset": (True, False)}


def check_input_options(values: Mapping[str, Any]) -> None:
    """An ``InputError`` for the first input option in ``values`` that names a path of the wrong kind
    (``engine.files.input_files.refuse_wrong_kind``: a FIFO, device, directory or ``/proc`` file where a file is
    read). A preset given by name (no path separator, no suffix) is looked up among the packaged ones."""
    for name, (files, dirs) in INPUT_KINDS.items():
        value = values.get(name)
        if value is None or (name == "preset" and not _looks_like_a_path(str(value))):
            continue
        refuse_wrong_kind(Path(str(value)), "--" + name.replace("_", "-"), files=files, dirs=dirs)


def _looks_like_a_path(text: str) -> bool:
    return "/" in text or os.sep in text or Path(text).suffix != "" or Path(text).exists()


def _lingbot_release(checkpoint: Any) -> bool:
    """A LingBot-World-Fast release folder holds its DiT in ``lingbot_world_fast/`` (MG2's does not)."""
    return (Path(str(checkpoint)).expanduser() / LINGBOT_DIT_FOLDER).is_dir()


def config_keys(cfg: Any = None, prefix: str = "") -> list[str]:
    """Every leaf config key (dotted), what a preset or ``--set`` may set."""
    cfg = SessionConfig() if cfg is None else cfg
    keys = []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        keys += config_keys(value, f"{prefix}{f.name}.") if is_dataclass(value) else [prefix + f.name]
    return keys
