"""``worldpager play`` end to end without a browser: the scripted player (the page's protocol through
the real socket) steers a session of the arena model; the session is an ordinary one (its recording
replays bit for bit with ``generate``, ``resume`` and ``fork`` work on it, ``play --from`` continues it),
and the server refuses what it must (no token, a port in use, malformed messages)."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from engine.runtime.telemetry import read_log
from play_support import PlayProcess, mp4_frames, play_script, walk_and_turn
from tests_support import PATIENCE_S, WORLDPAGER


def _chunks(log):
    return [r for r in read_log(log) if r["type"] == "chunk"]


def _run(tmp_path, *args):
    return subprocess.run(WORLDPAGER + list(args), capture_output=True, text=True, cwd=tmp_path, timeout=PATIENCE_S)


def test_played_session_is_recorded_and_replays_bit_for_bit(tmp_path):
    play = PlayProcess(tmp_path, "walk", chunks=12)
    played = play_script(9, play.url, walk_and_turn())
    assert play.finish() == 0, play.stderr
    assert played.role == "driver" and played.end["status"] == "done"
    records = _chunks(play.log)
    summary = read_log(play.log)[-1]
    assert summary["type"] == "summary" and summary["status"] == "done"
    frames = mp4_frames(play.out)
    assert len(frames) == records[-1]["frames_total"] == played.frames
    # it looked around first (observed, marked), then took the player's inputs; the recording holds those
    assert [bool(r.get("observed")) for r in records] == [True] * 3 + [False] * (len(records) - 3)
    assert read_log(play.log)[0]["observed"]["chunks"] == 3
    # the held keys moved the camera: W walks forward (-z), then W + L turns right while walking
    from engine.io.trajectory import load_trajectory
    recorded = load_trajectory(play.recording, "universal", frames=len(frames) - 33)
    assert recorded.actions.keyboard[:, 0].sum() > 0 and recorded.actions.mouse[:, 1].max() > 0
    assert recorded.poses[-1, 2] < -0.5
    replay = _run(tmp_path, "generate", "--trajectory", str(play.recording), "--out", "replay.mp4",
                  "--spill", "replay.spill", "--pool-slots", "4", "--late-prefetch", "wait", "--save-every", "2",
                  "--look-around", "3")
    assert replay.returncode == 0, replay.stderr
    assert (tmp_path / "replay.mp4").read_bytes() == play.out.read_bytes()


# not JSON, not an object, a seq of the wrong type, a NaN, too many keys, too long (but under the wire limit),
# nested 3,000 deep (under 4 KiB: refused before the parser recurses)
BAD_MESSAGES = ("not json", "[]", json.dumps({"type": "input", "seq": "x", "keys": []}),
                json.dumps({"type": "input", "seq": 1, "keys": ["w"], "mouse": [float("nan"), 0]}),
                json.dumps({"type": "input", "seq": 1, "keys": ["w"] * 100}), "x" * 100_000, "[" * 3000)


def test_play_refuses_without_the_token_and_counts_bad_messages(tmp_path):
    play = PlayProcess(tmp_path, "guard", chunks=40)
    base = play.url.split("?")[0]
    for url in (base, base + "?token=wrong"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=60)
        assert refused.value.code == 403
    with urllib.request.urlopen(play.url, timeout=60) as page:
        assert b"worldpager play" in page.read()

    async def misbehave():
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await s.ws_connect(base.replace("http", "ws") + "ws")
            with pytest.raises(aiohttp.WSServerHandshakeError) as foreign:   # the token, from another site
                await s.ws_connect(play.url.replace("http", "ws").replace("/?", "/ws?"), origin="http://evil.example")
            assert foreign.value.status == 403
            async with s.ws_connect(play.url.replace("http", "ws").replace("/?", "/ws?")) as ws:
                sent, counted = False, None
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        continue
                    m = json.loads(msg.data)
                    if m["type"] == "chunk" and not sent:   # the session runs: now the bad messages
                        for bad in BAD_MESSAGES:
                            await ws.send_str(bad)
                        await ws.send_bytes(b"\x00" * 64)
                        sent = True
                    elif m["type"] == "chunk" and counted is None and m["dropped"] == len(BAD_MESSAGES) + 1:
                        counted = m["chunk"]   # the next chunk's inputs were taken after all were counted
                    elif m["type"] == "chunk" and counted is not None and m["chunk"] > counted:
                        await ws.send_str(json.dumps({"type": "stop"}))
                    elif m["type"] == "end":
                        return
    asyncio.run(misbehave())
    assert play.finish() == 0, play.stderr
    assert "Traceback" not in play.stderr
    assert max(r["messages_dropped"] for r in _chunks(play.log)) == len(BAD_MESSAGES) + 1
    refused = [line for line in play.stderr.splitlines() if "refused a socket" in line]
    assert len(refused) == 1 and "Origin 'http://evil.example'" in refused[0], play.stderr
    assert read_log(play.log)[-1]["status"] == "done"


def test_a_port_in_use_is_one_line_and_leaves_nothing(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _run(tmp_path, "play", "--port", str(port), "--out", "x.mp4", "--chunks", "3")
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("worldpager: error:")]
    assert len(errors) == 1 and f"--port {port}" in errors[0] and "in use" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("x.*"))


def test_a_killed_played_session_resumes_along_its_recording_and_forks(tmp_path):
    play = PlayProcess(tmp_path, "kill", chunks=40)
    assert play.url is not None, play.stderr
    script = walk_and_turn()

    async def play_then_kill():
        import engine.play.client as client
        task = asyncio.ensure_future(client.drive(play.url, script, 10 ** 6, timeout_s=PATIENCE_S))
        deadline = time.monotonic() + PATIENCE_S      # bounded: a play that dies fails here, never hangs
        while not play.log.exists() or len(_chunks(play.log)) < 7:
            assert play.proc.poll() is None and time.monotonic() < deadline, play.stderr
            await asyncio.sleep(0.1)
        play.kill()
        try:
            await asyncio.wait_for(task, PATIENCE_S)
        except (aiohttp.ClientError, ConnectionError):
            pass
    asyncio.run(play_then_kill())
    given = read_log(play.log)
    assert given[-1]["type"] != "summary"
    resumed = _run(tmp_path, "resume", str(play.out))
    assert resumed.returncode == 0, resumed.stderr
    records = read_log(play.log)
    assert records[-1]["status"] == "done"
    recorded_chunks = _chunks(play.log)[-1]["chunk"] + 1
    assert len(mp4_frames(play.out)) == _chunks(play.log)[-1]["frames_total"]
    assert recorded_chunks < 40                      # it ended where the recording ends
    fork = _run(tmp_path, "fork", str(play.out), "--trajectory", str(play.recording), "--out", "branch.mp4",
                "--chunks", str(recorded_chunks + 2))
    assert fork.returncode == 0, fork.stderr


def test_play_from_continues_a_finished_session_live(tmp_path):
    play = PlayProcess(tmp_path, "again", chunks=12)
    play_script(5, play.url, walk_and_turn())
    assert play.finish() == 0, play.stderr
    before = _chunks(play.log)[-1]["chunk"] + 1
    again = PlayProcess(tmp_path, "again", "--from", str(play.out))
    assert again.url is not None, again.stderr
    played = play_script(3, again.url, walk_and_turn())
    assert again.finish() == 0, again.stderr
    chunks = _chunks(play.log)
    assert [r["chunk"] for r in chunks] == list(range(len(chunks))) and len(chunks) >= before + 3
    assert any(r["type"] == "resume" for r in read_log(play.log))
    assert len(mp4_frames(play.out)) == chunks[-1]["frames_total"]
    assert played.end["status"] == "done"
