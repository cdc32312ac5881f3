"""What the play server lets in: client messages, and socket handshakes by their ``Host`` and ``Origin`` (no aiohttp).

Contract.

* ``parse_message(data)`` — one client message (``str`` or the ``bytes`` of a text frame) read through the
  one bounded reader (``engine.files.bounded_json``): at most ``MAX_MESSAGE`` bytes, ``MAX_DEPTH`` levels deep,
  UTF-8, a JSON object whose ``type`` is one of ``MESSAGE_TYPES``; an ``input`` has an integer ``seq``
  in [0, 2**53), a list of at most ``MAX_KEYS`` key names (strings of at most 16 characters) and an
  optional ``mouse`` of two finite numbers under 1e6 in size. Returns the message as the server uses it
  (keys in lower case, the mouse as floats, no other field); anything else is a one-line
  ``JsonInputError`` (the server counts it as a drop).
* ``host_allowed(host, bound, port)`` — a ``Host`` header names this server: ``127.0.0.1``,
  ``localhost``, ``::1`` or the bound host, with the served port. Bound to every address (``0.0.0.0``,
  ``::``), also any IP address (one of this machine's, as it reached us) or the machine's host name, but
  no other name: a name can be pointed at this machine by another site (DNS rebinding).
* ``origin_allowed(origin, bound, port)`` — an ``Origin`` header is this page's own origin: ``http://``
  and a host ``host_allowed`` takes, nothing else (no path, no user). Browsers send ``Origin`` on every
  WebSocket handshake, so a page of another site is refused by it even when it has the token.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from engine.files.bounded_json import INTEGER, LIST, STRING, JsonInputError, expect_finite, expect_kind, expect_object, parse_json

MAX_MESSAGE = 4096           # bytes of one client message; longer ones are dropped
MAX_DEPTH = 4                # nesting of one client message (an input message is 2 deep)
MAX_KEYS = 16
MESSAGE_TYPES = ("input", "stop", "drive")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("", "0.0.0.0", "::")


def parse_message(data: str | bytes) -> dict:
    """A client message, checked (see the module docstring); a ``JsonInputError`` for anything else."""
    message = expect_object(parse_json(data, "a client message", MAX_MESSAGE, MAX_DEPTH), "a client message",
                            required={"type": STRING})
    kind = message["type"]
    if kind not in MESSAGE_TYPES:
        raise JsonInputError(f"a client message of type {kind[:20]!r}, not one of {', '.join(MESSAGE_TYPES)}")
    if kind != "input":
        return {"type": kind}
    expect_object(message, "an input message", required={"seq": INTEGER, "keys": LIST}, optional={"mouse": LIST})
    seq, keys, mouse = message["seq"], message["keys"], message.get("mouse", [0, 0])
    if not 0 <= seq < 2 ** 53:
        raise JsonInputError("an input message's seq is out of range")
    if len(keys) > MAX_KEYS:
        raise JsonInputError(f"an input message holds {len(keys)} keys, more than {MAX_KEYS}")
    for key in keys:
        if len(expect_kind(key, "an input message's key", STRING)) > 16:
            raise JsonInputError("an input message's key is longer than 16 characters")
    if len(mouse) != 2:
        raise JsonInputError("an input message's mouse is not [dx, dy]")
    moved = [expect_finite(v, "an input message's mouse movement") for v in mouse]
    if not all(abs(v) < 1e6 for v in moved):
        raise JsonInputError("an input message's mouse movement is out of range")
    return {"type": "input", "seq": seq, "keys": [k.lower() for k in keys], "mouse": moved}


def said(value: str | None) -> str:
    """A header's value as a message quotes it (at most 100 characters; none: ``(none)``)."""
    return "(none)" if value is None else repr(value[:100])


def _hostname_allowed(name: str, bound: str) -> bool:
    """``name`` (lower case, no brackets) names this server as it was bound."""
    if name in LOOPBACK_NAMES or name == bound.strip("[]").lower():
        return True
    if bound not in WILDCARDS:
        return False
    try:                              # every address of this machine: an address, not a name (a name may be
        ipaddress.ip_address(name)    # another site's, pointed here), or this machine's own name
        return True
    except ValueError:
        return name == socket.gethostname().lower()


def host_allowed(host: str, bound: str, port: int) -> bool:
    """A ``Host`` header (``name:port``) that names this server: a loopback name or the bound host, the served port."""
    try:
        parts = urlsplit(f"//{host}")
        given = parts.port if parts.port is not None else 80
    except ValueError:
        return False
    if parts.path or parts.query or parts.fragment or parts.username is not None or parts.hostname is None:
        return False
    return given == port and _hostname_allowed(parts.hostname, bound)


def origin_allowed(origin: str, bound: str, port: int) -> bool:
    """An ``Origin`` header that is this page's own origin: ``http://`` and a host ``host_allowed`` takes."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme == "http" and not (parts.path or parts.query or parts.fragment) \
        and host_allowed(parts.netloc, bound, port)
