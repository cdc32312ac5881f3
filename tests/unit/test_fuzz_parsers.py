"""Fuzzing every parser: trajectory files, presets and session logs (``worldpager tail``).

Each parser, given random or mutated input, must return a valid result or raise a ``WorldPagerError``
whose message is one line naming the file — never another exception type, never a hang. Inputs are the
packaged files (``trajectories/``, ``presets/``, a session log) with bytes, lines, numbers and value
types mutated, documents generated from each format's own keys, and random bytes.

Hangs: every example runs under a wall-clock guard (``SIGALRM``, far above any parse's time) that stops
it with an exception no parser catches; there is no per-example deadline (a loaded machine made the
5 s one fail on an ordinary preset). Examples are derandomised (the same inputs on every run, no
example database); ``WORLDPAGER_FUZZ_EXAMPLES=N`` runs N random examples per test instead, to look
further. Every crash fuzzing has found is kept as an ``@example`` regression.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.errors import WorldPagerError
from engine.io.trajectory import load_trajectory
from engine.settings.overlay import resolve_session_config
from engine.runtime.telemetry import LogFollower
from tests_support import hang_guard as _hang_guard
from worldpager_cli.main import cli

REPO = Path(__file__).resolve().parents[2]
TRAJECTORIES = sorted((REPO / "trajectories").iterdir())
PRESETS = sorted((REPO / "presets").glob("*.yaml"))
GUARD_S = 120                    # wall clock per example before it counts as a hang
MODES = ("universal", "gta_drive", "templerun")
_RANDOM_EXAMPLES = int(os.environ.get("WORLDPAGER_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int):
    """Settings of one fuzz test: ``examples`` derandomised examples (or the environment's random ones)."""
    return settings(max_examples=_RANDOM_EXAMPLES or examples, derandomize=not _RANDOM_EXAMPLES,
                    database=None, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# ---- the contract ---------------------------------------------------------------------------------

class ParserHang(BaseException):
    """Raised by the guard's alarm; a BaseException, so that no parser's ``except Exception`` hides it."""


def hang_guard(seconds: float = GUARD_S):
    return _hang_guard(seconds, ParserHang, doing="parsing")


def one_line_error(exc: WorldPagerError, path: Path) -> str:
    message = str(exc)
    assert message and "\n" not in message and "\r" not in message, repr(message)
    assert str(path) in message, f"the message does not name {path}: {message}"
    assert len(message) < 1000, f"a {len(message)}-character message"
    return message


_WORK: list[Path] = []   # one directory per module run, its files rewritten per example


@pytest.fixture(scope="module", autouse=True)
def work_dir():
    _WORK.append(Path(tempfile.mkdtemp(prefix="wp-fuzz-")))
    yield
    shutil.rmtree(_WORK.pop(), ignore_errors=True)


def write(name: str, data: bytes) -> Path:
    path = _WORK[-1] / name
    path.write_bytes(data)
    return path


# ---- mutations ------------------------------------------------------------------------------------

NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
VALUE = re.compile(rb"(?<=: )[^\n#]+")
ODD = [b"nan", b".nan", b"NaN", b"inf", b"-.inf", b"1e999", b"-1e999", b"1e308", b"-1e308", b"1e-320", b"0",
       b"-0", b"99999999999999999999999", b"1" + b"0" * 400, b"0x1F", b"", b" ", b"abc", b"[]", b"{}",
       b"[1, 2]", b"[[1, 2], [3]]", b"{a: 1}", b"null", b"~", b"true", b"'5'", b'"5"', b"2001-13-45",
       b"2001-01-01", b"&a 1", b"*a", b"!!binary xx", b"!!python/object:os.system", b"1:2", b"- 1",
       b"\"\\ud800\"", b"[" * 200, b"{" * 200, b"<<: *a", b"!!set {a}", b"? [a]\n: 1", b"\x00", b"\xff\xfe",
       b"-1", b"1e5", b"100000000", b"0.0001", b"1e-9", b"180", b"-180", b"360", b"91", b"[w, a]",
       b"right", b"[up, right]", b"none", b"jump", b"1,2", b",", b"\"", b"'", b"\t"]

odd_token = st.one_of(
    st.sampled_from(ODD),
    st.floats().map(lambda v: repr(v).encode()),
    st.integers(-10 ** 30, 10 ** 30).map(lambda v: str(v).encode()),
    st.integers(-1000, 1000).map(lambda v: str(v).encode()),
    st.binary(max_size=8),
)


@st.composite
def mutated(draw, base: bytes, max_ops: int = 4) -> bytes:
    """``base`` with 1..``max_ops`` mutations of its bytes, lines, numbers or values."""
    data = bytes(base)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(["number", "number", "number", "value", "value", "byte", "insert", "delete",
                                   "line-delete", "line-duplicate", "line-swap", "truncate"]))
        data = _mutate(draw, op, data)
    return data


def _mutate(draw, op: str, data: bytes) -> bytes:
    if op in ("number", "value"):
        spans = [m.span() for m in (NUMBER if op == "number" else VALUE).finditer(data)]
        if spans:
            start, end = draw(st.sampled_from(spans))
            return data[:start] + draw(odd_token) + data[end:]
        op = "byte"
    if op.startswith("line"):
        lines = data.split(b"\n")
        i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
        if op == "line-delete":
            del lines[i]
        elif op == "line-duplicate":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if not data:
        return draw(st.binary(max_size=16))
    i = draw(st.integers(0, len(data) - 1))
    if op == "byte":
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    if op == "insert":
        return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]
    if op == "delete":
        return data[:i] + data[i + draw(st.integers(1, 16)):]
    return data[:i]   # truncate


