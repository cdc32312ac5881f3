"""The play socket's guards, on the real server in this process (a recording stand-in for the session's
source, no model): every client message goes through the bounded reader and anything malformed is a
counted drop that leaves the driver driving; a handshake from another site (its Origin or its Host) is
refused with 403 before the upgrade and counted; the page's own origins are let in; the scripted
player's reader of the server's messages is bounded too. Every wait is bounded (``PATIENCE_S``), none is
timed."""
from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest

from engine.files.bounded_json import JsonInputError
from engine.errors import InputError
from engine.play.client import frame_header, server_message
from engine.play.guard import host_allowed, origin_allowed, parse_message
from engine.play.server import RAW_TEXT, PlayServer
from tests_support import PATIENCE_S

TOKEN = "t0ken"


class Recorder:
    """What the server tells the session's source, recorded."""

    def __init__(self):
        self.dropped, self.finished = 0, False
        self.steering: list[bool] = []
        self.inputs: list[tuple] = []

    def connected(self, steering: bool) -> None:
        self.steering.append(steering)

    def apply(self, keys, mouse, seq) -> None:
        self.inputs.append((keys, mouse, seq))

    def finish(self) -> None:
        self.finished = True

    def delivered(self, chunk, frames, at) -> None:
        pass


@pytest.fixture
def server():
    source = Recorder()
    server = PlayServer(source, {"model": "stand-in", "fps": 16}, "127.0.0.1", 0, TOKEN)
    server.start()
    yield server
    server.close()


def _ws(server, host: str = "127.0.0.1") -> str:
    return f"ws://{host}:{server.port}/ws?token={TOKEN}"


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _input(seq: int, keys=("w",)) -> str:
    return json.dumps({"type": "input", "seq": seq, "keys": list(keys), "mouse": [1, 0]})


async def _drive_through(server, bad: list, origin: str | None = None) -> None:
    """Connect as the driver, send ``bad`` (str: a text message; bytes: a binary one; ("raw", b): a text
    frame of those bytes), then a good input, and wait until the server applied it."""
    async with aiohttp.ClientSession() as s, s.ws_connect(_ws(server), origin=origin) as ws:
        await ws.send_str(_input(1))
        for message in bad:
            if isinstance(message, tuple):
                await ws.send_frame(message[1], aiohttp.WSMsgType.TEXT)
            elif isinstance(message, bytes):
                await ws.send_bytes(message)
            else:
                await ws.send_str(message)
        await ws.send_str(_input(2, ("l",)))
        await asyncio.to_thread(_until, lambda: len(server.source.inputs) == 2, "the input after the bad ones")
        assert server.driver is not None and not ws.closed   # still the driver, still connected


def test_a_deeply_nested_message_is_a_counted_drop_and_the_driver_keeps_driving(server, capsys):
    asyncio.run(_drive_through(server, ["[" * 3000, "{\"type\": " * 1000]))
    assert server.dropped == 2
    assert [seq for _, _, seq in server.source.inputs] == [1, 2]
    _until(lambda: len(server.source.steering) >= 2, "the server to see the socket close")   # on its own thread
    assert server.source.steering == [True, False]          # one driver, who left only when the socket closed
    assert "Traceback" not in capsys.readouterr().err


BAD = ["not json", "[]", "[1, 2]", "{}", '"input"', json.dumps({"type": "fly"}),
       json.dumps({"type": "input", "keys": ["w"]}),                          # no seq
       json.dumps({"type": "input", "seq": 3}),                               # no keys
       json.dumps({"type": "input", "seq": "3", "keys": ["w"]}),              # a number as a string
       json.dumps({"type": "input", "seq": 3, "keys": ["w"], "mouse": ["1", "0"]}),
       json.dumps({"type": "input", "seq": 3.5, "keys": ["w"]}),
       json.dumps({"type": "input", "seq": 3, "keys": {"w": True}}),
       json.dumps({"type": 7}), "x" * 5000]


def test_malformed_and_binary_messages_are_counted_drops(server):
    asyncio.run(_drive_through(server, [*BAD, b"\x00" * 64, b"\xff\xfe"]))
    assert server.dropped == len(BAD) + 2
    assert [seq for _, _, seq in server.source.inputs] == [1, 2]


def test_a_text_message_that_is_not_utf8_is_a_counted_drop(server):
    if not RAW_TEXT:
        pytest.skip("this aiohttp decodes text itself (before 3.13): it closes such a socket, as RFC 6455 says")
    asyncio.run(_drive_through(server, [("raw", b'{"type": "stop", "x": "\xff\xfe"}')]))
    assert server.dropped == 1 and not server.source.finished


@pytest.mark.parametrize("origin, host", [("http://evil.example", None),
                                          ("http://evil.example:{port}", None),
                                          ("null", None),
                                          ("https://127.0.0.1:{port}", None),
                                          ("http://127.0.0.1:1", None),
                                          (None, "evil.example:{port}"),
                                          ("http://evil.example:{port}", "evil.example:{port}")])
