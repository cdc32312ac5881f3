"""A scripted player: the page's protocol from Python (aiohttp's client), for ``bench play`` and the tests.

Contract. ``human_script(seed, seconds)`` is a human-like input schedule — holds of W, turns with J / L,
look-backs (turn around, walk, turn back), walks while turning, idle moments — with random durations and
gaps (seeded). ``drive(url, script, chunks)`` connects to a running ``worldpager play`` like a tab does,
sends the script's inputs at their times (relative to the socket's hello), receives frames and figures,
and sends ``stop`` once ``chunks`` chunk records have come; it returns what a viewer would have seen.
Frames are "shown" as the page shows them: at the video's frame rate, never before they arrive. The
key-to-frame latency of an input is from its sending to the showing of the first frame made with it.
A frame's truth (``play --truth``) is not a frame shown: it is kept apart (``Played.truths``, by video
frame). The server's messages are read through the one bounded reader (``server_message``: JSON text, an object
with a ``type``; a frame at least its header): anything else is one ``InputError`` line, not a traceback.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

from engine.files.bounded_json import NUMBER, STRING, expect_object, parse_json
from engine.errors import InputError
from engine.play.frames import HEADER, is_truth, parse_header

MAX_SERVER_MESSAGE = 1 << 20     # bytes of one JSON message from the server (its summary is the largest)
MAX_SERVER_DEPTH = 8


@dataclass
class Step:
    at: float                      # seconds after the hello
    keys: tuple[str, ...]
    mouse: tuple[float, float] = (0.0, 0.0)


@dataclass
class Played:
    frames: int = 0
    chunks: list[dict] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    underruns: int = 0
    shown_s: float = 0.0           # from the first frame shown to the last
    end: dict | None = None
    role: str | None = None
    last_seq_seen: int = 0
    truths: dict[int, bytes] = field(default_factory=dict)   # video frame -> its truth's JPEG (play --truth)


def human_script(seed: int, seconds: float) -> list[Step]:
    """Holds, turns, look-backs and pauses with random timing (see the module docstring)."""
    rng, t, steps = random.Random(seed), 0.5, []
    while t < seconds:
        kind = rng.choices(["walk", "turn", "walk-turn", "look-back", "idle"], [4, 3, 2, 1, 1])[0]
        hold = rng.uniform(0.3, 2.0)
        if kind == "walk":
            steps.append(Step(t, ("w",)))
        elif kind == "turn":
            steps.append(Step(t, (rng.choice("jl"),)))
        elif kind == "walk-turn":
            steps.append(Step(t, ("w", rng.choice("jl"))))
        elif kind == "look-back":
            side = rng.choice("jl")
            back = "j" if side == "l" else "l"
            steps += [Step(t, (side,)), Step(t + 1.5, ()), Step(t + 1.7, (back,))]
            hold = 3.2
        t += hold
        steps.append(Step(t, ()))                       # release
        t += rng.uniform(0.05, 0.6)                     # a human's gap before the next press
    return steps


def server_message(data: str | bytes) -> dict:
    """A JSON message from the server, checked: an object with a string ``type`` (``hello`` with its role
    and frame rate)."""
    what = "a message from worldpager play"
    message = expect_object(parse_json(data, what, MAX_SERVER_MESSAGE, MAX_SERVER_DEPTH), what,
                            required={"type": STRING})
    if message["type"] == "hello":
        expect_object(message, "the hello of worldpager play", required={"role": STRING, "fps": NUMBER})
    return message


def frame_header_checked(data: bytes) -> bytes:
    """``data``, a frame message from the server at least its header long (else one ``InputError`` line)."""
    if len(data) < HEADER.size:
        raise InputError(f"a frame message from worldpager play of {len(data)} bytes, shorter than its header")
    return data


def frame_header(data: bytes) -> tuple[int, int, int, int]:
    """The header of a frame message from the server (``engine.play.frames``)."""
    return parse_header(frame_header_checked(data))


async def drive(url: str, script: list[Step], chunks: int, timeout_s: float = 600.0) -> Played:
    import aiohttp

    ws_url = url.replace("http://", "ws://", 1).replace("/?token=", "/ws?token=", 1)
    played, sent_at = Played(), {}
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=1 << 24) as ws:
        start, fps, due = None, 16.0, 0.0

        async def steer() -> None:
            for seq, step in enumerate(script, 1):
                await asyncio.sleep(max(0.0, start + step.at - time.monotonic()))
                sent_at[seq] = time.monotonic()
                await ws.send_str(json.dumps({"type": "input", "seq": seq, "keys": list(step.keys),
                                              "mouse": list(step.mouse)}))

        steering, first_shown = None, None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = await ws.receive(timeout=max(1.0, deadline - time.monotonic()))
            if msg.type == aiohttp.WSMsgType.BINARY and is_truth(frame_header_checked(msg.data)):
                played.truths[frame_header(msg.data)[1]] = msg.data[HEADER.size:]
                continue
            if msg.type == aiohttp.WSMsgType.BINARY:
                now = time.monotonic()
                late = now - due > 1.0 / fps
                if played.frames and late:
                    played.underruns += 1
                due = now if (not played.frames or late) else due + 1.0 / fps
                first_shown = first_shown if first_shown is not None else due
                played.shown_s = due - first_shown
                played.frames += 1
                seq = frame_header(msg.data)[2]
                for s in [s for s in sent_at if s <= seq]:
                    played.latencies_ms.append((due - sent_at.pop(s)) * 1e3)
                played.last_seq_seen = max(played.last_seq_seen, seq)
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            m = server_message(msg.data)
            if m["type"] == "hello":
                played.role, fps = m["role"], float(m["fps"])
                start = time.monotonic()
                steering = asyncio.ensure_future(steer())
            elif m["type"] == "chunk":
                played.chunks.append(m)
                if len(played.chunks) == chunks:
                    await ws.send_str(json.dumps({"type": "stop"}))
            elif m["type"] == "end":
                played.end = m
                break
        if steering is not None:
            steering.cancel()
    return played
