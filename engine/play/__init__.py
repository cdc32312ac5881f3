"""Live play (``worldpager play``, DESIGN §2b): a session whose inputs come from a browser.

``controls`` (held keys and pointer, sampled per video frame), ``source`` (the session's live input
source: pause without a player, just-in-time pacing, the recording), ``frames`` (frames as socket
messages), ``truth`` (``play --truth``: the arena renderer's truth of each frame shown), ``guard`` (what
the server lets in: client messages through the bounded reader, handshakes by Host and Origin),
``server`` (aiohttp: the page, the socket, the token, one driver), ``run`` (the pieces wired around a
``Session``), ``page/`` (the page: plain HTML and JavaScript), ``bench`` (``worldpager bench play``:
scripted input through the same socket). This package imports the session's public API;
the session imports nothing of it.
"""
