"""The local web server of ``worldpager play``: the page, and one WebSocket per open tab (aiohttp).

Contract. ``PlayServer(source, info, host, port, token)`` binds at ``start()`` (a port in use, or an
address this machine does not have, is one ``OutputError`` line) and serves, on its own thread and event
loop (the session runs on the caller's):

* ``/?token=T`` — the page (``engine/play/page/``, plain HTML and JavaScript, nothing fetched from
  elsewhere); ``/static/NAME`` its script and style. Without the token, or with another: 403.
* ``/ws?token=T`` — the socket: refused (403, before the upgrade) without the token, or from another
  site (``engine.play.guard``: a ``Host`` that is not this server, an ``Origin`` that is not this page's;
  a handshake without ``Origin``, not a browser's, is let in on the token alone). Each such refusal is
  counted (``refused``) and said in one warning line (the first ``REFUSALS_SAID``). The first client
  when nobody steers is the **driver**: its input messages steer the session (``LiveSource.apply``);
  every other client **watches** — it gets the same frames and figures, its inputs are refused (counted)
  — and may take the controls (``{"type": "drive"}``) when the driver has left. The driver leaving (a
  closed tab) pauses the session.
* Client messages are JSON text (``engine.play.guard.parse_message``): ``input`` (``seq``, ``keys``
  held, ``mouse`` = [dx, dy] pixels), ``stop``, ``drive``. Anything else — binary, not UTF-8, too long,
  too deep, not JSON, not an object, a missing field, a field of the wrong kind — is counted
  (``dropped``) and dropped; it never ends that client's socket, the session or the server (a message
  over aiohttp's ``MAX_WIRE`` is the one that closes its socket).
* To the clients: ``hello`` (role, model, frame rate, key map, whether frames come with their ``truth``),
  ``state`` (who steers, paused or not), ``chunk`` (the chunk's log figures), ``end`` (the summary); frames
  as binary messages (``engine.play.frames``; with ``play --truth`` each frame's truth message follows it),
  sent to every client in order. When the driver's copy of a chunk is out, ``LiveSource.delivered`` is
  told how many video frames it held (the pacing's clock; truth messages are not frames of the video).

``publish_*`` are thread-safe (called from the session's thread). ``close()`` says goodbye to the clients
and stops the thread.
"""
from __future__ import annotations

import asyncio
import errno
import hmac
import inspect
import json
import logging
import threading
import time
from pathlib import Path

from aiohttp import WSMsgType, web

from engine.files.bounded_json import JsonInputError
from engine.errors import OutputError
from engine.play.guard import MAX_MESSAGE, host_allowed, origin_allowed, parse_message, said

PAGE_DIR = Path(__file__).with_name("page")
MAX_WIRE = 1 << 20           # a message longer than this closes that client's socket (aiohttp's limit)
WATCHER_QUEUE = 256          # messages a slow watcher may lag behind before its frames are skipped
REFUSALS_SAID = 5            # refused handshakes said on stderr; the rest are only counted
# Text messages as bytes (aiohttp >= 3.13), so that one that is not UTF-8 is a counted drop here instead of
# aiohttp closing the socket; an older aiohttp closes it (RFC 6455), counted too.
RAW_TEXT = {"decode_text": False} if "decode_text" in inspect.signature(web.WebSocketResponse).parameters else {}
log = logging.getLogger("worldpager.play")


class _Client:
    def __init__(self, ws: web.WebSocketResponse, number: int):
        self.ws, self.number = ws, number
        self.queue: asyncio.Queue = asyncio.Queue()