# ---- trajectories ---------------------------------------------------------------------------------

def check_trajectory(path: Path, mode: str, frames: int, repeat: str) -> None:
    try:
        with hang_guard():
            traj = load_trajectory(path, mode, frames, repeat=repeat)
    except WorldPagerError as exc:
        one_line_error(exc, path)
        return
    assert traj.frames == frames and traj.poses.shape == (frames, 7) and traj.mode == mode
    assert np.isfinite(traj.poses).all(), "non-finite poses"
    assert "\n" not in traj.describe()


NERFSTUDIO = json.dumps({"fps": 8, "camera_path": [
    {"camera_to_world": [[float(np.cos(a)), 0.0, float(np.sin(a)), 0.1 * i],
                         [0.0, 1.0, 0.0, 0.0],
                         [float(-np.sin(a)), 0.0, float(np.cos(a)), 0.0],
                         [0.0, 0.0, 0.0, 1.0]]}
    for i, a in enumerate(np.linspace(0, 1, 6))]}, indent=1).encode()

BASES = [(p.name, p.read_bytes()) for p in TRAJECTORIES] + [("camera_path.json", NERFSTUDIO)]
frames_st = st.integers(1, 120)
mode_st = st.sampled_from(MODES)
repeat_st = st.sampled_from(("loop", "pingpong"))


@st.composite
def mutated_trajectory(draw) -> tuple[str, bytes]:
    name, base = draw(st.sampled_from(BASES))
    if draw(st.integers(0, 9)) == 0:   # sometimes without the suffix: the format is sniffed
        name = Path(name).stem + ".txt"
    return name, draw(mutated(base))


@fuzz(300)
@given(mutated_trajectory(), mode_st, frames_st, repeat_st)
@example(("yaw.yaml", b"segments:\n  - camera: right\n    frames: 2001-13-45\n"), "universal", 8, "loop")
@example(("yaw.yaml", b"segments:\n" + b"[" * 5000), "universal", 8, "loop")
@example(("orbit.csv", b"t,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1e308,0,0,0,0,0\n-1e308,0,0,0,0,0\n"), "universal", 8,
         "loop")