def test_a_socket_from_another_site_is_refused_before_the_upgrade(server, caplog, origin, host):
    headers = {} if host is None else {"Host": host.format(port=server.port)}

    async def connect():
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await s.ws_connect(_ws(server), origin=origin and origin.format(port=server.port), headers=headers)
            return refused.value.status

    with caplog.at_level(logging.WARNING, logger="worldpager.play"):
        assert asyncio.run(connect()) == 403
    assert server.refused == 1 and server.driver is None and server.source.steering == []
    lines = [r.getMessage() for r in caplog.records if "refused a socket" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "(1 refused so far" in lines[0], lines


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_pages_own_origin_is_let_in(server, host):
    asyncio.run(_drive_through(server, [], origin=f"http://{host}:{server.port}"))
    assert server.refused == 0 and [seq for _, _, seq in server.source.inputs] == [1, 2]


def test_a_socket_without_origin_is_let_in_on_the_token(server):
    # not a browser (browsers always send Origin): the scripted player, a tool
    asyncio.run(_drive_through(server, [], origin=None))
    assert server.refused == 0 and [seq for _, _, seq in server.source.inputs] == [1, 2]


def test_which_hosts_name_this_server():
    assert host_allowed("localhost:8765", "127.0.0.1", 8765)
    assert not host_allowed("localhost:8766", "127.0.0.1", 8765)
    assert not host_allowed("localhost", "127.0.0.1", 8765)                  # port 80
    assert host_allowed("192.168.1.5:8765", "192.168.1.5", 8765)
    assert not host_allowed("192.168.1.6:8765", "192.168.1.5", 8765)
    assert host_allowed("192.168.1.6:8765", "0.0.0.0", 8765)                 # any address of this machine
    assert not host_allowed("evil.example:8765", "0.0.0.0", 8765)            # a name may point anywhere
    assert not host_allowed("bad:port", "127.0.0.1", 8765)
    assert not host_allowed("127.0.0.1:8765/x", "127.0.0.1", 8765)
    assert not host_allowed("user@127.0.0.1:8765", "127.0.0.1", 8765)
    assert origin_allowed("http://[::1]:8765", "127.0.0.1", 8765)
    assert not origin_allowed("http://user@127.0.0.1:8765", "127.0.0.1", 8765)
    assert not origin_allowed("http://127.0.0.1:8765/x", "127.0.0.1", 8765)


@pytest.mark.parametrize("text", ["[" * 3000, "", "nope", "[]", "{}", '{"type": "fly"}', '{"type": "input"}',
                                  '{"type": "input", "seq": true, "keys": []}',
                                  '{"type": "input", "seq": -1, "keys": []}',
                                  '{"type": "input", "seq": "1", "keys": []}',
                                  '{"type": "input", "seq": 1, "keys": "w"}',
                                  '{"type": "input", "seq": 1, "keys": [1]}',
                                  '{"type": "input", "seq": 1, "keys": [], "mouse": [1]}',
                                  '{"type": "input", "seq": 1, "keys": [], "mouse": ["1", 0]}',
                                  '{"type": "input", "seq": 1, "keys": [], "mouse": [NaN, 0]}',
                                  '{"type": "input", "seq": 1, "keys": [], "mouse": [1e300, 0]}',
                                  '{"type": "input", "seq": 1, "keys": [[[["w"]]]]}',
                                  b'{"type": "stop", "x": "\xff"}',
                                  '{"type": "input", "seq": 1, "keys": ["' + "w" * 5000 + '"]}'])
def test_malformed_client_messages_are_refused_in_one_line(text):
    with pytest.raises(JsonInputError) as refused:
        parse_message(text)
    assert "\n" not in str(refused.value)


def test_a_good_input_message_is_read():
    assert parse_message('{"type": "input", "seq": 7, "keys": ["W", "l"], "mouse": [2, -1.5]}') == \
        {"type": "input", "seq": 7, "keys": ["w", "l"], "mouse": [2.0, -1.5]}
    assert parse_message(b'{"type": "stop", "extra": [1]}') == {"type": "stop"}


@pytest.mark.parametrize("data", ["[" * 3000, "[]", '{"type": 1}', '{"type": "hello", "role": "driver"}',
                                  '{"type": "hello", "role": "driver", "fps": "16"}', b"\xff"])
def test_the_scripted_players_reader_refuses_a_bad_server_message_in_one_line(data):
    with pytest.raises(InputError) as refused:
        server_message(data)
    assert "\n" not in str(refused.value)


def test_the_scripted_players_reader_takes_good_messages_and_refuses_a_short_frame():
    assert server_message('{"type": "hello", "role": "driver", "fps": 16}')["fps"] == 16
    assert server_message('{"type": "chunk", "chunk": 3}')["chunk"] == 3
    assert frame_header(bytes(range(16)) + b"jpeg")[0] == 0x00010203
    with pytest.raises(InputError):
        frame_header(b"\x00" * 15)