class PlayServer:
    def __init__(self, source, info: dict, host: str, port: int, token: str, clock=time.monotonic):
        self.source, self.info, self.host, self.port, self.token = source, info, host, port, token
        self.clock = clock
        self.clients: list[_Client] = []
        self.driver: _Client | None = None
        self._numbers = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ended: dict | None = None
        self.refused = 0             # socket handshakes refused for their Host or Origin

    @property
    def dropped(self) -> int:
        """Client messages dropped: malformed, oversized, binary, or a watcher's inputs."""
        return self.source.dropped

    @dropped.setter
    def dropped(self, value: int) -> None:
        self.source.dropped = value

    # ---- start and stop -------------------------------------------------------------------------

    def start(self) -> str:
        """Bind and serve; returns the page's URL (with the token)."""
        ready, failure = threading.Event(), []
        self._thread = threading.Thread(target=self._serve, args=(ready, failure), name="wp-play-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    def _serve(self, ready: threading.Event, failure: list) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._bind())
        except BaseException as exc:   # reported to the caller's thread, which raises it
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(self._runner.cleanup())
        loop.close()

    async def _bind(self) -> None:
        app = web.Application(client_max_size=MAX_MESSAGE)
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._socket)
        app.router.add_static("/static/", PAGE_DIR, show_index=False)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=False)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                raise OutputError(f"--port {self.port}: the port is in use on {self.host} (another worldpager "
                                  "play?); give another --port, or --port 0 for any free one") from None
            raise OutputError(f"cannot serve on {self.host}:{self.port}: {exc.strerror or exc}; check --host "
                              "and --port") from None
        self.port = self._runner.addresses[0][1]   # --port 0: the one the system gave

    def close(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._goodbye(), loop)
        try:
            future.result(timeout=5)
        except (TimeoutError, RuntimeError, OSError):   # a client that does not answer: closed anyway
            pass
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=10)
        self._thread = None

    async def _goodbye(self) -> None:
        for client in list(self.clients):
            client.queue.put_nowait(None)
        await asyncio.sleep(0.2)           # let the senders flush the last frames and the summary
        for client in list(self.clients):
            await client.ws.close()

    # ---- what the session publishes (any thread) -------------------------------------------------

    def publish_frames(self, chunk: int, messages: list[bytes], frames: int | None = None) -> None:
        """A chunk's binary messages; ``frames``: the video frames among them (default: all of them)."""
        self._soon(self._enqueue, ("frames", chunk, messages, len(messages) if frames is None else frames))

    def publish(self, message: dict) -> None:
        if message.get("type") == "end":
            self._ended = message
        self._soon(self._enqueue, ("json", json.dumps(message, separators=(",", ":"))))

    def _soon(self, fn, *args) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(fn, *args)

    def _enqueue(self, item) -> None:
        for client in self.clients:
            if client is not self.driver and client.queue.qsize() > WATCHER_QUEUE and item[0] == "frames":
                continue                  # a watcher that cannot keep up skips frames, never the driver
            client.queue.put_nowait(item)

    # ---- HTTP -----------------------------------------------------------------------------------

    def _token_ok(self, request: web.Request) -> bool:
        given = request.query.get("token", "")
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def _page(self, request: web.Request) -> web.StreamResponse:
        if not self._token_ok(request):
            return web.Response(status=403, text="worldpager play: this page needs the URL with its token, "
                                                 "as worldpager play printed it\n")
        return web.FileResponse(PAGE_DIR / "index.html", headers={"Cache-Control": "no-store"})

    def _foreign(self, request: web.Request) -> str | None:
        """Why this handshake is not from this page (its Host or its Origin), or None."""
        host = request.headers.get("Host")
        if host is None or not host_allowed(host, self.host, self.port):
            return f"Host {said(host)} is not this server"
        origin = request.headers.get("Origin")
        if origin is not None and not origin_allowed(origin, self.host, self.port):
            return f"Origin {said(origin)} is not this page's"
        return None

    def _refuse(self, why: str) -> web.Response:
        self.refused += 1
        if self.refused <= REFUSALS_SAID:
            more = "; later ones are only counted" if self.refused == REFUSALS_SAID else ""
            log.warning("worldpager: warning: play refused a socket (403): its %s (%d refused so far%s)",
                        why, self.refused, more)
        self._state()
        return web.Response(status=403, text=f"worldpager play: refused: the socket's {why}\n")

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if not self._token_ok(request):
            return web.Response(status=403, text="worldpager play: refused: no or wrong token\n")
        foreign = self._foreign(request)
        if foreign is not None:
            return self._refuse(foreign)
        ws = web.WebSocketResponse(max_msg_size=MAX_WIRE, heartbeat=30, **RAW_TEXT)
        await ws.prepare(request)
        self._numbers += 1
        client = _Client(ws, self._numbers)
        self.clients.append(client)
        sender = asyncio.ensure_future(self._send(client))
        try:
            if self.driver is None and not self.source.finished:
                self._set_driver(client)
            await self._hello(client)
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._receive(client, msg.data)
                elif msg.type == WSMsgType.BINARY:
                    self.dropped += 1
                elif msg.type == WSMsgType.ERROR:   # e.g. a message over MAX_WIRE: that socket ends
                    self.dropped += 1
                    break
        finally:
            self.clients.remove(client)
            client.queue.put_nowait(None)
            if client is self.driver:
                self._set_driver(None)
            await sender
        return ws

    async def _hello(self, client: _Client) -> None:
        role = "driver" if client is self.driver else "watcher"
        client.queue.put_nowait(("json", json.dumps({"type": "hello", "role": role, **self.info})))
        if self._ended is not None:
            client.queue.put_nowait(("json", json.dumps(self._ended)))
        self._state()

    def _set_driver(self, client: _Client | None) -> None:
        self.driver = client
        self.source.connected(client is not None)
        self._state()

    def _state(self) -> None:
        for client in self.clients:
            message = {"type": "state", "role": "driver" if client is self.driver else "watcher",
                       "driver": self.driver is not None, "paused": self.driver is None,
                       "dropped": self.dropped, "refused": self.refused}
            client.queue.put_nowait(("json", json.dumps(message)))

    # ---- client messages ------------------------------------------------------------------------

    def _receive(self, client: _Client, data: str | bytes) -> None:
        try:
            message = parse_message(data)
        except JsonInputError:
            self.dropped += 1
            return
        kind = message["type"]
        if kind == "drive":
            if self.driver is None and not self.source.finished:
                self._set_driver(client)
            return
        if client is not self.driver:      # watchers do not steer
            self.dropped += 1
            return
        if kind == "input":
            self.source.apply(message["keys"], message["mouse"], message["seq"])
        elif kind == "stop":
            self.source.finish()

    async def _send(self, client: _Client) -> None:
        while True:
            item = await client.queue.get()
            if item is None or client.ws.closed:
                return
            try:
                if item[0] == "json":
                    await client.ws.send_str(item[1])
                    continue
                _, chunk, messages, frames = item
                for message in messages:
                    await client.ws.send_bytes(message)
                if client is self.driver:
                    self.source.delivered(chunk, frames, self.clock())
            except (ConnectionError, RuntimeError):   # the tab went away mid-send: its handler ends it
                return