@example(("orbit.csv", b"t,x,y,z,yaw,pitch\n-1e308,0,0,0,0,0\n1e308,0,0,0,0,0\n"), "universal", 8, "loop")
@example(("orbit.csv", b"t,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1e9,0,0,0,0,0\n"), "universal", 8, "loop")
@example(("yaw.yaml", b"segments:\n  - camera: right\n    frames: 100000000000000\n"), "universal", 8, "loop")
@example(("yaw.yaml", b"segments:\n  - camera: right\n    seconds: 1e300\n"), "universal", 8, "loop")
@example(("camera_path.json", NERFSTUDIO.replace(b'"fps": 8', b'"fps": 1e-300')), "universal", 8, "loop")
@example(("camera_path.json", NERFSTUDIO.replace(b'"fps": 8', b'"fps": 1e300')), "universal", 8, "loop")
@example(("camera_path.json", NERFSTUDIO.replace(b'"fps": 8', b'"seconds": 1e-320')), "universal", 8, "loop")
@example(("orbit.csv", b"t,x,y,z,yaw,pitch\n0,1e308,0,0,0,0\n1,-1e308,0,0,0,0\n"), "universal", 8, "loop")
@example(("b1_ws.txt", b"segments:\n  - {keys: [w], seconds: 1" + b"0" * 400 + b"}\n"), "universal", 1, "loop")
def test_mutated_trajectory_files(case, mode, frames, repeat):
    name, data = case
    check_trajectory(write(name, data), mode, frames, repeat)


# Documents made from each format's own keys and columns, with plausible and odd values.
numbers = st.one_of(st.integers(-400, 400), st.floats(-400, 400), st.floats(), st.integers(-10 ** 25, 10 ** 25))
scalars = st.one_of(numbers, st.none(), st.booleans(), st.text(max_size=6),
                    st.sampled_from(["w", "a", "s", "d", "forward", "right", "up", "none", "jump", "turn_left"]))
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
number_or_any = st.one_of(numbers, numbers, numbers, anything)
keyframe = st.fixed_dictionaries({}, optional={
    "t": st.one_of(st.floats(0, 30), number_or_any), "frame": st.one_of(st.integers(0, 400), number_or_any),
    "position": st.one_of(st.lists(numbers, min_size=3, max_size=3), anything),
    "yaw": number_or_any, "pitch": number_or_any, "roll": number_or_any, "zoom": anything})
segment = st.fixed_dictionaries({}, optional={
    "keys": st.one_of(st.lists(st.sampled_from(["w", "s", "a", "d", "back", "left", "none", "jump", "slide",
                                                "turn_right", "left_side", "fly"]), max_size=3), anything),
    "camera": st.one_of(st.sampled_from(["up", "down", "left", "right", ["up", "right"], ["left", "left"]]),
                        anything),
    "mouse": st.one_of(st.lists(st.floats(-1.5, 1.5), min_size=2, max_size=2), anything),
    "frames": st.one_of(st.integers(0, 60), number_or_any), "seconds": st.one_of(st.floats(0, 4), number_or_any)})
yaml_doc = st.fixed_dictionaries({}, optional={
    "keyframes": st.one_of(st.lists(keyframe, max_size=5), anything),
    "segments": st.one_of(st.lists(segment, max_size=4), anything),
    "start": st.one_of(st.fixed_dictionaries({}, optional={"position": st.lists(numbers, min_size=3, max_size=3),
                                                           "yaw": numbers, "pitch": numbers, "roll": numbers}),
                       anything),
    "extra": anything})


@fuzz(200)
@given(yaml_doc, mode_st, frames_st, repeat_st)
def test_random_yaml_trajectories(doc, mode, frames, repeat):
    text = yaml.safe_dump(doc, allow_unicode=True)
    check_trajectory(write("random.yaml", text.encode("utf-8", "surrogatepass")), mode, frames, repeat)


CSV_COLUMNS = ["t", "frame", "x", "y", "z", "yaw", "pitch", "roll", "w", "s", "a", "d", "mouse_pitch", "mouse_yaw",
               "none", "jump", "slide", "turn_left", "turn_right", "left_side", "right_side", "bogus", ""]
cell = st.one_of(st.integers(-2, 2).map(str), st.floats(-200, 200).map(repr), odd_token.map(
    lambda b: b.decode("latin-1").replace(",", "").replace("\n", "")))


