"""``worldpager play`` starting and ending without a player's chunk: without aiohttp it is one line naming
the install command (exit 1, nothing written); a new session that fails (out of memory) or is stopped
before its first chunk is in the MP4 leaves no file behind — no MP4, log, config or recording — so the
same command runs again; an ``--overwrite`` run that fails keeps the earlier run's recording. And the
page's stall count: a chunk stalled when its ``stall_ms`` is above the log's threshold, not for any wait."""
from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

import engine.play.run as play_run
from engine.planner.model import STALL_EPS_S
from engine.play.source import LiveSource
from tests_support import PATIENCE_S

HIDDEN = "import sys; sys.modules['aiohttp'] = None; from worldpager_cli.main import cli; cli()"


def _without_aiohttp(tmp_path, *args):
    return subprocess.run([sys.executable, "-c", HIDDEN, *args], capture_output=True, text=True, cwd=tmp_path,
                          timeout=PATIENCE_S)


@pytest.mark.parametrize("args, command", [(("play", "--out", "x.mp4", "--chunks", "2", "--model", "micro"),
                                            "worldpager play"),
                                           (("play", "--from", "x.mp4"), "worldpager play"),
                                           (("bench", "play", "--spill", "."), "worldpager bench play")])
def test_without_aiohttp_play_is_one_line_naming_the_install(tmp_path, args, command):
    result = _without_aiohttp(tmp_path, *args)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [f"worldpager: error: {command} needs its web server (aiohttp is not "
                                          "installed): pip install 'aiohttp>=3.9' (or the "
                                          "worldpager[play] extra)"], result.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_aiohttp_play_help_still_shows(tmp_path):
    result = _without_aiohttp(tmp_path, "play", "--help")
    assert result.returncode == 0 and "--port" in result.stdout, result.stderr


class _Steered(LiveSource):
    """A player steers from the start (no socket needed): the session takes its inputs at once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._driver = True


def _play(tmp_path, *extra):
    args = ["play", "--port", "0", "--model", "micro", "--out", str(tmp_path / "walk.mp4"), "--chunks", "2",
            "--save-every", "0", *extra]
    from worldpager_cli.main import cli
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _out_of_memory(frames):
    raise MemoryError


def _files(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


def test_a_start_that_runs_out_of_memory_leaves_nothing_and_the_same_command_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(play_run, "LiveSource", _Steered)
    monkeypatch.setattr(play_run, "to_uint8", _out_of_memory)      # the first chunk's frames: out of memory
    failed = _play(tmp_path)
    assert failed.exit_code == 1, failed.output
    errors = [line for line in failed.output.splitlines() if line.startswith("worldpager: error:")]
    assert len(errors) == 1 and "out of memory" in errors[0], failed.output
    assert _files(tmp_path) == []                                  # no recording, no MP4, log or config
    monkeypatch.undo()
    monkeypatch.setattr(play_run, "LiveSource", _Steered)
    again = _play(tmp_path)
    assert again.exit_code == 0, again.output
    assert {"walk.mp4", "walk.log.jsonl", "walk.config.json", "walk.trajectory.yaml"} <= set(_files(tmp_path))


def test_an_overwrite_that_fails_keeps_the_earlier_recording(tmp_path, monkeypatch):
    monkeypatch.setattr(play_run, "LiveSource", _Steered)
    assert _play(tmp_path).exit_code == 0
    before = {name: (tmp_path / name).read_bytes() for name in ("walk.mp4", "walk.trajectory.yaml")}
    monkeypatch.setattr(play_run, "to_uint8", _out_of_memory)
    assert _play(tmp_path, "--overwrite").exit_code == 1
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert not [name for name in _files(tmp_path) if name.startswith(".")]    # no staging file left


class _StoppedAtOnce(_Steered):
    """The page's Stop before any chunk was made."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.finish()


def test_a_session_stopped_before_its_first_chunk_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(play_run, "LiveSource", _StoppedAtOnce)
    stopped = _play(tmp_path)
    assert stopped.exit_code == 0, stopped.output
    assert "before its first chunk: no video, log or recording written" in stopped.output
    assert _files(tmp_path) == []


def test_a_chunk_stalled_only_above_the_logs_threshold():
    assert play_run.STALL_MS == STALL_EPS_S * 1e3 == 0.5
    figures = [play_run.chunk_message({"chunk": 0, "stall_ms": ms}, dropped=3) for ms in (0.0, 0.2, 0.5, 0.7, 40.0)]
    assert [m["stalled"] for m in figures] == [False, False, False, True, True]
    assert figures[0]["type"] == "chunk" and figures[0]["dropped"] == 3 and figures[1]["stall_ms"] == 0.2
    assert play_run.chunk_message({"chunk": 0}, dropped=0)["stalled"] is False


def test_ctrl_c_at_the_printed_url_ends_play_even_when_started_with_sigint_ignored(tmp_path):
    """A background job of a script starts with SIGINT ignored; from the printed URL on, play answers a
    Ctrl-C anyway (before this, one that landed while the model loaded was lost, and the session waited
    for a page that never came)."""
    import signal

    from tests_support import WORLDPAGER

    proc = subprocess.Popen(WORLDPAGER + ["play", "--port", "0", "--out", str(tmp_path / "p.mp4"), "--model", "micro"],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        for line in proc.stderr:
            if "play at http" in line:
                break
        proc.send_signal(signal.SIGINT)        # at once: the model is still loading
        code = proc.wait(180)          # a stop takes seconds; a lost Ctrl-C would wait for ever
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code in (0, 130), code
