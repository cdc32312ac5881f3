"""Helpers shared by several test modules (importable because tests/ is on sys.path via conftest)."""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from engine.config import model_config
from engine.model.load import MG2Models, load_models
from engine.runtime.telemetry import read_log

TINY = model_config("tiny")
WORLDPAGER = [sys.executable, "-c", "from worldpager_cli.main import cli; cli()"]


def tiny_reference_models() -> MG2Models:
    """The built-in tiny model with its seeded weights, on the CPU in float32."""
    return load_models(TINY, None, torch.device("cpu"), torch.float32)


def write_checkpoint(root, models: MG2Models, dit_edit=None, clip_extra=True) -> None:
    """Write ``models`` under ``root`` in the official release's layout and file formats."""
    dit_state = {"model." + k: v.contiguous() for k, v in models.dit.state_dict().items()}
    if dit_edit:
        dit_edit(dit_state)
    (root / TINY.dit_file).parent.mkdir(parents=True, exist_ok=True)
    save_file(dit_state, str(root / TINY.dit_file))
    torch.save(models.vae.state_dict(), root / TINY.vae_file)
    clip_state = {"visual." + k: v for k, v in models.clip.state_dict().items()}
    if clip_extra:  # the official file also holds the text tower and unused vision keys
        clip_state["textual.token_embedding.weight"] = torch.zeros(4, 8)
        clip_state["log_scale"] = torch.zeros(())
        clip_state["visual.post_norm.weight"] = torch.ones(TINY.clip.width)
    torch.save(clip_state, root / TINY.clip_file)


# How long a test waits for something that must happen (a process to start, a log line, a save point)
# before it calls it a hang: far above any run's time on a loaded machine, so that no outcome depends on
# the machine's speed; a real hang still ends the test, with the reason.
PATIENCE_S = 600.0


def start_generate(tmp_path: Path, name: str, chunks: int, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
    """A ``worldpager generate`` subprocess (micro model) and its MP4 and log paths."""
    out = tmp_path / f"{name}.mp4"
    proc = subprocess.Popen(WORLDPAGER + ["generate", "--model", "micro", "--chunks", str(chunks), "--out", str(out),
                                          *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    return proc, out, tmp_path / f"{name}.log.jsonl"


def wait_for_chunks(log: Path, n: int, proc: subprocess.Popen, timeout: float = PATIENCE_S) -> None:
    """Wait until ``log`` holds ``n`` chunk records (the process must keep running meanwhile)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and sum(1 for r in read_log(log) if r["type"] == "chunk") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("session did not start")


@contextlib.contextmanager
def hang_guard(seconds: float, error: type[BaseException] = TimeoutError, doing: str = "running"):
    """Raise ``error`` in the main thread if the block is still running after ``seconds`` (SIGALRM)."""
    def fire(signum, frame):
        raise error(f"still {doing} after {seconds} s")
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli_inprocess(args, env: dict | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
    """``worldpager ARGS`` run in this process through click's test runner: (exit code, stdout, stderr),
    the two streams apart, as a process's would be. For quick commands whose claim is their exit code,
    their text or their files (help, option values click or the command refuses, ``plan``, ``tail``,
    small micro-model runs): each saves a process that imports torch (about 1.5 s of CPU) before it does
    anything. ``env`` is set in ``os.environ`` for the call only and ``cwd`` is the directory the call runs
    in (both restored after). Keep a real process where the process itself is the claim: signals, kills,
    the entry point's own stderr and exit status for a failure class, anything that changes
    process-wide state."""
    from click.testing import CliRunner

    from worldpager_cli.main import cli

    with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def sigkill_when_ready(code: str, *args: str, cwd: Path, env: dict) -> int:
    """Run ``python -c code args`` until it prints ``ready``, SIGKILL it, and return its exit status."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        line = child.stdout.readline()
        assert line.strip() == "ready", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    return child.returncode


def one_line_error(result, *needles: str, code: int = 1) -> str:
    """A click runner result that is one ``worldpager: error:`` line, exit ``code`` (1: bad input, 2: a
    usage error click caught), holding every needle."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def inline_decode(cfg):
    """``cfg`` decoding in the loop: each chunk is logged (``on_chunk``) before the next one is made, so a
    stop asked for from chunk c's record lands before chunk c + 1. With the decode worker (a CPU's
    default) the record comes a chunk later, after c + 1 was made; the MP4 is the same bytes either way
    (``tests/unit/test_session_decode.py``), and a run resumed with the worker goes on from either."""
    import dataclasses

    return dataclasses.replace(cfg, decode_overlap=False)


def resumed_equals_uninterrupted(whole, cut, stop_after: int):
    """Run ``whole``; run ``cut`` (the same session with save points and its own outputs), stopped after
    chunk ``stop_after``; resume it from its newest save point; its MP4 must be byte-identical to the
    uninterrupted one. Returns the save point it resumed from."""
    from engine.session.loop import Session
    from engine.session.resume import resume_point

    assert Session(whole).run().status == "done"
    session = Session(inline_decode(cut), on_chunk=lambda r: r["chunk"] == stop_after and session.request_stop())
    assert session.run().status == "interrupted"
    again, sp, _ = resume_point(cut.out)
    assert Session(again, resume_from=sp).run().status == "done"
    assert cut.out.read_bytes() == whole.out.read_bytes()
    return sp


@contextlib.contextmanager
def nearly_full_drive(tmp_path: Path, free_bytes: int, root_reserve_too: bool = False):
    """A loop-mounted 8 MiB ext4 under ``tmp_path`` with a filler file leaving ``free_bytes`` free (with
    ``root_reserve_too``, of the blocks root may use as well: the output side runs as root); yields
    (mount, filler) and unmounts after. Skips without root, mkfs.ext4 or loop mounts."""
    import os
    import shutil

    import pytest

    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("needs root and mkfs.ext4 for a loop-mounted file system")
    image, mount = tmp_path / "drive.img", tmp_path / "drive"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 * 2 ** 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot loop-mount here")
    try:
        filler = mount / "filler"
        with open(filler, "wb") as f:
            st = os.statvfs(mount)
            free = st.f_bfree * st.f_frsize if root_reserve_too else shutil.disk_usage(mount).free
            f.write(b"\0" * (free - free_bytes))
            f.flush()
            os.fsync(f.fileno())
        yield mount, filler
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def run_capturing_frames(cfg):
    """Run the session ``cfg`` and keep every decoded chunk's frames as the loop hands them to the MP4
    writer (a chunk's record in the log says nothing of its pixels). Returns (frames per chunk, result)."""
    from engine.session.loop import Session

    session = Session(cfg)
    frames: list[torch.Tensor] = []
    write = session.writer.write

    def capture(video: torch.Tensor) -> None:
        frames.append(video.clone())
        write(video)
    session.writer.write = capture
    return frames, session.run()