@st.composite
def csv_doc(draw) -> bytes:
    header = draw(st.lists(st.sampled_from(CSV_COLUMNS), min_size=1, max_size=9))
    rows = []
    for i in range(draw(st.integers(0, 12))):
        row = [str(i) if c == "frame" and draw(st.booleans()) else
               f"{i * 0.25:g}" if c == "t" and draw(st.booleans()) else draw(cell) for c in header]
        if draw(st.integers(0, 9)) == 0:
            row = row[:-1]
        rows.append(",".join(row))
    return "\n".join([",".join(header), *rows]).encode("latin-1")


@fuzz(200)
@given(csv_doc(), mode_st, frames_st, repeat_st)
def test_random_csv_trajectories(data, mode, frames, repeat):
    check_trajectory(write("random.csv", data), mode, frames, repeat)


matrix = st.one_of(st.lists(numbers, min_size=16, max_size=16), st.lists(st.lists(numbers, min_size=4, max_size=4),
                                                                         min_size=3, max_size=4), anything)
nerfstudio_doc = st.fixed_dictionaries(
    {"camera_path": st.one_of(st.lists(st.one_of(st.fixed_dictionaries({"camera_to_world": matrix}), anything),
                                       max_size=4), anything)},
    optional={"fps": number_or_any, "seconds": number_or_any})


@fuzz(150)
@given(nerfstudio_doc, mode_st, frames_st, repeat_st)
def test_random_nerfstudio_trajectories(doc, mode, frames, repeat):
    check_trajectory(write("random.json", json.dumps(doc).encode()), mode, frames, repeat)


@fuzz(100)
@given(st.binary(max_size=300), st.sampled_from([".yaml", ".csv", ".json", ".txt"]), mode_st)
@example(b"\xff\xfe\x00", ".yaml", "universal")
@example(b"keyframes:\n  - t: 0\n\x00", ".txt", "universal")
def test_random_bytes_as_trajectories(data, suffix, mode):
    check_trajectory(write("random" + suffix, data), mode, 8, "loop")


# ---- presets --------------------------------------------------------------------------------------

def check_preset(path: Path) -> None:
    try:
        with hang_guard():
            cfg = resolve_session_config(path, {})
    except WorldPagerError as exc:
        one_line_error(exc, path)
        return
    assert cfg.chunks >= 1


CONFIG_KEYS = ["model", "checkpoint", "image", "trajectory", "repeat", "out", "log", "chunks", "seed", "device",
               "positions", "rerotate_offset_frames", "chunk_ms", "kv_scale", "arena_seed", "arena_weights",
               "bogus"]
MEMORY_KEYS = ["store", "kv_bits", "retrieve_k", "predictor", "sink", "host_mem_gib", "pool_slots",
               "device_mem_gib", "spill", "drive_bw", "writeback", "bogus"]
CALIBRATION_KEYS = ["degrees_per_mouse_unit", "distance_per_frame", "mouse_dead_zone", "mouse_step",
                    "quantise_mouse", "diagonal_scale", "pitch_limit", "templerun_turn_degrees"]
config_value = st.one_of(scalars, anything, st.sampled_from(
    ["tiny", "synthetic", "mg2-universal", "prefetch", "window", "rerotate", "pingpong", "~nobody-here/x", "~",
     "", "cuda:7", "auto", "\x00", 10 ** 400, -(10 ** 400), float("nan"), float("inf")]))
preset_doc = st.one_of(
    st.dictionaries(st.sampled_from(CONFIG_KEYS), config_value, max_size=5).flatmap(
        lambda top: st.fixed_dictionaries({}, optional={
            "memory": st.one_of(st.dictionaries(st.sampled_from(MEMORY_KEYS), config_value, max_size=4), anything),
            "calibration": st.one_of(st.dictionaries(st.sampled_from(CALIBRATION_KEYS), config_value, max_size=3),
                                     anything)}).map(lambda nested: {**top, **nested})),
    anything)


@fuzz(200)
@given(preset_doc)
@example({"out": "~nobody-here/video.mp4"})
@example({"chunk_ms": 10 ** 400})
@example({"memory": {"host_mem_gib": -(10 ** 400)}})
@example({"trajectory": "\x00"})
def test_random_presets(doc):
    text = yaml.safe_dump(doc, allow_unicode=True)
    check_preset(write("preset.yaml", text.encode("utf-8", "surrogatepass")))


@fuzz(150)
@given(st.sampled_from([p.read_bytes() for p in PRESETS]).flatmap(mutated))
@example(b"model: tiny\nchunks: 2001-13-45\n")
@example(b"model: [" + b"[" * 5000)
@example(b"\xff\xfe")
def test_mutated_presets(data):
    check_preset(write("preset.yaml", data))


# ---- session logs (worldpager tail) ---------------------------------------------------------------

def _base_log() -> bytes:
    config = {"model": "synthetic", "trajectory": "trajectories/yaw.yaml", "out": "/tmp/x.mp4", "chunks": 3,
              "memory": {"store": "prefetch", "pool_slots": 16}}
    header = {"type": "header", "schema": 1, "started": 1.7e9, "pid": 2 ** 22 + 1, "host": "elsewhere",
              "config": config, "model": {"model": "synthetic", "fps": 16}, "device": "cpu",
              "dtype": "float32", "weights": "synthetic (no weights)", "trajectory": "yaw.yaml",
              "notes": [], "allocator": {"applied": True}, "host_baseline_bytes": 612345678}
    chunks = [{"type": "chunk", "chunk": c, "frames": 9 if c == 0 else 12, "frames_total": 9 + 12 * c,
               "wall_ms": 97.0, "compute_ms": 4.0, "memory_ms": 0.5, "store_ms": 90.5, "decode_ms": 1.9,
               "hits": c, "misses": 0, "stale": 0, "staged": [], "memory": [], "stall_ms": 0.0,
               "memory_copy_ms": 0.001, "rerotated": 0, "put_wait_ms": 0.0, "disk_bytes_read": 0,
               "disk_bytes_written": 4317184 * c, "corrupt_blocks": c // 2, "pool_used_bytes": 4317184,
               "pool_free_bytes": 64757760, "writeback_queue": 1, "rss_bytes": 645517312, "device_bytes": 0}
              for c in range(3)]
    summary = {"type": "summary", "status": "done", "wall_s": 0.4, "chunks": 3, "frames": 33,
               "stall_ms": {"p50": 0.0, "p99": 0.0, "max": 0.0}, "wall_ms": {"p50": 97.0, "p99": 97.0},
               "rss_bytes": {"min": 645517312, "max": 645517312}, "retrieval": {"hits": 3, "misses": 0, "stale": 0},
               "store": "prefetch", "positions": "rerotate", "disk": {"bytes_read": 0}, "corrupt_blocks": 1}
    return b"".join(json.dumps(r).encode() + b"\n" for r in [header, *chunks, summary])


BASE_LOG = _base_log()
json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10 ** 400, 10 ** 400), st.floats(),
              st.text(max_size=6), st.sampled_from(["\ud800", "\x1b[2J", "a\nb", "NaN"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@st.composite
def mutated_log(draw) -> bytes:
    """The base log with record fields replaced by other JSON values, then byte/line mutations."""
    records = [json.loads(line) for line in BASE_LOG.splitlines()]
    for _ in range(draw(st.integers(0, 4))):
        record = draw(st.sampled_from(records))
        key = draw(st.sampled_from(sorted(record)))
        record[key] = draw(json_value)
    lines = [json.dumps(r, allow_nan=True).encode("utf-8", "surrogatepass") for r in records]
    data = b"".join(line + b"\n" for line in lines)
    return draw(mutated(data, max_ops=2)) if draw(st.booleans()) else data


def check_tail(path: Path) -> None:
    with hang_guard():
        result = CliRunner().invoke(cli, ["tail", str(path), "--no-follow"])
    assert result.exit_code in (0, 1, 3), (result.exit_code, result.output, result.stderr)
    if result.exit_code == 1:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), result.stderr
        assert str(path) in lines[0], lines[0]


def check_follower(path: Path) -> None:
    """The reader itself (what ``tail`` follows): records or a one-line error, and the writer check."""
    try:
        with hang_guard():
            follower = LogFollower(path)
            records = list(follower.records(follow=False))
            follower.writer_gone()
    except WorldPagerError as exc:
        one_line_error(exc, path)
        return
    assert all(isinstance(r, dict) and isinstance(r["type"], str) for r in records)


@fuzz(300)
@given(mutated_log())
@example(BASE_LOG.replace(b'"wall_ms": 97.0', b'"wall_ms": 5e-324', 1))
@example(BASE_LOG.replace(b'"rss_bytes": 645517312', b'"rss_bytes": 1' + b"0" * 400, 1))
@example(BASE_LOG.replace(b'"stall_ms": 0.0', b'"stall_ms": "slow"', 1))
@example(BASE_LOG.replace(b'"chunk": 1', b'"chunk": {"a": 1}', 1))
@example(BASE_LOG.replace(b'"config": {', b'"config": [{', 1).replace(b'}, "model"', b'}], "model"', 1))
@example(BASE_LOG.replace(b'"model": "synthetic", "trajectory"', b'"model": "\\ud800", "trajectory"', 1))
@example(BASE_LOG.replace(b'"hits": 2, ', b"", 1))
@example(BASE_LOG.replace(b'"pid": 4194305', b'"pid": -5', 1))
@example(BASE_LOG.replace(b'"pid": 4194305', b'"pid": 1' + b"0" * 30, 1))
@example(BASE_LOG + b"[" * 100000 + b"\n")
@example(BASE_LOG[:-40])
def test_mutated_session_logs(data):
    path = write("session.log.jsonl", data)
    check_tail(path)
    check_follower(path)


@fuzz(80)
@given(st.binary(max_size=200))
@example(b"{\xff}\n")
@example(b"{" * 5000 + b"\n")
def test_random_bytes_as_session_logs(data):
    path = write("random.log.jsonl", data)
    check_tail(path)
    check_follower(path)


@pytest.mark.parametrize("name", [p.name for p in TRAJECTORIES])
def test_packaged_files_parse(name):
    """The unmutated bases are valid (so the mutations start from real inputs)."""
    mode = "templerun" if name.startswith("templerun") else "universal"
    assert load_trajectory(REPO / "trajectories" / name, mode, 16).frames == 16


@pytest.mark.parametrize("name", ["orbit.csv", "revisit_loop.yaml", "arena_tour.yaml"])
def test_a_session_shorter_than_its_file_gets_the_same_first_frames(name):
    """Files are made into actions only as far as the session goes: the same actions and poses as
    from the whole file (what the fuzzing's huge spans need to load at once)."""
    path = REPO / "trajectories" / name
    short, whole = load_trajectory(path, "universal", 20), load_trajectory(path, "universal", 2000)
    assert short.source_frames == whole.source_frames > 20
    assert np.array_equal(short.actions.keyboard.numpy(), whole.actions.keyboard[:20].numpy())
    assert np.array_equal(short.actions.mouse.numpy(), whole.actions.mouse[:20].numpy())
    assert np.array_equal(short.poses, whole.poses[:20])


def test_a_file_spanning_years_loads_at_once():
    path = write("years.csv", b"t,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1e9,5,0,0,90,0\n")
    with hang_guard(120):
        traj = load_trajectory(path, "universal", 16)
    assert traj.frames == 16 and traj.source_frames == 16_000_000_000 and "cut" in traj.describe()
    segments = write("long.yaml", b"segments:\n  - keys: w\n    seconds: 1.0e+12\n  - keys: s\n    frames: 5\n")
    with hang_guard(120):
        traj = load_trajectory(segments, "universal", 16)
    assert traj.source_frames == 16 * 10 ** 12 + 5 and traj.actions.keyboard[:, 0].tolist() == [1.0] * 16
